"""ApproxAP with swap-value (chord) pair forces: ``ApproxAP(pair_force="chord")``.

The gradient of ApproxAP is a sum of pair terms (``_pairs`` notation, ``w = sig (1 - sig)``
of ``alpha (s_j - s_k)``, ``v = dM/dpos^``, zero on the irrelevant documents)::

    dM/ds_k = alpha sum_j w_kj (v_j - v_k)

AP does not change when two relevant documents swap places, yet their tangent term
``w_kj (v_j - v_k)`` is not zero: ``v`` differs with the position. Chord forces give every
pair the value of swapping its two documents per position moved, as
``ApproxNDCG(pair_force="chord")`` does for NDCG:

- a pair of two relevant (or two irrelevant) documents has no term;
- a relevant ``k`` and an irrelevant ``j`` take, in place of ``v_k``,

      v_kj = v_k + (1 + S_k) / R * (1 / pos^_k^2 - 1 / (pos^_k pos^_j)),

  where ``(1 + S_k) / pos^_k`` is ``k``'s precision term (``S_k = sum_{i rel, i != k}
  sig(beta (pos^_k - pos^_i))``, the relevant documents above ``k``) and ``v_k`` holds its
  tangent ``-(1 + S_k) / (R pos^_k^2)``: the term's tangent at ``k``'s own position is
  replaced by its chord between the two positions. A relevant document below an irrelevant
  one then gets the (larger) slope between the two positions, one above it the (smaller)
  slope beyond its own; at equal positions the chord is the tangent.

So, with ``rel`` the relevant documents and ``irr`` the others::

    dM/ds_k = -alpha sum_{j in irr} w_kj v_kj     (k relevant)
    dM/ds_j =  alpha sum_{k in rel} w_kj v_kj     (j irrelevant)

Chord forces are not the gradient of a function, so they have no exact Hessian; their bound
Hessian is ``alpha^2 sum_j w_kj |v_kj|`` over the pairs of a relevant and an irrelevant
document (``hessian="bound"``), or ``hessian="constant"``. A query without such a pair (one
document, none relevant or all relevant) gets zero gradients and Hessians.

The positions come from the fast kernels (``_kernels.smoothed_positions``, which the caller
runs first); then per query a sort, ``S`` and ``v`` over the relevant documents (O(R^2)),
and the pair terms over each document's window ``alpha |s_j - s_k| <= 37`` (beyond it
``w < e^-37``), with ``e^{alpha (s_j - s_k)}`` from one exponential per document and per row
(the exp blocks of ``_pairs._windows``): O(n log n + n W + R^2) time and O(n) memory per
query, parallel over queries.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from approx_gbdt._pairs import (
    _FM,
    _hessian_of_loss,
    _segment,
    _sig_pair,
    _windows,
    argsort_desc,
    query_weights,
)
from approx_gbdt._reference import finish_query, trivial_query


@njit(cache=True)
def _relevant_terms(pos, rel, inv_r, beta, v, c):
    """``v = dM/dpos^`` (ApproxAP's tangent) and ``c = (1 + S) / R`` on the relevant documents
    ``rel`` (query offsets), O(R^2); zero elsewhere."""
    v[:] = 0.0
    c[:] = 0.0
    nr = rel.shape[0]
    for ia in range(nr):
        pa = pos[rel[ia]]
        qa = 1.0 / pa
        above = 1.0
        slope = 0.0
        for ib in range(nr):
            if ib == ia:
                continue
            pb = pos[rel[ib]]
            sab, _, tau = _sig_pair(beta * (pa - pb))
            above += sab
            slope += tau * (qa - 1.0 / pb)
        v[rel[ia]] = (-qa * qa * above + beta * slope) * inv_r
        c[rel[ia]] = above * inv_r


@njit(fastmath=_FM, cache=True)
def _row_terms(j0, j1, f, ex, u, p, c_u, c_p, sign, gs, hs):
    """A row's pairs with the columns ``j0..j1-1`` (``e^{x_col - x_row} = f ex_col``): each
    takes ``t = w (c_u u_col - c_p p_col)``, adds ``sign t`` to the column's ``gs`` and ``|t|``
    to its ``hs``, and the row's sums of ``t`` and ``|t|`` are returned. ``t`` is ``1 / alpha``
    times the relevant document's ``-dM/ds`` term: a relevant row passes ``u = irr``,
    ``p = irr q``, ``(c_u, c_p) = (a_r, b_r)`` and ``sign = 1``; an irrelevant row ``u = a``,
    ``p = b`` (0 on the irrelevant columns), ``(1, q_r)`` and ``sign = -1``."""
    gr = 0.0
    hr = 0.0
    for col in range(j0, j1):
        e = f * ex[col]
        w = e / ((1.0 + e) * (1.0 + e))
        t = w * (c_u * u[col] - c_p * p[col])
        gs[col] += sign * t
        at = abs(t)
        hs[col] += at
        gr += t
        hr += at
    return gr, hr


@njit(cache=True)
def _pair_terms(s, relevant, alpha, pos, v, c, g, bnd):
    """The chord pair terms of one query (module docstring) into ``g`` (``dM/ds``) and the
    sums of their absolute values into ``bnd``. In sorted order (descending scores), with
    ``q = 1 / pos^``, a relevant ``k`` and an irrelevant ``j`` have ``v_kj = a_k - b_k q_j``
    (``a_k = v_k + c_k q_k^2``, ``b_k = c_k q_k``; both 0 on the irrelevant documents)."""
    n = s.shape[0]
    o = np.empty(n, dtype=np.int64)
    argsort_desc(s, o)
    work = np.zeros((9, n))
    x, ex, irr, irr_q, q, a, b, gs, hs = (work[0], work[1], work[2], work[3], work[4], work[5],
                                          work[6], work[7], work[8])
    ends = np.empty((2, n), dtype=np.int64)
    top = s[o[0]]
    for r in range(n):
        i = o[r]
        x[r] = alpha * (s[i] - top)
        irr[r] = 1.0 - relevant[i]
        qi = 1.0 / pos[i]
        q[r] = qi
        irr_q[r] = irr[r] * qi
        a[r] = v[i] + c[i] * qi * qi
        b[r] = c[i] * qi
    _windows(x, ex, ends[0], ends[1])
    for r in range(n):
        jend = ends[0, r]
        if jend <= r + 1:
            continue
        gr = 0.0
        hr = 0.0
        for part in range(2):  # the row's exp block and the next (``_pairs._segment``)
            j0, j1, f = _segment(part, r, r + 1, jend, ends[1, r], x, ex)
            if j0 < j1:
                if irr[r] == 0.0:  # relevant row: its irrelevant columns
                    dg, dh = _row_terms(j0, j1, f, ex, irr, irr_q, a[r], b[r], 1.0, gs, hs)
                    gr -= dg
                else:  # irrelevant row: its relevant columns
                    dg, dh = _row_terms(j0, j1, f, ex, a, b, 1.0, q[r], -1.0, gs, hs)
                    gr += dg
                hr += dh
        gs[r] += gr
        hs[r] += hr
    for r in range(n):
        g[o[r]] = alpha * gs[r]
        bnd[o[r]] = alpha * hs[r]


@njit(parallel=True, cache=True)
def ap_chord_grad_hess(s, pos, rel_idx, rel_ptr, inv_r, group_ptr, weights, alpha, beta, mode,
                       floor, constant, normalize, grad, hess):
    """Gradient and Hessian of ``L = -sum_q ApproxAP_q`` with chord pair forces (module
    docstring), at the smoothed positions ``pos`` of ``s``; the other arguments as
    ``_kernels.grad_hess``'s for ApproxAP (``mode`` the bound's or the constant's)."""
    alpha2 = alpha * alpha
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n = b - a
        rel = rel_idx[rel_ptr[q]:rel_ptr[q + 1]]
        # no pair of a relevant and an irrelevant document (none relevant, or all): no term
        if trivial_query(inv_r[q] if rel.shape[0] < n else 0.0, a, b, grad, hess):
            continue
        work = np.zeros((4, n))
        relevant, v, c, bnd = work[0], work[1], work[2], work[3]
        for i in range(rel.shape[0]):
            relevant[rel[i]] = 1.0
        pq = pos[a:b]
        _relevant_terms(pq, rel, inv_r[q], beta, v, c)
        gq = grad[a:b]
        hq = hess[a:b]
        _pair_terms(s[a:b], relevant, alpha, pq, v, c, gq, bnd)
        for i in range(n):
            gq[i] = -gq[i]
            hq[i] = _hessian_of_loss(mode, floor, constant, alpha2, 0.0, alpha * bnd[i])
        finish_query(gq, hq, query_weights(weights, a, b), normalize)
