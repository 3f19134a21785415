"""A scikit-learn style XGBoost ranker that accepts the approx_gbdt objectives.

``xgboost.XGBRanker`` refuses callable objectives (``ValueError: custom objective function not
supported by XGBRanker``), so this estimator drives ``xgboost.train`` itself. LightGBM users
need nothing of the sort: ``lightgbm.LGBMRanker(objective=approx_ndcg_obj)`` works as it is.
"""

from __future__ import annotations

import copy
import numbers
import os

import numpy as np
import xgboost as xgb
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from approx_gbdt._kernels import threads_capped
from approx_gbdt.metrics import make_xgboost_metric
from approx_gbdt.model_selection import query_order
from approx_gbdt.objectives import approx_ndcg_obj
from approx_gbdt.training import _positive_int
from approx_gbdt.utils import group_sizes_from_ptr

__all__ = ["ApproxXGBRanker"]


def _query_layout(n_rows, group, qid, what):
    """Row order and query sizes from ``group`` (sizes) or ``qid`` (ids; sorted stably here)."""
    try:
        order, ptr = query_order(n_rows, qid=qid, group=group)
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None
    return order, group_sizes_from_ptr(ptr)


def _feature_names(X):
    """A DataFrame's column names as strings (XGBoost's feature names), else None."""
    columns = getattr(X, "columns", None)
    return None if columns is None else [str(c) for c in columns]


def _check_names(X, names, what):
    """Refuse a DataFrame whose columns are not the fit's ``names`` (in the fit's order)."""
    given = _feature_names(X)
    if names is not None and given is not None and given != list(names):
        raise ValueError(
            f"{what}: the columns {given} are not the fit's feature names {list(names)} "
            "(same names in the same order)"
        )


_OWN = object()  # _dmatrix: the training data's own feature names


def _dmatrix(X, y, group, qid, weight, what, names=_OWN):
    """XGBoost's matrix of one data set, rows sorted by query. ``names``: the training
    data's feature names for an evaluation set (None: it had none), which a DataFrame's
    columns must match; the training data takes its own (``_OWN``)."""
    if names is _OWN:
        names = _feature_names(X)
    else:
        _check_names(X, names, what)
    X = np.asarray(X) if not hasattr(X, "tocsr") else X.tocsr()
    if names is not None and X.ndim == 2 and X.shape[1] != len(names):
        raise ValueError(f"{what}: X has {X.shape[1]} columns; the fit had {len(names)}")
    if X.ndim != 2:
        raise ValueError(f"{what}: X must be 2-D, got shape {X.shape}")
    y = np.asarray(y, dtype=np.float64).ravel()
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"{what}: X has {X.shape[0]} rows but y has {y.shape[0]} labels")
    if not np.all(np.isfinite(y)):
        bad = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ValueError(f"{what}: labels must be finite: label {bad} is {y[bad]}")
    order, sizes = _query_layout(X.shape[0], group, qid, what)
    if order is not None:
        X, y = X[order], y[order]
    d = xgb.DMatrix(X, label=y, feature_names=names)
    d.set_group(sizes)
    if weight is not None:
        w = np.asarray(weight, dtype=np.float64).ravel()
        if w.shape[0] != sizes.shape[0]:
            raise ValueError(
                f"{what}: XGBoost ranking weights are per query: got {w.shape[0]} weights "
                f"for {sizes.shape[0]} queries"
            )
        d.set_weight(w)
    return d


def _capped(function, n_jobs):
    """``function`` (the objective, the exact metric) with the Numba threads of its calls
    capped at ``n_jobs`` (positive), as XGBoost's own threads are by ``nthread``: a Booster's
    ``nthread`` does not reach custom code, and XGBoost's global one, which reaches the
    objective (:mod:`approx_gbdt.hosts`), is not put back after
    ``xgb.config_context(nthread=...)``."""
    if n_jobs is None or n_jobs <= 0:
        return function

    def capped(preds, data):
        with threads_capped(int(n_jobs)):
            return function(preds, data)

    return capped


_IMPORTANCE_TYPES = ("weight", "gain", "cover", "total_gain", "total_cover")

