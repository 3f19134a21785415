"""Sub-quadratic pair sums for long queries: Chebyshev interpolation on boxes of the score axis.

Same notation as ``_pairs`` (one query sorted by score, descending; ``x_r = alpha (s_(r) -
s_(0))`` non-increasing). Every pair sum the fast kernels need is a one-dimensional kernel sum

    F_c(k) = sum_j K(x_j - x_k) c_j,   K in {sig, w = sig', sig'' = w (1 - 2 sig), w^2}

with per-document weights ``c`` (1, ``v``, ``e``, an optional ``va``, and class indicators
for the bound below):

    pos^_k = 1 + F_1[sig](k) - sig(0)          g_k  = F_v[w](k) - v_k F_1[w](k)
    aw_k   = F_1[w](k) - w(0)                  aa_k = F_v[sig''](k) - v_k F_1[sig''](k)
    ab_k   = F_e[w^2](k) - e_k w(0)^2          gva_k = F_va[w](k) - va_k F_1[w](k)

(``aa`` and ``ab`` only for the Hessian modes that need the exact diagonal; ``gva`` only
where the caller asks: ApproxAP's bound, ``va = |v|``.)

(the self terms j = k removed; the grid removes its own interpolated value of each, so that
their interpolation error cancels: it matters where a document has no near neighbours and the
true sums are far smaller than the self term). That value, ``L(t)^T K L(t)`` for a document
at local coordinate ``t`` of its box, is a polynomial of degree ``2 _P - 2`` in ``t``: its
Chebyshev coefficients are made once with the tables, and each document's value is a
``_Q``-term Clenshaw recurrence, for all documents in one vectorised loop.

Method (as FIt-SNE does for its kernels, with direct box-to-box products instead of an FFT,
since the window keeps every box's partners within ``2 D + 1`` boxes). The axis ``u = -x`` is
cut into boxes of width ``_H`` (only occupied boxes are stored); each box carries ``_P``
Chebyshev nodes. For a pair of boxes at most ``D = ceil(T / _H)`` boxes apart,

    K(x_j - x_k) ~ sum_{m, l} L_m(x_k) K(y_m - y_l) L_l(x_j)

(``L`` the Lagrange polynomials of the box nodes ``y``), so a box's sources are summed into
``_P`` node weights, and node weights meet target nodes through a ``_P x _P`` kernel table per
box offset for partner boxes at most ``_DN`` apart (near). Further apart (far: their documents
more than ``_DN _H`` apart) each kernel is a power series in ``e^-|x_j - x_k|`` whose terms
split into a factor of the source and one of the target (``_far_tables``): a box's ``_M``
moments per side (``E`` times its node weights, ``E`` the exponentials at the nodes,
``_node_exps``) meet a target box through ``_M`` products per far partner, and go back to the
target box's node values through ``E``. Every target reads its box's node values: O(n _P + B
(2 _DN + 1) _P^2 + B 2 (D - _DN) _M + B _M _P) for B occupied boxes. Each document's ``_P``
Lagrange values are computed once and kept (``n x _P`` floats): the sources, the targets and
the bound's in-box prefix sums below read them, and the chain step reads those of the
positions step on the same scores (the caller passes them on).
Pairs more than D boxes apart are saturated (``|x_j - x_k| >= T``) and are counted exactly as
in ``_pairs``: 1 in the positions for each document above, nothing in the other sums.

The bound Hessian's ``sum_j w_kj |v_j - v_k|`` is not a plain kernel sum. For a separable
measure without truncation (``k <= 0``) and non-negative gains, ``v_j = inv_z g_j t'(pos^_j)``
with ``t'`` non-decreasing, so within one class of equal gains ``v`` is non-decreasing along
the sorted order. For a target ``k`` and a class ``G`` the members with ``v_j < v_k`` are
therefore a prefix of the class (up to ``c(k, G)``), and

    sum_{j in G} w_kj |v_j - v_k| = A_kG - 2 C_kG,
    A_kG = F_{v 1_G}[w](k) - v_k F_{1_G}[w](k),   C_kG = the same sum over the prefix only.

``C_kG`` uses the node values of the boxes before ``c``'s box (cumulative over the target
box's partners; the far ones' series, cumulative per side, where the prefix ends among them)
and, for ``c``'s own box, the node weights of the members before ``c``
(each member's sums over the members of its class and box before it, made once per query:
``_box_prefix``). ``c(k, G)`` only moves forward as ``k`` runs through one class in sorted
order (``v_k`` non-decreasing), so one pointer per pair of classes finds it in O(n) steps in
total. For a target of gain 0 (``v_k = 0``) every term of a class has one sign and the sum is
``|A_kG|``; the gain-0 class itself gives ``|v_k| F_{1_G0}[w](k)``. Where every ``v`` is at
most 0 (a non-increasing discount, as ApproxNDCG's), no member of the gain-0 class is below
``v_k`` and the sum over all classes is ``g_k - 2 sum_G C_kG``: a target of gain 0 takes
``|g_k|``, and ``A_kG`` is needed only where ``C_kG = A_kG``; with ``hessian="mixed"`` a
target whose floor cannot bind skips its ``C_kG`` (``_chain_boxes``). Up to ``_CMAX`` distinct
nonzero gains per query; otherwise (and for ApproxNDCG@k, whose ``v`` is not monotone) the
bound stays on the exact windowed path of ``_pairs``. ApproxAP's ``v`` is coupled across the
relevant documents and zero on the others: its bound takes the chain sums with weights
``|v|`` and, for the relevant documents' own sum, the exact windowed loops, or classes of
consecutive ``v`` (``vsep``: the pairs of different classes on the grid, with the sign of
``v_j - v_k`` given by the classes' order, the pairs within a class exactly), or, where
few partner boxes straddle a document's ``v``, the grid for any ``v``
(``_kernels._ap_grid_bound``). There each box's documents are sorted by ``v``; for a target
``k`` and a partner box ``B``, with ``S_1``, ``S_v`` the node weights of 1 and ``v`` of the
members with ``v_j < v_k`` and ``T_1``, ``T_v`` those of all members,

    sum_{j in B} L(x_j) |v_j - v_k| = v_k (2 S_1 - T_1) + T_v - 2 S_v,

with ``S_1`` and ``S_v`` running sums at a pointer that only moves forward as the box's
targets go through ascending ``v`` (:func:`grid_abs_seq`). Where every member of ``B`` lies at
or above ``v_k``, or every one at or below it, the sum is ``T_v - v_k T_1`` or its negative:
those partners' node values meet the target box once, summed into two vectors that a target
reads with two dot products, and only a partner whose members' ``v`` straddle ``v_k`` takes the
pointer and its own ``_P x _P`` product. As the targets go up in ``v`` a partner passes from
above to straddling to below once. ApproxAP's ``v`` is close to monotone along the scores, so
that few partners straddle (1.8-1.9 of 6-10 a document on lists of 10,000 after 50-100 LightGBM
rounds): O(1) per target and partner box, O(_P) per target, O(_P^2) per pair of boxes and per
target and straddling partner (partners within ``_D_ABS``), after the sort, and O(_P) memory per
box. The classes cost O(_P^2 C) per pair of near boxes (O(_M C) per far pair), O(_P C) per
document and the exact pairs
within a class: cheaper where many partners straddle a document's ``v`` (:func:`abs_cost` counts
them).

Error bound. With ``_H = 1`` and ``_P = 8`` the interpolation error of each kernel on any
pair of boxes (both ends interpolated) is at most ``eps_K`` = 3.4e-9 (sig), 1.1e-8 (w),
3.1e-8 (sig''), 2.2e-8 (w^2) (measured on dense random samples; Chebyshev interpolation of
a function analytic in the strip ``|Im z| < pi`` on an interval of width 1 converges like
``rho^-P``, ``rho ~ 12.6``: 10 nodes would give about 150 times less, at about 1.5 times the
cost of the box products and 1.25 times the work per document). That is at the float32 precision
(6e-8) in which LightGBM and XGBoost keep the gradients and Hessians. So

    |F_c(k) - F~_c(k)| <= eps_K sum_{j in k's window} |c_j|    (|x_j - x_k| < (D + 1) _H)

(on the far partners each kernel's error is within a tenth of its own ``eps_K``: the
series' first term left out, at most 3.5e-10 |c_j| for sig'' and 1.4e-11 for sig, and their
exponentials' interpolation, ``_far_tables`` and ``_node_exps``; tested)
plus the window bound of ``_pairs`` for the saturated pairs. The outputs combine these sums:
``pos^`` (sig, c = 1), ``g``, ``gva`` and ``aw`` (w; c = v, va and 1, the last times ``|v_k|``
or ``|va_k|``), ``aa`` (sig''), ``ab`` (w^2, c = e) and the bound (``A - 2 C`` or
``g - 2 sum C``: three w-sums of ``|v_j| + |v_k|``; over ApproxAP's relevant documents by
``grid_abs_seq`` one w-sum of ``|v_j - v_k| <= |v_j| + |v_k|``, whose pairs more than
``_D_ABS`` boxes apart are left out: at most ``e^-20 (|v_j| + |v_k|)`` each, within
``_EPS_K`` of w).
``_EPS_K`` holds the ``eps_K`` with a factor 2 of margin; the tests check these bounds per
document and the 1e-6 max-norm relative target against the exact kernel.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from approx_gbdt._pairs import _ENTRY, _STEP, _T, _sig_pair, _sort_desc_short, exact_curvature

_H = 1.0
_P = 8
assert _P % 4 == 0  # ``_rows4`` takes four rows at a time
_D = int(math.ceil(_T / _H))
# partner boxes within _DN of a box meet it through the _P x _P kernel tables; those further
# (up to _D) through the kernels' series in e^-|z| (``_far_tables``), _M terms: every pair
# there is more than _DN _H apart, so the first term left out is at most
# (_M + 1)^2 e^-((_M + 1) _DN _H) = 3.5e-10 of |c_j| (sig''; sig 1.4e-11, w 6.9e-11, w^2
# 2.8e-10), about a hundredth of the interpolation's own (``eps_K`` below)
_DN = 5
_M = 4
assert 0 < _DN < _D
# partner boxes of the sums over ApproxAP's relevant documents (``grid_abs_seq``): pairs
# further apart than _D_ABS boxes are left out, each an error of at most w(_D_ABS) |v_j - v_k|
# <= e^-20 (|v_j| + |v_k|) = 2.1e-9 (|v_j| + |v_k|), a fifth of the grid's own (``eps_K`` of
# w below, 1.1e-8; a tenth of ``_EPS_K``'s, which has a factor 2 of margin)
_D_ABS = 20
assert _D_ABS <= _D  # the kernel tables cover offsets up to _D
_Q = 2 * _P - 1  # coefficients of a self term ``L(t)^T K L(t)``, a polynomial of degree 2 _P - 2
_CMAX = 8
_LEAF = {"forceinline": True, "fastmath": False, "error_model": "python", **_STEP}
_EPS_K = (6.8e-9, 2.2e-8, 6.2e-8, 4.4e-8)  # sig, w, sig'', w^2 (see above)
GRID_MIN_N = 512  # shorter queries always take the exact windowed path (cheaper below ~600)
_GRID_PER_DOC = 60  # cost model of ``use_grid``, in window pairs
_GRID_PER_NEAR = 280
_GRID_PER_FAR = 18


def _python(f):
    """A compiled function's Python source function (itself under ``NUMBA_DISABLE_JIT``)."""
    return getattr(f, "py_func", f)


