"""Train CatBoost on an approx objective (ApproxNDCG, ApproxAP, ...) through its Python API.

CatBoost's user-defined objectives are per-object: ``calc_ders_range(approxes, targets,
weights)`` is called on blocks of at most 1000 consecutive documents (500 during Newton leaf
estimation), never with the query ids and never with the whole pool, so a listwise objective
cannot be computed from one call. :class:`CatBoostObjective` works around that with two
facts of CatBoost's ``Plain`` boosting, both checked at every call (a violated one raises
instead of training on wrong derivatives):

1. the training pool's label is the row index (:attr:`CatBoostObjective.pool_label`, exact
   in CatBoost's float32 labels up to 2^24 rows), so each block tells which rows it holds;
2. CatBoost evaluates the ``eval_metric`` on the training pool after every iteration, with
   the whole vector of raw scores, before it asks for the next iteration's derivatives. The
   adapter's metric (:attr:`CatBoostObjective.metric`) keeps that vector; the first block of
   the next iteration computes gradient and Hessian for the whole pool from it (one call of
   ``objective.grad_hess``), every block checks that its ``approxes`` are exactly the kept
   scores of its rows, and returns ``der1 = -grad``, ``der2 = -hess`` (CatBoost maximises:
   derivatives of ``-L``). Before the first iteration every score is 0 (no baseline).

The metric reports the mean NDCG@``eval_at`` (``approx_gbdt.metrics.ndcg``: equal scores
ranked worst case, queries without a relevant document excluded; 0 when no query of the pool
has a relevant document) on the training pool and on the one evaluation pool given, so
CatBoost's early stopping runs on it. An evaluation pool without a relevant document is
refused when the adapter is built: its NDCG would not change, and early stopping could not
select a model on it.

Requirements (:attr:`CatBoostObjective.catboost_params` sets the first three): ``boosting_type
='Plain'`` (ordered boosting keeps one score vector per permutation), ``leaf_estimation_iterations
=1`` (later Newton steps evaluate shifted scores), ``metric_period=1`` and the adapter's metric as
``eval_metric``. Not supported: sample weights, a baseline, ``init_model`` and a
``model_shrink_rate`` above 0 (``langevin=True`` sets one unless it is given as 0): shrinkage
rescales the scores after the metric has seen them, so the derivatives CatBoost asks for are
at scores the adapter does not know, and training stops with its ``RuntimeError``. ``fit``
deep-copies its parameters, so every fit works on its own copy of the adapter (which starts
from scores 0) and one adapter serves several fits on the same training pool. Bootstrap
(Bayesian, Bernoulli, MVS), ``rsm`` and ``random_strength`` work as with CatBoost's own
losses: they act after the derivatives. CatBoost tries to compile ``calc_ders_range`` with
numba, fails on this Python class and says so in a ``UserWarning``; it then calls it as
Python (one call per block).
"""

from __future__ import annotations

import numpy as np

from approx_gbdt.metrics import mean_over_queries, ndcg
from approx_gbdt.utils import check_group_ptr

__all__ = ["CatBoostObjective"]

_MAX_ROWS = 2**24  # float32 labels hold every integer row index below this


