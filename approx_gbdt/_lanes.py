"""Pair loops across queries: the shortest queries, ``LANES`` queries of one length at a time.

A query of a few documents gives the row loops of ``_small`` rows too short to vectorise: most
of their time goes to each row's loop overhead and scalar remainder. Here the queries of one
length ``m`` (below ``LANES_N``) are taken ``LANES`` at a time, each query a lane: every array
is ``[document, lane]``, and every loop runs over the lanes, the same arithmetic for each
query, so that it vectorises whatever ``m`` is. Each unordered pair ``i < j`` is visited once
and updates both documents' sums (``_small`` visits every ordered pair), with, per lane,
``x_i = alpha (s_i - max s)`` and ``E_i = exp(x_i)`` (one exponential per document):

    sig_ij = E_j / (E_i + E_j),   sig_ji = E_i / (E_i + E_j),   w_ij = sig_ij sig_ji

one division per pair. A lane whose ``alpha`` times score range reaches ``_small._SPREAD`` is
done again alone with one exponential per pair (``_small._sig_wide``; a NaN difference, where
``alpha s`` overflowed, counts as below in both directions, as in ``_small``). The table of
the block's pairs (``sig_ij`` and ``w_ij``, ``2 m (m - 1) / 2`` floats a lane) is filled once
and read by the chain-rule sums; no pair is skipped. ApproxAP's
``v`` comes from each lane's own query (``_measure_terms.ap_small``, on its relevant documents),
which is why its lane loops stop at shorter queries (``LANES_N_AP``). Every sum of a lane is
taken in the same order whichever lanes share its block, so a query's results do not depend on
the other queries. The scheduler (``_kernels._schedule``) gives these loops the short queries
where every one of them is below ``LANES_N`` (``LANES_N_AP``), else none. The queries wait in
a queue per length (:func:`lane_push`) until it holds ``LANES`` of them or the caller's are
done (:func:`lane_start`). Notation and sums as in ``_pairs`` and
``_small``.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit

from approx_gbdt._measure_terms import _term
from approx_gbdt._pairs import (
    _FM,
    _STEP,
    HESS_MIXED_SUM,
    _hessian_of_loss,
    exact_curvature,
    floor_sum,
)
from approx_gbdt._small import _SPREAD, _sig_wide

LANES = 64  # queries a block (the loops' trip count)
LANES_N = 48  # queries of fewer documents take these loops (a separable measure) ...
LANES_N_AP = 24  # ... or ApproxAP (whose v, by _measure_terms.ap_small, is per query)

LaneWork = namedtuple(
    "LaneWork",
    ["queue", "count", "start", "f", "wide", "ex", "pos", "v", "e", "g", "bnd", "aa", "ab",
     "aw", "sig", "w"],
)
LaneWork.__doc__ = """Work space of the lane loops of one thread for queries of fewer than ``m``
documents (``[document, lane]`` arrays of ``m`` rows, ``[pair, lane]`` for the table of pairs).

