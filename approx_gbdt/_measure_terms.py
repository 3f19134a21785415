"""Measure terms: what a measure contributes per document, ``v = dM/dpos^`` and ``e = d2M/dpos^2``.

A separable measure of one query is

    M = inv_z * sum_i g_i t(pos^_i),     t(p) = base(p) T_k(p)

with a per-document gain ``g_i`` and a per-query normaliser ``inv_z`` (both computed once per
dataset, in NumPy, by the objective) and a position term ``t`` selected by an integer kind
(``TERM_*``; an integer keeps every kernel compiled once and cacheable). ``torch_term`` is
the same ``t`` on PyTorch tensors. The smoothed
truncation ``T_k(p) = sig(beta (k + 1/2 - p))`` applies when ``k > 0`` (``T = 1`` otherwise).
Then ``v_i = inv_z g_i t'(pos^_i)`` and ``e_i = inv_z g_i t''(pos^_i)``, and the pair loops
(``_pairs``) do the rest.

Position terms (``base``, with ``p`` the smoothed position, ``p >= 1``):

    TERM_LOG    1 / log2(1 + p)            DCG discount (ApproxNDCG, ApproxDCG)
    TERM_RECIP  1 / p                      reciprocal rank (ApproxMRR)
    TERM_ONE    1                          with k: smoothed top-k indicator (precision, recall)
    TERM_GEOM   theta^(p - 1)              rank-biased precision, persistence theta (ApproxRBP)

ApproxAP couples its relevant documents, ``M = (1/R) sum_a q_a (1 + sum_{b != a}
sig(beta (p_a - p_b)))`` with ``q_a = 1 / p_a``; its ``v``, ``e`` and the off-diagonal part of the
exact Hessian diagonal are here too, over the relevant documents in sorted order: the
second-level sums (``sig(beta (p_a - p_b))`` and its derivatives over pairs of relevant
documents) pair by pair where ``beta |p_a - p_b| <= _NEAR`` and by a series of exponentials,
O(R) in all, beyond (``_ap_far``); the exact diagonal's off-diagonal part windowed like the
first-level sums (same ``T``, ``beta`` in place of ``alpha`` and ``R`` in place of ``n``).
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit

from approx_gbdt._pairs import _ENTRY, _FM, _STEP, _sig_pair, _window_starts, _windows
from approx_gbdt._small import _SPREAD, _sig_wide

TERM_LOG = 0
TERM_RECIP = 1
TERM_ONE = 2
TERM_GEOM = 3

_LN2 = math.log(2.0)
_H_CACHE_MAX = 1024


@njit(inline="always", cache=True)
def _base(kind, p, theta):
    """Return ``(b, b', b'')`` of the position term without truncation."""
    if kind == TERM_LOG:
        # log, not log1p: a position is at least 1, where 1 + p rounded to within half an ulp
        # keeps log(1 + p) within a few ulp, and libm's log takes less than half log1p's time
        q = 1.0 + p
        lg = math.log(q)
        il = 1.0 / lg
        iq = 1.0 / q
        d0 = _LN2 * il
        d1 = -d0 * iq * il
        d2 = d0 * (2.0 + lg) * (iq * iq) * (il * il)
        return d0, d1, d2
    if kind == TERM_RECIP:
        d0 = 1.0 / p
        return d0, -d0 * d0, 2.0 * d0 * d0 * d0
    if kind == TERM_GEOM:
        lt = math.log(theta)
        d0 = math.exp((p - 1.0) * lt)
        return d0, d0 * lt, d0 * lt * lt
    return 1.0, 0.0, 0.0


@njit(inline="always", cache=True)
def _term(kind, p, k, beta, theta):
    """Return ``(t, t', t'')`` of ``base(p) T_k(p)`` (``T = 1`` when ``k <= 0``)."""
    d0, d1, d2 = _base(kind, p, theta)
    if k <= 0:
        return d0, d1, d2
    t, tc, tw = _sig_pair(beta * (k + 0.5 - p))
    t1 = -beta * tw
    t2 = beta * beta * tw * (tc - t)
    return d0 * t, d1 * t + d0 * t1, d2 * t + 2.0 * d1 * t1 + d0 * t2


_LOG2_RANKS = [np.empty(0)]  # log2(r + 1) for r = 1, 2, ..., grown on demand


def _exact_denominators(kind, width):
    """``1 / base(r)`` at the exact ranks ``r = 1..width`` (None where ``base`` is 1). The
    logarithms are libm's (``math.log2``, as compiled code takes them): NumPy's own ``log2``
    differs from it in the last bit at some integers on some CPUs."""
    if kind == TERM_LOG:
        table = _LOG2_RANKS[0]
        if table.shape[0] < width:
            size = max(width, 2 * table.shape[0])
            table = np.fromiter(map(math.log2, range(2, size + 2)), np.float64, count=size)
            _LOG2_RANKS[0] = table
        return table[:width]
    if kind == TERM_RECIP:
        return np.arange(1.0, width + 1.0)
    return None


def ideal_value(gains, group_ptr, kind, k, theta):
    """Exact best value of ``sum_r g_(r) base(r)`` per query (gains sorted descending, ranks
    ``r <= k`` when ``k > 0``): the ideal DCG@k for ``TERM_LOG``.

    In NumPy, so that an objective's first call compiles nothing for it: the gains sorted in a
    ``[query, rank]`` table (padded) where that is at most a few times the documents, else in
    one sort by query and gain; each query's terms summed in rank order either way.
    """
    sizes = np.diff(group_ptr)
    nq = sizes.shape[0]
    width = int(sizes.max()) if nq > 0 else 0
    if width == 0:
        return np.zeros(nq)
    starts = group_ptr[:-1] - group_ptr[0]
    g = gains[group_ptr[0]:group_ptr[-1]]
    n = g.shape[0]
    den = _exact_denominators(kind, width)
    if nq * width <= 4 * n:  # a [query, rank] table, padded with inf, sorted row by row
        if n == nq * width:
            table = -g.reshape(nq, width)
        else:
            table = np.full((nq, width), np.inf)
            at = np.arange(n)
            at += np.repeat(np.arange(nq) * width - starts, sizes)
            table.ravel()[at] = -g
        table.sort(axis=1)
        terms = np.negative(table, out=table)
        if n < nq * width:
            terms[np.arange(width) >= sizes[:, None]] = 0.0
        rank0 = np.arange(width)  # rank - 1 of each column
    else:  # one sort by query and gain
        qid = np.repeat(np.arange(nq), sizes)
        terms = g[np.lexsort((-g, qid))]
        rank0 = np.arange(n)  # rank - 1 of each document in that order
        rank0 -= np.repeat(starts, sizes)
    if den is not None:
        terms /= den[rank0]
    if k > 0:
        terms[..., rank0 >= k] = 0.0
    if terms.ndim == 2:
        return np.cumsum(terms, axis=1)[:, -1]
    return np.bincount(qid, weights=terms, minlength=nq)


@njit(inline="always", cache=True)
def separable_ve(n, W, gains, order, iz, kind, k, beta, theta):
    """``W.v`` and ``W.e`` in sorted order for a separable measure."""
    for r in range(n):
        gr = gains[order[r]]
        if gr == 0.0:
            W.v[r] = 0.0
            W.e[r] = 0.0
        else:
            _, f1, f2 = _term(kind, W.pos[r], k, beta, theta)
            W.v[r] = gr * f1 * iz
            W.e[r] = gr * f2 * iz


@njit(cache=True, **_ENTRY)
def separable_value(gains, inv_z, group_ptr, kind, k, beta, theta, pos):
    """Per-query ``inv_z sum_i g_i t(pos^_i)``; 0 where ``inv_z == 0``."""
    nq = group_ptr.shape[0] - 1
    out = np.zeros(nq)
    for q in range(nq):
        if inv_z[q] == 0.0:
            continue
        acc = 0.0
        for i in range(group_ptr[q], group_ptr[q + 1]):
            if gains[i] != 0.0:
                f, _, _ = _term(kind, pos[i], k, beta, theta)
                acc += gains[i] * f
        out[q] = acc * inv_z[q]
    return out


# ---------------------------------------------------------------------------------------------
# ApproxAP (coupled). In sorted order the smoothed positions are non-decreasing, so the relevant
# documents, taken in sorted order, have y_a = -beta (pos^_a - pos^_first) non-increasing.
# ---------------------------------------------------------------------------------------------

APWork = namedtuple(
    "APWork",
    ["ry", "re", "s", "u", "ts", "td", "tc", "off", "qr",
     "jst", "ridx", "rjend", "rbend", "rcnt", "isrel"],
)
APWork.__doc__ = """ApproxAP's work space of one query (float arrays of length ``n``, int arrays
of length ``n + 1``; index ``a`` runs over the relevant documents in sorted order).

ry, re : -beta (pos^_a - pos^_first) and its exponential within the exp block
s : sum_{b != a} sig(beta (pos^_a - pos^_b)) (the number of relevant documents above, smoothed)
u : u_a of the off-diagonal part, for the current document k
ts, td, tc : sum tau_ab, sum tau_ab (q_a - q_b), sum tau_ab (1 - 2 sig_ab) (q_a - q_b); ``tc``
    in full only for Hessian modes with the exact diagonal (else the far pairs' terms alone,
    or 0 on the grid: it enters only ``W.e``, which only the exact diagonal reads)
off : off-diagonal part of the exact diagonal, per document in sorted order
qr : 1 / pos^_a
jst : two-sided window start of every document (``ap_offdiag``); before it, the near end of
    every relevant document (``ap_relevant``)
ridx, rjend, rbend : sorted rank of relevant a, end of its second-level window and exp block
rcnt : number of relevant documents before sorted rank r
isrel : 1 for a relevant document (in-query order)
"""


@njit(cache=True, **_STEP)
def ap_work(n):
    """An :class:`APWork` for queries of up to ``n`` documents."""
    return APWork(
        np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n),
        np.empty(n), np.empty(n), np.empty(n),
        np.empty(n + 1, dtype=np.int64), np.empty(n + 1, dtype=np.int64),
        np.empty(n + 1, dtype=np.int64), np.empty(n + 1, dtype=np.int64),
        np.empty(n + 1, dtype=np.int64), np.empty(n + 1, dtype=np.int64),
    )


