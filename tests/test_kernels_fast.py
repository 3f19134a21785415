"""The fast kernels (default) against the exact pairwise reference kernels.

Metric, per query q and document i (for g, h and the values alike):

    |fast_i - exact_i| <= 1e-6 * max_{j in q} |exact_j| + B_q

where B_q is the a-priori bound of the skipped saturated pairs stated in ``_kernels`` (below
1e-11 of the query's natural scale even for 1e5 documents). B_q only matters for a query whose
every pair is saturated (its exact gradient is itself below ~1e-16 of that scale); everywhere
else the check is a plain 1e-6 relative one.
"""

import contextlib
import json
import math
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest

import approx_gbdt
from approx_gbdt import _kernels as K
from approx_gbdt import _reference as R
from approx_gbdt._pairs import need_exact_parts
from approx_gbdt._small import _SPREAD
from approx_gbdt.hosts import doc_weights
from approx_gbdt.objectives import HESSIANS, ApproxAP, ApproxNDCG, smoothed_positions

MODES = ["exact", "bound", "abs", "mixed", "constant", "mixed_sum", "bound_sum"]
ET = math.exp(-K._T)


def _ref(obj, s, y, ptr, mode, w):
    """Gradient, Hessian, v and e by the exact O(n^2) reference loops."""
    return obj._reference_grad_hess(s, y, ptr, w if w.size else None, hessian=mode)


def _fast(obj, s, y, ptr, mode, w, par_min=K._PAR_MIN, order=None, split_share=0.0,
          small_n=K.SMALL_N):
    prep = obj._prepare(y, ptr, cache=False)
    if order is not None:
        prep.work["order"] = order
    obj._par_min = par_min
    obj._split_share = split_share  # 0: every query of at least par_min takes the row split
    obj._small_n = small_n  # 0: the short queries take the windowed loops
    return obj._scaled_grad_hess(s, prep, doc_weights(w if w.size else None, prep.group_ptr),
                                 mode)


def _check(ref, fast, ptr, bound, what):
    for q in range(len(ptr) - 1):
        r = ref[ptr[q]:ptr[q + 1]]
        f = fast[ptr[q]:ptr[q + 1]]
        if r.size == 0:
            continue
        tol = 1e-6 * np.abs(r).max() + bound[q]
        err = np.abs(r - f).max()
        assert err <= tol, f"{what}: query {q} (n={r.size}) error {err:.3g} > {tol:.3g}"


def _compare(obj, s, y, ptr, mode, w=None, par_min=K._PAR_MIN, split_share=0.0):
    w = np.empty(0) if w is None else w
    g0, h0, v, e = _ref(obj, s, y, ptr, mode, w)
    g1, h1 = _fast(obj, s, y, ptr, mode, w, par_min, split_share=split_share)
    nq = len(ptr) - 1
    wmax = w.max() if w.size else 1.0
    bg, bh = np.zeros(nq), np.zeros(nq)
    for q in range(nq):
        a, b = ptr[q], ptr[q + 1]
        if b - a < 2:
            continue
        n = b - a
        vm = np.abs(v[a:b]).max()
        em = np.abs(e[a:b]).max()
        # window bound (module notes), x2 for the effect of the positions on v and e, times the
        # normalisation (<= 1 / ln 2) and the weights
        scale = 2.0 * (n - 1) * ET * wmax / math.log(2.0)
        beta = getattr(obj, "beta", 0.0)
        bg[q] = scale * obj.alpha * 2 * vm * (1 + beta)
        bh[q] = scale * obj.alpha**2 * (2 * vm + em * (1 + n)) * (1 + beta) ** 2
    _check(g0, g1, ptr, bg, f"{obj!r} {mode} grad")
    _check(h0, h1, ptr, bh, f"{obj!r} {mode} hess")


def _data(seed, nq=30, max_n=70, spread=1.0, ties=False, alpha=10.0):
    # short queries, one of them of 200 documents (the direct or the windowed loops, _loops)
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_n, nq)
    sizes[0] = 1
    sizes[1] = 2
    sizes[3] = 200
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    y = rng.integers(0, 5, n).astype(float)
    y[ptr[2]:ptr[3]] = 0.0  # a query with nothing relevant
    s = rng.normal(size=n) * spread / alpha
    if ties:
        s = np.round(s * alpha) / alpha
    return s, y, ptr


OBJECTIVES = [
    lambda m: ApproxNDCG(hessian=m),
    lambda m: ApproxNDCG(hessian=m, k=5),
    lambda m: ApproxNDCG(hessian=m, normalize=False, alpha=3.0),
    lambda m: ApproxAP(hessian=m),
    lambda m: ApproxAP(hessian=m, normalize=False, beta=2.0),
]


def _objectives(mode):
    """The objectives above that have the Hessian mode (ApproxAP has no "mixed_sum",
    ApproxNDCG no "bound_sum")."""
    return [make(mode) for make in OBJECTIVES if mode in make("bound")._hessians]