# Arguments of xgboost.train besides its booster parameters, and what takes their place here.
_TRAIN_ARGUMENTS = {
    "dtrain": "pass the data to fit",
    "num_boost_round": "use ApproxXGBRanker(n_estimators=...)",
    "evals": "use fit(eval_set=...)",
    "obj": "use ApproxXGBRanker(objective=...)",
    "maximize": "ApproxXGBRanker sets it",
    "early_stopping_rounds": "use ApproxXGBRanker(early_stopping_rounds=...)",
    "evals_result": "read evals_result() after fit",
    "verbose_eval": "use fit(verbose=...)",
    "xgb_model": "use fit(xgb_model=...)",
    "callbacks": "use ApproxXGBRanker(callbacks=...)",
    "custom_metric": "the metrics are eval_at's exact ndcg@k, or xgb_params['eval_metric']",
    "feval": "the metrics are eval_at's exact ndcg@k, or xgb_params['eval_metric']",
}


def _not_fitted():
    return NotFittedError("this ApproxXGBRanker is not fitted yet: call fit first")


def _cut_offs(eval_at):
    """``eval_at`` as a list of positive ints (one int stands for itself)."""
    one = isinstance(eval_at, numbers.Integral) and not isinstance(eval_at, bool)
    try:
        cut_offs = list((eval_at,) if one else eval_at)
    except TypeError:
        cut_offs = []
    if not cut_offs or any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1
                           for k in cut_offs):
        raise ValueError(
            f"eval_at must be a positive integer or a sequence of them, got {eval_at!r}"
        )
    return [int(k) for k in cut_offs]


def _check_importance_type(importance_type):
    if importance_type not in _IMPORTANCE_TYPES:
        raise ValueError(
            f"importance_type must be one of {', '.join(map(repr, _IMPORTANCE_TYPES))}, "
            f"got {importance_type!r}"
        )


def _start_model(xgb_model):
    """A copy of the model to continue from (None: none), without the best round that early
    stopping recorded in it: the rounds trained now decide that again."""
    if xgb_model is None:
        return None
    if callable(getattr(xgb_model, "get_booster", None)):  # ApproxXGBRanker, XGBRanker
        xgb_model = xgb_model.get_booster()
    if not isinstance(xgb_model, (xgb.Booster, str, os.PathLike, bytearray)):
        raise TypeError(
            "xgb_model must be an xgboost.Booster, the path of a saved model or a fitted "
            f"ApproxXGBRanker, got {type(xgb_model).__name__}"
        )
    booster = xgb.Booster(model_file=xgb_model)
    booster.set_attr(best_iteration=None, best_score=None)
    return booster