@njit(fastmath=_FM, error_model="numpy", cache=True, **_STEP)
def _ap_seg(j0, j1, f, rE, Qr, Qa, S, TS, TD, TC, need_tc):
    """The second-level pairs of relevant document ``a`` with ``j0..j1-1`` (ranked below it),
    where ``e^{ry_b - ry_a} = f rE_b``: adds to their ``S``, ``TS``, ``TD`` (and ``TC`` with
    ``need_tc``) and returns ``a``'s sums (``tc`` 0 without ``need_tc``; the flag is the same
    for the whole loop, which LLVM compiles as two loops)."""
    rE, Qr, S, TS, TD, TC = rE[j0:j1], Qr[j0:j1], S[j0:j1], TS[j0:j1], TD[j0:j1], TC[j0:j1]
    sa = 0.0
    ts = 0.0
    td = 0.0
    tc = 0.0
    for b in range(rE.shape[0]):
        e = f * rE[b]
        p = 1.0 / (1.0 + e)
        q = e * p
        tau = q * p
        sa += q
        S[b] -= q
        ts += tau
        TS[b] += tau
        t = tau * (Qa - Qr[b])
        td += t
        TD[b] -= t
        if need_tc:
            c = t * ((1.0 - e) * p)
            tc += c
            TC[b] += c
    return sa, ts, td, tc


