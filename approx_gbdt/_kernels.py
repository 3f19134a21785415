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
from numba import njit, prange

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
def smoothed_positions(s, group_ptr, alpha, pos):
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
def ndcg_value(s, gains, inv_z, group_ptr, alpha, k, beta, pos):
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
def ndcg_grad_hess(
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
def ap_value(s, rel_idx, rel_ptr, inv_r, group_ptr, alpha, beta, pos):
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
def ap_grad_hess(
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
