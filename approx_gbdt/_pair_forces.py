"""ApproxNDCG with label-aware smoothed positions and swap-value (chord) pair forces.

Two options of :class:`approx_gbdt.ApproxNDCG` that change the pair loop itself, in one
O(n^2)-time, O(n)-memory kernel per query (parallel over queries):

Label-aware positions (``positions="label_aware"``). Document ``i`` counts a document ``j``
that is *less* relevant (``y_j < y_i``) with the softplus ``log2(1 + e^x)`` instead of the
sigmoid, ``x = alpha (s_j - s_i)``::

    pos^_i = 1 + sum_{j: y_j >= y_i} sig(x_ij) + sum_{j: y_j < y_i} log2(1 + e^{x_ij})

``log2(1 + e^x) >= 1[x > 0]`` bounds the count of a misordered document from above, and its
slope ``sig(x) / ln 2`` does not vanish when ``j`` is far above ``i``: a far-misordered pair
keeps its force, where the sigmoid's slope ``sig (1 - sig)`` decays like ``e^-|x|``.

With ``phi_ij`` the pair function of ``i``'s position (sigmoid or softplus) the chain rule is

    dM/ds_k   = alpha sum_j [ v_j phi'_jk(x_jk) - v_k phi'_kj(x_kj) ]
    d2M/ds_k2 = alpha^2 [ sum_{j != k} (e_j phi'_jk^2 + v_j phi''_jk) + e_k (sum_j phi'_kj)^2
                          + v_k sum_j phi''_kj ]

with ``v = dM/dpos^``, ``e = d2M/dpos^2`` (NDCG is separable). For the sigmoid everywhere it
is the plain ApproxNDCG gradient ``alpha sum_j w_kj (v_j - v_k)``.

Swap-value pair forces (``pair_force="chord"``). The tangent force of a pair compares the
slopes ``G_k f'(p_k)`` and ``G_j f'(p_j)`` of the gain-weighted discount ``f = D T`` at each
document's own position. The chord force uses, for both documents, the slope of the chord of
``f`` between the two positions, ``c_kj = (f(p_j) - f(p_k)) / (p_j - p_k)``:

    v_k -> G_k c_kj / Z,   v_j -> G_j c_kj / Z        (per pair)

so the pair's force is the value of swapping the two documents (``(G_k - G_j)(f(p_j) - f(p_k))
/ Z``) per position moved: a document of grade 1 at position 1 cannot push one of grade 4 at
position 5 down, as tangents can. Chord forces are not the gradient of a function, so they
have no exact Hessian; their Hessian is the bound below.

Swap forces (``pair_force="swap"``) multiply the chord slope by ``max(1, |p_j - p_k|)``: the
whole value of the swap, as LambdaRank's ``|Delta NDCG|`` weights, for pairs more than one
position apart, and the chord (the tangent at equal positions) for closer ones, so that tied
documents at a constant start still get a force.

Without label-aware positions the pair loop visits, in score order, only the pairs with
``alpha |s_j - s_i| <= 37`` (as the default kernel does): the others count exactly 0 or 1 in
the positions and their forces are below ``e^-37`` relative. Softplus pairs never saturate, so
label-aware positions cost O(n^2) per query.

Bound Hessian (``hessian="bound"``) for every option: ``alpha sum_j |t_kj|`` where ``t_kj`` is
the pair's term of the gradient above; for the sigmoid and tangents it is the package's
``alpha^2 sum_j w_kj |v_j - v_k|``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from approx_gbdt._measure_terms import _term
from approx_gbdt._pairs import (
    _T,
    _hessian_of_loss,
    argsort_desc,
    need_exact_parts,
    query_weights,
)
from approx_gbdt._reference import finish_query, trivial_query

_INV_LN2 = 1.0 / math.log(2.0)
# Below this gap of smoothed positions the chord slope is the mean of the two tangents
# (error O(gap^2)); above it the difference quotient (rounding error ~1e-16 / gap).
_CHORD_EPS = 1e-4


@njit(inline="always", cache=True)
def _pair_fns(x, soft_ij, soft_ji):
    """``(phi, phi', phi'')`` of ``i``'s pair function at ``x`` and of ``j``'s at ``-x``, each
    the sigmoid or, if ``soft_*``, ``log2(1 + e^x)``; one ``exp`` for both."""
    e = math.exp(-abs(x))
    p = 1.0 / (1.0 + e)
    sig = p if x >= 0.0 else e * p  # sig(x)
    neg = e * p if x >= 0.0 else p  # sig(-x), without the cancellation of 1 - sig
    w = e * p * p
    if soft_ij or soft_ji:
        l1 = math.log1p(e)
    if soft_ij:
        a0, a1, a2 = (max(x, 0.0) + l1) * _INV_LN2, sig * _INV_LN2, w * _INV_LN2
    else:
        a0, a1, a2 = sig, w, w * (neg - sig)
    if soft_ji:
        b0, b1, b2 = (max(-x, 0.0) + l1) * _INV_LN2, neg * _INV_LN2, w * _INV_LN2
    else:
        b0, b1, b2 = neg, w, w * (sig - neg)
    return a0, a1, a2, b0, b1, b2


@njit(cache=True)
def _window(s, alpha, aware, o, jst, jend):
    """Sort the query (``o``: indices by descending score) and, unless ``aware``, the window
    of every sorted row ``r``: ``[jst_r, jend_r)`` holds the documents with
    ``alpha |s_j - s_r| <= _T``. Outside it a sigmoid pair is saturated: it counts exactly 1
    (above) or 0 (below) in the position, and its slope is below ``e^-_T`` (~1e-16). Softplus
    pairs never saturate, so label-aware positions take the whole query."""
    n = s.shape[0]
    argsort_desc(s, o)
    if aware:
        jst[:] = 0
        jend[:] = n
        return
    i = 0
    j = 0
    for r in range(n):
        xr = alpha * s[o[r]]
        while alpha * s[o[i]] - xr > _T:
            i += 1
        jst[r] = i
        if j < r + 1:
            j = r + 1
        while j < n and xr - alpha * s[o[j]] <= _T:
            j += 1
        jend[r] = j


@njit(cache=True)
def _positions(s, y, alpha, aware, o, jst, jend, pos):
    """Smoothed (label-aware if ``aware``) positions of one query, over the windows of
    ``_window``, which it fills (``o``, ``jst``, ``jend``)."""
    n = s.shape[0]
    _window(s, alpha, aware, o, jst, jend)
    for r in range(n):
        pos[o[r]] = 1.0 + jst[r]  # the documents saturated above
    for r in range(n):
        i = o[r]
        for c in range(r + 1, jend[r]):
            j = o[c]
            x = alpha * (s[j] - s[i])
            pij, _, _, pji, _, _ = _pair_fns(x, aware and y[j] < y[i], aware and y[i] < y[j])
            pos[i] += pij
            pos[j] += pji


@njit(cache=True)
def _query(s, y, gains, iz, alpha, kind, k, beta, theta, aware, chord, swap, need_exact, o,
           jst, jend, pos, f0, f1, v, e, g, bnd, aa, dd, ww):
    n = s.shape[0]
    _positions(s, y, alpha, aware, o, jst, jend, pos)
    for i in range(n):
        t0, t1, t2 = _term(kind, pos[i], k, beta, theta)
        f0[i] = t0
        f1[i] = t1
        v[i] = gains[i] * t1 * iz
        e[i] = gains[i] * t2 * iz
        g[i] = 0.0
        bnd[i] = 0.0
        aa[i] = 0.0
        dd[i] = 0.0
        ww[i] = 0.0
    for r in range(n):
        i = o[r]
        for c in range(r + 1, jend[r]):
            j = o[c]
            if gains[i] == 0.0 and gains[j] == 0.0:
                continue  # v = e = 0 for both: the pair moves nothing
            x = alpha * (s[j] - s[i])
            _, d_ij, dd_ij, _, d_ji, dd_ji = _pair_fns(x, aware and y[j] < y[i],
                                                       aware and y[i] < y[j])
            if chord:
                gap = pos[j] - pos[i]
                if abs(gap) > _CHORD_EPS:
                    c_ij = (f0[j] - f0[i]) / gap
                else:
                    c_ij = 0.5 * (f1[i] + f1[j])
                if swap and abs(gap) > 1.0:
                    c_ij *= abs(gap)
                vi = gains[i] * c_ij * iz
                vj = gains[j] * c_ij * iz
            else:
                vi = v[i]
                vj = v[j]
            t = alpha * (vj * d_ji - vi * d_ij)  # the pair's term of dM/ds_i (and -t of s_j)
            g[i] += t
            g[j] -= t
            at = alpha * abs(t)
            bnd[i] += at
            bnd[j] += at
            if need_exact:
                aa[i] += e[j] * d_ji * d_ji + v[j] * dd_ji
                aa[j] += e[i] * d_ij * d_ij + v[i] * dd_ij
                ww[i] += d_ij
                ww[j] += d_ji
                dd[i] += dd_ij
                dd[j] += dd_ji


@njit(parallel=True, cache=True)
def pair_force_grad_hess(s, y, gains, inv_z, group_ptr, weights, alpha, kind, k, beta, theta,
                         aware, chord, swap, mode, floor, constant, normalize, grad, hess):
    """Gradient and Hessian of ``L = -sum_q M_q`` for label-aware positions and/or chord
    forces (see the module docstring) of the separable measure with position term ``kind``
    (``_measure_terms``); the other arguments as ``_kernels.grad_hess``."""
    need_exact = need_exact_parts(mode)
    alpha2 = alpha * alpha
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n = b - a
        if trivial_query(inv_z[q], a, b, grad, hess):
            continue
        work = np.empty((9, n))
        pos, f0, f1, v, e = work[0], work[1], work[2], work[3], work[4]
        bnd, aa, dd, ww = work[5], work[6], work[7], work[8]
        idx = np.empty((3, n), dtype=np.int64)
        gq = grad[a:b]
        _query(s[a:b], y[a:b], gains[a:b], inv_z[q], alpha, kind, k, beta, theta, aware, chord,
               swap, need_exact, idx[0], idx[1], idx[2], pos, f0, f1, v, e, gq, bnd, aa, dd, ww)
        hq = hess[a:b]
        for i in range(n):
            exact_m = 0.0
            if need_exact:
                exact_m = alpha2 * (aa[i] + e[i] * ww[i] * ww[i] + v[i] * dd[i])
            gq[i] = -gq[i]
            hq[i] = _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bnd[i])
        finish_query(gq, hq, query_weights(weights, a, b), normalize)


@njit(parallel=True, cache=True)
def label_aware_positions(s, y, group_ptr, alpha, pos):
    """Label-aware smoothed positions (module docstring), query by query."""
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        idx = np.empty((3, b - a), dtype=np.int64)
        _positions(s[a:b], y[a:b], alpha, True, idx[0], idx[1], idx[2], pos[a:b])