_NEAR = 5.0  # relevant pairs further apart than this in ``ry`` take the series (_ap_far)
_TERMS = 8  # terms of the series (written out in _pow8 and _far_terms)


@njit(cache=True, **_STEP)
def _pow8(r):
    """``(r, r^2, ..., r^8)``."""
    r2 = r * r
    r3 = r2 * r
    r4 = r2 * r2
    return (r, r2, r3, r4, r4 * r, r4 * r2, r4 * r3, r4 * r4)


@njit(cache=True, **_STEP)
def _scale8(a, p):
    return (a[0] * p[0], a[1] * p[1], a[2] * p[2], a[3] * p[3], a[4] * p[4], a[5] * p[5],
            a[6] * p[6], a[7] * p[7])


@njit(cache=True, **_STEP)
def _add8(a, p, w):
    return (a[0] + w * p[0], a[1] + w * p[1], a[2] + w * p[2], a[3] + w * p[3],
            a[4] + w * p[4], a[5] + w * p[5], a[6] + w * p[6], a[7] + w * p[7])


@njit(cache=True, **_STEP)
def _far_terms(a, b, q):
    """From ``a_k = sum_j e^(k d_j)`` and ``b_k = sum_j q_j e^(k d_j)`` (``k = 1..8``, all
    ``d_j < 0``): ``sum_j sig(d_j)``, ``sum_j sig'(d_j)``, ``sum_j sig'(d_j) (q - q_j)`` and
    ``sum_j sig''(d_j) (q - q_j)`` by the first eight terms of their series."""
    d = (q * a[0] - b[0], q * a[1] - b[1], q * a[2] - b[2], q * a[3] - b[3],
         q * a[4] - b[4], q * a[5] - b[5], q * a[6] - b[6], q * a[7] - b[7])
    s0 = a[0] - a[1] + a[2] - a[3] + a[4] - a[5] + a[6] - a[7]
    s1 = a[0] - 2 * a[1] + 3 * a[2] - 4 * a[3] + 5 * a[4] - 6 * a[5] + 7 * a[6] - 8 * a[7]
    t1 = d[0] - 2 * d[1] + 3 * d[2] - 4 * d[3] + 5 * d[4] - 6 * d[5] + 7 * d[6] - 8 * d[7]
    t2 = (d[0] - 4 * d[1] + 9 * d[2] - 16 * d[3] + 25 * d[4] - 36 * d[5] + 49 * d[6]
          - 64 * d[7])
    return s0, s1, t1, t2


