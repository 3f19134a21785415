"""Numba kernels for the smoothed positions and the ApproxNDCG / ApproxAP derivatives.

Notation (one query of ``n`` documents, scores ``s``; Qin, Liu & Li 2010):

    sig(x)   = 1 / (1 + exp(-x))
    pos^_i   = 1 + sum_{j != i} sig(alpha (s_j - s_i))                    smoothed position
    sig_kj   = sig(alpha (s_j - s_k)),   w_kj = sig_kj (1 - sig_kj)       (w symmetric)

For a measure ``M(pos^)`` with ``v_i = dM/dpos^_i`` the chain rule gives, without any n x n matrix,

    dM/ds_k   = alpha sum_j w_kj (v_j - v_k)
    d2M/ds_k2 = alpha^2 [ - sum_j w_kj (1 - 2 sig_kj)(v_j - v_k)
                          + sum_{i,j} H_ij u_i u_j ],   u_i = w_ik (i != k), u_k = -sum_j w_kj

where ``H = d2M/dpos^2``. ApproxNDCG is separable (``H`` diagonal, ``H_ii = e_i``), so the
quadratic form is ``sum_j w_kj^2 e_j + e_k (sum_j w_kj)^2``. ApproxAP couples the relevant
documents; its off-diagonal part costs O(n R^2) and is only computed for the exact diagonal.

Each pair is visited once (``j > i``) with a single ``exp(-|x|)``, which is stable for any gap:
``sig(|x|) = 1 / (1 + e)`` and ``sig(-|x|) = e / (1 + e)`` never overflow. All kernels loop over
queries in parallel and use O(n) work arrays that the caller allocates once per call.
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

HESS_EXACT = 0
HESS_BOUND = 1
HESS_ABS = 2
HESS_MIXED = 3
HESS_CONSTANT = 4

_LN2 = math.log(2.0)


@njit(inline="always", cache=True)
def _sig_pair(x):
    """Return ``(sig(x), sig(-x), sig(x) sig(-x))`` with one exp, stable for any ``x``."""
    e = math.exp(-abs(x))
    p = 1.0 / (1.0 + e)
    q = e * p
    if x >= 0.0:
        return p, q, p * q
    return q, p, p * q


@njit(cache=True)
def _positions_query(s, alpha, pos):
    n = s.shape[0]
    for i in range(n):
        pos[i] = 1.0
    for i in range(n):
        si = s[i]
        acc = 0.0
        for j in range(i + 1, n):
            sij, sji, _ = _sig_pair(alpha * (s[j] - si))
            acc += sij
            pos[j] += sji
        pos[i] += acc


@njit(parallel=True, cache=True)
def _ref_smoothed_positions(s, group_ptr, alpha, pos):
    """Fill ``pos`` with ``pos^_i = 1 + sum_{j != i} sig(alpha (s_j - s_i))`` per query."""
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        _positions_query(s[a:b], alpha, pos[a:b])


# ----------------------------------------------------------------------------------------------
# ApproxNDCG: f_i(p) = G_i D(p) T(p) / Z, D(p) = 1 / log2(1 + p), T(p) = sig(beta (k + 1/2 - p))
# ----------------------------------------------------------------------------------------------


@njit(inline="always", cache=True)
def _ndcg_term(p, k, beta):
    """Return ``(f, f', f'')`` of ``D(p) T(p)`` (``T = 1`` when ``k <= 0``)."""
    lg = math.log1p(p)
    d0 = _LN2 / lg
    d1 = -_LN2 / ((1.0 + p) * lg * lg)
    d2 = _LN2 * (2.0 + lg) / ((1.0 + p) * (1.0 + p) * lg * lg * lg)
    if k <= 0:
        return d0, d1, d2
    t, tc, tw = _sig_pair(beta * (k + 0.5 - p))
    t1 = -beta * tw
    t2 = beta * beta * tw * (tc - t)
    return d0 * t, d1 * t + d0 * t1, d2 * t + 2.0 * d1 * t1 + d0 * t2


@njit(parallel=True, cache=True)
def _ref_ndcg_value(s, gains, inv_z, group_ptr, alpha, k, beta, pos):
    """Per-query ApproxNDCG (or ApproxNDCG@k when ``k > 0``); 0 where ``inv_z == 0``."""
    nq = group_ptr.shape[0] - 1
    out = np.zeros(nq)
    for q in prange(nq):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        if inv_z[q] == 0.0:
            continue
        _positions_query(s[a:b], alpha, pos[a:b])
        acc = 0.0
        for i in range(a, b):
            if gains[i] != 0.0:
                f, _, _ = _ndcg_term(pos[i], k, beta)
                acc += gains[i] * f
        out[q] = acc * inv_z[q]
    return out


@njit(cache=True)
def _chain_query(s, alpha, v, e, need_exact, g, bnd, acc_a, acc_b, acc_w):
    """Pairwise pass: sums over j of ``w (v_j - v_k)``, ``w |v_j - v_k|`` and, when
    ``need_exact``, ``w (1 - 2 sig_kj)(v_j - v_k)``, ``w^2 e_j`` and ``w``."""
    n = s.shape[0]
    for i in range(n):
        g[i] = 0.0
        bnd[i] = 0.0
        if need_exact:
            acc_a[i] = 0.0
            acc_b[i] = 0.0
            acc_w[i] = 0.0
    for i in range(n):
        si = s[i]
        vi = v[i]
        gi = 0.0
        bi = 0.0
        for j in range(i + 1, n):
            sij, sji, w = _sig_pair(alpha * (s[j] - si))
            dv = v[j] - vi
            wd = w * dv
            gi += wd
            g[j] -= wd
            ad = w * abs(dv)
            bi += ad
            bnd[j] += ad
            if need_exact:
                t = wd * (sji - sij)
                acc_a[i] += t
                acc_a[j] += t
                w2 = w * w
                acc_b[i] += w2 * e[j]
                acc_b[j] += w2 * e[i]
                acc_w[i] += w
                acc_w[j] += w
        g[i] += gi
        bnd[i] += bi


@njit(inline="always", cache=True)
def _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bound):
    """Positive (or exact) Hessian of L = -M for one document from the pieces of d2M."""
    if mode == HESS_EXACT:
        return -exact_m
    if mode == HESS_BOUND:
        return bound
    if mode == HESS_ABS:
        return abs(exact_m)
    if mode == HESS_MIXED:
        h = -exact_m
        fl = floor * bound
        return h if h > fl else fl
    return constant


