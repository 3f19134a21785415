"""The options behind the defaults (docs/why_these_defaults.md): alpha invariance and defaults."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from approx_gbdt import ApproxAP, ApproxNDCG, SoftNDCG, approx_ap_obj, approx_ndcg_obj
from approx_gbdt.datasets import make_ranking_splits
from approx_gbdt.measures import parse_objective


def _queries(seed=0, sizes=(2, 9, 31, 60)):
    rng = np.random.default_rng(seed)
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    s = rng.normal(size=ptr[-1])
    y = rng.integers(0, 3, size=ptr[-1]).astype(np.float64)
    return s, y, ptr


@pytest.mark.parametrize("cls", [ApproxNDCG, ApproxAP])
@pytest.mark.parametrize("hessian", ["exact", "bound", "abs", "mixed", "mixed_sum", "bound_sum"])
@pytest.mark.parametrize("normalize", [False, True])
def test_newton_step_scales_like_one_over_alpha(cls, hessian, normalize):
    """The surrogate depends on alpha * s only: at (c alpha, s / c) the gradient is c times,
    the Hessian c^2 times the one at (alpha, s) (before normalisation, which multiplies both
    by the same per-query factor), so every per-document Newton step g / h is 1 / c times."""
    if hessian not in cls._hessians:
        pytest.skip(f"{cls.__name__} has no hessian={hessian!r}")
    s, y, ptr = _queries()
    c = 4.0
    g1, h1 = cls(alpha=3.0, hessian=hessian, normalize=False).grad_hess(s, y, ptr)
    g2, h2 = cls(alpha=3.0 * c, hessian=hessian, normalize=normalize).grad_hess(s / c, y, ptr)
    if not normalize:
        np.testing.assert_allclose(g2, c * g1, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(h2, c * c * h1, rtol=1e-9, atol=1e-12)
    live = h1 != 0
    np.testing.assert_allclose(g2[live] / h2[live], g1[live] / h1[live] / c, rtol=1e-9)


def test_constant_hessian_is_not_alpha_invariant():
    s, y, ptr = _queries()
    g1, h1 = ApproxNDCG(alpha=3.0, hessian="constant", normalize=False).grad_hess(s, y, ptr)
    g2, h2 = ApproxNDCG(alpha=12.0, hessian="constant", normalize=False).grad_hess(s / 4, y, ptr)
    np.testing.assert_allclose(h2, h1)
    np.testing.assert_allclose(g2, 4 * g1, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("cls", [ApproxNDCG, ApproxAP])
def test_lightgbm_model_is_alpha_invariant(cls):
    """From a zero start, without L2 and per-query normalisation, LightGBM's Newton leaves make
    alpha * f(x) exactly the same function for alpha and 4 alpha (powers of 2: no rounding)."""
    lgb = pytest.importorskip("lightgbm")
    d = make_ranking_splits((40, 5, 10), seed=3, docs_per_query=(10, 30))
    tr, te = d["train"], d["test"]
    preds = []
    for alpha in (2.0, 8.0):
        obj = cls(alpha=alpha, hessian="bound", normalize=False)
        params = {
            "objective": obj, "learning_rate": 0.1, "num_leaves": 7, "verbose": -1,
            "min_sum_hessian_in_leaf": 0.0, "num_threads": 1, "deterministic": True,
        }
        ds = lgb.Dataset(tr.X, tr.y, group=np.diff(tr.group_ptr))
        bst = lgb.train(params, ds, num_boost_round=8)
        preds.append(alpha * bst.predict(te.X))
    assert np.std(preds[0]) > 0.1
    np.testing.assert_allclose(preds[1], preds[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: ApproxAP(hessian_scale=1.0),
    lambda: ApproxAP(alpha=1 / 3, beta=0.1, threshold=2.5, graded=True),
    lambda: ApproxNDCG(hessian="constant", hessian_constant=2.0),
    lambda: ApproxNDCG(k=5, beta=1 / 7, hessian_floor=0.05, hessian_scale=0.5, normalize=False),
    lambda: ApproxNDCG(beta=5.0),  # unused without k, but an option all the same
    lambda: ApproxNDCG(noise=0.0, random_state=3),
    lambda: parse_objective("approx_rbp", persistence=0.9),
    lambda: SoftNDCG(sigma=1 / 3, hessian="constant", hessian_constant=2.0),
])
def test_repr_round_trips(make):
    """The repr shows the options a user set (the defaults of some left out), at full
    precision: evaluated, it is the same objective."""
    import approx_gbdt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # beta without k
        obj = make()
        again = eval(repr(obj), vars(approx_gbdt))
    assert type(again) is type(obj) and again.get_options() == obj.get_options()


def test_ready_made_defaults():
    """The defaults chosen in docs/why_these_defaults.md."""
    assert approx_ndcg_obj.hessian == "mixed" and approx_ndcg_obj.hessian_floor == 0.1
    assert approx_ndcg_obj.normalize and approx_ndcg_obj.alpha == 10.0 and approx_ndcg_obj.k is None
    assert approx_ap_obj.hessian == "bound" and approx_ap_obj.beta == 0.3
    assert approx_ap_obj.hessian_scale == 0.5 and approx_ndcg_obj.hessian_scale == 1.0
    assert approx_ap_obj.normalize and approx_ap_obj.alpha == 10.0
    assert repr(ApproxNDCG()) == repr(approx_ndcg_obj)
    assert repr(ApproxAP()) == repr(approx_ap_obj)


def test_truncated_ndcg_warns_when_it_has_no_gradient():
    # A constant start on a query much longer than 2 k: every smoothed position is (n + 1) / 2
    # and the truncation factor underflows, so boosting would silently stay constant.
    rng = np.random.default_rng(0)
    n = 120
    y = rng.integers(0, 3, n).astype(float)
    ptr = np.array([0, n])
    obj = ApproxNDCG(k=10)
    with pytest.warns(RuntimeWarning, match="no gradient"):
        g, _ = obj.grad_hess(np.zeros(n), y, ptr)
    assert not g.any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g, _ = obj.grad_hess(rng.normal(size=n), y, ptr)  # spread scores: a gradient, no warning
        assert g.any()
        ApproxNDCG(k=10, beta=0.1).grad_hess(np.zeros(n), y, ptr)
        ApproxNDCG().grad_hess(np.zeros(n), y, ptr)
        ApproxNDCG(k=10).grad_hess(np.zeros(n), np.zeros(n), ptr)  # nothing relevant: silent


def test_mixed_sum_is_mixed_on_documents_of_gain_zero():
    """"mixed_sum" floors the exact diagonal with sum_j w_kj |v_j| where v_k = 0 (the bound's
    value there) and with sum_j w_kj (|v_j| + |v_k|) / 2 elsewhere: on the documents of label
    0 its Hessian is "mixed"'s; the gradient is the same everywhere."""
    s, y, ptr = _queries(3, sizes=(2, 9, 31, 60, 700))
    s[ptr[1]:ptr[2]] = 0.0  # all tied: the exact diagonal is negative, the floor decides
    g0, h0 = ApproxNDCG(hessian="mixed").grad_hess(s, y, ptr)
    g1, h1 = ApproxNDCG(hessian="mixed_sum").grad_hess(s, y, ptr)
    np.testing.assert_array_equal(g1, g0)
    zero = y == 0
    np.testing.assert_allclose(h1[zero], h0[zero], rtol=1e-9, atol=0)
    assert np.any(h1[~zero] != h0[~zero])