def _nodes():
    """Chebyshev nodes of the first kind on [0, 1] and their barycentric weights."""
    a = (2 * np.arange(_P) + 1) * math.pi / (2 * _P)
    return 0.5 * (1.0 - np.cos(a)), (-1.0) ** np.arange(_P) * np.sin(a)


@njit(inline="always", cache=True)
def _lagrange(t, z, lam, out):
    """Values of the ``_P`` Lagrange polynomials of the nodes ``z`` at ``t`` (barycentric).
    The quotients are formed without a branch (a node's own divides by 1 instead of 0), so
    that they vectorise; ``t`` on a node takes that node's value afterwards."""
    s = 0.0
    at = -1
    for i in range(_P):
        d = t - z[i]
        if d == 0.0:
            at = i
        q = lam[i] / (d if d != 0.0 else 1.0)
        out[i] = q
        s += q
    if at >= 0:
        for m in range(_P):
            out[m] = 0.0
        out[at] = 1.0
        return
    f = 1.0 / s
    for i in range(_P):
        out[i] *= f


def _tables(z):
    """Kernel tables ``K[kernel, D + delta, m, l] = K((z_m - z_l - delta) _H)`` for target node
    ``m`` and source node ``l`` ``delta`` boxes further down: sig, w, sig'' and w^2 (by the
    kernels' own ``_sig_pair``, run as Python: made once per process)."""
    tab = np.empty((4, 2 * _D + 1, _P, _P))
    for di in range(2 * _D + 1):
        delta = di - _D
        for m in range(_P):
            for i in range(_P):
                sg, sc, w = _python(_sig_pair)((z[m] - z[i] - delta) * _H)
                tab[:, di, m, i] = sg, w, w * (sc - sg), w * w
    return tab


def _far_tables():
    """Series of the four kernels for partner boxes more than ``_DN`` apart:
    ``F[kernel, D + delta, i]`` for a source box ``delta`` boxes further down. With
    ``y = e^-|z|`` (``|z| > _DN _H`` there) the kernels are power series in ``y``,

        sig(z) = sum_m (-1)^(m+1) y^m (z < 0),  1 - the same (z > 0)
        w(z) = sum_m (-1)^(m+1) m y^m,          sig''(z) = -sign(z) sum_m (-1)^(m+1) m^2 y^m
        w(z)^2 = sum_m (-1)^m C(m+1, 3) y^m,

    and ``y^m`` splits into the boxes' distance and the documents' local coordinates ``t``:
    ``e^-(m delta _H) e^(m _H t_k) e^(-m _H t_j)`` for a source below (``delta > 0``),
    ``e^-(m |delta| _H) e^(-m _H t_k) e^(m _H t_j)`` above. ``F`` holds the coefficients
    times the distance factor, for m = 1.._M: columns ``0.._M-1`` for a source above (they
    meet the source's ``e^(m _H t_j)`` and the target's ``e^(-m _H t_k)``), ``_M..2 _M-1``
    below (the other way round); the other half is 0, as is every row within ``_DN``. The
    constant 1 of sig above is counted apart (as for the saturated pairs)."""
    far = np.zeros((4, 2 * _D + 1, 2 * _M))
    for di in range(2 * _D + 1):
        delta = di - _D
        if abs(delta) <= _DN:
            continue
        above = delta < 0
        for i in range(_M):
            m = i + 1
            sgn = 1.0 if m % 2 == 1 else -1.0  # (-1)^(m+1)
            y = math.exp(-m * abs(delta) * _H)
            col = i if above else _M + i
            far[0, di, col] = (-sgn if above else sgn) * y
            far[1, di, col] = sgn * m * y
            far[2, di, col] = (-sgn if above else sgn) * m * m * y
            far[3, di, col] = -sgn * ((m + 1) * m * (m - 1) / 6.0) * y
    return far


@njit(cache=True, **_STEP)
def _box_ids(x, bid, cnt):
    """Occupied boxes of ``u = -x / _H`` (``x`` sorted, descending): their ids ``bid`` and
    numbers of documents ``cnt``. Returns the number of boxes."""
    nb = 0
    for r in range(x.shape[0]):
        f = math.floor(max(-x[r] / _H, 0.0))
        if nb == 0 or f != bid[nb - 1]:
            bid[nb] = f
            cnt[nb] = 0
            nb += 1
        cnt[nb - 1] += 1
    return nb


