"""The objectives inside LightGBM and XGBoost training, as users call them."""

from __future__ import annotations

import subprocess
import sys

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb

from approx_gbdt import (
    ApproxAP,
    ApproxNDCG,
    ApproxXGBRanker,
    approx_ap_obj,
    approx_ndcg_obj,
    group_ptr_from_sizes,
)
from approx_gbdt.metrics import mean_over_queries, ndcg


def _data(n_queries, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 40, n_queries)
    n = int(sizes.sum())
    X = rng.normal(size=(n, 8))
    latent = X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + 0.3 * rng.normal(size=n)
    y = np.clip(np.floor(latent + 1.0), 0, 4)
    return X, y, sizes


@pytest.fixture(scope="module")
def data():
    Xtr, ytr, gtr = _data(150, 0)
    Xte, yte, gte = _data(60, 1)
    return Xtr, ytr, gtr, Xte, yte, gte


def _test_ndcg(scores, yte, gte, k=10):
    return mean_over_queries(ndcg(scores, yte, group_ptr_from_sizes(gte), k=k))


OBJECTIVES = [approx_ndcg_obj, approx_ap_obj, ApproxNDCG(k=10, hessian="bound")]


@pytest.mark.parametrize("obj", OBJECTIVES, ids=repr)
def test_lgb_train_beats_constant_model(data, obj):
    Xtr, ytr, gtr, Xte, yte, gte = data
    params = {"objective": obj, "metric": "ndcg", "eval_at": [10], "verbose": -1, "seed": 0}
    booster = lgb.train(params, lgb.Dataset(Xtr, ytr, group=gtr), num_boost_round=40)
    const = _test_ndcg(np.zeros(len(yte)), yte, gte)
    assert _test_ndcg(booster.predict(Xte), yte, gte) > const + 0.15


@pytest.mark.parametrize("obj", OBJECTIVES, ids=repr)
@pytest.mark.filterwarnings("ignore:The argument .eval_set. is deprecated")
def test_lgbm_ranker_matches_lgb_train(data, obj):
    Xtr, ytr, gtr, Xte, yte, gte = data
    ranker = lgb.LGBMRanker(objective=obj, n_estimators=30, verbose=-1, random_state=0)
    ranker.fit(Xtr, ytr, group=gtr, eval_set=[(Xte, yte)], eval_group=[gte], eval_at=[5])
    params = {"objective": obj, "verbose": -1, "seed": 0}
    booster = lgb.train(params, lgb.Dataset(Xtr, ytr, group=gtr), num_boost_round=30)
    np.testing.assert_allclose(ranker.predict(Xte), booster.predict(Xte), rtol=1e-10)
    assert "ndcg@5" in ranker.evals_result_["valid_0"]


@pytest.mark.parametrize("obj", OBJECTIVES, ids=repr)
def test_xgb_train_beats_constant_model(data, obj):
    Xtr, ytr, gtr, Xte, yte, gte = data
    dtrain = xgb.DMatrix(Xtr, ytr)
    dtrain.set_group(gtr)
    params = {"eta": 0.1, "max_depth": 6, "min_child_weight": 0.01, "seed": 0}
    booster = xgb.train(params, dtrain, num_boost_round=40, obj=obj)
    const = _test_ndcg(np.zeros(len(yte)), yte, gte)
    assert _test_ndcg(booster.predict(xgb.DMatrix(Xte)), yte, gte) > const + 0.15


def test_xgb_ranker_fit_predict_early_stopping(data):
    Xtr, ytr, gtr, Xte, yte, gte = data
    qid = np.repeat(np.arange(len(gtr)), gtr)
    shuffle = np.random.default_rng(0).permutation(len(ytr))  # qid need not be sorted
    ranker = ApproxXGBRanker(n_estimators=300, early_stopping_rounds=5, min_child_weight=0.01)
    ranker.fit(
        Xtr[shuffle], ytr[shuffle], qid=qid[shuffle], eval_set=[(Xte, yte)], eval_group=[gte]
    )
    assert ranker.best_iteration < 299
    const = _test_ndcg(np.zeros(len(yte)), yte, gte)
    assert _test_ndcg(ranker.predict(Xte), yte, gte) > const + 0.15
    history = ranker.evals_result_["validation_0"]["ndcg@10"]
    assert ranker.best_score == pytest.approx(max(history))


