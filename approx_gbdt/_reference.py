"""Exact O(n^2) reference loops: every pair visited, no window, no sorting.

They state the maths of the fast path (``_pairs``, ``_measure_terms``, ``_kernels``) in the
plainest form: the tests compare the fast kernels with them, and the benchmarks time them. Same
notation as ``_pairs``; each pair is visited once (``j > i``) with a single ``exp(-|x|)``.
Work arrays (length n) are passed in by the caller.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from approx_gbdt._measure_terms import _term
from approx_gbdt._pairs import (
    HESS_BOUND_SUM,
    HESS_MIXED_SUM,
    _hessian_of_loss,
    _sig_pair,
    need_exact_parts,
    query_weights,
)


@njit(cache=True)
def positions_query(s, alpha, pos):
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
def ref_positions(s, group_ptr, alpha, pos):
    """Fill ``pos`` with ``pos^_i = 1 + sum_{j != i} sig(alpha (s_j - s_i))`` per query."""
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        positions_query(s[a:b], alpha, pos[a:b])


@njit(cache=True)
def chain_query(s, alpha, v, e, need_exact, g, bnd, acc_a, acc_b, acc_w):
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


@njit(cache=True)
def floor_sums_query(s, alpha, v, aw, out):
    """Pairwise pass for the ``"mixed_sum"`` Hessian's floor: ``out_k = sum_{j != k} w_kj
    |v_j|`` where ``v_k = 0``, else ``sum_{j != k} w_kj (|v_j| + |v_k|) / 2`` (``aw_k = sum_{j
    != k} w_kj``)."""
    n = s.shape[0]
    for k in range(n):
        t = 0.0
        for j in range(n):
            if j != k:
                t += _sig_pair(alpha * (s[j] - s[k]))[2] * abs(v[j])
        out[k] = t if v[k] == 0.0 else 0.5 * (t + abs(v[k]) * aw[k])


@njit(cache=True)
def bound_sums_query(s, alpha, v, out):
    """Pairwise pass for the ``"bound_sum"`` Hessian: ``out_k = sum_{j != k} w_kj (|v_j| +
    |v_k|)``."""
    n = s.shape[0]
    for k in range(n):
        t = 0.0
        for j in range(n):
            if j != k:
                t += _sig_pair(alpha * (s[j] - s[k]))[2] * (abs(v[j]) + abs(v[k]))
        out[k] = t


@njit(inline="always")
def trivial_query(inv_z_q, a, b, grad, hess):
    """True, with the query's gradient and Hessian zeroed, when the query ``[a, b)`` has no
    relevant document (``inv_z_q == 0``) or fewer than two documents."""
    if inv_z_q != 0.0 and b - a >= 2:
        return False
    for i in range(a, b):
        grad[i] = 0.0
        hess[i] = 0.0
    return True


@njit(cache=True)
def finish_query(g, h, weights, normalize):
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
def ref_separable_value(s, gains, inv_z, group_ptr, alpha, kind, k, beta, theta, pos):
    """Per-query ``inv_z sum_i g_i t(pos^_i)`` (``_measure_terms``); 0 where ``inv_z == 0``."""
    nq = group_ptr.shape[0] - 1
    out = np.zeros(nq)
    for q in prange(nq):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        if inv_z[q] == 0.0:
            continue
        positions_query(s[a:b], alpha, pos[a:b])
        acc = 0.0
        for i in range(a, b):
            if gains[i] != 0.0:
                f, _, _ = _term(kind, pos[i], k, beta, theta)
                acc += gains[i] * f
        out[q] = acc * inv_z[q]
    return out


@njit(parallel=True, cache=True)
def ref_separable_grad_hess(
    s, gains, inv_z, group_ptr, weights, alpha, kind, k, beta, theta, mode, floor, constant,
    normalize, grad, hess, pos, v, e, acc_a, acc_b, acc_w,
):
    """Gradient and Hessian (approximation selected by ``mode``) of L = -sum_q M_q for a
    separable measure.

    ``weights`` has one entry per document, or is empty for unit weights. Queries with
    ``inv_z == 0`` or a single document get zero gradient and zero Hessian.
    """
    need_exact = need_exact_parts(mode)
    alpha2 = alpha * alpha
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        if inv_z[q] == 0.0 or b - a < 2:
            for i in range(a, b):
                grad[i] = 0.0
                hess[i] = 0.0
            continue
        positions_query(s[a:b], alpha, pos[a:b])
        iz = inv_z[q]
        for i in range(a, b):
            f, f1, f2 = _term(kind, pos[i], k, beta, theta)
            v[i] = gains[i] * f1 * iz
            e[i] = gains[i] * f2 * iz
        chain_query(s[a:b], alpha, v[a:b], e[a:b], need_exact, grad[a:b], hess[a:b],
                    acc_a[a:b], acc_b[a:b], acc_w[a:b])
        if mode == HESS_MIXED_SUM:  # the floor's sums in place of the bound
            floor_sums_query(s[a:b], alpha, v[a:b], acc_w[a:b], hess[a:b])
        if mode == HESS_BOUND_SUM:
            bound_sums_query(s[a:b], alpha, v[a:b], hess[a:b])
        for i in range(a, b):
            bound = alpha2 * hess[i]
            exact_m = 0.0
            if need_exact:
                exact_m = alpha2 * (-acc_a[i] + acc_b[i] + e[i] * acc_w[i] * acc_w[i])
            grad[i] = -alpha * grad[i]
            hess[i] = _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bound)
        finish_query(grad[a:b], hess[a:b], query_weights(weights, a, b), normalize)


# ----------------------------------------------------------------------------------------------
# ApproxAP: M = (1/R) sum_a q_a (1 + sum_{b != a} sig(beta (p_a - p_b))),  q_a = 1 / p_a,
# sums over the relevant documents a, b only.
# ----------------------------------------------------------------------------------------------


@njit(parallel=True, cache=True)
def ref_ap_value(s, rel_idx, rel_ptr, inv_r, group_ptr, alpha, beta, pos):
    """Per-query ApproxAP; 0 where the query has no relevant document."""
    nq = group_ptr.shape[0] - 1
    out = np.zeros(nq)
    for q in prange(nq):
        if inv_r[q] == 0.0:
            continue
        a0 = group_ptr[q]
        pq = pos[a0:group_ptr[q + 1]]
        positions_query(s[a0:group_ptr[q + 1]], alpha, pq)
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
def ref_ap_grad_hess(
    s, rel_idx, rel_ptr, inv_r, group_ptr, weights, alpha, beta, mode, floor, constant,
    normalize, grad, hess, pos, v, e, acc_a, acc_b, acc_w, u, offdiag,
):
    """Gradient and Hessian (approximation selected by ``mode``) of L = -sum_q ApproxAP_q.

    ``rel_idx`` holds, query after query, the in-query offsets of the relevant documents,
    delimited by ``rel_ptr``. ``u`` and ``offdiag`` are work arrays (length n) for the exact
    Hessian's off-diagonal part.
    """
    need_exact = need_exact_parts(mode)
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
        positions_query(sq, alpha, pq)
        for i in range(b - a):
            vq[i] = 0.0
            eq[i] = 0.0
        ridx = rel_idx[rel_ptr[q]:rel_ptr[q + 1]]
        _ap_first_second(pq, ridx, beta, inv_r[q], vq, eq)
        chain_query(sq, alpha, vq, eq, need_exact, grad[a:b], hess[a:b],
                     acc_a[a:b], acc_b[a:b], acc_w[a:b])
        if need_exact:
            _ap_offdiag_query(sq, pq, ridx, alpha, beta, inv_r[q], acc_w[a:b], u[a:b],
                              offdiag[a:b])
        if mode == HESS_BOUND_SUM:
            bound_sums_query(sq, alpha, vq, hess[a:b])
        for i in range(a, b):
            bound = alpha2 * hess[i]
            exact_m = 0.0
            if need_exact:
                exact_m = alpha2 * (
                    -acc_a[i] + acc_b[i] + e[i] * acc_w[i] * acc_w[i] + offdiag[i]
                )
            grad[i] = -alpha * grad[i]
            hess[i] = _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bound)
        finish_query(grad[a:b], hess[a:b], query_weights(weights, a, b), normalize)