@njit(cache=True, **_STEP)
def _partners(bid, nb, d, nlo, nhi):
    """Each box's partners ``[nlo[b], nhi[b])``: the boxes whose ids lie within ``d`` of its
    own (``bid`` ascending)."""
    lo = 0
    hi = 0
    for b in range(nb):
        while bid[lo] < bid[b] - d:
            lo += 1
        if hi < b + 1:
            hi = b + 1
        while hi < nb and bid[hi] <= bid[b] + d:
            hi += 1
        nlo[b] = lo
        nhi[b] = hi


@njit(cache=True, **_STEP)
def _box_partners(x, n, d):
    """Occupied boxes of one sorted query (``nb``, their numbers of documents ``cnt``) and
    each box's partners within ``d`` boxes, ``[ends[0, b], ends[1, b])``."""
    bid = np.empty(n)
    cnt = np.empty(n, dtype=np.int64)
    nb = _box_ids(x[:n], bid, cnt)
    ends = np.empty((2, nb), dtype=np.int64)
    _partners(bid, nb, d, ends[0], ends[1])
    return nb, cnt, ends


@njit(cache=True, **_STEP)
def _partner_work(x, n):
    """``(near, far)``: the ordered pairs of partner boxes of one sorted query within ``_DN``
    (each box with itself once) and those beyond it within ``_D``, the work of the grid's
    paths (:func:`_costs`)."""
    bid = np.empty(n)
    cnt = np.empty(n, dtype=np.int64)
    nb = _box_ids(x[:n], bid, cnt)
    ends = np.empty((4, nb), dtype=np.int64)  # rows as in _setup
    _partners(bid, nb, _D, ends[0], ends[3])
    _partners(bid, nb, _DN, ends[1], ends[2])
    near = 0
    every = 0
    for b in range(nb):
        near += ends[2, b] - ends[1, b]
        every += ends[3, b] - ends[0, b]
    return near, every - near


@njit(inline="always", cache=True)
def window_pairs(jend, n):
    """The pairs inside the windows of a sorted query's first ``n`` documents (``jend``: each
    one's window end), the work of the exact windowed loops."""
    pairs = 0
    for r in range(n):
        pairs += jend[r] - r - 1
    return pairs


@njit(cache=True, **_STEP)
def _costs(x, jend, n):
    """Work of the two paths for one sorted query: the pairs inside the windows (exact path)
    and the ordered pairs of near and of far partner boxes (grid path, :func:`_partner_work`)."""
    near, far = _partner_work(x, n)
    return window_pairs(jend, n), near, far


@njit(inline="always", cache=True)
def use_grid(x, jend, n, grid_mode):
    """Whether to take the grid path for this sorted query: ``grid_mode`` 1 always, -1 never,
    0 where it is cheaper. The cost model, fitted on one thread (ApproxNDCG, 60,000 documents
    in queries of 600 to 4,000, N(0, sd) scores with sd from 0.02 to 10 at alpha 10: all
    pairs in the window to a few; applied from ``GRID_MIN_N``): exact path ~ 0.132 us per
    document + 0.99 ns per window pair; grid path ~ 0.168 us per document + 0.28 us per pair
    of near partner boxes + 18 ns per pair of far ones (within 11 % of every measured time).
    In window pairs that is 36 per document, about 280 per near and 18 per far box pair; the model
    takes 60 per document, erring towards the exact path, whose time does not depend on the
    scores' spread (the choice took 1.004 times the faster path's time in total over the 32
    settings with 36 and with 60, the worst setting 1.06 times)."""
    if grid_mode < 0 or n < 2:
        return False
    if grid_mode > 0:
        return True
    if n < GRID_MIN_N:
        return False
    pairs, near, far = _costs(x, jend, n)
    return pairs > _GRID_PER_DOC * n + _GRID_PER_NEAR * near + _GRID_PER_FAR * far


@njit(cache=True, **_STEP)
def _boxes(x, t, slot, bid, bstart, nlo, nhi):
    """Occupied boxes of ``u = -x / _H`` (sorted), local coordinates ``t`` in [0, 1), the box
    slot of each document and each box's partners ``[nlo, nhi)`` (box ids within D).
    Returns the number of boxes."""
    n = x.shape[0]
    nb = 0
    for r in range(n):
        u = -x[r] / _H
        if u < 0.0:
            u = 0.0
        f = math.floor(u)
        t[r] = u - f
        if nb == 0 or f != bid[nb - 1]:
            bid[nb] = f
            bstart[nb] = r
            nb += 1
        slot[r] = nb - 1
    bstart[nb] = n
    _partners(bid, nb, _D, nlo, nhi)
    return nb


# Small helpers over the ``_P`` nodes (used many times in ``_chain_boxes``, and in
# ``_pos_boxes``) are compiled once and inlined by LLVM (``forceinline``),
# not by Numba (``inline="always"``), which types a function again at every place it is
# written: LLVM's inlining gives the same machine code, and ``_chain_boxes`` with its callees
# compiles in 2.5 s against 6.3 s (a first call on long queries). Their flags are set
# (``_LEAF``): a function that Numba compiles for a compiled caller takes the caller's
# fast-math and error model where its own are not set, so the first caller would decide them
# for all.
@njit(cache=True, **_LEAF)
def _rows4(K, w, m):
    """Rows ``m..m+3`` of ``K @ w``: four independent sums, each over ``i`` in order (so that
    they overlap in the CPU instead of waiting on one another)."""
    a0 = a1 = a2 = a3 = 0.0
    for i in range(_P):
        wi = w[i]
        a0 += K[m, i] * wi
        a1 += K[m + 1, i] * wi
        a2 += K[m + 2, i] * wi
        a3 += K[m + 3, i] * wi
    return a0, a1, a2, a3


@njit(cache=True, **_LEAF)
def _matvec_add(K, w, out):
    for m in range(0, _P, 4):
        a0, a1, a2, a3 = _rows4(K, w, m)
        out[m] += a0
        out[m + 1] += a1
        out[m + 2] += a2
        out[m + 3] += a3


def _self_coefs(z, lam, tab):
    """Chebyshev coefficients (on ``tau = 2 t - 1``) of the grid's own value of a document's
    self term, ``q_k(t) = L(t)^T K_k L(t)`` with ``K_k = tab[k, D]``, for the four kernels:
    a polynomial of degree ``2 _P - 2`` in the local coordinate ``t``, so that its values at
    ``_Q`` Chebyshev points give it exactly (up to rounding)."""
    theta = (2 * np.arange(_Q) + 1) * math.pi / (2 * _Q)
    L = np.empty((_Q, _P))
    for i in range(_Q):
        _python(_lagrange)(0.5 * (1.0 + math.cos(theta[i])), z, lam, L[i])
    vals = np.einsum("im,kml,il->ki", L, tab[:, _D], L)  # q_k at the points
    c = vals @ np.cos(np.outer(theta, np.arange(_Q))) * (2.0 / _Q)
    c[:, 0] /= 2.0
    return c


@njit(cache=True, **_STEP)
def _self_terms(t, c, out):
    """``out[r] = q(t[r])`` for the self-term coefficients ``c`` (Clenshaw's recurrence; one
    document per vector lane)."""
    for r in range(t.shape[0]):
        tau = 2.0 * t[r] - 1.0
        b1 = 0.0
        b2 = 0.0
        for j in range(_Q - 1, 0, -1):
            b0 = c[j] + 2.0 * tau * b1 - b2
            b2 = b1
            b1 = b0
        out[r] = c[0] + tau * b1 - b2


@njit(cache=True, **_LEAF)
def _dot(a, b):
    acc = 0.0
    for i in range(_P):
        acc += a[i] * b[i]
    return acc