@pytest.mark.parametrize("loops", ["direct", "windowed"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("spread", [0.0, 0.05, 1.0, 10.0, 100.0, 1e4, 1e6])
def test_fast_equals_reference(mode, spread, loops):
    s, y, ptr = _data(int(spread) % 97, spread=spread, ties=spread == 10.0)
    with _loops(loops) as blocks:
        for obj in _objectives(mode):
            _compare(obj, s, y, ptr, mode)
    _short_blocks_were(blocks, loops)


@pytest.mark.parametrize("mode", MODES)
def test_parallel_split_equals_reference(mode):
    # par_min=16 sends most queries through the row-split (multi-threaded) path
    s, y, ptr = _data(5, nq=12, max_n=300, spread=3.0)
    w = np.random.default_rng(1).uniform(0.5, 2.0, s.shape[0])
    for obj in _objectives(mode):
        _compare(obj, s, y, ptr, mode, par_min=16)
        _compare(obj, s, y, ptr, mode, w=w, par_min=16)
    s[:] = 0.0
    for obj in _objectives(mode):
        _compare(obj, s, y, ptr, mode, par_min=16)


@pytest.mark.parametrize("loops", ["direct", "windowed"])
@pytest.mark.parametrize("mode", MODES)
def test_weights_and_mixed_spreads(mode, loops):
    rng = np.random.default_rng(7)
    s, y, ptr = _data(7, spread=1.0)
    # huge gaps between tight clusters: windows and exp blocks both cut
    s = s + 1e3 * rng.integers(0, 4, s.shape[0]) / 10.0
    w = rng.uniform(0.0, 3.0, s.shape[0])
    with _loops(loops) as blocks:
        for obj in _objectives(mode):
            _compare(obj, s, y, ptr, mode, w=w)
    _short_blocks_were(blocks, loops)


def test_one_huge_query():
    rng = np.random.default_rng(3)
    n = 20_000
    ptr = np.array([0, n], dtype=np.int64)
    y = (rng.random(n) < 0.4) * rng.integers(1, 5, n).astype(float)
    # wide enough that windows are partial, close enough that thousands of pairs are live
    s = rng.normal(size=n) * 0.5
    _compare(ApproxNDCG(hessian="mixed"), s, y, ptr, "mixed")
    y_ap = np.zeros(n)
    y_ap[rng.choice(n, 15, replace=False)] = 1.0
    _compare(ApproxAP(hessian="mixed"), s, y_ap, ptr, "mixed")
    _compare(ApproxAP(hessian="bound_sum"), s, y_ap, ptr, "bound_sum")


@pytest.mark.parametrize("mode", ["mixed", "bound", "bound_sum"])
def test_long_query_across_tiles_and_exp_blocks(mode):
    # alpha * (score range) = 400 > L: two exp blocks, with windows (T / alpha = 3.7 score
    # units, ~740 documents) that straddle the block boundary and the column tiles.
    rng = np.random.default_rng(17)
    n = 8_000
    assert n > K._PAR_MIN and n > 2 * K._TILE
    ptr = np.array([0, n], dtype=np.int64)
    s = rng.uniform(0.0, 40.0, n)
    y = (rng.random(n) < 0.3) * rng.integers(1, 5, n).astype(float)
    if mode in ApproxNDCG._hessians:
        _compare(ApproxNDCG(hessian=mode), s, y, ptr, mode)
        _compare(ApproxNDCG(hessian=mode), s, y, ptr, mode, par_min=n + 1)  # one thread
    # ApproxAP's exact reference diagonal costs O(n R^2): keep R near 100
    r = (rng.random(n) < 0.0125).astype(float)
    _compare(ApproxAP(hessian=mode), s, r, ptr, mode)


def test_order_persists_between_calls():
    # the windowed loops sort each query and keep the order between calls (the direct loops
    # do not sort)
    s, y, ptr = _data(11, nq=20, max_n=200, spread=2.0)
    obj = ApproxNDCG()
    prep = obj._prepare(y, ptr, cache=False)
    order = prep.work["order"]
    rng = np.random.default_rng(0)
    for step in range(4):
        # small moves (insertion sort path) then a shuffle (fallback path)
        s = s + (0.01 if step < 2 else 1.0) * rng.normal(size=s.shape[0])
        g0, h0, _, _ = _ref(obj, s, y, ptr, "mixed", np.empty(0))
        g1, h1 = _fast(obj, s, y, ptr, "mixed", np.empty(0), order=order, small_n=0)
        np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-9 * np.abs(g0).max())
        np.testing.assert_allclose(h1, h0, rtol=0, atol=1e-9 * np.abs(h0).max())
        sorted_queries = 0
        for q in range(len(ptr) - 1):
            o = order[ptr[q]:ptr[q + 1]]
            if o.size < 2 or o[0] < 0:  # queries never sorted (one document, or Z = 0)
                continue
            assert sorted(o.tolist()) == list(range(o.size))
            sorted_queries += 1
        assert sorted_queries > 10


@pytest.mark.parametrize("loops", ["direct", "windowed"])
@pytest.mark.parametrize("spread", [0.0, 1.0, 1e5])
def test_values_and_positions(spread, loops):
    s, y, ptr = _data(13, spread=spread, ties=True)
    n = s.shape[0]
    p0, p1 = np.empty(n), np.empty(n)
    R.ref_positions(s, ptr, 10.0, p0)
    with _loops(loops) as blocks:
        K.smoothed_positions(s, ptr, 10.0, p1)
        np.testing.assert_allclose(p1, p0, rtol=1e-12, atol=0)
        for obj in [ApproxNDCG(), ApproxNDCG(k=3), ApproxAP()]:
            v0 = obj._reference_value(s, y, ptr)
            np.testing.assert_allclose(obj.value(s, y, ptr), v0, rtol=1e-10, atol=1e-14)
    _short_blocks_were(blocks, loops)


@pytest.mark.parametrize("loops", ["direct", "windowed"])
@pytest.mark.parametrize("mode", ["mixed", "bound", "mixed_sum", "bound_sum"])
def test_all_tiers_in_one_call(mode, loops):
    # short queries (the direct or the windowed loops), two of the middle tier (grid where
    # cheaper, one thread) and one above par_min (rows split), with weights, in one call
    rng = np.random.default_rng(23)
    sizes = np.array([1, 2, 40, 300, 700, 1500, K._PAR_MIN + 500])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    s = rng.normal(size=n)
    y = (rng.random(n) < 0.3) * rng.integers(1, 5, n).astype(float)
    w = rng.uniform(0.5, 2.0, n)
    r = (rng.random(n) < 0.01).astype(float)  # ApproxAP's exact reference costs O(n R^2)
    r[ptr[2]] = 1.0
    # a mode the measure lacks: the other's with the same blocks (of the exact sums or not)
    ap_mode = mode if mode in ApproxAP._hessians else "mixed"
    ndcg_mode = mode if mode in ApproxNDCG._hessians else "bound"
    with _loops(loops) as blocks:
        _compare(ApproxNDCG(hessian=ndcg_mode), s, y, ptr, ndcg_mode, w=w)
        _compare(ApproxAP(hessian=ap_mode), s, r, ptr, ap_mode, w=w)
    _short_blocks_were(blocks, loops)
    variant = "exact" if need_exact_parts(HESSIANS[mode]) else "bound"
    assert {f"_long_block_{variant}", f"_long_block_ap_{variant}"} <= blocks
    if numba.get_num_threads() > 1:
        assert {f"_split_block_{variant}", f"_split_block_ap_{variant}"} <= blocks


def _tier_on_and_off_agree(obj, s, y, ptr, w, attr, on, prefix):
    """The gradient and Hessian with a short tier on (``obj.<attr> = on``: its blocks,
    ``prefix``, run) and off (0: they do not) agree query by query to 1e-12 of the query's
    largest value."""
    out = []
    for value in (on, 0):
        setattr(obj, attr, value)
        prep = obj._prepare(y, ptr, cache=False)
        with _blocks_run() as blocks:
            out.append(obj._grad_hess(s, prep, doc_weights(w, prep.group_ptr), None))
        assert blocks and all(b.startswith(prefix) == (value > 0) for b in blocks), blocks
    for q in range(len(ptr) - 1):
        a, b = ptr[q], ptr[q + 1]
        for x, z in zip(out[0], out[1]):
            scale = np.abs(z[a:b]).max(initial=0.0)
            np.testing.assert_allclose(x[a:b], z[a:b], rtol=0, atol=1e-12 * scale,
                                       err_msg=f"{obj!r}, query {q}")


def _positions_and_values_match_reference(s, y, ptr, block, ap=None):
    """The smoothed positions (by the compiled ``block``) and the values of ApproxNDCG and
    ApproxAP agree with the reference loops; ``ap``: ApproxAP's own ``(s, y, ptr)``, where its
    queries differ."""
    p0, p1 = np.empty(s.shape[0]), np.empty(s.shape[0])
    R.ref_positions(s, ptr, 10.0, p0)
    with _blocks_run() as blocks:
        K.smoothed_positions(s, ptr, 10.0, p1)
    assert blocks == {block}
    np.testing.assert_allclose(p1, p0, rtol=1e-12, atol=0)
    for obj in [ApproxNDCG(), ApproxAP(), ApproxAP(beta=50.0)]:
        s1, y1, q1 = ap if ap is not None and isinstance(obj, ApproxAP) else (s, y, ptr)
        np.testing.assert_allclose(obj.value(s1, y1, q1), obj._reference_value(s1, y1, q1),
                                   rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("spread", [0.0, 1.0, 10.0, 300.0, 1e4])
def test_direct_loops_of_short_queries(spread):
    # data whose short queries all have fewer than SMALL_N documents takes the direct loops
    # (_small): against the reference loops (every Hessian mode, truncation, MRR, RBP, ApproxAP,
    # weights, ties; spreads beyond the E-trick's from 300), and equal to the windowed loops
    # (the tier off: _small_n = 0) up to rounding and the window's skipped pairs (which only
    # matter where most pairs are saturated, so not compared there)
    from approx_gbdt.measures import ApproxMRR, ApproxRBP

    rng = np.random.default_rng(int(spread) + 41)
    # (all below _WIDE_N documents: the direct loops at every spread, _mostly_wide)
    sizes = np.concatenate([[1, 2, 3, K._WIDE_N - 1], rng.integers(2, K._WIDE_N, 40)])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    s = np.round(rng.normal(size=n) * spread, 1) / 10.0  # ties
    y = rng.integers(0, 4, n).astype(float)
    y[ptr[5]:ptr[6]] = 0.0  # a query with nothing relevant
    w = rng.uniform(0.5, 2.0, n)
    objs = [ApproxNDCG(hessian=m) for m in MODES if m in ApproxNDCG._hessians] + [
        ApproxNDCG(k=3), ApproxMRR(), ApproxRBP(), ApproxAP(), ApproxAP(hessian="constant"),
        ApproxAP(hessian="bound_sum"), ApproxAP(beta=50.0, normalize=False),
    ]
    for obj in objs:
        with _blocks_run() as blocks:
            _compare(obj, s, y, ptr, obj.hessian, w=w)
        exact = K.need_exact_parts(obj._mode(None))
        assert blocks == {"_small_block_ap" if isinstance(obj, ApproxAP) else
                          f"_small_block_{'exact' if exact else 'bound'}"}
        if spread > 100.0:
            continue
        _tier_on_and_off_agree(obj, s, y, ptr, w, "_small_n", K.SMALL_N, "_small_block")
    # positions and values by the direct loops, against the reference loops
    _positions_and_values_match_reference(s, y, ptr, "_small_block_exact")


def test_direct_loops_of_wide_short_queries():
    # the direct loops' one exponential per pair: short queries whose alpha times score range
    # and, for ApproxAP with beta 50, beta times the relevant documents' positions' range reach
    # _small._SPREAD; then scores and beta so large that alpha s and beta pos^ overflow
    rng = np.random.default_rng(5)
    sizes = np.array([30, 17, 2])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    s = np.concatenate([np.arange(30) * 10.0, rng.normal(size=17) * 100.0, [0.0, 1.0]])
    y = (rng.random(n) < 0.5) * rng.integers(1, 4, n).astype(float)
    y[[0, 29, 30]] = 2.0
    pos = np.empty(n)
    K.smoothed_positions(s, ptr, 10.0, pos)
    rel = y[:30] > 0
    assert 10.0 * np.ptp(s[:30]) >= _SPREAD
    assert 50.0 * np.ptp(pos[:30][rel]) >= _SPREAD
    # (queries this short take the lane loops, _lanes, unless they are off: _lanes_n = 0;
    # the values always take the default tiers; ApproxAP's lane loops take only queries of
    # fewer than LANES_N_AP documents)
    for lanes_n, tier in [(0, "_small_block"), (K.LANES_N, "_lanes_block")]:
        for obj in [ApproxNDCG(), ApproxNDCG(hessian="exact"), ApproxAP(beta=50.0)]:
            obj._lanes_n = lanes_n
            with _blocks_run() as blocks:
                _compare(obj, s, y, ptr, obj.hessian)
            expect = "_small_block" if isinstance(obj, ApproxAP) else tier
            assert blocks and all(b.startswith(expect) for b in blocks), blocks
    for obj in [ApproxNDCG(), ApproxAP(beta=50.0)]:
        with _blocks_run() as blocks:
            value = obj.value(s, y, ptr)
        expect = "_small_block" if isinstance(obj, ApproxAP) else "_lanes_block"
        assert blocks and all(b.startswith(expect) for b in blocks), blocks
        np.testing.assert_allclose(value, obj._reference_value(s, y, ptr), rtol=1e-10,
                                   atol=1e-14)
    ptr3 = np.array([0, 3])
    for obj, s3, y3 in [(ApproxAP(beta=1e308, alpha=100.0), [3.0, 2.0, 1.0], [1.0, 1.0, 1.0]),
                        (ApproxNDCG(), [1e308, -1e308, 0.0], [1.0, 0.0, 2.0])]:
        with _blocks_run() as blocks:
            value = obj.value(s3, y3, ptr3)
        assert blocks and all(b.startswith("_lanes_block") for b in blocks), blocks
        np.testing.assert_allclose(value, obj._reference_value(s3, y3, ptr3), rtol=1e-12)
        out = []
        for lanes_n in (0, K.LANES_N):  # the gradients where alpha s or beta pos^ overflow
            obj._lanes_n = lanes_n
            with _blocks_run() as blocks, warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # saturated: no gradient
                out.append(np.concatenate(obj.grad_hess(s3, y3, ptr3)))
            assert blocks == {f"{'_lanes' if lanes_n else '_small'}_block_"
                              f"{'ap' if isinstance(obj, ApproxAP) else 'exact'}"}
        assert np.all(np.isfinite(out[1]))
        np.testing.assert_allclose(out[1], out[0], rtol=1e-12, atol=0)


@pytest.mark.parametrize("spread", [0.0, 1.0, 10.0, 300.0, 1e4])
def test_lane_loops_of_the_shortest_queries(spread):
    # data whose short queries all have fewer than LANES_N documents (LANES_N_AP for ApproxAP)
    # takes the lane loops (_lanes): more queries of a length than a block holds (full and
    # partial blocks), lengths 1 to LANES_N - 1 in random order, ties, a query with nothing
    # relevant, weights; against the reference loops (every Hessian mode, truncation, MRR,
    # RBP, ApproxAP) and equal to the direct loops (_lanes_n = 0) up to rounding; spreads
    # beyond the E-trick's (one exponential a pair) from 300, and at 10 blocks of narrow and
    # wide lanes (the N(0, 1) scores times 10 of every fourth query)
    from approx_gbdt._lanes import LANES, LANES_N_AP
    from approx_gbdt.measures import ApproxMRR, ApproxRBP

    rng = np.random.default_rng(int(spread) + 43)
    sizes = np.concatenate([np.full(LANES + 5, 10), np.full(3, 2), np.arange(1, K.LANES_N),
                            rng.integers(1, LANES_N_AP, 150)])
    rng.shuffle(sizes)
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    s = np.round(rng.normal(size=n) * spread, 1) / 10.0  # ties
    if spread == 10.0:
        s[np.repeat(np.arange(len(sizes)) % 4 == 0, sizes)] *= 10.0
    y = rng.integers(0, 4, n).astype(float)
    q0 = int(np.flatnonzero(sizes == 10)[0])
    y[ptr[q0]:ptr[q0 + 1]] = 0.0  # a query with nothing relevant
    w = rng.uniform(0.5, 2.0, n)
    ap = sizes < LANES_N_AP  # ApproxAP's lane loops take queries of fewer documents
    ap_ptr = np.concatenate([[0], np.cumsum(sizes[ap])]).astype(np.int64)
    keep = np.repeat(ap, sizes)
    objs = [ApproxNDCG(hessian=m) for m in MODES if m in ApproxNDCG._hessians] + [
        ApproxNDCG(k=3), ApproxMRR(), ApproxRBP(), ApproxAP(), ApproxAP(hessian="constant"),
        ApproxAP(hessian="bound_sum"), ApproxAP(beta=50.0, normalize=False),
    ]
    for obj in objs:
        coupled = isinstance(obj, ApproxAP)
        s1, y1, w1, p1 = (s[keep], y[keep], w[keep], ap_ptr) if coupled else (s, y, w, ptr)
        with _blocks_run() as blocks:
            _compare(obj, s1, y1, p1, obj.hessian, w=w1)
        exact = K.need_exact_parts(obj._mode(None))
        assert blocks == {"_lanes_block_ap" if coupled else
                          f"_lanes_block_{'exact' if exact else 'bound'}"}
        _tier_on_and_off_agree(obj, s1, y1, p1, w1, "_lanes_n", K.LANES_N, "_lanes_block")
    # positions and values by the lane loops, against the reference loops
    _positions_and_values_match_reference(s, y, ptr, "_lanes_block_exact",
                                          ap=(s[keep], y[keep], ap_ptr))


def test_lane_loops_do_not_depend_on_the_other_queries():
    # a query's results by the lane loops are the same bits whichever queries share its block
    # (reversed query order, a block of its own, a widely spread query of its length in its
    # block) and whatever the threads (about 20,000 documents: several chunks on two threads)
    rng = np.random.default_rng(47)
    sizes = rng.integers(2, 12, 3000)
    q = 17
    sizes[q + 1] = sizes[q]
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    assert ptr[-1] > 4 * K._CHUNK_DOCS
    s = rng.normal(size=int(ptr[-1]))
    s[ptr[q + 1]:ptr[q + 2]] *= 1000.0  # alpha times its range beyond _SPREAD
    y = rng.integers(0, 3, s.shape[0]).astype(float)
    rev = np.concatenate([np.arange(ptr[i], ptr[i + 1]) for i in range(len(sizes))[::-1]])
    rev_ptr = np.concatenate([[0], np.cumsum(sizes[::-1])]).astype(np.int64)
    for obj in [ApproxNDCG(), ApproxAP()]:
        with _blocks_run() as blocks:
            g, h = obj.grad_hess(s, y, ptr)
        assert blocks == {"_lanes_block_ap" if isinstance(obj, ApproxAP) else
                          "_lanes_block_exact"}
        g_rev, h_rev = obj.grad_hess(s[rev], y[rev], rev_ptr)
        np.testing.assert_array_equal(g_rev, g[rev])
        np.testing.assert_array_equal(h_rev, h[rev])
        for i in (q, q + 1):  # alone
            one = np.arange(ptr[i], ptr[i + 1])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the wide one: saturated
                g1, h1 = obj.grad_hess(s[one], y[one], [0, sizes[i]])
            np.testing.assert_array_equal(g1, g[one])
            np.testing.assert_array_equal(h1, h[one])
        prev = numba.get_num_threads()
        for nt in {1, numba.config.NUMBA_NUM_THREADS}:
            numba.set_num_threads(nt)
            try:
                g2, h2 = obj.grad_hess(s, y, ptr)
            finally:
                numba.set_num_threads(prev)
            np.testing.assert_array_equal(g2, g)
            np.testing.assert_array_equal(h2, h)


def test_direct_loops_with_the_long_tiers_in_one_call():
    # short queries all below SMALL_N (direct loops) beside queries of the grid's tier and of
    # the row split, with weights, in one call
    rng = np.random.default_rng(37)
    sizes = np.array([1, 2, K.SMALL_N - 1, 9, 700, K._PAR_MIN + 100])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    s = rng.normal(size=n)
    y = (rng.random(n) < 0.3) * rng.integers(1, 5, n).astype(float)
    w = rng.uniform(0.5, 2.0, n)
    with _blocks_run() as blocks:
        _compare(ApproxNDCG(), s, y, ptr, "mixed", w=w)
    assert {"_small_block_exact", "_long_block_exact"} <= blocks
    r = (rng.random(n) < 0.01).astype(float)  # ApproxAP's exact reference costs O(n R^2)
    r[ptr[2]:ptr[4]] = rng.random(sizes[2] + sizes[3]) < 0.5
    with _blocks_run() as blocks:
        _compare(ApproxAP(), s, r, ptr, "bound", w=w)
    assert {"_small_block_ap", "_long_block_ap_bound"} <= blocks


_SPLIT_BLOCKS = ("_split_block_exact", "_split_block_bound", "_split_block_ap_exact",
                 "_split_block_ap_bound")  # the row split's blocks, which _schedule calls itself


@contextlib.contextmanager
def _blocks_run():
    """The names of the compiled blocks that ``_kernels`` runs inside the ``with`` block."""
    names = set()
    run = K._on_threads
    split = {name: getattr(K, name) for name in _SPLIT_BLOCKS}

    def recording(block, *args):
        names.add(block.py_func.__name__)
        return run(block, *args)

    def split_recording(name):
        def call(*args):
            names.add(name)
            return split[name](*args)

        return call

    K._on_threads = recording
    for name in split:
        setattr(K, name, split_recording(name))
    try:
        yield names
    finally:
        K._on_threads = run
        for name, block in split.items():
            setattr(K, name, block)


@contextlib.contextmanager
def _loops(kind):
    """Every short query by the direct loops (``"direct"``: no query counts as wide) or by the
    windowed ones (``"windowed"``: every short query counts as wide, ``_kernels._mostly_wide``)
    inside the ``with`` block, which receives the names of the blocks run."""
    saved = K._WIDE_N, K._WIDE_SPAN
    K._WIDE_N, K._WIDE_SPAN = (K._WIDE_N, np.inf) if kind == "direct" else (0, -1.0)
    try:
        with _blocks_run() as names:
            yield names
    finally:
        K._WIDE_N, K._WIDE_SPAN = saved


def _short_blocks_were(names, kind):
    """The short tier's blocks in ``names`` are those of ``kind`` (ApproxAP's Hessians that
    need the exact diagonal's sums always take the windowed loops)."""
    short = {b for b in names if b.startswith(("_small_block", "_short_block"))}
    if kind == "windowed":
        assert short and all(b.startswith("_short_block") for b in short), names
    else:
        assert any(b.startswith("_small_block") for b in short), names
        assert short <= {"_small_block_exact", "_small_block_bound", "_small_block_ap",
                         "_short_block_ap_exact"}, names


@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 1000])
def test_argsort_desc_is_a_stable_argsort(n):
    from approx_gbdt._pairs import argsort_desc

    sort = numba.njit(lambda s, out: argsort_desc(s, out))  # callable from kernels only
    rng = np.random.default_rng(n)
    for s in (rng.normal(size=n), rng.integers(0, 3, n).astype(float), np.zeros(n)):
        out = np.empty(n, dtype=np.int32)
        sort(s, out)
        np.testing.assert_array_equal(out, np.argsort(-s, kind="stable"))


