"""scikit-learn model selection: query-aware scorers, GroupKFold over query ids, GridSearchCV
with LGBMRanker(objective=approx_ndcg_obj) and ApproxXGBRanker; ApproxXGBRanker's parity
with XGBRanker (score, feature importances, save/load, best round, evaluation weights)."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, GroupKFold

from approx_gbdt import (
    ApproxXGBRanker,
    QueryIdRanker,
    approx_ndcg_obj,
    evaluate,
    make_ranking,
    make_scorer,
    score_queries,
)


@pytest.fixture(scope="module")
def data():
    d = make_ranking(48, seed=1, n_features=6, n_informative=4, docs_per_query=(6, 12))
    qid = np.repeat(np.arange(d.n_queries) * 7 + 3, np.diff(d.group_ptr))  # ids, not 0..n-1
    return d.X, d.y, qid


def _search(estimator, grid, X, y, qid):
    with sklearn.config_context(enable_metadata_routing=True):
        search = GridSearchCV(estimator.set_fit_request(qid=True), grid,
                              scoring=make_scorer("ndcg@10"), cv=GroupKFold(n_splits=2))
        search.fit(X, y, groups=qid, qid=qid)
    return search


def _fold_score(estimator, X, y, qid, fold):
    """The NDCG@10 of ``estimator`` trained and tested on GroupKFold's ``fold`` by hand."""
    train, test = list(GroupKFold(n_splits=2).split(X, y, groups=qid))[fold]
    model = clone(estimator).fit(X[train], y[train], qid=qid[train])
    return score_queries(model.predict(X[test]), y[test], qid=qid[test])


@pytest.mark.parametrize("kind", ["xgboost", "lightgbm"])
def test_grid_search_over_query_folds(data, kind):
    X, y, qid = data
    if kind == "xgboost":
        estimator = ApproxXGBRanker(n_estimators=8, min_child_weight=0.01, n_jobs=1)
        grid = {"learning_rate": [0.05, 0.3]}
    else:
        estimator = QueryIdRanker(lgb.LGBMRanker(objective=approx_ndcg_obj, n_estimators=8,
                                                 min_child_samples=5, n_jobs=1, verbose=-1))
        grid = {"ranker__learning_rate": [0.05, 0.3]}
    search = _search(estimator, grid, X, y, qid)
    scores = search.cv_results_["split0_test_score"]
    assert np.all((scores > 0) & (scores <= 1))
    # The scorer saw each test fold's query ids: the same value as by hand.
    for i, lr in enumerate(next(iter(grid.values()))):
        by_hand = _fold_score(clone(estimator).set_params(**{next(iter(grid)): lr}), X, y,
                              qid, fold=0)
        assert scores[i] == pytest.approx(by_hand, abs=1e-12)
    assert search.best_estimator_.predict(X).shape == (X.shape[0],)


def test_scorer_without_routing_says_what_to_do(data):
    X, y, qid = data
    ranker = ApproxXGBRanker(n_estimators=2).fit(X, y, qid=qid)
    with pytest.raises(ValueError, match="enable_metadata_routing=True"):
        make_scorer("ndcg@10")(ranker, X, y)
    with pytest.raises(ValueError, match="unknown metric"):
        make_scorer("ndgc@10")


def test_score_queries_sorts_rows_by_query(data):
    X, y, qid = data
    s = np.random.default_rng(0).normal(size=y.size)
    perm = np.random.default_rng(1).permutation(y.size)
    ptr = np.r_[0, np.flatnonzero(np.diff(qid)) + 1, y.size]
    expected = evaluate(s, y, ptr, "map")["map"]
    assert score_queries(s[perm], y[perm], qid=qid[perm], metric="map") == \
        pytest.approx(expected, abs=1e-12)
    assert score_queries(s, y, group=np.diff(ptr), metric="map") == pytest.approx(expected)


