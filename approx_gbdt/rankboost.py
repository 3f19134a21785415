r"""RankBoost (Freund, Iyer, Schapire & Singer 2003) with threshold weak rankers, as in LETOR.

The crucial pairs are the pairs :math:`(x_0, x_1)` of documents of one query with
:math:`y_1 > y_0` (:math:`x_1` should rank above :math:`x_0`); :math:`D_1` is uniform over all of
them. Every round :math:`t`, with the potential of each document

.. math::

    \pi(x) = \sum_{x'} D_t(x', x) - \sum_{x'} D_t(x, x'),

the weak ranker :math:`h(x) = 1[x_k > \theta]` (one feature, one threshold) maximising
:math:`|r|`, :math:`r = \sum_x h(x) \pi(x)`, is chosen (the paper's WeakLearn for {0, 1}
rankers), weighted by

.. math::

    \alpha_t = \frac12 \ln \frac{1 + r}{1 - r}

(the paper's choice for weak rankers with range [0, 1], which minimises an upper bound of the
normaliser :math:`Z_t`), and the pairs are re-weighted,
:math:`D_{t+1}(x_0, x_1) \propto D_t(x_0, x_1) \exp(\alpha_t (h_t(x_0) - h_t(x_1)))`. The model is
:math:`f = \sum_t \alpha_t h_t`.

Because :math:`D_1` is uniform, :math:`D_t(x_0, x_1) \propto \exp(f_{t-1}(x_0) - f_{t-1}(x_1))`:
the kernel computes the potentials from the scores in O(n) time and memory per query (after a
sort by label, once), without storing the pair distribution.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from approx_gbdt._linear_boosting import (
    EarlyStopping,
    check_eval_set,
    check_features,
    check_positive_int,
    check_xyg,
)

__all__ = ["RankBoost"]

# |r| = 1 (a weak ranker that orders every weighted pair correctly) gives alpha = inf.
_MAX_R = 1.0 - 1e-12


# The pair weights are exp(f(x_0) - f(x_1) - shift), shift the largest such exponent over every
# crucial pair, so that the largest weight is 1. Within a query, exp(f_j - f_i) = exp(f_j - c)
# exp(c - f_i) with c the mid-range of the query's scores, which factorises the pair sums (O(n)
# after a sort by label) while the factors and their products stay finite; a query whose score
# range exceeds _FACTOR_RANGE takes the O(n^2) pair loop.
_FACTOR_RANGE = 600.0


@njit(cache=True)
def _label_blocks(f, y, by_label, a, b, c, below, above):
    """Per row of a query (in label order): sum of exp(f_j - c) over the rows with a lower
    label, sum of exp(c - f_j) over those with a higher one; returns the largest f_j - f_i
    over the crucial pairs (-inf if there is none) and their number."""
    acc = 0.0
    top = -np.inf  # largest f_j over the lower labels so far
    block_top = -np.inf
    margin = -np.inf
    pairs = 0.0
    start = a
    while start < b:  # blocks of equal labels, ascending
        stop = start
        while stop < b and y[by_label[stop]] == y[by_label[start]]:
            stop += 1
        block_top = -np.inf
        for t in range(start, stop):
            fi = f[by_label[t]]
            below[t - a] = acc
            if top - fi > margin:
                margin = top - fi
            block_top = max(block_top, fi)
        for t in range(start, stop):
            acc += math.exp(f[by_label[t]] - c)
        top = max(top, block_top)
        pairs += (start - a) * (stop - start)
        start = stop
    acc = 0.0
    stop = b
    while stop > a:  # descending
        start = stop
        while start > a and y[by_label[start - 1]] == y[by_label[stop - 1]]:
            start -= 1
        for t in range(start, stop):
            above[t - a] = acc
        for t in range(start, stop):
            acc += math.exp(c - f[by_label[t]])
        stop = start
    return margin, pairs


@njit(parallel=True, cache=True)
def _potentials(f, y, group_ptr, by_label, out):
    r"""Potentials :math:`\pi(x)` of :math:`D(x_0, x_1) \propto \exp(f(x_0) - f(x_1))` over
    the crucial pairs (``y_1 > y_0``, same query); returns the number of crucial pairs.

    ``by_label`` holds, per query, the query's row indices sorted by ascending label.
    """
    n = f.shape[0]
    nq = group_ptr.shape[0] - 1
    below = np.empty(n)
    above = np.empty(n)
    mid = np.zeros(nq)
    factor = np.zeros(nq, dtype=np.bool_)
    margin = np.full(nq, -np.inf)
    n_pairs = np.zeros(nq)
    for q in prange(nq):
        a, b = group_ptr[q], group_ptr[q + 1]
        lo, hi = np.inf, -np.inf
        for i in range(a, b):
            lo = min(lo, f[i])
            hi = max(hi, f[i])
        mid[q] = 0.5 * (lo + hi)
        factor[q] = hi - lo <= _FACTOR_RANGE
        margin[q], n_pairs[q] = _label_blocks(
            f, y, by_label, a, b, mid[q], below[a:b], above[a:b]
        )
    shift = margin.max()
    z_q = np.zeros(nq)
    for q in prange(nq):
        a, b = group_ptr[q], group_ptr[q + 1]
        z = 0.0
        if factor[q]:
            c = mid[q]
            for t in range(a, b):
                i = by_label[t]
                down = math.exp(c - f[i]) * below[t] * math.exp(-shift)
                out[i] = down - math.exp(f[i] - c) * above[t] * math.exp(-shift)
                z += down
        else:
            for i in range(a, b):
                p = 0.0
                for j in range(a, b):
                    if y[j] < y[i]:  # pair (x_j, x_i): i should be above j
                        w = math.exp(f[j] - f[i] - shift)
                        p += w
                        z += w
                    elif y[j] > y[i]:  # pair (x_i, x_j)
                        p -= math.exp(f[i] - f[j] - shift)
                out[i] = p
        z_q[q] = z
    total = z_q.sum()
    if total > 0:
        for i in prange(n):
            out[i] /= total
    return int(n_pairs.sum())


def _label_order(y, group_ptr):
    """Row indices sorted by ascending label within each query."""
    qid = np.repeat(np.arange(group_ptr.shape[0] - 1), np.diff(group_ptr))
    return np.lexsort((y, qid)).astype(np.int64)


class RankBoost(BaseEstimator):
    r"""RankBoost with threshold weak rankers :math:`h(x) = 1[x_k > \theta]` (LETOR's form).

    Parameters
    ----------
    n_estimators : int, default 500
        Maximum number of rounds.
    n_thresholds : int, optional
        Candidate thresholds per feature. ``None`` (default) tries every boundary between two
        distinct values of the feature on the training documents (exact WeakLearn); an integer
        keeps about that many boundaries, at evenly spaced ranks of the documents sorted by the
        feature (as RankLib's threshold candidates).
    learning_rate : float, default 1.0
        Shrinkage of every :math:`\alpha_t` (1 is the paper's algorithm).
    eval_at : int, default 10
        Validation measure NDCG@eval_at (only with ``eval_set``).
    early_stopping_rounds : int, optional
        Stop after this many rounds without a better validation NDCG@eval_at.

    Attributes
    ----------
    features_, thresholds_, alphas_ : numpy.ndarray, shape (n_rounds,)
        The weak rankers: ``alphas_[t] * (X[:, features_[t]] > thresholds_[t])``.
    r_ : numpy.ndarray of float64, shape (n_rounds,)
        :math:`r_t` of each chosen weak ranker.
    history_ : list of float
        Validation NDCG@eval_at after each round (empty without ``eval_set``).
    best_iteration_ : int
        Number of rounds :meth:`predict` uses (best validation round, else all).
    best_score_ : float or None

    Notes
    -----
    Deviations from the paper: the threshold of a boundary between two distinct feature
    values is their midpoint (any value in between is equivalent on the training data);
    LETOR features have no missing values, so the paper's default rank :math:`q_{def}` for a
    missing feature is not used; :math:`|r|` is capped at :math:`1 - 10^{-12}` (an ordering of
    every weighted pair that is perfect would give :math:`\alpha = \infty`); the first of
    several weak rankers with equal :math:`|r|` (lowest feature, then highest threshold) wins.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 1.0], [1.0, 0.0], [0.2, 0.0], [0.9, 1.0]])
    >>> model = RankBoost(n_estimators=1).fit(X, [0, 1, 0, 1], group=[2, 2])
    >>> model.features_.tolist(), model.thresholds_.tolist()  # feature 0 above 0.55
    ([0], [0.55])
    """

    def __init__(self, *, n_estimators=500, n_thresholds=None, learning_rate=1.0, eval_at=10,
                 early_stopping_rounds=None):
        self.n_estimators = n_estimators
        self.n_thresholds = n_thresholds
        self.learning_rate = learning_rate
        self.eval_at = eval_at
        self.early_stopping_rounds = early_stopping_rounds

    def _candidates(self, X):
        """Per feature, the descending sort order and the boundaries to try.

        ``cand[i, k]`` is True when a threshold between the ``i``-th and ``i + 1``-th largest
        values of feature ``k`` is tried.
        """
        order = np.argsort(-X, axis=0, kind="stable")
        vals = np.take_along_axis(X, order, axis=0)
        cand = vals[:-1] > vals[1:]
        if self.n_thresholds is not None and X.shape[0] > 1:
            n = X.shape[0]
            keep = np.zeros_like(cand)
            targets = np.unique(
                np.round(np.arange(1, self.n_thresholds + 1) * n / (self.n_thresholds + 1))
            ).astype(np.int64) - 1
            for k in range(X.shape[1]):
                where = np.flatnonzero(cand[:, k])
                if where.size:
                    pick = np.searchsorted(where, np.clip(targets, 0, None))
                    keep[where[np.unique(pick[pick < where.size])], k] = True
            cand = keep
        return order, vals, cand

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
        n_rounds = check_positive_int("n_estimators", self.n_estimators)
        check_positive_int("n_thresholds", self.n_thresholds, allow_none=True)
        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (
                math.isfinite(lr) and lr > 0):
            raise ValueError(f"learning_rate must be a positive number, got {lr!r}")
        patience = check_positive_int("early_stopping_rounds", self.early_stopping_rounds,
                                      allow_none=True)
        X, y, ptr = check_xyg(X, y, group)
        valid = check_eval_set(eval_set, X.shape[1])
        self.n_features_in_ = X.shape[1]
        order, vals, cand = self._candidates(X)
        if not cand.any():
            raise ValueError("no feature takes two distinct values: nothing to threshold")

        f = np.zeros(X.shape[0])
        pot = np.empty(X.shape[0])
        by_label = _label_order(y, ptr)
        f_valid = None if valid is None else np.zeros(valid[0].shape[0])
        stopper = EarlyStopping(valid, self.eval_at, patience)
        features, thresholds, alphas, rs = [], [], [], []
        for _ in range(n_rounds):
            if _potentials(f, y, ptr, by_label, pot) == 0:
                raise ValueError("no query has two documents with different labels: "
                                 "RankBoost has no pair to order")
            # r of the threshold below the i-th largest value: sum of the i + 1 largest potentials
            r = np.cumsum(pot[order], axis=0)[:-1]
            score = np.where(cand, np.abs(r), -1.0)
            i, k = np.unravel_index(int(np.argmax(score.T)), score.T.shape)[::-1]
            rt = float(np.clip(r[i, k], -_MAX_R, _MAX_R))
            alpha = lr * 0.5 * math.log((1.0 + rt) / (1.0 - rt))
            theta = 0.5 * (vals[i, k] + vals[i + 1, k])
            features.append(int(k))
            thresholds.append(float(theta))
            alphas.append(alpha)
            rs.append(rt)
            f += alpha * (X[:, k] > theta)
            if f_valid is not None:
                f_valid += alpha * (valid[0][:, k] > theta)
            if stopper.update(f_valid):
                break

        self.features_ = np.asarray(features, dtype=np.int64)
        self.thresholds_ = np.asarray(thresholds)
        self.alphas_ = np.asarray(alphas)
        self.r_ = np.asarray(rs)
        self.history_ = stopper.history
        self.best_score_ = stopper.best_score
        self.best_iteration_ = stopper.best_iteration if valid is not None else len(features)
        return self

    def predict(self, X, *, n_rounds=None):
        r"""Scores :math:`\sum_t \alpha_t 1[x_{k_t} > \theta_t]` of the first ``n_rounds`` rounds
        (default ``best_iteration_``)."""
        if not hasattr(self, "alphas_"):
            raise NotFittedError("RankBoost is not fitted: call fit first")
        X = check_features(X, self.n_features_in_)
        n = self.best_iteration_ if n_rounds is None else n_rounds
        out = np.zeros(X.shape[0])
        for k, theta, alpha in zip(self.features_[:n], self.thresholds_[:n], self.alphas_[:n]):
            out += alpha * (X[:, k] > theta)
        return out