@pytest.mark.parametrize("beta", [0.3, 2.0, 50.0])
@pytest.mark.parametrize("mode", ["bound", "exact", "bound_sum"])
def test_ap_far_relevant_pairs_by_the_series(beta, mode):
    # ApproxAP's second-level sums: the pairs of relevant documents within _NEAR of each
    # other in beta-scaled positions by the windowed loops, the others by the series of
    # _measure_terms._ap_far; queries of the grid's tier (long) and of the windowed short tier
    # (widely spread scores) with both kinds of pairs, against the reference
    from approx_gbdt._measure_terms import _NEAR

    rng = np.random.default_rng(int(10 * beta))
    sizes = np.array([400, 1200, 300])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    # the short lists widely spread (the windowed loops, not the direct ones)
    s = np.concatenate([30.0 * rng.normal(size=400), rng.normal(size=1200),
                        30.0 * rng.normal(size=300)])
    y = (rng.random(n) < 0.2).astype(float)
    obj = ApproxAP(hessian=mode, beta=beta)
    pos = smoothed_positions(s, ptr, alpha=obj.alpha)
    near = far = 0
    for q in range(len(sizes)):
        a, b = ptr[q], ptr[q + 1]
        x = -beta * np.sort(pos[a:b][y[a:b] > 0])
        gaps = np.abs(x[:, None] - x[None, :])[np.triu_indices(x.size, 1)]
        near += int(np.sum(gaps <= _NEAR))
        far += int(np.sum(gaps > _NEAR))
    assert near > 0 and far > 1000, (near, far)
    _compare(obj, s, y, ptr, mode)


