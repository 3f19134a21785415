"""Exact ranking measures per query, and adapters for LightGBM and XGBoost evaluation.

All measures take ``(scores, labels, group_ptr)``: one score and one graded label per document,
and the query boundaries ``group_ptr = [0, n_1, n_1 + n_2, ..., n]`` (see :mod:`approx_gbdt.utils`).
They return one float64 value per query, NaN where the measure is undefined (no relevant
document); :func:`mean_over_queries` turns those into one number under a stated rule.

Ranks
-----
Documents are ranked by descending score; ``rank`` is 1-based. Equal scores are ordered by
``ties``:

``"worst"`` (default)
    Within a group of equal scores, the less relevant documents come first (ascending label,
    input order among equal labels). This is the worst case for every measure here, so a model
    gets no credit from the order the documents happen to be stored in, and a constant model
    scores the lowest possible value.
``"stable"``
    Equal scores keep their input order. This is what LightGBM's ``ndcg`` metric does
    (a stable sort by descending score).

Measures
--------
With ``l_(i)`` the label of the document at rank ``i`` and ``n`` the query's length:

- NDCG@k: ``DCG@k / IDCG@k``, ``DCG@k = sum_{i <= min(k, n)} (2^l_(i) - 1) / log2(1 + i)``;
  IDCG@k is the same sum over the labels sorted in descending order. Undefined when every
  label is 0.
- AP@k, precision@k and MRR use binary relevance ``r = 1[label >= threshold]`` and
  ``R = sum r``. They are undefined when ``R = 0``.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from approx_gbdt._pairs import _ENTRY, argsort_desc
from approx_gbdt.hosts import host_data
from approx_gbdt.utils import MAX_GRADED_LABEL, check_group_ptr

__all__ = [
    "MetricSpec",
    "average_precision",
    "evaluate",
    "make_lightgbm_feval",
    "make_xgboost_metric",
    "mean_over_queries",
    "mrr",
    "ndcg",
    "parse_metric",
    "precision",
    "query_weights",
    "rbp",
    "recall",
]

_TIES = ("worst", "stable")
_UNDEFINED = ("exclude", "one", "zero")


# --------------------------------------------------------------------------------------------
# Numba kernels, float64 throughout: the sort (O(n log n)) one query per prange iteration, the
# measures' sums over the ranked labels (O(n)) on one thread.
# --------------------------------------------------------------------------------------------


@njit(parallel=True, cache=True, **_ENTRY)
def _ranked_labels(scores, labels, group_ptr, worst):
    """Labels rearranged, within each query, into rank order (descending score; ties by
    ascending label when ``worst``, else in input order)."""
    out = np.empty_like(labels)
    for q in prange(group_ptr.size - 1):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        s = scores[a:b]
        y = labels[a:b]
        order = np.empty(b - a, dtype=np.int32)
        if worst:
            by_label = np.empty(b - a, dtype=np.int32)
            argsort_desc(-y, by_label)  # ascending label, stable
            argsort_desc(s[by_label], order)
            order = by_label[order]
        else:
            argsort_desc(s, order)
        out[a:b] = y[order]
    return out


@njit(cache=True, **_ENTRY)
def _ndcg_kernel(ranked, group_ptr, k):
    n_queries = group_ptr.size - 1
    out = np.empty(n_queries)
    for q in range(n_queries):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        ideal_order = np.empty(b - a, dtype=np.int32)
        argsort_desc(ranked[a:b], ideal_order)
        dcg = 0.0
        idcg = 0.0
        for i in range(min(k, b - a)):
            discount = 1.0 / np.log2(i + 2.0)
            dcg += (2.0 ** ranked[a + i] - 1.0) * discount
            idcg += (2.0 ** ranked[a + ideal_order[i]] - 1.0) * discount
        out[q] = dcg / idcg if idcg > 0.0 else np.nan
    return out


@njit(cache=True, **_ENTRY)
def _ap_kernel(ranked, group_ptr, k, threshold):
    n_queries = group_ptr.size - 1
    out = np.empty(n_queries)
    for q in range(n_queries):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n_rel = 0
        for i in range(a, b):
            if ranked[i] >= threshold:
                n_rel += 1
        hits = 0
        total = 0.0
        for i in range(min(k, b - a)):
            if ranked[a + i] >= threshold:
                hits += 1
                total += hits / (i + 1.0)
        out[q] = total / min(n_rel, k) if n_rel > 0 else np.nan
    return out


@njit(cache=True, **_ENTRY)
def _top_k_hits(ranked, group_ptr, k, threshold):
    """Per query: relevant documents in the top ``k`` of the ranked labels, and in all."""
    n_queries = group_ptr.size - 1
    hits = np.zeros(n_queries)
    n_rel = np.zeros(n_queries)
    for q in range(n_queries):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        for i in range(b - a):
            if ranked[a + i] >= threshold:
                n_rel[q] += 1
                if i < k:
                    hits[q] += 1
    return hits, n_rel


def _precision_kernel(ranked, group_ptr, k, threshold):
    hits, n_rel = _top_k_hits(ranked, group_ptr, k, threshold)
    return np.where(n_rel > 0, hits / k, np.nan)


def _recall_kernel(ranked, group_ptr, k, threshold):
    hits, n_rel = _top_k_hits(ranked, group_ptr, k, threshold)
    return np.divide(hits, n_rel, out=np.full(hits.shape, np.nan), where=n_rel > 0)


@njit(cache=True, **_ENTRY)
def _rbp_kernel(ranked, group_ptr, persistence, threshold):
    n_queries = group_ptr.size - 1
    out = np.empty(n_queries)
    for q in range(n_queries):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        n_rel = 0
        total = 0.0
        weight = 1.0 - persistence
        for i in range(b - a):
            if ranked[a + i] >= threshold:
                n_rel += 1
                total += weight
            weight *= persistence
        out[q] = total if n_rel > 0 else np.nan
    return out


@njit(cache=True, **_ENTRY)
def _mrr_kernel(ranked, group_ptr, threshold):
    n_queries = group_ptr.size - 1
    out = np.empty(n_queries)
    for q in range(n_queries):
        a = group_ptr[q]
        b = group_ptr[q + 1]
        out[q] = np.nan
        for i in range(b - a):
            if ranked[a + i] >= threshold:
                out[q] = 1.0 / (i + 1.0)
                break
    return out


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _check_inputs(scores, labels, group_ptr):
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    if scores.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {scores.shape}")
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
    if scores.size != labels.size:
        raise ValueError(
            f"scores and labels differ in length ({scores.size} scores, {labels.size} labels)"
        )
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite (found NaN or infinity)")
    if not np.all(np.isfinite(labels)):
        raise ValueError("labels must be finite (found NaN or infinity)")
    if np.any(labels < 0):
        raise ValueError(f"labels must be >= 0, found {labels.min()}")
    ptr = check_group_ptr(group_ptr, scores.size)
    return np.ascontiguousarray(scores), np.ascontiguousarray(labels), ptr


def _ndcg_values(ranked, ptr, k):
    """NDCG per query, refusing labels whose gain ``2^y - 1`` overflows float64 (at 1000
    the ideal DCG would need some 10^8 documents in one query to overflow)."""
    if ranked.size and ranked.max() > MAX_GRADED_LABEL:
        raise ValueError(
            f"label {ranked.max():g} is too large for the NDCG gain 2^y - 1 in float64 "
            f"(labels must be at most {MAX_GRADED_LABEL:g}, as for the objectives)"
        )
    return _ndcg_kernel(ranked, ptr, k)


def _check_k(k, *, required: bool) -> int | None:
    if k is None:
        if required:
            raise ValueError("k is required for this measure (a cutoff >= 1)")
        return None
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an integer >= 1 or None, got {k!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return _kernel_k(int(k))


def _check_ties(ties) -> bool:
    """Return True for the worst-case rule."""
    if ties not in _TIES:
        raise ValueError(f"ties must be one of {_TIES}, got {ties!r}")
    return ties == "worst"


def _check_threshold(threshold) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError(f"threshold must be a real number, got {threshold!r}")
    threshold = float(threshold)
    if not (math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"threshold must be finite and > 0, got {threshold}")
    return threshold


def _check_persistence(persistence) -> float:
    if isinstance(persistence, bool) or not isinstance(persistence, numbers.Real):
        raise TypeError(f"persistence must be a real number, got {persistence!r}")
    persistence = float(persistence)
    if not 0.0 < persistence < 1.0:
        raise ValueError(f"persistence must be in (0, 1), got {persistence}")
    return persistence


_MAX_K = 2**62  # a cutoff above it is taken as it: beyond any list, and an int64 for Numba


def _kernel_k(k: int) -> int:
    """``k`` as the kernels take it: at most ``2**62`` (NDCG, MAP and recall beyond every list
    are the whole list's; precision, hits / k, is then below 1e-18 either way)."""
    return min(k, _MAX_K)


def _cutoff(k: int | None, n_rows: int) -> int:
    """The cutoff handed to the kernels; k=None means the whole list."""
    return max(n_rows, 1) if k is None else _kernel_k(k)


# --------------------------------------------------------------------------------------------
# Measures
# --------------------------------------------------------------------------------------------


def ndcg(scores, labels, group_ptr, *, k: int | None = None, ties: str = "worst") -> np.ndarray:
    r"""Normalised discounted cumulative gain of each query.

    .. math::

        \mathrm{NDCG@k} = \frac{1}{\mathrm{IDCG@k}}
            \sum_{i=1}^{\min(k, n)} \frac{2^{l_{(i)}} - 1}{\log_2(1 + i)}

    where :math:`l_{(i)}` is the label at rank :math:`i` and IDCG@k the same sum over the
    labels sorted in descending order (also truncated at ``k``).

    Parameters
    ----------
    scores, labels : array_like of float, shape (n,)
        Model scores and graded labels (``0 <= labels <= 1000``, so that the gain
        ``2^y - 1`` stays finite in float64; larger labels get a ``ValueError``, as in the
        objectives).
    group_ptr : array_like of int, shape (n_queries + 1,)
        Query boundaries ``[0, n_1, n_1 + n_2, ..., n]``.
    k : int, optional
        Cutoff; ``None`` (default) uses the whole list. ``k`` may exceed the list length.
    ties : {"worst", "stable"}
        Order of equal scores (see the module docstring).

    Returns
    -------
    numpy.ndarray of float64, shape (n_queries,)
        NDCG@k per query in [0, 1]; NaN where IDCG is 0 (every label is 0).

    Examples
    --------
    >>> ndcg([3.0, 2.0, 1.0], [0, 1, 2], [0, 3]).round(4).tolist()
    [0.5869]
    """
    scores, labels, ptr = _check_inputs(scores, labels, group_ptr)
    k = _check_k(k, required=False)
    ranked = _ranked_labels(scores, labels, ptr, _check_ties(ties))
    return _ndcg_values(ranked, ptr, _cutoff(k, scores.size))


def average_precision(
    scores,
    labels,
    group_ptr,
    *,
    k: int | None = None,
    threshold: float = 1.0,
    ties: str = "worst",
) -> np.ndarray:
    r"""Average precision of each query, with binary relevance ``r = 1[label >= threshold]``.

    .. math::

        \mathrm{AP@k} = \frac{1}{\min(R, k)} \sum_{i=1}^{\min(k, n)} r_{(i)}
            \frac{\sum_{j \le i} r_{(j)}}{i},
        \qquad R = \sum_i r_i

    With ``k=None`` this is the standard full-list AP (normaliser ``R``). With a cutoff the
    normaliser is ``min(R, k)``, so that a perfect top-k list scores 1; this is LightGBM's
    ``map@k`` (with ``threshold`` between 0 and 1 for integer labels: LightGBM counts
    ``label > 0.5`` as relevant).

    Parameters
    ----------
    scores, labels, group_ptr
        As in :func:`ndcg`.
    k : int, optional
        Cutoff; ``None`` (default) uses the whole list.
    threshold : float, default 1.0
        Documents with ``label >= threshold`` are relevant; must be > 0.
    ties : {"worst", "stable"}
        Order of equal scores.

    Returns
    -------
    numpy.ndarray of float64, shape (n_queries,)
        AP per query in [0, 1]; NaN where no document is relevant.

    Examples
    --------
    >>> average_precision([3.0, 2.0, 1.0], [0, 1, 2], [0, 3]).round(4).tolist()
    [0.5833]
    """
    scores, labels, ptr = _check_inputs(scores, labels, group_ptr)
    k = _check_k(k, required=False)
    threshold = _check_threshold(threshold)
    ranked = _ranked_labels(scores, labels, ptr, _check_ties(ties))
    return _ap_kernel(ranked, ptr, _cutoff(k, scores.size), threshold)


def precision(
    scores, labels, group_ptr, *, k: int, threshold: float = 1.0, ties: str = "worst"
) -> np.ndarray:
    r"""Precision at ``k`` of each query, with binary relevance ``r = 1[label >= threshold]``.

    .. math::

        \mathrm{P@k} = \frac{1}{k} \sum_{i=1}^{\min(k, n)} r_{(i)}

    A list shorter than ``k`` is still divided by ``k`` (as trec_eval does), so such a query
    cannot reach 1.

    Parameters
    ----------
    scores, labels, group_ptr
        As in :func:`ndcg`.
    k : int
        Cutoff (required).
    threshold : float, default 1.0
        Documents with ``label >= threshold`` are relevant; must be > 0.
    ties : {"worst", "stable"}
        Order of equal scores.

    Returns
    -------
    numpy.ndarray of float64, shape (n_queries,)
        P@k per query in [0, 1]; NaN where no document is relevant.
    """
    scores, labels, ptr = _check_inputs(scores, labels, group_ptr)
    k = _check_k(k, required=True)
    threshold = _check_threshold(threshold)
    ranked = _ranked_labels(scores, labels, ptr, _check_ties(ties))
    return _precision_kernel(ranked, ptr, k, threshold)


def recall(
    scores, labels, group_ptr, *, k: int, threshold: float = 1.0, ties: str = "worst"
) -> np.ndarray:
    r"""Recall at ``k`` of each query, with binary relevance ``r = 1[label >= threshold]``.

    .. math::

        \mathrm{R@k} = \frac{1}{R} \sum_{i=1}^{\min(k, n)} r_{(i)}, \qquad R = \sum_i r_i

    Parameters and ties as in :func:`precision`.

    Returns
    -------
    numpy.ndarray of float64, shape (n_queries,)
        R@k per query in [0, 1]; NaN where no document is relevant.

    Examples
    --------
    >>> recall([3.0, 2.0, 1.0], [1, 0, 2], [0, 3], k=2).tolist()
    [0.5]
    """
    scores, labels, ptr = _check_inputs(scores, labels, group_ptr)
    k = _check_k(k, required=True)
    threshold = _check_threshold(threshold)
    ranked = _ranked_labels(scores, labels, ptr, _check_ties(ties))
    return _recall_kernel(ranked, ptr, k, threshold)


def rbp(
    scores,
    labels,
    group_ptr,
    *,
    persistence: float = 0.8,
    threshold: float = 1.0,
    ties: str = "worst",
) -> np.ndarray:
    r"""Rank-biased precision (Moffat & Zobel 2008) of each query, binary relevance.

    .. math::

        \mathrm{RBP} = (1 - p) \sum_{i=1}^{n} r_{(i)} \, p^{i - 1}, \qquad
        r = 1[\text{label} \ge \text{threshold}]

    with the persistence ``p`` (the probability that a user goes on to the next document).

    Returns
    -------
    numpy.ndarray of float64, shape (n_queries,)
        RBP per query in [0, 1); NaN where no document is relevant (as the other measures
        here, so that :func:`mean_over_queries` applies the same rule).

    Examples
    --------
    >>> rbp([3.0, 2.0, 1.0], [1, 0, 2], [0, 3], persistence=0.5).tolist()
    [0.625]
    """
    scores, labels, ptr = _check_inputs(scores, labels, group_ptr)
    persistence = _check_persistence(persistence)
    threshold = _check_threshold(threshold)
    ranked = _ranked_labels(scores, labels, ptr, _check_ties(ties))
    return _rbp_kernel(ranked, ptr, persistence, threshold)


def mrr(scores, labels, group_ptr, *, threshold: float = 1.0, ties: str = "worst") -> np.ndarray:
    r"""Reciprocal rank of the first relevant document of each query.

    .. math::

        \mathrm{RR} = \frac{1}{\min\{i : r_{(i)} = 1\}}, \qquad r = 1[\text{label} \ge
        \text{threshold}]

    Returns
    -------
    numpy.ndarray of float64, shape (n_queries,)
        RR per query in (0, 1]; NaN where no document is relevant. Its mean over queries
        is the MRR.
    """
    scores, labels, ptr = _check_inputs(scores, labels, group_ptr)
    threshold = _check_threshold(threshold)
    ranked = _ranked_labels(scores, labels, ptr, _check_ties(ties))
    return _mrr_kernel(ranked, ptr, threshold)


def mean_over_queries(values, *, undefined: str = "exclude", weights=None) -> float:
    """Mean of per-query values, with a stated rule for undefined (NaN) queries.

    Parameters
    ----------
    values : array_like of float, shape (n_queries,)
        Per-query values from one of the measures; NaN marks an undefined query.
    undefined : {"exclude", "one", "zero"}
        ``"exclude"`` (default, as Bruch et al. 2019) averages over the defined queries only;
        ``"one"`` counts an undefined query as 1 (LightGBM's rule for ``ndcg`` and ``map``);
        ``"zero"`` counts it as 0.
    weights : array_like of float, shape (n_queries,), optional
        Query weights (finite, non-negative): the weighted mean ``sum w_q v_q / sum w_q`` over
        the queries counted, as LightGBM's and XGBoost's ranking metrics take weights.

    Returns
    -------
    float
        The mean; NaN when there is nothing to average (no query, or every query undefined
        under ``"exclude"``, or zero total weight).

    Examples
    --------
    >>> mean_over_queries([0.5, float("nan")]), mean_over_queries([0.5, float("nan")],
    ...                                                           undefined="one")
    (0.5, 0.75)
    >>> mean_over_queries([0.5, 1.0], weights=[3.0, 1.0])
    0.625
    """
    if undefined not in _UNDEFINED:
        raise ValueError(f"undefined must be one of {_UNDEFINED}, got {undefined!r}")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {values.shape}")
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != values.shape:
            raise ValueError(f"weights has shape {weights.shape}, expected {values.shape} "
                             "(one per query)")
        if not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise ValueError("weights must be finite and non-negative")
    missing = np.isnan(values)
    if undefined == "exclude":
        values = values[~missing]
        weights = None if weights is None else weights[~missing]
    else:
        values = np.where(missing, 1.0 if undefined == "one" else 0.0, values)
    if weights is None:
        return float(values.mean()) if values.size else float("nan")
    total = weights.sum()
    return float(weights @ values / total) if total > 0 else float("nan")


def query_weights(weights, group_ptr):
    """Per-query weights from per-query (``n_queries``) or per-document (``n``) ones.

    Parameters
    ----------
    weights : array_like of float or None
        Finite, non-negative: one per query, or one per document (a query's weight is then the
        mean of its documents', as LightGBM's ranking metrics take them).
    group_ptr : array_like of int, shape (n_queries + 1,)

    Returns
    -------
    numpy.ndarray of float64, shape (n_queries,), or None
        ``None`` for ``weights=None``.

    Examples
    --------
    >>> query_weights([1.0, 3.0, 5.0], [0, 2, 3]).tolist()
    [2.0, 5.0]
    """
    if weights is None:
        return None
    ptr = np.asarray(group_ptr, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64).ravel()
    nq, n = ptr.shape[0] - 1, int(ptr[-1])
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and non-negative")
    if w.shape[0] == nq:
        return w
    if w.shape[0] != n:
        raise ValueError(f"{w.shape[0]} weights for {nq} queries of {n} documents: give one "
                         "per query or one per document")
    sizes = np.diff(ptr)
    sums = np.bincount(np.repeat(np.arange(nq), sizes), weights=w, minlength=nq)
    return np.divide(sums, sizes, out=np.zeros(nq), where=sizes > 0)


# --------------------------------------------------------------------------------------------
# Metric specs ("ndcg@10", "map", "p@5", "mrr") and evaluation of several at once
# --------------------------------------------------------------------------------------------


class MetricSpec(NamedTuple):
    """A parsed metric name: ``measure`` in {"ndcg", "map", "precision", "recall", "mrr",
    "rbp"}, cutoff ``k``."""

    name: str
    measure: str
    k: int | None


_SPEC_RE = re.compile(r"^(ndcg|map|p|precision|recall|mrr|rbp)(?:@(\d+))?$")


def parse_metric(spec: str) -> MetricSpec:
    """Parse ``"ndcg"``, ``"ndcg@k"``, ``"map"``, ``"map@k"``, ``"p@k"``, ``"recall@k"``,
    ``"mrr"`` or ``"rbp"`` (persistence 0.8).

    ``"precision@k"`` is accepted for ``"p@k"``. Case and surrounding spaces are ignored.

    Examples
    --------
    >>> parse_metric("NDCG@10")
    MetricSpec(name='ndcg@10', measure='ndcg', k=10)
    """
    if not isinstance(spec, str):
        raise TypeError(f"a metric name must be a string, got {spec!r}")
    match = _SPEC_RE.match(spec.strip().lower())
    if match is None:
        raise ValueError(
            f"unknown metric {spec!r}: expected 'ndcg', 'ndcg@k', 'map', 'map@k', 'p@k', "
            "'recall@k', 'mrr' or 'rbp'"
        )
    measure, k = match.group(1), match.group(2)
    measure = "precision" if measure == "p" else measure
    k = None if k is None else int(k)
    if k is not None and k < 1:
        raise ValueError(f"metric {spec!r}: the cutoff must be >= 1")
    if measure == "precision" and k is None:
        raise ValueError(f"metric {spec!r}: precision needs a cutoff, e.g. 'p@10'")
    if measure == "recall" and k is None:
        raise ValueError(f"metric {spec!r}: recall needs a cutoff, e.g. 'recall@10'")
    if measure in ("mrr", "rbp") and k is not None:
        raise ValueError(f"metric {spec!r}: {measure} takes no cutoff")
    short = "p" if measure == "precision" else measure
    return MetricSpec(short if k is None else f"{short}@{k}", measure, k)


def _flatten_specs(specs) -> list[MetricSpec]:
    flat: list = []
    for spec in specs:
        if isinstance(spec, (list, tuple)) and not isinstance(spec, MetricSpec):
            flat.extend(spec)
        else:
            flat.append(spec)
    if not flat:
        raise ValueError("give at least one metric name, e.g. 'ndcg@10'")
    return [s if isinstance(s, MetricSpec) else parse_metric(s) for s in flat]


def _per_query(spec: MetricSpec, ranked, ptr, threshold: float) -> np.ndarray:
    n_rows = ranked.size
    if spec.measure == "ndcg":
        return _ndcg_values(ranked, ptr, _cutoff(spec.k, n_rows))
    if spec.measure == "map":
        return _ap_kernel(ranked, ptr, _cutoff(spec.k, n_rows), threshold)
    if spec.measure == "precision":
        return _precision_kernel(ranked, ptr, _kernel_k(spec.k), threshold)
    if spec.measure == "recall":
        return _recall_kernel(ranked, ptr, _kernel_k(spec.k), threshold)
    if spec.measure == "rbp":
        return _rbp_kernel(ranked, ptr, 0.8, threshold)
    return _mrr_kernel(ranked, ptr, threshold)


def evaluate(
    scores,
    labels,
    group_ptr,
    metrics: str | Iterable[str],
    *,
    threshold: float = 1.0,
    ties: str = "worst",
    undefined: str = "exclude",
    weights=None,
) -> dict[str, float]:
    """Mean over queries of several measures, ranking each query once.

    Parameters
    ----------
    scores, labels, group_ptr
        As in :func:`ndcg`.
    metrics : str or iterable of str
        Metric names for :func:`parse_metric`, e.g. ``["ndcg@10", "map"]``.
    threshold, ties
        As in :func:`average_precision`; ``threshold`` is not used by NDCG.
    undefined : {"exclude", "one", "zero"}
        Rule for queries with no relevant document, see :func:`mean_over_queries`.
    weights : array_like of float, optional
        Query weights for a weighted mean: one per query, or one per document (a query's
        weight is then the mean of its documents', as in LightGBM; :func:`query_weights`).

    Returns
    -------
    dict
        ``{name: mean value}`` in the order given.

    Examples
    --------
    >>> values = evaluate([3.0, 2.0, 1.0], [0, 1, 2], [0, 3], ["ndcg@2", "mrr"])
    >>> {name: round(value, 4) for name, value in values.items()}
    {'ndcg@2': 0.1738, 'mrr': 0.5}
    """
    specs = _flatten_specs([metrics] if isinstance(metrics, str) else list(metrics))
    if undefined not in _UNDEFINED:
        raise ValueError(f"undefined must be one of {_UNDEFINED}, got {undefined!r}")
    scores, labels, ptr = _check_inputs(scores, labels, group_ptr)
    threshold = _check_threshold(threshold)
    qw = query_weights(weights, ptr)
    ranked = _ranked_labels(scores, labels, ptr, _check_ties(ties))
    return {
        spec.name: mean_over_queries(_per_query(spec, ranked, ptr, threshold),
                                     undefined=undefined, weights=qw)
        for spec in specs
    }


# --------------------------------------------------------------------------------------------
# Adapters
# --------------------------------------------------------------------------------------------


def _check_prefix(prefix):
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a string, got {prefix!r}")
    return prefix


def make_lightgbm_feval(
    *metrics: str | Sequence[str],
    threshold: float = 1.0,
    ties: str = "worst",
    undefined: str = "exclude",
    prefix: str = "",
) -> Callable:
    """Evaluation function for ``lightgbm.train(..., feval=...)``.

    Parameters
    ----------
    *metrics : str or list of str
        Metric names (see :func:`parse_metric`), e.g. ``make_lightgbm_feval("ndcg@10", "map")``.
    threshold, ties, undefined
        As in :func:`evaluate`. ``ties="stable", undefined="one"`` reproduces LightGBM's own
        ``ndcg`` metric; with weights, where every query has a relevant document (LightGBM
        adds a query without one as 1 whatever its weight, then divides by the total weight;
        here it counts 1 at its weight).
    prefix : str, default ""
        Put before every name that LightGBM logs and records. LightGBM keys its evaluation
        history by name: next to its own metric of the same name (``"metric": "ndcg"`` with
        ``eval_at`` 10 is also ``ndcg@10``) both values land under one key of
        ``record_evaluation`` and ``best_score``, so give one of them a prefix (``"ag_"``) or
        leave LightGBM's out (``"metric": "None"``).

    Returns
    -------
    callable
        ``feval(preds, eval_data) -> [(prefix + name, value, True), ...]``. Query sizes come
        from ``eval_data.get_group()``; with per-document weights on ``eval_data`` each query
        weighs the mean of its documents' weights, as in LightGBM's own metrics.
    """
    specs = _flatten_specs(metrics)
    options = {"threshold": threshold, "ties": ties, "undefined": undefined}
    evaluate([0.0], [1.0], [0, 1], specs, **options)  # fail now on a bad option, not in training
    prefix = _check_prefix(prefix)

    def feval(preds, eval_data):
        data = host_data(eval_data)
        values = evaluate(preds, data.labels, data.group_ptr, specs, weights=data.weights,
                          **options)
        return [(prefix + name, value, True) for name, value in values.items()]

    return feval


def make_xgboost_metric(
    *metrics: str | Sequence[str],
    threshold: float = 1.0,
    ties: str = "worst",
    undefined: str = "exclude",
    prefix: str = "",
) -> Callable:
    """Evaluation function for ``xgboost.train(..., custom_metric=...)``.

    Parameters
    ----------
    *metrics : str or list of str
        Metric names (see :func:`parse_metric`), e.g. ``make_xgboost_metric("ndcg@10")``.
    threshold, ties, undefined
        As in :func:`evaluate`. ``ties="stable", undefined="one"`` gives XGBoost's ``ndcg``
        (with weights, where every query has a relevant document: XGBoost, as LightGBM, adds
        a query without one as 1 whatever its weight).
    prefix : str, default ""
        Put before every name. XGBoost keys ``evals_result`` by name: next to its own
        ``eval_metric`` of the same name (``"ndcg@5"``) both values land in one list, so give
        one of them a prefix (``"ag_"``) or leave that name out of XGBoost's
        ``eval_metric``.

    Returns
    -------
    callable
        ``metric(predt, dmatrix) -> (name, value)`` for one metric, or a list of such pairs for
        several. Query boundaries come from ``dmatrix.get_uint_info("group_ptr")``, query
        weights (XGBoost's, one per query) from ``dmatrix.get_weight()``. Every value is
        higher-is-better: pass ``maximize=True`` to ``xgboost.train`` for early stopping.
    """
    specs = _flatten_specs(metrics)
    options = {"threshold": threshold, "ties": ties, "undefined": undefined}
    evaluate([0.0], [1.0], [0, 1], specs, **options)
    prefix = _check_prefix(prefix)

    def metric(predt, dmatrix):
        data = host_data(dmatrix)
        values = evaluate(predt, data.labels, data.group_ptr, specs, weights=data.weights,
                          **options)
        pairs = [(prefix + name, value) for name, value in values.items()]
        return pairs[0] if len(pairs) == 1 else pairs

    return metric
