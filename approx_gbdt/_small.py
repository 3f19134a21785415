"""Direct pair loops for short queries: every ordered pair, in query order, no sorting.

For a query of up to a few hundred documents the windowed loops of ``_pairs`` spend more on
their per-row machinery (the sort, windows, exp blocks, tiles, a call per row segment) than on
the pairs themselves. These loops fill a table of every ordered pair ``(i, j)`` of a query (the
scheduler, ``_kernels._schedule``, gives them the queries below the grid's threshold,
``SMALL_N``, unless those of ``_kernels._WIDE_N`` (128) documents or more are mostly so widely
spread that the windowed loops, which skip the saturated pairs, are cheaper, or all of them are
so short that the lane loops of ``_lanes`` take them; so the table
takes at most ``2 SMALL_N^2`` floats, 4 MiB, per thread), with ``x_i = alpha (s_i - max s)``
and ``E_i = exp(x_i)`` (one exponential per document):

    sig_ij = sig(alpha (s_j - s_i)) = E_j / (E_i + E_j),   w_ij = sig_ij sig_ji

one division per ordered pair, over whole rows (twice the divisions of one per pair, but in
loops that vectorise, without scattered updates), and then every sum is a sum over a row. The
rounding of ``x`` gives each sigmoid a relative error of about ``eps alpha (max s - min s)``
(below 1e-13 up to ``_SPREAD``), as in the windowed loops. ``E`` stays a normal number while
``alpha`` times the query's score range is below ``_SPREAD``; a wider query takes one
``exp(-|x_j - x_i|)`` per ordered pair. Unlike the windowed loops, no pair is skipped: the
saturated ones add their tiny weights, as in the reference loops (``_reference``), which keeps
the normalisation's ``log2(1 + S) / S`` at its limit ``1 / ln 2`` where every pair of a query
is saturated. ApproxAP's relevant pairs take the same row loops, without a table
(``_measure_terms.ap_small``). Notation and sums as in ``_pairs``; the results go into the same
:class:`~approx_gbdt._pairs.PairWork` fields, indexed in query order.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from approx_gbdt._pairs import _sig_pair, bound_weights

SMALL_N = 512  # shorter queries take these loops (the grid's GRID_MIN_N; table: 4 MiB)
_SPREAD = 600.0  # exp(-600) ~ 1e-261: E and E_i + E_j stay normal numbers
_EXP_MAX = 800.0  # exp(-800) underflows to 0


@njit(inline="always", cache=True)
def _sig_wide(d):
    """``_sig_pair(d)`` for the loops of wide queries (one exponential per pair): beyond
    ``_EXP_MAX`` the exponential is 0 and the pair saturated, and a NaN from an overflowed
    ``alpha s`` counts as below."""
    if abs(d) <= _EXP_MAX:
        return _sig_pair(d)
    sij = 1.0 if d > 0.0 else 0.0
    return sij, 1.0 - sij, 0.0


@njit(inline="always", cache=True)
def full_table(n):
    """The table of every ordered pair of queries of up to ``n`` documents:
    ``[0, i, j]`` holds ``sig_ij``, ``[1, i, j]`` holds ``w_ij``."""
    return np.empty((2, n, n))


@njit(inline="always", cache=True)
def small_positions(s, alpha, W, F):
    """``W.pos`` of one query (query order) and its table ``F`` of every ordered pair, filled row
    by row (whole rows, so that the loops vectorise; ``W.x`` and ``W.ex`` are scratch). The
    diagonal holds ``sig = 1/2`` (up to an ulp where narrow; exactly where wide, also where
    ``alpha s`` overflows), so ``pos^_i = 1/2 + sum_j sig_ij``, and ``w = 0`` (a document is
    not its own pair)."""
    n = s.shape[0]
    x = W.x
    E = W.ex
    top = s[0]
    for i in range(n):
        top = max(top, s[i])
    lo = 0.0
    for i in range(n):
        x[i] = alpha * (s[i] - top)
        lo = min(lo, x[i])
    sig = F[0]
    wt = F[1]
    if lo > -_SPREAD:
        for i in range(n):
            E[i] = math.exp(x[i])
        for i in range(n):
            ei = E[i]
            rs = sig[i]
            rw = wt[i]
            acc = 0.0
            for j in range(n):
                r = 1.0 / (ei + E[j])
                sij = E[j] * r
                rs[j] = sij
                rw[j] = sij * (ei * r)
                acc += sij
            rw[i] = 0.0
            W.pos[i] = acc + 0.5
    else:
        for i in range(n):
            xi = x[i]
            rs = sig[i]
            rw = wt[i]
            acc = 0.0
            for j in range(n):
                sij, _, w = _sig_wide(x[j] - xi)
                rs[j] = sij
                rw[j] = w
                acc += sij
            if rs[i] != 0.5:  # x_i - x_i is NaN where alpha s_i overflowed
                acc += 0.5 - rs[i]
                rs[i] = 0.5
            rw[i] = 0.0
            W.pos[i] = acc + 0.5


@njit(inline="always", cache=True)
def small_chain(n, W, F, need_exact, bsum):
    """Chain-rule sums of one query from its table ``F`` and ``W.v``, ``W.e``: ``W.g``,
    ``W.bnd`` (with ``bsum`` the sum ``sum_j w (|v_j| + |v_i|)`` of ``"bound_sum"``) and, when
    ``need_exact``, ``W.aa``, ``W.ab``, ``W.aw`` (``_pairs`` notation), each a sum over its row
    (the diagonal's ``w = 0`` adds nothing)."""
    v = W.v
    e = W.e
    sig = F[0]
    wt = F[1]
    av = bound_weights(n, W, bsum)  # |v| with bsum
    for i in range(n):
        vi = v[i]
        rs = sig[i]
        rw = wt[i]
        gi = 0.0
        bi = 0.0
        ai = 0.0
        Bi = 0.0
        wi = 0.0
        for j in range(n):
            w = rw[j]
            dv = v[j] - vi
            wd = w * dv
            gi += wd
            bi += w * abs(dv)
            if need_exact:
                ai += wd * (1.0 - 2.0 * rs[j])
                Bi += w * w * e[j]
                wi += w
        if bsum:  # a loop of its own, so that the bound's keeps its single load
            avi = av[i]
            bi = 0.0
            for j in range(n):
                bi += rw[j] * (av[j] + avi)
        W.g[i] = gi
        W.bnd[i] = bi
        if need_exact:
            W.aa[i] = ai
            W.ab[i] = Bi
            W.aw[i] = wi
