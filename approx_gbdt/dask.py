"""Distributed training on Dask without splitting a query across workers.

A listwise objective needs every document of a query in the same call: the gradient of a
document depends on the scores of all the others. LightGBM and XGBoost on Dask compute the
objective on each worker from the rows that worker holds, so a query whose rows sit in two
partitions on two workers becomes two smaller queries and the surrogate is silently wrong.
The helpers here put every query inside one partition (and so on one worker) and check it:

- :func:`partition_by_query` shuffles a Dask DataFrame so that each query lies in one
  partition, its rows contiguous; :func:`check_query_partitions` verifies that and describes
  the layout (rows and query sizes per partition).
- :func:`lightgbm_ranking_data` builds the ``X, y, group`` collections for
  ``lightgbm.dask.DaskLGBMRanker`` with the group chunks aligned to the row chunks.
- :func:`xgboost_ranking_dmatrix` builds a ``DaskDMatrix`` with a dense, increasing query id,
  and :func:`train_xgboost` trains with ``xgboost.dask.train(..., obj=...)`` through a
  :class:`QueryCheckedObjective`, which stops training with :class:`SplitQueryError` if the
  workers together see more query groups than the data holds.

Dask is imported lazily: ``import approx_gbdt`` never needs it. Install it with
``pip install approx-gbdt[dask]``.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import numpy as np

from approx_gbdt.hosts import host_data

__all__ = [
    "LightGBMRankingData",
    "QueryCheckedObjective",
    "QueryLayout",
    "SplitQueryError",
    "XGBoostRankingData",
    "check_query_partitions",
    "lightgbm_ranking_data",
    "partition_by_query",
    "train_xgboost",
    "xgboost_ranking_dmatrix",
]

_INSTALL_HINT = "pip install approx-gbdt[dask]"


def _require(module: str):
    """Import ``module`` or raise an ImportError that says how to install the Dask extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"approx_gbdt.dask needs {module.split('.')[0]!r} ({exc}); "
            f"install the Dask extra with `{_INSTALL_HINT}`"
        ) from exc


def _shown(query_id):
    """A query id as the user wrote it (``3``, ``'q3'``; not ``np.int64(3)``)."""
    return repr(query_id.item() if isinstance(query_id, np.generic) else query_id)


class SplitQueryError(ValueError):
    """A query's rows are spread over several partitions or workers (or are not contiguous)."""


class QueryLayout(NamedTuple):
    """Where the queries of a Dask DataFrame lie, one entry per partition.

    Attributes
    ----------
    n_rows : tuple of int
        Rows of each partition.
    group_sizes : tuple of numpy.ndarray
        Sizes of the queries of each partition, in row order.
    """

    n_rows: tuple
    group_sizes: tuple

    @property
    def n_queries(self) -> int:
        return int(sum(s.shape[0] for s in self.group_sizes))

    @property
    def queries_per_partition(self) -> tuple:
        return tuple(int(s.shape[0]) for s in self.group_sizes)


class LightGBMRankingData(NamedTuple):
    """Aligned inputs of ``DaskLGBMRanker.fit``: ``ranker.fit(**data._asdict())``.

    ``X`` and ``y`` have one chunk (partition) per row block and ``group`` has the query sizes
    of the same block as its chunk, so LightGBM hands each worker whole queries.
    """

    X: Any
    y: Any
    group: Any
    sample_weight: Any = None


class XGBoostRankingData(NamedTuple):
    """A ``DaskDMatrix`` whose queries each lie in one partition, with the query count."""

    dtrain: Any
    n_queries: int
    n_rows: int


# -- layout ------------------------------------------------------------------------------------
def _partition_queries(qid) -> tuple:
    """(first query id of each run of equal ids, run lengths, whether the runs are distinct)."""
    import pandas as pd

    q = qid.to_numpy() if hasattr(qid, "to_numpy") else np.asarray(qid)
    if q.shape[0] == 0:
        return q[:0], np.zeros(0, dtype=np.int64), True
    if bool(pd.isna(q).any()):
        raise ValueError("the query id column has missing values")
    starts = np.flatnonzero(q[1:] != q[:-1]) + 1
    ptr = np.concatenate(([0], starts, [q.shape[0]])).astype(np.int64)
    firsts = q[ptr[:-1]]
    contiguous = pd.unique(firsts).shape[0] == firsts.shape[0]
    return firsts, np.diff(ptr), contiguous