@pytest.mark.parametrize("n", [1, 2, 33, 64, 65, 129, 1000, 3000])
@pytest.mark.parametrize("shift", [0.001, 0.1, 1.0, 10.0])
def test_resort_from_the_last_order_is_a_stable_sort(n, shift):
    # the kernels sort each query from the order of the last call: insertion sort while
    # few documents moved, then a radix sort; ties keep the last order
    # (``_sort_desc``), or go in index order (``sort_desc_by_index``)
    from approx_gbdt._pairs import _sort_desc, sort_desc_by_index

    keep = numba.njit(lambda s, order: _sort_desc(s, order))
    by_index = numba.njit(lambda s, order: sort_desc_by_index(s, order))
    rng = np.random.default_rng([n, int(1000 * shift)])
    for s in (rng.normal(size=n), rng.integers(0, 4, n).astype(float)):
        last = np.argsort(-(s + rng.normal(scale=shift, size=n)), kind="stable")
        order = last.astype(np.int32)
        keep(s, order)
        np.testing.assert_array_equal(order, last[np.argsort(-s[last], kind="stable")])
        order = last.astype(np.int32)
        by_index(s, order)
        np.testing.assert_array_equal(order, np.argsort(-s, kind="stable"))


@pytest.mark.parametrize("n", [300, 3000])
@pytest.mark.parametrize("values", ["special", "one byte 6", "one byte 0", "two bytes"])
def test_resort_orders_signed_zeros_extremes_and_ties(n, values):
    # a random order makes the insertion sort give up, so the radix sort takes it: it reads
    # the bits of the scores (-0.0 ties with 0.0; subnormals, the largest floats and both
    # signs order as comparisons do) and skips the bytes that every key shares, so that an
    # odd number of passes (one byte differing) leaves the result in its buffer
    from approx_gbdt._pairs import _sort_desc

    keep = numba.njit(lambda s, order: _sort_desc(s, order))
    rng = np.random.default_rng(n)
    special = np.array([0.0, -0.0, 5e-324, -5e-324, 2.2e-308, -2.2e-308, 1e-300, -1e-300,
                        1.0, -1.0, 1.7e308, -1.7e308, 0.5, -0.5, 1.0 + 2.2e-16, -1.0 - 2.2e-16])
    s = {"special": rng.choice(special, size=n),
         "one byte 6": rng.choice([1.0, 1.5], size=n),
         "one byte 0": 1.0 + rng.integers(0, 256, n) * 2.0**-52,
         "two bytes": 1.0 + rng.integers(0, 65536, n) * 2.0**-52}[values]
    last = rng.permutation(n)
    order = last.astype(np.int32)
    keep(s, order)
    key = s + 0.0  # numpy's comparisons: -0.0 == 0.0
    np.testing.assert_array_equal(order, last[np.argsort(-key[last], kind="stable")])


