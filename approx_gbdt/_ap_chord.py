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
runs first); then per query a sort, ``S`` and ``v`` over the relevant documents (one
sigmoid per pair of them within ``_T / beta`` positions of each other, the farther pairs
counted as saturated: O(R log R + R W_beta)),
and the pair terms over each document's window ``alpha |s_j - s_k| <= 37`` (beyond it
``w < e^-37``), with ``e^{alpha (s_j - s_k)}`` from one exponential per document and per row
(the exp blocks of ``_pairs._windows``): O(n log n + n W + R W_beta) time and O(n) memory
per query, parallel over queries.

``ApproxAP(graded=True)`` averages these forces over ``T`` nested relevance levels (a
document relevant at a level is relevant at every lower one): one pass per query sorts and
windows the documents once, computes ``S`` and ``v`` of every level from one sigmoid per pair
of documents relevant at the lowest live level within ``_T / beta`` positions of each other
(added to each level at which both are relevant),
the pair terms of each level that has a pair of a relevant and an irrelevant document from
one weight ``w`` per pair of documents (shared by the levels), finishes each level on its
own (Hessian mode, normalisation, weights) and takes the mean; O(n log n + T (n W + R W_beta))
time, with O(n W + R W_beta) exponentials and divisions, and O(T n) memory per query.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from approx_gbdt._pairs import (
    _FM,
    _T,
    _hessian_of_loss,
    _segment,
    _sig_pair,
    _windows,
    argsort_desc,
    query_weights,
)
from approx_gbdt._reference import finish_query


@njit(inline="always", cache=True)
def _add_pair(above, slope, live, l0, top, ia, ib, sab, sba, tau, qa, qb):
    """Add the pair ``(ia, ib)`` of relevant documents to ``above`` and ``slope`` at every live
    level from ``l0`` below ``top`` (the levels at which both are relevant)."""
    for lv in range(l0, top):
        if live[lv]:
            above[lv, ia] += sab
            slope[lv, ia] += tau * (qa - qb)
            above[lv, ib] += sba
            slope[lv, ib] += tau * (qb - qa)


@njit(inline="always", cache=True)
def _relevant_all(pos, m, live, l0, idx, nr, beta, above, slope):
    """``above`` and ``slope`` of ``_relevant_terms`` from every pair of ``idx[:nr]`` (document
    order): each document's sums run over its partners in document order."""
    nl = live.shape[0]
    for ia in range(nr):
        a = idx[ia]
        pa = pos[a]
        qa = 1.0 / pa
        if nl == 1:  # one level: the row's own sums in registers
            up = above[0, ia]
            sl = slope[0, ia]
            for ib in range(ia + 1, nr):
                pb = pos[idx[ib]]
                sab, sba, tau = _sig_pair(beta * (pa - pb))
                qb = 1.0 / pb
                up += sab
                sl += tau * (qa - qb)
                above[0, ib] += sba
                slope[0, ib] += tau * (qb - qa)
            above[0, ia] = up
            slope[0, ia] = sl
            continue
        for ib in range(ia + 1, nr):
            b = idx[ib]
            top = min(m[a], m[b])
            pb = pos[b]
            sab, sba, tau = _sig_pair(beta * (pa - pb))
            qb = 1.0 / pb
            _add_pair(above, slope, live, l0, top, ia, ib, sab, sba, tau, qa, qb)


@njit(cache=True)
def _relevant_window(pos, m, live, l0, idx, nr, beta, above, slope):
    """``above`` and ``slope`` of ``_relevant_terms`` with ``idx[:nr]`` in ascending ``pos^``:
    the pairs with ``beta |pos^_a - pos^_b| <= _T`` one by one, each farther pair as its
    saturated value (``sig = 1`` for the document below, 0 for the one above, ``tau = 0``;
    ``_sig_pair`` rounds them to within ``e^-37`` of that): a count of the documents
    relevant at each level above the window. O(R log R + R W_beta) time."""
    nl = live.shape[0]
    cnt = np.zeros(nl)
    lo = 0
    for ia in range(nr):
        a = idx[ia]
        pa = pos[a]
        qa = 1.0 / pa
        while beta * (pa - pos[idx[lo]]) > _T:  # idx[lo] lies far above a
            for lv in range(l0, m[idx[lo]]):
                cnt[lv] += 1.0
            lo += 1
        for lv in range(l0, m[a]):
            above[lv, ia] += cnt[lv]
        for ib in range(ia + 1, nr):
            b = idx[ib]
            pb = pos[b]
            if beta * (pb - pa) > _T:
                break
            top = min(m[a], m[b])
            sab, sba, tau = _sig_pair(beta * (pa - pb))
            qb = 1.0 / pb
            _add_pair(above, slope, live, l0, top, ia, ib, sab, sba, tau, qa, qb)