def _check_column(df, name, what):
    if name not in df.columns:
        raise KeyError(
            f"{what} column {name!r} is not in the DataFrame (columns: {list(df.columns)})"
        )


def check_query_partitions(df, qid: str) -> QueryLayout:
    """Check that every query lies in exactly one partition, its rows contiguous.

    Computes only the query id column (one pass over it).

    Parameters
    ----------
    df : dask.dataframe.DataFrame
    qid : str
        Name of the query id column.

    Returns
    -------
    QueryLayout
        Rows and query sizes of each partition.

    Raises
    ------
    SplitQueryError
        If a query id appears in two partitions, or its rows within a partition are not
        contiguous. :func:`partition_by_query` fixes both.
    """
    dask = _require("dask")
    pd = _require("pandas")
    _check_column(df, qid, "query id")
    parts = df[qid].to_delayed()
    summaries = dask.compute(*[dask.delayed(_partition_queries)(p) for p in parts])
    for i, (firsts, _, contiguous) in enumerate(summaries):
        if not contiguous:
            dup = pd.Series(firsts)
            bad = dup[dup.duplicated()].iloc[0]
            raise SplitQueryError(
                f"the rows of query {_shown(bad)} are not contiguous in partition {i}; "
                "use approx_gbdt.dask.partition_by_query to group them"
            )
    ids = np.concatenate([s[0] for s in summaries]) if summaries else np.zeros(0)
    owner = np.repeat(np.arange(len(summaries)), [s[0].shape[0] for s in summaries])
    if ids.shape[0]:
        counts = pd.Series(owner).groupby(pd.Series(ids).to_numpy()).nunique()
        split = counts[counts > 1]
        if split.shape[0]:
            shown = []
            for q in split.index[:5]:
                where = sorted(set(owner[ids == q].tolist()))
                shown.append(f"{_shown(q)} in partitions {where}")
            raise SplitQueryError(
                f"{split.shape[0]} quer{'y is' if split.shape[0] == 1 else 'ies are'} split "
                f"across partitions ({'; '.join(shown)}"
                f"{', ...' if split.shape[0] > 5 else ''}); a listwise objective would see "
                "them as separate queries. Use approx_gbdt.dask.partition_by_query first"
            )
    return QueryLayout(
        n_rows=tuple(int(s[1].sum()) for s in summaries),
        group_sizes=tuple(s[1] for s in summaries),
    )


def _sort_by_query(part, qid):
    return part.sort_values(qid, kind="stable")


def partition_by_query(df, qid: str, *, npartitions: int | None = None, force: bool = False):
    """Lay out ``df`` so that every query lies in one partition, its rows contiguous.

    If the frame is already laid out that way (for example read from files sorted by query,
    one query never straddling two files) and ``npartitions`` asks for no change, it is
    returned as it is. Otherwise its rows are shuffled by hashing the query id (every row of
    a query goes to the same partition) and each partition is sorted by query id with a stable
    sort, so documents keep their order within a query.

    Parameters
    ----------
    df : dask.dataframe.DataFrame
    qid : str
        Name of the query id column.
    npartitions : int, optional
        Number of output partitions; default the input's.
    force : bool, default False
        Shuffle even if the layout is already right.

    Returns
    -------
    dask.dataframe.DataFrame
        Lazy; the builders below check the result with :func:`check_query_partitions`.
    """
    _require("dask.dataframe")
    _check_column(df, qid, "query id")
    if npartitions is not None and npartitions < 1:
        raise ValueError(f"npartitions must be at least 1, got {npartitions}")
    if not force and npartitions in (None, df.npartitions):
        try:
            check_query_partitions(df, qid)
            return df
        except SplitQueryError:
            pass
    npartitions = df.npartitions if npartitions is None else int(npartitions)
    shuffled = df.shuffle(on=qid, npartitions=npartitions)
    return shuffled.map_partitions(_sort_by_query, qid, meta=df._meta)