@pytest.mark.parametrize("options", [{"positions": "label_aware"}, {"pair_force": "chord"}])
def test_mixed_sum_needs_the_fast_kernels(options):
    with pytest.raises(ValueError, match="mixed_sum"):
        ApproxNDCG(hessian="mixed_sum", **options)
    with pytest.raises(ValueError, match="mixed_sum"):
        ApproxNDCG(**options).grad_hess(*_queries(), hessian="mixed_sum")


def test_approx_ap_has_no_mixed_sum():
    with pytest.raises(ValueError, match="hessian must be one of"):
        ApproxAP(hessian="mixed_sum")
    with pytest.raises(ValueError, match="hessian must be one of"):
        ApproxAP().grad_hess(*_queries(), hessian="mixed_sum")


@pytest.mark.parametrize("make", [ApproxNDCG, lambda **kw: ApproxNDCG(k=3, **kw),
                                  lambda **kw: parse_objective("approx_mrr", **kw)])
def test_separable_measures_have_no_bound_sum(make):
    with pytest.raises(ValueError, match="hessian must be one of .*'bound'"):
        make(hessian="bound_sum")
    with pytest.raises(ValueError, match="hessian must be one of"):
        make().grad_hess(*_queries(), hessian="bound_sum")


@pytest.mark.parametrize("cls, mode", [(ApproxNDCG, "bound_sum"), (ApproxAP, "mixed_sum")])
def test_kernels_refuse_the_other_measures_hessian_mode(cls, mode, monkeypatch):
    # past the objectives' own check (every mode allowed), the kernels refuse a mode that
    # their path for the measure does not compute, rather than return stale sums
    from approx_gbdt.objectives import HESSIANS

    monkeypatch.setattr(cls, "_hessians", HESSIANS)
    with pytest.raises(ValueError, match="not available"):
        cls().grad_hess(*_queries(), hessian=mode)


