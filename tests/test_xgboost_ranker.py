"""ApproxXGBRanker: early stopping on the exact metric, callbacks, training continuation and
the errors of bad parameters."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb
from sklearn.exceptions import NotFittedError

from approx_gbdt import ApproxNDCG, ApproxXGBRanker, make_ranking_splits, score_queries

SPLITS = make_ranking_splits((40, 20, 10), seed=0)
TRAIN, VALID = SPLITS["train"], SPLITS["valid"]


def _qid(d):
    return np.repeat(np.arange(d.n_queries), np.diff(d.group_ptr))


QTR, QVA = _qid(TRAIN), _qid(VALID)


def _fit(ranker, rows=None, **fit):
    """``ranker`` fitted on TRAIN, validated on VALID's rows in the order ``rows``."""
    rows = np.arange(VALID.y.size) if rows is None else rows
    return ranker.fit(TRAIN.X, TRAIN.y, qid=QTR, eval_set=[(VALID.X[rows], VALID.y[rows])],
                      eval_qid=[QVA[rows]], **fit)


def test_early_stopping_does_not_depend_on_the_validation_row_order():
    """Ties in the first rounds' scores are ranked worst-first, not by row order: validation
    rows sorted by label within each query (a ranked export) stop at the same round as
    shuffled rows. XGBoost's own ndcg@10 puts the relevant rows of a tie first there and
    stops after the first round."""
    params = {"n_estimators": 60, "early_stopping_rounds": 5, "n_jobs": 1}
    by_label = np.lexsort((-VALID.y, QVA))
    shuffled = np.random.default_rng(0).permutation(VALID.y.size)
    a = _fit(ApproxXGBRanker(**params), by_label)
    b = _fit(ApproxXGBRanker(**params), shuffled)
    assert a.evals_result()["validation_0"]["ndcg@10"] == \
        b.evals_result()["validation_0"]["ndcg@10"]
    assert a.best_iteration_ == b.best_iteration_ > 5
    # the recorded score is the exact NDCG@10 of the kept rounds, as score() measures it
    assert a.best_score_ == pytest.approx(a.score(VALID.X, VALID.y, qid=QVA), abs=1e-6)


def test_xgboost_own_metric_through_xgb_params():
    """eval_metric in xgb_params: XGBoost's own metrics instead of the exact ones (its
    ndcg ranks the ties of the first round in row order, here the relevant rows first)."""
    by_label = np.lexsort((-VALID.y, QVA))
    ranker = _fit(ApproxXGBRanker(n_estimators=1, n_jobs=1,
                                  xgb_params={"eval_metric": ["ndcg@5", "ndcg@10"]}), by_label)
    history = ranker.evals_result()["validation_0"]
    assert list(history) == ["ndcg@5", "ndcg@10"]
    exact = score_queries(ranker.predict(VALID.X), VALID.y, qid=QVA, metric="ndcg@10")
    assert history["ndcg@10"][0] > exact + 0.01


def test_several_cut_offs_stop_on_the_last():
    ranker = _fit(ApproxXGBRanker(n_estimators=60, early_stopping_rounds=5, n_jobs=1,
                                  eval_at=(1, 10)))
    history = ranker.evals_result()["validation_0"]
    assert list(history) == ["ndcg@1", "ndcg@10"]
    assert ranker.best_iteration_ == int(np.argmax(history["ndcg@10"]))


class _StopAfter(xgb.callback.TrainingCallback):
    """Stops training after ``rounds`` rounds; counts the rounds it saw."""

    def __init__(self, rounds):
        super().__init__()
        self.rounds, self.seen = rounds, 0

    def after_iteration(self, model, epoch, evals_log):
        self.seen += 1
        return self.seen >= self.rounds


def test_callbacks_reach_training_copied_per_fit():
    stop = _StopAfter(2)
    ranker = ApproxXGBRanker(n_estimators=10, n_jobs=1, callbacks=[stop])
    ranker.fit(TRAIN.X, TRAIN.y, qid=QTR)
    assert ranker.get_booster().num_boosted_rounds() == 2
    assert stop.seen == 0  # a copy ran; the next fit starts from the same state
    ranker.fit(TRAIN.X, TRAIN.y, qid=QTR)
    assert ranker.get_booster().num_boosted_rounds() == 2
    # an EarlyStopping callback of one's own, reused by two fits
    early = xgb.callback.EarlyStopping(rounds=5, metric_name="ndcg@10", maximize=True)
    ranker = ApproxXGBRanker(n_estimators=60, n_jobs=1, callbacks=[early])
    first = _fit(ranker).best_iteration_
    assert first > 5 and _fit(ranker).best_iteration_ == first


@pytest.mark.parametrize("key", ["callbacks", "obj", "num_boost_round", "xgb_model",
                                 "early_stopping_rounds", "custom_metric"])