@pytest.mark.parametrize("n", [1, 2, 33, 200, 511])
@pytest.mark.parametrize("shift", [0.001, 10.0])
def test_short_queries_resort_from_the_last_order(n, shift):
    # queries of the short tier: insertion sort from the last order (ties keep it) while few
    # documents moved, else a stable sort afresh (ties in index order)
    from approx_gbdt._pairs import _sort_desc_short

    sort = numba.njit(lambda s, order: _sort_desc_short(s, order))
    rng = np.random.default_rng([n, int(1000 * shift)])
    for s in (rng.normal(size=n), rng.integers(0, 4, n).astype(float)):
        last = np.argsort(-(s + rng.normal(scale=shift, size=n)), kind="stable")
        order = last.astype(np.int32)
        sort(s, order)
        moves = np.sum(np.triu(s[last][None, :] > s[last][:, None]))  # inversions
        if moves <= 8 * n + 64:
            expect = last[np.argsort(-s[last], kind="stable")]
        else:
            expect = np.argsort(-s, kind="stable")
        np.testing.assert_array_equal(order, expect)


def _grad_in_child(args):
    obj, s, y, ptr = args
    return obj.grad_hess(s, y, ptr)[0]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one thread: no pool")
def test_forked_child_computes_with_its_own_threads():
    # a child forked after the parent used the kernels' thread pool gets a pool of its own
    # (the parent's worker threads do not exist in it): same gradients, no hang
    import multiprocessing

    s, y, ptr = _data(3, nq=40)
    obj = ApproxNDCG()
    g0 = obj.grad_hess(s, y, ptr, hessian=None)[0]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        out = pool.map_async(_grad_in_child, [(obj, s, y, ptr)] * 2).get(timeout=300)
    for g in out:
        np.testing.assert_array_equal(g, g0)