def test_score_queries_refuses_missing_query_ids(data):
    X, y, qid = data
    q = qid.astype(float)
    q[3] = np.nan
    with pytest.raises(ValueError, match="qid must be finite"):
        score_queries(np.zeros(y.size), y, qid=q)
    ids = qid.astype(object)
    ids[5] = None
    with pytest.raises(ValueError, match="qid must be finite"):
        score_queries(np.zeros(y.size), y, qid=ids)


def test_query_id_ranker_keeps_a_dataframe(data):
    """A DataFrame reaches the ranker as one, rows reordered: its column names and a
    categorical column, as with LGBMRanker itself."""
    pd = pytest.importorskip("pandas")
    X, y, qid = data
    perm = np.random.default_rng(2).permutation(y.size)
    frame = pd.DataFrame(X[perm], columns=[f"f{j}" for j in range(X.shape[1])])
    frame["kind"] = pd.Categorical(np.array(list("abc"))[perm % 3])
    model = QueryIdRanker(lgb.LGBMRanker(objective=approx_ndcg_obj, n_estimators=3,
                                         min_child_samples=5, verbose=-1))
    model.fit(frame, y[perm], qid=qid[perm])
    assert model.ranker_.feature_name_ == list(frame.columns)
    assert list(model.feature_names_in_) == list(frame.columns)
    order = np.argsort(qid[perm], kind="stable")
    direct = lgb.LGBMRanker(objective=approx_ndcg_obj, n_estimators=3, min_child_samples=5,
                            verbose=-1).fit(frame.iloc[order], y[perm][order],
                                            group=np.unique(qid, return_counts=True)[1])
    np.testing.assert_allclose(model.predict(frame), direct.predict(frame))
    model.fit(X, y, qid=qid)  # a refit without names drops them
    assert not hasattr(model, "feature_names_in_")


def test_xgb_ranker_parity_with_xgbranker(data, tmp_path):
    X, y, qid = data
    half = np.searchsorted(qid, np.median(qid))
    fit = {"qid": qid[:half], "eval_set": [(X[half:], y[half:])], "eval_qid": [qid[half:]]}
    ranker = ApproxXGBRanker(n_estimators=60, learning_rate=0.3, min_child_weight=0.01,
                             early_stopping_rounds=3, n_jobs=1).fit(X[:half], y[:half], **fit)
    # best round and score, with and without sklearn's trailing underscore
    history = ranker.evals_result()["validation_0"]["ndcg@10"]
    assert ranker.best_iteration_ == ranker.best_iteration == int(np.argmax(history))
    assert ranker.best_score_ == ranker.best_score == pytest.approx(max(history))
    # score: the mean NDCG@10 over queries of its predictions
    assert ranker.score(X[half:], y[half:], qid=qid[half:]) == pytest.approx(
        score_queries(ranker.predict(X[half:]), y[half:], qid=qid[half:]))
    # feature importances: one per feature, normalised; the informative features lead
    imp = ranker.feature_importances_
    assert imp.shape == (X.shape[1],) and imp.sum() == pytest.approx(1.0)
    assert imp[:4].sum() > imp[4:].sum()
    # save_model / load_model round trip, the best round kept
    path = tmp_path / "ranker.json"
    ranker.save_model(path)
    loaded = ApproxXGBRanker().load_model(path)
    assert loaded.best_iteration_ == ranker.best_iteration_
    np.testing.assert_array_equal(loaded.predict(X), ranker.predict(X))
    # without early stopping: the last round, no best score
    plain = ApproxXGBRanker(n_estimators=3, n_jobs=1).fit(X, y, qid=qid)
    assert plain.best_iteration_ == 2 and plain.best_score_ is None


