"""Shared parts of the classic boosted rankers (:mod:`approx_gbdt.adarank`,
:mod:`approx_gbdt.rankboost`): input checks and early stopping on a validation set."""

from __future__ import annotations

import numbers

import numpy as np

from approx_gbdt.metrics import mean_over_queries, ndcg
from approx_gbdt.utils import group_ptr_from_sizes


def check_xyg(X, y, group, name="X"):
    """``(X, y, group_ptr)``: a dense float64 matrix, labels >= 0 and query boundaries."""
    if hasattr(X, "toarray"):  # scipy sparse
        X = X.toarray()
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (documents x features), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinite values")
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"labels must be 1-D with {X.shape[0]} entries, got shape {y.shape}")
    if not np.all(np.isfinite(y)) or np.any(y < 0):
        raise ValueError("labels must be finite, non-negative relevance grades")
    if group is None:
        raise ValueError("group (query sizes) is required for ranking")
    return X, y, group_ptr_from_sizes(group, n_rows=X.shape[0])


def check_eval_set(eval_set, n_features):
    if eval_set is None:
        return None
    if isinstance(eval_set, list) and len(eval_set) == 1:
        eval_set = eval_set[0]
    if not (isinstance(eval_set, tuple) and len(eval_set) == 3):
        raise ValueError("eval_set must be a tuple (X_valid, y_valid, group_valid)")
    Xv, yv, ptr_v = check_xyg(*eval_set, name="X_valid")
    if Xv.shape[1] != n_features:
        raise ValueError(f"X_valid has {Xv.shape[1]} features but X has {n_features}")
    return Xv, yv, ptr_v


def check_positive_int(name, value, *, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or None' if allow_none else ''}, "
                         f"got {value!r}")
    return int(value)


def check_features(X, n_features):
    if hasattr(X, "toarray"):
        X = X.toarray()
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != n_features:
        raise ValueError(f"X must have shape (n, {n_features}), got {X.shape}")
    return X


class EarlyStopping:
    """Validation NDCG@``eval_at`` after every round (worst-case ties, queries without a
    relevant document excluded, as :func:`approx_gbdt.metrics.ndcg`); remembers the best
    round and says when ``patience`` rounds passed without improvement."""

    def __init__(self, valid, eval_at, patience):
        self.valid = valid
        self.eval_at = eval_at
        self.patience = patience
        self.history = []
        self.best_score = None
        self.best_iteration = 0

    def update(self, scores) -> bool:
        """Record the validation scores after one more round; True when training should stop."""
        if self.valid is None:
            return False
        value = mean_over_queries(ndcg(scores, self.valid[1], self.valid[2], k=self.eval_at))
        self.history.append(value)
        if self.best_score is None or value > self.best_score:
            self.best_score, self.best_iteration = value, len(self.history)
        return self.patience is not None and len(self.history) - self.best_iteration >= \
            self.patience