def grid_tables():
    """``(z, lam, tab, sc, far, emat)``: the Chebyshev nodes with their barycentric weights,
    the kernel tables, the self terms' coefficients, the far series' tables and their
    exponentials at the nodes: constants of the grid, made once per process (in NumPy and
    Python: 5 ms; compiled, they took 1.6 s alone in a fresh process) and passed to every call
    (``grid_positions_*``, ``grid_chain_*``, ``grid_abs_*``)."""
    z, lam = _nodes()
    tab = _tables(z)
    return z, lam, tab, _self_coefs(z, lam, tab), _far_tables(), _node_exps(z)


@njit(cache=True, **_STEP)
def _setup(x, gt):
    """Nodes, kernel tables (``gt``, from :func:`grid_tables`) and boxes of one sorted query;
    ``ends``: each box's partners ``[ends[0, b], ends[3, b])`` (box ids within ``_D``), of
    which ``[ends[1, b], ends[2, b])`` are near (within ``_DN``)."""
    n = x.shape[0]
    z, lam, tab, sc, far, emat = gt
    t = np.empty(n)
    slot = np.empty(n, dtype=np.int64)
    bid = np.empty(n)
    bstart = np.empty(n + 1, dtype=np.int64)
    ends = np.empty((4, n), dtype=np.int64)
    nb = _boxes(x, t, slot, bid, bstart, ends[0], ends[3])
    _partners(bid, nb, _DN, ends[1], ends[2])
    return z, lam, tab, sc, far, emat, t, slot, bid, bstart, ends, nb


def _node_exps(z):
    """``E[i, l] = e^((i + 1) _H z_l)`` for i < _M and ``e^(-(i - _M + 1) _H z_l)`` for the
    others: the far series' exponentials at the nodes. A box's far moments are ``E`` times its
    node weights (each document's ``e^(+-m _H t_j)`` interpolated through its Lagrange
    values), and a target's factors ``e^(-+m _H t_k)`` are read back through the node values
    the same way. The interpolation's relative error on [0, 1] is at most 1.2e-9, 4.8e-7,
    2.0e-5 and 3.3e-4 for m = 1..4, on series terms of at most ``m^2 e^(-m _DN _H)`` (6.7e-3,
    1.8e-4, 2.8e-6, 3.3e-8): about 3e-10 in all, with the source's and the target's."""
    E = np.empty((2 * _M, _P))
    for i in range(_M):
        for m in range(_P):
            E[i, m] = math.exp((i + 1) * _H * z[m])
            E[_M + i, m] = math.exp(-(i + 1) * _H * z[m])
    return E


@njit(cache=True, **_LEAF)
def _moments(E, w, out):
    """A box's far moments ``out = E w`` from its node weights ``w`` (:func:`_node_exps`), or
    a target's far factors from its Lagrange values. The ``2 _M`` sums advance together, node
    by node (independent additions: one sum after the other waits on each addition)."""
    for i in range(2 * _M):
        out[i] = 0.0
    for m in range(_P):
        wm = w[m]
        for i in range(2 * _M):
            out[i] += E[i, m] * wm


@njit(cache=True, **_LEAF)
def _far_add(F, w, off, out):
    """``out[off + i] += F[off + i] w[off + i]`` for i < _M: one far partner's series terms
    (``off`` 0 for a source above, ``_M`` below; see :func:`_far_tables`)."""
    for i in range(off, off + _M):
        out[i] += F[i] * w[i]


@njit(cache=True, **_LEAF)
def _far_nodes(E, phf, out):
    """Add a box's far series ``phf`` to its node values ``out``: the terms of the sources
    above meet ``e^(-m _H t)``, those below ``e^(m _H t)``, at every node."""
    for i in range(_M):
        a = phf[i]
        b = phf[_M + i]
        for m in range(_P):
            out[m] += a * E[_M + i, m] + b * E[i, m]


@njit(cache=True, **_LEAF)
def _has_far(ends, b):
    """Whether box ``b`` has partners beyond ``_DN`` (see :func:`_setup`)."""
    return ends[0, b] < ends[1, b] or ends[2, b] < ends[3, b]


@njit(error_model="numpy", cache=True, **_STEP)
def _pos_sources(b0, b1, t, bstart, z, lam, emat, src, mom, lag):
    for b in range(b0, b1):
        for r in range(bstart[b], bstart[b + 1]):
            L = lag[r]
            _lagrange(t[r], z, lam, L)
            for i in range(_P):
                src[b, i] += L[i]
        _moments(emat, src[b], mom[b])


@njit(cache=True, **_STEP)
def _pos_boxes(b0, b1, bid, bstart, ends, tab, far, emat, src, mom, lag, own, pos):
    phi = np.empty(_P)
    phf = np.empty(2 * _M)
    for b in range(b0, b1):
        for m in range(_P):
            phi[m] = 0.0
        for s in range(ends[1, b], ends[2, b]):
            _matvec_add(tab[0, int(bid[s] - bid[b]) + _D], src[s], phi)
        if _has_far(ends, b):
            for m in range(2 * _M):
                phf[m] = 0.0
            for s in range(ends[0, b], ends[1, b]):  # far above
                _far_add(far[0, int(bid[s] - bid[b]) + _D], mom[s], 0, phf)
            for s in range(ends[2, b], ends[3, b]):  # far below
                _far_add(far[0, int(bid[s] - bid[b]) + _D], mom[s], _M, phf)
            _far_nodes(emat, phf, phi)
        base = 1.0 + bstart[ends[1, b]]  # sig's 1 for every document above the near boxes
        for r in range(bstart[b], bstart[b + 1]):
            pos[r] = base + _dot(lag[r], phi) - own[r]


@njit(cache=True, **_STEP)
def _lag_space(lag, n):
    """``lag`` where it has a row per document, else a new ``n x _P`` array."""
    return lag if lag.shape[0] == n else np.empty((n, _P))


@njit(cache=True, **_ENTRY)
def grid_positions_seq(x, pos, gt, lag):
    """Smoothed positions of one sorted query (``x`` non-increasing) by the grid (``gt`` from
    :func:`grid_tables`). ``lag``: an ``n x _P`` array that receives every document's
    Lagrange values (for a chain step on the same ``x``: :func:`grid_chain_seq`), or an empty
    one."""
    z, lam, tab, sc, far, emat, t, slot, bid, bstart, ends, nb = _setup(x, gt)
    src = np.zeros((nb, _P))
    mom = np.empty((nb, 2 * _M))
    lag = _lag_space(lag, x.shape[0])
    own = np.empty(x.shape[0])
    _self_terms(t, sc[0], own)
    b0 = np.int64(0)  # a run-time 0: a literal 0 would compile the callees once more
    _pos_sources(b0, nb, t, bstart, z, lam, emat, src, mom, lag)
    _pos_boxes(b0, nb, bid, bstart, ends, tab, far, emat, src, mom, lag, own, pos)


@njit(parallel=True, cache=True, **_ENTRY)
def grid_positions_par(x, pos, gt, nt, lag):
    """:func:`grid_positions_seq` with the boxes split across ``nt`` threads."""
    z, lam, tab, sc, far, emat, t, slot, bid, bstart, ends, nb = _setup(x, gt)
    src = np.zeros((nb, _P))
    mom = np.empty((nb, 2 * _M))
    lag = _lag_space(lag, x.shape[0])
    own = np.empty(x.shape[0])
    _self_terms(t, sc[0], own)
    nch = min(nb, 4 * nt)
    for c in prange(nch):
        _pos_sources(nb * c // nch, nb * (c + 1) // nch, t, bstart, z, lam, emat, src, mom,
                     lag)
    for c in prange(nch):
        _pos_boxes(nb * c // nch, nb * (c + 1) // nch, bid, bstart, ends, tab, far, emat, src,
                   mom, lag, own, pos)


