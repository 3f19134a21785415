"""Learning-to-rank data: LETOR/SVMlight loaders and a synthetic MSLR-like generator.

Every function returns :class:`RankingData` ``(X, y, group_ptr)``: a dense feature matrix, graded
labels (float64) and the query boundaries ``[0, n_1, n_1 + n_2, ..., n]`` (rows of a query are
contiguous). It is a named tuple, so ``X, y, group_ptr = load_letor(path)`` works.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from sklearn.datasets import load_svmlight_file

from approx_gbdt.utils import group_ptr_from_qid, group_ptr_from_sizes

__all__ = [
    "LetorFold",
    "RankingData",
    "load_letor",
    "load_letor_folds",
    "make_ranking",
    "make_ranking_splits",
]


class RankingData(NamedTuple):
    """Features ``X`` (n, n_features), labels ``y`` (n,) and query boundaries ``group_ptr``."""

    X: np.ndarray
    y: np.ndarray
    group_ptr: np.ndarray

    @property
    def n_queries(self) -> int:
        return self.group_ptr.size - 1


@dataclass(frozen=True)
class LetorFold:
    """One cross-validation fold: ``train``, ``vali`` and ``test`` with common features."""

    name: str
    train: RankingData
    vali: RankingData
    test: RankingData


# --------------------------------------------------------------------------------------------
# LETOR / SVMlight files
# --------------------------------------------------------------------------------------------


_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"


def _open(path: Path):
    """Open ``path`` for binary reading, past a leading UTF-8 byte order mark.

    The file is decompressed with :mod:`gzip` when it starts with gzip's magic bytes, whatever
    its name.
    """
    with open(path, "rb") as raw:
        gzipped = raw.read(len(_GZIP_MAGIC)) == _GZIP_MAGIC
    f = gzip.open(path, "rb") if gzipped else open(path, "rb")
    try:
        if f.read(len(_UTF8_BOM)) != _UTF8_BOM:
            f.seek(0)
    except BaseException:
        f.close()
        raise
    return f


def _parse_error(path: Path, err: Exception, zero_based: bool) -> ValueError:
    """A ValueError naming ``path`` for an error of the SVMlight parser, with a hint if known."""
    text = str(err)
    if not zero_based and "Invalid index 0" in text:
        return ValueError(
            f"{path}: feature index 0 found, but LETOR files number features from 1; for a "
            f"file written with 0-based indices (e.g. by sklearn's dump_svmlight_file default) "
            f"pass zero_based=True"
        )
    if "invalid literal for int()" in text:
        hint = "qid: values and feature indices must be integers, as in '2 qid:10 1:0.5'"
    elif "should be sorted and unique" in text:
        hint = "feature indices must increase along each line, each given at most once"
    else:
        return ValueError(f"{path}: cannot parse as LETOR/SVMlight text: {err}")
    return ValueError(f"{path}: cannot parse as LETOR/SVMlight text: {err} ({hint})")


def _query_file(path: Path) -> Path | None:
    """A group-size file next to ``path``: ``<path>.query``, else ``<path minus suffix>.query``."""
    candidates = [path.with_name(path.name + ".query")]
    if path.suffix:
        candidates.append(path.with_suffix(".query"))
    return next((c for c in candidates if c.is_file()), None)


def _read_group_sizes(path: Path) -> np.ndarray:
    try:
        return np.loadtxt(path, dtype=np.int64, ndmin=1)
    except ValueError as err:
        raise ValueError(f"{path}: expected one whole group size per line ({err})") from err


def load_letor(
    path, *, n_features: int | None = None, dtype=np.float64, zero_based: bool = False
) -> RankingData:
    """Read a LETOR / SVMlight ranking file.

    Each line is ``label qid:Q 1:v1 2:v2 ... # comment`` (LF or CRLF endings; sparse indices
    allowed, missing features are 0; feature indices increase along a line). A gzip-compressed
    file is recognised by its first bytes, whatever its name, and read through :mod:`gzip`; a
    UTF-8 byte order mark at the start is skipped. Parsing is
    :func:`sklearn.datasets.load_svmlight_file` with ``query_id=True``.

    Files without ``qid:`` (LightGBM's layout, e.g. ``rank.train``) are accepted when a group
    size file sits next to them: ``<path>.query`` or ``<stem>.query`` (``rank.train.gz`` ->
    ``rank.train.query``), one group size per line in row order.

    Parameters
    ----------
    path : str or path-like
        The plain text or gzip-compressed file.
    n_features : int, optional
        Number of feature columns; default: the largest feature index in the file (plus one
        when ``zero_based``). Give it to align several files.
    dtype : numpy dtype, default float64
        Dtype of ``X``.
    zero_based : bool, default False
        False: features are numbered from 1, as in LETOR files, and feature ``j`` is column
        ``j - 1``; an index 0 is an error. True: features are numbered from 0 (as
        :func:`sklearn.datasets.dump_svmlight_file` writes by default) and feature ``j`` is
        column ``j``. The choice is never made from the file, so files read with the same
        setting have the same columns.

    Returns
    -------
    RankingData
        ``X`` dense (n, n_features), ``y`` float64 labels, ``group_ptr`` int64.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If a line cannot be parsed (including a non-integer ``qid:`` and, unless
        ``zero_based``, a feature index 0), the file is empty, some lines lack ``qid:``, the
        rows of a query are not contiguous, or there is no ``qid:`` and no ``.query`` file.
    """
    path = Path(path)
    if not isinstance(zero_based, (bool, np.bool_)):  # "auto" would be read as True
        raise TypeError(f"zero_based must be True or False, got {zero_based!r}")
    zero_based = bool(zero_based)  # sklearn treats only False itself as 1-based
    if not path.is_file():
        raise FileNotFoundError(f"LETOR file not found: {path}")
    try:
        with _open(path) as f:
            X, y, qid = load_svmlight_file(
                f, n_features=n_features, dtype=dtype, zero_based=zero_based, query_id=True
            )
    except (ValueError, OSError, EOFError, zlib.error) as err:  # zlib: a corrupt gzip body
        raise _parse_error(path, err, zero_based) from err
    n_rows = y.size
    if n_rows == 0:
        raise ValueError(f"{path}: the file holds no data lines")
    if qid.size == 0:
        sizes_path = _query_file(path)
        if sizes_path is None:
            raise ValueError(
                f"{path}: the file has no qid: fields and no group-size file "
                f"({path.name}.query or <stem>.query) next to it"
            )
        try:
            group_ptr = group_ptr_from_sizes(_read_group_sizes(sizes_path), n_rows=n_rows)
        except ValueError as err:
            raise ValueError(f"{sizes_path}: {err}") from err
    elif qid.size != n_rows:
        raise ValueError(f"{path}: some lines have a qid: field and others do not")
    else:
        try:
            group_ptr = group_ptr_from_qid(qid)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from err
    return RankingData(np.asarray(X.toarray(), dtype=dtype), y.astype(np.float64), group_ptr)


def _with_n_features(data: RankingData, n_features: int) -> RankingData:
    """Pad ``X`` with zero columns up to ``n_features`` (absent sparse features are zeros)."""
    missing = n_features - data.X.shape[1]
    if missing == 0:
        return data
    return data._replace(X=np.pad(data.X, ((0, 0), (0, missing))))


def _concat(parts: Sequence[RankingData]) -> RankingData:
    """Concatenate row-wise; queries stay separate even if two parts share a query id."""
    ptrs = [parts[0].group_ptr]
    offset = parts[0].group_ptr[-1]
    for part in parts[1:]:
        ptrs.append(part.group_ptr[1:] + offset)
        offset += part.group_ptr[-1]
    return RankingData(
        np.concatenate([p.X for p in parts]),
        np.concatenate([p.y for p in parts]),
        np.concatenate(ptrs),
    )


def _find_split_file(folder: Path, split: str) -> Path:
    for name in (f"{split}.txt", f"{split}.txt.gz"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{folder}: no {split}.txt or {split}.txt.gz")


def _fold_key(folder: Path) -> int:
    return int(re.fullmatch(r"Fold(\d+)", folder.name).group(1))


def _split_folders(path: Path) -> list[Path]:
    """The folders holding a fold's split files when ``path`` has no ``folds.json``: its
    ``FoldN`` subfolders in numeric order, else ``path`` itself when it holds a ``train.txt``
    (one split); empty when it has neither."""
    fold_dirs = [p for p in path.iterdir() if p.is_dir() and re.fullmatch(r"Fold\d+", p.name)]
    if not fold_dirs and any(path.glob("train.txt*")):
        return [path]
    return sorted(fold_dirs, key=_fold_key)


_SPLITS = ("train", "vali", "test")


def _folds_json_layout(folder: Path) -> dict[str, dict[str, list[Path]]]:
    """Fold name -> split -> partition files, from ``folder/folds.json``, in its listed order.

    Raises
    ------
    ValueError
        Naming ``folds.json``, if it is not JSON or not of the documented structure.
    """
    file = folder / "folds.json"

    def invalid(problem: str) -> ValueError:
        return ValueError(
            f"{file}: expected 'partitions' with 'file' entries and 'folds' with train/vali/test "
            f"lists of partition names ({problem})"
        )

    try:
        spec = json.loads(file.read_bytes())
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{file}: not valid JSON ({err})") from err
    if not isinstance(spec, dict):
        raise invalid(f"the file holds a {type(spec).__name__}, not an object")
    partitions, folds = spec.get("partitions"), spec.get("folds")
    if not isinstance(partitions, dict) or not isinstance(folds, dict):
        raise invalid("'partitions' and 'folds' must both be objects")
    files = {}
    for name, part in partitions.items():
        if not isinstance(part, dict) or not isinstance(part.get("file"), str):
            raise invalid(f"partition {name!r} must be an object with a 'file' name")
        files[name] = folder / part["file"]
    if not folds:
        raise invalid("'folds' lists no fold")
    layout = {}
    for fold_name, fold in folds.items():
        if not isinstance(fold, dict):
            raise invalid(f"fold {fold_name!r} must be an object with train/vali/test lists")
        layout[fold_name] = {}
        for split in _SPLITS:
            names = fold.get(split)
            if not isinstance(names, list) or not names:
                raise invalid(
                    f"{split!r} of fold {fold_name!r} must be a non-empty list of partition "
                    f"names, got {names!r}"
                )
            unknown = [n for n in names if not isinstance(n, str) or n not in files]
            if unknown:
                raise invalid(
                    f"{split!r} of fold {fold_name!r} names unknown partitions {unknown}; "
                    f"known: {list(files)}"
                )
            layout[fold_name][split] = [files[n] for n in names]
    return layout


def load_letor_folds(
    path,
    *,
    folds: str | Sequence[str] | None = None,
    n_features: int | None = None,
    dtype=np.float64,
    zero_based: bool = False,
) -> list[LetorFold]:
    """Read the cross-validation folds of a LETOR dataset.

    Two layouts are understood:

    (a) ``path/Fold1 .. FoldN/{train,vali,test}.txt`` (or ``.txt.gz``), as MSLR-WEB and
        LETOR 4.0 are distributed; ``path`` may also be a single fold folder;
    (b) ``path/folds.json`` naming partition files, e.g. for MQ2008's five partitions:
        ``{"partitions": {"S1": {"file": "S1.txt.gz"}, ...},
        "folds": {"Fold1": {"train": ["S1", "S2", "S3"], "vali": ["S4"], "test": ["S5"]}, ...}}``;
        a split listing several partitions is their concatenation in the listed order.

    All parts of all loaded folds share one feature count (the largest feature index found,
    or ``n_features``), so a model trained on ``train`` can score ``vali`` and ``test``.

    Parameters
    ----------
    path : str or path-like
        The dataset folder.
    folds : str or sequence of str, optional
        Names of the folds to load, in the order given (e.g. ``["Fold1", "Fold3"]``, or
        ``"Fold1"`` for one fold). Default: all, ``Fold1 .. FoldN`` folders in numeric order
        (``Fold2`` before ``Fold10``), ``folds.json`` folds in the order listed there.
    n_features, dtype, zero_based
        As in :func:`load_letor`; ``zero_based`` applies to every file alike.

    Returns
    -------
    list of LetorFold

    Raises
    ------
    FileNotFoundError
        If ``path``, a split file or a partition file is missing.
    ValueError
        If a fold name is unknown, ``folds.json`` is not valid JSON or not of the structure
        above, or a file cannot be read (see :func:`load_letor`).
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"LETOR dataset folder not found: {path}")
    splits = _SPLITS
    if (path / "folds.json").is_file():
        layout = _folds_json_layout(path)
    else:
        fold_dirs = _split_folders(path)
        if not fold_dirs:
            raise FileNotFoundError(f"{path}: no folds.json and no Fold1..FoldN folders")
        layout = {d.name: {s: [_find_split_file(d, s)] for s in splits} for d in fold_dirs}
    if folds is not None:
        if isinstance(folds, str):
            folds = [folds]
        unknown = sorted(set(folds) - set(layout))
        if unknown:
            raise ValueError(f"{path}: no fold named {unknown}; available: {list(layout)}")
        layout = {name: layout[name] for name in folds}

    cache: dict[Path, RankingData] = {}
    for fold in layout.values():
        for file in (f for s in splits for f in fold[s]):
            if file not in cache:
                cache[file] = load_letor(
                    file, n_features=n_features, dtype=dtype, zero_based=zero_based
                )
    width = max(d.X.shape[1] for d in cache.values())
    cache = {f: _with_n_features(d, width) for f, d in cache.items()}
    return [
        LetorFold(name, *(_concat([cache[f] for f in fold[s]]) for s in splits))
        for name, fold in layout.items()
    ]