def test_xgb_ranker_errors(data):
    Xtr, ytr, gtr, *_ = data
    with pytest.raises(ValueError, match="exactly one of group"):
        ApproxXGBRanker().fit(Xtr, ytr)
    with pytest.raises(ValueError, match="do not add up|but there are"):
        ApproxXGBRanker().fit(Xtr, ytr, group=gtr[:-1])
    with pytest.raises(ValueError, match="needs an eval_set"):
        ApproxXGBRanker(early_stopping_rounds=3).fit(Xtr, ytr, group=gtr)
    with pytest.raises(ValueError, match="not fitted"):
        ApproxXGBRanker().predict(Xtr)
    with pytest.raises(ValueError, match="per query"):
        ApproxXGBRanker().fit(Xtr, ytr, group=gtr, sample_weight=np.ones(len(ytr)))
    ranker = ApproxXGBRanker(n_estimators=2).fit(Xtr, ytr, group=gtr)
    with pytest.raises(ValueError, match="features"):
        ranker.predict(Xtr[:, :3])


def test_xgb_ranker_keeps_dataframe_feature_names(tmp_path, data):
    """As XGBRanker: a DataFrame's columns are the booster's feature names, its importances
    are read by name, and predict refuses the columns in another order."""
    pd = pytest.importorskip("pandas")
    Xtr, ytr, gtr, Xte, yte, gte = data
    cols = [f"x{i}" for i in range(Xtr.shape[1])]
    df, dfte = pd.DataFrame(Xtr, columns=cols), pd.DataFrame(Xte, columns=cols)
    ranker = ApproxXGBRanker(n_estimators=5, n_jobs=1).fit(df, ytr, group=gtr,
                                                          eval_set=[(dfte, yte)],
                                                          eval_group=[gte])
    assert list(ranker.feature_names_in_) == cols == ranker.get_booster().feature_names
    assert ranker.feature_importances_[0] > 0  # the strongest feature, found by its name
    np.testing.assert_array_equal(ranker.predict(dfte), ranker.predict(Xte))
    with pytest.raises(ValueError, match="not the fit's feature names"):
        ranker.predict(dfte[cols[::-1]])
    ranker.save_model(tmp_path / "m.json")
    loaded = ApproxXGBRanker().load_model(tmp_path / "m.json")
    assert list(loaded.feature_names_in_) == cols
    np.testing.assert_array_equal(loaded.predict(dfte), ranker.predict(dfte))
    assert not hasattr(ranker.fit(Xtr, ytr, group=gtr), "feature_names_in_")
    # an evaluation DataFrame next to unnamed training data takes the training's (no) names
    ranker.fit(Xtr, ytr, group=gtr, eval_set=[(dfte, yte)], eval_group=[gte])
    with pytest.raises(ValueError, match=r"eval_set\[0\]: the columns"):
        ranker.fit(df, ytr, group=gtr, eval_set=[(dfte[cols[::-1]], yte)], eval_group=[gte])


def test_datasets_without_query_information(data):
    Xtr, ytr, *_ = data
    with pytest.raises(ValueError, match="no query information"):
        lgb.train({"objective": approx_ndcg_obj, "verbose": -1}, lgb.Dataset(Xtr, ytr), 1)
    with pytest.raises(ValueError, match="no query information"):
        xgb.train({}, xgb.DMatrix(Xtr, ytr), 1, obj=approx_ndcg_obj)


def test_empty_xgboost_matrix_gives_empty_arrays(data):
    # A Dask worker that holds no training rows calls the objective with an empty DMatrix.
    Xtr, ytr, *_ = data
    empty = xgb.DMatrix(Xtr[:0], ytr[:0])
    for obj in [approx_ndcg_obj, approx_ap_obj]:
        g, h = obj(np.zeros(0), empty)
        assert g.shape == h.shape == (0,) and g.dtype == h.dtype == np.float64


def test_lightgbm_weights_scale_documents(data):
    Xtr, ytr, gtr, *_ = data
    w = np.random.default_rng(2).uniform(0.5, 2.0, len(ytr))
    ds = lgb.Dataset(Xtr, ytr, group=gtr, weight=w).construct()
    preds = np.random.default_rng(3).normal(size=len(ytr))
    g, h = approx_ndcg_obj(preds, ds)
    g0, h0 = approx_ndcg_obj.grad_hess(preds, ytr, group_ptr_from_sizes(gtr))
    np.testing.assert_allclose(g, g0 * w)
    np.testing.assert_allclose(h, h0 * w)


