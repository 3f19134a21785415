"""Pair loops: smoothed positions and the measure-independent chain-rule sums, fast path.

Notation (one query of ``n`` documents, scores ``s``; Qin, Liu & Li 2010):

    sig(x)   = 1 / (1 + exp(-x))
    pos^_i   = 1 + sum_{j != i} sig(alpha (s_j - s_i))                    smoothed position
    sig_kj   = sig(alpha (s_j - s_k)),   w_kj = sig_kj (1 - sig_kj)       (w symmetric)

For a measure ``M(pos^)`` with ``v_i = dM/dpos^_i`` the chain rule gives, without any n x n matrix,

    dM/ds_k   = alpha sum_j w_kj (v_j - v_k)
    d2M/ds_k2 = alpha^2 [ - sum_j w_kj (1 - 2 sig_kj)(v_j - v_k)
                          + sum_{i,j} H_ij u_i u_j ],   u_i = w_ik (i != k), u_k = -sum_j w_kj

where ``H = d2M/dpos^2``. For a separable measure (``H`` diagonal, ``H_ii = e_i``) the quadratic
form is ``sum_j w_kj^2 e_j + e_k (sum_j w_kj)^2``; a coupled measure (ApproxAP) adds its
off-diagonal part (``_measure_terms``). The loops here never look at the measure: they take
``v`` and ``e`` per document and return the sums, which ``_sorted_finish`` combines into the
gradient and the Hessian approximation of ``L = -M``.

Each query is sorted by score, descending, from the previous order (an insertion sort; beyond
8 n + 64 moves, a radix sort of the order as it stands in the long tiers, ``_resort_desc``, and
a merge sort afresh in the short tier, ``_sort_desc_short``). With
x_r = alpha (s_(r) - s_(0)) non-increasing, a pair r < j has e_rj = exp(x_j - x_r) in (0, 1]
and

    sig(alpha (s_j - s_r)) = e / (1 + e),   sig(alpha (s_r - s_j)) = 1 / (1 + e),   w = sig sig'.

1. Window. Pairs with x_r - x_j > T (T = _T = 37) are saturated: their sigmoids are 0 and 1 up
   to e^-T < 8.6e-17, and w < e^-T. Row r therefore visits only j in (r, jend_r); the far pairs
   are counted exactly by index arithmetic (pos^_(r) = 1 + r + window corrections) and add
   nothing to the gradient and Hessian sums. Error bound per document (n documents, v and e as
   in the module docstring, before normalisation and weights, which only rescale by at most
   1 / ln 2 and w_i):
       |d pos^|   <= (n - 1) e^-T
       |d grad|   <= alpha (n - 1) e^-T * 2 max|v|                     (+ the d pos^ effect)
       |d bound|  <= alpha^2 (n - 1) e^-T * 2 max|v|
       |d exact|  <= alpha^2 (n - 1) e^-T * (2 max|v| + max|e| (1 + (n - 1) / 2))
   The d pos^ effect on v is |dv| <= max|v'| (n - 1) e^-T. For n = 1e5 all of these are below
   1e-11 relative to the natural scales alpha max|v| and alpha^2 (max|v| + n max|e|).
2. No exp per pair. Rows are cut into blocks of span at most _L = 300 in x; with c_b the first
   x of block b, ex_j = exp(x_j - c_b(j)) in [e^-300, 1]. For j in the same block as r,
   e_rj = ex_j / ex_r; for j in the next block (a window never reaches further, as T < L),
   e_rj = exp(c_(b+1) - x_r) ex_j. One exp per document and per row, one division per pair.
   The relative error of e_rj is below 1e-13 (argument rounding for |argument| <= 2 L).
3. Every pair is visited once (r < j), updating both rows; queries of at least _PAR_MIN
   documents that hold more than a thread's share of the long queries' documents
   (``_kernels.split_at``) are split across threads by row chunks (thread-private column
   sums, reduced afterwards: O(threads n) memory); the other queries run one per thread,
   with per-thread scratch allocated once per call. Nothing of size n is allocated per
   iteration except the returned gradient and Hessian (and the buffers of a sort beyond its
   insertion sort's cap); the sort order persists between iterations in ``order``.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit, prange

HESS_EXACT = 0
HESS_BOUND = 1
HESS_ABS = 2
HESS_MIXED = 3
HESS_CONSTANT = 4
HESS_MIXED_SUM = 5
HESS_BOUND_SUM = 6

_T = 37.0
_L = 300.0
_PAR_MIN = 4096
_CHUNK = 64
_TILE = 2048  # columns per tile in the pair loops (about 16 KB per array)

# The pair loops (``*_seg``) run over zero-based slices (no negative-index wraparound) with
# ``error_model="numpy"`` (no zero-division branch; 1 + e >= 1 anyway) and these fast-math
# flags, so that LLVM vectorises them, divisions included: 2-5x faster than scalar loops.
_FM = {"reassoc", "contract", "nsz"}

# Numba builds a Python wrapper and a C wrapper around every function it compiles, and that is
# a measurable part of a first call's compile time. No compiled function here is passed around
# as a first-class function, so none needs the C wrapper; a step that only compiled code calls
# needs no Python wrapper either. Entry points that Python calls keep theirs.
_STEP = {"no_cpython_wrapper": True, "no_cfunc_wrapper": True}
_ENTRY = {"no_cfunc_wrapper": True}

PairWork = namedtuple(
    "PairWork", ["x", "ex", "pos", "v", "e", "g", "bnd", "aa", "ab", "aw", "av", "jend", "bend"]
)
PairWork.__doc__ = """Work space of one query in sorted order (float arrays of length ``n``, int
arrays of length ``n + 1``; a thread's work space may be longer and is used from the start).

x, ex : alpha (s_(r) - s_(0)) and its exponential within the row's exp block
pos : smoothed positions
v, e : dM/dpos^ and d2M/dpos^2 (diagonal), filled by the measure
g, bnd : sum_j w (v_j - v_r) and sum_j w |v_j - v_r| (``"bound_sum"``: sum_j w (|v_j| + |v_r|))
aa, ab, aw : sum_j w (1 - 2 sig)(v_j - v_r), sum_j w^2 e_j (exact diagonal only) and sum_j w
    (from the exact loops only for the exact diagonal; the grid always writes it)
av : |v_r|, the weights of ApproxAP's bounds (``"bound_sum"``'s in the exact loops, and the
    grid's weights ``va``)
jend, bend : end of the row's window and of its exp block
"""


@njit(cache=True, **_STEP)
def pair_work(n):
    """A :class:`PairWork` for queries of up to ``n`` documents."""
    return PairWork(
        np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n),
        np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n),
        np.empty(n + 1, dtype=np.int64), np.empty(n + 1, dtype=np.int64),
    )


@njit(cache=True, **_ENTRY)
def need_exact_parts(mode):
    """Whether the Hessian mode needs the exact diagonal's sums (from Python and from the
    reference and pair-force kernels)."""
    return mode == HESS_EXACT or mode == HESS_ABS or mode == HESS_MIXED or mode == HESS_MIXED_SUM


@njit(inline="always", cache=True)
def _sig_pair(x):
    """Return ``(sig(x), sig(-x), sig(x) sig(-x))`` with one exp, stable for any ``x``."""
    e = math.exp(-abs(x))
    p = 1.0 / (1.0 + e)
    q = e * p
    if x >= 0.0:
        return p, q, p * q
    return q, p, p * q



@njit(inline="always", cache=True)
def query_weights(weights, a, b):
    """The per-document weights of the query ``[a, b)``: ``weights[a:b]``, or ``weights``
    itself when it is empty (no weights)."""
    return weights[a:b] if weights.shape[0] > 0 else weights


@njit(inline="always", cache=True)
def _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bound):
    """Positive (or exact) Hessian of L = -M for one document from the pieces of d2M."""
    if mode == HESS_EXACT:
        return -exact_m
    if mode == HESS_BOUND or mode == HESS_BOUND_SUM:
        return bound
    if mode == HESS_ABS:
        return abs(exact_m)
    if mode == HESS_MIXED or mode == HESS_MIXED_SUM:  # ``bound``: the floor's sum
        h = -exact_m
        fl = floor * bound
        return h if h > fl else fl
    return constant


@njit(inline="always", cache=True)
def bound_weights(n, W, absolute):
    """``W.v``, the weights of the bound's pair terms ``w |v_j - v_k|``, or with ``absolute``
    ``|v|`` (into ``W.av``): the weights of ``"bound_sum"``'s ``w (|v_j| + |v_k|)`` and of
    ApproxAP's bound on the grid. Whole arrays (rows ``0..n-1`` are the query's), as ``W.v``
    is."""
    if not absolute:
        return W.v
    av = W.av
    for r in range(n):
        av[r] = abs(W.v[r])
    return av


@njit(inline="always", cache=True)
def exact_curvature(aa, ab, e, aw):
    """``d2M/ds_k^2 / alpha^2`` of a separable measure for one document from its chain sums
    (``aa``, ``ab``, ``aw``) and ``e = d2M/dpos^2``: ``-aa + ab + e aw^2``. The exact Hessian
    diagonal of L = -M is ``-alpha^2`` times it (:func:`finish_rows`; the grid's bound skips
    the documents where that is above the mixed Hessian's floor, ``_grid._chain_boxes``)."""
    return -aa + ab + e * aw * aw


@njit(inline="always", cache=True)
def floor_sum(v, aw, g):
    """The sum under the floor of the ``"mixed_sum"`` Hessian of a document, from its chain
    sums ``aw = sum_{j != k} w_kj`` and ``g = sum_j w_kj (v_j - v_k)``, where every ``v`` is
    at most 0 (separable measures): ``sum_j w_kj |v_j| = -g - v_k aw`` where ``v_k = 0`` (the
    bound's own value there), else ``sum_j w_kj (|v_j| + |v_k|) / 2 = -g / 2 - v_k aw``; at
    least 0 (rounding)."""
    f = -g if v == 0.0 else -0.5 * g - v * aw
    return f if f > 0.0 else 0.0



_SIGN = np.uint64(1) << np.uint64(63)
_BYTE = np.uint64(255)


@njit(inline="always", cache=True)
def _before(s, a, b, by_index):
    """Whether document ``a`` goes strictly before ``b`` in descending order of ``s`` (a tie
    never does, except with the constant ``by_index``: then the lower index goes first)."""
    return s[a] > s[b] or (by_index and s[a] == s[b] and a < b)


@njit(cache=True, **_STEP)
def _insertion(s, order, lo, hi, by_index, cap):
    """Insertion sort of ``order[lo:hi]`` until it has made more than ``cap`` moves. Returns
    the end of the sorted head ``order[lo:end]`` (``hi`` when all of it is sorted)."""
    moves = 0
    for i in range(lo + 1, hi):
        oi = order[i]
        j = i
        while j > lo and _before(s, oi, order[j - 1], by_index):
            order[j] = order[j - 1]
            j -= 1
        order[j] = oi
        moves += i - j
        if moves > cap:
            return i + 1
    return hi


@njit(cache=True, **_STEP)
def _radix_desc(s, order):
    """Stable sort of ``order`` (indices into ``s``) by descending ``s``: ties keep their order
    in ``order``. A least-significant-digit radix sort on the bits of ``s`` (8 passes of one
    byte, a pass skipped where every key has the same byte): O(n) with no comparisons, and no
    reads of ``s`` through ``order`` after the first pass, which costs a comparison sort of a
    long query most of its time. The key of a float is its bit pattern made monotone: for
    ``s >= 0`` (``-0.0`` counts as ``0.0``) the bits with the sign bit cleared and the rest
    inverted, for ``s < 0`` the bits as they are, so that a larger ``s`` gets a smaller
    unsigned key (finite ``s``)."""
    n = order.shape[0]
    if n < 2:
        return
    keys = np.empty(n)
    for i in range(n):
        keys[i] = s[order[i]] + 0.0  # -0.0 + 0.0 = 0.0
    ku = keys.view(np.uint64)
    count = np.zeros((8, 256), dtype=np.int64)
    for i in range(n):
        b = ku[i]
        k = b if b & _SIGN else ~b & ~_SIGN
        ku[i] = k
        for p in range(8):
            count[p, (k >> np.uint64(8 * p)) & _BYTE] += 1
    src_k, dst_k = ku, np.empty(n, dtype=np.uint64)
    src_o, dst_o = order, np.empty_like(order)
    moved = False
    for p in range(8):
        c = count[p]
        shift = np.uint64(8 * p)
        if c[(src_k[0] >> shift) & _BYTE] == n:
            continue  # every key has this byte: the pass would not move anything
        total = 0
        for d in range(256):
            t = c[d]
            c[d] = total
            total += t
        for i in range(n):
            k = src_k[i]
            d = (k >> shift) & _BYTE
            j = c[d]
            c[d] = j + 1
            dst_k[j] = k
            dst_o[j] = src_o[i]
        src_k, dst_k = dst_k, src_k
        src_o, dst_o = dst_o, src_o
        moved = not moved
    if moved:  # the result is in the buffer
        for i in range(n):
            order[i] = src_o[i]


@njit(inline="always", cache=True)
def _resort_desc(s, order, by_index):
    """Sort ``order`` (in-query indices) by descending ``s`` from the last call's order (an
    unset order, ``order[0] < 0``, starts from the identity); stable: ties keep their last
    order, or, with the constant ``by_index``, go in index order. An insertion sort while it
    has made at most ``8 n + 64`` moves (O(n + moves): most boosting iterations move few
    documents far); beyond that a sort afresh: :func:`_radix_desc` of the order as it stands
    (ties keep it: the insertion sort moved no tie past another), or :func:`argsort_desc`
    with ``by_index``."""
    n = s.shape[0]
    if n == 0:
        return
    if order[0] < 0:
        for i in range(n):
            order[i] = i
    start = n - n  # 0 as a run-time value (a literal compiles _insertion twice)
    head = _insertion(s, order, start, n, by_index, 8 * n + 64)
    if head == n:
        return
    if by_index:
        argsort_desc(s, order)
    else:
        _radix_desc(s, order)


@njit(cache=True, **_STEP)
def _sort_desc(s, order):
    """Sort ``order`` (in-query indices) by descending ``s``; adaptive, from the last order
    (ties keep it)."""
    _resort_desc(s, order, False)


@njit(cache=True, **_STEP)
def _sort_desc_short(s, order):
    """Sort ``order`` (in-query indices) by descending ``s`` from the last order, for the
    short tier's queries (below ``GRID_MIN_N``, 512 documents, unless the grid is off or its
    blocks compile in a background process, ``_kernels._schedule``) and
    the grid's boxes (``_grid._v_order``): an
    insertion sort (ties keep their last order) while it has made at most ``8 n + 64`` moves,
    else :func:`argsort_desc` afresh (ties in index order; a merge sort, which compiles
    without :func:`_radix_desc`: the short tier's first call does not pay for it)."""
    n = s.shape[0]
    if n == 0:
        return
    if order[0] < 0:
        for i in range(n):
            order[i] = i
    cap = 8 * n + 64
    moves = 0
    for i in range(1, n):
        oi = order[i]
        key = s[oi]
        j = i
        while j > 0 and s[order[j - 1]] < key:
            order[j] = order[j - 1]
            j -= 1
        order[j] = oi
        moves += i - j
        if moves > cap:
            argsort_desc(s, order)
            return


@njit(cache=True, **_STEP)
def sort_desc_by_index(s, order):
    """Sort ``order`` (in-query indices) by descending ``s``, ties in index order (the order
    of :func:`argsort_desc` for finite ``s``); adaptive, from the last order."""
    _resort_desc(s, order, True)


@njit(cache=True, **_STEP)
def argsort_desc(s, out):
    """Fill ``out`` with the indices of ``s`` by descending value, ties in index order (a
    stable bottom-up merge sort, O(n log n); the same order as
    ``np.argsort(-s, kind="stable")`` for finite ``s``, at a fraction of its compile time).
    Not :func:`_radix_desc`: the short lists' paths call it, and compiling the radix sort
    there would add about a second to their first call."""
    n = s.shape[0]
    for i in range(n):
        out[i] = i
    src = out
    dst = np.empty_like(out)
    passes = 0
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i = lo
            j = mid
            for o in range(lo, hi):
                if j >= hi or (i < mid and s[src[i]] >= s[src[j]]):
                    dst[o] = src[i]
                    i += 1
                else:
                    dst[o] = src[j]
                    j += 1
        src, dst = dst, src
        passes += 1
        width *= 2
    if passes % 2 == 1:  # the result is in the buffer
        for i in range(n):
            out[i] = src[i]


@njit(cache=True, **_STEP)
def _windows(x, ex, jend, bend):
    """Window ends (first j with x_r - x_j > T) and exp blocks of span <= L over a
    non-increasing ``x`` (tiny violations, from rounding, are harmless)."""
    n = x.shape[0]
    j = 0
    for r in range(n):
        if j < r + 1:
            j = r + 1
        xr = x[r]
        while j < n and xr - x[j] <= _T:
            j += 1
        jend[r] = j
    r = 0
    while r < n:
        c = x[r]
        b = r
        while b < n and c - x[b] <= _L:
            ex[b] = math.exp(x[b] - c)
            b += 1
        for t in range(r, b):
            bend[t] = b
        r = b


@njit(cache=True, **_STEP)
def _window_starts(x, jst):
    """First i with x_i - x_r <= T, for every row r (two-sided window start)."""
    n = x.shape[0]
    i = 0
    for r in range(n):
        xr = x[r]
        while x[i] - xr > _T:
            i += 1
        jst[r] = i


@njit(inline="always", fastmath=_FM, cache=True)
def _recip(d):
    """``1 / d`` for ``d`` in [1, 3]: a float32 division (twice the vector width of float64)
    and one Newton step in float64, relative error below 2e-14 (the float32 quotient is within
    2^-23 of 1/d, and a Newton step squares the relative error)."""
    r = np.float64(np.float32(1.0) / np.float32(d))
    return r * (2.0 - d * r)


@njit(fastmath=_FM, error_model="numpy", cache=True, **_STEP)
def _pos_seg(j0, j1, f, ex, col):
    ex = ex[j0:j1]
    col = col[j0:j1]
    acc = 0.0
    for j in range(ex.shape[0]):
        e = f * ex[j]
        q = e * _recip(1.0 + e)
        acc += q
        col[j] -= q
    return acc


@njit(inline="always", cache=True)
def _tile_span(i, c0, jend):
    """Columns ``[lo, hi)`` of row ``i`` inside the tile starting at ``c0`` (empty: lo >= hi)."""
    return max(i + 1, c0), min(jend[i], c0 + _TILE)


@njit(inline="always", cache=True)
def _segment(part, i, lo, hi, bb, x, ex):
    """Part of the columns [lo, hi) of row ``i``: ``part`` 0 lies in the exp block of row ``i``
    (before ``bb``, factor ``1 / ex_i``), ``part`` 1 in the next block (factor
    ``exp(c_next - x_i)``). Returns ``(j0, j1, factor)``, empty when ``j0 >= j1``."""
    if part == 0:
        j1 = min(hi, bb)
        return lo, j1, 1.0 / ex[i] if lo < j1 else 0.0
    j0 = max(lo, bb)
    return j0, hi, math.exp(x[bb] - x[i]) if j0 < hi else 0.0


@njit(cache=True, **_STEP)
def _pos_rows(r0, r1, x, ex, jend, bend, row, col):
    """Window part of the positions for rows r0..r1-1: row_r += sum_j q_rj, col_j -= q_rj.

    Columns are visited in tiles of ``_TILE`` for all the rows, so that a tile of the column
    arrays stays in cache while the rows sweep it (the windows of long queries span far more
    than the cache)."""
    for c0 in range(r0 + 1, jend[r1 - 1], _TILE):
        for i in range(r0, r1):
            lo, hi = _tile_span(i, c0, jend)
            if lo >= hi:
                continue
            acc = 0.0
            for part in range(2):
                j0, j1, f = _segment(part, i, lo, hi, bend[i], x, ex)
                if j0 < j1:
                    acc += _pos_seg(j0, j1, f, ex, col)
            row[i] += acc


def _named(f, name):
    """``f`` named ``name`` before it is compiled: Numba names a function's cache files after
    its qualified name, and the variants made by one factory would otherwise share them
    (processes filling one cache at once could then store one variant's code under the
    other's name)."""
    f.__name__ = f.__qualname__ = name
    return f


def _variant_named(f, name, exact):
    """``f`` named after its variant, ``name_exact`` or ``name_bound`` (:func:`_named`)."""
    return _named(f, f"{name}_{'exact' if exact else 'bound'}")


def _make_chain_seg(bsum):
    """The pair loop of the gradient's and the bound's sums over the columns ``j0..j1-1`` of
    row ``i`` (``e^{x_j - x_i} = f ex_j``; returns the row's sums): the bound's terms
    ``w |v_j - v_i|`` or, with ``bsum`` (a constant of the compiled function), ``"bound_sum"``'s
    ``w (|v_j| + |v_i|)`` from ``av = |v|`` and ``avi = |v_i|``, which the bound's loop never
    reads (it keeps its single load per column)."""

    def chain_seg(j0, j1, f, ex, v, vi, av, avi, cg, cb):
        ex, v, cg, cb = ex[j0:j1], v[j0:j1], cg[j0:j1], cb[j0:j1]
        if bsum:
            av = av[j0:j1]
        gi = 0.0
        bi = 0.0
        for j in range(ex.shape[0]):
            e = f * ex[j]
            p = 1.0 / (1.0 + e)
            w = e * p * p
            dv = v[j] - vi
            wd = w * dv
            gi += wd
            cg[j] -= wd
            if bsum:
                ad = w * (av[j] + avi)
            else:
                ad = w * abs(dv)
            bi += ad
            cb[j] += ad
        return gi, bi

    return njit(fastmath=_FM, error_model="numpy", cache=True, **_STEP)(
        _named(chain_seg, "_chain_seg_bsum" if bsum else "_chain_seg_bound"))


_chain_seg_bound = _make_chain_seg(False)
_chain_seg_bsum = _make_chain_seg(True)


@njit(fastmath=_FM, error_model="numpy", cache=True, **_STEP)
def _chain_seg_exact(j0, j1, f, ex, v, ee, vi, ei, cg, cb, ca, cB, cw):
    ex, v, ee = ex[j0:j1], v[j0:j1], ee[j0:j1]
    cg, cb, ca, cB, cw = cg[j0:j1], cb[j0:j1], ca[j0:j1], cB[j0:j1], cw[j0:j1]
    gi = 0.0
    bi = 0.0
    ai = 0.0
    Bi = 0.0
    wi = 0.0
    for j in range(ex.shape[0]):
        e = f * ex[j]
        p = 1.0 / (1.0 + e)
        w = e * p * p
        dv = v[j] - vi
        wd = w * dv
        gi += wd
        cg[j] -= wd
        ad = w * abs(dv)
        bi += ad
        cb[j] += ad
        t = wd * ((1.0 - e) * p)
        ai += t
        ca[j] += t
        w2 = w * w
        Bi += w2 * ee[j]
        cB[j] += w2 * ei
        wi += w
        cw[j] += w
    return gi, bi, ai, Bi, wi


@njit(fastmath=_FM, error_model="numpy", cache=True, **_STEP)
def _bound_seg(j0, j1, f, ex, v, vi, cb, cw):
    ex, v, cb, cw = ex[j0:j1], v[j0:j1], cb[j0:j1], cw[j0:j1]
    bi = 0.0
    wi = 0.0
    for j in range(ex.shape[0]):
        e = f * ex[j]
        p = 1.0 / (1.0 + e)
        w = e * p * p
        ad = w * abs(v[j] - vi)
        bi += ad
        cb[j] += ad
        wi += w
        cw[j] += w
    return bi, wi


def _make_chain_rows(exact):
    """The window part of the chain-rule sums for rows r0..r1-1 (both ends of every pair), with
    the columns visited in tiles as in ``_pos_rows``: all five sums (``exact``) or only the
    gradient and the bound. ``exact`` is a constant of the compiled function, so that each
    variant compiles only its own pair loop."""

    def chain_rows(r0, r1, x, ex, jend, bend, v, ee, bv, bsum, rg, rb, ra, rB, rw, cg, cb, ca, cB,
                   cw):
        for c0 in range(r0 + 1, jend[r1 - 1], _TILE):
            for i in range(r0, r1):
                lo, hi = _tile_span(i, c0, jend)
                if lo >= hi:
                    continue
                gi = bi = ai = Bi = wi = 0.0
                for part in range(2):
                    j0, j1, f = _segment(part, i, lo, hi, bend[i], x, ex)
                    if j0 >= j1:
                        continue
                    if exact:
                        g, b, a, B, w = _chain_seg_exact(j0, j1, f, ex, v, ee, v[i], ee[i],
                                                         cg, cb, ca, cB, cw)
                        ai += a
                        Bi += B
                        wi += w
                    elif bsum:
                        g, b = _chain_seg_bsum(j0, j1, f, ex, v, v[i], bv, bv[i], cg, cb)
                    else:
                        g, b = _chain_seg_bound(j0, j1, f, ex, v, v[i], bv, 0.0, cg, cb)
                    gi += g
                    bi += b
                rg[i] += gi
                rb[i] += bi
                if exact:
                    ra[i] += ai
                    rB[i] += Bi
                    rw[i] += wi

    return njit(cache=True, **_STEP)(_variant_named(chain_rows, "_chain_rows", exact))


_chain_rows_exact = _make_chain_rows(True)
_chain_rows_bound = _make_chain_rows(False)


@njit(inline="always", cache=True)
def _chain_rows(r0, r1, x, ex, jend, bend, v, ee, need_exact, bv, bsum,
                rg, rb, ra, rB, rw, cg, cb, ca, cB, cw):
    """``_chain_rows_exact`` or ``_chain_rows_bound``; a caller whose ``need_exact`` is a
    constant compiles only that one."""
    if need_exact:
        _chain_rows_exact(r0, r1, x, ex, jend, bend, v, ee, bv, bsum, rg, rb, ra, rB, rw,
                          cg, cb, ca, cB, cw)
    else:
        _chain_rows_bound(r0, r1, x, ex, jend, bend, v, ee, bv, bsum, rg, rb, ra, rB, rw,
                          cg, cb, ca, cB, cw)


@njit(cache=True, **_STEP)
def _bound_rows(r0, r1, x, ex, jend, bend, v, rb, rw, cb, cw):
    """The window part of the bound ``sum_j w_ij |v_j - v_i|`` and of ``sum_j w_ij`` alone, for
    rows r0..r1-1 (both ends of every pair; tiles as in ``_pos_rows``)."""
    for c0 in range(r0 + 1, jend[r1 - 1], _TILE):
        for i in range(r0, r1):
            lo, hi = _tile_span(i, c0, jend)
            if lo >= hi:
                continue
            bi = wi = 0.0
            for part in range(2):
                j0, j1, f = _segment(part, i, lo, hi, bend[i], x, ex)
                if j0 < j1:
                    b, w = _bound_seg(j0, j1, f, ex, v, v[i], cb, cw)
                    bi += b
                    wi += w
            rb[i] += bi
            rw[i] += wi


@njit(parallel=True, cache=True, **_STEP)
def _par_bound(x, ex, jend, bend, v, bnd, aw, buf):
    """:func:`_bound_rows` over a whole sorted query into ``bnd`` and ``aw``, rows split
    across the threads (``buf``: ``(threads, 2, n)``)."""
    n = x.shape[0]
    nt = buf.shape[0]
    nch = (n + _CHUNK - 1) // _CHUNK
    for t in prange(nt):
        b = buf[t]
        for f in range(2):
            for r in range(n):
                b[f, r] = 0.0
        for c in range(t, nch, nt):
            _bound_rows(c * _CHUNK, min(n, (c + 1) * _CHUNK), x, ex, jend, bend, v,
                        b[0], b[1], b[0], b[1])
    for r in prange(n):
        s0 = 0.0
        s1 = 0.0
        for t in range(nt):
            s0 += buf[t, 0, r]
            s1 += buf[t, 1, r]
        bnd[r] = s0
        aw[r] = s1


@njit(inline="always", cache=True)
def _sorted_bound(n, W, big, nt):
    """``W.bnd = sum_j w_kj |v_j - v_k|`` and ``W.aw = sum_j w_kj`` (j != k) of one prepared
    query by the exact windowed loops, rows split across ``nt`` threads when ``big``: the
    two chain-rule sums that ApproxAP's bound on the grid needs of its relevant documents."""
    x, ex, jend, bend, v = W.x[:n], W.ex[:n], W.jend[:n], W.bend[:n], W.v[:n]
    if big:
        _par_bound(x, ex, jend, bend, v, W.bnd[:n], W.aw[:n], np.empty((nt, 2, n)))
        return
    bnd = W.bnd[:n]
    aw = W.aw[:n]
    for r in range(n):
        bnd[r] = 0.0
        aw[r] = 0.0
    r0 = np.int64(0)  # a run-time 0, as _par_bound's: a literal 0 would compile the rows twice
    _bound_rows(r0, n, x, ex, jend, bend, v, bnd, aw, bnd, aw)


@njit(parallel=True, cache=True, **_STEP)
def _par_positions(x, ex, jend, bend, pos, buf):
    n = x.shape[0]
    nt = buf.shape[0]
    nch = (n + _CHUNK - 1) // _CHUNK
    for t in prange(nt):
        b = buf[t]
        for r in range(n):
            b[r] = 0.0
        for c in range(t, nch, nt):
            _pos_rows(c * _CHUNK, min(n, (c + 1) * _CHUNK), x, ex, jend, bend, b, b)
    for r in prange(n):
        acc = 1.0 + r
        for t in range(nt):
            acc += buf[t, r]
        pos[r] = acc


def _make_par_chain(exact):
    """The chain-rule sums of one long query with its rows split across threads in chunks of
    ``_CHUNK``: all five sums (``exact``) or only the gradient and the bound, a constant of the
    compiled function as in :func:`_make_chain_rows`."""

    def par_chain(x, ex, jend, bend, v, ee, bv, bsum, g, bnd, aa, ab, aw, buf):
        n = x.shape[0]
        nt = buf.shape[0]
        nch = (n + _CHUNK - 1) // _CHUNK
        for t in prange(nt):
            b = buf[t]
            for f in range(5):
                for r in range(n):
                    b[f, r] = 0.0
            for c in range(t, nch, nt):
                r0 = c * _CHUNK
                r1 = min(n, (c + 1) * _CHUNK)
                _chain_rows(r0, r1, x, ex, jend, bend, v, ee, exact, bv, bsum,
                            b[0], b[1], b[2], b[3], b[4], b[0], b[1], b[2], b[3], b[4])
        for r in prange(n):
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            s4 = 0.0
            for t in range(nt):
                s0 += buf[t, 0, r]
                s1 += buf[t, 1, r]
                s2 += buf[t, 2, r]
                s3 += buf[t, 3, r]
                s4 += buf[t, 4, r]
            g[r] = s0
            bnd[r] = s1
            aa[r] = s2
            ab[r] = s3
            aw[r] = s4

    return njit(parallel=True, cache=True, **_STEP)(_variant_named(par_chain, "_par_chain", exact))


_par_chain_exact = _make_par_chain(True)
_par_chain_bound = _make_par_chain(False)


@njit(inline="always", cache=True)
def _sorted_prep(s, order, alpha, W):
    """Gather ``x`` of the query sorted by ``order``, build its windows and exp blocks
    (sequential, O(n))."""
    n = s.shape[0]
    top = s[order[0]]
    for r in range(n):
        W.x[r] = alpha * (s[order[r]] - top)
    _windows(W.x[:n], W.ex[:n], W.jend[:n], W.bend[:n])


@njit(inline="always", cache=True)
def _positions_rows(n, W):
    """Sorted-order positions ``W.pos`` of one prepared query, on the calling thread."""
    pos = W.pos[:n]
    for r in range(n):
        pos[r] = 1.0 + r
    # a literal 0: Numba compiles a specialisation with r0 = 0 known, 3-7 % faster on short
    # queries (the row split compiles a second one, for its run-time r0)
    _pos_rows(0, n, W.x[:n], W.ex[:n], W.jend[:n], W.bend[:n], pos, pos)


@njit(cache=True, **_STEP)
def _positions_rows_par(n, W, nt):
    """Sorted-order positions ``W.pos`` of one prepared long query, rows split across threads."""
    _par_positions(W.x[:n], W.ex[:n], W.jend[:n], W.bend[:n], W.pos[:n], np.empty((nt, n)))


@njit(inline="always", cache=True)
def _sorted_positions(s, order, alpha, W):
    """Sorted-order positions ``W.pos`` of one query of the short tier, on the calling
    thread."""
    _sort_desc_short(s, order)
    _sorted_prep(s, order, alpha, W)
    _positions_rows(s.shape[0], W)


@njit(inline="always", cache=True)
def _sorted_chain(n, W, need_exact, bsum):
    """Sorted-order chain-rule sums of one query, on the calling thread (the bound's sums, or
    with ``bsum`` those of ``"bound_sum"``, which no mode with the exact sums has)."""
    g = W.g[:n]
    bnd = W.bnd[:n]
    aa = W.aa[:n]
    ab = W.ab[:n]
    aw = W.aw[:n]
    for r in range(n):
        g[r] = 0.0
        bnd[r] = 0.0
        aa[r] = 0.0
        ab[r] = 0.0
        aw[r] = 0.0
    bv = bound_weights(n, W, bsum)
    # a literal 0, as in _positions_rows
    _chain_rows(0, n, W.x[:n], W.ex[:n], W.jend[:n], W.bend[:n], W.v[:n], W.e[:n],
                need_exact, bv[:n], bsum, g, bnd, aa, ab, aw, g, bnd, aa, ab, aw)


@njit(inline="always", cache=True)
def _sorted_chain_par(n, W, need_exact, bsum, nt):
    """Sorted-order chain-rule sums of one long query, rows split across threads (the bound's
    sums, or with ``bsum`` those of ``"bound_sum"``); a caller whose ``need_exact`` is a
    constant compiles only that variant of the row split."""
    bv = bound_weights(n, W, bsum)
    args = (W.x[:n], W.ex[:n], W.jend[:n], W.bend[:n], W.v[:n], W.e[:n], bv[:n], bsum, W.g[:n],
            W.bnd[:n], W.aa[:n], W.ab[:n], W.aw[:n], np.empty((nt, 5, n)))
    if need_exact:
        _par_chain_exact(*args)
    else:
        _par_chain_bound(*args)


@njit(cache=True, **_STEP)
def _sorted_finish(n, W, order, alpha, mode, floor, constant, normalize, need_exact, off,
                   wts, grad, hess):
    """Combine the sums into the gradient and Hessian of L, normalise, weight and scatter
    (:func:`finish_rows` after the windowed loops)."""
    finish_rows(n, W, order, alpha, mode, floor, constant, normalize, need_exact, off, wts,
                grad, hess, True)


@njit(inline="always", cache=True)
def finish_rows(n, W, order, alpha, mode, floor, constant, normalize, need_exact, off, wts,
                grad, hess, windowed):
    """The gradient and Hessian of L from the sums in ``W`` (row ``r`` of the work space is
    document ``order[r]`` of the query), normalised by log2(1 + S) / S with
    S = alpha sum_r |g_r|, weighted and scattered.

    ``off`` holds a coupled measure's off-diagonal part of the exact diagonal (empty for a
    separable measure). After the ``windowed`` loops S also counts, for every row, the first
    skipped pair (at most e^-T relative): negligible unless every pair of the query is
    saturated, where it keeps log2(1 + S) / S at its limit 1 / ln 2 as in the exact kernel
    (S tiny but positive there).
    """
    alpha2 = alpha * alpha
    g = W.g[:n]
    bnd = W.bnd[:n]
    tot = 0.0
    for r in range(n):
        tot += abs(g[r])
    if normalize and windowed:
        x = W.x
        v = W.v
        jend = W.jend
        for r in range(n):
            j = jend[r]
            if j < n:
                e = math.exp(x[j] - x[r])
                p = 1.0 / (1.0 + e)
                tot += 2.0 * e * p * p * abs(v[j] - v[r])
    tot *= alpha
    f = 1.0
    if normalize and tot > 0.0:
        f = math.log2(1.0 + tot) / tot
    has_w = wts.shape[0] == n
    has_off = off.shape[0] > 0
    for r in range(n):
        if mode == HESS_MIXED_SUM:  # its floor's sum, from the gradient's own sums
            bound = alpha2 * floor_sum(W.v[r], W.aw[r], g[r])
        else:
            bound = alpha2 * bnd[r]
        exact_m = 0.0
        if need_exact:
            exact_m = alpha2 * exact_curvature(W.aa[r], W.ab[r], W.e[r], W.aw[r])
            if has_off:
                exact_m += alpha2 * off[r]
        gr = -alpha * g[r] * f
        hr = _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bound) * f
        o = order[r]
        if has_w:
            gr *= wts[o]
            hr *= wts[o]
        grad[o] = gr
        hess[o] = hr
