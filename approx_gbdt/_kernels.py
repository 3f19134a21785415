"""Kernel entry points: one scheduler over the queries for every measure and every job.

The kernels are split by role:

- ``_pairs``: the pair loops (sorting, windows, exp blocks, tiles) that compute the smoothed
  positions and the chain-rule sums from ``v = dM/dpos^`` and ``e = d2M/dpos^2``; they never look
  at the measure.
- ``_small``: the direct pair loops of short queries (every ordered pair, in query order).
- ``_lanes``: the pair loops of the shortest queries, ``LANES`` queries of one length at a time
  (one query a vector lane).
- ``_measure_terms``: what a measure contributes (its position term ``t(p)``, ``t'``, ``t''``
  selected by an integer kind, and ApproxAP's coupled term).
- ``_reference``: the exact O(n^2) loops the tests and benchmarks compare with.

The scheduler here (``_schedule``) sorts the queries into tiers by length: short ones (below
``_grid.GRID_MIN_N`` and ``par_min`` documents) by the exact loops only (the direct loops of
``_small`` one per thread, or where all of them are shorter still the lane loops of ``_lanes``,
or the windowed ones where most of their pairs are in queries of
``_WIDE_N`` (128) documents or more so widely spread that most pairs are saturated,
``_mostly_wide``); longer ones one per thread with the grid where it is cheaper; and those of
at least ``par_min`` documents that hold more than a thread's share of the long queries'
documents (``split_at``) one after the other with their rows split across threads. Each tier
is a separately compiled function, compiled when first needed, so that a first call on data of
short queries compiles only one short tier (seconds, not a minute). The per-thread tiers run on
Python threads over ``nogil`` compiled code (no spinning between calls); the row split uses Numba's
parallel loops. Every query goes through the same steps: positions, the measure's ``v`` and
``e``, the chain-rule sums, (for ApproxAP's exact diagonal) the off-diagonal part, and the
combination into the gradient and Hessian of ``L = -M``. Apart from the returned gradient and
Hessian, each thread allocates its work space once per call (sized by its tier's longest
query), and only the queries that take the grid or the row split allocate more of their size
(the grid's boxes and class labels, the row split's per-thread sums); the sort order of the
queries that the windowed loops or the long tiers sort persists between calls in ``order``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
from numba import config, get_num_threads, njit, set_num_threads

from approx_gbdt import _behind
from approx_gbdt._grid import (
    _P,
    GRID_MIN_N,
    _class_members,
    _costs,
    abs_cost,
    gain_classes,
    grid_abs_par,
    grid_abs_seq,
    grid_chain_par,
    grid_chain_seq,
    grid_positions_par,
    grid_positions_seq,
    grid_tables,
    use_grid,
    window_pairs,
)
from approx_gbdt._lanes import (
    LANES,
    LANES_N,
    LANES_N_AP,
    lane_chain,
    lane_finish,
    lane_positions,
    lane_push,
    lane_separable_ve,
    lane_start,
    lane_work,
)
from approx_gbdt._measure_terms import (
    _H_CACHE_MAX,
    TERM_LOG,
    ap_offdiag,
    ap_relevant,
    ap_relevant_sums,
    ap_small,
    ap_value_sum,
    ap_ve,
    ap_work,
    ideal_value,
    separable_value,
    separable_ve,
)
from approx_gbdt._pairs import (
    _ENTRY,
    _FM,
    _PAR_MIN,
    _STEP,
    _T,
    _TILE,
    HESS_ABS,
    HESS_BOUND,
    HESS_BOUND_SUM,
    HESS_CONSTANT,
    HESS_EXACT,
    HESS_MIXED,
    HESS_MIXED_SUM,
    _positions_rows,
    _positions_rows_par,
    _sort_desc,
    _sorted_bound,
    _sorted_chain,
    _sorted_chain_par,
    _sorted_finish,
    _sorted_positions,
    _sorted_prep,
    _variant_named,
    _windows,
    argsort_desc,
    bound_weights,
    finish_rows,
    need_exact_parts,
    pair_work,
    query_weights,
)
from approx_gbdt._small import SMALL_N, full_table, small_chain, small_positions

__all__ = [
    "HESS_ABS",
    "HESS_BOUND",
    "HESS_CONSTANT",
    "HESS_EXACT",
    "HESS_MIXED",
    "HESS_MIXED_SUM",
    "HESS_BOUND_SUM",
    "has_hessian",
    "KIND_AP",
    "LANES_N",
    "SMALL_N",
    "_PAR_MIN",
    "_T",
    "_TILE",
    "grad_hess",
    "make_work",
    "smoothed_positions",
    "value",
]

KIND_AP = -1  # the coupled ApproxAP term (separable measures use the TERM_* kinds >= 0)

JOB_POSITIONS = 0
JOB_VALUE = 1  # ApproxAP only: a separable measure's value needs only the positions
JOB_GRAD = 2


def make_work(n):
    """Arrays the fast kernels keep between iterations for a dataset of ``n`` documents."""
    return {"order": np.full(n, -1, dtype=np.int32)}


@njit(inline="always", cache=True)
def _need_bound(mode):
    return mode == HESS_BOUND or mode == HESS_MIXED


@njit(inline="always", cache=True)
def _positions_step(big, s, order, alpha, W, nt, gp, gt):
    """Sort, then the positions by the grid (``_grid``) where it is cheaper than the exact
    windowed loops, else by those; returns whether the grid was used and the documents'
    Lagrange values on the grid (for the chain step; no rows without the grid)."""
    n = s.shape[0]
    _sort_desc(s, order)
    _sorted_prep(s, order, alpha, W)
    grid = use_grid(W.x, W.jend, n, gp)
    lag = np.empty((n if grid else 0, _P))
    if grid:
        if big:
            grid_positions_par(W.x[:n], W.pos[:n], gt, nt, lag)
        else:
            grid_positions_seq(W.x[:n], W.pos[:n], gt, lag)
    elif big:
        _positions_rows_par(n, W, nt)
    else:
        _positions_rows(n, W)
    return grid, lag


@njit(inline="always", cache=True)
def _grid_chain(big, n, W, cls, ncls, need_bound, need_exact, floor, va, nt, gt, lag):
    x, v, e = W.x[:n], W.v[:n], W.e[:n]
    # the exact diagonal's sums as a run-time flag (the block's constant, typed as a literal
    # where it is False, would compile the grid once more); ``va``'s sums, when given, go to
    # ``W.bnd``: the caller must not ask for the bound as well (it would write over them)
    exact = (n >= 0) if need_exact else (n < 0)
    if big:
        grid_chain_par(x, v, e, va, W.g[:n], W.bnd[:n], W.aa[:n], W.ab[:n], W.aw[:n],
                       W.bnd[:va.shape[0]], cls, ncls, need_bound, exact, floor, gt, nt, n < 0,
                       lag)
    else:
        grid_chain_seq(x, v, e, va, W.g[:n], W.bnd[:n], W.aa[:n], W.ab[:n], W.aw[:n],
                       W.bnd[:va.shape[0]], cls, ncls, need_bound, exact, floor, gt, n < 0, lag)


@njit(inline="always", cache=True)
def _chain_step(big, grid, n, W, need_exact, need_bound, split, gains, order, va, bsum, floor,
                nt, gt, lag):
    """Chain-rule sums by the grid when the positions took it and the Hessian mode's sums are
    kernel sums there (the bound needs ``split``: a separable measure without truncation, and
    at most ``_grid._CMAX`` gain classes, see ``_grid``), else exactly. On the grid, weights
    ``va`` (an empty array: none) also give ``W.bnd = F_va[w] - va_k F_1[w]`` (``_grid``'s
    notation), for a bound the caller completes; ``lag`` holds the Lagrange values of the
    positions step; ``floor`` (``hessian="mixed"``'s floor, else 0) lets the grid skip the
    bound where the floor cannot bind (``W.bnd = 0`` there, ``_grid._chain_boxes``). The
    exact loops sum ``"bound_sum"``'s ``w (|v_j| + |v_k|)`` into ``W.bnd`` with ``bsum``, else
    the bound's ``w |v_j - v_k|``."""
    if grid:
        cls = W.jend[:0]
        ncls = 0
        if need_bound:
            ncls = -1
            if split:
                cls = np.empty(n, dtype=np.int64)
                ncls = gain_classes(gains, order, n, cls)
        if ncls >= 0:
            _grid_chain(big, n, W, cls, ncls, need_bound, need_exact, floor, va, nt, gt, lag)
            return
    if big:
        _sorted_chain_par(n, W, need_exact, bsum, nt)
    else:
        _sorted_chain(n, W, need_exact, bsum)


@njit(inline="always", cache=True)
def _ap_relevant_grid(big, R, A, need_exact, nt, gt):
    """ApproxAP's second-level sums of a query's ``R`` relevant documents (``A.s``, ``A.ts``,
    ``A.td``, ``A.tc``, as :func:`~approx_gbdt._measure_terms.ap_relevant`) by the grid:
    with ``x_a = ry_a = -beta (p_a - p_0)`` (non-increasing: clamped where the positions'
    rounding breaks ties the wrong way), ``sig_ab = sig(x_b - x_a)`` and the weights
    ``v = q``, they are the grid's positions and chain sums of the relevant documents alone:
    ``S = pos - 1``, ``TS = aw``, ``TD = -g``, ``TC = -aa`` (only when ``need_exact``, else 0:
    it enters ``W.e``, which only the exact diagonal reads)."""
    x = np.empty(R)
    top = np.inf
    for a in range(R):
        top = min(top, A.ry[a])
        x[a] = top
    tmp = np.zeros((5, R))  # e = 0, then g, aa, ab and the unused bound
    no_cls = A.rjend[:0]
    ncls = no_cls.shape[0]  # 0 as a run-time value (a literal 0 compiles the grid once more)
    exact = (R >= 0) if need_exact else (R < 0)  # run-time, as in _grid_chain
    S = A.s[:R]
    lag = np.empty((R, _P))  # the positions' Lagrange values, for the chain
    if big:
        grid_positions_par(x, S, gt, nt, lag)
        grid_chain_par(x, A.qr[:R], tmp[0], x[:0], tmp[1], tmp[4], tmp[2], tmp[3], A.ts[:R],
                       x[:0], no_cls, ncls, R < 0, exact, 0.0, gt, nt, R < 0, lag)
    else:
        grid_positions_seq(x, S, gt, lag)
        grid_chain_seq(x, A.qr[:R], tmp[0], x[:0], tmp[1], tmp[4], tmp[2], tmp[3], A.ts[:R],
                       x[:0], no_cls, ncls, R < 0, exact, 0.0, gt, R < 0, lag)
    for a in range(R):
        S[a] -= 1.0
        A.td[a] = -tmp[1, a]
        A.tc[a] = -tmp[2, a]


@njit(cache=True, **_STEP)
def _relevant_part(n, W, A, R):
    """The query reduced to its first ``R`` relevant documents, in sorted order: their ``x``
    and ``v`` (``e = 0``) and their windows and exp blocks."""
    S = pair_work(R)
    ridx = A.ridx
    for a in range(R):
        S.x[a] = W.x[ridx[a]]
        S.v[a] = W.v[ridx[a]]
        S.e[a] = 0.0
    _windows(S.x[:R], S.ex[:R], S.jend[:R], S.bend[:R])
    return S


@njit(cache=True, **_STEP)
def _ap_bound_on_grid(x, jend, n, rel_jend, grid_mode):
    """Whether ApproxAP's bound of a query whose positions took the grid is cheaper by
    :func:`_ap_grid_bound` than by the exact windowed chain (``grid_mode`` 1: always);
    ``rel_jend`` are the window ends of the query reduced to its relevant documents
    (:func:`_relevant_part`). The cost model, fitted on one thread (queries of 600 to 4,000
    documents, 5 % and 45 % relevant, score spreads from all pairs in the window to a few):
    exact chain ~ 0.41 ns per window pair; grid bound ~ 50 ns per document + 60 ns per pair
    of partner boxes + at most 0.39 ns per window pair of relevant documents (less where
    :func:`_ap_grid_bound` splits them), so that it errs towards the exact chain (the more
    so as it counts the far partner boxes, which take the grid's series, at the near ones'
    cost)."""
    if grid_mode > 0:
        return True
    pairs, near, far = _costs(x, jend, n)
    rel_pairs = window_pairs(rel_jend, rel_jend.shape[0])
    return 0.41 * pairs > 50.0 * n + 60.0 * (near + far) + 0.39 * rel_pairs


@njit(inline="always", cache=True)
def _ap_grid_bound(big, n, W, A, R, S, nt, gp, gt, lag):
    """ApproxAP's bound ``W.bnd[k] = sum_j w_kj |v_j - v_k|`` for a query on the grid, from
    the chain step's sums with weights ``|v|`` (already in ``W.bnd``) and the relevant
    documents' own sums (``S``, from :func:`_relevant_part`): with the automatic choice
    (``gp`` 0), where :func:`_abs_cheaper` finds it cheaper (at most ``_ABS_INSIDE``
    partner boxes per document on average whose members' ``v`` straddle the document's: ``v``
    close to monotone along the scores, or the documents within a few boxes, as in the first
    rounds), by the grid with each box sorted by ``v`` (:func:`grid_abs_seq`, the positions
    step's Lagrange values ``lag``; pairs more than ``_grid._D_ABS`` boxes apart left out,
    module notes of ``_grid``); else, where the grid is cheaper for them, split into classes of
    consecutive ``v`` (:func:`_v_classes`; the pairs of different classes on the grid, whose
    sign the classes' order gives, the pairs within a class exactly,
    :func:`_within_classes`); else the exact windowed loops (:func:`_sorted_bound`).

    ``v`` is zero on the irrelevant documents, so for an irrelevant ``k`` the bound is the
    kernel sum ``sum_j w_kj |v_j|``: the chain step's sums with weights ``|v|``, which it left
    in ``W.bnd`` (``sum_j w_kj (|v_j| - |v_k|)``, ``v_k = 0``). For a relevant ``k`` it is

        |v_k| (aw_k - sum_{j rel} w_kj) + sum_{j rel} w_kj |v_j - v_k|

    (``aw_k = sum_j w_kj`` from the chain sums); the two sums over relevant ``j`` are those of
    the query reduced to its relevant documents."""
    v = W.v[:n]
    bnd = W.bnd[:n]
    if R == 0:
        return
    # the relevant documents' own sums: with few partner boxes straddling a document's v, by the
    # grid for any v; else split by v where the grid is cheaper for them (ApproxNDCG's cost
    # model ``use_grid``, which leaves out the split's classes and its pairs within a class),
    # else the exact windowed loops
    if gp == 0 and _abs_cheaper(S, R):
        # few partner boxes per document whose v straddle its own: each box sorted by v
        # (grid_abs_seq), the positions step's Lagrange values
        if big:
            grid_abs_par(S.x[:R], S.v[:R], S.bnd[:R], S.aw[:R], gt, nt, lag, A.ridx[:R])
        else:
            grid_abs_seq(S.x[:R], S.v[:R], S.bnd[:R], S.aw[:R], gt, lag, A.ridx[:R])
    elif use_grid(S.x[:R], S.jend, R, gp):
        cls, C = _v_classes(S.v[:R])
        xr, vr, work = S.x[:R], S.v[:R], np.empty((3, R))
        no_lag = np.empty((0, _P))  # the positions step's rows are the whole query's
        if big:
            grid_chain_par(xr, vr, S.e[:R], xr[:0], work[0], S.bnd[:R], work[1], work[2],
                           S.aw[:R], xr[:0], cls, C, R >= 0, R < 0, 0.0, gt, nt, R >= 0,
                           no_lag)
        else:
            grid_chain_seq(xr, vr, S.e[:R], xr[:0], work[0], S.bnd[:R], work[1], work[2],
                           S.aw[:R], xr[:0], cls, C, R >= 0, R < 0, 0.0, gt, R >= 0, no_lag)
        _within_classes(R, S, cls, C, big, nt)
    else:
        _sorted_bound(R, S, big, nt)
    aw = W.aw
    ridx = A.ridx
    for a in range(R):
        r = ridx[a]
        bnd[r] = abs(v[r]) * (aw[r] - S.aw[a]) + S.bnd[a]


@njit(inline="always", cache=True)
def _abs_cheaper(S, R):
    """Whether :func:`grid_abs_seq` is the cheaper way to the bound's sums over the ``R``
    relevant documents of ``S`` (:func:`_relevant_part`, its windows and ``v`` made): at most
    ``_ABS_INSIDE`` partner boxes per document on average whose members' ``v`` lie on both
    sides of the document's (:func:`~approx_gbdt._grid.abs_cost`; O(_P^2) each, the others
    O(1) each, plus O(_P) per document and O(_P^2) per pair of boxes); from ``GRID_MIN_N``
    documents, where the grid is cheaper for them than the exact windowed loops
    (:func:`~approx_gbdt._grid.use_grid`, ApproxNDCG's model: documents spread one or two a
    box have many partner boxes and few pairs), and below, where a cost model fitted on one
    thread finds it cheaper than those loops (queries of 1,000 and 10,000 documents, 20 to 500
    relevant ones, every pair in the window): exact ~ 0.57 ns per window pair, grid ~ 2.5 us
    + 70 ns per document and partner box (all partners: the model was fitted where every
    partner took the pointer, so that it errs towards the exact loops). Where it returns False
    from ``GRID_MIN_N`` documents, the classes of ``v`` are taken if the grid is cheaper for
    the relevant documents, else the exact loops. Below
    ``_ABS_MIN_R`` relevant documents: False without counting (the model picks the grid from
    about 280)."""
    if R < _ABS_MIN_R:
        return False
    inside, partners = abs_cost(S.x[:R], S.v[:R], R, _ABS_INSIDE * R)
    if inside > _ABS_INSIDE * R:
        return False
    if R >= GRID_MIN_N:
        return use_grid(S.x[:R], S.jend, R, 0)
    return 0.57 * window_pairs(S.jend, R) > 2500.0 + 70.0 * partners


# grid_abs_seq where the relevant documents have at most this many partner boxes per document
# on average that their v straddles (the pointer's O(_P^2) each; the other partners are summed
# once per box). The classes of v cost O(_P C) per document and the exact pairs within a class,
# which ApproxAP's v, close to monotone along the scores but not quite, makes runs of
# neighbours. Lists of 10,000 documents, 45 % relevant, one thread, ApproxAP's kernel: the
# scores of 50 and 100 LightGBM rounds with it (1.8-1.9 straddled of 6-10 partners a document)
# 23.3 and 23.6 ms against 28.7 and 29.1 ms with the classes; N(0, sd) scores, sd 0.05 to 2,
# 21.5-35.3 against 28.6-62.5 ms; lists of 2,000, sd 0.05 to 0.5, 21.7-30.2 against
# 25.0-44.3 ms
_ABS_INSIDE = 4
_ABS_MIN_R = 64  # fewer relevant documents never take grid_abs_seq (_abs_cheaper)
_V_CLASSES = 8  # classes of ApproxAP's bound on the grid (_v_classes)
_V_SAMPLE = 64  # documents sampled per class for the cuts of _v_classes


@njit(cache=True, **_STEP)
def _v_classes(v):
    """``_V_CLASSES`` classes (fewer for fewer documents) of consecutive ``(v, index)``, 1 for
    the smallest: every ``v`` of a class is at most every ``v`` of the next (the grid's ``vsep``
    split; equal ``v`` may fall on both sides of a cut, where ``v_j - v_k = 0``, and are split
    by index, so that many equal values still spread over the classes). The cuts are the
    quantiles of an evenly strided sample of ``_V_SAMPLE`` documents per class, each document
    placed by a binary search over them: O(R log C) after a sort of ``_V_SAMPLE C`` values,
    where sorting all ``R`` would take 6-9 % of ApproxAP's time on queries of 10,000
    documents. The classes are therefore about, not exactly, equal in size. Returns the class
    of each document and the number of classes."""
    R = v.shape[0]
    C = min(_V_CLASSES, R)  # a run-time value: a literal would compile the grid once more
    m = min(R, _V_SAMPLE * C)
    neg = np.empty(m)
    for i in range(m):
        neg[i] = -v[(i * R) // m]
    rank = np.empty(m, dtype=np.int32)
    argsort_desc(neg, rank)  # ascending v, equal v by index
    cut_v = np.empty(C - 1)
    cut_i = np.empty(C - 1, dtype=np.int64)
    for c in range(1, C):
        j = (rank[(c * m) // C] * R) // m  # the sample's document at the cut
        cut_v[c - 1] = v[j]
        cut_i[c - 1] = j
    cls = np.empty(R, dtype=np.int64)
    for a in range(R):
        # 1 + the number of cuts at or below (v_a, a): a cut opens its class
        va = v[a]
        lo = 0
        hi = C - 1
        while lo < hi:
            mid = (lo + hi) >> 1
            if cut_v[mid] < va or (cut_v[mid] == va and cut_i[mid] <= a):
                lo = mid + 1
            else:
                hi = mid
        cls[a] = 1 + lo
    return cls, C


@njit(inline="always", cache=True)
def _within_classes(R, S, cls, C, big, nt):
    """Adds to ``S.bnd`` the bound's pairs within each class of ``cls`` (:func:`_v_classes`)
    by the exact windowed loops (:func:`_sorted_bound`), each class's documents in sorted
    order; the grid's ``vsep`` sums have the pairs of different classes. About ``1 / C`` of
    the window pairs when the documents lie within a window or two of each other; fewer are
    saved when ``v`` follows the score over many windows (a class is then a run of
    neighbours)."""
    mem, mst = _class_members(cls, R, C)
    T = pair_work(R)
    for c in range(1, C + 1):
        a0 = mst[c]
        m = mst[c + 1] - a0
        if m < 2:
            continue
        for i in range(m):
            T.x[i] = S.x[mem[a0 + i]]
            T.v[i] = S.v[mem[a0 + i]]
        _windows(T.x[:m], T.ex[:m], T.jend[:m], T.bend[:m])
        _sorted_bound(m, T, big, nt)
        for i in range(m):
            S.bnd[mem[a0 + i]] += T.bnd[i]


@njit(inline="always", cache=True)
def _ap_finish(n, R, W, A, Hc, order, iz, alpha, beta, mode, floor, constant, normalize,
               need_exact, wts, grad, hess):
    """ApproxAP's last steps after the chain-rule sums: the off-diagonal part of the exact
    diagonal (when the Hessian mode needs it), then gradient and Hessian of ``L = -M``."""
    off = A.off[:0]
    if need_exact:
        ap_offdiag(n, R, W, A, beta, iz, Hc)
        off = A.off[:n]
    _sorted_finish(n, W, order, alpha, mode, floor, constant, normalize, need_exact, off,
                   wts, grad, hess)


@njit(inline="always", cache=True)
def _largest(group_ptr, rel_ptr, q0, q1, lo, hi):
    """Largest of the queries ``q0..q1-1`` with ``lo`` to ``hi - 1`` documents (at least 2)
    and the largest span of ``rel_ptr`` (ApproxAP's relevant documents) over them; callers
    without relevant lists pass ``group_ptr`` and ignore the second value."""
    m = np.int64(2)
    mr = np.int64(0)
    for q in range(q0, q1):
        if lo <= group_ptr[q + 1] - group_ptr[q] < hi:
            m = max(m, group_ptr[q + 1] - group_ptr[q])
            mr = max(mr, rel_ptr[q + 1] - rel_ptr[q])
    return m, mr


@njit(inline="always", cache=True)
def _take(job, inv_z, group_ptr, q, lo, hi, weights, grad, hess):
    """``(a, b, w_q)`` of query ``q`` if it has ``lo`` to ``hi - 1`` documents and needs work,
    else ``a == b == -1``. No work: an empty query; for ``JOB_VALUE`` one without a relevant
    document (its value stays 0); for ``JOB_GRAD`` a single document or none relevant, whose
    gradient and Hessian are set to zero here."""
    a = group_ptr[q]
    b = group_ptr[q + 1]
    if not lo <= b - a < hi or b == a or (job == JOB_VALUE and inv_z[q] == 0.0):
        return -1, -1, weights
    if job == JOB_GRAD and (inv_z[q] == 0.0 or b - a < 2):
        # a single document or none relevant: zero gradient and Hessian
        for i in range(a, b):
            grad[i] = 0.0
            hess[i] = 0.0
        return -1, -1, weights
    return a, b, query_weights(weights, a, b)


# A chunk of a tier (see ``_schedule``): the queries q0..q1-1 of lo to hi - 1 documents, one at
# a time, with work space allocated once for the chunk. The short tier's blocks run a query's
# steps by the exact windowed loops only, the long tiers' by the grid where cheaper, rows split
# across ``nt`` threads when ``big``. Separate functions, so that the short tier compiles
# without the grid, and the one-per-thread tier without the row split's parallel loops
# (``big`` is a constant of each long block; the steps that take it are inlined). The long
# blocks hold a query's steps in their own loop body: as a per-query function, Numba's
# inlining copies its body into the block at a cost that grows with the square of its size,
# and compiled apart (ApproxAP's was) LLVM optimises its code again inside the block's
# module; either cost 1.3-3 s more on a first call on long queries.
#
# Compile time (a new user's first call) shapes these functions. Flags reach the compiled
# functions as arguments, never as constants in a call: Numba compiles one specialisation per
# literal argument value (zeros are passed as ``np.int64(0)`` unless the constant pays for its
# compilation, and a variable that a loop widens starts as ``np.int64``, or its first, literal
# type is compiled too). And every separately compiled function is optimised and turned into
# machine code on its own and then once more inside each caller, so the call tree is kept
# shallow: thin steps are ``inline="always"`` (or written into the block). Steps that many
# callers share (the row loops ``_pos_rows``/``_chain_rows_*``, ``pair_work``/``ap_work``, the
# last step ``_sorted_finish``, the pair loops ``*_seg`` with their own fast-math flags, the
# lane loops' positions and terms) stay separate: inlined, they would be compiled again in
# every caller (measured: the first long-query calls took 4-5 s longer; a first ApproxAP call
# 0.4 s longer with the last step and ``ap_work`` inlined; a first call on lists of 10 about
# 0.5 s longer with the lane loops' positions and terms inlined). Functions of these kernels
# that only compiled code calls have no CPython wrapper (``_STEP``). The exceptions to "flags
# as arguments" are ``big`` (above) and whether the Hessian mode needs the exact diagonal's
# sums: the blocks and the row loop ``_chain_rows_*`` come in two variants with that flag a
# constant of the function (a closure variable, whose branches Numba removes before typing, so
# the other variant's pair loop and, for ApproxAP, the off-diagonal part are not compiled). A
# first call then compiles only what its mode uses: ApproxAP's default Hessian ("bound") needs
# none of the exact sums; ApproxNDCG's ("mixed") skips the bound-only loop. The variants pass
# that constant on to ``_sorted_finish``, which Numba then compiles for the literal (once per
# variant). The blocks of the direct loops (``_small``) and of the lane loops (``_lanes``) are
# never used together with each other or with the windowed short blocks in one call: they
# inline the last step (``finish_rows``, ``lane_finish``; calling ``_sorted_finish`` made the
# direct loops 15 % slower on queries of 10 documents), and ApproxAP's come in one variant, as
# they never need the exact diagonal's sums.

def _make_short_block(exact):
    """The short tier's block of a separable measure, for Hessian modes that need the exact
    diagonal's sums (``exact``) or not: a constant of the compiled function, so that a first
    call compiles only the pair loops its mode uses."""

    def short_block(q0, q1, job, s, gains, inv_z, group_ptr, weights, alpha, kind, k, beta,
                    theta, mode, floor, constant, normalize, grad, hess, pos, order, lo, hi):
        W = pair_work(_largest(group_ptr, group_ptr, q0, q1, lo, hi)[0])
        for q in range(q0, q1):
            a, b, w_q = _take(job, inv_z, group_ptr, q, lo, hi, weights, grad, hess)
            if a < 0:
                continue
            n = b - a
            o = order[a:b]
            _sorted_positions(s[a:b], o, alpha, W)
            if job == JOB_POSITIONS:
                for r in range(n):
                    pos[a + o[r]] = W.pos[r]
                continue
            separable_ve(n, W, gains[a:b], o, inv_z[q], kind, k, beta, theta)
            _sorted_chain(n, W, exact, mode == HESS_BOUND_SUM)
            _sorted_finish(n, W, o, alpha, mode, floor, constant, normalize, exact, W.v[:0],
                           w_q, grad[a:b], hess[a:b])

    return njit(nogil=True, cache=True, **_ENTRY)(
        _variant_named(short_block, "_short_block", exact))


_short_block_exact = _make_short_block(True)
_short_block_bound = _make_short_block(False)


@njit(inline="always", cache=True)
def _small_space(group_ptr, q0, q1, lo, hi):
    """The direct loops' work space for the queries ``q0..q1-1`` of ``lo`` to ``hi - 1``
    documents: a :class:`~approx_gbdt._pairs.PairWork`, a table of every ordered pair
    (``_small``) and the rows' order, ``0, 1, ..., m - 1`` (query order)."""
    m = _largest(group_ptr, group_ptr, q0, q1, lo, hi)[0]
    ident = np.empty(m, dtype=np.int32)
    for r in range(m):
        ident[r] = r
    return pair_work(m), full_table(m), ident


def _make_small_block(exact):
    """The tier of the shortest queries (fewer than ``_small.SMALL_N`` documents) of a separable
    measure: the direct pair loops of ``_small`` instead of the windowed ones, query order
    throughout (the sort order ``order`` is neither used nor changed); ``exact`` as in
    :func:`_make_short_block`."""

    def small_block(q0, q1, job, s, gains, inv_z, group_ptr, weights, alpha, kind, k, beta,
                    theta, mode, floor, constant, normalize, grad, hess, pos, order, lo, hi):
        W, P, ident = _small_space(group_ptr, q0, q1, lo, hi)
        for q in range(q0, q1):
            a, b, w_q = _take(job, inv_z, group_ptr, q, lo, hi, weights, grad, hess)
            if a < 0:
                continue
            n = b - a
            small_positions(s[a:b], alpha, W, P)
            if job == JOB_POSITIONS:
                for r in range(n):
                    pos[a + r] = W.pos[r]
                continue
            separable_ve(n, W, gains[a:b], ident, inv_z[q], kind, k, beta, theta)
            small_chain(n, W, P, exact, mode == HESS_BOUND_SUM)
            finish_rows(n, W, ident, alpha, mode, floor, constant, normalize, exact, W.v[:0],
                        w_q, grad[a:b], hess[a:b], False)

    return njit(nogil=True, cache=True, fastmath=_FM, error_model="numpy", **_ENTRY)(
        _variant_named(small_block, "_small_block", exact))


_small_block_exact = _make_small_block(True)
_small_block_bound = _make_small_block(False)


@njit(nogil=True, cache=True, fastmath=_FM, error_model="numpy", **_ENTRY)
def _small_block_ap(q0, q1, job, s, inv_z, rel_idx, rel_ptr, group_ptr, weights, alpha, beta,
                    mode, floor, constant, normalize, grad, hess, out, order, lo, hi):
    """:func:`_make_small_block` for ApproxAP, for its values and for the Hessian modes that
    need none of the exact diagonal's sums."""
    W, P, ident = _small_space(group_ptr, q0, q1, lo, hi)
    T = np.empty((3, ident.shape[0]))  # scratch of ap_small: y, E, q of the relevant ones
    for q in range(q0, q1):
        a, b, w_q = _take(job, inv_z, group_ptr, q, lo, hi, weights, grad, hess)
        if a < 0:
            continue
        n = b - a
        small_positions(s[a:b], alpha, W, P)
        for r in range(n):
            W.v[r] = 0.0
        val = ap_small(W.pos, rel_idx[rel_ptr[q]:rel_ptr[q + 1]], beta, inv_z[q], T[0], T[1],
                       T[2], W.v)
        if job == JOB_VALUE:
            out[q] = val
            continue
        small_chain(n, W, P, False, mode == HESS_BOUND_SUM)
        finish_rows(n, W, ident, alpha, mode, floor, constant, normalize, False, W.v[:0], w_q,
                    grad[a:b], hess[a:b], False)


def _make_lanes_block(exact):
    """The tier of the shortest queries (fewer than ``_lanes.LANES_N`` documents) of a
    separable measure: the lane loops of ``_lanes``, ``LANES`` queries of one length at a
    time (queued per length; the last, partial blocks when the chunk's queries are done);
    ``exact`` as in :func:`_make_short_block`."""

    def lanes_block(q0, q1, job, s, gains, inv_z, group_ptr, weights, alpha, kind, k, beta,
                    theta, mode, floor, constant, normalize, grad, hess, pos, order, lo, hi):
        Lw = lane_work(_largest(group_ptr, group_ptr, q0, q1, lo, hi)[0] + 1)
        top = Lw.count.shape[0]
        m = np.int64(top - 1)
        for q in range(q0, q1 + top):
            # (the queue and flush written out in each block: as a helper returning the next
            # block, the lane blocks took a third longer on lists of 10)
            if q < q1:  # queue the query; a full queue is the next block
                a, b, _ = _take(job, inv_z, group_ptr, q, lo, hi, weights, grad, hess)
                if a < 0:
                    continue
                m = b - a
                if lane_push(Lw, m, q) < LANES:
                    continue
            else:  # then what is left in the queues, shortest first
                m = q - q1
                if Lw.count[m] == 0:
                    continue
            cnt = lane_start(Lw, m, group_ptr)
            lane_positions(Lw, m, cnt, s, alpha)
            if job == JOB_POSITIONS:
                for i in range(m):
                    for l in range(cnt):
                        pos[Lw.start[l] + i] = Lw.pos[i, l]
                continue
            lane_separable_ve(Lw, m, cnt, gains, inv_z, kind, k, beta, theta)
            lane_chain(Lw, m, cnt, exact, mode == HESS_BOUND_SUM)
            lane_finish(Lw, m, cnt, alpha, mode, floor, constant, normalize, exact, weights,
                        grad, hess)

    return njit(nogil=True, cache=True, fastmath=_FM, error_model="numpy", **_ENTRY)(
        _variant_named(lanes_block, "_lanes_block", exact))


_lanes_block_exact = _make_lanes_block(True)
_lanes_block_bound = _make_lanes_block(False)


@njit(nogil=True, cache=True, fastmath=_FM, error_model="numpy", **_ENTRY)
def _lanes_block_ap(q0, q1, job, s, inv_z, rel_idx, rel_ptr, group_ptr, weights, alpha, beta,
                    mode, floor, constant, normalize, grad, hess, out, order, lo, hi):
    """:func:`_make_lanes_block` for ApproxAP, for its values and for the Hessian modes that
    need none of the exact diagonal's sums: the lanes' positions and pair sums, each lane's
    ``v`` by ``ap_small`` on its own query."""
    Lw = lane_work(_largest(group_ptr, group_ptr, q0, q1, lo, hi)[0] + 1)
    top = Lw.count.shape[0]
    p1 = np.empty(top)
    T = np.empty((4, top))  # scratch of ap_small (y, E, q of the relevant ones) and its v
    m = np.int64(top - 1)
    for q in range(q0, q1 + top):  # queue and flush as in _make_lanes_block
        if q < q1:
            a, b, _ = _take(job, inv_z, group_ptr, q, lo, hi, weights, grad, hess)
            if a < 0:
                continue
            m = b - a
            if lane_push(Lw, m, q) < LANES:
                continue
        else:
            m = q - q1
            if Lw.count[m] == 0:
                continue
        cnt = lane_start(Lw, m, group_ptr)
        lane_positions(Lw, m, cnt, s, alpha)
        for l in range(cnt):
            ql = Lw.queue[m, l]
            for i in range(m):
                p1[i] = Lw.pos[i, l]
                T[3, i] = 0.0
            val = ap_small(p1, rel_idx[rel_ptr[ql]:rel_ptr[ql + 1]], beta, inv_z[ql], T[0],
                           T[1], T[2], T[3])
            if job == JOB_VALUE:
                out[ql] = val
            for i in range(m):
                Lw.v[i, l] = T[3, i]
        if job == JOB_VALUE:
            continue
        lane_chain(Lw, m, cnt, False, mode == HESS_BOUND_SUM)
        lane_finish(Lw, m, cnt, alpha, mode, floor, constant, normalize, False, weights, grad,
                    hess)


def _make_long_block(big, exact):
    """The block of a separable measure's long queries: one query per thread (``_long_block_*``)
    or, for ``big``, each query's rows split across ``nt`` threads (``_split_block_*``), for
    Hessian modes that need the exact diagonal's sums (``exact``) or not. Both are constants
    of the compiled function, so that data without queries of the row split never compiles
    its parallel loops, and a first call compiles only the pair loops its mode uses."""

    def long_block(q0, q1, job, s_all, gains_all, inv_z, group_ptr, weights, alpha, kind, k,
                   beta, theta, mode, floor, constant, normalize, grad_all, hess_all, pos_all,
                   order_all, lo, hi, nt, gp, gt):
        W = pair_work(_largest(group_ptr, group_ptr, q0, q1, lo, hi)[0])
        for q in range(q0, q1):
            a, b, wts = _take(job, inv_z, group_ptr, q, lo, hi, weights, grad_all, hess_all)
            if a < 0:
                continue
            s = s_all[a:b]
            order = order_all[a:b]
            n = s.shape[0]
            grid, lag = _positions_step(big, s, order, alpha, W, nt, gp, gt)
            if job == JOB_POSITIONS:
                for r in range(n):
                    pos_all[a + order[r]] = W.pos[r]
                continue
            gains = gains_all[a:b]
            separable_ve(n, W, gains, order, inv_z[q], kind, k, beta, theta)
            # the class split of the bound needs v monotone within a gain class (no top-k);
            # "mixed": the bound only where its floor can bind (``_grid._chain_boxes``)
            _chain_step(big, grid, n, W, exact, _need_bound(mode), k <= 0, gains, order,
                        W.v[:0], mode == HESS_BOUND_SUM, floor if mode == HESS_MIXED else 0.0,
                        nt, gt, lag)
            _sorted_finish(n, W, order, alpha, mode, floor, constant, normalize, exact,
                           W.v[:0], wts, grad_all[a:b], hess_all[a:b])

    return njit(nogil=True, cache=True, **_ENTRY)(
        _variant_named(long_block, "_split_block" if big else "_long_block", exact))


_long_block_exact = _make_long_block(False, True)
_long_block_bound = _make_long_block(False, False)
_split_block_exact = _make_long_block(True, True)
_split_block_bound = _make_long_block(True, False)


@njit(inline="always", cache=True)
def _ap_space(job, exact, group_ptr, rel_ptr, q0, q1, lo, hi):
    """ApproxAP's work space for the queries ``q0..q1-1`` of ``lo`` to ``hi - 1`` documents
    (the cache ``Hc`` of the exact diagonal's off-diagonal part only for gradients of a block
    whose Hessian mode needs the exact sums, ``exact``)."""
    maxn, maxr = _largest(group_ptr, rel_ptr, q0, q1, lo, hi)
    hmax = min(maxr, _H_CACHE_MAX) if (job == JOB_GRAD and exact) else 0
    return pair_work(maxn), ap_work(maxn), np.empty((hmax, hmax))


def _make_short_block_ap(exact):
    """The short tier's block of ApproxAP, as :func:`_make_short_block`."""

    def short_block_ap(q0, q1, job, s, inv_z, rel_idx, rel_ptr, group_ptr, weights, alpha, beta,
                       mode, floor, constant, normalize, grad, hess, out, order, lo, hi):
        W, A, Hc = _ap_space(job, exact, group_ptr, rel_ptr, q0, q1, lo, hi)
        for q in range(q0, q1):
            a, b, w_q = _take(job, inv_z, group_ptr, q, lo, hi, weights, grad, hess)
            if a < 0:
                continue
            n = b - a
            o = order[a:b]
            _sorted_positions(s[a:b], o, alpha, W)
            R = ap_relevant(n, W, A, o, rel_idx[rel_ptr[q]:rel_ptr[q + 1]], beta, n >= 0,
                            (n >= 0) if exact else (n < 0))
            if job == JOB_VALUE:
                out[q] = ap_value_sum(R, A, inv_z[q])
                continue
            ap_ve(n, R, W, A, beta, inv_z[q])
            _sorted_chain(n, W, exact, mode == HESS_BOUND_SUM)
            _ap_finish(n, R, W, A, Hc, o, inv_z[q], alpha, beta, mode, floor, constant,
                       normalize, exact, w_q, grad[a:b], hess[a:b])

    return njit(nogil=True, cache=True, **_ENTRY)(
        _variant_named(short_block_ap, "_short_block_ap", exact))


_short_block_ap_exact = _make_short_block_ap(True)
_short_block_ap_bound = _make_short_block_ap(False)


def _make_long_block_ap(big, exact):
    """ApproxAP's blocks of long queries (``_long_block_ap_*``, ``_split_block_ap_*``), as
    :func:`_make_long_block`."""

    def long_block_ap(q0, q1, job, s_all, inv_z, rel_idx, rel_ptr, group_ptr, weights, alpha,
                      beta, mode, floor, constant, normalize, grad, hess, out, order_all, lo,
                      hi, nt, gp, gt):
        W, A, Hc = _ap_space(job, exact, group_ptr, rel_ptr, q0, q1, lo, hi)
        for q in range(q0, q1):
            a, b, wts = _take(job, inv_z, group_ptr, q, lo, hi, weights, grad, hess)
            if a < 0:
                continue
            s = s_all[a:b]
            order = order_all[a:b]
            iz = inv_z[q]
            n = s.shape[0]
            grid, lag = _positions_step(big, s, order, alpha, W, nt, gp, gt)
            # the relevant documents and their windows first, then their sums by the grid
            # where that is cheaper, else by the near pairs' loops and the far pairs' series
            R = ap_relevant(n, W, A, order, rel_idx[rel_ptr[q]:rel_ptr[q + 1]], beta, n < 0,
                            n < 0)
            if use_grid(A.ry[:R], A.jst, R, gp):  # the exact loops' pairs: within _NEAR
                _ap_relevant_grid(big, R, A, exact, nt, gt)
            else:  # ``tc`` for the exact diagonal only (a run-time flag, as in _grid_chain)
                ap_relevant_sums(R, A, (n >= 0) if exact else (n < 0))
            if job == JOB_VALUE:
                out[q] = ap_value_sum(R, A, iz)
                continue
            ap_ve(n, R, W, A, beta, iz)
            need_bound = _need_bound(mode)
            bsum = mode == HESS_BOUND_SUM
            # ApproxAP's v is coupled, not monotone within a class: the grid's class split
            # does not apply; its bound comes from _ap_grid_bound where that is cheaper than
            # the exact chain. (``n < 0`` is False as a run-time value: a literal False would
            # compile the callee once more.)
            S = _relevant_part(n, W, A, R if grid and need_bound else 0)
            bound_grid = grid and need_bound and _ap_bound_on_grid(W.x[:n], W.jend, n,
                                                                   S.jend[:R], gp)
            # with the bound on the grid, the chain's sums with weights |v| start it (W.bnd),
            # and they are most of "bound_sum"'s: sum_j w_kj (|v_j| - |v_k|) + 2 |v_k| aw_k
            sum_grid = grid and bsum
            av = W.av[:0]
            if bound_grid or sum_grid:  # (a literal True: bound_weights is inlined)
                av = bound_weights(n, W, True)[:n]
            _chain_step(big, grid and (bound_grid or not need_bound), n, W, exact,
                        need_bound and not bound_grid, n < 0, W.v, order, av, bsum, 0.0, nt, gt,
                        lag)
            if bound_grid:
                _ap_grid_bound(big, n, W, A, R, S, nt, gp, gt, lag)
            if sum_grid:
                for r in range(n):
                    W.bnd[r] += 2.0 * av[r] * W.aw[r]
            _ap_finish(n, R, W, A, Hc, order, iz, alpha, beta, mode, floor, constant, normalize,
                       exact, wts, grad[a:b], hess[a:b])

    return njit(nogil=True, cache=True, **_ENTRY)(
        _variant_named(long_block_ap, "_split_block_ap" if big else "_long_block_ap", exact))


_long_block_ap_exact = _make_long_block_ap(False, True)
_long_block_ap_bound = _make_long_block_ap(False, False)
_split_block_ap_exact = _make_long_block_ap(True, True)
_split_block_ap_bound = _make_long_block_ap(True, False)


_CHUNK_DOCS = 4096  # documents per chunk of a tier: about 1-10 ms of work


def _on_threads(block, nt, docs_of, *args):
    """Run ``block(q0, q1, *args)`` over chunks of the queries (whole queries, about
    ``_CHUNK_DOCS`` documents each by ``docs_of``: the documents of each query of the tier,
    0 for the others, which the block skips) on the calling thread and up to ``nt - 1`` pool
    threads, each taking the next chunk when it is free: a thread that the machine does not
    schedule (other work on the cores) leaves its chunks to the others instead of holding up
    the call. ``block`` is compiled with ``nogil=True``, so the threads run in parallel; a
    waiting thread sleeps. Every thread has finished when this returns or raises (the first
    error is raised)."""
    nq = docs_of.shape[0]
    cum = np.concatenate([[0], np.cumsum(docs_of)])
    docs = int(cum[-1])
    nch = min(int(np.count_nonzero(docs_of)), docs // _CHUNK_DOCS)
    if nt == 1 or nch < 2:
        block(0, nq, *args)
        return
    # chunk ends where the tier's documents reach equal shares (queries of the other tiers,
    # which the block skips, count for nothing)
    ends = np.searchsorted(cum, np.linspace(0, docs, nch + 1)[1:-1])
    bounds = np.unique(np.concatenate([[0], ends, [nq]]))
    chunks = itertools.count()  # next() is atomic under the GIL

    def work():
        for i in chunks:
            if i >= bounds.shape[0] - 1:
                return
            block(bounds[i], bounds[i + 1], *args)

    pool = _pool()
    futures = []
    try:
        for _ in range(min(nt, bounds.shape[0] - 1) - 1):
            futures.append(pool.submit(work))
        work()
    finally:
        wait(futures)
    for f in futures:
        f.result()


_POOL = {}  # pid -> the thread pool of that process
_POOL_LOCK = threading.Lock()
_SPLIT_LOCK = threading.Lock()


def _pool():
    """The process's thread pool for :func:`_on_threads`: ``NUMBA_NUM_THREADS - 1`` workers,
    the most a call uses (its threads start when first needed). A forked child makes its own
    (its parent's worker threads do not exist in it)."""
    pid = os.getpid()
    with _POOL_LOCK:
        if pid not in _POOL:
            _POOL.clear()
            _POOL[pid] = ThreadPoolExecutor(max_workers=max(1, config.NUMBA_NUM_THREADS - 1),
                                            thread_name_prefix="approx_gbdt")
        return _POOL[pid]


@functools.cache
def _grid_tables():
    """The grid's nodes, kernel tables, self terms' coefficients and far series' tables, made
    on first use (``_grid.grid_tables``, in NumPy) and kept for the process; read-only."""
    return grid_tables()


_GRID_AUTO = 0  # grid_mode: the grid path (``_grid``) where it is cheaper
_SPLIT_SHARE = 1.0  # a query is split across threads above this times a thread's share


def split_at(sizes, lo, nt, share=_SPLIT_SHARE):
    """The shortest query length whose rows are split across the ``nt`` threads (at least
    ``lo``). Of the queries of at least ``lo`` documents, the largest is split if it holds
    more than ``share`` times a thread's share of their documents, then the next largest if
    it holds more than that of the documents left, and so on (``share`` 0: every such
    query); the others run one per thread.

    Splitting one query's rows costs synchronisation and leaves the sequential steps (sort,
    the grid's set-up) to one thread, so where there are enough long queries to keep every
    thread busy, one query per thread is faster: in a probe with 2 threads, 10 queries of
    10,000 documents took 17 ms (ApproxNDCG) and 43 ms (ApproxAP) one per thread against 32
    and 90 ms split, and a single query of 100,000 documents 31 ms split against 51 ms on one
    thread. With one thread no query is split.
    """
    long = np.sort(sizes[sizes >= lo])[::-1]
    rest = int(long.sum())
    split = int(long[0]) + 1 if long.shape[0] else lo
    for n in long:  # the largest first: each is split if it exceeds a share of what is left
        if n * nt <= share * rest:
            break
        split = int(n)
        rest -= int(n)
    return max(lo, split)


# The direct loops do every pair of a query; the windowed ones skip the saturated pairs. From
# a hundred or so documents a query whose alpha times score range is wide (most pairs
# saturated) is cheaper by the windowed loops: one thread, queries of 384 and 511 documents
# evenly spread over a range of 200 took 1.07-1.43 times as long by the direct loops (over 60,
# 0.85-1.10 times), and queries of 130 and 200 documents with N(0, 10) scores at alpha 10
# (alpha times their range near _small._SPREAD, and beyond it in some: one exponential per
# pair there) 1.2-2.2 times.
_WIDE_N = 128  # short queries at least this long are wide ...
_WIDE_SPAN = 150.0  # ... where alpha (max s - min s) exceeds this


def _mostly_wide(s, group_ptr, sizes, short, alpha):
    """Whether the short queries (``short``, a mask) of at least ``_WIDE_N`` documents whose
    ``alpha`` times score range exceeds ``_WIDE_SPAN`` hold more than half of the short
    queries' ordered pairs (sum of ``n^2``): the windowed loops are then the cheaper ones for
    the short queries."""
    cand = short & (sizes >= _WIDE_N)
    if not cand.any():
        return False
    # every query's range (reduceat from each start to the next; the starts of trailing empty
    # queries, equal to the length, left out: the last query's range then ends at the end)
    starts = group_ptr[:-1]
    keep = starts < s.shape[0]
    span = np.zeros(sizes.shape[0])
    with np.errstate(over="ignore", invalid="ignore"):  # scores near the float64 limits
        span[keep] = alpha * (np.maximum.reduceat(s, starts[keep])
                              - np.minimum.reduceat(s, starts[keep]))
    pairs = sizes.astype(np.float64) ** 2
    return bool(pairs[cand & (span > _WIDE_SPAN)].sum() > 0.5 * pairs[short].sum())


# The short tier's windowed loops stand in for the long tiers' blocks while those compile in a
# background process (``_behind``) where they take at most this many ordered pairs a thread
# (the longest query's on one):
# about 0.7 s a call with every pair in the window, as from equal scores (two threads, lists
# of 1,000 and 2,000 documents: 0.37 ns an ordered pair, 0.74 a pair and thread), against the
# 18-33 s the blocks take to compile.
_STAND_IN_PAIRS = 1e9


def _stand_in_cheap(sizes, nt):
    """Whether the windowed loops are cheap enough for the queries of ``sizes`` on ``nt``
    threads to stand in for the long tiers' blocks (``_STAND_IN_PAIRS``): they take whole
    queries one per thread, so the longest one's pairs count on one thread."""
    pairs = sizes.astype(np.float64) ** 2
    return max(float(np.sum(pairs)) / nt, float(np.max(pairs))) <= _STAND_IN_PAIRS


_NO_REL = np.zeros(1, dtype=np.int64)
_EMPTY = np.empty(0)


def _schedule(job, s, gains, inv_z, rel_idx, rel_ptr, group_ptr, weights, alpha, kind, k, beta,
              theta, mode, floor, constant, normalize, grad, hess, pos, out, order, par_min, nt,
              grid_mode, small_n=SMALL_N, split_share=_SPLIT_SHARE, lanes_n=LANES_N):
    """Run ``job`` on every query, in four tiers by length ``n``:

    - ``n < small``: one query per thread by the direct pair loops of ``_small``
      (:func:`_make_small_block`), or, where every one of them is shorter than ``lanes_n``
      and than ``LANES_N`` (ApproxAP: ``LANES_N_AP``), ``LANES`` queries of one length at a
      time by the lane loops of ``_lanes`` (:func:`_make_lanes_block`). ``small`` is
      ``min(small_n, short)`` where every query below ``short`` is shorter than that, most of
      their pairs are not in wide queries (:func:`_mostly_wide`) and, for ApproxAP, the
      Hessian mode needs none of the exact diagonal's sums; else 0;
    - ``small <= n < short`` (the grid's threshold ``GRID_MIN_N`` and ``par_min``): one query
      per thread by the exact windowed loops (:func:`_make_short_block`);
    - ``short <= n < split``: one query per thread, grid where it is cheaper
      (:func:`_make_long_block`, :func:`_make_long_block_ap`);
    - ``n >= split``: one query after the other, rows split across the threads. ``split``
      (:func:`split_at`) is at least ``par_min``, and higher where there are enough long
      queries to keep every thread busy one query each (``split_share``).

    The tiers are separately compiled functions, compiled on first use: data without long
    queries never compiles the grid, and data without queries of the row split never compiles
    its parallel loops. With ``grid_mode`` 0, a long tier whose block compiles in a background
    process (``_behind``, where the windowed loops are cheap: :func:`_stand_in_cheap`) has its
    queries taken by the short tier's windowed block meanwhile. Queries with ``inv_z == 0`` get
    value 0 (``JOB_VALUE``); they and single-document queries get zero gradient and Hessian
    (``JOB_GRAD``).
    """
    if group_ptr.shape[0] < 2:
        return
    sizes = np.diff(group_ptr)
    if grid_mode > 0:
        short = 0  # the grid forced (tests): no query takes the short tier
    else:
        short = par_min if grid_mode < 0 else min(par_min, GRID_MIN_N)
    coupled = kind == KIND_AP
    # the blocks' variant: the Hessian mode's (the measure's default mode's when only
    # positions or values are needed)
    exact = need_exact_parts(mode) if job == JOB_GRAD else not coupled
    if coupled:
        short_block = _short_block_ap_exact if exact else _short_block_ap_bound
        small_block = _small_block_ap
        lanes_block = _lanes_block_ap
        long_block = _long_block_ap_exact if exact else _long_block_ap_bound
        split_block = _split_block_ap_exact if exact else _split_block_ap_bound
        args = (job, s, inv_z, rel_idx, rel_ptr, group_ptr, weights, alpha, beta, mode, floor,
                constant, normalize, grad, hess, out, order)
    else:
        short_block = _short_block_exact if exact else _short_block_bound
        small_block = _small_block_exact if exact else _small_block_bound
        lanes_block = _lanes_block_exact if exact else _lanes_block_bound
        long_block = _long_block_exact if exact else _long_block_bound
        split_block = _split_block_exact if exact else _split_block_bound
        args = (job, s, gains, inv_z, group_ptr, weights, alpha, kind, k, beta, theta, mode,
                floor, constant, normalize, grad, hess, pos, order)
    split = split_at(sizes, par_min, nt, split_share)  # short <= par_min
    end = int(sizes.max()) + 1
    nq = sizes.shape[0]
    # the direct loops only where every query of the short tiers is below small_n and they are
    # not mostly widely spread queries of _WIDE_N documents or more (_mostly_wide): else the
    # windowed loops take all of them, so that a call compiles one short tier, not two (each
    # costs seconds of compilation; a booster's first round, from equal scores, takes the
    # direct loops)
    below = sizes < short
    longest = int(sizes[below].max()) if below.any() else -1  # of the short tiers; -1: none
    small = min(small_n, short)
    if ((coupled and exact) or longest < 0 or longest >= small
            or _mostly_wide(s, group_ptr, sizes, below, alpha)):
        small = 0
    elif longest < min(lanes_n, LANES_N_AP if coupled else LANES_N):
        small_block = lanes_block  # all of them short enough for the lane loops
    tier = sizes < small
    if tier.any():
        _on_threads(small_block, nt, np.where(tier, sizes, 0), *args, 0, small)
    tier = (sizes >= small) & (sizes < short)
    if tier.any():
        _on_threads(short_block, nt, np.where(tier, sizes, 0), *args, small, short)
    tier = (sizes >= short) & (sizes < split)
    # while the long tiers' blocks compile in a background process (``_behind``), the short
    # tier's windowed loops take their queries where that is cheap
    long_waits = split_waits = False
    if grid_mode == _GRID_AUTO and end > short:
        cheap = _stand_in_cheap(sizes[sizes >= short], nt)
        if tier.any():
            long_waits = _behind.pending(long_block, (0, nq, *args, short, split, 1,
                                                      grid_mode, _grid_tables()), cheap=cheap)
        if end > split:
            split_waits = _behind.pending(split_block, (0, nq, *args, split, end, nt,
                                                        grid_mode, _grid_tables()), cheap=cheap)
    if long_waits or split_waits:
        lo = short if long_waits else split
        hi = end if split_waits else split
        _on_threads(short_block, nt, np.where((sizes >= lo) & (sizes < hi), sizes, 0), *args,
                    lo, hi)
    if tier.any() and not long_waits:
        _on_threads(long_block, nt, np.where(tier, sizes, 0), *args, short, split, 1,
                    grid_mode, _grid_tables())
    if end > split and not split_waits:
        # one caller at a time: Numba's workqueue threading layer (where neither OpenMP nor
        # TBB is available) aborts when two threads enter its parallel loops at once
        with _SPLIT_LOCK:
            split_block(0, nq, *args, split, end, nt, grid_mode, _grid_tables())


def has_hessian(mode, coupled):
    """Whether the kernels compute the Hessian mode ``mode`` for ApproxAP's coupled term
    (``coupled``) or for the separable measures: ``"mixed_sum"`` reads ``sum_j w_kj |v_j|``
    off the gradient's sums, which needs the separable measures' ``v <= 0``, and the separable
    measures' grid path has no ``"bound_sum"``."""
    return mode != (HESS_MIXED_SUM if coupled else HESS_BOUND_SUM)


def grad_hess(s, gains, inv_z, rel_idx, rel_ptr, group_ptr, weights, alpha, kind, k, beta,
              theta, mode, floor, constant, normalize, grad, hess, order, par_min=_PAR_MIN,
              grid_mode=_GRID_AUTO, n_threads=None, small_n=SMALL_N, split_share=_SPLIT_SHARE,
              lanes_n=LANES_N):
    """Gradient and Hessian (approximation selected by ``mode``) of L = -sum_q M_q.

    ``kind`` is a separable term (``_measure_terms.TERM_*``, with ``gains`` and the per-query
    normaliser ``inv_z``; ``rel_idx`` and ``rel_ptr`` are not used and may be ``None``) or
    ``KIND_AP`` (``inv_z = 1 / R``; ``rel_idx`` holds, query after query, the in-query offsets
    of the relevant documents, delimited by ``rel_ptr``; ``gains`` is not used). Equal to the
    reference loops (``_reference``) up to the window bound of ``_pairs`` and rounding.
    ``weights`` has one entry per document, or is empty for unit weights. ``order`` (from
    ``make_work``) keeps each query's sort order between calls. Queries of at least
    ``par_min`` documents are split across threads where they hold more than ``split_share``
    times a thread's share of the long queries' documents (:func:`split_at`), else they run
    one per thread like the shorter ones. Long queries take the grid path
    (``_grid``) where it is cheaper (``grid_mode`` 0; 1 always, -1 never); the short queries
    take the direct loops of ``_small`` where all of them have fewer than ``small_n``
    documents and they are not mostly widely spread (the lane loops of ``_lanes`` where all
    have fewer than ``lanes_n``, at most ``LANES_N``, for ApproxAP ``LANES_N_AP``), else the
    windowed loops (see :func:`_schedule`). ``n_threads`` (the host library's setting;
    default Numba's) caps the threads of this call.
    """
    if not has_hessian(mode, kind == KIND_AP):
        raise ValueError(f"Hessian mode {mode} is not available for measure kind {kind}")
    nq = group_ptr.shape[0] - 1
    if kind == KIND_AP:
        gains = s[:0]
    else:
        rel_idx, rel_ptr = _NO_REL, _NO_REL
    with threads_capped(n_threads) as nt:
        _schedule(JOB_GRAD, s, gains, inv_z, rel_idx, rel_ptr, group_ptr, weights, alpha, kind,
                  k, beta, theta, mode, floor, constant, normalize, grad, hess, s[:0],
                  np.zeros(nq), order, par_min, nt, grid_mode, small_n, split_share, lanes_n)


@contextlib.contextmanager
def threads_capped(n_threads):
    """Numba's thread count set to ``n_threads`` inside the block, which receives it;
    restored after. The current count is an upper bound (``numba.set_num_threads``, an
    enclosing cap such as ``ApproxXGBRanker(n_jobs=...)``'s): the count only goes down; None
    keeps it."""
    prev = get_num_threads()
    nt = prev if n_threads is None else max(1, min(int(n_threads), prev))
    set_num_threads(nt)
    try:
        yield nt
    finally:
        set_num_threads(prev)


def smoothed_positions(s, group_ptr, alpha, pos):
    """Fill ``pos`` with ``pos^_i = 1 + sum_{j != i} sig(alpha (s_j - s_i))`` per query."""
    nq = group_ptr.shape[0] - 1
    order = np.full(s.shape[0], -1, dtype=np.int32)
    _schedule(JOB_POSITIONS, s, s[:0], _EMPTY, _NO_REL, _NO_REL, group_ptr, _EMPTY, alpha,
              TERM_LOG, 0, 1.0, 0.0, HESS_BOUND, 0.1, 1.0, False, s[:0], s[:0], pos,
              np.zeros(nq), order, _PAR_MIN, get_num_threads(), _GRID_AUTO)


def value(s, gains, inv_z, rel_idx, rel_ptr, group_ptr, alpha, kind, k, beta, theta):
    """Per-query surrogate value ``M_q`` (arguments as in :func:`grad_hess`); 0 where
    ``inv_z == 0``."""
    nq = group_ptr.shape[0] - 1
    if kind != KIND_AP:
        pos = np.empty_like(s)
        smoothed_positions(s, group_ptr, alpha, pos)
        return separable_value(gains, inv_z, group_ptr, kind, k, beta, theta, pos)
    out = np.zeros(nq)
    order = np.full(s.shape[0], -1, dtype=np.int32)
    _schedule(JOB_VALUE, s, s[:0], inv_z, rel_idx, rel_ptr, group_ptr, _EMPTY, alpha, kind, 0,
              beta, theta, HESS_BOUND, 0.1, 1.0, False, s[:0], s[:0], s[:0], out, order,
              _PAR_MIN, get_num_threads(), _GRID_AUTO)
    return out


def ideal_dcg(gains, group_ptr, k):
    """Exact ideal DCG (or DCG@k when ``k > 0``) per query: gains sorted descending."""
    return ideal_value(gains, group_ptr, TERM_LOG, k, 0.0)