@njit(cache=True)
def _relevant_terms(pos, m, live, inv_r, beta, v, c):
    """``v[l] = dM/dpos^`` (ApproxAP's tangent) and ``c[l] = (1 + S) / R`` of every live level
    ``l`` on its relevant documents (those with ``m > l``), zero elsewhere; ``inv_r[l]`` is 1
    over their number. Each pair of documents relevant at the lowest live level ``l0`` (the
    levels below it have no pair of a relevant and an irrelevant document and take no sums)
    takes one sigmoid, added to every level at which both are relevant. Where the relevant
    documents' positions span at most ``_T / beta`` (about 120 at the default beta), every
    pair does (O(R^2 / 2) exponentials for all the levels, ``R`` the count of level ``l0``),
    in document order (each document's sums over its partners in document order, as one
    level's loop over its own relevant documents would); otherwise they are taken in the
    order of their positions, and only the pairs within that distance one by one
    (``_relevant_window``, O(R log R + R W_beta))."""
    n = pos.shape[0]
    nl = live.shape[0]
    v[:] = 0.0
    c[:] = 0.0
    l0 = 0
    while not live[l0]:  # the caller passes a query with a live level
        l0 += 1
    nr = 0
    for i in range(n):
        if m[i] > l0:
            nr += 1
    idx = np.empty(nr, dtype=np.int64)
    k = 0
    p_min = np.inf
    p_max = -np.inf
    for i in range(n):
        if m[i] > l0:
            idx[k] = i
            k += 1
            p_min = min(p_min, pos[i])
            p_max = max(p_max, pos[i])
    above = np.ones((nl, nr))
    slope = np.zeros((nl, nr))
    if beta * (p_max - p_min) <= _T:
        _relevant_all(pos, m, live, l0, idx, nr, beta, above, slope)
    else:
        idx = idx[np.argsort(pos[idx], kind="mergesort")]
        _relevant_window(pos, m, live, l0, idx, nr, beta, above, slope)
    for lv in range(nl):
        if not live[lv]:
            continue
        for ia in range(nr):
            a = idx[ia]
            if m[a] > lv:
                qa = 1.0 / pos[a]
                v[lv, a] = (-qa * qa * above[lv, ia] + beta * slope[lv, ia]) * inv_r[lv]
                c[lv, a] = above[lv, ia] * inv_r[lv]


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


@njit(fastmath=_FM, cache=True)
def _row_weights(j0, j1, f, ex, wb):
    """``wb[col] = w`` of the row's pairs with the columns ``j0..j1-1``, as ``_row_terms``
    computes them, for the levels to share."""
    for col in range(j0, j1):
        e = f * ex[col]
        wb[col] = e / ((1.0 + e) * (1.0 + e))


@njit(fastmath=_FM, cache=True)
def _row_terms_w(j0, j1, wb, u, p, c_u, c_p, sign, gs, hs):
    """``_row_terms`` with the pair weights ``wb`` computed once for every level."""
    gr = 0.0
    hr = 0.0
    for col in range(j0, j1):
        t = wb[col] * (c_u * u[col] - c_p * p[col])
        gs[col] += sign * t
        at = abs(t)
        hs[col] += at
        gr += t
        hr += at
    return gr, hr