@njit(cache=True)
def _finish_query(g, h, weights, normalize):
    """Per-query normalisation log2(1 + S) / S with S = sum |g|, then per-document weights."""
    n = g.shape[0]
    if normalize:
        tot = 0.0
        for i in range(n):
            tot += abs(g[i])
        if tot > 0.0:
            f = math.log2(1.0 + tot) / tot
            for i in range(n):
                g[i] *= f
                h[i] *= f
    if weights.shape[0] == n:
        for i in range(n):
            g[i] *= weights[i]
            h[i] *= weights[i]


@njit(parallel=True, cache=True)
def _ref_ndcg_grad_hess(
    s, gains, inv_z, group_ptr, weights, alpha, k, beta, mode, floor, constant, normalize,
    grad, hess, pos, v, e, acc_a, acc_b, acc_w,
):
    """Gradient and Hessian (approximation selected by ``mode``) of L = -sum_q ApproxNDCG_q.

    ``weights`` has one entry per document, or is empty for unit weights. Queries with
    ``inv_z == 0`` or a single document get zero gradient and zero Hessian.
    """
    need_exact = mode == HESS_EXACT or mode == HESS_ABS or mode == HESS_MIXED
    alpha2 = alpha * alpha
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        if inv_z[q] == 0.0 or b - a < 2:
            for i in range(a, b):
                grad[i] = 0.0
                hess[i] = 0.0
            continue
        _positions_query(s[a:b], alpha, pos[a:b])
        iz = inv_z[q]
        for i in range(a, b):
            f, f1, f2 = _ndcg_term(pos[i], k, beta)
            v[i] = gains[i] * f1 * iz
            e[i] = gains[i] * f2 * iz
        _chain_query(s[a:b], alpha, v[a:b], e[a:b], need_exact, grad[a:b], hess[a:b],
                     acc_a[a:b], acc_b[a:b], acc_w[a:b])
        for i in range(a, b):
            bound = alpha2 * hess[i]
            exact_m = 0.0
            if need_exact:
                exact_m = alpha2 * (-acc_a[i] + acc_b[i] + e[i] * acc_w[i] * acc_w[i])
            grad[i] = -alpha * grad[i]
            hess[i] = _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bound)
        w_q = weights[a:b] if weights.shape[0] > 0 else weights
        _finish_query(grad[a:b], hess[a:b], w_q, normalize)


# ----------------------------------------------------------------------------------------------
# ApproxAP: M = (1/R) sum_a q_a (1 + sum_{b != a} sig(beta (p_a - p_b))),  q_a = 1 / p_a,
# sums over the relevant documents a, b only.
# ----------------------------------------------------------------------------------------------


@njit(parallel=True, cache=True)
def _ref_ap_value(s, rel_idx, rel_ptr, inv_r, group_ptr, alpha, beta, pos):
    """Per-query ApproxAP; 0 where the query has no relevant document."""
    nq = group_ptr.shape[0] - 1
    out = np.zeros(nq)
    for q in prange(nq):
        if inv_r[q] == 0.0:
            continue
        a0 = group_ptr[q]
        pq = pos[a0:group_ptr[q + 1]]
        _positions_query(s[a0:group_ptr[q + 1]], alpha, pq)
        r0 = rel_ptr[q]
        r1 = rel_ptr[q + 1]
        acc = 0.0
        for ia in range(r0, r1):
            pa = pq[rel_idx[ia]]
            inner = 1.0
            for ib in range(r0, r1):
                if ib != ia:
                    sab, _, _ = _sig_pair(beta * (pa - pq[rel_idx[ib]]))
                    inner += sab
            acc += inner / pa
        out[q] = acc * inv_r[q]
    return out


@njit(cache=True)
def _ap_first_second(pos, rel_idx, beta, inv_r, v, e):
    """``v = dM/dpos^`` and ``e = diag(d2M/dpos^2)`` on the relevant documents (O(R^2))."""
    nr = rel_idx.shape[0]
    for ia in range(nr):
        pa = pos[rel_idx[ia]]
        qa = 1.0 / pa
        s_a = 0.0
        t_sum = 0.0
        t_dq = 0.0
        t_curv = 0.0
        for ib in range(nr):
            if ib == ia:
                continue
            qb = 1.0 / pos[rel_idx[ib]]
            sab, sba, tau = _sig_pair(beta * (pa - pos[rel_idx[ib]]))
            s_a += sab
            t_sum += tau
            t_dq += tau * (qa - qb)
            t_curv += tau * (sba - sab) * (qa - qb)
        v[rel_idx[ia]] = (-qa * qa * (1.0 + s_a) + beta * t_dq) * inv_r
        e[rel_idx[ia]] = (
            2.0 * qa * qa * qa * (1.0 + s_a) - 2.0 * beta * qa * qa * t_sum + beta * beta * t_curv
        ) * inv_r


