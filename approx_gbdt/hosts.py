"""What the host libraries hand to an objective or a metric, read in one place.

LightGBM, XGBoost and LightGBM's scikit-learn wrapper call a custom objective in three ways:

- ``lgb.train``: ``f(preds, lgb.Dataset)``; weights are per document.
- ``xgb.train``: ``f(preds, xgb.DMatrix)``; ranking weights are per query.
- ``lgb.LGBMRanker``: ``f(y_true, y_pred, weight, group)``, ``group`` the query sizes;
  weights are per document.

:func:`read_call` turns any of them into ``(scores, HostData)``, and :func:`host_data`
reads a ``lgb.Dataset`` or an ``xgb.DMatrix`` alone (for the evaluation functions), so the
objectives, the metric adapters, the Dask wrapper and the benchmarks share one reader.

Examples
--------
>>> import numpy as np
>>> scores, data = read_call(np.array([2.0, 0.0, 1.0]), np.array([0.3, 0.1, 0.2]),
...                          None, np.array([2, 1]))
>>> scores.tolist(), data.labels.tolist(), data.group_ptr.tolist(), data.host
([0.3, 0.1, 0.2], [2.0, 0.0, 1.0], [0, 2, 3], 'sklearn')
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from approx_gbdt.utils import group_ptr_from_sizes

__all__ = ["HostData", "doc_weights", "host_data", "host_threads", "read_call"]


@dataclass(frozen=True)
class HostData:
    """Labels, query boundaries and weights of one dataset, as a host library holds them.

    Attributes
    ----------
    labels : numpy.ndarray, shape (n,)
        The labels as the host returns them (not yet validated).
    group_ptr : numpy.ndarray of int64, shape (n_queries + 1,)
        Query boundaries ``[0, n_1, n_1 + n_2, ..., n]``.
    weights : numpy.ndarray or None
        The host's weights as given (per document or per query, see ``weight_kind``).
    weight_kind : {"doc", "query", None}
        How the host applies ``weights``: LightGBM per document, XGBoost's ranking objectives
        per query; ``None`` (a direct call) decides by their length.
    host : {"lightgbm", "xgboost", "sklearn"}
    threads : int or None
        The host's thread count for the objective's kernels: LightGBM's ``num_threads`` (or an
        alias) of the Dataset's parameters, XGBoost's global ``nthread``
        (``xgb.config_context``; a Booster's own ``nthread`` does not reach a custom
        objective); None for the kernels' default (``LGBMRanker`` passes no parameters).
    part : bool
        Whether the data is one worker's part of a distributed training run (XGBoost's
        collective of more than one worker; LightGBM's ``num_machines`` above 1 in the
        Dataset's parameters). False where the host does not say (``LGBMRanker``, also
        inside ``DaskLGBMRanker``).
    positions : bool
        Whether a LightGBM Dataset carries ``position=`` (the displayed positions that its
        lambdarank uses to learn a position bias; the approx objectives do not read them).
    """

    labels: np.ndarray
    group_ptr: np.ndarray
    weights: np.ndarray | None
    weight_kind: str | None
    host: str
    threads: int | None = None
    part: bool = False
    positions: bool = False

    def doc_weights(self) -> np.ndarray:
        """Per-document weights (an empty array when there are none); see :func:`doc_weights`."""
        return doc_weights(self.weights, self.group_ptr, self.weight_kind)


_THREAD_KEYS = ("num_threads", "num_thread", "nthread", "nthreads", "n_jobs")


def host_threads(params) -> int | None:
    """The thread count in a host library's parameters (``num_threads`` and its aliases), or
    None when it is unset or not positive (the library's own default)."""
    for key in _THREAD_KEYS:
        value = (params or {}).get(key)
        if value is not None:
            try:
                value = int(value)
            except (TypeError, ValueError):
                return None
            return value if value > 0 else None
    return None


def _xgboost_threads():
    import xgboost

    return host_threads({"nthread": xgboost.get_config().get("nthread")})


def _more_than_one(value) -> bool:
    try:
        return int(value) > 1
    except (TypeError, ValueError):
        return False


def _xgboost_workers() -> int:
    """Workers of XGBoost's collective (1 outside a distributed run)."""
    try:
        from xgboost import collective

        return int(collective.get_world_size())
    except Exception:  # an XGBoost without the collective module: not distributed
        return 1


def _library(obj) -> str:
    return type(obj).__module__.split(".")[0]


def host_data(data) -> HostData:
    """Read labels, query boundaries and weights from a ``lgb.Dataset`` or an ``xgb.DMatrix``.

    Raises
    ------
    ValueError
        The dataset has no labels or no query information.
    TypeError
        ``data`` is neither a LightGBM Dataset nor an XGBoost DMatrix.
    """
    library = _library(data)
    if library == "lightgbm":
        sizes = data.get_group()
        if sizes is None:
            raise ValueError(
                "the LightGBM Dataset has no query information: pass group= (query sizes) "
                "to lgb.Dataset"
            )
        labels = data.get_label()
        if labels is None:
            raise ValueError("the LightGBM Dataset has no labels")
        ptr = group_ptr_from_sizes(sizes, n_rows=np.shape(labels)[0])
        params = getattr(data, "params", None) or {}
        machines = params.get("num_machines", params.get("num_machine", 1))
        get_position = getattr(data, "get_position", None)  # LightGBM 4.1 and later
        return HostData(np.asarray(labels), ptr, data.get_weight(), "doc", "lightgbm",
                        host_threads(params), _more_than_one(machines),
                        get_position is not None and get_position() is not None)
    if library == "xgboost":
        labels = data.get_label()
        if data.num_row() == 0:  # a Dask worker that holds no rows
            return HostData(labels, np.zeros(1, dtype=np.int64), None, "query", "xgboost")
        ptr = np.asarray(data.get_uint_info("group_ptr"), dtype=np.int64)
        if ptr.size == 0:
            raise ValueError(
                "the XGBoost DMatrix has no query information: pass group= or qid= to DMatrix"
            )
        weights = data.get_weight()
        weights = None if weights.size == 0 else weights
        return HostData(labels, ptr, weights, "query", "xgboost", _xgboost_threads(),
                        _xgboost_workers() > 1)
    raise TypeError(
        f"expected a lightgbm.Dataset or an xgboost.DMatrix, got {type(data).__name__}"
    )


def read_call(first, second, weight=None, group=None):
    """``(scores, HostData)`` from the arguments a host passes to a custom objective.

    ``(preds, lgb.Dataset)`` and ``(preds, xgb.DMatrix)`` are recognised by the type of the
    second argument; otherwise the call is scikit-learn's ``(y_true, y_pred, weight, group)``
    (``lgb.LGBMRanker``), where ``group`` holds the query sizes.
    """
    if _library(second) in ("lightgbm", "xgboost"):
        return first, host_data(second)
    if group is None:
        raise ValueError(
            "an approx_gbdt objective needs query information: it is called as f(preds, "
            "lgb.Dataset), f(preds, xgb.DMatrix) or f(y_true, y_pred, weight, group)"
        )
    labels = np.asarray(first)
    ptr = group_ptr_from_sizes(group, n_rows=labels.shape[0])
    return second, HostData(labels, ptr, weight, None, "sklearn")


def doc_weights(weights, group_ptr, kind=None) -> np.ndarray:
    """Per-document float64 weights (empty for none) from per-document or per-query ones.

    Parameters
    ----------
    weights : array_like or None
    group_ptr : numpy.ndarray of int
    kind : {"doc", "query", None}
        ``None`` decides by the length: ``n`` weights are per document, ``n_queries`` per query
        (when every query has one document the gradient is zero either way).
    """
    if weights is None:
        return np.empty(0)
    w = np.asarray(weights, dtype=np.float64).ravel()
    n = int(group_ptr[-1])
    nq = group_ptr.shape[0] - 1
    if kind is None:
        kind = "doc" if w.shape[0] == n else "query" if w.shape[0] == nq else None
    expected = n if kind == "doc" else nq
    if kind is None or w.shape[0] != expected:
        raise ValueError(
            f"got {w.shape[0]} weights; expected one per document ({n}) or one per query ({nq})"
        )
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and non-negative")
    if kind == "query":
        w = np.repeat(w, np.diff(group_ptr))
    return np.ascontiguousarray(w)