@njit(cache=True)
def _pair_terms(s, m, live, alpha, pos, v, c, g, bnd):
    """The chord pair terms of one query (module docstring) at each level ``l`` (a document
    ``i`` is relevant at the levels ``l < m_i``; ``live[l]``: the level has a pair of a
    relevant and an irrelevant document) into ``g[l]`` (``dM/ds``) and the sums of their
    absolute values into ``bnd[l]``. In sorted order (descending scores), with ``q = 1 /
    pos^``, a relevant ``k`` and an irrelevant ``j`` have ``v_kj = a_k - b_k q_j`` (``a_k = v_k
    + c_k q_k^2``, ``b_k = c_k q_k``; both 0 on the irrelevant documents). The sort, the exp
    blocks and the windows serve every level."""
    n = s.shape[0]
    nl = live.shape[0]
    o = np.empty(n, dtype=np.int64)
    argsort_desc(s, o)
    work = np.zeros((4, n))
    x, ex, q, wb = work[0], work[1], work[2], work[3]
    lev = np.zeros((6, nl, n))
    irr, irr_q, a, b, gs, hs = lev[0], lev[1], lev[2], lev[3], lev[4], lev[5]
    ends = np.empty((2, n), dtype=np.int64)
    gr = np.empty(nl)
    hr = np.empty(nl)
    top = s[o[0]]
    for r in range(n):
        i = o[r]
        x[r] = alpha * (s[i] - top)
        qi = 1.0 / pos[i]
        q[r] = qi
        for lv in range(nl):
            irr[lv, r] = 0.0 if m[i] > lv else 1.0
            irr_q[lv, r] = irr[lv, r] * qi
            a[lv, r] = v[lv, i] + c[lv, i] * qi * qi
            b[lv, r] = c[lv, i] * qi
    _windows(x, ex, ends[0], ends[1])
    for r in range(n):
        jend = ends[0, r]
        if jend <= r + 1:
            continue
        gr[:] = 0.0
        hr[:] = 0.0
        for part in range(2):  # the row's exp block and the next (``_pairs._segment``)
            j0, j1, f = _segment(part, r, r + 1, jend, ends[1, r], x, ex)
            if j0 >= j1:
                continue
            if nl == 1:  # one level: the weights in the loop
                if irr[0, r] == 0.0:  # relevant row: its irrelevant columns
                    dg, dh = _row_terms(j0, j1, f, ex, irr[0], irr_q[0], a[0, r], b[0, r],
                                        1.0, gs[0], hs[0])
                    gr[0] -= dg
                else:  # irrelevant row: its relevant columns
                    dg, dh = _row_terms(j0, j1, f, ex, a[0], b[0], 1.0, q[r], -1.0, gs[0],
                                        hs[0])
                    gr[0] += dg
                hr[0] += dh
                continue
            _row_weights(j0, j1, f, ex, wb)  # every level: the weights once
            for lv in range(nl):
                if not live[lv]:
                    continue
                if irr[lv, r] == 0.0:
                    dg, dh = _row_terms_w(j0, j1, wb, irr[lv], irr_q[lv], a[lv, r], b[lv, r],
                                          1.0, gs[lv], hs[lv])
                    gr[lv] -= dg
                else:
                    dg, dh = _row_terms_w(j0, j1, wb, a[lv], b[lv], 1.0, q[r], -1.0, gs[lv],
                                          hs[lv])
                    gr[lv] += dg
                hr[lv] += dh
        for lv in range(nl):
            gs[lv, r] += gr[lv]
            hs[lv, r] += hr[lv]
    for lv in range(nl):
        for r in range(n):
            g[lv, o[r]] = alpha * gs[lv, r]
            bnd[lv, o[r]] = alpha * hs[lv, r]


@njit(parallel=True, cache=True)
def ap_chord_grad_hess(s, pos, rel_idx, rel_ptr, inv_r, group_ptr, weights, alpha, beta, mode,
                       floor, constant, normalize, grad, hess):
    """Gradient and Hessian of ``L = -sum_q ApproxAP_q`` with chord pair forces (module
    docstring), at the smoothed positions ``pos`` of ``s``, averaged over ``T`` relevance
    levels (``ApproxAP(graded=True)``; ``T = 1`` otherwise): level ``l``'s relevant documents
    of query ``q`` are ``rel_idx[rel_ptr[l, q]:rel_ptr[l, q + 1]]`` (query offsets) and
    ``inv_r[l, q]`` is 1 over their number (0 for none); the levels nest (a document relevant
    at a level is relevant at every lower one). Each level's gradient and Hessian are finished
    (Hessian mode, normalisation, weights) on their own, then averaged; a level without a pair
    of a relevant and an irrelevant document adds 0. The other arguments as
    ``_kernels.grad_hess``'s for ApproxAP (``mode`` the bound's or the constant's)."""
    alpha2 = alpha * alpha
    nl = rel_ptr.shape[0]
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n = b - a
        gq = grad[a:b]
        hq = hess[a:b]
        gq[:] = 0.0
        hq[:] = 0.0
        if n < 2:
            continue
        # no pair of a relevant and an irrelevant document (none relevant, or all): no term
        live = np.zeros(nl, dtype=np.bool_)
        m = np.zeros(n, dtype=np.int64)
        for lv in range(nl):
            r0 = rel_ptr[lv, q]
            r1 = rel_ptr[lv, q + 1]
            live[lv] = inv_r[lv, q] != 0.0 and r1 - r0 < n
            for i in range(r0, r1):
                m[rel_idx[i]] += 1
        if not live.any():
            continue
        work = np.zeros((4, nl, n))
        v, c, g, bnd = work[0], work[1], work[2], work[3]
        pq = pos[a:b]
        _relevant_terms(pq, m, live, inv_r[:, q], beta, v, c)
        _pair_terms(s[a:b], m, live, alpha, pq, v, c, g, bnd)
        wq = query_weights(weights, a, b)
        hl = np.empty(n)
        for lv in range(nl):
            if not live[lv]:
                continue
            gl = g[lv]
            for i in range(n):
                gl[i] = -gl[i]
                hl[i] = _hessian_of_loss(mode, floor, constant, alpha2, 0.0, alpha * bnd[lv, i])
            finish_query(gl, hl, wq, normalize)
            if nl == 1:  # a copy: the binary objective's zeros keep their sign
                gq[:] = gl
                hq[:] = hl
            else:
                for i in range(n):
                    gq[i] += gl[i]
                    hq[i] += hl[i]
        if nl > 1:
            for i in range(n):
                gq[i] /= nl
                hq[i] /= nl