@njit(cache=True, **_ENTRY)
def gain_classes(gains, order, n, cls):
    """Class of each document in sorted order (0: gain 0, 1..C: distinct nonzero gains);
    returns C, or -1 when there are more than ``_CMAX`` classes or a negative gain."""
    vals = np.empty(_CMAX)
    nc = 0
    for r in range(n):
        g = gains[order[r]]
        if g == 0.0:
            cls[r] = 0
            continue
        if g < 0.0 or not math.isfinite(g):
            return -1
        c = -1
        for i in range(nc):
            if vals[i] == g:
                c = i
                break
        if c < 0:
            if nc == _CMAX:
                return -1
            vals[nc] = g
            c = nc
            nc += 1
        cls[r] = c + 1
    return nc


@njit(error_model="numpy", cache=True, **_STEP)
def _chain_sources(b0, b1, t, bstart, z, lam, v, ee, va, cls, C, need_exact, fresh, emat, src,
                   mom, lag):
    """Lagrange values of the documents of boxes b0..b1-1 (into ``lag``, when ``fresh``;
    else ``lag`` holds them) and their boxes' node weights (into ``src``, rows: 1, ``v``,
    ``e`` (when ``need_exact``), ``va`` (when given), then ``v 1_G`` and ``1_G`` for the
    classes G = 1..C) and far moments (into ``mom``, the same rows: :func:`_moments`)."""
    has_va = va.shape[0] > 0
    for b in range(b0, b1):
        for r in range(bstart[b], bstart[b + 1]):
            L = lag[r]
            if fresh:
                _lagrange(t[r], z, lam, L)
            vr = v[r]
            for i in range(_P):
                li = L[i]
                src[b, 0, i] += li
                src[b, 1, i] += li * vr
            if need_exact:
                er = ee[r]
                for i in range(_P):
                    src[b, 2, i] += L[i] * er
            if has_va:
                ar = va[r]
                for i in range(_P):
                    src[b, 3, i] += L[i] * ar
            c = cls[r] if C > 0 else 0
            if c > 0:
                for i in range(_P):
                    src[b, 2 + 2 * c, i] += L[i] * vr
                    src[b, 3 + 2 * c, i] += L[i]
        for k in range(4 + 2 * C):
            _moments(emat, src[b, k], mom[b, k])


@njit(cache=True, **_ENTRY)
def grid_chain_seq(x, v, ee, va, g, bnd, aa, ab, aw, gva, cls, ncls, need_bound, need_exact,
                   floor, gt, vsep, lag):
    """Chain-rule sums of one sorted query by the grid: ``g`` and ``aw``; when ``need_exact``,
    ``aa`` and ``ab`` (else they are not written); for weights ``va`` (an empty array: none),
    ``gva = F_va[w] - va_k F_1[w]``; and when ``need_bound``, ``bnd`` by the class split
    (``cls`` from :func:`gain_classes`, ``ncls`` classes; the caller guarantees ``v``
    non-decreasing within each class; ``gt`` from :func:`grid_tables`).

    With ``vsep`` the classes 1..ncls instead separate ``v`` (every ``v`` of a class is at most
    every ``v`` of the next; ``v`` in any order within a class, no class 0), and ``bnd`` is the
    bound's sum over the other classes only: ``sum_{c(j) != c(k)} w_kj |v_j - v_k|``, whose
    sign is known per class (the caller adds the sum within the class).

    ``floor``: where the caller floors the exact Hessian diagonal with ``floor`` times the
    bound (``hessian="mixed"``; 0 otherwise), a target whose floor cannot bind gets
    ``bnd = 0`` without its bound's class sums (see :func:`_chain_boxes`).

    ``lag``: the documents' Lagrange values from :func:`grid_positions_seq` on this same
    ``x`` (``n x _P``; a caller must not pass those of another ``x``: any array with a row per
    document is taken as given), or an empty array (computed here)."""
    z, lam, tab, sc, far, emat, t, slot, bid, bstart, ends, nb = _setup(x, gt)
    C = ncls if need_bound else 0
    src = np.zeros((nb, 4 + 2 * C, _P))  # 1, v, e, va, then v 1_G and 1_G for G = 1..C
    mom = np.empty((nb, 4 + 2 * C, 2 * _M))
    fresh = lag.shape[0] != x.shape[0]
    lag = _lag_space(lag, x.shape[0])
    b0 = np.int64(0)  # a run-time 0: a literal 0 would compile the callees once more
    _chain_sources(b0, nb, t, bstart, z, lam, v, ee, va, cls, C, need_exact, fresh, emat, src,
                   mom, lag)
    mem, mst = _class_members(cls, x.shape[0], C)
    pre = _box_prefix(mem, mst, 0 if vsep else C, slot, lag, v)
    own = _chain_own(t, sc, need_exact)
    vneg = _nonpositive(v) if need_bound and not vsep else False
    _chain_boxes(b0, nb, v, ee, va, g, bnd, aa, ab, aw, gva, cls, C, need_bound, need_exact,
                 floor, vsep, vneg, mem, mst, pre, tab, far, emat, slot, bid, bstart, ends, src,
                 mom, lag, own)


@njit(parallel=True, cache=True, **_ENTRY)
def grid_chain_par(x, v, ee, va, g, bnd, aa, ab, aw, gva, cls, ncls, need_bound, need_exact,
                   floor, gt, nt, vsep, lag):
    """:func:`grid_chain_seq` with the boxes split across ``nt`` threads (the bound's
    pointers start in each chunk by a binary search, then move forward only)."""
    z, lam, tab, sc, far, emat, t, slot, bid, bstart, ends, nb = _setup(x, gt)
    C = ncls if need_bound else 0
    src = np.zeros((nb, 4 + 2 * C, _P))
    mom = np.empty((nb, 4 + 2 * C, 2 * _M))
    fresh = lag.shape[0] != x.shape[0]
    lag = _lag_space(lag, x.shape[0])
    nch = min(nb, 4 * nt)
    for c in prange(nch):
        _chain_sources(nb * c // nch, nb * (c + 1) // nch, t, bstart, z, lam, v, ee, va, cls,
                       C, need_exact, fresh, emat, src, mom, lag)
    mem, mst = _class_members(cls, x.shape[0], C)
    pre = _box_prefix(mem, mst, 0 if vsep else C, slot, lag, v)
    own = _chain_own(t, sc, need_exact)
    vneg = _nonpositive(v) if need_bound and not vsep else False
    for c in prange(nch):
        _chain_boxes(nb * c // nch, nb * (c + 1) // nch, v, ee, va, g, bnd, aa, ab, aw, gva,
                     cls, C, need_bound, need_exact, floor, vsep, vneg, mem, mst, pre, tab, far,
                     emat, slot, bid, bstart, ends, src, mom, lag, own)


@njit(cache=True, **_STEP)
def _chain_own(t, sc, need_exact):
    """The grid's own values of every document's self terms of ``w`` and, when
    ``need_exact``, of ``w^2`` (else left unset)."""
    own = np.empty((2, t.shape[0]))
    _self_terms(t, sc[1], own[0])
    if need_exact:
        _self_terms(t, sc[3], own[1])
    return own


@njit(cache=True, **_STEP)
def _nonpositive(v):
    """Whether every ``v`` is at most 0 (a non-increasing discount: ApproxNDCG's)."""
    for r in range(v.shape[0]):
        if v[r] > 0.0:
            return False
    return True


@njit(cache=True, **_STEP)
def _class_members(cls, n, C):
    """Documents of each class 1..C in sorted order: ``mem[mst[c]:mst[c + 1]]``."""
    mst = np.zeros(C + 2, dtype=np.int64)
    if C == 0:
        return np.empty(1, dtype=np.int64), mst
    for r in range(n):
        if cls[r] > 0:
            mst[cls[r] + 1] += 1
    for c in range(1, C + 2):
        mst[c] += mst[c - 1]
    fill = mst.copy()
    mem = np.empty(max(mst[C + 1], 1), dtype=np.int64)
    for r in range(n):
        c = cls[r]
        if c > 0:
            mem[fill[c]] = r
            fill[c] += 1
    return mem, mst


