"""Model selection with scikit-learn: query-aware scorers and a ranker fitted from query ids.

A ranking measure is a mean over queries, so a scorer needs each test document's query, and
a cross-validation splitter must keep a query's documents together. scikit-learn routes
per-document metadata to both with *metadata routing* (scikit-learn >= 1.4)::

    import sklearn
    from sklearn.model_selection import GridSearchCV, GroupKFold

    sklearn.set_config(enable_metadata_routing=True)
    search = GridSearchCV(
        ApproxXGBRanker().set_fit_request(qid=True),
        {"learning_rate": [0.05, 0.1]},
        scoring=make_scorer("ndcg@10"),       # asks for qid
        cv=GroupKFold(n_splits=3),            # splits by groups=qid
    )
    search.fit(X, y, groups=qid, qid=qid)

``lightgbm.LGBMRanker`` takes query *sizes* (``group=``), which a splitter cannot cut;
:class:`QueryIdRanker` fits it from per-document query ids instead::

    search = GridSearchCV(
        QueryIdRanker(LGBMRanker(objective=approx_ndcg_obj)).set_fit_request(qid=True),
        {"ranker__learning_rate": [0.05, 0.1]},
        scoring=make_scorer("ndcg@10"), cv=GroupKFold(n_splits=3),
    )
    search.fit(X, y, groups=qid, qid=qid)
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone

from approx_gbdt.metrics import evaluate, parse_metric
from approx_gbdt.utils import group_ptr_from_qid, group_ptr_from_sizes

__all__ = ["QueryIdRanker", "make_scorer", "query_order", "score_queries"]


def _missing_ids(qid):
    """Whether any query id is missing (NaN, None, pandas' NA) or infinite."""
    if qid.dtype.kind == "f":
        return not np.all(np.isfinite(qid))
    if qid.dtype.kind == "O":
        try:
            import pandas as pd
        except ImportError:
            return any(q is None or q != q for q in qid)
        return bool(pd.isna(qid).any())
    return False


def query_order(n_rows, *, qid=None, group=None):
    """Row order that makes every query contiguous, and the query boundaries in that order.

    Parameters
    ----------
    n_rows : int
    qid : array_like, shape (n_rows,), optional
        Query id of every row, in any order (rows are sorted stably by it).
    group : array_like of int, optional
        Query sizes of rows already grouped (LightGBM's ``group=``).

    Returns
    -------
    order : numpy.ndarray of int or None
        ``None`` when the rows are already in order.
    group_ptr : numpy.ndarray of int64

    Examples
    --------
    >>> order, ptr = query_order(4, qid=[7, 3, 7, 3])
    >>> order.tolist(), ptr.tolist()
    ([1, 3, 0, 2], [0, 2, 4])
    """
    if (qid is None) == (group is None):
        raise ValueError("pass exactly one of group= (query sizes) or qid= (query ids)")
    if group is not None:
        return None, group_ptr_from_sizes(group, n_rows=n_rows)
    qid = np.asarray(qid)
    if qid.shape != (n_rows,):
        raise ValueError(f"qid has shape {qid.shape}, expected ({n_rows},)")
    if _missing_ids(qid):
        raise ValueError("qid must be finite: a missing (NaN, None, NA) or infinite query id "
                         "leaves its rows in no query")
    order = None
    if np.any(qid[1:] < qid[:-1]):
        order = np.argsort(qid, kind="stable")
        qid = qid[order]
    return order, group_ptr_from_qid(qid)


def score_queries(scores, labels, *, qid=None, group=None, metric="ndcg@10", threshold=1.0,
                  ties="worst", undefined="exclude"):
    """Mean over queries of one measure, with queries given by ids or sizes.

    As :func:`approx_gbdt.metrics.evaluate` for one ``metric``, but queries come from
    ``qid`` (any row order) or ``group`` (sizes), the way scikit-learn style rankers take them.

    Examples
    --------
    >>> score_queries([0.2, 0.9, 0.1, 0.5], [0, 1, 2, 0], qid=[1, 1, 2, 2])
    0.8154648767857288
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels, dtype=np.float64).ravel()
    if scores.shape != labels.shape:
        raise ValueError(f"got {scores.size} scores for {labels.size} labels")
    order, ptr = query_order(labels.size, qid=qid, group=group)
    if order is not None:
        scores, labels = scores[order], labels[order]
    spec = parse_metric(metric)
    values = evaluate(scores, labels, ptr, [spec], threshold=threshold, ties=ties,
                      undefined=undefined)
    return values[spec.name]


def _scorer_function(y_true, y_pred, *, qid=None, **options):
    if qid is None:
        raise ValueError(
            "this ranking scorer needs the query id of every test document: enable "
            "scikit-learn's metadata routing (sklearn.set_config(enable_metadata_routing=True)) "
            "and pass qid=... to the search's fit (see approx_gbdt.model_selection)"
        )
    return score_queries(y_pred, y_true, qid=qid, **options)


def make_scorer(metric="ndcg@10", *, threshold=1.0, ties="worst", undefined="exclude"):
    """A scikit-learn scorer of a ranking measure that takes the query ids as ``qid``.

    The scorer requests ``qid`` through scikit-learn's metadata routing (scikit-learn >= 1.4,
    ``sklearn.set_config(enable_metadata_routing=True)``): ``GridSearchCV(...).fit(X, y,
    groups=qid, qid=qid)`` hands it the ids of each test fold. It averages ``metric`` over
    the queries as :func:`score_queries` does (higher is better).

    Parameters
    ----------
    metric : str, default "ndcg@10"
        A name for :func:`approx_gbdt.metrics.parse_metric` ("ndcg@10", "map", "mrr", ...).
    threshold, ties, undefined
        As in :func:`approx_gbdt.metrics.evaluate`.

    Examples
    --------
    >>> import sklearn
    >>> from approx_gbdt import ApproxXGBRanker
    >>> X = np.random.default_rng(0).random((40, 3))
    >>> y, qid = (X[:, 0] * 3).round(), np.repeat(np.arange(8), 5)
    >>> ranker = ApproxXGBRanker(n_estimators=5, min_child_weight=0.01).fit(X, y, qid=qid)
    >>> scorer = make_scorer("ndcg@10")
    >>> with sklearn.config_context(enable_metadata_routing=True):
    ...     bool(scorer(ranker, X, y, qid=qid) > 0.9)   # NDCG@10 on the training data
    True
    """
    import sklearn
    from sklearn.metrics import make_scorer as sklearn_make_scorer

    spec = parse_metric(metric)
    options = {"metric": spec.name, "threshold": threshold, "ties": ties,
               "undefined": undefined}
    evaluate([0.0], [1.0], [0, 1], [spec], **{k: v for k, v in options.items()
                                              if k != "metric"})  # fail now on a bad option
    scorer = sklearn_make_scorer(_scorer_function, **options)
    # The request is recorded on the scorer now and used whenever routing is enabled.
    with sklearn.config_context(enable_metadata_routing=True):
        scorer.set_score_request(qid=True)
    return scorer


class QueryIdRanker(MetaEstimatorMixin, BaseEstimator):
    """Fit a ranker that takes query sizes (``LGBMRanker``) from per-document query ids.

    ``fit(X, y, qid=...)`` sorts the rows stably by query id, turns the ids into query sizes
    and fits a clone of ``ranker`` with ``group=``; a cross-validation splitter can then cut
    the data by query (``GroupKFold`` with ``groups=qid``), which it cannot do with sizes.

    Parameters
    ----------
    ranker : estimator
        Fitted as ``ranker.fit(X, y, group=sizes, sample_weight=..., **fit_params)``, e.g.
        ``lightgbm.LGBMRanker(objective=approx_ndcg_obj)``. Grid keys are
        ``"ranker__<parameter>"``.

    Attributes
    ----------
    ranker_ : estimator
        The fitted clone (a DataFrame ``X`` reaches it as a DataFrame, rows reordered).
    n_features_in_ : int
    feature_names_in_ : numpy.ndarray of str
        The fitted clone's, when it has them (a DataFrame ``X``).
    """

    def __init__(self, ranker):
        self.ranker = ranker

    def fit(self, X, y, *, qid, sample_weight=None, **fit_params):
        """Fit on ``X, y`` with per-document query ids ``qid`` (any order) and optional
        per-document ``sample_weight``; ``fit_params`` go to ``ranker.fit`` unchanged."""
        if hasattr(X, "tocsr"):
            X = X.tocsr()
        elif not hasattr(X, "iloc"):  # a DataFrame stays one: column names, categoricals
            X = np.asarray(X)
        y = np.asarray(y)
        order, ptr = query_order(X.shape[0], qid=qid)
        if order is not None:
            X, y = (X.iloc[order] if hasattr(X, "iloc") else X[order]), y[order]
            if sample_weight is not None:
                sample_weight = np.asarray(sample_weight)[order]
        if sample_weight is not None:
            fit_params["sample_weight"] = sample_weight
        self.ranker_ = clone(self.ranker).fit(X, y, group=np.diff(ptr), **fit_params)
        self.n_features_in_ = X.shape[1]
        if hasattr(self.ranker_, "feature_names_in_"):
            self.feature_names_in_ = self.ranker_.feature_names_in_
        elif hasattr(self, "feature_names_in_"):  # a refit without names
            del self.feature_names_in_
        return self

    def predict(self, X):
        """Scores of the fitted ranker (higher ranks first)."""
        if not hasattr(self, "ranker_"):
            raise ValueError("this QueryIdRanker is not fitted yet: call fit first")
        return self.ranker_.predict(X)

    def score(self, X, y, *, qid, metric="ndcg@10"):
        """Mean ``metric`` (default NDCG@10) over the queries of ``X, y``."""
        return score_queries(self.predict(X), y, qid=qid, metric=metric)