@njit(cache=True, **_STEP)
def _exp_diff(ry, rE, rb, i, j):
    """``e^(ry_j - ry_i)``: a quotient within one exp block, else an exponential."""
    return rE[j] / rE[i] if rb[i] == rb[j] else math.exp(ry[j] - ry[i])


@njit(fastmath=_FM, error_model="numpy", cache=True, **_STEP)
def _ap_far(R, ry, rE, rb, Qr, ne, S, TS, TD, TC):
    """Adds to the second-level sums the terms of the far pairs of relevant documents, ``a``
    before ``b`` in sorted order with ``b >= ne[a]`` (``ne`` non-decreasing, where the exact
    loops stopped: ``d = ry_b - ry_a < -_NEAR``), by the series

        sig(d) = sum_k (-1)^(k+1) e^(k d),   sig'(d) = sum_k (-1)^(k+1) k e^(k d),
        sig''(d) = sum_k (-1)^(k+1) k^2 e^(k d)        (k = 1, 2, ..., for d < 0)

    with ``e^(k d) = e^(k ry_b) e^(-k ry_a)``: each document's far partners enter as running
    sums of ``e^(k d)`` and ``q e^(k d)`` (``q = Qr``), carried from one document to the next by
    the factors ``e^(k (ry_next - ry))`` (at most 1), the partners that become far added as
    they do. A row ``a`` gains ``sig``, ``sig'``, ``sig' (q_a - q_b)`` and
    ``sig'' (q_a - q_b)`` of ``d`` summed over its far ``b`` (``S``, ``TS``, ``TD``, ``TC``), a
    column ``b`` loses or gains the same of its far ``a`` as :func:`_ap_seg` does. O(R) with
    ``_TERMS`` (8) terms instead of O(pairs within ``T``). The terms left
    out are at most ``(_TERMS + 1)^2 e^(-(_TERMS + 1) _NEAR)`` (below 3.5e-16 of the smallest
    far term ``e^-_NEAR``); the pairs beyond ``T`` are in the sums too (each below
    1e-16)."""
    z = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    # rows, last to first: the far partners of row a are [ne[a], R)
    a1, aq = z, z
    j = R
    for a in range(R - 1, -1, -1):
        if j < R:
            p = _pow8(_exp_diff(ry, rE, rb, a, a + 1))
            a1 = _scale8(a1, p)
            aq = _scale8(aq, p)
        while j > ne[a]:
            j -= 1
            p = _pow8(_exp_diff(ry, rE, rb, a, j))
            a1 = _add8(a1, p, 1.0)
            aq = _add8(aq, p, Qr[j])
        if j < R:
            s0, s1, t1, t2 = _far_terms(a1, aq, Qr[a])
            S[a] += s0
            TS[a] += s1
            TD[a] += t1
            TC[a] += t2
    # columns, first to last: the far partners of column b are [0, i), those with ne <= b
    a1, aq = z, z
    i = 0
    for b in range(R):
        if i > 0:
            p = _pow8(_exp_diff(ry, rE, rb, b - 1, b))
            a1 = _scale8(a1, p)
            aq = _scale8(aq, p)
        while i < b and ne[i] <= b:
            p = _pow8(_exp_diff(ry, rE, rb, i, b))
            a1 = _add8(a1, p, 1.0)
            aq = _add8(aq, p, Qr[i])
            i += 1
        if i > 0:
            # with q_a - q_b = -(q_b - q_a): the row's sums at q_b, signs of TD and TC turned
            s0, s1, t1, t2 = _far_terms(a1, aq, Qr[b])
            S[b] -= s0
            TS[b] += s1
            TD[b] += t1
            TC[b] -= t2