class ApproxXGBRanker(BaseEstimator):
    """Gradient-boosted ranker on XGBoost with an approx_gbdt (or any callable) objective.

    Parameters
    ----------
    objective : callable, default approx_ndcg_obj
        ``f(preds, dmatrix) -> (grad, hess)``, e.g. :data:`approx_ndcg_obj`,
        :class:`ApproxNDCG` or :class:`ApproxAP` instances (an instance, not the class).
    n_estimators : int, default 100
        Boosting rounds (the upper bound when early stopping).
    learning_rate, max_depth, min_child_weight, reg_lambda, subsample, colsample_bytree,
    tree_method, max_bin, random_state, n_jobs
        XGBoost's parameters of the same meaning (``eta``, ``lambda``, ``seed``,
        ``nthread``), with XGBoost's defaults but ``learning_rate`` (XGBoost's is 0.3).
        ``min_child_weight=1`` and ``0.01`` rank within noise of each other on generated data
        and MQ2008
        (``benchmarks/results/min_child_weight``).
    eval_at : int or sequence of int, default (10,)
        Cut-offs of the ``ndcg@k`` metrics on ``eval_set``: approx_gbdt's exact NDCG@k
        (:func:`approx_gbdt.metrics.make_xgboost_metric`), the mean over the queries with a
        relevant document, equal scores ranked worst-first (as in :meth:`score`), weighted by
        ``sample_weight_eval_set``: row order does not matter. Early stopping watches the
        last cut-off on the last evaluation set. Unused when ``xgb_params`` sets
        ``eval_metric``.
    early_stopping_rounds : int, optional
        Stop when the watched metric has not improved for this many rounds (needs
        ``eval_set``).
    importance_type : str, default "gain"
        What :attr:`feature_importances_` measures (``Booster.get_score``'s
        ``importance_type``: "gain", "weight", "cover", "total_gain", "total_cover").
    xgb_params : dict, optional
        Further booster parameters (``xgboost.train``'s ``params``); they override the ones
        above. ``eval_metric`` replaces the exact ``ndcg@k`` by XGBoost's own metrics (its
        ``ndcg@k`` ranks equal scores in row order and counts a query without a relevant
        document as 1), early stopping then watching the last of them. The other arguments
        of ``xgboost.train`` ("callbacks", "obj", "num_boost_round", ...) are refused: they
        have parameters of their own here.
    callbacks : list of xgboost.callback.TrainingCallback, optional
        Passed to ``xgboost.train``. Every fit trains with a copy of them
        (``copy.deepcopy``), as ``sklearn.clone`` makes one for every fit of a search: a
        callback's state (an ``EarlyStopping``'s best score, a counter) starts as given each
        time and the objects passed in are left unchanged.

    Attributes
    ----------
    booster_ : xgboost.Booster
    evals_result_ : dict
        ``{"validation_<i>": {metric name: [value per round]}}`` of the rounds of the last
        fit (also :meth:`evals_result`).
    best_iteration_ : int
        Best round (0-based, counting the rounds of ``fit``'s ``xgb_model``) when early
        stopping was used, else the last round (``best_iteration`` is the same, as
        ``XGBRanker`` names it).
    best_score_ : float or None
        The validation metric at the best round when early stopping was used, else None
        (also ``best_score``).
    feature_importances_ : numpy.ndarray of shape (n_features,)
        ``importance_type`` per feature, normalised to sum to 1 (as ``XGBRanker``).
    n_features_in_ : int
    feature_names_in_ : numpy.ndarray of str
        The column names, when fitted on a DataFrame (or loaded from a booster with names).

    Notes
    -----
    Sample weights are per query (XGBoost's convention for ranking), in training
    (``sample_weight``) and evaluation (``sample_weight_eval_set``): one per query in the
    order of ``group``, or with ``qid`` in ascending order of the ids (not in order of first
    appearance). ``qid`` need not be sorted: rows are sorted stably by query id for
    training. A DataFrame's column names become the booster's feature names
    (``feature_names_in_``; XGBoost refuses duplicate names and names with ``[``, ``]`` or
    ``<``); ``predict`` and the evaluation sets then refuse a DataFrame with other columns or
    another order, as ``XGBRanker`` does. Predictions use the best round
    when early stopping was used. ``score(X, y, qid=...)`` is the mean NDCG@10 over queries;
    for cross-validation see :mod:`approx_gbdt.model_selection`.
    """

    def __init__(
        self,
        *,
        objective=approx_ndcg_obj,
        n_estimators=100,
        learning_rate=0.1,
        max_depth=6,
        min_child_weight=1.0,
        reg_lambda=1.0,
        subsample=1.0,
        colsample_bytree=1.0,
        tree_method="hist",
        max_bin=256,
        eval_at=(10,),
        early_stopping_rounds=None,
        random_state=0,
        n_jobs=None,
        importance_type="gain",
        xgb_params=None,
        callbacks=None,
    ):
        self.objective = objective
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.min_child_weight = min_child_weight
        self.reg_lambda = reg_lambda
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.tree_method = tree_method
        self.max_bin = max_bin
        self.eval_at = eval_at
        self.early_stopping_rounds = early_stopping_rounds
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.importance_type = importance_type
        self.xgb_params = xgb_params
        self.callbacks = callbacks

    def get_params(self, deep=True):
        """The estimator's parameters; with ``deep``, also the objective's options as
        ``objective__<option>`` (for ``GridSearchCV``), when it has them (``get_options``)."""
        params = super().get_params(deep=False)
        options = getattr(self.objective, "get_options", None)
        if deep and callable(options) and not isinstance(self.objective, type):
            params.update({f"objective__{k}": v for k, v in options().items()})
        return params

    def set_params(self, **params):
        """Set parameters; ``objective__<option>`` replaces the objective by a copy with
        those options changed (``objective.replace``), so that the instance passed in (the
        shared :data:`approx_ndcg_obj` by default) is never changed."""
        nested = {key.partition("__")[2]: params.pop(key)
                  for key in [k for k in params if k.startswith("objective__")]}
        super().set_params(**params)
        if nested:
            if not callable(getattr(self.objective, "replace", None)):
                raise ValueError(
                    f"objective {self.objective!r} has no options to set "
                    f"({', '.join('objective__' + k for k in nested)})"
                )
            try:
                self.objective = self.objective.replace(**nested)
            except TypeError as err:  # an unknown option: sklearn's error for a bad key
                raise ValueError(str(err)) from None
        return self

    def _params(self):
        """XGBoost's booster parameters and the names of the exact metrics (None when
        ``xgb_params`` sets XGBoost's own ``eval_metric``)."""
        if isinstance(self.objective, type):
            name = self.objective.__name__
            raise TypeError(
                f"objective is the class {name}, not an instance: pass {name}() "
                f"(or {name}(...) with options)"
            )
        if not callable(self.objective):
            raise TypeError(f"objective must be callable, got {self.objective!r}")
        _positive_int("n_estimators", self.n_estimators)
        if self.early_stopping_rounds is not None:
            _positive_int("early_stopping_rounds", self.early_stopping_rounds)
        eval_at = _cut_offs(self.eval_at)
        _check_importance_type(self.importance_type)
        extra = dict(self.xgb_params or {})
        for key in extra:
            if key in _TRAIN_ARGUMENTS:
                raise ValueError(
                    f"xgb_params[{key!r}] is an argument of xgboost.train, not a booster "
                    f"parameter: {_TRAIN_ARGUMENTS[key]}"
                )
        params = {
            "eta": self.learning_rate,
            "max_depth": self.max_depth,
            "min_child_weight": self.min_child_weight,
            "lambda": self.reg_lambda,
            "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree,
            "tree_method": self.tree_method,
            "max_bin": self.max_bin,
            "seed": self.random_state,
            "disable_default_eval_metric": 1,
        }
        if self.n_jobs is not None:
            params["nthread"] = self.n_jobs
        params.update(extra)
        if "eval_metric" in params:
            return params, None
        return params, [f"ndcg@{k}" for k in eval_at]

    def _copied_callbacks(self):
        """A deep copy of ``callbacks`` for one fit."""
        if self.callbacks is None:
            return []
        if isinstance(self.callbacks, xgb.callback.TrainingCallback):
            raise TypeError("callbacks must be a list of callbacks, got one callback")
        try:
            return copy.deepcopy(list(self.callbacks))
        except Exception as err:
            raise TypeError(
                f"every fit trains with a copy of callbacks (copy.deepcopy), which failed: {err}"
            ) from err

    def fit(
        self,
        X,
        y,
        *,
        group=None,
        qid=None,
        sample_weight=None,
        eval_set=None,
        eval_group=None,
        eval_qid=None,
        sample_weight_eval_set=None,
        verbose=False,
        xgb_model=None,
    ):
        """Fit on ``X, y`` with queries given by ``group`` (sizes) or ``qid`` (ids).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Relevance labels.
        group, qid : array-like, optional
            Query sizes (rows of a query contiguous) or one query id per row; exactly one.
        sample_weight : array-like of shape (n_queries,), optional
            One weight per query (see Notes of the class).
        eval_set : list of (X, y) pairs, optional
            Evaluation sets, recorded as ``validation_0``, ``validation_1``, ... in
            :meth:`evals_result`; early stopping watches the last one.
        eval_group, eval_qid : list, optional
            The queries of every evaluation set, as ``group`` or ``qid``.
        sample_weight_eval_set : list, optional
            Per-query weights (or None) of every evaluation set.
        verbose : bool or int, default False
            Print the evaluation every round (True) or every ``verbose`` rounds.
        xgb_model : xgboost.Booster, str, os.PathLike or ApproxXGBRanker, optional
            A model (or the path of one saved by XGBoost) to continue: ``n_estimators``
            more rounds are added to a copy of its trees. Its best round from early
            stopping is dropped; :attr:`best_iteration_` counts its rounds too.

        Returns
        -------
        ApproxXGBRanker
            The fitted estimator.
        """
        params, metrics = self._params()
        start = _start_model(xgb_model)
        callbacks = self._copied_callbacks()
        dtrain = _dmatrix(X, y, group, qid, sample_weight, "training data")
        names = dtrain.feature_names  # a DataFrame's columns, else None
        evals = []
        eval_set = list(eval_set or [])
        for name, seq in (("eval_group", eval_group), ("eval_qid", eval_qid),
                          ("sample_weight_eval_set", sample_weight_eval_set)):
            if seq is not None and len(seq) != len(eval_set):
                raise ValueError(f"{name} must have one entry per eval_set pair")
        for i, (Xv, yv) in enumerate(eval_set):
            gv = eval_group[i] if eval_group is not None else None
            qv = eval_qid[i] if eval_qid is not None else None
            wv = sample_weight_eval_set[i] if sample_weight_eval_set is not None else None
            evals.append((_dmatrix(Xv, yv, gv, qv, wv, f"eval_set[{i}]", names),
                          f"validation_{i}"))
        if self.early_stopping_rounds is not None and not evals:
            raise ValueError("early_stopping_rounds needs an eval_set")
        if (self.early_stopping_rounds is not None and metrics is not None
                and not np.any(evals[-1][0].get_label() > 0)):
            raise ValueError(
                f"eval_set[{len(evals) - 1}] has no relevant document (label > 0): its NDCG "
                "is the same for every model, so early stopping cannot choose a round"
            )
        if verbose and evals:
            period = 1 if verbose is True else int(verbose)
            callbacks.append(xgb.callback.EvaluationMonitor(period=period))
        if self.early_stopping_rounds is not None:
            # the last cut-off on the last set, as XGBoost stops on its last metric
            callbacks.append(xgb.callback.EarlyStopping(
                rounds=int(self.early_stopping_rounds), data_name=evals[-1][1],
                metric_name=metrics[-1] if metrics else None,
                maximize=True if metrics else None))
        record = {}
        exact = (_capped(make_xgboost_metric(metrics), self.n_jobs) if metrics and evals
                 else None)
        self.booster_ = xgb.train(
            params, dtrain, num_boost_round=int(self.n_estimators), evals=evals,
            obj=_capped(self.objective, self.n_jobs), custom_metric=exact,
            maximize=True if exact else None, evals_result=record, verbose_eval=False,
            xgb_model=start, callbacks=callbacks or None,
        )
        self.evals_result_ = record
        self._set_fitted(dtrain.num_col())
        return self

    def _set_fitted(self, n_features):
        self.n_features_in_ = n_features
        names = self.booster_.feature_names
        if names is not None:  # fitted on a DataFrame (or a booster saved with names)
            self.feature_names_in_ = np.asarray(names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        best = self.booster_.attr("best_iteration")
        if best is not None:  # early stopping recorded its best round in the booster
            self.best_iteration_ = int(best)
            self.best_score_ = float(self.booster_.attr("best_score"))
        else:
            self.best_iteration_ = self.booster_.num_boosted_rounds() - 1
            self.best_score_ = None
        self.best_iteration = self.best_iteration_
        self.best_score = self.best_score_

    def predict(self, X):
        """Scores (higher ranks first), from the best round when early stopping was used."""
        if not hasattr(self, "booster_"):
            raise _not_fitted()
        names = getattr(self, "feature_names_in_", None)
        names = None if names is None else list(names)
        _check_names(X, names, "predict")
        X = np.asarray(X) if not hasattr(X, "tocsr") else X.tocsr()
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has shape {X.shape}; the model was fitted on {self.n_features_in_} features"
            )
        return self.booster_.predict(
            xgb.DMatrix(X, feature_names=names), iteration_range=(0, self.best_iteration_ + 1)
        ).astype(np.float64)

    def score(self, X, y, *, qid=None, group=None, metric="ndcg@10"):
        """Mean ``metric`` (default NDCG@10) over the queries given by ``qid`` or ``group``.

        Ties ranked worst-first, queries without a relevant document left out
        (:func:`approx_gbdt.model_selection.score_queries`).
        """
        from approx_gbdt.model_selection import score_queries

        return score_queries(self.predict(X), y, qid=qid, group=group, metric=metric)

    def get_booster(self):
        """The fitted ``xgboost.Booster``."""
        if not hasattr(self, "booster_"):
            raise _not_fitted()
        return self.booster_

    @property
    def feature_importances_(self):
        """``importance_type`` of every feature, normalised to sum to 1 (0 for unused ones)."""
        booster = self.get_booster()
        _check_importance_type(self.importance_type)
        scores = booster.get_score(importance_type=self.importance_type)
        names = getattr(self, "feature_names_in_", None)
        keys = [f"f{i}" for i in range(self.n_features_in_)] if names is None else list(names)
        values = np.array([scores.get(key, 0.0) for key in keys], dtype=np.float32)
        total = values.sum()
        return values / total if total > 0 else values

    def evals_result(self):
        """The evaluation history of ``fit`` (``evals_result_``), as ``XGBRanker``."""
        if not hasattr(self, "evals_result_"):
            raise _not_fitted()
        return self.evals_result_

    def save_model(self, fname):
        """Save the booster in XGBoost's own format (``.json`` or ``.ubj``), which loads
        without approx_gbdt (``xgboost.Booster().load_model``) and with :meth:`load_model`."""
        self.get_booster().save_model(fname)

    def load_model(self, fname):
        """Load a booster saved by :meth:`save_model` (or by XGBoost); predictions use its
        best round when it was trained with early stopping."""
        booster = xgb.Booster()
        booster.load_model(fname)
        self.booster_ = booster
        self.evals_result_ = {}
        self._set_fitted(booster.num_features())
        return self