queue, count : the queries waiting for a block, per length, and how many
start : first document of each lane's query
f : per lane: its top score, then its ``inv_z``, then its normalisation factor
wide : per lane: 1 where ``alpha`` times its score range reaches ``_SPREAD`` (or overflows)
ex : E_i (``x_i`` in a wide lane)
pos, v, e : smoothed positions, dM/dpos^ and d2M/dpos^2
g, bnd, aa, ab, aw : the chain-rule sums of ``_pairs.PairWork``
sig, w : sig_ij and w_ij of every pair i < j (pair ``p`` of row ``i`` follows row ``i - 1``'s)
"""


@njit(inline="always", cache=True)
def lane_work(m):
    """A :class:`LaneWork` for queries of fewer than ``m`` documents (the scheduler keeps
    ``m <= LANES_N``: the table takes ``2 LANES (m - 1)(m - 2) / 2`` floats, 1.1 MiB at
    ``LANES_N``)."""
    pairs = max(1, (m - 1) * (m - 2) // 2)
    return LaneWork(
        np.empty((m, LANES), dtype=np.int64), np.zeros(m, dtype=np.int64),
        np.empty(LANES, dtype=np.int64), np.empty(LANES), np.empty(LANES),
        np.empty((m, LANES)), np.empty((m, LANES)), np.empty((m, LANES)), np.empty((m, LANES)),
        np.empty((m, LANES)), np.empty((m, LANES)), np.empty((m, LANES)), np.empty((m, LANES)),
        np.empty((m, LANES)), np.empty((pairs, LANES)), np.empty((pairs, LANES)),
    )


@njit(inline="always", cache=True)
def lane_push(Lw, m, q):
    """Queue query ``q`` of ``m`` documents; returns how many of its length are waiting."""
    c = Lw.count[m]
    Lw.queue[m, c] = q
    Lw.count[m] = c + 1
    return c + 1


@njit(inline="always", cache=True)
def lane_start(Lw, m, group_ptr):
    """Take the queue of length ``m`` as the next block: its lanes' first documents into
    ``Lw.start``; returns the number of lanes (the queue is emptied)."""
    cnt = Lw.count[m]
    for l in range(cnt):
        Lw.start[l] = group_ptr[Lw.queue[m, l]]
    Lw.count[m] = 0
    return cnt


# The positions and the measure's terms are compiled apart and called once a block: inlined by
# Numba they were typed again inside each block, and a first call on lists of 10 took about
# 0.5 s longer (alternating fresh processes), for no speed once compiled. The chain sums and
# the last step stay inlined, where the block's constant ``need_exact`` removes what its
# Hessian mode does not use.
@njit(cache=True, fastmath=_FM, error_model="numpy", **_STEP)
def lane_positions(Lw, m, cnt, s, alpha):
    """``Lw.pos`` of the block's ``cnt`` queries of ``m`` documents and the table of their pairs
    (``Lw.sig``, ``Lw.w``): every lane by the loops across the lanes, and then each wide lane
    (``alpha`` times its score range ``_SPREAD`` or more, or overflowed) again, alone, with one
    exponential a pair; so that each lane's results are the same whichever lanes share its
    block."""
    start = Lw.start
    top = Lw.f
    wide = Lw.wide
    ex = Lw.ex
    pos = Lw.pos
    for l in range(cnt):
        top[l] = s[start[l]]
        wide[l] = 0.0
    for i in range(m):
        for l in range(cnt):
            top[l] = max(top[l], s[start[l] + i])
    for i in range(m):
        ei = ex[i]
        pi = pos[i]
        for l in range(cnt):
            x = alpha * (s[start[l] + i] - top[l])
            ei[l] = math.exp(x)
            pi[l] = 1.0
            wide[l] = max(wide[l], 0.0 if x > -_SPREAD else 1.0)
    p = 0
    for i in range(m):
        ei = ex[i]
        pi = pos[i]
        for j in range(i + 1, m):
            ej = ex[j]
            pj = pos[j]
            sg = Lw.sig[p]
            wt = Lw.w[p]
            for l in range(cnt):
                r = 1.0 / (ei[l] + ej[l])
                sij = ej[l] * r
                sji = ei[l] * r
                pi[l] += sij
                pj[l] += sji
                sg[l] = sij
                wt[l] = sij * sji
            p += 1
    for l in range(cnt):
        if wide[l] > 0.0:  # lane by lane (the exponentials dominate; scalar loops)
            for i in range(m):
                ex[i, l] = alpha * (s[start[l] + i] - top[l])
                pos[i, l] = 1.0
            p = 0
            for i in range(m):
                for j in range(i + 1, m):
                    d = ex[j, l] - ex[i, l]
                    sij, sji, w = _sig_wide(d)
                    if d != d:  # both alpha s overflowed: below in both directions
                        sji = 0.0
                    pos[i, l] += sij
                    pos[j, l] += sji
                    Lw.sig[p, l] = sij
                    Lw.w[p, l] = w
                    p += 1


@njit(cache=True, fastmath=_FM, error_model="numpy", **_STEP)
def lane_separable_ve(Lw, m, cnt, gains, inv_z, kind, k, beta, theta):
    """``Lw.v`` and ``Lw.e`` of the block's queries of ``m`` documents for a separable measure:
    ``g_i t'(pos^_i) inv_z`` and ``g_i t''(pos^_i) inv_z``, as ``_measure_terms.separable_ve``
    (a gain of 0 gives 0 without a branch: the terms are finite at every position)."""
    iz = Lw.f
    for l in range(cnt):
        iz[l] = inv_z[Lw.queue[m, l]]
    for i in range(m):
        pi = Lw.pos[i]
        vi = Lw.v[i]
        ei = Lw.e[i]
        for l in range(cnt):
            gr = gains[Lw.start[l] + i]
            _, f1, f2 = _term(kind, pi[l], k, beta, theta)
            vi[l] = gr * f1 * iz[l]
            ei[l] = gr * f2 * iz[l]


@njit(inline="always", cache=True)
def lane_chain(Lw, m, cnt, need_exact, bsum):
    """The chain-rule sums of the block from its table and ``Lw.v``, ``Lw.e``: ``Lw.g``,
    ``Lw.bnd`` (with ``bsum`` the sum ``sum_j w (|v_j| + |v_i|)`` of ``"bound_sum"``) and,
    when ``need_exact``, ``Lw.aa``, ``Lw.ab``, ``Lw.aw``, each pair's terms added to both of its
    documents (``w``, ``|v_j - v_i|`` and ``w (v_j - v_i)(1 - 2 sig_ij)`` are symmetric)."""
    for i in range(m):
        gi = Lw.g[i]
        bi = Lw.bnd[i]
        for l in range(cnt):
            gi[l] = 0.0
            bi[l] = 0.0
        if need_exact:
            ai = Lw.aa[i]
            Bi = Lw.ab[i]
            wi = Lw.aw[i]
            for l in range(cnt):
                ai[l] = 0.0
                Bi[l] = 0.0
                wi[l] = 0.0
    p = 0
    for i in range(m):
        vi = Lw.v[i]
        gi = Lw.g[i]
        bi = Lw.bnd[i]
        ei = Lw.e[i]
        ai = Lw.aa[i]
        Bi = Lw.ab[i]
        wi = Lw.aw[i]
        for j in range(i + 1, m):
            vj = Lw.v[j]
            gj = Lw.g[j]
            bj = Lw.bnd[j]
            wt = Lw.w[p]
            sg = Lw.sig[p]
            ej = Lw.e[j]
            aj = Lw.aa[j]
            Bj = Lw.ab[j]
            wj = Lw.aw[j]
            for l in range(cnt):
                w = wt[l]
                wd = w * (vj[l] - vi[l])
                gi[l] += wd
                gj[l] -= wd
                if bsum:
                    b = w * (abs(vj[l]) + abs(vi[l]))
                else:
                    b = abs(wd)
                bi[l] += b
                bj[l] += b
                if need_exact:
                    c = wd * (1.0 - 2.0 * sg[l])
                    ai[l] += c
                    aj[l] += c
                    w2 = w * w
                    Bi[l] += w2 * ej[l]
                    Bj[l] += w2 * ei[l]
                    wi[l] += w
                    wj[l] += w
            p += 1


@njit(inline="always", cache=True)
def lane_finish(Lw, m, cnt, alpha, mode, floor, constant, normalize, need_exact, weights, grad,
                hess):
    """The gradient and Hessian of L of the block's queries from their sums, as
    ``_pairs.finish_rows`` (normalised by log2(1 + S) / S with S = alpha sum_i |g_i| per
    lane, weighted by ``weights`` (one per document, or empty), written to the documents)."""
    alpha2 = alpha * alpha
    f = Lw.f
    for l in range(cnt):
        f[l] = 0.0
    for i in range(m):
        gi = Lw.g[i]
        for l in range(cnt):
            f[l] += abs(gi[l])
    for l in range(cnt):
        tot = f[l] * alpha
        f[l] = 1.0
        if normalize and tot > 0.0:
            f[l] = math.log2(1.0 + tot) / tot
    for i in range(m):
        gi = Lw.g[i]
        bi = Lw.bnd[i]
        for l in range(cnt):
            if mode == HESS_MIXED_SUM:
                bound = alpha2 * floor_sum(Lw.v[i, l], Lw.aw[i, l], gi[l])
            else:
                bound = alpha2 * bi[l]
            exact_m = 0.0
            if need_exact:
                exact_m = alpha2 * exact_curvature(Lw.aa[i, l], Lw.ab[i, l], Lw.e[i, l],
                                                   Lw.aw[i, l])
            gi[l] = -alpha * gi[l] * f[l]
            bi[l] = _hessian_of_loss(mode, floor, constant, alpha2, exact_m, bound) * f[l]
    has_w = weights.shape[0] > 0
    for l in range(cnt):
        a = Lw.start[l]
        for i in range(m):
            gr = Lw.g[i, l]
            hr = Lw.bnd[i, l]
            if has_w:
                gr *= weights[a + i]
                hr *= weights[a + i]
            grad[a + i] = gr
            hess[a + i] = hr
