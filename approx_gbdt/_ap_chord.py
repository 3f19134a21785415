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

O(n log n + n W + R^2) time per query, with ``W`` the documents within ``alpha |s_j - s_k|
<= 37`` of each (beyond, ``w < e^-37`` and the pair counts 0 or 1 in the positions exactly)
and ``R`` the relevant documents (``S``); O(n) memory per query, parallel over queries.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from approx_gbdt._pair_forces import _positions
from approx_gbdt._pairs import _hessian_of_loss, _sig_pair, query_weights
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


@njit(cache=True)
def _pair_terms(s, relevant, alpha, pos, v, c, o, jend, g, bnd):
    """The chord pair terms of one query (module docstring) into ``g`` (``dM/ds``) and the
    sums of their absolute values into ``bnd``, over the windows of ``_positions`` (``o``:
    the sorted order, descending scores; ``jend``: the windows' ends). In sorted order, with
    ``q = 1 / pos^``, a relevant ``k`` and an irrelevant ``j`` have ``v_kj = a_k - b_k q_j``
    (``a_k = v_k + c_k q_k^2``, ``b_k = c_k q_k``)."""
    n = s.shape[0]
    work = np.zeros((7, n))
    xs, rs, q, a, b, gs, hs = work[0], work[1], work[2], work[3], work[4], work[5], work[6]
    for r in range(n):
        i = o[r]
        xs[r] = alpha * s[i]
        rs[r] = relevant[i]
        qi = 1.0 / pos[i]
        q[r] = qi
        a[r] = v[i] + c[i] * qi * qi
        b[r] = c[i] * qi
    for r in range(n):
        rel_r = rs[r] > 0.0
        xr, ar, br, qr = xs[r], a[r], b[r], q[r]
        gr = 0.0
        hr = 0.0
        for col in range(r + 1, jend[r]):
            if (rs[col] > 0.0) == rel_r:
                continue  # swapping them leaves AP unchanged
            e = math.exp(xs[col] - xr)  # at most 1: col is ranked below r
            w = e / ((1.0 + e) * (1.0 + e))
            if rel_r:  # r relevant, col irrelevant: t is -(r's term), col's term
                t = alpha * w * (ar - br * q[col])
                gr -= t
                gs[col] += t
            else:  # col relevant, r irrelevant
                t = alpha * w * (a[col] - b[col] * qr)
                gr += t
                gs[col] -= t
            at = abs(t)
            hr += at
            hs[col] += at
        gs[r] += gr
        hs[r] += hr
    for r in range(n):
        g[o[r]] = gs[r]
        bnd[o[r]] = hs[r]


@njit(parallel=True, cache=True)
def ap_chord_grad_hess(s, rel_idx, rel_ptr, inv_r, group_ptr, weights, alpha, beta, mode,
                       floor, constant, normalize, grad, hess):
    """Gradient and Hessian of ``L = -sum_q ApproxAP_q`` with chord pair forces (module
    docstring); the arguments as ``_kernels.grad_hess``'s for ApproxAP (``mode`` the bound's
    or the constant's)."""
    alpha2 = alpha * alpha
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n = b - a
        rel = rel_idx[rel_ptr[q]:rel_ptr[q + 1]]
        # no pair of a relevant and an irrelevant document (none relevant, or all): no term
        if trivial_query(inv_r[q] if rel.shape[0] < n else 0.0, a, b, grad, hess):
            continue
        work = np.zeros((5, n))
        relevant, pos, v, c, bnd = work[0], work[1], work[2], work[3], work[4]
        for i in range(rel.shape[0]):
            relevant[rel[i]] = 1.0
        idx = np.empty((3, n), dtype=np.int64)
        sq = s[a:b]
        # (plain sigmoid positions: the labels argument is not read)
        _positions(sq, relevant, alpha, False, idx[0], idx[1], idx[2], pos)
        _relevant_terms(pos, rel, inv_r[q], beta, v, c)
        gq = grad[a:b]
        hq = hess[a:b]
        _pair_terms(sq, relevant, alpha, pos, v, c, idx[0], idx[2], gq, bnd)
        for i in range(n):
            gq[i] = -gq[i]
            hq[i] = _hessian_of_loss(mode, floor, constant, alpha2, 0.0, alpha * bnd[i])
        finish_query(gq, hq, query_weights(weights, a, b), normalize)