@njit(cache=True)
def _ap_offdiag_query(s, pos, rel_idx, alpha, beta, inv_r, acc_w, u, out):
    """``out_k = sum_{a != b relevant} H_ab u_a u_b`` for every document k (O(n R^2))."""
    n = s.shape[0]
    nr = rel_idx.shape[0]
    for k in range(n):
        for ia in range(nr):
            ra = rel_idx[ia]
            if ra == k:
                u[ia] = -acc_w[k]
            else:
                _, _, w = _sig_pair(alpha * (s[k] - s[ra]))
                u[ia] = w
        tot = 0.0
        for ia in range(nr):
            pa = pos[rel_idx[ia]]
            qa = 1.0 / pa
            for ib in range(ia + 1, nr):
                pb = pos[rel_idx[ib]]
                qb = 1.0 / pb
                sab, sba, tau = _sig_pair(beta * (pa - pb))
                h_ab = beta * tau * (qa * qa + qb * qb - beta * (sba - sab) * (qa - qb))
                tot += 2.0 * h_ab * u[ia] * u[ib]
        out[k] = tot * inv_r


@njit(parallel=True, cache=True)
def _ref_ap_grad_hess(
    s, rel_idx, rel_ptr, inv_r, group_ptr, weights, alpha, beta, mode, floor, constant,
    normalize, grad, hess, pos, v, e, acc_a, acc_b, acc_w, u, offdiag,
):
    """Gradient and Hessian (approximation selected by ``mode``) of L = -sum_q ApproxAP_q.

    ``rel_idx`` holds, query after query, the in-query offsets of the relevant documents,
    delimited by ``rel_ptr``. ``u`` and ``offdiag`` are work arrays (length n) for the exact
    Hessian's off-diagonal part.
    """
    need_exact = mode == HESS_EXACT or mode == HESS_ABS or mode == HESS_MIXED
    alpha2 = alpha * alpha
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        if inv_r[q] == 0.0 or b - a < 2:
            for i in range(a, b):
                grad[i] = 0.0
                hess[i] = 0.0
            continue
        sq = s[a:b]
        pq = pos[a:b]
        vq = v[a:b]
        eq = e[a:b]
        _positions_query(sq, alpha, pq)
        for i in range(b - a):
            vq[i] = 0.0
            eq[i] = 0.0
        ridx = rel_idx[rel_ptr[q]:rel_ptr[q + 1]]
        _ap_first_second(pq, ridx, beta, inv_r[q], vq, eq)
        _chain_query(sq, alpha, vq, eq, need_exact, grad[a:b], hess[a:b],
                     acc_a[a:b], acc_b[a:b], acc_w[a:b])
        if need_exact:
            _ap_offdiag_query(sq, pq, ridx, alpha, beta, inv_r[q], acc_w[a:b], u[a:b],
                              offdiag[a:b])
        for i in range(a, b):
            bound = alpha2 * hess[i]
            exact_m = 0.0
            if need_exact:
                exact_m = alpha2 * (
                    -acc_a[i] + acc_b[i] + e[i] * acc_w[i] * acc_w[i] + offdiag[i]
                )
            grad[i] = -alpha * grad[i]
            hess[i] = _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bound)
        w_q = weights[a:b] if weights.shape[0] > 0 else weights
        _finish_query(grad[a:b], hess[a:b], w_q, normalize)


@njit(parallel=True, cache=True)
def ideal_dcg(gains, group_ptr, k):
    """Exact ideal DCG (or DCG@k when ``k > 0``) per query: gains sorted descending."""
    nq = group_ptr.shape[0] - 1
    out = np.zeros(nq)
    for q in prange(nq):
        g = np.sort(gains[group_ptr[q]:group_ptr[q + 1]])[::-1]
        m = g.shape[0] if k <= 0 else min(k, g.shape[0])
        acc = 0.0
        for r in range(m):
            acc += g[r] / math.log2(r + 2.0)
        out[q] = acc
    return out


# ==============================================================================================
# Fast path (default): sorted queries, factorised exponentials, saturated pairs skipped.
# ==============================================================================================
#
# Each query is sorted by score, descending (adaptive insertion sort from the previous order,
# falling back to argsort). With x_r = alpha (s_(r) - s_(0)) non-increasing, a pair r < j has
# e_rj = exp(x_j - x_r) in (0, 1] and
#
#     sig(alpha (s_j - s_r)) = e / (1 + e),   sig(alpha (s_r - s_j)) = 1 / (1 + e),   w = sig sig'.
#
# 1. Window. Pairs with x_r - x_j > T (T = _T = 37) are saturated: their sigmoids are 0 and 1 up
#    to e^-T < 8.6e-17, and w < e^-T. Row r therefore visits only j in (r, jend_r); the far pairs
#    are counted exactly by index arithmetic (pos^_(r) = 1 + r + window corrections) and add
#    nothing to the gradient and Hessian sums. Error bound per document (n documents, v and e as
#    in the module docstring, before normalisation and weights, which only rescale by at most
#    1 / ln 2 and w_i):
#        |d pos^|   <= (n - 1) e^-T
#        |d grad|   <= alpha (n - 1) e^-T * 2 max|v|                     (+ the d pos^ effect)
#        |d bound|  <= alpha^2 (n - 1) e^-T * 2 max|v|
#        |d exact|  <= alpha^2 (n - 1) e^-T * (2 max|v| + max|e| (1 + (n - 1) / 2))
#    The d pos^ effect on v is |dv| <= max|v'| (n - 1) e^-T. For n = 1e5 all of these are below
#    1e-11 relative to the natural scales alpha max|v| and alpha^2 (max|v| + n max|e|).
# 2. No exp per pair. Rows are cut into blocks of span at most _L = 300 in x; with c_b the first
#    x of block b, ex_j = exp(x_j - c_b(j)) in [e^-300, 1]. For j in the same block as r,
#    e_rj = ex_j / ex_r; for j in the next block (a window never reaches further, as T < L),
#    e_rj = exp(c_(b+1) - x_r) ex_j. One exp per document and per row, one division per pair.
#    The relative error of e_rj is below 1e-13 (argument rounding for |argument| <= 2 L).
# 3. Every pair is visited once (r < j), updating both rows; queries of at least _PAR_MIN
#    documents are split across threads by row chunks (thread-private column sums, reduced
#    afterwards: O(threads n) memory); smaller queries run one per thread, with per-thread
#    scratch allocated once per call. Nothing of size n is allocated per iteration except the
#    returned gradient and Hessian; the sort order persists between iterations in ``order``.