def test_xgboost_weights_scale_queries(data):
    Xtr, ytr, gtr, *_ = data
    wq = np.random.default_rng(2).uniform(0.5, 2.0, len(gtr))
    d = xgb.DMatrix(Xtr, ytr, weight=wq)
    d.set_group(gtr)
    preds = np.random.default_rng(3).normal(size=len(ytr)).astype(np.float32)
    g, h = approx_ap_obj(preds, d)
    g0, h0 = approx_ap_obj.grad_hess(preds, ytr, group_ptr_from_sizes(gtr))
    np.testing.assert_allclose(g, g0 * np.repeat(wq, gtr), rtol=1e-6)
    np.testing.assert_allclose(h, h0 * np.repeat(wq, gtr), rtol=1e-6)


def test_one_instance_serves_several_datasets():
    """One objective alternating between datasets (as in lgb.cv) gives each its own result."""
    obj = ApproxNDCG(alpha=5.0)
    sets = []
    for seed in (5, 6, 7):
        X, y, g = _data(40 + 10 * seed, seed)
        p = np.random.default_rng(seed).normal(size=len(y))
        expected = ApproxNDCG(alpha=5.0).grad_hess(p, y, group_ptr_from_sizes(g))
        sets.append((lgb.Dataset(X, y, group=g).construct(), p, expected))
    for ds, p, (g0, h0) in sets + sets[::-1]:
        g1, h1 = obj(p, ds)
        np.testing.assert_array_equal(g1, g0)
        np.testing.assert_array_equal(h1, h0)
    assert len(obj._cache) == 3  # prepared once per dataset, reused afterwards
    X, y, g = _data(120, 5)
    params = {"objective": obj, "metric": "ndcg", "eval_at": [5], "verbose": -1, "seed": 1}
    res = lgb.cv(params, lgb.Dataset(X, y, group=g), num_boost_round=10, nfold=3,
                 stratified=False, seed=1)
    assert np.all(np.isfinite(res["valid ndcg@5-mean"]))
    assert res["valid ndcg@5-mean"][-1] > res["valid ndcg@5-mean"][0]


def test_cache_notices_changed_labels():
    X, y, g = _data(20, 6)
    obj = ApproxAP()
    p = np.random.default_rng(0).normal(size=len(y))
    ds = lgb.Dataset(X, y, group=g).construct()
    g1, _ = obj(p, ds)
    y2 = y.copy()
    y2[:50] = 4 - y2[:50]
    ds.set_label(y2)
    g2, _ = obj(p, ds)
    np.testing.assert_array_equal(g2, ApproxAP().grad_hess(p, y2, group_ptr_from_sizes(g))[0])
    assert not np.array_equal(g1, g2)


@pytest.mark.parametrize("backend", ["lightgbm", "xgboost"])
def test_saved_model_reloads_without_approx_gbdt(tmp_path, data, backend):
    Xtr, ytr, gtr, Xte, *_ = data
    path = tmp_path / "model.txt"
    if backend == "lightgbm":
        booster = lgb.train(
            {"objective": approx_ndcg_obj, "verbose": -1}, lgb.Dataset(Xtr, ytr, group=gtr), 10
        )
        booster.save_model(path)
        expected = booster.predict(Xte)
        load = "import lightgbm as m; b = m.Booster(model_file=p); out = b.predict(X)"
    else:
        d = xgb.DMatrix(Xtr, ytr)
        d.set_group(gtr)
        booster = xgb.train({"eta": 0.1}, d, 10, obj=approx_ndcg_obj)
        path = tmp_path / "model.json"
        booster.save_model(path)
        expected = booster.predict(xgb.DMatrix(Xte))
        load = (
            "import xgboost as m; b = m.Booster(); b.load_model(p); "
            "out = b.predict(m.DMatrix(X))"
        )
    np.save(tmp_path / "X.npy", Xte)
    script = (
        "import sys, numpy as np; sys.modules['approx_gbdt'] = None; "
        f"p = {str(path)!r}; X = np.load({str(tmp_path / 'X.npy')!r}); {load}; "
        f"np.save({str(tmp_path / 'out.npy')!r}, out)"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=1e-6)