def test_xgb_params_refuse_train_arguments(key):
    with pytest.raises(ValueError, match=f"xgb_params.*'{key}'.*not a booster parameter"):
        ApproxXGBRanker(n_estimators=2, xgb_params={key: None}).fit(TRAIN.X, TRAIN.y, qid=QTR)


def test_fit_continues_from_xgb_model(tmp_path):
    first = _fit(ApproxXGBRanker(n_estimators=60, early_stopping_rounds=5, n_jobs=1))
    kept = first.best_iteration_ + 1
    rounds = first.get_booster().num_boosted_rounds()
    path = tmp_path / "first.json"
    first.save_model(path)
    for model in (first, first.get_booster(), path, str(path)):
        more = ApproxXGBRanker(n_estimators=3, n_jobs=1)
        more.fit(TRAIN.X, TRAIN.y, qid=QTR, xgb_model=model)
        booster = more.get_booster()
        assert booster.num_boosted_rounds() == rounds + 3
        # every round kept (the first fit's best round no longer applies), the old ones as
        # they were
        assert more.best_iteration_ == rounds + 2 and more.best_score_ is None
        old = booster[:kept].predict(xgb.DMatrix(VALID.X))
        np.testing.assert_allclose(old, first.predict(VALID.X), rtol=1e-6)
    assert first.get_booster().num_boosted_rounds() == rounds  # the model given is unchanged
    assert first.best_iteration_ == kept - 1
    # early stopping while continuing: the best round counts the model's rounds too
    more = _fit(ApproxXGBRanker(n_estimators=20, early_stopping_rounds=3, n_jobs=1),
                xgb_model=first)
    assert more.best_iteration_ >= rounds
    with pytest.raises(TypeError, match="xgb_model"):
        ApproxXGBRanker(n_estimators=2).fit(TRAIN.X, TRAIN.y, qid=QTR, xgb_model=3)
    with pytest.raises(NotFittedError):
        ApproxXGBRanker(n_estimators=2).fit(TRAIN.X, TRAIN.y, qid=QTR,
                                            xgb_model=ApproxXGBRanker())


def test_objective_class_instead_of_instance():
    with pytest.raises(TypeError, match=r"an instance.*ApproxNDCG\(\)"):
        ApproxXGBRanker(objective=ApproxNDCG, n_estimators=2).fit(TRAIN.X, TRAIN.y, qid=QTR)


def test_eval_at_takes_one_cut_off():
    one = _fit(ApproxXGBRanker(n_estimators=3, n_jobs=1, eval_at=np.int64(5)))
    seq = _fit(ApproxXGBRanker(n_estimators=3, n_jobs=1, eval_at=[5]))
    assert one.evals_result() == seq.evals_result()
    assert list(one.evals_result()["validation_0"]) == ["ndcg@5"]
    for bad in (2.5, "10", [5, 0], (), True):
        with pytest.raises(ValueError, match="eval_at"):
            ApproxXGBRanker(n_estimators=2, eval_at=bad).fit(TRAIN.X, TRAIN.y, qid=QTR)


def test_importance_type_is_checked_at_fit():
    with pytest.raises(ValueError, match="importance_type.*'gain'"):
        ApproxXGBRanker(n_estimators=2, importance_type="bogus").fit(TRAIN.X, TRAIN.y, qid=QTR)
    ranker = ApproxXGBRanker(n_estimators=2, n_jobs=1).fit(TRAIN.X, TRAIN.y, qid=QTR)
    with pytest.raises(ValueError, match="importance_type"):
        _ = ranker.set_params(importance_type="Gain").feature_importances_


def test_unfitted_ranker_raises_not_fitted_error():
    ranker = ApproxXGBRanker()
    for call in (lambda: ranker.predict(TRAIN.X), ranker.get_booster, ranker.evals_result):
        with pytest.raises(NotFittedError, match="not fitted"):
            call()
    assert issubclass(NotFittedError, ValueError)  # callers catching ValueError still do


def test_early_stopping_refuses_validation_data_without_a_relevant_document():
    ranker = ApproxXGBRanker(n_estimators=5, early_stopping_rounds=2, n_jobs=1)
    with pytest.raises(ValueError, match="no relevant document .* cannot choose a round"):
        ranker.fit(TRAIN.X, TRAIN.y, qid=QTR, eval_set=[(VALID.X, np.zeros_like(VALID.y))],
                   eval_qid=[QVA])
    # XGBoost's own metrics (rmse here) are defined on such data: no refusal
    ApproxXGBRanker(n_estimators=3, early_stopping_rounds=2, n_jobs=1,
                    xgb_params={"eval_metric": "rmse"}).fit(
        TRAIN.X, TRAIN.y, qid=QTR, eval_set=[(VALID.X, np.zeros_like(VALID.y))], eval_qid=[QVA])