def _prepare(df, qid, columns, *, repartition, persist):
    """Partition by query, persist, check, and drop empty partitions."""
    for name, what in columns:
        _check_column(df, name, what)
    if repartition:
        df = partition_by_query(df, qid)
    if persist:
        df = df.persist()
    layout = check_query_partitions(df, qid)
    keep = [i for i, n in enumerate(layout.n_rows) if n > 0]
    if not keep:
        raise ValueError("the DataFrame has no rows")
    if len(keep) < len(layout.n_rows):
        df = df.partitions[keep]
        layout = QueryLayout(
            n_rows=tuple(layout.n_rows[i] for i in keep),
            group_sizes=tuple(layout.group_sizes[i] for i in keep),
        )
    return df, layout


def _features(df, features, exclude):
    if features is None:
        features = [c for c in df.columns if c not in exclude]
    else:
        features = list(features)
        for c in features:
            _check_column(df, c, "feature")
        clash = sorted(set(features) & set(exclude))
        if clash:
            raise ValueError(f"columns {clash} are both features and query id/label/weight")
    if not features:
        raise ValueError("no feature columns left")
    return features


# -- LightGBM ----------------------------------------------------------------------------------
def lightgbm_ranking_data(
    df,
    *,
    qid: str,
    label: str,
    features=None,
    weight: str | None = None,
    repartition: bool = True,
    persist: bool = True,
) -> LightGBMRankingData:
    """Inputs for ``lightgbm.dask.DaskLGBMRanker.fit`` with whole queries per chunk.

    LightGBM pairs the i-th chunk of ``group`` with the i-th row chunk of ``X`` and builds each
    worker's Dataset from its chunks, so each row chunk must hold whole queries and the group
    chunk must hold exactly their sizes. This function guarantees both.

    Parameters
    ----------
    df : dask.dataframe.DataFrame
        One row per document, with a query id column and a label column.
    qid, label : str
        Column names of the query id and the relevance label.
    features : list of str, optional
        Feature columns; default every column but ``qid``, ``label`` and ``weight``.
    weight : str, optional
        Column of per-document weights (LightGBM's convention).
    repartition : bool, default True
        Call :func:`partition_by_query` first. With False the layout is only checked.
    persist : bool, default True
        Persist the partitioned frame in the cluster, so that the layout check and training
        do not recompute the shuffle.

    Returns
    -------
    LightGBMRankingData
        ``(X, y, group, sample_weight)``: ``X`` a Dask DataFrame of the features, ``y`` (and
        ``sample_weight``) Dask Series with the same partitions, ``group`` a Dask Array of query
        sizes whose chunks are the partitions' query counts.

    Examples
    --------
    >>> data = lightgbm_ranking_data(ddf, qid="qid", label="y")        # doctest: +SKIP
    >>> DaskLGBMRanker(objective=approx_ndcg_obj).fit(**data._asdict())  # doctest: +SKIP
    """
    da = _require("dask.array")
    exclude = {qid, label} | ({weight} if weight is not None else set())
    cols = [(qid, "query id"), (label, "label")] + ([(weight, "weight")] if weight else [])
    df, layout = _prepare(df, qid, cols, repartition=repartition, persist=persist)
    feats = _features(df, features, exclude)
    sizes = np.concatenate(layout.group_sizes).astype(np.int64)
    group = da.from_array(sizes, chunks=(layout.queries_per_partition,))
    return LightGBMRankingData(
        X=df[feats],
        y=df[label],
        group=group,
        sample_weight=df[weight] if weight is not None else None,
    )


# -- XGBoost -----------------------------------------------------------------------------------
def _dense_qid(part, qid, offsets, partition_info=None):
    """Query ids ``offset + 0, 1, ...`` in row order: increasing across partitions."""
    pd = importlib.import_module("pandas")
    offset = offsets[partition_info["number"]] if partition_info is not None else 0
    q = part[qid].to_numpy()
    if q.shape[0] == 0:
        return pd.Series(np.zeros(0, dtype=np.int64), index=part.index, name="__qid__")
    codes = np.concatenate(([0], np.cumsum(q[1:] != q[:-1]))).astype(np.int64)
    return pd.Series(codes + offset, index=part.index, name="__qid__")