_T = 37.0
_L = 300.0
_PAR_MIN = 4096
_CHUNK = 64
_TILE = 2048  # columns per tile in the pair loops (about 16 KB per array)
_H_CACHE_MAX = 1024

# per-thread float scratch rows
_X, _EX, _POS, _V, _E, _G, _BND, _AA, _AB, _AW = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
_RY, _RE, _S, _TS, _TD, _TC, _OFF, _QR = 10, 11, 12, 13, 14, 15, 16, 17
_NF_NDCG = 10
_NF_AP = 18
# per-thread int scratch rows
_JEND, _BEND, _JST, _RIDX, _RJEND, _RBEND, _RCNT, _ISREL = 0, 1, 2, 3, 4, 5, 6, 7
_NI_NDCG = 2
_NI_AP = 8

# The pair loops (``*_seg``) run over zero-based slices (no negative-index wraparound) with
# ``error_model="numpy"`` (no zero-division branch; 1 + e >= 1 anyway) and these fast-math
# flags, so that LLVM vectorises them, divisions included: 2-5x faster than scalar loops.
_FM = {"reassoc", "contract", "nsz"}


def make_work(n):
    """Arrays the fast kernels keep between iterations for a dataset of ``n`` documents."""
    return {"order": np.full(n, -1, dtype=np.int32)}


@njit(cache=True)
def _sort_desc(s, order):
    """Sort ``order`` (in-query indices) by descending ``s``; adaptive, from the last order."""
    n = s.shape[0]
    if n == 0:
        return
    if order[0] < 0:
        for i in range(n):
            order[i] = i
    cap = 8 * n + 64
    moves = 0
    ok = True
    for i in range(1, n):
        oi = order[i]
        key = s[oi]
        j = i
        while j > 0 and s[order[j - 1]] < key:
            order[j] = order[j - 1]
            j -= 1
        moves += i - j
        order[j] = oi
        if moves > cap:
            ok = False
            break
    if not ok:
        idx = np.argsort(-s, kind="mergesort")
        for i in range(n):
            order[i] = idx[i]


@njit(cache=True)
def _gather_x(s, order, alpha, x):
    n = s.shape[0]
    top = s[order[0]]
    for r in range(n):
        x[r] = alpha * (s[order[r]] - top)


@njit(cache=True)
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


@njit(cache=True)
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


@njit(fastmath=_FM, error_model="numpy", cache=True)
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


@njit(cache=True)
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


@njit(fastmath=_FM, error_model="numpy", cache=True)
def _chain_seg_bound(j0, j1, f, ex, v, vi, cg, cb):
    ex, v, cg, cb = ex[j0:j1], v[j0:j1], cg[j0:j1], cb[j0:j1]
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
        ad = w * abs(dv)
        bi += ad
        cb[j] += ad
    return gi, bi


@njit(fastmath=_FM, error_model="numpy", cache=True)
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


@njit(cache=True)
def _chain_rows(r0, r1, x, ex, jend, bend, v, ee, need_exact,
                rg, rb, ra, rB, rw, cg, cb, ca, cB, cw):
    """Window part of the chain-rule sums for rows r0..r1-1 (both ends of every pair), with
    the columns visited in tiles as in ``_pos_rows``."""
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
                if need_exact:
                    g, b, a, B, w = _chain_seg_exact(j0, j1, f, ex, v, ee, v[i], ee[i],
                                                     cg, cb, ca, cB, cw)
                    ai += a
                    Bi += B
                    wi += w
                else:
                    g, b = _chain_seg_bound(j0, j1, f, ex, v, v[i], cg, cb)
                gi += g
                bi += b
            rg[i] += gi
            rb[i] += bi
            if need_exact:
                ra[i] += ai
                rB[i] += Bi
                rw[i] += wi


@njit(parallel=True, cache=True)
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