@njit(cache=True, **_STEP)
def ap_relevant(n, W, A, order, rel_local, beta, sums, need_tc):
    """Relevant documents in sorted order, their ``ry``, ``qr``, second-level windows and near
    ends and, when ``sums``, their second-level sums (``s``, ``ts``, ``td``, ``tc``, the last
    only ``need_tc``, :func:`ap_relevant_sums`): the pairs within ``_NEAR`` of each other in
    ``ry`` by the exact loops, the others by the series (:func:`_ap_far`); returns R."""
    isrel = A.isrel[:n]
    for r in range(n):
        isrel[r] = 0
    for idx in rel_local:
        isrel[idx] = 1
    ridx = A.ridx
    rcnt = A.rcnt
    # int64, not a literal 0: typing the loop would otherwise resolve the call below once
    # with R = 0 known and compile ap_relevant_sums (and the series) a second time
    R = np.int64(0)
    for r in range(n):
        rcnt[r] = R
        if isrel[order[r]] != 0:
            ridx[R] = r
            R += 1
    rcnt[n] = R
    if R == 0:
        return 0
    pos = W.pos
    ry = A.ry[:R]
    rE = A.re[:R]
    Qr = A.qr[:R]
    S = A.s[:R]
    TS = A.ts[:R]
    TD = A.td[:R]
    TC = A.tc[:R]
    rj = A.rjend[:R]
    rb = A.rbend[:R]
    p0 = pos[ridx[0]]
    for a in range(R):
        pa = pos[ridx[a]]
        ry[a] = -beta * (pa - p0)
        Qr[a] = 1.0 / pa
        S[a] = a
        TS[a] = 0.0
        TD[a] = 0.0
        TC[a] = 0.0
    _windows(ry, rE, rj, rb)
    # near ends: the pairs of a with b < ne[a] are within _NEAR (the exact loops), the others
    # far (the series, _ap_far)
    ne = A.jst[:R]
    j1 = 0
    for a in range(R):
        j1 = max(j1, a + 1)
        while j1 < R and ry[a] - ry[j1] <= _NEAR:
            j1 += 1
        ne[a] = j1
    if sums:
        ap_relevant_sums(R, A, need_tc)
    return R


