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
``window`` positions apart count, and O(n) memory per query; parallel over queries.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from approx_gbdt._pairs import argsort_desc, query_weights
from approx_gbdt._reference import finish_query, trivial_query

MU = 10.0  # weight of the rank-distance term


@njit(inline="always")
def _add_pair(s, gains, inv_z, mu, inv_d, i, j, ri, rj, g, h):
    """The pair ``(i, j)``, ``gains[i] > gains[j]``, at positions ``ri`` and ``rj``."""
    d = abs(ri - rj)
    rho = abs(inv_d[ri] - inv_d[rj])
    delta = inv_d[d] - inv_d[d + 1]
    w = (gains[i] - gains[j]) * inv_z * (rho + mu * delta)
    q = 1.0 / (1.0 + math.exp(s[i] - s[j]))  # 1 - p
    g[i] -= w * q
    g[j] += w * q
    c = w * q * (1.0 - q)
    h[i] += c
    h[j] += c


@njit(cache=True)
def _query(s, gains, inv_z, mu, window, order, rank, inv_d, g, h):
    n = s.shape[0]
    argsort_desc(s, order)  # ties by document index
    for t in range(n):
        rank[order[t]] = t + 1
        g[t] = 0.0
        h[t] = 0.0
    for r in range(1, n + 1):
        inv_d[r] = 1.0 / math.log2(1.0 + r)  # 1 / D(r)
    if window == 0:  # every pair
        for i in range(n):
            for j in range(n):
                if gains[i] > gains[j]:
                    _add_pair(s, gains, inv_z, mu, inv_d, i, j, rank[i], rank[j], g, h)
        return
    for t in range(n):  # a document among the first ``window``, or at most ``window`` apart
        a = order[t]
        for u in range(t + 1, n if t < window else min(n, t + window + 1)):
            b = order[u]
            if gains[a] > gains[b]:
                _add_pair(s, gains, inv_z, mu, inv_d, a, b, t + 1, u + 1, g, h)
            elif gains[b] > gains[a]:
                _add_pair(s, gains, inv_z, mu, inv_d, b, a, u + 1, t + 1, g, h)


@njit(parallel=True, cache=True)
def lambdaloss_grad_hess(s, gains, inv_z, group_ptr, weights, mu, window, normalize, grad,
                         hess):
    """NDCG-Loss2++ gradient and Hessian diagonal into ``grad`` and ``hess`` (module
    docstring), over every pair (``window == 0``) or over the pairs with a document among the
    first ``window`` positions or at most ``window`` positions apart (O(window n) per query);
    ``gains``, ``inv_z`` (0 for a query without a relevant document) and ``weights`` (per
    document, or empty) as the approx kernels take them."""
    for q in prange(group_ptr.shape[0] - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n = b - a
        if trivial_query(inv_z[q], a, b, grad, hess):
            continue
        idx = np.empty((2, n), dtype=np.int64)
        inv_d = np.empty(n + 1)
        _query(s[a:b], gains[a:b], inv_z[q], mu, window, idx[0], idx[1], inv_d, grad[a:b],
               hess[a:b])
        finish_query(grad[a:b], hess[a:b], query_weights(weights, a, b), normalize)