def test_approx_ap_bound_sum_is_the_bound_with_the_triangle_inequality():
    """``"bound_sum"`` is ``alpha^2 sum_j w_kj (|v_j| + |v_k|)``: the bound's Hessian where no
    two relevant documents have ``v`` of the same sign (one relevant document a query), at least
    the bound everywhere, and without normalisation equal to that sum computed here from the
    reference loops' ``v`` (numpy, every pair)."""
    s, y, ptr = _queries()
    y = (y >= 1).astype(float)
    obj = ApproxAP(hessian="bound_sum", normalize=False, hessian_scale=1.0)
    _, h_sum = obj.grad_hess(s, y, ptr)
    _, h_bound = obj.grad_hess(s, y, ptr, hessian="bound")
    assert np.all(h_sum >= h_bound - 1e-12 * np.abs(h_bound).max())
    _, _, v, _ = obj._reference_grad_hess(s, y, ptr, None)
    for a, b in zip(ptr[:-1], ptr[1:]):
        x = obj.alpha * s[a:b]
        d = x[None, :] - x[:, None]
        w = 1.0 / (2.0 + 2.0 * np.cosh(d))  # sig(d) sig(-d)
        np.fill_diagonal(w, 0.0)
        av = np.abs(v[a:b])
        want = obj.alpha ** 2 * (w @ av + av * w.sum(axis=1))
        if y[a:b].sum() == 0 or b - a < 2:
            want[:] = 0.0
        np.testing.assert_allclose(h_sum[a:b], want, rtol=1e-10, atol=1e-14)
    one = y.copy()
    for a, b in zip(ptr[:-1], ptr[1:]):  # one relevant document a query: no pair of two
        one[a:b] = 0.0
        one[a] = 1.0
    np.testing.assert_allclose(obj.grad_hess(s, one, ptr)[1],
                               obj.grad_hess(s, one, ptr, hessian="bound")[1], rtol=1e-12)


def _every_measure():
    from approx_gbdt.measures import MEASURES
    return [info.instance for info in MEASURES.values()]


@pytest.mark.parametrize("obj", _every_measure(), ids=repr)
def test_hessian_scale_multiplies_every_hessian_but_the_exact_one(obj):
    s, y, ptr = _queries(sizes=(1, 2, 9, 31, 60))
    y[ptr[2]:ptr[3]] = 0.0  # a query with no relevant document
    s[ptr[3]:ptr[3] + 4] = 0.5  # ties
    obj = obj.replace(hessian_scale=1.0)
    scaled = obj.replace(hessian_scale=0.3)
    for hessian in obj._hessians:
        g1, h1 = obj.grad_hess(s, y, ptr, hessian=hessian)
        g2, h2 = scaled.grad_hess(s, y, ptr, hessian=hessian)
        np.testing.assert_array_equal(g2, g1)
        if hessian == "exact":
            np.testing.assert_array_equal(h2, h1)
        else:
            assert np.any(h1 > 0)
            np.testing.assert_allclose(h2, 0.3 * h1, rtol=1e-15, atol=0)


