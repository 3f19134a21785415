"""LambdaLoss's NDCG-Loss2++ (Wang et al., CIKM 2018): the pair part of ``ApproxNDCG(lambdaloss=)``.

Per query, with ``r`` the 1-based positions by the current scores (ties by document index),
``G = 2^y - 1``, ``Z`` the ideal DCG, ``D(x) = log2(1 + x)`` and, for each pair with
``y_i > y_j``,

    w_ij = (G_i - G_j) / Z * ( |1/D(r_i) - 1/D(r_j)| + mu |1/D(d) - 1/D(d + 1)| ),
    d = |r_i - r_j|,

the loss is ``L = sum_{y_i > y_j} w_ij log(1 + e^{-(s_i - s_j)})`` with the weights held fixed
(they move only when the ranking does). With ``p = sigmoid(s_i - s_j)`` a pair adds
``-w (1 - p)`` to ``dL/ds_i``, ``+w (1 - p)`` to ``dL/ds_j`` and ``w p (1 - p)`` to both
Hessian diagonals (the exact diagonal for fixed weights, never negative). The first term of
``w`` is LambdaRank's ``|Delta NDCG|`` of swapping the pair, the second (``mu = 10``) favours
pairs close in rank. Each query's gradient and Hessian are then normalised and weighted as
the approx objectives' (``finish_query``).

O(n^2) time (every pair of a query), or O(window n) when only the pairs with a document among
the first ``window`` positions (as LightGBM's ``lambdarank_truncation_level``) or at most
``window`` positions apart count, and O(n) memory per query; parallel over chunks of queries.

The pairs are visited in sorted order (row ``t``, then the documents ranked below it), so that
every quantity of a column is read from a contiguous array and the inner loop vectorises: the
ranks are the sorted positions, ``1/D`` of a position and of a rank distance come from tables
made once per call, and ``e^{s_u - s_t}`` is a product of one exponential per document and
one per row, within exp blocks of the raw scores of span at most 300 (``_pairs._windows``;
the pairs further apart than the next block have ``e^{s_u - s_t} < e^-300`` and count with
``e = 0``: a misordered pair gets the whole force ``w``, a well-ordered one none).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from approx_gbdt._pairs import _FM, _STEP, _segment, _windows, query_weights, sort_desc_by_index
from approx_gbdt._reference import finish_query, trivial_query

MU = 10.0  # weight of the rank-distance term


@njit(fastmath=_FM, error_model="numpy", cache=True, **_STEP)
def _pair_seg(j0, j1, t, f, gt, it, iz, mu_iz, gs, ind, dd, ex, g, h):
    """The pairs of row ``t`` with the columns ``j0..j1-1`` (all ranked below ``t``), where
    ``e^{s_(u) - s_(t)} = f ex_u``: adds to the columns' ``g`` and ``h`` and returns the row's
    sums. ``dd`` is indexed by the rank distance ``u - t``."""
    gs, ind, ex, g, h = gs[j0:j1], ind[j0:j1], ex[j0:j1], g[j0:j1], h[j0:j1]
    dd = dd[j0 - t:j1 - t]
    gi = 0.0
    hi = 0.0
    for j in range(gs.shape[0]):
        dG = gt - gs[j]
        w = dG * (iz * (it - ind[j]) + mu_iz * dd[j])
        e = f * ex[j]
        p = 1.0 / (1.0 + e)
        # 1 - sigmoid(s_i - s_j) of the more relevant document i: e p if it is the row's
        q = e * p if dG > 0.0 else p
        gw = w * q
        gi -= gw
        g[j] += gw
        c = abs(w) * (e * p * p)
        hi += c
        h[j] += c
    return gi, hi


@njit(cache=True, **_STEP)
def _query(s, gains, inv_z, mu, window, ind, dd, order, x, ex, jend, bend, gs, g, h):
    """One query's NDCG-Loss2++ gradient and Hessian in sorted order (``g``, ``h``); ``order``
    holds the last call's sort of the query (``-1`` at first) and receives this one's
    (descending ``s``, ties by index)."""
    n = s.shape[0]
    sort_desc_by_index(s, order)
    top = s[order[0]]
    for t in range(n):
        x[t] = s[order[t]] - top
        gs[t] = gains[order[t]]
        g[t] = 0.0
        h[t] = 0.0
    # exp blocks of span <= 300 of the raw scores (the window ends are not used): a pair
    # beyond the next block has e^{s_u - s_t} < e^-300 and counts with 0
    _windows(x, ex, jend, bend)
    mu_iz = mu * inv_z
    for t in range(n):
        u1 = n if window == 0 or t < window else min(n, t + window + 1)
        if u1 <= t + 1:
            continue
        b1 = bend[t]
        b2 = bend[b1] if b1 < n else n
        gi = 0.0
        hi = 0.0
        for part in range(3):
            if part < 2:  # the row's exp block and the next (_pairs._segment)
                j0, j1, f = _segment(part, t, t + 1, min(u1, b2), b1, x, ex)
            else:
                j0, j1, f = max(t + 1, b2), u1, 0.0
            if j0 < j1:
                a, b = _pair_seg(j0, j1, t, f, gs[t], ind[t], inv_z, mu_iz, gs, ind, dd, ex,
                                 g, h)
                gi += a
                hi += b
        g[t] += gi
        h[t] += hi


@njit(parallel=True, cache=True)
def lambdaloss_grad_hess(s, gains, inv_z, group_ptr, weights, mu, window, normalize, grad,
                         hess, order):
    """NDCG-Loss2++ gradient and Hessian diagonal into ``grad`` and ``hess`` (module
    docstring), over every pair (``window == 0``) or over the pairs with a document among the
    first ``window`` positions or at most ``window`` positions apart (O(window n) per query);
    ``gains``, ``inv_z`` (0 for a query without a relevant document) and ``weights`` (per
    document, or empty) as the approx kernels take them. ``order`` (int32, one per document,
    ``-1`` at first) keeps each query's sort order between calls: boosting moves the scores a
    little per round, and re-sorting from the last order costs O(n + moves) while few
    documents move (O(n log n) at worst: runs and merges of their overlaps) where sorting
    afresh costs O(n log n) unpredictable branches."""
    nq = group_ptr.shape[0] - 1
    m = 2
    for q in range(nq):
        m = max(m, group_ptr[q + 1] - group_ptr[q])
    # ind[t] = 1 / D(t + 1) (the discount of sorted position t), dd[d] = 1 / D(d) - 1 / D(d + 1)
    ind = np.empty(m)
    dd = np.zeros(m)
    for t in range(m):
        ind[t] = 1.0 / math.log2(2.0 + t)
    for d in range(1, m):
        dd[d] = ind[d - 1] - ind[d]
    # chunks of whole queries (about equal numbers of documents), work space once per chunk
    nch = min(nq, 64)
    cuts = np.searchsorted(group_ptr, np.linspace(0, group_ptr[-1], nch + 1))
    cuts[0] = 0
    cuts[-1] = nq
    for c in prange(nch):
        q0 = min(cuts[c], nq)
        q1 = min(max(cuts[c + 1], q0), nq)
        big = 0
        for q in range(q0, q1):
            big = max(big, group_ptr[q + 1] - group_ptr[q])
        ints = np.empty((2, big + 1), dtype=np.int64)
        work = np.empty((5, big))
        for q in range(q0, q1):
            a = group_ptr[q]
            b = group_ptr[q + 1]
            n = b - a
            if trivial_query(inv_z[q], a, b, grad, hess):
                continue
            o = order[a:b]
            _query(s[a:b], gains[a:b], inv_z[q], mu, window, ind, dd, o, work[0, :n],
                   work[1, :n], ints[0, :n + 1], ints[1, :n + 1], work[2, :n], work[3, :n],
                   work[4, :n])
            for t in range(n):
                grad[a + o[t]] = work[3, t]
                hess[a + o[t]] = work[4, t]
            finish_query(grad[a:b], hess[a:b], query_weights(weights, a, b), normalize)