@njit(parallel=True, cache=True)
def _par_chain(x, ex, jend, bend, v, ee, need_exact, g, bnd, aa, ab, aw, buf):
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
            _chain_rows(r0, r1, x, ex, jend, bend, v, ee, need_exact,
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


@njit(cache=True)
def _sorted_prep(s, order, alpha, F, I):
    """Sort the query, gather x, build windows and exp blocks (sequential, O(n) after sort)."""
    n = s.shape[0]
    _sort_desc(s, order)
    _gather_x(s, order, alpha, F[_X, :n])
    _windows(F[_X, :n], F[_EX, :n], I[_JEND, :n], I[_BEND, :n])


@njit(cache=True)
def _sorted_positions(s, order, alpha, F, I):
    """Sorted-order positions F[_POS] of one query, on the calling thread."""
    n = s.shape[0]
    _sorted_prep(s, order, alpha, F, I)
    pos = F[_POS, :n]
    for r in range(n):
        pos[r] = 1.0 + r
    _pos_rows(0, n, F[_X, :n], F[_EX, :n], I[_JEND, :n], I[_BEND, :n], pos, pos)


@njit(cache=True)
def _sorted_chain(n, F, I, need_exact):
    """Sorted-order chain-rule sums of one query, on the calling thread."""
    g = F[_G, :n]
    bnd = F[_BND, :n]
    aa = F[_AA, :n]
    ab = F[_AB, :n]
    aw = F[_AW, :n]
    for r in range(n):
        g[r] = 0.0
        bnd[r] = 0.0
        aa[r] = 0.0
        ab[r] = 0.0
        aw[r] = 0.0
    _chain_rows(0, n, F[_X, :n], F[_EX, :n], I[_JEND, :n], I[_BEND, :n], F[_V, :n], F[_E, :n],
                need_exact, g, bnd, aa, ab, aw, g, bnd, aa, ab, aw)


@njit(cache=True)
def _sorted_finish(n, F, I, order, alpha, mode, floor, constant, normalize, need_exact, offdiag,
                   wts, grad, hess):
    """Combine the sums into the gradient and Hessian of L, normalise, weight and scatter.

    The normalisation's S = sum |g| also counts, for every row, the first skipped pair (at most
    e^-T relative): negligible unless every pair of the query is saturated, where it keeps
    log2(1 + S) / S at its limit 1 / ln 2 as in the exact kernel (S tiny but positive there).
    """
    alpha2 = alpha * alpha
    g = F[_G, :n]
    bnd = F[_BND, :n]
    tot = 0.0
    for r in range(n):
        tot += abs(g[r])
    if normalize:
        x = F[_X]
        v = F[_V]
        jend = I[_JEND]
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
    for r in range(n):
        bound = alpha2 * bnd[r]
        exact_m = 0.0
        if need_exact:
            aw = F[_AW, r]
            exact_m = alpha2 * (-F[_AA, r] + F[_AB, r] + F[_E, r] * aw * aw)
            if offdiag:
                exact_m += alpha2 * F[_OFF, r]
        gr = -alpha * g[r] * f
        hr = _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bound) * f
        o = order[r]
        if has_w:
            gr *= wts[o]
            hr *= wts[o]
        grad[o] = gr
        hess[o] = hr


@njit(cache=True)
def _ndcg_ve(n, F, gains, order, iz, k, beta):
    for r in range(n):
        gr = gains[order[r]]
        if gr == 0.0:
            F[_V, r] = 0.0
            F[_E, r] = 0.0
        else:
            _, f1, f2 = _ndcg_term(F[_POS, r], k, beta)
            F[_V, r] = gr * f1 * iz
            F[_E, r] = gr * f2 * iz


@njit(cache=True)
def _ndcg_query(s, gains, iz, wts, alpha, k, beta, mode, floor, constant, normalize, order,
                grad, hess, F, I):
    n = s.shape[0]
    need_exact = mode == HESS_EXACT or mode == HESS_ABS or mode == HESS_MIXED
    _sorted_positions(s, order, alpha, F, I)
    _ndcg_ve(n, F, gains, order, iz, k, beta)
    _sorted_chain(n, F, I, need_exact)
    _sorted_finish(n, F, I, order, alpha, mode, floor, constant, normalize, need_exact, False,
                   wts, grad, hess)


@njit(cache=True)
def _query_split(group_ptr, par_min):
    """Largest query below ``par_min`` documents and the number of queries at or above it."""
    m = 2
    nbig = 0
    for q in range(group_ptr.shape[0] - 1):
        n = group_ptr[q + 1] - group_ptr[q]
        if n >= par_min:
            nbig += 1
        elif n > m:
            m = n
    return m, nbig


@njit(parallel=True, cache=True)
def _ndcg_grad_hess_nb(
    s, gains, inv_z, group_ptr, weights, alpha, k, beta, mode, floor, constant, normalize,
    grad, hess, order, par_min, nt,
):
    """Gradient and Hessian (approximation selected by ``mode``) of L = -sum_q ApproxNDCG_q.

    Fast path (see the notes above ``make_work``): equal to ``_ref_ndcg_grad_hess`` up to the
    stated window bound and rounding. ``weights`` has one entry per document, or is empty for
    unit weights. ``order`` (``make_work``) keeps each query's sort order between calls.
    Queries with ``inv_z == 0`` or a single document get zero gradient and zero Hessian.
    """
    nq = group_ptr.shape[0] - 1
    maxn, _ = _query_split(group_ptr, par_min)
    Fs = np.empty((nt, _NF_NDCG, maxn))
    Is = np.empty((nt, _NI_NDCG, maxn + 1), dtype=np.int64)
    for t in prange(nt):
        F = Fs[t]
        I = Is[t]
        for q in range(t, nq, nt):
            a = group_ptr[q]
            b = group_ptr[q + 1]
            if b - a >= par_min:
                continue
            if inv_z[q] == 0.0 or b - a < 2:
                for i in range(a, b):
                    grad[i] = 0.0
                    hess[i] = 0.0
                continue
            w_q = weights[a:b] if weights.shape[0] > 0 else weights
            _ndcg_query(s[a:b], gains[a:b], inv_z[q], w_q, alpha, k, beta, mode, floor,
                        constant, normalize, order[a:b], grad[a:b], hess[a:b], F, I)
    for q in range(nq):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        if b - a < par_min:
            continue
        if inv_z[q] == 0.0:
            grad[a:b] = 0.0
            hess[a:b] = 0.0
            continue
        n = b - a
        F = np.empty((_NF_NDCG, n))
        I = np.empty((_NI_NDCG, n + 1), dtype=np.int64)
        w_q = weights[a:b] if weights.shape[0] > 0 else weights
        need_exact = mode == HESS_EXACT or mode == HESS_ABS or mode == HESS_MIXED
        buf1 = np.empty((nt, n))
        buf5 = np.empty((nt, 5, n))
        _sorted_prep(s[a:b], order[a:b], alpha, F, I)
        _par_positions(F[_X, :n], F[_EX, :n], I[_JEND, :n], I[_BEND, :n], F[_POS, :n], buf1)
        _ndcg_ve(n, F, gains[a:b], order[a:b], inv_z[q], k, beta)
        _par_chain(F[_X, :n], F[_EX, :n], I[_JEND, :n], I[_BEND, :n], F[_V, :n], F[_E, :n],
                   need_exact, F[_G, :n], F[_BND, :n], F[_AA, :n], F[_AB, :n], F[_AW, :n], buf5)
        _sorted_finish(n, F, I, order[a:b], alpha, mode, floor, constant, normalize, need_exact,
                       False, w_q, grad[a:b], hess[a:b])


