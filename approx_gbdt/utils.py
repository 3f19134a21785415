"""Query-group bookkeeping shared by the objectives, metrics and data loaders.

Every function in approx_gbdt describes queries by ``group_ptr``: the query boundaries
``[0, n_1, n_1 + n_2, ..., n]`` (XGBoost's ``group_ptr``), so that the documents of query ``q``
are ``slice(group_ptr[q], group_ptr[q + 1])``. LightGBM and the scikit-learn wrappers describe
them by group *sizes* ``[n_1, n_2, ...]``; :func:`group_ptr_from_sizes` converts.
"""

from __future__ import annotations

import numpy as np

# The largest graded label: the gain 2^y - 1 of NDCG and DCG must stay finite in float64
# (2^1024 overflows), for the objectives and the exact metrics alike.
MAX_GRADED_LABEL = 1000.0

__all__ = [
    "MAX_GRADED_LABEL",
    "check_group_ptr",
    "group_ptr_from_qid",
    "group_ptr_from_sizes",
    "group_sizes_from_ptr",
]


def group_ptr_from_sizes(sizes, *, n_rows: int | None = None) -> np.ndarray:
    """Query boundaries from query sizes.

    Parameters
    ----------
    sizes : array_like of int, shape (n_queries,)
        Number of documents of each query, in row order.
    n_rows : int, optional
        If given, the sizes must add up to it.

    Returns
    -------
    numpy.ndarray of int64, shape (n_queries + 1,)
        ``[0, cumsum(sizes)]``.

    Examples
    --------
    >>> group_ptr_from_sizes([2, 3]).tolist()
    [0, 2, 5]
    """
    sizes = np.asarray(sizes)
    if sizes.ndim != 1:
        raise ValueError(f"group sizes must be 1-D, got shape {sizes.shape}")
    if sizes.size and not np.issubdtype(sizes.dtype, np.integer):
        if not np.all(np.isfinite(sizes)) or np.any(sizes != np.round(sizes)):
            raise ValueError("group sizes must be whole numbers")
    sizes = sizes.astype(np.int64)
    if np.any(sizes <= 0):
        bad = int(np.flatnonzero(sizes <= 0)[0])
        raise ValueError(f"group sizes must be positive: query {bad} has size {sizes[bad]}")
    ptr = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    if n_rows is not None and ptr[-1] != n_rows:
        raise ValueError(
            f"group sizes add up to {ptr[-1]} documents but there are {n_rows} rows"
        )
    return ptr


def group_sizes_from_ptr(group_ptr) -> np.ndarray:
    """Query sizes ``diff(group_ptr)`` as int64 (LightGBM's ``group``)."""
    return np.diff(np.asarray(group_ptr, dtype=np.int64))


def group_ptr_from_qid(qid) -> np.ndarray:
    """Query boundaries from a per-row query id whose rows are contiguous by query.

    Raises
    ------
    ValueError
        If the rows of some query are not contiguous (the id reappears after another id).
    """
    qid = np.asarray(qid)
    if qid.ndim != 1:
        raise ValueError(f"qid must be 1-D, got shape {qid.shape}")
    if qid.size == 0:
        return np.zeros(1, dtype=np.int64)
    starts = np.flatnonzero(qid[1:] != qid[:-1]) + 1
    ptr = np.concatenate(([0], starts, [qid.size])).astype(np.int64)
    firsts = qid[ptr[:-1]]
    if np.unique(firsts).size != firsts.size:
        raise ValueError("the rows of each query must be contiguous (sort the data by qid)")
    return ptr


def check_group_ptr(group_ptr, n_rows: int) -> np.ndarray:
    """Validate query boundaries against the number of rows; return them as int64.

    Raises
    ------
    ValueError
        If ``group_ptr`` is not 1-D, does not start at 0, does not end at ``n_rows``,
        or has an empty query (two equal consecutive boundaries).
    """
    ptr = np.asarray(group_ptr)
    if ptr.ndim != 1 or ptr.size < 1:
        raise ValueError(f"group_ptr must be a 1-D array [0, ..., n], got shape {ptr.shape}")
    if ptr.size and not np.issubdtype(ptr.dtype, np.integer):
        if not np.all(np.isfinite(ptr)) or np.any(ptr != np.round(ptr)):
            raise ValueError("group_ptr must hold whole numbers")
    ptr = ptr.astype(np.int64)
    if ptr[0] != 0:
        raise ValueError(f"group_ptr must start at 0, got {ptr[0]}")
    if ptr[-1] != n_rows:
        raise ValueError(
            f"query boundaries end at {ptr[-1]} but there are {n_rows} rows "
            "(group sizes do not add up to the number of rows)"
        )
    sizes = np.diff(ptr)
    if np.any(sizes <= 0):
        bad = int(np.flatnonzero(sizes <= 0)[0])
        raise ValueError(
            f"query {bad} is empty or has negative size ({sizes[bad]}); "
            "every query needs at least one document"
        )
    return ptr
