"""fit_ranker: the trainer the CLI, the benchmarks and the examples share."""

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb

from approx_gbdt import approx_ndcg_obj, evaluate, fit_ranker, make_ranking_splits

SPLITS = make_ranking_splits((40, 15, 15), docs_per_query=(5, 15), seed=3)
TRAIN, VALID, TEST = SPLITS["train"], SPLITS["valid"], SPLITS["test"]
PARAMS = {"lightgbm": {"verbosity": -1, "min_data_in_leaf": 5},
          "xgboost": {"verbosity": 0, "max_depth": 3}}


@pytest.mark.parametrize("backend,native", [("lightgbm", "lambdarank"), ("xgboost", "rank:ndcg")])
@pytest.mark.parametrize("approx", [True, False])
def test_early_stopping_keeps_the_best_round(backend, native, approx):
    objective = approx_ndcg_obj if approx else native
    fit = fit_ranker(backend, objective, TRAIN, VALID, params=PARAMS[backend],
                     num_boost_round=300, early_stopping_rounds=10, metric="ndcg@10")
    curve = fit.curve("ndcg@10")
    assert len(curve) == fit.rounds_run
    assert fit.best_iteration == int(np.argmax(curve)) + 1
    assert fit.rounds_run - fit.best_iteration <= 10
    # the prediction uses the kept rounds: its validation NDCG@10 is the best on the curve
    scores = fit.predict(VALID.X)
    assert evaluate(scores, VALID.y, VALID.group_ptr, "ndcg@10")["ndcg@10"] == \
        pytest.approx(curve[fit.best_iteration - 1], abs=1e-6)
    assert fit.predict(TEST.X).shape == TEST.y.shape


@pytest.mark.parametrize("backend", ["lightgbm", "xgboost"])
def test_without_validation_every_round_is_kept(backend):
    fit = fit_ranker(backend, approx_ndcg_obj, TRAIN, params=PARAMS[backend],
                     num_boost_round=7)
    assert fit.best_iteration == fit.rounds_run == 7
    assert fit.evals_result == {}


def test_host_data_is_accepted_as_it_is():
    d = xgb.DMatrix(TRAIN.X, TRAIN.y)
    d.set_group(np.diff(TRAIN.group_ptr))
    a = fit_ranker("xgboost", approx_ndcg_obj, d, params=PARAMS["xgboost"], num_boost_round=5)
    b = fit_ranker("xgboost", approx_ndcg_obj, TRAIN, params=PARAMS["xgboost"],
                   num_boost_round=5)
    np.testing.assert_allclose(a.predict(TEST.X), b.predict(TEST.X))
    ds = lgb.Dataset(TRAIN.X, TRAIN.y, group=np.diff(TRAIN.group_ptr))
    c = fit_ranker("lightgbm", approx_ndcg_obj, ds, [VALID, TEST], params=PARAMS["lightgbm"],
                   num_boost_round=5)
    assert set(c.evals_result) == {"valid_0", "valid_1"}


def test_numpy_counts_and_a_tuple_of_validation_sets():
    fit = fit_ranker("lightgbm", approx_ndcg_obj, TRAIN, (VALID, TEST),
                     params=PARAMS["lightgbm"], num_boost_round=np.int64(4),
                     early_stopping_rounds=np.int32(2), metric="ndcg@10")
    assert set(fit.evals_result) == {"valid_0", "valid_1"} and fit.rounds_run <= 4


def test_bad_arguments():
    with pytest.raises(ValueError, match="backend"):
        fit_ranker("catboost", approx_ndcg_obj, TRAIN)
    with pytest.raises(ValueError, match="num_boost_round"):
        fit_ranker("lightgbm", approx_ndcg_obj, TRAIN, num_boost_round=0)
    with pytest.raises(ValueError, match="num_boost_round"):
        fit_ranker("lightgbm", approx_ndcg_obj, TRAIN, num_boost_round=2.5)
    with pytest.raises(ValueError, match="early_stopping_rounds"):
        fit_ranker("lightgbm", approx_ndcg_obj, TRAIN, VALID, early_stopping_rounds=0)
    with pytest.raises(ValueError, match="needs validation data"):
        fit_ranker("lightgbm", approx_ndcg_obj, TRAIN, early_stopping_rounds=5)