@njit(cache=True, **_STEP)
def ap_relevant_sums(R, A, need_tc):
    """The second-level sums (``s``, ``ts``, ``td``, ``tc``) of the ``R`` relevant documents
    that :func:`ap_relevant` prepared: the pairs within ``_NEAR`` of each other in ``ry`` by
    the exact loops, the others by the series (:func:`_ap_far`). ``tc`` enters only ``e``,
    which only the exact diagonal reads: without ``need_tc`` the exact loops leave it out
    (about a fifth of their work) and it holds the far pairs' terms alone."""
    ry = A.ry[:R]
    rE = A.re[:R]
    Qr = A.qr[:R]
    S = A.s[:R]
    TS = A.ts[:R]
    TD = A.td[:R]
    TC = A.tc[:R]
    rb = A.rbend[:R]
    ne = A.jst[:R]
    for a in range(R):
        j1 = ne[a]
        bb = rb[a]
        m = j1 if j1 < bb else bb
        Qa = Qr[a]
        sa, ts, td, tc = _ap_seg(a + 1, m, 1.0 / rE[a], rE, Qr, Qa, S, TS, TD, TC, need_tc)
        if j1 > bb:
            f = math.exp(ry[bb] - ry[a])
            s2, t2, d2, c2 = _ap_seg(bb, j1, f, rE, Qr, Qa, S, TS, TD, TC, need_tc)
            sa += s2
            ts += t2
            td += d2
            tc += c2
        S[a] += sa
        TS[a] += ts
        TD[a] += td
        TC[a] += tc
    _ap_far(R, ry, rE, rb, Qr, ne, S, TS, TD, TC)


@njit(cache=True, **_STEP)
def _ap_h(ry, Qr, beta, a, b):
    """H_ab = d2 M / d pos_a d pos_b (times R), a < b in sorted order."""
    e = math.exp(ry[b] - ry[a])
    p = 1.0 / (1.0 + e)
    q = e * p
    Qa = Qr[a]
    Qb = Qr[b]
    return beta * q * p * (Qa * Qa + Qb * Qb - beta * (p - q) * (Qa - Qb))


@njit(cache=True, **_STEP)
def ap_offdiag(n, R, W, A, beta, ir, Hc):
    """A.off[k] = sum_{a != b relevant} H_ab u_a u_b, u_a = w_ka (u_k = -sum_j w_kj), over the
    window of k (relevant a with |x_k - x_a| <= T) and the second-level window of a. ``Hc``
    caches H for the query when it holds at least R x R entries."""
    x = W.x[:n]
    aw = W.aw
    ry = A.ry[:R]
    Qr = A.qr[:R]
    u = A.u[:R]
    ridx = A.ridx
    rcnt = A.rcnt
    rj = A.rjend
    jst = A.jst[:n]
    jend = W.jend
    _window_starts(x, jst)
    cached = Hc.shape[0] >= R
    if cached:
        for a in range(R):
            for b in range(a + 1, rj[a]):
                Hc[a, b] = _ap_h(ry, Qr, beta, a, b)
    for k in range(n):
        a0 = rcnt[jst[k]]
        a1 = rcnt[jend[k]]
        xk = x[k]
        for a in range(a0, a1):
            r = ridx[a]
            if r == k:
                u[a] = -aw[k]
            else:
                e = math.exp(-abs(xk - x[r]))
                p = 1.0 / (1.0 + e)
                u[a] = e * p * p
        tot = 0.0
        for a in range(a0, a1):
            bmax = rj[a] if rj[a] < a1 else a1
            acc = 0.0
            if cached:
                for b in range(a + 1, bmax):
                    acc += Hc[a, b] * u[b]
            else:
                for b in range(a + 1, bmax):
                    acc += _ap_h(ry, Qr, beta, a, b) * u[b]
            tot += u[a] * acc
        A.off[k] = 2.0 * tot * ir


@njit(inline="always", cache=True)
def _ap_v(qa, sa, td, beta, ir):
    """ApproxAP's ``v_a = (-q_a^2 (1 + S_a) + beta sum_b tau_ab (q_a - q_b)) / R``."""
    return (-qa * qa * (1.0 + sa) + beta * td) * ir