def _split(sizes, nt, lo=K._PAR_MIN):
    """The sizes of the queries whose rows ``split_at`` splits."""
    sizes = np.array(sizes)
    return sorted(sizes[sizes >= K.split_at(sizes, lo, nt)].tolist())


def test_split_only_queries_above_a_threads_share():
    assert _split([10_000] * 10, 2) == []  # ten long queries: one per thread
    assert _split([50_000, 50_000], 2) == []  # exactly a share each
    assert _split([100_000], 2) == [100_000]
    assert _split([100_000], 1) == []  # one thread: no split
    assert _split([100_000, 40_000], 2) == [40_000, 100_000]  # the one left is split too
    assert _split([100_000, 30_000, 30_000, 20], 2) == [100_000]
    assert _split([100_000, 30_000, 30_000], 4) == [30_000, 30_000, 100_000]
    assert _split([100, 200], 2) == []  # nothing long
    assert K.split_at(np.array([10_000] * 10), K._PAR_MIN, 2, share=0.0) <= 10_000


@pytest.mark.parametrize("mode", ["mixed", "bound", "bound_sum"])
def test_long_queries_one_per_thread_equal_reference(mode, monkeypatch):
    # the default share with par_min lowered to 1,000: eight queries above it run one per
    # thread on the pool (8,800 documents: two chunks), grid where cheaper; of three long
    # queries, the one above a thread's share is split, the others run one per thread
    from numba import get_num_threads

    nt = get_num_threads()
    calls = []
    for name in _SPLIT_BLOCKS:
        block = getattr(K, name)

        def spy(*a, block=block):
            calls.append(block)
            return block(*a)

        monkeypatch.setattr(K, name, spy)
    rng = np.random.default_rng(41)
    for sizes, n_split in (([1100] * 8, 0), ([3000, 1100, 1100, 30], 1)):
        assert len(_split(sizes, nt, lo=1000)) == (n_split if nt > 1 else 0)
        ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        n = int(ptr[-1])
        s = rng.normal(size=n) * 0.2
        y = rng.integers(1, 5, n) * (rng.random(n) < 0.05)  # ApproxAP's reference: O(n R^2)
        for obj in _objectives(mode):
            calls.clear()
            _compare(obj, s, y.astype(float), ptr, mode, par_min=1000,
                     split_share=K._SPLIT_SHARE)
            assert len(calls) == (n_split if nt > 1 else 0)