@njit(parallel=True, cache=True)
def _smoothed_positions_nb(s, group_ptr, alpha, pos, nt):
    """Fill ``pos`` with ``pos^_i = 1 + sum_{j != i} sig(alpha (s_j - s_i))`` per query
    (fast path; allocates its own scratch)."""
    nq = group_ptr.shape[0] - 1
    order = np.full(s.shape[0], -1, dtype=np.int32)
    maxn, _ = _query_split(group_ptr, _PAR_MIN)
    Fs = np.empty((nt, _NF_NDCG, maxn))
    Is = np.empty((nt, _NI_NDCG, maxn + 1), dtype=np.int64)
    for t in prange(nt):
        for q in range(t, nq, nt):
            a = group_ptr[q]
            b = group_ptr[q + 1]
            if 0 < b - a < _PAR_MIN:
                _sorted_positions(s[a:b], order[a:b], alpha, Fs[t], Is[t])
                _scatter(b - a, Fs[t, _POS], order[a:b], pos[a:b])
    for q in range(nq):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n = b - a
        if n >= _PAR_MIN:
            F = np.empty((_NF_NDCG, n))
            I = np.empty((_NI_NDCG, n + 1), dtype=np.int64)
            buf1 = np.empty((nt, n))
            _sorted_prep(s[a:b], order[a:b], alpha, F, I)
            _par_positions(F[_X, :n], F[_EX, :n], I[_JEND, :n], I[_BEND, :n], F[_POS, :n], buf1)
            _scatter(n, F[_POS], order[a:b], pos[a:b])


@njit(cache=True)
def _scatter(n, src, order, dst):
    for r in range(n):
        dst[order[r]] = src[r]


@njit(parallel=True, cache=True)
def _ndcg_value_nb(gains, inv_z, group_ptr, k, beta, pos):
    nq = group_ptr.shape[0] - 1
    out = np.zeros(nq)
    for q in prange(nq):
        if inv_z[q] == 0.0:
            continue
        acc = 0.0
        for i in range(group_ptr[q], group_ptr[q + 1]):
            if gains[i] != 0.0:
                f, _, _ = _ndcg_term(pos[i], k, beta)
                acc += gains[i] * f
        out[q] = acc * inv_z[q]
    return out


# ---------------------------------------------------------------------------------------------
# ApproxAP fast path. In sorted order the smoothed positions are non-decreasing, so the relevant
# documents, taken in sorted order, have y_a = -beta (pos^_a - pos^_first) non-increasing and the
# second-level sigmoids sig(beta (pos^_a - pos^_b)) get the same window/block treatment (same T,
# same bound with beta in place of alpha and R in place of n).
# ---------------------------------------------------------------------------------------------


@njit(fastmath=_FM, error_model="numpy", cache=True)
def _ap_seg(j0, j1, f, rE, Qr, Qa, S, TS, TD, TC):
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
        dq = Qa - Qr[b]
        sa += q
        S[b] -= q
        ts += tau
        TS[b] += tau
        t = tau * dq
        td += t
        TD[b] -= t
        c = t * ((1.0 - e) * p)
        tc += c
        TC[b] += c
    return sa, ts, td, tc


@njit(cache=True)
def _ap_relevant(n, F, I, order, rel_local, beta):
    """Relevant documents in sorted order and their windowed second-level sums; returns R."""
    isrel = I[_ISREL, :n]
    for r in range(n):
        isrel[r] = 0
    for idx in rel_local:
        isrel[idx] = 1
    ridx = I[_RIDX]
    rcnt = I[_RCNT]
    R = 0
    for r in range(n):
        rcnt[r] = R
        if isrel[order[r]] != 0:
            ridx[R] = r
            R += 1
    rcnt[n] = R
    if R == 0:
        return 0
    pos = F[_POS]
    ry = F[_RY, :R]
    rE = F[_RE, :R]
    Qr = F[_QR, :R]
    S = F[_S, :R]
    TS = F[_TS, :R]
    TD = F[_TD, :R]
    TC = F[_TC, :R]
    rj = I[_RJEND, :R]
    rb = I[_RBEND, :R]
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
    for a in range(R):
        j1 = rj[a]
        bb = rb[a]
        m = j1 if j1 < bb else bb
        Qa = Qr[a]
        sa, ts, td, tc = _ap_seg(a + 1, m, 1.0 / rE[a], rE, Qr, Qa, S, TS, TD, TC)
        if j1 > bb:
            s2, t2, d2, c2 = _ap_seg(bb, j1, math.exp(ry[bb] - ry[a]), rE, Qr, Qa,
                                     S, TS, TD, TC)
            sa += s2
            ts += t2
            td += d2
            tc += c2
        S[a] += sa
        TS[a] += ts
        TD[a] += td
        TC[a] += tc
    return R


@njit(cache=True)
def _ap_h(ry, Qr, beta, a, b):
    """H_ab = d2 M / d pos_a d pos_b (times R), a < b in sorted order."""
    e = math.exp(ry[b] - ry[a])
    p = 1.0 / (1.0 + e)
    q = e * p
    Qa = Qr[a]
    Qb = Qr[b]
    return beta * q * p * (Qa * Qa + Qb * Qb - beta * (p - q) * (Qa - Qb))


