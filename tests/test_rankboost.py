"""RankBoost against a round computed by hand and a literal pair-by-pair implementation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import approx_gbdt
from approx_gbdt import RankBoost

# q0: A (y=2), B (y=1), C (y=0); q1: D (y=1), E (y=0), F (y=0)
X = np.array([[0.9, 0.5], [0.2, 0.6], [0.5, 0.3], [0.4, 0.8], [0.7, 0.9], [0.1, 0.1]])
Y = np.array([2, 1, 0, 1, 0, 0], dtype=float)
SIZES = [3, 3]


def test_first_round_by_hand():
    # crucial pairs (x0, x1), x1 above: (B,A) (C,A) (C,B) (E,D) (F,D); D_1 = 1/5 each.
    # potentials: A +2/5, B +1/5 - 1/5 = 0, C -2/5, D +2/5, E -1/5, F -1/5.
    # feature 0, descending A .9, E .7, C .5, D .4, B .2, F .1: r = .4, .2, -.2, .2, .2
    # feature 1, descending E .9, D .8, B .6, A .5, C .3, F .1: r = -.2, .2, .2, .6, .2
    # best |r| = .6: feature 1 above (.5 + .3) / 2 = .4; alpha = 1/2 ln(1.6 / .4) = ln 2
    model = RankBoost(n_estimators=1).fit(X, Y, group=SIZES)
    assert model.features_.tolist() == [1]
    assert model.thresholds_.tolist() == pytest.approx([0.4])
    assert model.r_.tolist() == pytest.approx([0.6])
    assert model.alphas_.tolist() == pytest.approx([math.log(2.0)])
    np.testing.assert_allclose(model.predict(X), math.log(2.0) * (X[:, 1] > 0.4))


def _rankboost_by_pairs(X, y, sizes, rounds, n_thresholds=None):
    """Freund et al. (2003), literally: an explicit pair distribution, the multiplicative
    update and every midpoint threshold of every feature."""
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    pairs = [(i, j) for q in range(len(sizes)) for i in range(ptr[q], ptr[q + 1])
             for j in range(ptr[q], ptr[q + 1]) if y[j] > y[i]]
    D = np.full(len(pairs), 1.0 / len(pairs))
    out = []
    for _ in range(rounds):
        pot = np.zeros(len(y))
        for (i, j), d in zip(pairs, D):
            pot[j] += d
            pot[i] -= d
        best = None
        for k in range(X.shape[1]):
            values = np.unique(X[:, k])[::-1]
            for hi, lo in zip(values[:-1], values[1:]):
                theta = 0.5 * (hi + lo)
                r = pot[X[:, k] > theta].sum()
                if best is None or abs(r) > abs(best[2]) + 1e-15:
                    best = (k, theta, r)
        k, theta, r = best
        alpha = 0.5 * math.log((1 + r) / (1 - r))
        h = (X[:, k] > theta).astype(float)
        D = D * np.exp([alpha * (h[i] - h[j]) for i, j in pairs])
        D /= D.sum()
        out.append((k, theta, alpha))
    return out


def test_rounds_match_the_pair_by_pair_algorithm():
    rng = np.random.default_rng(3)
    sizes = [5, 7, 4, 6]
    Xr = rng.integers(0, 6, size=(sum(sizes), 3)) / 5.0  # ties within features
    yr = rng.integers(0, 3, size=sum(sizes)).astype(float)
    expected = _rankboost_by_pairs(Xr, yr, sizes, rounds=6)
    model = RankBoost(n_estimators=6).fit(Xr, yr, group=sizes)
    assert model.features_.tolist() == [e[0] for e in expected]
    np.testing.assert_allclose(model.thresholds_, [e[1] for e in expected])
    np.testing.assert_allclose(model.alphas_, [e[2] for e in expected], rtol=1e-10)


def test_threshold_candidates_are_a_subset():
    data = approx_gbdt.make_ranking(30, seed=4)
    sizes = np.diff(data.group_ptr)
    full = RankBoost(n_estimators=1).fit(data.X, data.y, sizes)
    few = RankBoost(n_estimators=1, n_thresholds=5).fit(data.X, data.y, sizes)
    assert abs(few.r_[0]) <= abs(full.r_[0])
    # each feature keeps at most 5 boundaries
    _, _, cand = RankBoost(n_thresholds=5)._candidates(data.X)
    assert cand.sum(axis=0).max() <= 5 and cand.sum(axis=0).min() >= 1


def test_learns_with_early_stopping():
    data = approx_gbdt.make_ranking(60, seed=1)
    valid = approx_gbdt.make_ranking(20, seed=2)
    model = RankBoost(n_estimators=60, early_stopping_rounds=10, learning_rate=0.5).fit(
        data.X, data.y, np.diff(data.group_ptr),
        eval_set=(valid.X, valid.y, np.diff(valid.group_ptr)))
    assert model.history_[model.best_iteration_ - 1] == model.best_score_
    ndcg10 = approx_gbdt.mean_over_queries(
        approx_gbdt.ndcg(model.predict(valid.X), valid.y, valid.group_ptr, k=10))
    assert ndcg10 == pytest.approx(model.best_score_)
    constant = approx_gbdt.mean_over_queries(
        approx_gbdt.ndcg(np.zeros(valid.y.size), valid.y, valid.group_ptr, k=10))
    assert model.best_score_ > constant + 0.1


def test_large_score_gaps_stay_finite():
    # a perfectly separating feature gives |r| ~ 1 and alpha ~ 14 per round; the pair weights
    # are normalised by the largest exponent, so many such rounds stay finite
    Xs = np.array([[1.0, 0.0], [0.0, 1.0]] * 3)
    ys = np.array([1.0, 0.0] * 3)
    model = RankBoost(n_estimators=100).fit(Xs, ys, group=[2, 2, 2])
    assert np.all(np.isfinite(model.alphas_))
    assert np.all(np.isfinite(model.predict(Xs)))


def test_bad_input():
    with pytest.raises(ValueError, match="no query has two documents"):
        RankBoost().fit(X, np.zeros(6), group=SIZES)
    with pytest.raises(ValueError, match="distinct values"):
        RankBoost().fit(np.ones((6, 2)), Y, group=SIZES)
    with pytest.raises(ValueError, match="learning_rate"):
        RankBoost(learning_rate=0).fit(X, Y, group=SIZES)
    with pytest.raises(NotFittedError, match="not fitted"):
        RankBoost().predict(X)


def test_scikit_learn_parameters_and_clone():
    from sklearn.base import clone

    model = RankBoost(n_thresholds=4, learning_rate=0.5)
    assert clone(model).get_params()["n_thresholds"] == 4
    assert repr(model) == "RankBoost(learning_rate=0.5, n_thresholds=4)"