def test_hessian_scale_reaches_the_host_call_and_the_reference():
    s, y, ptr = _queries()
    obj = ApproxAP(hessian_scale=0.25)
    g, h = obj(y, s, None, np.diff(ptr))  # LGBMRanker's f(y_true, y_pred, weight, group)
    g1, h1 = ApproxAP(hessian_scale=1.0).grad_hess(s, y, ptr)
    np.testing.assert_array_equal(g, g1)
    np.testing.assert_array_equal(h, 0.25 * h1)
    gr, hr, _, _ = obj._reference_grad_hess(s, y, ptr)
    np.testing.assert_allclose(gr, g1, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(hr, 0.25 * h1, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1.0, ValueError),
                                        (float("nan"), ValueError), (float("inf"), ValueError),
                                        (True, TypeError), ("0.5", TypeError)])
def test_hessian_scale_is_checked(bad, error):
    with pytest.raises(error, match="hessian_scale"):
        ApproxNDCG(hessian_scale=bad)


def test_hessian_scale_leaves_an_exact_instance_exact():
    s, y, ptr = _queries()
    exact = ApproxNDCG(hessian="exact").grad_hess(s, y, ptr)[1]
    obj = ApproxNDCG(hessian="exact", hessian_scale=0.3)
    np.testing.assert_array_equal(obj.grad_hess(s, y, ptr)[1], exact)
    np.testing.assert_array_equal(obj(y, s, None, np.diff(ptr))[1], exact)
    assert np.any(exact < 0)


def test_hessian_scale_survives_pickle_and_replace():
    import pickle

    obj = ApproxAP(hessian_scale=0.25)
    assert pickle.loads(pickle.dumps(obj)).hessian_scale == 0.25
    assert obj.replace(hessian_scale=2.0).hessian_scale == 2.0 and obj.hessian_scale == 0.25
    with pytest.raises(ValueError, match="hessian_scale"):
        obj.replace(hessian_scale=0.0)


def test_hessian_scale_in_repr_and_params():
    obj = ApproxNDCG(hessian_scale=0.5)
    assert "hessian_scale=0.5" in repr(obj) and obj.get_options()["hessian_scale"] == 0.5
    assert "hessian_scale" not in repr(ApproxNDCG(hessian_scale=1))
    assert parse_objective("approx_ap", hessian_scale=0.5).hessian_scale == 0.5


@pytest.mark.parametrize("host", ["lightgbm", "xgboost"])
def test_hessian_scale_is_the_learning_rate_with_l2_and_min_child_hessian(host):
    """hessian_scale c at learning rate eta, leaf L2 lambda and minimum child Hessian m grows
    the trees of scale 1 at eta / c, lambda / c and m / c (c a power of 2: no rounding)."""
    d = make_ranking_splits((40, 5, 10), seed=3, docs_per_query=(10, 30))
    tr, te = d["train"], d["test"]
    c = 0.25
    preds = []
    for scale, div in ((c, 1.0), (1.0, c)):
        obj = ApproxAP(hessian_scale=scale)
        if host == "lightgbm":
            lgb = pytest.importorskip("lightgbm")
            params = {"objective": obj, "learning_rate": 0.05 / div, "lambda_l2": 1.0 / div,
                      "min_sum_hessian_in_leaf": 1e-3 / div, "num_leaves": 7, "verbose": -1,
                      "num_threads": 1, "deterministic": True}
            bst = lgb.train(params, lgb.Dataset(tr.X, tr.y, group=np.diff(tr.group_ptr)),
                            num_boost_round=10)
            preds.append(bst.predict(te.X))
        else:
            xgb = pytest.importorskip("xgboost")
            dtrain = xgb.DMatrix(tr.X, tr.y)
            dtrain.set_group(np.diff(tr.group_ptr))
            params = {"eta": 0.05 / div, "lambda": 1.0 / div, "min_child_weight": 1e-3 / div,
                      "max_depth": 4, "nthread": 1, "base_score": 0.0}
            bst = xgb.train(params, dtrain, num_boost_round=10, obj=obj)
            preds.append(bst.predict(xgb.DMatrix(te.X)))
    assert np.std(preds[0]) > 0.01
    np.testing.assert_allclose(preds[0], preds[1], rtol=1e-6, atol=1e-7)