def xgboost_ranking_dmatrix(
    client,
    df,
    *,
    qid: str,
    label: str,
    features=None,
    repartition: bool = True,
    persist: bool = True,
    quantile: bool = False,
    ref=None,
    **dmatrix_kwargs,
) -> XGBoostRankingData:
    """A ``DaskDMatrix`` (or ``DaskQuantileDMatrix``) in which no query crosses a partition.

    The query id handed to XGBoost is a dense integer code that increases in partition order,
    so XGBoost's per-worker concatenation of partitions is already sorted by query and is not
    re-sorted (XGBoost sorts each worker's rows by qid when they are not).

    Parameters
    ----------
    client : distributed.Client or None
    df : dask.dataframe.DataFrame
    qid, label : str
        Column names of the query id and the relevance label.
    features : list of str, optional
        Feature columns; default every column but ``qid`` and ``label``.
    repartition, persist : bool, default True
        As in :func:`lightgbm_ranking_data`.
    quantile : bool, default False
        Build a ``DaskQuantileDMatrix`` (less memory with ``tree_method="hist"``).
    ref : DaskQuantileDMatrix, optional
        Reference for a validation ``DaskQuantileDMatrix``.
    **dmatrix_kwargs
        Passed to the DMatrix constructor (``missing``, ``enable_categorical``, ...).
        XGBoost's Dask interface takes no weights together with ``qid``.

    Returns
    -------
    XGBoostRankingData
        ``(dtrain, n_queries, n_rows)``.
    """
    xgb_dask = _require("xgboost.dask")
    df, layout = _prepare(
        df, qid, [(qid, "query id"), (label, "label")], repartition=repartition, persist=persist
    )
    feats = _features(df, features, {qid, label})
    offsets = np.concatenate(([0], np.cumsum(layout.queries_per_partition))).tolist()
    codes = df.map_partitions(_dense_qid, qid, offsets, meta=("__qid__", "i8"))
    kwargs = dict(dmatrix_kwargs)
    if quantile:
        cls = xgb_dask.DaskQuantileDMatrix
        if ref is not None:
            kwargs["ref"] = ref
    else:
        if ref is not None:
            raise ValueError("ref= only applies to quantile=True")
        cls = xgb_dask.DaskDMatrix
    dtrain = cls(client, df[feats], df[label], qid=codes, **kwargs)
    return XGBoostRankingData(dtrain, layout.n_queries, int(sum(layout.n_rows)))


class QueryCheckedObjective:
    """Wrap an objective so that distributed XGBoost training stops on a split query.

    What a worker's objective sees is its DMatrix: labels and query boundaries, not query ids.
    A query split across workers therefore looks like two valid queries on two workers. What
    *is* detectable is the count: at the first call the workers add up their query groups
    and rows (an allreduce over XGBoost's collective) and compare them with the totals of the
    data; more groups than queries means a query was split, fewer means queries were merged.
    Every worker gets the same sums, so all of them raise together (no worker is left waiting).

    The wrapper also answers an empty worker (one that holds only validation data) with empty
    gradients instead of an error. Other calls are passed to ``objective`` unchanged.

    Parameters
    ----------
    objective : callable
        ``f(preds, dmatrix)``, e.g. ``approx_ndcg_obj``.
    n_queries : int
        Number of queries of the training data.
    n_rows : int, optional
        Number of rows of the training data (checked too when given).
    """

    def __init__(self, objective, n_queries: int, n_rows: int | None = None):
        if not callable(objective):
            raise TypeError(f"objective must be callable, got {objective!r}")
        self.objective = objective
        self.n_queries = int(n_queries)
        self.n_rows = None if n_rows is None else int(n_rows)
        self._checked = False

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_checked"] = False
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __repr__(self):
        return (
            f"QueryCheckedObjective({self.objective!r}, n_queries={self.n_queries}, "
            f"n_rows={self.n_rows})"
        )

    def __call__(self, preds, data, weight=None, group=None):
        is_xgb = type(data).__module__.split(".")[0] == "xgboost"
        if is_xgb and not self._checked:
            self._check_xgboost(data)
            self._checked = True
        if is_xgb and data.num_row() == 0:
            empty = np.zeros(0, dtype=np.float64)
            return empty, empty.copy()
        if weight is None and group is None:
            return self.objective(preds, data)
        return self.objective(preds, data, weight, group)

    def _check_xgboost(self, dmatrix):
        rows = int(dmatrix.num_row())
        groups = host_data(dmatrix).group_ptr.shape[0] - 1
        local = np.array([groups, rows], dtype=np.float64)
        collective = importlib.import_module("xgboost.collective")
        if collective.is_distributed():
            total = collective.allreduce(local, collective.Op.SUM)
            where = f"the {collective.get_world_size()} workers together"
        else:
            total = local
            where = "the objective"
        n_groups, n_rows = int(total[0]), int(total[1])
        if self.n_rows is not None and n_rows != self.n_rows:
            raise SplitQueryError(
                f"{where} hold {n_rows} rows but the training data has {self.n_rows}"
            )
        if n_groups > self.n_queries:
            raise SplitQueryError(
                f"{where} see {n_groups} query groups but the training data has "
                f"{self.n_queries} queries: at least one query was split across partitions "
                "or workers, and a listwise objective would treat its parts as separate "
                "queries. Build the data with approx_gbdt.dask.xgboost_ranking_dmatrix"
            )
        if n_groups < self.n_queries:
            raise SplitQueryError(
                f"{where} see {n_groups} query groups but the training data has "
                f"{self.n_queries} queries: some queries were merged (equal query ids on "
                "adjacent rows of different queries)"
            )


