"""One trainer for both hosts: the command line and the benchmarks train through
:func:`fit_ranker` (early stopping on an exact measure of :mod:`approx_gbdt.metrics`, as
:class:`ApproxXGBRanker` does with its own ``xgboost.train`` call).

Examples
--------
>>> from approx_gbdt import approx_ndcg_obj, fit_ranker, make_ranking_splits
>>> splits = make_ranking_splits((40, 10, 10), docs_per_query=(5, 15))
>>> fit = fit_ranker("lightgbm", approx_ndcg_obj, splits["train"], splits["valid"],
...                  num_boost_round=20, early_stopping_rounds=5, params={"verbosity": -1})
>>> fit.best_iteration <= fit.rounds_run <= 20
True
>>> fit.predict(splits["test"].X).shape == splits["test"].y.shape
True
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from approx_gbdt.utils import group_sizes_from_ptr

__all__ = ["FitResult", "fit_ranker"]

BACKENDS = ("lightgbm", "xgboost")


@dataclass(frozen=True)
class FitResult:
    """A trained booster and how its training went.

    Attributes
    ----------
    booster : lightgbm.Booster or xgboost.Booster
        The host's booster: LightGBM's holds the rounds up to the best one, XGBoost's every
        round trained (see :meth:`kept_booster`).
    backend : {"lightgbm", "xgboost"}
    best_iteration : int
        Number of rounds to keep: the best round on the validation data (1-based), or every
        round without early stopping.
    rounds_run : int
        Rounds trained.
    evals_result : dict
        ``{valid name: {metric name: [value per round]}}``, as both hosts record it.
    seconds : float
        Wall time of the host's training call.
    """

    booster: object
    backend: str
    best_iteration: int
    rounds_run: int
    evals_result: dict = field(repr=False)
    seconds: float

    def predict(self, X) -> np.ndarray:
        """Scores of the rows of ``X`` from the first ``best_iteration`` rounds (float64)."""
        if self.backend == "lightgbm":
            return np.asarray(self.booster.predict(X, num_iteration=self.best_iteration),
                              dtype=np.float64)
        import xgboost as xgb

        dmatrix = X if isinstance(X, xgb.DMatrix) else xgb.DMatrix(X)
        return self.booster.predict(
            dmatrix, iteration_range=(0, self.best_iteration)
        ).astype(np.float64)

    def kept_booster(self):
        """The booster cut to its first ``best_iteration`` rounds (XGBoost: a slice; LightGBM:
        the booster itself, which ``lgb.train`` already cut)."""
        if self.backend == "xgboost":
            return self.booster[: self.best_iteration]
        return self.booster

    def curve(self, metric: str, valid: str = "valid_0") -> list[float]:
        """Values of ``metric`` on the validation data ``valid``, one per round."""
        return list(self.evals_result.get(valid, {}).get(metric, []))


def _lightgbm_dataset(data, reference=None):
    import lightgbm as lgb

    if isinstance(data, lgb.Dataset):
        return data
    return lgb.Dataset(data.X, data.y, group=group_sizes_from_ptr(data.group_ptr),
                       weight=getattr(data, "weights", None), reference=reference,
                       free_raw_data=False)


def _xgboost_dmatrix(data):
    import xgboost as xgb

    if isinstance(data, xgb.DMatrix):
        return data
    d = xgb.DMatrix(data.X, label=data.y, weight=getattr(data, "weights", None))
    d.set_group(group_sizes_from_ptr(data.group_ptr))
    return d


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def fit_ranker(
    backend: str,
    objective,
    train,
    valid=None,
    *,
    valid_names: Sequence[str] | None = None,
    params: dict | None = None,
    num_boost_round: int = 100,
    early_stopping_rounds: int | None = None,
    metric: str | Sequence[str] | None = "ndcg@10",
    callbacks: Sequence = (),
) -> FitResult:
    """Train a LightGBM or XGBoost ranker with a native or an approx_gbdt objective.

    Parameters
    ----------
    backend : {"lightgbm", "xgboost"}
    objective : str or callable
        A host objective name (``"lambdarank"``, ``"rank:ndcg"``, ...) or an approx_gbdt
        objective (any callable the host accepts).
    train : lightgbm.Dataset, xgboost.DMatrix or data with ``X``, ``y``, ``group_ptr``
        (e.g. :class:`approx_gbdt.RankingData`; an optional ``weights`` attribute is passed on
        with the host's weight convention).
    valid : the same, or a list or tuple of them, optional
        Validation data.
    valid_names : list of str, optional
        Their names in ``evals_result`` (default ``valid_0``, ``valid_1``, ...).
    params : dict, optional
        Host parameters; the objective and, when ``metric`` is given, the host's own metric
        (turned off) are set here.
    num_boost_round : int
    early_stopping_rounds : int, optional
        Stop when the first metric has not improved for this many rounds on the validation
        data (LightGBM: on any validation set; XGBoost: on the last one). Needs ``valid``.
    metric : str or list of str or None
        approx_gbdt metric names (:func:`approx_gbdt.metrics.parse_metric`) evaluated on the
        validation data, higher is better; ``None`` leaves the metrics to ``params``.
    callbacks : sequence
        Host callbacks (``lgb.train``'s or ``xgb.train``'s), e.g. a progress bar.

    Returns
    -------
    FitResult
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    num_boost_round = _positive_int("num_boost_round", num_boost_round)
    if early_stopping_rounds is not None:
        early_stopping_rounds = _positive_int("early_stopping_rounds", early_stopping_rounds)
    # several validation sets: a list or tuple of them (a RankingData is a tuple of arrays)
    several = isinstance(valid, (list, tuple)) and not hasattr(valid, "X")
    valid = [] if valid is None else list(valid) if several else [valid]
    if early_stopping_rounds is not None and not valid:
        raise ValueError("early_stopping_rounds needs validation data (valid=)")
    names = [f"valid_{i}" for i in range(len(valid))] if valid_names is None \
        else list(valid_names)
    if len(names) != len(valid):
        raise ValueError(f"got {len(names)} valid_names for {len(valid)} validation sets")
    metrics = [metric] if isinstance(metric, str) else list(metric or [])
    fit = _fit_lightgbm if backend == "lightgbm" else _fit_xgboost
    return fit(objective, train, valid, names, dict(params or {}), num_boost_round,
               early_stopping_rounds, metrics, list(callbacks))


def _fit_lightgbm(objective, train, valid, names, params, rounds, patience, metrics, callbacks):
    import lightgbm as lgb

    from approx_gbdt.metrics import make_lightgbm_feval

    params["objective"] = objective
    if metrics:
        params["metric"] = "None"
    dtrain = _lightgbm_dataset(train)
    valid_sets = [_lightgbm_dataset(v, reference=dtrain) for v in valid]
    record = {}
    if valid_sets:
        callbacks.append(lgb.record_evaluation(record))
    if patience is not None:
        callbacks.append(lgb.early_stopping(patience, first_metric_only=True, verbose=False))
    start = time.perf_counter()
    booster = lgb.train(params, dtrain, num_boost_round=rounds, valid_sets=valid_sets,
                        valid_names=names,
                        feval=make_lightgbm_feval(metrics) if metrics and valid_sets else None,
                        callbacks=callbacks)
    seconds = time.perf_counter() - start
    run = booster.current_iteration()  # lgb.train keeps the best rounds only
    best = booster.best_iteration if patience is not None and booster.best_iteration else run
    run = max([run, *(len(c) for v in record.values() for c in v.values())])
    return FitResult(booster, "lightgbm", int(best), int(run), record, seconds)


def _fit_xgboost(objective, train, valid, names, params, rounds, patience, metrics, callbacks):
    import xgboost as xgb

    from approx_gbdt.metrics import evaluate, make_xgboost_metric

    obj = None
    if isinstance(objective, str):
        params["objective"] = objective
    else:
        obj = objective
    if metrics:
        params["disable_default_eval_metric"] = 1
    dtrain = _xgboost_dmatrix(train)
    evals = [(_xgboost_dmatrix(v), name) for v, name in zip(valid, names, strict=True)]
    record = {}
    if patience is not None and metrics:  # stop on the first metric, as LightGBM does
        first = next(iter(evaluate([0.0], [1.0], [0, 1], metrics[:1])))
        callbacks.append(xgb.callback.EarlyStopping(
            rounds=patience, metric_name=first, data_name=evals[-1][1], maximize=True))
        patience_arg = None
    else:
        patience_arg = patience
    start = time.perf_counter()
    booster = xgb.train(params, dtrain, num_boost_round=rounds, evals=evals, obj=obj,
                        custom_metric=make_xgboost_metric(metrics) if metrics and evals
                        else None,
                        maximize=True if metrics and evals else None,
                        early_stopping_rounds=patience_arg, evals_result=record,
                        verbose_eval=False, callbacks=callbacks or None)
    seconds = time.perf_counter() - start
    run = booster.num_boosted_rounds()
    best = booster.best_iteration + 1 if patience is not None else run
    return FitResult(booster, "xgboost", int(best), int(run), record, seconds)