@pytest.mark.parametrize("grid_mode", [0, 1, -1])
def test_tier_boundaries(grid_mode):
    # lengths on both sides of the grid's threshold and of par_min (lowered to 1,100 here),
    # with queries that have nothing relevant in every tier; gradients, values and positions
    from approx_gbdt._grid import _EPS_K, GRID_MIN_N

    par_min = 1100
    rng = np.random.default_rng(29)
    sizes = np.array([1, 2, 5, GRID_MIN_N - 1, GRID_MIN_N, GRID_MIN_N + 1, par_min - 1,
                      par_min, par_min + 1, 30, GRID_MIN_N + 3, par_min + 7])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    s = rng.normal(size=n) * 0.3
    y = (rng.random(n) < 0.05) * rng.integers(1, 5, n).astype(float)
    for q in (9, 10, 11):  # nothing relevant: 30 documents, middle tier, longest tier
        y[ptr[q]:ptr[q + 1]] = 0.0
    for obj in (ApproxNDCG(), ApproxAP()):
        obj._grid_mode = grid_mode
        _compare(obj, s, y, ptr, "mixed", par_min=par_min)
        np.testing.assert_allclose(obj.value(s, y, ptr), obj._reference_value(s, y, ptr),
                                   rtol=1e-9, atol=1e-14)
    p0, p1 = np.empty(n), np.empty(n)
    R.ref_positions(s, ptr, 10.0, p0)
    K.smoothed_positions(s, ptr, 10.0, p1)
    # queries below the grid's threshold: the exact direct or windowed loops; the others may
    # take the grid, within its bound (_grid): eps_sig times the number of near documents
    short = np.repeat(sizes < GRID_MIN_N, sizes)
    np.testing.assert_allclose(p1[short], p0[short], rtol=1e-9, atol=0)
    np.testing.assert_allclose(p1, p0, rtol=0, atol=_EPS_K[0] * sizes.max())


