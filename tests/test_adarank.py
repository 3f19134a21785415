"""AdaRank against iterations computed by hand on a tiny data set."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import approx_gbdt
from approx_gbdt import AdaRank

L3 = 1.0 / math.log2(3.0)  # discount of rank 2

# Three queries, two features.
#   q0: (y=1, x=(1, 0)), (y=0, x=(0, 1))            feature 0 right, feature 1 wrong
#   q1: (y=1, x=(0, 1)), (y=0, x=(1, 0))            feature 0 wrong, feature 1 right
#   q2: (y=2, x=(.2, .5)), (y=0, x=(.1, .9)), (y=1, x=(.8, .1))
X = np.array([[1, 0], [0, 1], [0, 1], [1, 0], [0.2, 0.5], [0.1, 0.9], [0.8, 0.1]])
Y = np.array([1, 0, 1, 0, 2, 0, 1], dtype=float)
SIZES = [2, 2, 3]


def _ndcg_by_hand():
    """NDCG of each feature on each query, from the formula."""
    idcg2 = 3.0 + 1.0 * L3  # gains 3, 1, 0
    # q2 by feature 0: order y = 1, 2, 0 -> 1 + 3/log2(3)
    q2_f0 = (1.0 + 3.0 * L3) / idcg2
    # q2 by feature 1: order y = 0, 2, 1 -> 0 + 3/log2(3) + 1/2
    q2_f1 = (3.0 * L3 + 0.5) / idcg2
    return np.array([[1.0, L3, q2_f0], [L3, 1.0, q2_f1]])


def test_adarank_ndcg_two_rounds_by_hand():
    E = _ndcg_by_hand()
    # round 1: P uniform; feature 0 has the larger weighted NDCG
    p1 = np.full(3, 1 / 3)
    assert p1 @ E[0] > p1 @ E[1]
    a1 = 0.5 * math.log((p1 @ (1 + E[0])) / (p1 @ (1 - E[0])))
    # f_1 = a1 x_0 ranks like feature 0, so E(f_1) = E[0]
    p2 = np.exp(-E[0]) / np.exp(-E[0]).sum()
    # round 2, paper's rule (no restriction): feature 0 again
    assert p2 @ E[0] > p2 @ E[1]
    a2 = 0.5 * math.log((p2 @ (1 + E[0])) / (p2 @ (1 - E[0])))

    model = AdaRank(measure="ndcg", n_estimators=2).fit(X, Y, group=SIZES)
    assert model.features_.tolist() == [0, 0]
    np.testing.assert_allclose(model.alphas_, [a1, a2], rtol=1e-12)
    np.testing.assert_allclose(model.query_weights_[:3], [p1, p2, p2], rtol=1e-12)
    np.testing.assert_allclose(model.coef_, [a1 + a2, 0.0], rtol=1e-12)
    np.testing.assert_allclose(model.train_score_, [E[0].mean()] * 2, rtol=1e-12)


def test_adarank_max_consecutive_forces_a_new_feature():
    E = _ndcg_by_hand()
    p1 = np.full(3, 1 / 3)
    a1 = 0.5 * math.log((p1 @ (1 + E[0])) / (p1 @ (1 - E[0])))
    p2 = np.exp(-E[0]) / np.exp(-E[0]).sum()
    a2 = 0.5 * math.log((p2 @ (1 + E[1])) / (p2 @ (1 - E[1])))
    assert a1 > a2  # so f_2 = a1 x_0 + a2 x_1 ranks q0 right and q1 wrong
    # q2 under f_2: scores .2 a1 + .5 a2, .1 a1 + .9 a2, .8 a1 + .1 a2
    s = np.array([0.2 * a1 + 0.5 * a2, 0.1 * a1 + 0.9 * a2, 0.8 * a1 + 0.1 * a2])
    gains = np.array([3.0, 0.0, 1.0])[np.argsort(-s)]
    q2 = (gains / np.log2(np.arange(3) + 2.0)).sum() / (3.0 + L3)
    e2 = np.array([1.0, L3, q2])
    p3 = np.exp(-e2) / np.exp(-e2).sum()

    model = AdaRank(n_estimators=2, max_consecutive=1).fit(X, Y, group=SIZES)
    assert model.features_.tolist() == [0, 1]
    np.testing.assert_allclose(model.alphas_, [a1, a2], rtol=1e-12)
    np.testing.assert_allclose(model.query_weights_[2], p3, rtol=1e-12)
    np.testing.assert_allclose(model.predict(X[4:]), s, rtol=1e-12)


def test_adarank_map_first_round_by_hand():
    # AP with relevance y >= 1: q0, q1 as above (1 or 1/2); q2 has two relevant documents
    # feature 0: order y = 1, 2, 0 -> 1; feature 1: order y = 0, 2, 1 -> (1/2 + 2/3) / 2
    ap = np.array([[1.0, 0.5, 1.0], [0.5, 1.0, (0.5 + 2 / 3) / 2]])
    p1 = np.full(3, 1 / 3)
    assert p1 @ ap[0] > p1 @ ap[1]
    a1 = 0.5 * math.log((p1 @ (1 + ap[0])) / (p1 @ (1 - ap[0])))
    p2 = np.exp(-ap[0]) / np.exp(-ap[0]).sum()
    model = AdaRank(measure="map", n_estimators=1).fit(X, Y, group=SIZES)
    assert model.features_.tolist() == [0]
    np.testing.assert_allclose(model.alphas_, [a1], rtol=1e-12)
    np.testing.assert_allclose(model.query_weights_[1], p2, rtol=1e-12)


def test_queries_without_relevant_documents_are_left_out():
    X2 = np.vstack([X, [[3.0, 3.0], [2.0, 1.0]]])
    Y2 = np.concatenate([Y, [0.0, 0.0]])
    a = AdaRank(n_estimators=3).fit(X, Y, group=SIZES)
    b = AdaRank(n_estimators=3).fit(X2, Y2, group=[*SIZES, 2])
    np.testing.assert_allclose(a.alphas_, b.alphas_)
    assert b.query_weights_.shape[1] == 3


def test_early_stopping_keeps_the_best_validation_round():
    data = approx_gbdt.make_ranking(60, seed=1)
    valid = approx_gbdt.make_ranking(20, seed=2)
    sizes = np.diff(data.group_ptr)
    model = AdaRank(n_estimators=40, early_stopping_rounds=5).fit(
        data.X, data.y, sizes, eval_set=(valid.X, valid.y, np.diff(valid.group_ptr)))
    assert len(model.history_) <= 40
    assert model.best_score_ == max(model.history_)
    assert model.history_[model.best_iteration_ - 1] == model.best_score_
    ndcg10 = approx_gbdt.mean_over_queries(
        approx_gbdt.ndcg(model.predict(valid.X), valid.y, valid.group_ptr, k=10))
    assert ndcg10 == pytest.approx(model.best_score_)
    # and it learns something: better than the mean of single features on validation
    singles = [approx_gbdt.mean_over_queries(approx_gbdt.ndcg(valid.X[:, j], valid.y,
                                                              valid.group_ptr, k=10))
               for j in range(valid.X.shape[1])]
    assert model.best_score_ > np.mean(singles)


def test_bad_input():
    with pytest.raises(ValueError, match="measure"):
        AdaRank(measure="mrr").fit(X, Y, group=SIZES)
    with pytest.raises(ValueError, match="n_estimators"):
        AdaRank(n_estimators=0).fit(X, Y, group=SIZES)
    with pytest.raises(ValueError, match="group sizes"):
        AdaRank().fit(X, Y, group=[2, 2])
    with pytest.raises(ValueError, match="no training query"):
        AdaRank().fit(X, np.zeros_like(Y), group=SIZES)
    with pytest.raises(NotFittedError, match="not fitted"):
        AdaRank().predict(X)
    with pytest.raises(ValueError, match="shape"):
        AdaRank(n_estimators=1).fit(X, Y, group=SIZES).predict(X[:, :1])


def test_scikit_learn_parameters_and_clone():
    from sklearn.base import clone

    model = AdaRank(measure="map", max_consecutive=2)
    assert clone(model).get_params()["measure"] == "map"
    assert repr(model) == "AdaRank(max_consecutive=2, measure='map')"
    fitted = clone(model).set_params(n_estimators=2).fit(X, Y, group=SIZES)
    assert fitted.alphas_.shape == (2,)
