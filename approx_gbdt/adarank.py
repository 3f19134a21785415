r"""AdaRank (Xu & Li 2007): boosting that re-weights the training queries by a ranking measure.

With queries :math:`i = 1..m`, a measure :math:`E \in [0, 1]` of a ranking (NDCG for
AdaRank-NDCG, AP for AdaRank-MAP), single features as weak rankers (the paper's choice, also
LETOR's) and :math:`P_1(i) = 1/m`, every round :math:`t`

.. math::

    h_t &= \arg\max_{x_k} \sum_i P_t(i)\, E(\pi(q_i, x_k), y_i) \\
    \alpha_t &= \frac12 \ln \frac{\sum_i P_t(i) (1 + E(\pi(q_i, h_t), y_i))}
                                  {\sum_i P_t(i) (1 - E(\pi(q_i, h_t), y_i))} \\
    f_t &= \sum_{s \le t} \alpha_s h_s, \qquad
    P_{t+1}(i) = \frac{\exp(-E(\pi(q_i, f_t), y_i))}{\sum_j \exp(-E(\pi(q_j, f_t), y_j))}

which minimises the exponential bound :math:`\sum_i \exp(-E(\pi(q_i, f), y_i))` of the
ranking loss :math:`\sum_i (1 - E)`. The model is linear in the features.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from approx_gbdt._linear_boosting import (
    EarlyStopping,
    check_eval_set,
    check_features,
    check_positive_int,
    check_xyg,
)
from approx_gbdt.metrics import average_precision, ndcg

__all__ = ["AdaRank"]

_MEASURES = ("ndcg", "map")
# A weak ranker with weighted measure 1 on every query would get alpha = +inf: its weighted
# "error" sum_i P(i) (1 - E) is floored at this fraction of sum_i P(i) (1 + E).
_MIN_ERROR = 1e-10


class AdaRank(BaseEstimator):
    r"""AdaRank-NDCG / AdaRank-MAP of Xu & Li (2007), single features as weak rankers.

    Parameters
    ----------
    measure : {"ndcg", "map"}, default "ndcg"
        The measure :math:`E` that weighs the queries and the weak rankers: NDCG (gains
        :math:`2^y - 1`) or average precision (relevance ``label >= threshold``), both
        computed exactly by :func:`approx_gbdt.ndcg` / :func:`approx_gbdt.average_precision`.
    k : int, optional
        Cut-off of the training measure (NDCG@k, AP@k); ``None`` (default) uses the whole list.
    n_estimators : int, default 500
        Maximum number of rounds.
    max_consecutive : int, optional
        If given, a feature may be selected at most this many rounds in a row (RankLib's
        AdaRank rule; the paper has none, which is the default ``None``).
    threshold : float, default 1.0
        Relevance threshold of AP (``measure="map"``).
    ties : {"worst", "stable"}, default "worst"
        Order of equal scores when a weak ranker (a feature) or the model is evaluated; the
        features of LETOR data have many ties, and "worst" gives a feature no credit from the
        order in which the documents are stored.
    eval_at : int, default 10
        Validation measure NDCG@eval_at (only with ``eval_set``).
    early_stopping_rounds : int, optional
        Stop after this many rounds without a better validation NDCG@eval_at.

    Attributes
    ----------
    features_ : numpy.ndarray of int, shape (n_rounds,)
        The feature chosen as weak ranker in each round.
    alphas_ : numpy.ndarray of float64, shape (n_rounds,)
        Its weight :math:`\alpha_t`.
    train_score_ : list of float
        Mean training measure :math:`E(\pi(q_i, f_t))` over the training queries after each round.
    query_weights_ : numpy.ndarray of float64, shape (n_rounds + 1, n_used_queries)
        :math:`P_t` of every round (and the next one), over the queries with a defined measure.
    history_ : list of float
        Validation NDCG@eval_at after each round (empty without ``eval_set``).
    best_iteration_ : int
        Number of rounds :meth:`predict` uses: the best validation round with ``eval_set``,
        else every round.
    best_score_ : float or None
    coef_ : numpy.ndarray of float64, shape (n_features,)
        The linear model :math:`f` of the first ``best_iteration_`` rounds.

    Notes
    -----
    Deviations from the paper, all forced by cases the paper does not meet:

    - Queries whose measure is undefined (no relevant document: NDCG's ideal DCG is 0, AP has
      no relevant document) carry no information on the ranking; they are left out of the
      query distribution :math:`P_t` (counting them as ``E = 0`` would give them a constant
      weight and bias every :math:`\alpha_t`).
    - A weak ranker that is perfect on every weighted query would get :math:`\alpha_t =
      +\infty`; its weighted error :math:`\sum_i P_t(i)(1 - E)` is floored at 1e-10 times
      :math:`\sum_i P_t(i)(1 + E)` (so :math:`\alpha_t \le \frac12 \ln 10^{10} \approx 11.5`).
    - Equal weighted measures: the first feature wins.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.3, 0.2], [0.1, 0.9]])
    >>> model = AdaRank(n_estimators=3, max_consecutive=1).fit(X, [0, 1, 1, 0, 2, 1], [2, 2, 2])
    >>> model.features_.tolist(), model.alphas_.round(3).tolist()
    ([0, 1, 0], [1.363, 0.827, 1.273])
    >>> model.coef_.round(3).tolist()
    [2.636, 0.827]
    """

    def __init__(
        self,
        *,
        measure="ndcg",
        k=None,
        n_estimators=500,
        max_consecutive=None,
        threshold=1.0,
        ties="worst",
        eval_at=10,
        early_stopping_rounds=None,
    ):
        self.measure = measure
        self.k = k
        self.n_estimators = n_estimators
        self.max_consecutive = max_consecutive
        self.threshold = threshold
        self.ties = ties
        self.eval_at = eval_at
        self.early_stopping_rounds = early_stopping_rounds

    def _measure(self, scores, y, ptr):
        if self.measure == "ndcg":
            return ndcg(scores, y, ptr, k=self.k, ties=self.ties)
        return average_precision(scores, y, ptr, k=self.k, threshold=self.threshold,
                                 ties=self.ties)

    def fit(self, X, y, group, eval_set=None):
        """Train on queries given by their sizes ``group`` (rows contiguous by query).

        Parameters
        ----------
        X : array_like or scipy sparse, shape (n_documents, n_features)
        y : array_like, shape (n_documents,)
            Relevance grades >= 0.
        group : array_like of int
            Query sizes in row order (LightGBM's ``group``).
        eval_set : tuple (X_valid, y_valid, group_valid), optional
            Validation queries: NDCG@eval_at after every round, the best round kept.

        Returns
        -------
        self
        """
        if self.measure not in _MEASURES:
            raise ValueError(f"measure must be one of {_MEASURES}, got {self.measure!r}")
        n_rounds = check_positive_int("n_estimators", self.n_estimators)
        max_consecutive = check_positive_int("max_consecutive", self.max_consecutive,
                                             allow_none=True)
        check_positive_int("k", self.k, allow_none=True)
        patience = check_positive_int("early_stopping_rounds", self.early_stopping_rounds,
                                      allow_none=True)
        X, y, ptr = check_xyg(X, y, group)
        valid = check_eval_set(eval_set, X.shape[1])
        n_features = X.shape[1]
        self.n_features_in_ = n_features

        # E of every feature as a ranker, on every query: fixed over the rounds.
        per_feature = np.stack([self._measure(X[:, j], y, ptr) for j in range(n_features)])
        used = ~np.isnan(per_feature[0])  # queries with a defined measure
        if not used.any():
            raise ValueError(f"no training query has a defined {self.measure} (every query "
                             "lacks a relevant document)")
        per_feature = per_feature[:, used]
        m = int(used.sum())

        P = np.full(m, 1.0 / m)
        f = np.zeros(X.shape[0])
        f_valid = None if valid is None else np.zeros(valid[0].shape[0])
        stopper = EarlyStopping(valid, self.eval_at, patience)
        features, alphas, weights, train_score = [], [], [P], []
        run = 0
        for _ in range(n_rounds):
            weighted = per_feature @ P
            if max_consecutive is not None and run >= max_consecutive:
                weighted[features[-1]] = -np.inf
            j = int(np.argmax(weighted))
            e = per_feature[j]
            good = float(P @ (1.0 + e))
            bad = max(float(P @ (1.0 - e)), _MIN_ERROR * good)
            alpha = 0.5 * math.log(good / bad)
            run = run + 1 if features and features[-1] == j else 1
            features.append(j)
            alphas.append(alpha)
            f += alpha * X[:, j]
            e_f = self._measure(f, y, ptr)[used]
            train_score.append(float(e_f.mean()))
            P = np.exp(-e_f)
            P /= P.sum()
            weights.append(P)
            if f_valid is not None:
                f_valid += alpha * valid[0][:, j]
            if stopper.update(f_valid):
                break

        self.features_ = np.asarray(features, dtype=np.int64)
        self.alphas_ = np.asarray(alphas)
        self.query_weights_ = np.stack(weights)
        self.train_score_ = train_score
        self.history_ = stopper.history
        self.best_score_ = stopper.best_score
        self.best_iteration_ = stopper.best_iteration if valid is not None else len(features)
        self.coef_ = self._coef(self.best_iteration_)
        return self

    def _coef(self, n_rounds):
        coef = np.zeros(self.n_features_in_)
        np.add.at(coef, self.features_[:n_rounds], self.alphas_[:n_rounds])
        return coef

    def predict(self, X, *, n_rounds=None):
        """Scores ``X @ coef_`` of the first ``n_rounds`` rounds (default ``best_iteration_``)."""
        if not hasattr(self, "coef_"):
            raise NotFittedError("AdaRank is not fitted: call fit first")
        X = check_features(X, self.n_features_in_)
        coef = self.coef_ if n_rounds is None else self._coef(n_rounds)
        return X @ coef