@njit(cache=True)
def _ap_offdiag(n, R, F, I, beta, ir, Hc):
    """F[_OFF, k] = sum_{a != b relevant} H_ab u_a u_b, u_a = w_ka (u_k = -sum_j w_kj), over the
    window of k (relevant a with |x_k - x_a| <= T) and the second-level window of a."""
    x = F[_X, :n]
    aw = F[_AW]
    ry = F[_RY, :R]
    Qr = F[_QR, :R]
    u = F[_S, :R]
    ridx = I[_RIDX]
    rcnt = I[_RCNT]
    rj = I[_RJEND]
    jst = I[_JST, :n]
    jend = I[_JEND]
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
        F[_OFF, k] = 2.0 * tot * ir


@njit(cache=True)
def _ap_ve(n, R, F, I, beta, ir):
    v = F[_V, :n]
    ee = F[_E, :n]
    for r in range(n):
        v[r] = 0.0
        ee[r] = 0.0
    ridx = I[_RIDX]
    for a in range(R):
        r = ridx[a]
        Qa = F[_QR, a]
        sa1 = 1.0 + F[_S, a]
        v[r] = (-Qa * Qa * sa1 + beta * F[_TD, a]) * ir
        ee[r] = (2.0 * Qa * Qa * Qa * sa1 - 2.0 * beta * Qa * Qa * F[_TS, a]
                 + beta * beta * F[_TC, a]) * ir


@njit(cache=True)
def _ap_query(s, rel_local, ir, wts, alpha, beta, mode, floor, constant, normalize, order,
              grad, hess, F, I, Hc):
    n = s.shape[0]
    need_exact = mode == HESS_EXACT or mode == HESS_ABS or mode == HESS_MIXED
    _sorted_positions(s, order, alpha, F, I)
    R = _ap_relevant(n, F, I, order, rel_local, beta)
    _ap_ve(n, R, F, I, beta, ir)
    _sorted_chain(n, F, I, need_exact)
    if need_exact:
        _ap_offdiag(n, R, F, I, beta, ir, Hc)
    _sorted_finish(n, F, I, order, alpha, mode, floor, constant, normalize, need_exact,
                   need_exact, wts, grad, hess)


@njit(cache=True)
def _ap_split(group_ptr, rel_ptr, par_min):
    m = 2
    mr = 0
    for q in range(group_ptr.shape[0] - 1):
        n = group_ptr[q + 1] - group_ptr[q]
        if n < par_min:
            if n > m:
                m = n
            r = rel_ptr[q + 1] - rel_ptr[q]
            if r > mr:
                mr = r
    return m, mr


@njit(parallel=True, cache=True)
def _ap_grad_hess_nb(
    s, rel_idx, rel_ptr, inv_r, group_ptr, weights, alpha, beta, mode, floor, constant,
    normalize, grad, hess, order, par_min, nt,
):
    """Gradient and Hessian (approximation selected by ``mode``) of L = -sum_q ApproxAP_q.

    Fast path, equal to ``_ref_ap_grad_hess`` up to the window bound and rounding. ``rel_idx``
    holds, query after query, the in-query offsets of the relevant documents, delimited by
    ``rel_ptr``. The exact diagonal's off-diagonal part (modes exact, abs, mixed) costs
    O(sum_k m_k^2) with m_k the relevant documents within the window of k (O(n R^2) when all
    scores are close); H is cached per query when R <= 1024.
    """
    nq = group_ptr.shape[0] - 1
    need_exact = mode == HESS_EXACT or mode == HESS_ABS or mode == HESS_MIXED
    maxn, maxr = _ap_split(group_ptr, rel_ptr, par_min)
    hmax = min(maxr, _H_CACHE_MAX) if need_exact else 0
    Fs = np.empty((nt, _NF_AP, maxn))
    Is = np.empty((nt, _NI_AP, maxn + 1), dtype=np.int64)
    Hs = np.empty((nt, hmax, hmax))
    for t in prange(nt):
        F = Fs[t]
        I = Is[t]
        for q in range(t, nq, nt):
            a = group_ptr[q]
            b = group_ptr[q + 1]
            if b - a >= par_min:
                continue
            if inv_r[q] == 0.0 or b - a < 2:
                for i in range(a, b):
                    grad[i] = 0.0
                    hess[i] = 0.0
                continue
            w_q = weights[a:b] if weights.shape[0] > 0 else weights
            _ap_query(s[a:b], rel_idx[rel_ptr[q]:rel_ptr[q + 1]], inv_r[q], w_q, alpha, beta,
                      mode, floor, constant, normalize, order[a:b], grad[a:b], hess[a:b],
                      F, I, Hs[t])
    for q in range(nq):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        if b - a < par_min:
            continue
        if inv_r[q] == 0.0:
            grad[a:b] = 0.0
            hess[a:b] = 0.0
            continue
        n = b - a
        nr = rel_ptr[q + 1] - rel_ptr[q]
        hq = nr if (need_exact and nr <= _H_CACHE_MAX) else 0
        w_q = weights[a:b] if weights.shape[0] > 0 else weights
        F = np.empty((_NF_AP, n))
        I = np.empty((_NI_AP, n + 1), dtype=np.int64)
        buf1 = np.empty((nt, n))
        buf5 = np.empty((nt, 5, n))
        _sorted_prep(s[a:b], order[a:b], alpha, F, I)
        _par_positions(F[_X, :n], F[_EX, :n], I[_JEND, :n], I[_BEND, :n], F[_POS, :n], buf1)
        R = _ap_relevant(n, F, I, order[a:b], rel_idx[rel_ptr[q]:rel_ptr[q + 1]], beta)
        _ap_ve(n, R, F, I, beta, inv_r[q])
        _par_chain(F[_X, :n], F[_EX, :n], I[_JEND, :n], I[_BEND, :n], F[_V, :n], F[_E, :n],
                   need_exact, F[_G, :n], F[_BND, :n], F[_AA, :n], F[_AB, :n], F[_AW, :n], buf5)
        if need_exact:
            _ap_offdiag(n, R, F, I, beta, inv_r[q], np.empty((hq, hq)))
        _sorted_finish(n, F, I, order[a:b], alpha, mode, floor, constant, normalize, need_exact,
                       need_exact, w_q, grad[a:b], hess[a:b])


