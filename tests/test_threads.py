"""The kernels' thread count follows the host library's setting."""

import contextlib

import lightgbm as lgb
import numba
import numpy as np
import pytest
from numba import get_num_threads

from approx_gbdt import approx_ndcg_obj
from approx_gbdt.hosts import _xgboost_threads, host_threads
from approx_gbdt.objectives import ApproxNDCG


def test_host_threads_reads_the_aliases():
    assert host_threads({"num_threads": 3}) == 3
    assert host_threads({"nthread": "2"}) == 2
    assert host_threads({"n_jobs": -1}) is None  # the library's default
    assert host_threads({"num_threads": 0}) is None
    assert host_threads({}) is None and host_threads(None) is None


def test_lightgbm_num_threads_reaches_the_objective(monkeypatch):
    seen = []
    obj = ApproxNDCG()
    original = obj._grad_hess

    def spy(*args):
        seen.append(args[-1])
        return original(*args)

    monkeypatch.setattr(obj, "_grad_hess", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = rng.integers(0, 3, 200).astype(float)
    ds = lgb.Dataset(X, y, group=[50] * 4)
    lgb.train({"objective": obj, "num_threads": 1, "verbose": -1}, ds, num_boost_round=2)
    assert seen and all(t == 1 for t in seen)


def test_thread_cap_gives_the_same_result_and_restores_numba():
    rng = np.random.default_rng(1)
    s = rng.normal(size=6000)
    y = rng.integers(0, 5, 6000).astype(float)
    ptr = np.array([0, 100, 5100, 6000])
    before = get_num_threads()
    g0, h0 = approx_ndcg_obj.grad_hess(s, y, ptr)
    prep = approx_ndcg_obj._prepare(y, ptr, cache=False)
    g1, h1 = approx_ndcg_obj._grad_hess(s, prep, np.empty(0), None, 1)
    assert get_num_threads() == before
    np.testing.assert_allclose(g1, g0, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(h1, h0, rtol=1e-12, atol=1e-15)


def test_pair_loop_options_follow_the_thread_cap(monkeypatch):
    """The label-aware / chord pair loop and the NDCG-Loss2++ part run under the host's cap."""
    from approx_gbdt import _kernels

    calls = []
    original = _kernels.set_num_threads
    monkeypatch.setattr(_kernels, "set_num_threads", lambda n: (calls.append(n), original(n)))
    rng = np.random.default_rng(2)
    s = rng.normal(size=300)
    y = rng.integers(0, 5, 300).astype(float)
    ptr = np.array([0, 40, 300])
    obj = ApproxNDCG(pair_force="chord", hessian="bound", lambdaloss=0.5)
    before = get_num_threads()
    g0, h0 = obj.grad_hess(s, y, ptr)
    calls.clear()
    prep = obj._prepare(y, ptr, cache=False)
    g1, h1 = obj._grad_hess(s, prep, np.empty(0), None, 1)
    assert calls == [1, before, 1, before]  # capped and restored, once per kernel
    assert get_num_threads() == before
    np.testing.assert_allclose(g1, g0, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(h1, h0, rtol=1e-12, atol=1e-15)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two Numba threads")
def test_a_thread_cap_only_goes_down():
    """Numba's current count bounds a host's setting: an enclosing cap
    (ApproxXGBRanker(n_jobs=1), numba.set_num_threads) holds inside the kernels' own."""
    from approx_gbdt._kernels import threads_capped

    before = get_num_threads()
    with threads_capped(1):
        with threads_capped(before) as nt:
            assert nt == 1 and get_num_threads() == 1
        with threads_capped(None) as nt:
            assert nt == 1
        assert get_num_threads() == 1
    assert get_num_threads() == before


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two Numba threads")
def test_xgb_ranker_n_jobs_reaches_the_metric(monkeypatch):
    """The exact NDCG@k of ApproxXGBRanker's evaluation runs under the n_jobs cap as well."""
    import approx_gbdt.xgboost_ranker as xr
    from approx_gbdt import ApproxXGBRanker

    seen, make = [], xr.make_xgboost_metric

    def spying(*args, **kwargs):
        metric = make(*args, **kwargs)

        def spy(preds, data):
            seen.append(get_num_threads())
            return metric(preds, data)

        return spy

    monkeypatch.setattr(xr, "make_xgboost_metric", spying)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 3)), rng.integers(0, 3, 200).astype(float)
    before = get_num_threads()
    ApproxXGBRanker(n_estimators=3, n_jobs=1).fit(X, y, group=[50] * 4, eval_set=[(X, y)],
                                                  eval_group=[[50] * 4])
    assert seen == [1, 1, 1] and get_num_threads() == before


def test_xgb_ranker_n_jobs_reaches_the_kernels(monkeypatch):
    """ApproxXGBRanker(n_jobs=1) caps the kernels' Numba threads during fit (a Booster's
    nthread does not reach a custom objective), whatever thread count the host passes them,
    and leaves Numba's count as it was."""
    from approx_gbdt import ApproxXGBRanker, _kernels

    seen = []
    original = _kernels.threads_capped

    @contextlib.contextmanager
    def spy(n_threads):
        with original(2 if n_threads is None else n_threads) as nt:  # a host asking for 2
            seen.append(nt)
            yield nt

    monkeypatch.setattr(_kernels, "threads_capped", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = rng.integers(0, 3, 200).astype(float)
    before = get_num_threads()
    ApproxXGBRanker(objective=ApproxNDCG(), n_estimators=2, n_jobs=1).fit(X, y,
                                                                         group=[50] * 4)
    assert seen == [1, 1] and get_num_threads() == before
    ApproxXGBRanker(objective=ApproxNDCG(), n_estimators=2).fit(X, y, group=[50] * 4)
    # without n_jobs the host's count holds (XGBoost's global nthread, which an earlier
    # xgb.config_context may have left set, else 2 by the spy)
    asked = _xgboost_threads() or 2
    assert seen[2:] == [min(asked, before)] * 2