@njit(cache=True, **_STEP)
def _box_prefix(mem, mst, C, slot, lag, v):
    """For each member ``u`` of a class (``mem[u]``, classes 1..C in sorted order), the node
    weights of ``v`` (``pre[0, u]``) and of 1 (``pre[1, u]``) of the members of its class in
    its box before it: the part of the bound's prefix sum ``C_kG`` in the box where the
    prefix ends (see ``_chain_boxes``). O(_P) per member, once per query for every target
    class."""
    pre = np.empty((2, mem.shape[0] if C > 0 else 1, _P))
    for c in range(1, C + 1):
        for u in range(mst[c], mst[c + 1]):
            if u == mst[c] or slot[mem[u]] != slot[mem[u - 1]]:
                for m in range(_P):
                    pre[0, u, m] = 0.0
                    pre[1, u, m] = 0.0
            else:
                j = mem[u - 1]
                Lm = lag[j]
                vj = v[j]
                for m in range(_P):
                    pre[0, u, m] = pre[0, u - 1, m] + Lm[m] * vj
                    pre[1, u, m] = pre[1, u - 1, m] + Lm[m]
    return pre


@njit(cache=True, **_STEP)
def _first_not_below(mem, a, b, v, vk):
    """First index in ``mem[a:b]`` with ``v[mem[i]] >= vk`` (``v`` non-decreasing there)."""
    while a < b:
        m = (a + b) // 2
        if v[mem[m]] < vk:
            a = m + 1
        else:
            b = m
    return a


@njit(cache=True, **_LEAF)
def _side_dot(F, X, xo):
    """``sum_i F[i] X[xo + i]``, i < _M: far series of one side against a target's factors
    (``xo`` ``_M`` for sources above, 0 below)."""
    acc = 0.0
    for i in range(_M):
        acc += F[i] * X[xo + i]
    return acc


@njit(cache=True, **_STEP)
def _chain_boxes(b0, b1, v, ee, va, g, bnd, aa, ab, aw, gva, cls, C, need_bound, need_exact,
                 floor, vsep, vneg, mem, mst, pre, tab, far, emat, slot, bid, bstart, ends, src,
                 mom, lag, own):
    """Targets of boxes b0..b1-1: node values of the partner boxes (the near ones through the
    kernel tables, the far ones through their series, :func:`_far_tables`), then every
    document (``lag``: the Lagrange values of every document, from the positions step or
    :func:`_chain_sources`; ``mom``: the boxes' far moments; ``own``: the self terms of ``w``
    and, when ``need_exact``, ``w^2``, from :func:`_chain_own`; ``vneg``: every ``v`` is at
    most 0, so that the bound is ``g_k - 2 sum_G C_kG``, see the module docstring).

    With ``vneg``, ``need_exact`` and a ``floor`` above 0 (the caller's Hessian is
    ``max(h_k, floor alpha^2 bnd_k)`` with the exact diagonal ``h_k = alpha^2 (aa_k - ab_k -
    e_k aw_k^2)``, ``hessian="mixed"``), a target of nonzero gain with
    ``floor (2 |v_k| aw_k - g_k) <= aa_k - ab_k - e_k aw_k^2`` gets ``bnd_k = 0`` without
    its class sums: ``2 |v_k| aw_k - g_k = sum_j w_kj (|v_j| + |v_k|)`` (every ``v`` at
    most 0) is at least the bound ``sum_j w_kj |v_j - v_k|``, so the floor cannot bind there
    and the Hessian is ``h_k`` either way."""
    Lj = np.empty(_P)
    tmp = np.empty(_P)
    X = np.zeros(2 * _M)  # a target's far factors, made where its class sums read them
    mq = np.empty(2 * _M)  # far moments of a partial far box's members
    # rows: w of 1 and v, sig'' of 1 and v, w^2 of e, w of va; node values and far series
    ph = np.empty((6, _P))
    pf = np.empty((6, 2 * _M))
    has_va = va.shape[0] > 0
    nfar = _D - _DN + 1
    # node values of the first i near partner boxes, and far series of the first i partners
    # above / below, for weights v 1_G (0) and 1_G (1)
    psi = np.zeros((C + 1, 2, 2 * _DN + 2, _P))
    psa = np.zeros((C + 1, 2, nfar, _M))
    psb = np.zeros((C + 1, 2, nfar, _M))
    # node values of every partner (tf); fa: those of the far partners above, which the near
    # prefixes psi then include
    fa = np.zeros(_P)
    tf = np.zeros((C + 1, 2, _P))
    # pointer per (class of the target, class of the sources)
    pc = np.full((C + 1, C + 1), -1, dtype=np.int64)
    for b in range(b0, b1):
        for k in range(6):
            for m in range(_P):
                ph[k, m] = 0.0
        lo = ends[0, b]
        klo = ends[1, b]
        khi = ends[2, b]
        hi = ends[3, b]
        for c in range(1, C + 1):
            for m in range(_P):
                psi[c, 0, 0, m] = 0.0
                psi[c, 1, 0, m] = 0.0
        for s in range(klo, khi):
            di = int(bid[s] - bid[b]) + _D
            Kw = tab[1, di]
            _matvec_add(Kw, src[s, 0], ph[0])
            _matvec_add(Kw, src[s, 1], ph[1])
            if need_exact:
                _matvec_add(tab[2, di], src[s, 0], ph[2])
                _matvec_add(tab[2, di], src[s, 1], ph[3])
                _matvec_add(tab[3, di], src[s, 2], ph[4])
            if has_va:
                _matvec_add(Kw, src[s, 3], ph[5])
            i = s - klo
            for c in range(1, C + 1):
                for m in range(_P):
                    psi[c, 0, i + 1, m] = psi[c, 0, i, m]
                    psi[c, 1, i + 1, m] = psi[c, 1, i, m]
                _matvec_add(Kw, src[s, 2 + 2 * c], psi[c, 0, i + 1])
                _matvec_add(Kw, src[s, 3 + 2 * c], psi[c, 1, i + 1])
        hasf = _has_far(ends, b)
        if hasf:
            for k in range(6):
                for m in range(2 * _M):
                    pf[k, m] = 0.0
            for s in range(lo, hi):
                if klo <= s < khi:
                    continue
                di = int(bid[s] - bid[b]) + _D
                off = 0 if s < klo else _M
                Fw = far[1, di]
                _far_add(Fw, mom[s, 0], off, pf[0])
                _far_add(Fw, mom[s, 1], off, pf[1])
                if need_exact:
                    _far_add(far[2, di], mom[s, 0], off, pf[2])
                    _far_add(far[2, di], mom[s, 1], off, pf[3])
                    _far_add(far[3, di], mom[s, 2], off, pf[4])
                if has_va:
                    _far_add(Fw, mom[s, 3], off, pf[5])
                if C > 0:
                    ps = psa if s < klo else psb
                    i = s - lo if s < klo else s - khi
                    for c in range(1, C + 1):
                        for q in range(2):
                            ms = mom[s, 2 + 2 * c + q]
                            for m in range(_M):
                                ps[c, q, i + 1, m] = ps[c, q, i, m] + Fw[off + m] * ms[off + m]
            _far_nodes(emat, pf[0], ph[0])
            _far_nodes(emat, pf[1], ph[1])
            if need_exact:
                for k in range(2, 5):
                    _far_nodes(emat, pf[k], ph[k])
            if has_va:
                _far_nodes(emat, pf[5], ph[5])
        nl = khi - klo
        na = klo - lo
        nbl = hi - khi
        for c in range(1, C + 1):
            for q in range(2):
                if hasf:
                    for m in range(_P):
                        fa[m] = 0.0
                    for i in range(_M):
                        pf[0, i] = psa[c, q, na, i]
                        pf[0, _M + i] = 0.0
                    _far_nodes(emat, pf[0], fa)
                    for i in range(nl + 1):
                        for m in range(_P):
                            psi[c, q, i, m] += fa[m]
                for m in range(_P):
                    tf[c, q, m] = psi[c, q, nl, m]
                if hasf:
                    for i in range(_M):
                        pf[0, i] = 0.0
                        pf[0, _M + i] = psb[c, q, nbl, i]
                    _far_nodes(emat, pf[0], tf[c, q])
        for r in range(bstart[b], bstart[b + 1]):
            L = lag[r]
            vr = v[r]
            a1 = _dot(L, ph[0])
            g[r] = _dot(L, ph[1]) - vr * a1
            aw[r] = a1 - own[0, r]
            if need_exact:
                aa[r] = _dot(L, ph[3]) - vr * _dot(L, ph[2])
                ab[r] = _dot(L, ph[4]) - ee[r] * own[1, r]
            if has_va:
                gva[r] = _dot(L, ph[5]) - va[r] * a1
            if not need_bound:
                continue
            ck = cls[r]
            if vneg and ck == 0:  # v_k = 0: sum_j w_kj |v_j| = -g_k
                bnd[r] = abs(g[r])
                continue
            if vneg and need_exact and floor > 0.0:
                h = -exact_curvature(aa[r], ab[r], ee[r], aw[r])
                if floor * (-g[r] - 2.0 * vr * aw[r]) <= h:
                    bnd[r] = 0.0  # the floor cannot bind (see above)
                    continue
            xk = False  # X holds this target's far factors
            # vneg: sum_j w_kj |v_j - v_k| = g_k - 2 sum_G C_kG (the gain-0 class has no v_j
            # below v_k), and A_kG is needed only where C_kG = A_kG
            tot = g[r] if vneg else 0.0
            rest = a1  # F_1[w] of the gain-0 class: all minus the classes 1..C
            A = 0.0
            for c in range(1, C + 1):
                if not vneg:
                    A1 = _dot(L, tf[c, 1])
                    A = _dot(L, tf[c, 0]) - vr * A1
                    rest -= A1
                if vsep:  # v-separated classes: the sign of v_j - v_k is the classes' order
                    if c > ck:
                        tot += A
                    elif c < ck:
                        tot -= A
                    continue
                if ck == 0:
                    tot += abs(A)
                    continue
                a = mst[c]
                e = mst[c + 1]
                if a == e:
                    continue
                p = pc[ck, c]
                if p < 0:  # first use in this chunk of boxes: a binary search
                    p = _first_not_below(mem, a, e, v, vr)
                while p < e and v[mem[p]] < vr:
                    p += 1
                pc[ck, c] = p
                sc = slot[mem[p]] if a < p < e else 0
                if p == a or (p < e and sc < lo):  # no member of G in the window below v_k
                    Cs = 0.0
                elif p == e or sc >= hi:  # every member of G in the window below v_k
                    if vneg:
                        A = _dot(L, tf[c, 0]) - vr * _dot(L, tf[c, 1])
                    Cs = A
                else:  # the partners before sc's box, then the members of G in it before p
                    if (sc < klo or sc >= khi) and not xk:
                        _moments(emat, L, X)
                        xk = True
                    if sc < klo:  # some of the far partners above
                        ia = sc - lo
                        Cs = (_side_dot(psa[c, 0, ia], X, _M)
                              - vr * _side_dot(psa[c, 1, ia], X, _M))
                    else:  # every far partner above, and near ones (then some far below)
                        inr = min(sc, khi) - klo
                        Cs = _dot(L, psi[c, 0, inr]) - vr * _dot(L, psi[c, 1, inr])
                        if sc > khi:
                            ib = sc - khi
                            Cs += (_side_dot(psb[c, 0, ib], X, 0)
                                   - vr * _side_dot(psb[c, 1, ib], X, 0))
                    if slot[mem[p - 1]] == sc:  # members of G in sc's box before p
                        for m in range(_P):
                            Lj[m] = pre[0, p, m] - vr * pre[1, p, m]
                        dsc = int(bid[sc] - bid[b]) + _D
                        if klo <= sc < khi:
                            for m in range(_P):
                                tmp[m] = 0.0
                            _matvec_add(tab[1, dsc], Lj, tmp)
                            Cs += _dot(L, tmp)
                        else:  # their moments on sc's side, against the target's factors
                            off = 0 if sc < klo else _M
                            xo = _M - off
                            Fw = far[1, dsc]
                            _moments(emat, Lj, mq)
                            for i in range(_M):
                                Cs += Fw[off + i] * mq[off + i] * X[xo + i]
                tot += (A if not vneg else 0.0) - 2.0 * Cs
            bnd[r] = tot if vsep or vneg else tot + abs(vr) * rest