@njit(cache=True)
def _ap_value_query(s, rel_local, ir, alpha, beta, order, F, I):
    n = s.shape[0]
    _sorted_positions(s, order, alpha, F, I)
    R = _ap_relevant(n, F, I, order, rel_local, beta)
    acc = 0.0
    for a in range(R):
        acc += F[_QR, a] * (1.0 + F[_S, a])
    return acc * ir


@njit(parallel=True, cache=True)
def _ap_value_nb(s, rel_idx, rel_ptr, inv_r, group_ptr, alpha, beta, nt):
    """Per-query ApproxAP; 0 where the query has no relevant document (``pos`` is unused)."""
    nq = group_ptr.shape[0] - 1
    out = np.zeros(nq)
    order = np.full(s.shape[0], -1, dtype=np.int32)
    maxn, _ = _ap_split(group_ptr, rel_ptr, _PAR_MIN)
    Fs = np.empty((nt, _NF_AP, maxn))
    Is = np.empty((nt, _NI_AP, maxn + 1), dtype=np.int64)
    for t in prange(nt):
        for q in range(t, nq, nt):
            a = group_ptr[q]
            b = group_ptr[q + 1]
            if b - a < _PAR_MIN and inv_r[q] != 0.0:
                out[q] = _ap_value_query(s[a:b], rel_idx[rel_ptr[q]:rel_ptr[q + 1]], inv_r[q],
                                         alpha, beta, order[a:b], Fs[t], Is[t])
    for q in range(nq):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n = b - a
        if n >= _PAR_MIN and inv_r[q] != 0.0:
            F = np.empty((_NF_AP, n))
            I = np.empty((_NI_AP, n + 1), dtype=np.int64)
            buf1 = np.empty((nt, n))
            _sorted_prep(s[a:b], order[a:b], alpha, F, I)
            _par_positions(F[_X, :n], F[_EX, :n], I[_JEND, :n], I[_BEND, :n], F[_POS, :n], buf1)
            R = _ap_relevant(n, F, I, order[a:b], rel_idx[rel_ptr[q]:rel_ptr[q + 1]], beta)
            acc = 0.0
            for i in range(R):
                acc += F[_QR, i] * (1.0 + F[_S, i])
            out[q] = acc * inv_r[q]
    return out


# ---------------------------------------------------------------------------------------------
# Public entry points (thin wrappers: the thread count is read here, which keeps the compiled
# kernels cacheable).
# ---------------------------------------------------------------------------------------------


def ndcg_grad_hess(
    s, gains, inv_z, group_ptr, weights, alpha, k, beta, mode, floor, constant, normalize,
    grad, hess, order, par_min=_PAR_MIN,
):
    """Gradient and Hessian (approximation selected by ``mode``) of L = -sum_q ApproxNDCG_q.

    Fast path (notes above ``make_work``): equal to ``_ref_ndcg_grad_hess`` up to the stated
    window bound and rounding. ``weights`` has one entry per document, or is empty for unit
    weights. ``order`` (from ``make_work``) keeps each query's sort order between calls.
    Queries of at least ``par_min`` documents are split across threads. Queries with
    ``inv_z == 0`` or a single document get zero gradient and zero Hessian.
    """
    _ndcg_grad_hess_nb(s, gains, inv_z, group_ptr, weights, alpha, k, beta, mode, floor,
                       constant, normalize, grad, hess, order, par_min, get_num_threads())


def ap_grad_hess(
    s, rel_idx, rel_ptr, inv_r, group_ptr, weights, alpha, beta, mode, floor, constant,
    normalize, grad, hess, order, par_min=_PAR_MIN,
):
    """Gradient and Hessian (approximation selected by ``mode``) of L = -sum_q ApproxAP_q.

    Fast path, equal to ``_ref_ap_grad_hess`` up to the window bound and rounding. ``rel_idx``
    holds, query after query, the in-query offsets of the relevant documents, delimited by
    ``rel_ptr``. The exact diagonal's off-diagonal part (modes exact, abs, mixed) costs
    O(sum_k m_k^2), m_k the relevant documents in the window of k: O(n R^2) when all scores are
    close, as in the reference; H is cached per query when R <= 1024.
    """
    _ap_grad_hess_nb(s, rel_idx, rel_ptr, inv_r, group_ptr, weights, alpha, beta, mode, floor,
                     constant, normalize, grad, hess, order, par_min, get_num_threads())


def smoothed_positions(s, group_ptr, alpha, pos):
    """Fill ``pos`` with ``pos^_i = 1 + sum_{j != i} sig(alpha (s_j - s_i))`` per query."""
    _smoothed_positions_nb(s, group_ptr, alpha, pos, get_num_threads())


def ndcg_value(s, gains, inv_z, group_ptr, alpha, k, beta, pos):
    """Per-query ApproxNDCG (or ApproxNDCG@k when ``k > 0``); 0 where ``inv_z == 0``."""
    smoothed_positions(s, group_ptr, alpha, pos)
    return _ndcg_value_nb(gains, inv_z, group_ptr, k, beta, pos)


def ap_value(s, rel_idx, rel_ptr, inv_r, group_ptr, alpha, beta, pos=None):
    """Per-query ApproxAP; 0 where the query has no relevant document (``pos`` is unused)."""
    return _ap_value_nb(s, rel_idx, rel_ptr, inv_r, group_ptr, alpha, beta, get_num_threads())