class CatBoostObjective:
    """An approx objective as a CatBoost user-defined objective and its evaluation metric.

    Parameters
    ----------
    objective : ApproxNDCG, ApproxAP, ... instance
        Anything with ``grad_hess(scores, labels, group_ptr)`` returning the gradient and
        Hessian of the loss to minimise (every objective of :data:`approx_gbdt.MEASURES`).
    labels : array_like, shape (n,)
        Graded labels of the training pool, in its row order.
    group_ptr : array_like of int, shape (n_queries + 1,)
        Query boundaries of the training pool.
    eval_set : (labels, group_ptr), optional
        Labels and query boundaries of the one evaluation pool passed to ``fit``; at least one
        of its queries must have a relevant document (label > 0).
    eval_at : int, default 10
        Cut-off of the NDCG reported by :attr:`metric`.

    Examples
    --------
    >>> from catboost import CatBoost, Pool
    >>> from approx_gbdt import approx_ndcg_obj, make_ranking_splits, ndcg, mean_over_queries
    >>> from approx_gbdt.catboost_host import CatBoostObjective
    >>> splits = make_ranking_splits((40, 20, 1), seed=0)
    >>> tr, va = splits["train"], splits["valid"]
    >>> host = CatBoostObjective(approx_ndcg_obj, tr.y, tr.group_ptr,
    ...                          eval_set=(va.y, va.group_ptr))
    >>> def qid(d):
    ...     return np.repeat(np.arange(d.n_queries), np.diff(d.group_ptr))
    >>> import warnings
    >>> with warnings.catch_warnings():  # CatBoost's note that numba cannot compile the class
    ...     warnings.simplefilter("ignore", UserWarning)
    ...     model = CatBoost({**host.catboost_params, "iterations": 20, "depth": 4,
    ...                       "use_best_model": False, "allow_writing_files": False,
    ...                       "verbose": False, "thread_count": 1}).fit(
    ...         Pool(tr.X, host.pool_label, group_id=qid(tr)),
    ...         eval_set=Pool(va.X, va.y, group_id=qid(va)))
    >>> score = mean_over_queries(ndcg(model.predict(va.X), va.y, va.group_ptr, k=10))
    >>> curve = model.get_evals_result()["validation"]["NDCGMetric"]  # the metric's class name
    >>> bool(np.isclose(curve[-1], score))
    True
    """

    def __init__(self, objective, labels, group_ptr, *, eval_set=None, eval_at=10):
        if not callable(getattr(objective, "grad_hess", None)):
            raise TypeError("objective must have a grad_hess(scores, labels, group_ptr) method")
        self.objective = objective
        self.labels = np.asarray(labels, dtype=np.float64).ravel()
        n = self.labels.shape[0]
        if n >= _MAX_ROWS:
            raise ValueError(f"at most {_MAX_ROWS - 1} training rows (row indices are float32 "
                             f"labels), got {n}")
        self.group_ptr = check_group_ptr(group_ptr, n)
        if eval_set is not None:
            eval_labels, eval_ptr = eval_set
            eval_labels = np.asarray(eval_labels, dtype=np.float64).ravel()
            eval_set = (eval_labels, check_group_ptr(eval_ptr, eval_labels.shape[0]))
            if not np.any(eval_labels > 0):
                raise ValueError(
                    "no query of eval_set has a relevant document (label > 0): its NDCG, the "
                    "metric CatBoost's early stopping and use_best_model read, would be the "
                    "same for every model"
                )
        self.eval_set = eval_set
        if isinstance(eval_at, bool) or not isinstance(eval_at, (int, np.integer)) or eval_at < 1:
            raise ValueError(f"eval_at must be a positive integer, got {eval_at!r}")
        self.eval_at = int(eval_at)
        self.pool_label = np.arange(n, dtype=np.float64)
        self.metric = NDCGMetric(self)
        self._scores = np.zeros(n)  # the scores of the current iteration (0 before the first)
        self._ders = None  # (-grad, -hess) at self._scores, computed on first use

    @property
    def catboost_params(self) -> dict:
        """The CatBoost parameters the adapter needs (merge your own into a copy)."""
        return {
            "loss_function": self,
            "eval_metric": self.metric,
            "boosting_type": "Plain",
            "leaf_estimation_iterations": 1,
            "metric_period": 1,
        }

    # -- CatBoost's objective interface ------------------------------------------------------
    def calc_ders_range(self, approxes, targets, weights):
        if weights is not None:
            raise ValueError("CatBoostObjective does not support sample weights")
        rows = np.asarray(targets, dtype=np.float64)
        idx = rows.astype(np.int64)
        n = self.labels.shape[0]
        if idx.size and (idx[0] < 0 or idx[-1] >= n or not np.array_equal(idx, rows)):
            raise ValueError("the training Pool's label must be CatBoostObjective.pool_label "
                             "(the row index)")
        approx = np.asarray(approxes, dtype=np.float64)
        if not np.array_equal(approx, self._scores[idx]):
            raise RuntimeError(
                "CatBoost asked for derivatives at scores the adapter has not seen (its metric "
                "keeps the training pool's scores after each iteration). The adapter needs the "
                "settings of CatBoostObjective.catboost_params (boosting_type='Plain', "
                "leaf_estimation_iterations=1, metric_period=1, eval_metric=host.metric) and "
                "does not support a baseline or init_model (scores other than 0 at the start) "
                "or a model_shrink_rate above 0 (langevin=True sets one), which shrinks the "
                "scores after the metric has seen them"
            )
        if self._ders is None:
            grad, hess = self.objective.grad_hess(self._scores, self.labels, self.group_ptr)
            self._ders = (-np.asarray(grad, dtype=np.float64),
                          -np.asarray(hess, dtype=np.float64))
        der1, der2 = self._ders
        return np.column_stack([der1[idx], der2[idx]])

    def __repr__(self):
        return f"CatBoostObjective({self.objective!r}, eval_at={self.eval_at})"


class NDCGMetric:
    """CatBoost's user-defined metric side of :class:`CatBoostObjective`: the mean NDCG@k on
    the training pool (whose scores it keeps for the next iteration) or the eval_set, over
    the queries with a relevant document; 0 when the pool has none (CatBoost cannot write
    NaN). CatBoost reports it under this class name."""

    def __init__(self, host):
        self.host = host

    def is_max_optimal(self):
        return True

    def get_final_error(self, error, weight):
        return error

    def evaluate(self, approxes, target, weight):
        host = self.host
        scores = np.array(approxes[0], dtype=np.float64)
        target = np.asarray(target, dtype=np.float64)
        if target.shape == host.pool_label.shape and np.array_equal(target, host.pool_label):
            host._scores, host._ders = scores, None
            labels, ptr = host.labels, host.group_ptr
        elif target.shape == host.pool_label.shape and np.array_equal(np.sort(target),
                                                                       host.pool_label):
            raise ValueError("CatBoost evaluated the training pool in another row order "
                             "(ordered boosting?): use boosting_type='Plain'")
        elif host.eval_set is not None and np.array_equal(
            target, host.eval_set[0].astype(np.float32)
        ):
            labels, ptr = host.eval_set
        else:
            raise ValueError(
                f"CatBoostObjective's metric got a pool of {target.size} rows that is neither "
                "the training pool (label = pool_label) nor the eval_set given to it"
            )
        value = mean_over_queries(ndcg(scores, labels, ptr, k=host.eval_at))
        return (0.0 if np.isnan(value) else value), 1.0

    def __repr__(self):
        return f"NDCG@{self.host.eval_at}"