# ApproxAP's bound over the relevant documents: ``sum_j w_kj |v_j - v_k|`` for any ``v``

@njit(cache=True, **_STEP)
def _v_order(b0, b1, v, bstart, vo):
    """Each box's documents by ascending ``v``: ``vo[bstart[b]:bstart[b + 1]]``, sorted by
    :func:`~approx_gbdt._pairs._sort_desc_short` on ``-v`` from the reversed order
    (ApproxAP's ``v`` mostly falls along the sorted order): O(m + moves), at worst
    O(m log m) per box of ``m`` documents."""
    neg = np.empty(bstart[b1] - bstart[b0])
    loc = np.empty(neg.shape[0], dtype=np.int32)
    for b in range(b0, b1):
        lo = bstart[b]
        m = bstart[b + 1] - lo
        for i in range(m):
            neg[i] = -v[lo + i]
            loc[i] = m - 1 - i
        _sort_desc_short(neg[:m], loc[:m])
        for i in range(m):
            vo[lo + i] = lo + loc[i]


@njit(cache=True, **_STEP)
def _abs_totals(b0, b1, v, bstart, lag, rows, tot):
    """Node weights of 1 and ``v`` of every box's documents: ``tot[b, 0]``, ``tot[b, 1]``
    (document ``r``'s Lagrange values in row ``rows[r]`` of ``lag``)."""
    for b in range(b0, b1):
        for m in range(_P):
            tot[b, 0, m] = 0.0
            tot[b, 1, m] = 0.0
        for r in range(bstart[b], bstart[b + 1]):
            L = lag[rows[r]]
            vr = v[r]
            for m in range(_P):
                tot[b, 0, m] += L[m]
                tot[b, 1, m] += vr * L[m]