def test_concurrent_callers_get_the_single_threaded_result():
    # several Python threads calling at once, each with its own thread count, on short and
    # long queries: every result equals the one-thread result
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(31)
    sizes = np.concatenate([rng.integers(1, 80, 40), [1500, K._PAR_MIN + 10]])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    s = rng.normal(size=n)
    y = (rng.random(n) < 0.2) * rng.integers(1, 5, n).astype(float)
    objs = [ApproxNDCG(), ApproxAP()]
    preps = [obj._prepare(y, ptr, cache=False) for obj in objs]
    ones = [obj._grad_hess(s, prep, np.empty(0), None, 1) for obj, prep in zip(objs, preps)]

    def call(i):
        obj = objs[i % 2]
        prep = obj._prepare(y, ptr, cache=False)  # its own sort order
        return i % 2, obj._grad_hess(s, prep, np.empty(0), None, 1 + i % 4)

    with ThreadPoolExecutor(6) as pool:
        for which, (g, h) in pool.map(call, range(24)):
            np.testing.assert_allclose(g, ones[which][0], rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(h, ones[which][1], rtol=1e-12, atol=1e-15)


def _in_fresh_process(code, cache_dir):
    """The JSON that ``code`` prints last, run by a new Python process with the package under
    test and an empty Numba cache in ``cache_dir`` (what a new user's first calls compile)."""
    root = Path(approx_gbdt.__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"}
    env.update(NUMBA_CACHE_DIR=str(cache_dir), PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=root)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("measure, compiled", [
    ("ApproxNDCG", [[1, 0, 0, 0, 0, 0], [1, 0, 0, 1, 0, 0]]),  # "mixed": no bound-only loop
    ("ApproxAP", [[0, 1, 0, 0, 0, 0], [0, 1, 0, 0, 0, 1]]),  # "bound": no exact sums
])
def test_first_call_compiles_only_the_pair_loops_of_its_hessian_mode(tmp_path, measure,
                                                                      compiled):
    # a fresh process with an empty cache, calling the measure's default objective on data of
    # queries of 10 and of 200 documents with the direct loops off (the windowed loops), then
    # with the direct loops
    code = textwrap.dedent(f"""
        import json
        import numpy as np
        import approx_gbdt
        from approx_gbdt import _kernels, _measure_terms, _pairs
        rng = np.random.default_rng(0)
        ptr = np.cumsum([0] + [10] * 4 + [200] * 3)
        y = rng.integers(0, 3, ptr[-1]).astype(float)
        obj = approx_gbdt.{measure}()
        counts = []
        for small_n in (0, _kernels.SMALL_N):
            obj._small_n = small_n
            obj.grad_hess(rng.normal(size=ptr[-1]), y, ptr)
            counts.append([len(f.signatures) for f in (
                _pairs._chain_rows_exact, _pairs._chain_rows_bound, _measure_terms.ap_offdiag,
                _kernels._small_block_exact, _kernels._small_block_bound,
                _kernels._small_block_ap)])
        print(json.dumps(counts))
    """)
    assert _in_fresh_process(code, tmp_path) == compiled


def test_grid_sums_compile_once_for_every_hessian_mode(tmp_path):
    # a fresh process with an empty cache: ApproxNDCG ("mixed", the exact diagonal's sums) and
    # ApproxAP ("bound", without them, and with its |v| sums) on queries of the grid's tier
    # (narrow scores) use one compiled version of each grid entry point
    code = textwrap.dedent("""
        import json
        import numpy as np
        import approx_gbdt
        from approx_gbdt import _grid
        rng = np.random.default_rng(1)
        ptr = np.array([0, 1000, 2200])
        y = rng.integers(0, 3, ptr[-1]).astype(float)
        s = rng.normal(size=ptr[-1]) * 0.05
        approx_gbdt.approx_ndcg_obj.grad_hess(s, y, ptr)
        approx_gbdt.approx_ap_obj.grad_hess(s, y, ptr)
        print(json.dumps([len(f.signatures) for f in (_grid.grid_positions_seq,
                                                       _grid.grid_chain_seq)]))
    """)
    assert _in_fresh_process(code, tmp_path) == [1, 1]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one thread: no row split")
def test_long_queries_compile_the_row_split_only_when_they_need_it(tmp_path):
    # a fresh process with an empty cache, both measures' default objectives on queries of the
    # grid's tier (one query per thread): the blocks of their Hessian modes only (ApproxAP's
    # "bound" compiles no off-diagonal part of the exact diagonal), and not the row split's
    # block and parallel loops; then ApproxNDCG on a query whose rows are split: the split
    # block and parallel chain loop of its mode only
    code = textwrap.dedent("""
        import json
        import numpy as np
        import approx_gbdt
        from approx_gbdt import _grid, _kernels, _measure_terms, _pairs
        rng = np.random.default_rng(0)
        ptr = np.array([0, 600, 1300])
        y = rng.integers(0, 3, ptr[-1]).astype(float)
        s = rng.normal(size=ptr[-1])
        approx_gbdt.approx_ndcg_obj.grad_hess(s, y, ptr)
        approx_gbdt.approx_ap_obj.grad_hess(s, y, ptr)
        fs = (_kernels._long_block_exact, _kernels._long_block_ap_bound,
              _kernels._long_block_bound, _kernels._long_block_ap_exact,
              _kernels._split_block_exact, _kernels._split_block_ap_bound,
              _grid.grid_positions_par, _grid.grid_chain_par, _pairs._par_positions,
              _pairs._par_chain_exact, _pairs._par_chain_bound, _pairs._par_bound,
              _measure_terms.ap_offdiag)
        below = [len(f.signatures) for f in fs]
        ptr = np.array([0, 10_000])
        approx_gbdt.approx_ndcg_obj.grad_hess(rng.normal(size=10_000),
                                              rng.integers(0, 3, 10_000).astype(float), ptr)
        fs = (_kernels._split_block_exact, _kernels._split_block_bound,
              _pairs._par_chain_exact, _pairs._par_chain_bound)
        print(json.dumps([below, [len(f.signatures) for f in fs]]))
    """)
    assert _in_fresh_process(code, tmp_path) == [[1, 1] + [0] * 11, [1, 0, 1, 0]]


@pytest.mark.parametrize("span", [60.0, 400.0])
def test_wide_queries_of_a_few_hundred_documents_take_the_windowed_loops(span):
    # two queries of 300 documents whose alpha times score range is `span`, beside shorter
    # ones: narrow, the direct loops; wide (most pairs saturated), the windowed ones, which skip
    # the saturated pairs; both against the reference
    rng = np.random.default_rng(43)
    sizes = np.array([10, 300, 300, 25])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    s = rng.uniform(0.0, span / 10.0, n)
    y = (rng.random(n) < 0.3) * rng.integers(1, 5, n).astype(float)
    short = sizes < K.GRID_MIN_N
    assert K._mostly_wide(s, ptr, sizes, short, 10.0) == (span > K._WIDE_SPAN)
    for obj, mode in [(ApproxNDCG(), "mixed"), (ApproxAP(), "bound"),
                      (ApproxAP(hessian="bound_sum"), "bound_sum")]:
        with _blocks_run() as blocks:
            _compare(obj, s, y, ptr, mode)
        _short_blocks_were(blocks, "direct" if span < K._WIDE_SPAN else "windowed")
    # a wide query whose pairs are under half of the short queries' leaves the direct loops
    s2 = s.copy()
    s2[ptr[2]:ptr[3]] = 0.0
    assert not K._mostly_wide(s2, ptr, sizes, short, 10.0)
    # trailing and inner empty queries
    ptr3 = np.array([0, 0, 300, 300, 310, 310])
    sizes3 = np.diff(ptr3)
    assert K._mostly_wide(s[10:320], ptr3, sizes3, sizes3 < 512, 10.0) == (span > K._WIDE_SPAN)