def test_xgb_ranker_eval_set_weights(data):
    X, y, qid = data
    sizes = np.diff(np.r_[0, np.flatnonzero(np.diff(qid)) + 1, y.size])
    weights = np.ones(sizes.size)
    weights[:3] = 10.0  # the first three queries count ten times in the evaluation
    params = {"n_estimators": 3, "min_child_weight": 0.01, "n_jobs": 1}
    base = ApproxXGBRanker(**params).fit(X, y, group=sizes, eval_set=[(X, y)],
                                         eval_group=[sizes])
    weighted = ApproxXGBRanker(**params).fit(
        X, y, group=sizes, eval_set=[(X, y)], eval_group=[sizes],
        sample_weight_eval_set=[weights])
    np.testing.assert_array_equal(base.predict(X), weighted.predict(X))
    curve = weighted.evals_result()["validation_0"]["ndcg@10"]
    assert curve != base.evals_result()["validation_0"]["ndcg@10"]
    with pytest.raises(ValueError, match="per query"):
        ApproxXGBRanker(**params).fit(X, y, group=sizes, eval_set=[(X, y)],
                                      eval_group=[sizes], sample_weight_eval_set=[np.ones(3)])


def test_objectives_clone_and_take_nested_parameters(data):
    """sklearn.clone copies the objective (its options, not its prepared datasets), and a
    search can tune the objective's options through ApproxXGBRanker (objective__alpha)."""
    from approx_gbdt import MEASURES, SoftNDCG

    for obj in [info.instance for info in MEASURES.values()] + [SoftNDCG(k=3)]:
        copy = clone(lgb.LGBMRanker(objective=obj)).objective
        assert copy is not obj and copy.get_options() == obj.get_options()
    X, y, qid = data
    ranker = ApproxXGBRanker(n_estimators=5, min_child_weight=0.01, n_jobs=1)
    assert ranker.objective is approx_ndcg_obj
    search = _search(ranker, {"objective__alpha": [2.0, 20.0]}, X, y, qid)
    assert search.best_params_["objective__alpha"] in (2.0, 20.0)
    assert search.best_estimator_.objective.alpha == search.best_params_["objective__alpha"]
    # the search changed clones only, never the ready-made instance
    assert ranker.objective is approx_ndcg_obj and approx_ndcg_obj.alpha == 10.0
    # set_params on the ranker replaces its objective by a copy, never changes the one given
    assert ranker.set_params(objective__alpha=3.0).objective.alpha == 3.0
    assert approx_ndcg_obj.alpha == 10.0 and ranker.get_params()["objective__alpha"] == 3.0
    with pytest.raises(ValueError, match="has no option 'alhpa'"):
        ranker.set_params(objective__alhpa=2.0)


def test_lgbm_ranker_passes_no_objective_options_to_lightgbm(data, capsys):
    """LGBMRanker.fit hands every parameter of its (deep) get_params to LightGBM: the
    objectives are not estimators, so that no ``objective__*`` key reaches it."""
    from approx_gbdt import ApproxAP

    X, y, qid = data
    sizes = np.unique(qid, return_counts=True)[1]
    for obj in (approx_ndcg_obj, ApproxAP(alpha=5.0)):
        ranker = lgb.LGBMRanker(objective=obj, n_estimators=2, min_child_samples=1)
        assert not [key for key in ranker.get_params() if key.startswith("objective__")]
        ranker.fit(X, y, group=sizes)
    assert "Unknown parameter" not in capsys.readouterr().out


def test_lgbm_ranker_search_over_objectives(data):
    from approx_gbdt import ApproxNDCG

    X, y, qid = data
    ranker = QueryIdRanker(lgb.LGBMRanker(n_estimators=5, min_child_samples=5, n_jobs=1,
                                          verbose=-1))
    grid = {"ranker__objective": [ApproxNDCG(alpha=2.0), ApproxNDCG(alpha=20.0)]}
    search = _search(ranker, grid, X, y, qid)
    assert search.best_estimator_.ranker_.objective.alpha in (2.0, 20.0)
    assert len(set(search.cv_results_["mean_test_score"])) == 2