@njit(cache=True, **_STEP)
def _abs_boxes(b0, b1, v, vo, bid, bstart, nlo, nhi, tab, lag, rows, tot, own, bnd, aw):
    """Targets of boxes b0..b1-1, each box's in ascending ``v``. A partner box whose members'
    ``v`` all lie at or above ``v_k`` adds ``T_v - v_k T_1`` (its node weights of ``v_j - v_k``),
    one whose members all lie at or below ``v_k`` adds ``v_k T_1 - T_v``: those partners are
    summed once per target box into two node-value vectors ``G_1``, ``G_v``, and a target reads
    ``v_k (L . G_1) + L . G_v``. A partner passes from above to inside to below at most once as
    the targets go up in ``v``, and only while ``v_k`` lies strictly inside its members' range
    does it take the pointer: a pointer into its members (in ascending ``v``) that only moves
    forward, with the running node weights ``S_1``, ``S_v`` of the members it has passed
    (those below ``v_k``); the node weights of ``|v_j - v_k|``, ``v_k (2 S_1 - T_1) + T_v -
    2 S_v``, meet the target through the box pair's table of ``w`` (O(_P^2) per target and
    such partner, O(_P) per target for the others). Partners ``[nlo[b], nhi[b])``, those
    within ``_D_ABS``."""
    T = np.empty(_P)
    acc = np.empty(_P)
    phi = np.empty(_P)
    g1 = np.empty(_P)
    gv = np.empty(_P)
    nw = 2 * _D_ABS + 1
    ptr = np.empty(nw, dtype=np.int64)
    state = np.empty(nw, dtype=np.int64)  # 0: above v_k, 1: inside, 2: below
    run = np.empty((nw, 2, _P))
    kt = np.empty((nw, 2, _P))  # each partner's node values of 1 and v at the target box
    for b in range(b0, b1):
        lo = nlo[b]
        hi = nhi[b]
        for m in range(_P):
            phi[m] = 0.0
            g1[m] = 0.0
            gv[m] = 0.0
        for s in range(lo, hi):
            c = s - lo
            K = tab[1, int(bid[s] - bid[b]) + _D]
            for m in range(_P):
                kt[c, 0, m] = 0.0
                kt[c, 1, m] = 0.0
            _matvec_add(K, tot[s, 0], kt[c, 0])
            _matvec_add(K, tot[s, 1], kt[c, 1])
            for m in range(_P):
                phi[m] += kt[c, 0, m]
                g1[m] -= kt[c, 0, m]  # every partner starts above
                gv[m] += kt[c, 1, m]
            ptr[c] = bstart[s]
            state[c] = 0
        for i in range(bstart[b], bstart[b + 1]):
            k = vo[i]
            vk = v[k]
            for m in range(_P):
                acc[m] = 0.0
            for s in range(lo, hi):
                c = s - lo
                st = state[c]
                if st == 2:
                    continue
                e = bstart[s + 1]
                if st == 0:
                    if vk <= v[vo[bstart[s]]]:
                        continue
                    st = 1  # leaves the partners above
                    for m in range(_P):
                        g1[m] += kt[c, 0, m]
                        gv[m] -= kt[c, 1, m]
                if vk >= v[vo[e - 1]]:
                    st = 2  # joins the partners below
                    for m in range(_P):
                        g1[m] += kt[c, 0, m]
                        gv[m] -= kt[c, 1, m]
                    state[c] = st
                    continue
                if state[c] == 0:
                    for m in range(_P):
                        run[c, 0, m] = 0.0
                        run[c, 1, m] = 0.0
                state[c] = st
                p = ptr[c]
                while p < e and v[vo[p]] < vk:
                    j = vo[p]
                    L = lag[rows[j]]
                    vj = v[j]
                    for m in range(_P):
                        run[c, 0, m] += L[m]
                        run[c, 1, m] += vj * L[m]
                    p += 1
                ptr[c] = p
                for m in range(_P):
                    T[m] = (vk * (2.0 * run[c, 0, m] - tot[s, 0, m])
                            + tot[s, 1, m] - 2.0 * run[c, 1, m])
                _matvec_add(tab[1, int(bid[s] - bid[b]) + _D], T, acc)
            L = lag[rows[k]]
            bnd[k] = _dot(L, acc) + vk * _dot(L, g1) + _dot(L, gv)
            aw[k] = _dot(L, phi) - own[k]


@njit(cache=True, **_STEP)
def _abs_setup(x, gt, lag, rows):
    """Boxes with their partners within ``_D_ABS``, self terms of ``w`` and, where ``rows``
    is empty, the Lagrange values (in a new array, ``rows`` the identity)."""
    z, lam, tab, sc, far, emat, t, slot, bid, bstart, ends, nb = _setup(x, gt)
    nlo = ends[0]
    nhi = ends[3]
    _partners(bid, nb, _D_ABS, nlo, nhi)
    n = x.shape[0]
    if rows.shape[0] == 0:
        lag = np.empty((n, _P))
        rows = np.empty(n, dtype=rows.dtype)
        for r in range(n):
            rows[r] = r
            _lagrange(t[r], z, lam, lag[r])
    own = np.empty(n)
    _self_terms(t, sc[1], own)
    return tab, bid, bstart, nlo, nhi, nb, lag, rows, own


@njit(cache=True, **_ENTRY)
def grid_abs_seq(x, v, bnd, aw, gt, lag, rows):
    """``bnd[k] = sum_{j != k} w_kj |v_j - v_k|`` and ``aw[k] = sum_{j != k} w_kj`` of one
    sorted query by the grid, for ``v`` in any order (ApproxAP's bound over its relevant
    documents; module notes), over the pairs at most ``_D_ABS`` boxes apart (the others add
    less than ``e^-20`` of their weights): O(1) per document and partner box, O(_P) per
    document, O(_P^2) per pair of boxes and per document and partner box whose members' ``v``
    straddle the document's, after a sort of each box by ``v``. ``lag[rows[r]]``: document
    ``r``'s Lagrange values on this ``x`` (the positions step's), or ``rows`` empty (computed
    here)."""
    tab, bid, bstart, nlo, nhi, nb, lag, rows, own = _abs_setup(x, gt, lag, rows)
    vo = np.empty(x.shape[0], dtype=np.int64)
    tot = np.empty((nb, 2, _P))
    b0 = np.int64(0)  # a run-time 0: a literal 0 would compile the callees once more
    _v_order(b0, nb, v, bstart, vo)
    _abs_totals(b0, nb, v, bstart, lag, rows, tot)
    _abs_boxes(b0, nb, v, vo, bid, bstart, nlo, nhi, tab, lag, rows, tot, own, bnd, aw)


@njit(parallel=True, cache=True, **_ENTRY)
def grid_abs_par(x, v, bnd, aw, gt, nt, lag, rows):
    """:func:`grid_abs_seq` with the boxes split across ``nt`` threads."""
    tab, bid, bstart, nlo, nhi, nb, lag, rows, own = _abs_setup(x, gt, lag, rows)
    vo = np.empty(x.shape[0], dtype=np.int64)
    tot = np.empty((nb, 2, _P))
    nch = min(nb, 4 * nt)
    for c in prange(nch):
        b0 = nb * c // nch
        b1 = nb * (c + 1) // nch
        _v_order(b0, b1, v, bstart, vo)
        _abs_totals(b0, b1, v, bstart, lag, rows, tot)
    for c in prange(nch):
        _abs_boxes(nb * c // nch, nb * (c + 1) // nch, v, vo, bid, bstart, nlo, nhi, tab, lag,
                   rows, tot, own, bnd, aw)


@njit(cache=True, **_STEP)
def abs_cost(x, v, n, cap):
    """Work of :func:`grid_abs_seq` on one sorted query with weights ``v``: ``(inside,
    partners)``, the sums over the documents ``k`` of the partner boxes (within ``_D_ABS``)
    whose members' ``v`` lie on both sides of ``v_k`` (``min v < v_k < max v``: those take the
    pointer, O(_P^2) each) and of all their partner boxes (O(1) each). The count of ``inside``
    stops at the end of the box where it passes ``cap``."""
    nb, cnt, ends = _box_partners(x, n, _D_ABS)
    partners = 0
    for b in range(nb):
        partners += cnt[b] * (ends[1, b] - ends[0, b])
    vlo = np.empty(nb)
    vhi = np.empty(nb)
    r = 0
    for b in range(nb):
        lo = v[r]
        hi = v[r]
        for i in range(r, r + cnt[b]):
            lo = min(lo, v[i])
            hi = max(hi, v[i])
        vlo[b] = lo
        vhi[b] = hi
        r += cnt[b]
    inside = 0
    r = 0
    for b in range(nb):
        if inside > cap:
            break
        for i in range(r, r + cnt[b]):
            vk = v[i]
            for s in range(ends[0, b], ends[1, b]):
                if vlo[s] < vk < vhi[s]:
                    inside += 1
        r += cnt[b]
    return inside, partners