# --------------------------------------------------------------------------------------------
# Synthetic data
# --------------------------------------------------------------------------------------------


def _label_thresholds(label_levels: int, decay: float) -> np.ndarray:
    """Cumulative proportions of labels 0..L-2 when P(label = j) is proportional to decay^j."""
    p = decay ** np.arange(label_levels)
    return np.cumsum(p / p.sum())[:-1]


def _is_int(value) -> bool:
    """Whether ``value`` is a Python or NumPy integer (not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def make_ranking(
    n_queries: int = 200,
    *,
    docs_per_query: tuple[int, int] = (20, 120),
    n_features: int = 40,
    n_informative: int | None = None,
    label_levels: int = 5,
    label_decay: float = 0.45,
    noise: float = 0.5,
    query_effect: float = 1.0,
    seed: int = 0,
) -> RankingData:
    r"""Synthetic graded-relevance ranking data with a skewed, MSLR-like label distribution.

    For document :math:`d` of query :math:`q` with features :math:`x` (standard normal plus a
    per-query shift of scale 0.5, so features correlate within a query), the latent utility is

    .. math::

        u = \mathrm{std}\Big(\frac{x_I^\top w}{\sqrt{|I|}} + \sum_{(a, b)} c_{ab} x_a x_b
            + \sum_{a} \tanh(2 x_a)\Big) + \text{query\_effect}\cdot o_q
            + \text{noise}\cdot\varepsilon

    over the informative features :math:`I` (the first ``n_informative`` columns), with
    ``n_informative // 2`` random pairwise products, ``n_informative // 3`` saturating terms,
    ``std`` a standardisation to unit variance, a per-query offset :math:`o_q \sim N(0, 1)` and
    noise :math:`\varepsilon \sim N(0, 1)`. Labels cut ``u`` at global quantiles so that
    :math:`P(\text{label} = j) \propto \text{label\_decay}^j` (defaults: about 56/25/11/5/2 % for
    labels 0..4, most documents irrelevant as in MSLR-WEB); the query offset makes the number of
    relevant documents vary by query (with the defaults about 2-3 % of the queries have none).
    The remaining columns are pure noise.

    Parameters
    ----------
    n_queries : int, default 200
    docs_per_query : (int, int), default (20, 120)
        Inclusive range of query sizes, drawn uniformly.
    n_features : int, default 40
        Total number of features.
    n_informative : int, optional
        Number of informative features, at most ``n_features``; default
        ``min(10, n_features)``.
    label_levels : int, default 5
        Labels are ``0 .. label_levels - 1``.
    label_decay : float in (0, 1], default 0.45
        Ratio of successive label frequencies.
    noise : float, default 0.5
        Standard deviation of the label noise relative to the unit-variance signal; finite
        and >= 0.
    query_effect : float, default 1.0
        Standard deviation of the per-query offset (not visible in the features); finite and
        >= 0.
    seed : int, default 0
        Same seed, same data.

    Returns
    -------
    RankingData
        ``X`` float64 (n, n_features), ``y`` float64 labels, ``group_ptr`` int64.

    Raises
    ------
    ValueError
        If a count is not an integer or out of range, ``label_decay`` is not in (0, 1], or
        ``noise`` or ``query_effect`` is negative or not finite.
    """
    for name, value in [
        ("n_queries", n_queries),
        ("n_features", n_features),
        ("n_informative", n_informative),
        ("label_levels", label_levels),
    ]:
        if value is not None and not _is_int(value):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if n_informative is None:
        n_informative = min(10, n_features)
    try:
        lo, hi = docs_per_query
    except (TypeError, ValueError):
        lo = hi = None
    if not (_is_int(lo) and _is_int(hi) and 1 <= lo <= hi):
        raise ValueError(
            f"docs_per_query must be (lo, hi) with integers 1 <= lo <= hi, got {docs_per_query!r}"
        )
    if n_queries < 1:
        raise ValueError(f"n_queries must be >= 1, got {n_queries}")
    if not 1 <= n_informative <= n_features:
        raise ValueError(
            f"need 1 <= n_informative <= n_features, got {n_informative} and {n_features}"
        )
    if label_levels < 2:
        raise ValueError(f"label_levels must be >= 2, got {label_levels}")
    if not 0 < label_decay <= 1:
        raise ValueError(f"label_decay must be in (0, 1], got {label_decay}")
    for name, value in [("noise", noise), ("query_effect", query_effect)]:
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be finite and >= 0, got {value}")

    rng = np.random.default_rng(seed)
    sizes = rng.integers(lo, hi + 1, size=n_queries)
    group_ptr = group_ptr_from_sizes(sizes)
    query = np.repeat(np.arange(n_queries), sizes)
    n = int(group_ptr[-1])

    X = (
        rng.standard_normal((n, n_features))
        + 0.5 * rng.standard_normal((n_queries, n_features))[query]
    )
    informative = X[:, :n_informative]
    w = rng.standard_normal(n_informative)
    signal = informative @ w / np.sqrt(n_informative)
    n_pairs = n_informative // 2
    if n_pairs:
        a = rng.integers(0, n_informative, n_pairs)
        b = rng.integers(0, n_informative, n_pairs)
        signal += (informative[:, a] * informative[:, b]) @ rng.standard_normal(n_pairs) * 0.5
    saturating = rng.choice(n_informative, size=n_informative // 3, replace=False)
    signal += np.tanh(2.0 * informative[:, saturating]).sum(axis=1)
    signal = (signal - signal.mean()) / (signal.std() or 1.0)

    utility = (
        signal
        + query_effect * rng.standard_normal(n_queries)[query]
        + noise * rng.standard_normal(n)
    )
    cuts = np.quantile(utility, _label_thresholds(label_levels, label_decay))
    y = np.searchsorted(cuts, utility, side="right").astype(np.float64)
    return RankingData(X, y, group_ptr)


def make_ranking_splits(
    n_queries: tuple[int, int, int] = (200, 60, 60), *, seed: int = 0, **kwargs
) -> dict[str, RankingData]:
    """Train / valid / test splits of one :func:`make_ranking` draw, with different queries.

    Parameters
    ----------
    n_queries : (int, int, int), default (200, 60, 60)
        Number of queries in train, valid and test; integers >= 1.
    seed : int, default 0
    **kwargs
        Passed to :func:`make_ranking` (``docs_per_query``, ``n_features``, ``noise``, ...).

    Returns
    -------
    dict
        ``{"train": RankingData, "valid": RankingData, "test": RankingData}``; the queries
        share the latent model (same weights) but are disjoint.
    """
    try:
        counts = tuple(n_queries)
    except TypeError:
        counts = ()
    if len(counts) != 3 or not all(_is_int(n) and n >= 1 for n in counts):
        raise ValueError(f"n_queries must be three counts >= 1 (integers), got {n_queries!r}")
    data = make_ranking(int(sum(counts)), seed=seed, **kwargs)
    bounds = np.cumsum([0, *counts])
    out = {}
    for name, q0, q1 in zip(("train", "valid", "test"), bounds[:-1], bounds[1:], strict=True):
        a, b = data.group_ptr[q0], data.group_ptr[q1]
        out[name] = RankingData(data.X[a:b], data.y[a:b], data.group_ptr[q0 : q1 + 1] - a)
    return out