def _eval_dmatrices(client, evals, dtrain_ref, *, qid, label, features, quantile, kwargs):
    out = []
    for item in evals or ():
        data, name = item
        if not hasattr(data, "npartitions"):  # already a DaskDMatrix
            out.append((data, name))
            continue
        built = xgboost_ranking_dmatrix(
            client, data, qid=qid, label=label, features=features, quantile=quantile,
            ref=dtrain_ref if quantile else None, **kwargs,
        )
        out.append((built.dtrain, name))
    return out


def train_xgboost(
    client,
    params: dict,
    df,
    *,
    qid: str,
    label: str,
    obj,
    num_boost_round: int = 100,
    features=None,
    evals=None,
    quantile: bool = False,
    check: bool = True,
    dmatrix_kwargs: dict | None = None,
    **train_kwargs,
) -> dict:
    """Partition ``df`` by query and train with ``xgboost.dask.train(..., obj=obj)``.

    Parameters
    ----------
    client : distributed.Client or None
    params : dict
        XGBoost parameters (``tree_method="hist"`` is the usual choice).
    df : dask.dataframe.DataFrame
        Training data, one row per document.
    qid, label : str
        Column names of the query id and the relevance label.
    obj : callable
        Objective, e.g. ``approx_ndcg_obj`` or ``ApproxAP(alpha=5)``.
    num_boost_round : int, default 100
    features : list of str, optional
        Feature columns; default every column but ``qid`` and ``label``.
    evals : list of (dask DataFrame or DaskDMatrix, str), optional
        Validation data; DataFrames are built like the training data (same columns), so
        XGBoost's own ranking metrics (``eval_metric="ndcg@10"``) see whole queries.
    quantile : bool, default False
        Use ``DaskQuantileDMatrix``.
    check : bool, default True
        Wrap ``obj`` in :class:`QueryCheckedObjective`.
    dmatrix_kwargs : dict, optional
        Passed to the DMatrix constructors.
    **train_kwargs
        Passed to ``xgboost.dask.train`` (``early_stopping_rounds``, ``verbose_eval``, ...).

    Returns
    -------
    dict
        ``xgboost.dask.train``'s result: ``{"booster": Booster, "history": dict}``.
    """
    xgb_dask = _require("xgboost.dask")
    kwargs = dict(dmatrix_kwargs or {})
    if quantile and "max_bin" in params:  # QuantileDMatrix and Booster must agree on it
        kwargs.setdefault("max_bin", params["max_bin"])
    data = xgboost_ranking_dmatrix(
        client, df, qid=qid, label=label, features=features, quantile=quantile, **kwargs
    )
    eval_list = _eval_dmatrices(
        client, evals, data.dtrain, qid=qid, label=label, features=features,
        quantile=quantile, kwargs=kwargs,
    )
    objective = QueryCheckedObjective(obj, data.n_queries, data.n_rows) if check else obj
    return xgb_dask.train(
        client,
        params,
        data.dtrain,
        num_boost_round=num_boost_round,
        evals=eval_list or None,
        obj=objective,
        **train_kwargs,
    )