@njit(inline="always", cache=True)
def ap_ve(n, R, W, A, beta, ir):
    """``W.v`` and ``W.e`` in sorted order for ApproxAP (zero on the irrelevant documents;
    ``W.e`` is meaningful only where ``A.tc`` is complete, the Hessian modes with the exact
    diagonal, which alone read it)."""
    v = W.v[:n]
    ee = W.e[:n]
    for r in range(n):
        v[r] = 0.0
        ee[r] = 0.0
    ridx = A.ridx
    for a in range(R):
        r = ridx[a]
        Qa = A.qr[a]
        sa1 = 1.0 + A.s[a]
        v[r] = _ap_v(Qa, A.s[a], A.td[a], beta, ir)
        ee[r] = (2.0 * Qa * Qa * Qa * sa1 - 2.0 * beta * Qa * Qa * A.ts[a]
                 + beta * beta * A.tc[a]) * ir


@njit(inline="always", cache=True)
def ap_small(pos, rel_local, beta, ir, y, E, q, v):
    """ApproxAP's ``v`` on the relevant documents of a short query, in query order, by the
    direct loops of ``_small`` (every ordered pair of relevant documents, row by row; ``v`` of
    the other documents is left as it is); returns the query's value. ``y``, ``E`` and ``q``
    (length at least R) are scratch.

    With ``y_a = -beta pos^_a`` and ``E_a = exp(y_a - max y)`` (one exponential per relevant
    document), ``sig(beta (p_a - p_b)) = E_b / (E_a + E_b)``; where ``beta`` times the range
    of the positions is ``_small._SPREAD`` or more (or overflows), one exponential of
    ``beta (p_a - p_b)`` per ordered pair instead.
    ``S_a = sum_{b != a} sig(beta (p_a - p_b))``, ``q_a = 1 / p_a``,
    ``v_a = (-q_a^2 (1 + S_a) + beta sum_b tau_ab (q_a - q_b)) / R``; the row sums include
    ``b = a`` (``sig = 1/2`` up to an ulp, 1/2 subtracted from ``S_a``; ``q_a - q_a = 0``).
    """
    R = rel_local.shape[0]
    top = -np.inf
    lo = np.inf
    for a in range(R):
        p = pos[rel_local[a]]
        y[a] = -beta * p
        q[a] = 1.0 / p
        top = max(top, y[a])
        lo = min(lo, y[a])
    val = 0.0
    narrow = lo - top > -_SPREAD
    for a in range(R):  # E: exponentials where narrow, else the positions
        E[a] = math.exp(y[a] - top) if narrow else pos[rel_local[a]]
    for a in range(R):
        qa = q[a]
        sa = 0.0
        td = 0.0
        if narrow:
            ea = E[a]
            for b in range(R):
                r = 1.0 / (ea + E[b])
                sab = E[b] * r
                sa += sab
                td += sab * (ea * r) * (qa - q[b])
        else:
            pa = E[a]
            for b in range(R):
                sab, _, w = _sig_wide(beta * (pa - E[b]))
                sa += sab
                td += w * (qa - q[b])
        sa -= 0.5
        val += qa * (1.0 + sa)
        v[rel_local[a]] = _ap_v(qa, sa, td, beta, ir)
    return val * ir


@njit(inline="always", cache=True)
def ap_value_sum(R, A, ir):
    """ApproxAP of a query from the sums of :func:`ap_relevant`."""
    acc = 0.0
    for a in range(R):
        acc += A.qr[a] * (1.0 + A.s[a])
    return acc * ir


def torch_term(kind, p, k, beta, theta):
    """``t(p)`` on a tensor of smoothed positions (the PyTorch twin of ``_term``, for the
    neural losses and the autograd tests; tensor methods only, so torch stays optional)."""
    if kind == TERM_LOG:
        t = _LN2 / p.log1p()
    elif kind == TERM_RECIP:
        t = 1.0 / p
    elif kind == TERM_GEOM:
        t = theta ** (p - 1.0)
    else:
        t = p * 0.0 + 1.0
    if k > 0:
        t = t * (beta * (k + 0.5 - p)).sigmoid()
    return t
