"""Shared helpers of the benchmark scripts: data sets, the method registry, one training run.

Used by ``benchmarks/quality.py`` and ``benchmarks/approximation.py``; not part of the package.

Data sets (``--data``)
----------------------
Named data sets are read from the data folder ``$APPROX_GBDT_DATA`` (by default ``shared/data``
beside the checkout):

``mq2008``       ``MQ2008`` in the data folder (LETOR 4.0, 5 folds).
``mq2008-small``  ``mq2008`` with each fold's training split cut to 60 queries and its
                 validation split to 20 (fixed random draws, seed = fold index), test split
                 whole: LETOR 3.0-sized training data (the neural baseline's small-data check).
``generated``    :func:`approx_gbdt.make_ranking` (300 queries, seed 0) cut into 5 blocks of 60
                 queries, rotated as LETOR does: fold i trains on blocks i, i+1, i+2, validates
                 on i+3 and tests on i+4 (mod 5), so every query is tested exactly once.
``generated-long`` :func:`approx_gbdt.make_ranking` with 100 queries of 500 to 1,500 documents
                 (about 100,000 in all; seed 0, a draw of its own, so not comparable with
                 ``generated``), rotated in 5 blocks of 20 queries as ``generated``: long
                 lists, of which LightGBM's lambdarank (truncation level 30) uses only a
                 small share of the pairs.
``lgb-yahoo``    ``LightGBM-lambdarank`` in the data folder (LightGBM's ``rank.train`` /
                 ``rank.test``, a Yahoo! LTR sample): one fold; 20 % of the training queries
                 (a fixed random draw, seed 0) are carved out as the validation split.
``mslr-sample``  ``MSLR-rankeval-sample`` in the data folder (first 5,000 lines of MSLR-WEB Fold1
                 train and test): the last query of each file may be truncated and is dropped;
                 validation carved from train as for ``lgb-yahoo``. Too small to report numbers
                 from; a format and smoke check.
PATH             a LETOR folder read by :func:`approx_gbdt.load_letor_folds` (``Fold1..FoldN``
                 or ``folds.json``); a folder with only ``train`` and ``test`` files gets a
                 carved validation split.

Methods
-------
``library:objective`` or ``library:objective(key=value,...)``:

- ``lgb:approx_ndcg``, ``lgb:approx_ap``, ``lgb:lambdarank``, ``lgb:rank_xendcg``;
- ``xgb:approx_ndcg``, ``xgb:approx_ap``, ``xgb:rank:ndcg``, ``xgb:rank:map``,
  ``xgb:rank:pairwise``;
- every other registered objective of :data:`approx_gbdt.MEASURES` on ``lgb`` and ``xgb``
  (``lgb:approx_mrr``, ``xgb:approx_precision(k=5)``, ...);
- ``nn:approx_ndcg``, ``nn:approx_ap``, ``nn:ranknet``, ``nn:listnet``, ``nn:listmle``
  (:class:`approx_gbdt.neural.NeuralRanker`, B64 network of Bruch et al. 2019; needs torch);
- ``cb:YetiRank``, ``cb:YetiRankPairwise``, ``cb:LambdaMart``, ``cb:QuerySoftMax``
  (CatBoost's own ranking losses on its depth-6 oblivious trees; needs ``catboost``, the
  ``bench`` extra); ``cb:approx_ndcg``, ``cb:approx_ap``, ... (every objective of the
  registry, options as for ``lgb``) train CatBoost on the approx objective through
  :class:`approx_gbdt.catboost_host.CatBoostObjective` (plain boosting, early stopping on the
  adapter's NDCG@10, the same protocol otherwise).
- ``lgb:regression``, ``xgb:reg:squarederror``, ``cb:RMSE``: pointwise least squares on the
  labels (``POINTWISE``), baselines that separate the trees from the ranking loss; not peers.
- ``lgb:soft_ndcg``, ``xgb:soft_ndcg`` (:class:`approx_gbdt.SoftNDCG`, options as for the
  approx objectives);
- ``ada:ndcg``, ``ada:map`` (:class:`approx_gbdt.AdaRank`, AdaRank-NDCG / AdaRank-MAP) and
  ``rb:rankboost`` (:class:`approx_gbdt.RankBoost`): the classic rivals, linear in the features,
  their own 4-point grids (``ADA_GRIDS``, ``RB_GRIDS``); options are constructor arguments.

Options that are constructor arguments of the objective (``alpha``, ``beta``, ``k``,
``hessian``, ``hessian_floor``, ``normalize``, ...) build a new objective from the *current*
defaults of its ready-made instance (``approx_ndcg_obj``, ...) with those values changed
(``objective.replace``); without options the package's default instance itself is used, so a
change of the package defaults changes the benchmark. Any other option is a booster
parameter (LightGBM / XGBoost) or a :class:`NeuralRanker` argument, applied last (it
overrides the protocol and the grid).
"""

from __future__ import annotations

import ast
import os
import platform
import re
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass

# Every kernel compiles in the benchmark's process on its first call: with an empty Numba
# cache a background compilation would let the windowed loops stand in for the grid's blocks
# while timed or trained calls run (approx_gbdt's README, "First run").
os.environ.setdefault("APPROX_GBDT_BACKGROUND_COMPILE", "0")
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from approx_gbdt.measures import MEASURES as OBJECTIVES
from approx_gbdt.training import fit_ranker

REPO = Path(__file__).resolve().parent.parent
# The named data sets live in one folder: $APPROX_GBDT_DATA, or shared/data beside the checkout.
SHARED_DATA = Path(os.environ.get("APPROX_GBDT_DATA", REPO.parent / "shared" / "data"))

# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

NAMED_DATA = {
    "mq2008": "MQ2008",
    "mq2008-small": "MQ2008",
    "lgb-yahoo": "LightGBM-lambdarank",
    "mslr-sample": "MSLR-rankeval-sample",
}
# make_ranking's arguments (besides seed 0) of the generated data sets, each cut into
# GENERATED_BLOCKS rotated blocks of queries
GENERATED = {
    "generated": {"n_queries": 300},
    "generated-long": {"n_queries": 100, "docs_per_query": (500, 1500)},
}
GENERATED_BLOCKS = 5
VALID_FRACTION = 0.2
SMALL_QUERIES = (60, 20)  # mq2008-small: training and validation queries per fold


@dataclass(frozen=True)
class Fold:
    name: str
    train: object  # approx_gbdt.RankingData
    vali: object
    test: object


def dataset_label(data: str) -> str:
    """Short name of a data set, used in output file names."""
    if data in NAMED_DATA or data in GENERATED:
        return data
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(data).resolve().name).lower() or "data"


def _take_queries(data, queries):
    """The rows of the given queries (in the given order) as a new RankingData."""
    from approx_gbdt import RankingData

    ptr = data.group_ptr
    rows = np.concatenate([np.arange(ptr[q], ptr[q + 1]) for q in queries])
    sizes = np.diff(ptr)[queries]
    return RankingData(data.X[rows], data.y[rows], np.concatenate([[0], np.cumsum(sizes)]))


def _subsample_queries(data, n, seed):
    """``n`` queries of ``data`` drawn at random (in their original order)."""
    rng = np.random.default_rng(seed)
    return _take_queries(data, np.sort(rng.choice(data.n_queries, size=n, replace=False)))


def _drop_last_query(data):
    return _take_queries(data, np.arange(data.n_queries - 1))


def _carve_validation(train, seed=0):
    """Split ``train`` by query: a fixed random ``VALID_FRACTION`` of its queries validates."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(train.n_queries)
    n_valid = max(1, round(VALID_FRACTION * train.n_queries))
    vali_q, train_q = np.sort(perm[:n_valid]), np.sort(perm[n_valid:])
    return _take_queries(train, train_q), _take_queries(train, vali_q)


def _shared(name: str) -> Path:
    path = SHARED_DATA / NAMED_DATA[name]
    if not path.is_dir():
        raise SystemExit(
            f"--data {name}: data folder not found at {path} (set APPROX_GBDT_DATA to the "
            f"folder that holds {NAMED_DATA[name]}); pass --data PATH or --data generated"
        )
    return path


def _generated_folds(name):
    from approx_gbdt import make_ranking

    spec = GENERATED[name]
    data = make_ranking(**spec, seed=0)
    blocks = np.array_split(np.arange(spec["n_queries"]), GENERATED_BLOCKS)
    folds = []
    for i in range(GENERATED_BLOCKS):
        b = [blocks[(i + j) % GENERATED_BLOCKS] for j in range(GENERATED_BLOCKS)]
        folds.append(
            Fold(
                f"Fold{i + 1}",
                _take_queries(data, np.concatenate(b[:3])),
                _take_queries(data, b[3]),
                _take_queries(data, b[4]),
            )
        )
    return folds


def _train_test_folder(train_file: Path, test_file: Path, drop_last=False, zero_based=False):
    from approx_gbdt import load_letor

    train = load_letor(train_file, zero_based=zero_based)
    test = load_letor(test_file, zero_based=zero_based)
    width = max(train.X.shape[1], test.X.shape[1])
    train = load_letor(train_file, n_features=width, zero_based=zero_based)
    test = load_letor(test_file, n_features=width, zero_based=zero_based)
    if drop_last:
        train, test = _drop_last_query(train), _drop_last_query(test)
    train, vali = _carve_validation(train)
    return [Fold("Fold1", train, vali, test)]


def load_folds(data: str, n_folds: int | None = None, *, zero_based: bool = False) -> list[Fold]:
    """The folds of a data set named as ``--data`` takes it (see the module docstring);
    ``zero_based`` reads the files of a folder given by path with features numbered from 0."""
    from approx_gbdt import load_letor_folds

    if data in GENERATED:
        folds = _generated_folds(data)
    elif data == "mq2008":
        folds = [Fold(f.name, f.train, f.vali, f.test) for f in load_letor_folds(_shared(data))]
    elif data == "mq2008-small":
        n_train, n_vali = SMALL_QUERIES
        folds = [
            Fold(f.name, _subsample_queries(f.train, n_train, i),
                 _subsample_queries(f.vali, n_vali, i), f.test)
            for i, f in enumerate(load_letor_folds(_shared(data)))
        ]
    elif data == "lgb-yahoo":
        p = _shared(data)
        folds = _train_test_folder(p / "rank.train.gz", p / "rank.test.gz")
    elif data == "mslr-sample":
        p = _shared(data)
        folds = _train_test_folder(
            p / "msn1.fold1.train.5k.txt.gz", p / "msn1.fold1.test.5k.txt.gz", drop_last=True
        )
    else:
        path = Path(data)
        if not path.is_dir():
            raise SystemExit(
                f"--data {data}: not a folder and not one of "
                f"{', '.join(['mq2008', *GENERATED, *(k for k in NAMED_DATA if k != 'mq2008')])}"
            )
        has_vali = any(path.glob("vali.txt*")) or (path / "folds.json").is_file() or any(
            p.is_dir() and re.fullmatch(r"Fold\d+", p.name) for p in path.iterdir()
        )
        if has_vali:
            folds = [Fold(f.name, f.train, f.vali, f.test)
                     for f in load_letor_folds(path, zero_based=zero_based)]
        else:
            trains = sorted(path.glob("train.txt*"))
            tests = sorted(path.glob("test.txt*"))
            if not (trains and tests):
                raise SystemExit(f"--data {data}: no LETOR folds and no train/test files")
            folds = _train_test_folder(trains[0], tests[0], zero_based=zero_based)
    if n_folds is not None:
        folds = folds[:n_folds]
    return folds


def describe_folds(folds) -> str:
    parts = []
    for f in folds[:1]:
        for split in ("train", "vali", "test"):
            d = getattr(f, split)
            rel = int(np.sum([d.y[a:b].max() >= 1 for a, b in zip(d.group_ptr[:-1],
                                                                  d.group_ptr[1:])]))
            parts.append(
                f"{split} {d.n_queries} queries ({rel} with a relevant document), "
                f"{d.y.size} documents"
            )
    return (
        f"{len(folds)} fold(s), {folds[0].train.X.shape[1]} features; {folds[0].name}: "
        + "; ".join(parts)
    )


# ---------------------------------------------------------------------------------------------
# Methods
# ---------------------------------------------------------------------------------------------

LIBRARIES = ("lgb", "xgb", "nn", "cb", "ada", "rb")
NATIVE = {
    "lgb": ("lambdarank", "rank_xendcg"),
    "xgb": ("rank:ndcg", "rank:map", "rank:pairwise"),
    "cb": ("YetiRank", "YetiRankPairwise", "LambdaMart", "QuerySoftMax"),
}
# Pointwise regression on the labels, each host's own: baselines that tell the trees from the
# ranking loss (not peers: the best-peer ratio ignores them).
POINTWISE = {"lgb": ("regression",), "xgb": ("reg:squarederror",), "cb": ("RMSE",)}
# Objectives for screening (benchmark only: benchmarks/_pair_objectives.py): NDCG-Loss2++ of
# LambdaLoss, YetiRank's pair weights, ApproxAP's / ApproxNDCG's tangent forces without the
# pairs of two documents of one grade, and ApproxNDCG mixed with a LambdaLoss part at another
# sigmoid scale or from the smoothed positions.
BENCH_PAIR = ("lambdaloss", "yetirank_pairs", "ap_cross", "ndcg_cross", "ndcg_ll")
# The registry (approx_ndcg, approx_ap, ...), SoftNDCG and the benchmark's pair losses: the
# objectives the benchmark hands to a host as Python objects.
APPROX = (*OBJECTIVES, "soft_ndcg", *BENCH_PAIR)
# The classic boosted rankers (approx_gbdt.AdaRank / RankBoost): library -> objectives.
BOOSTED = {"ada": ("ndcg", "map"), "rb": ("rankboost",)}
NN_LOSSES = ("approx_ndcg", "approx_ap", "ranknet", "listnet", "listmle")
NN_HIDDEN = (64, 32, 16)  # Bruch et al. (2019)'s B64


@dataclass(frozen=True)
class Method:
    """A parsed method name ``library:objective(options)``."""

    name: str
    library: str
    objective: str
    options: tuple  # ((key, value), ...) in the given order

    @property
    def opts(self) -> dict:
        return dict(self.options)


def _value(text: str):
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_method(text: str) -> Method:
    """Parse ``"lgb:approx_ndcg(alpha=20,hessian=bound)"`` (spaces ignored); an approx
    objective may carry its cutoff as ``@k``: ``"lgb:approx_precision@5"`` sets ``k=5``."""
    s = re.sub(r"\s+", "", text)
    m = re.fullmatch(r"([a-z]+):([A-Za-z_:]+)(?:@(\d+))?(?:\((.*)\))?", s)
    if m is None:
        raise ValueError(f"method {text!r}: expected library:objective or "
                         "library:objective(key=value,...)")
    lib, obj, cutoff, opts = m.group(1), m.group(2), m.group(3), m.group(4)
    if lib not in LIBRARIES:
        raise ValueError(f"method {text!r}: library must be one of {LIBRARIES}")
    if lib in BOOSTED:
        known = BOOSTED[lib]
    else:
        known = {"nn": NN_LOSSES, "cb": NATIVE["cb"] + APPROX}.get(lib) or APPROX + NATIVE[lib]
        known = known + POINTWISE.get(lib, ())
    if obj not in known:
        raise ValueError(f"method {text!r}: objective for {lib} must be one of {known}")
    options = []
    if cutoff is not None:
        if obj not in OBJECTIVES or OBJECTIVES[obj].cutoff == "none" or int(cutoff) < 1:
            raise ValueError(f"method {text!r}: {obj} takes no cutoff @{cutoff}")
        options.append(("k", int(cutoff)))
    if opts:
        for item in _split_top(opts, ","):
            if "=" not in item:
                raise ValueError(f"method {text!r}: option {item!r} is not key=value")
            key, val = item.split("=", 1)
            options.append((key, _value(val)))
    return Method(s, lib, obj, tuple(options))


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            if cur.strip():
                out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def split_methods(items) -> list[str]:
    out = []
    for item in items:
        out.extend(_split_top(item, ","))
    return out


_SOFT_NDCG = []  # one default SoftNDCG instance, made on first use


def _pair_objectives():
    """benchmarks/_pair_objectives.py, loaded by path (the benchmarks are not a package)."""
    import importlib.util

    if "_pair_objectives" not in sys.modules:
        path = Path(__file__).resolve().parent / "_pair_objectives.py"
        spec = importlib.util.spec_from_file_location("_pair_objectives", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["_pair_objectives"] = module
        spec.loader.exec_module(module)
    return sys.modules["_pair_objectives"]


def _default_objective(name):
    if name in BENCH_PAIR:
        return _pair_objectives().BENCH_PAIR_OBJECTIVES[name]()
    if name == "soft_ndcg":
        if not _SOFT_NDCG:
            from approx_gbdt import SoftNDCG

            _SOFT_NDCG.append(SoftNDCG())
        return _SOFT_NDCG[0]
    return OBJECTIVES[name].instance


def _objective_params(name) -> list[str]:
    return list(_default_objective(name).get_options())


# Objective options of the benchmark only (screening ideas, not package options).
BENCH_OBJECTIVE_OPTIONS = ("softmax_mix",)


def _softmax_grad_hess(scores, labels, group_ptr):
    """Gradient and Hessian diagonal of the softmax cross-entropy with the labels as targets
    (CatBoost's QuerySoftMax, ListNet's top-one loss): per query ``L = -sum_i y_i log p_i``,
    ``p = softmax(s)``; ``dL/ds_i = Y p_i - y_i`` (``Y = sum_j y_j``), diagonal ``Y p_i (1 -
    p_i)``. Each query's gradient and Hessian are then scaled by ``log2(1 + S) / S``, ``S =
    sum_i |dL/ds_i|`` (the approx objectives' ``normalize``)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    sizes = np.diff(group_ptr)
    starts = np.asarray(group_ptr[:-1])[sizes > 0]
    q = np.repeat(np.arange(starts.size), sizes[sizes > 0])
    e = np.exp(s - np.maximum.reduceat(s, starts)[q])
    p = e / np.add.reduceat(e, starts)[q]
    total = np.add.reduceat(y, starts)[q]
    grad = total * p - y
    hess = total * p * (1.0 - p)
    size = np.add.reduceat(np.abs(grad), starts)
    scale = np.divide(np.log2(1.0 + size), size, out=np.zeros_like(size), where=size > 0)[q]
    return grad * scale, hess * scale


class SoftmaxMix:
    """``(1 - weight) *`` an approx objective ``+ weight *`` the normalised softmax
    cross-entropy of :func:`_softmax_grad_hess` (gradients and Hessians mixed), for LightGBM
    (``f(preds, lgb.Dataset)``) and CatBoost (``grad_hess``, through ``CatBoostObjective``)."""

    def __init__(self, objective, weight):
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"softmax_mix must be in [0, 1], got {weight!r}")
        self.objective, self.weight = objective, float(weight)

    def grad_hess(self, scores, labels, group_ptr):
        g1, h1 = self.objective.grad_hess(scores, labels, group_ptr)
        g2, h2 = _softmax_grad_hess(scores, labels, group_ptr)
        w = self.weight
        return (1.0 - w) * g1 + w * g2, (1.0 - w) * h1 + w * h2

    def __call__(self, preds, dataset):
        from approx_gbdt import group_ptr_from_sizes

        labels = dataset.get_label()
        ptr = group_ptr_from_sizes(dataset.get_group(), n_rows=len(labels))
        return self.grad_hess(preds, labels, ptr)

    def __repr__(self):
        return f"SoftmaxMix({self.objective!r}, weight={self.weight:g})"


def make_objective(name: str, options: dict, seed: int | None = None):
    """The package's default objective, or a copy of its settings with ``options`` changed.

    With a ``seed``, an objective with stochastic smoothing (``noise > 0``) and no
    ``random_state`` of its own gets ``random_state=seed``, so that the benchmark's seeds
    vary the noise as they vary the learner. ``softmax_mix=w`` (benchmark only) mixes in the
    softmax cross-entropy with weight ``w`` (:class:`SoftmaxMix`)."""
    if "softmax_mix" in options:
        options = dict(options)
        weight = options.pop("softmax_mix")
        return SoftmaxMix(make_objective(name, options, seed), weight)
    default = _default_objective(name)
    if seed is not None and "random_state" not in options and (
        options.get("noise", getattr(default, "noise", 0.0)) > 0
    ):
        options = {**options, "random_state": seed}
    return default.replace(**options) if options else default


def split_options(method: Method) -> tuple[dict, dict]:
    """(objective options, other options) of a method."""
    opts = method.opts
    if method.library in ("nn", *BOOSTED) or method.objective not in APPROX:
        return {}, opts
    names = set(_objective_params(method.objective)) | set(BENCH_OBJECTIVE_OPTIONS)
    return ({k: v for k, v in opts.items() if k in names},
            {k: v for k, v in opts.items() if k not in names})


def objective_repr(method: Method) -> str:
    """What the method trains on, spelled out (with the objective's settings at run time)."""
    obj_opts, other = split_options(method)
    if method.library in BOOSTED:
        text = ("AdaRank(measure=" + repr(method.objective) + ")" if method.library == "ada"
                else "RankBoost()") + " (linear, deterministic: trained once per fold)"
        return text + (" + " + ", ".join(f"{k}={v!r}" for k, v in other.items()) if other else "")
    if method.library == "cb" and method.objective in APPROX:
        text = (f"CatBoost (oblivious trees, plain boosting) on "
                f"{make_objective(method.objective, obj_opts)!r} via CatBoostObjective")
    elif method.library != "nn" and method.objective in APPROX:
        text = repr(make_objective(method.objective, obj_opts))
    elif method.library == "nn":
        text = f"NeuralRanker(loss={method.objective!r}, hidden={NN_HIDDEN})"
    else:
        host = {"lgb": "LightGBM", "xgb": "XGBoost", "cb": "CatBoost"}[method.library]
        text = f"{host} {method.objective}"
    if other:
        text += " + " + ", ".join(f"{k}={v!r}" for k, v in other.items())
    return text


def catboost_available() -> bool:
    try:
        import catboost  # noqa: F401
    except ImportError:
        return False
    return True


def neural_available() -> bool:
    try:
        import approx_gbdt.neural  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Protocol and tuning grid
# ---------------------------------------------------------------------------------------------

LEARNING_RATE = 0.05
NUM_LEAVES = 31
MAX_DEPTH = 6  # XGBoost max_depth; CatBoost's oblivious trees have this depth too
SUBSAMPLE = 0.8  # row bagging each round (LightGBM bagging_fraction, XGBoost subsample)
COLSAMPLE = 0.9  # LightGBM feature_fraction (per tree), XGBoost colsample_bytree
STOP_METRIC = "ndcg@10"  # worst-case ties, queries without a relevant document excluded

# One grid for every GBDT method (same size for the neural baseline): L2 on the leaf values
# (LightGBM lambda_l2, XGBoost lambda) x minimum Hessian sum of a child (LightGBM
# min_sum_hessian_in_leaf, XGBoost min_child_weight). 1.0 is XGBoost's default min_child_weight;
# 1e-3 is LightGBM's, and lets leaves of few documents with small Hessians (the approx
# objectives' per-document Hessians are about 0.01-0.7 after normalisation) split.
GRIDS = {
    "small": [
        {"l2": 0.0, "min_hess": 1e-3},
        {"l2": 1.0, "min_hess": 1e-3},
        {"l2": 0.0, "min_hess": 1.0},
        {"l2": 1.0, "min_hess": 1.0},
    ],
    "none": [{"l2": 1.0, "min_hess": 1e-3}],
}
# CatBoost's oblivious trees have no minimum child Hessian: its 4 configurations are L2 on the
# leaf values (l2_leaf_reg; 3 is CatBoost's default).
CB_GRIDS = {
    "small": [{"l2": 0.0}, {"l2": 1.0}, {"l2": 3.0}, {"l2": 10.0}],
    "none": [{"l2": 3.0}],
}
# "shape": the small grid at two tree shapes, 8 configurations for every tree learner: the
# protocol's trees (depth None: LightGBM NUM_LEAVES leaves, XGBoost and CatBoost MAX_DEPTH) and
# trees of depth SHALLOW_DEPTH (LightGBM max_depth SHALLOW_DEPTH with 2^SHALLOW_DEPTH leaves).
SHALLOW_DEPTH = 4
GRIDS["shape"] = [{**g, "depth": d} for d in (None, SHALLOW_DEPTH) for g in GRIDS["small"]]
CB_GRIDS["shape"] = [{**g, "depth": d} for d in (None, SHALLOW_DEPTH) for g in CB_GRIDS["small"]]
# NeuralRanker: the same number of configurations, over its own knobs (batch_queries None:
# NeuralRanker's default, min(128, ceil(training queries / 8))).
NN_GRIDS = {
    "small": [
        {"lr": 0.005, "batch_queries": None},
        {"lr": 0.002, "batch_queries": None},
        {"lr": 0.005, "batch_queries": 32},
        {"lr": 0.002, "batch_queries": 32},
    ],
    "none": [{"lr": 0.005, "batch_queries": None}],
}
NN_GRIDS["shape"] = NN_GRIDS["small"]  # no tree shape to vary


# AdaRank: cut-off of the training measure (whole list or @10) x RankLib's rule that a feature
# is not chosen twice in a row (None: the paper's algorithm, any feature every round).
ADA_GRIDS = {
    "small": [
        {"k": None, "max_consecutive": None},
        {"k": None, "max_consecutive": 1},
        {"k": 10, "max_consecutive": None},
        {"k": 10, "max_consecutive": 1},
    ],
    "none": [{"k": None, "max_consecutive": None}],
}
# RankBoost: every threshold or 10 candidates per feature (RankLib's default count) x
# shrinkage of the weights (1: the paper's algorithm).
RB_GRIDS = {
    "small": [
        {"n_thresholds": None, "learning_rate": 1.0},
        {"n_thresholds": 10, "learning_rate": 1.0},
        {"n_thresholds": None, "learning_rate": 0.5},
        {"n_thresholds": 10, "learning_rate": 0.5},
    ],
    "none": [{"n_thresholds": None, "learning_rate": 1.0}],
}
ADA_GRIDS["shape"] = ADA_GRIDS["small"]  # linear models: no tree shape to vary
RB_GRIDS["shape"] = RB_GRIDS["small"]


def grid_for(method: Method, grid: str) -> list[dict]:
    if method.library in BOOSTED:
        return (ADA_GRIDS if method.library == "ada" else RB_GRIDS)[grid]
    return {"nn": NN_GRIDS, "cb": CB_GRIDS}.get(method.library, GRIDS)[grid]


def config_label(method: Method, config: dict) -> str:
    if method.library in BOOSTED:
        return ",".join(f"{k}={v}" for k, v in config.items())
    if method.library == "nn":
        return f"lr={config['lr']:g},bq={config['batch_queries'] or 'auto'}"
    depth = f",depth={config['depth']}" if config.get("depth") else ""
    if method.library == "cb":
        return f"l2={config['l2']:g}{depth}"
    return f"l2={config['l2']:g},mh={config['min_hess']:g}{depth}"


# ---------------------------------------------------------------------------------------------
# Test measures
# ---------------------------------------------------------------------------------------------

MEASURES = ("NDCG@1", "NDCG@3", "NDCG@5", "NDCG@10", "NDCG", "MAP", "P@10", "MRR")


def per_query_measures(scores, data) -> dict[str, np.ndarray]:
    """Per-query test values (NaN where the query has no relevant document).

    Equal scores ranked worst case; relevance for MAP, P@10 and MRR is ``label >= 1``.
    """
    from approx_gbdt import average_precision, mrr, ndcg, precision

    s, y, p = np.asarray(scores, dtype=np.float64), data.y, data.group_ptr
    out = {f"NDCG@{k}": ndcg(s, y, p, k=k) for k in (1, 3, 5, 10)}
    out["NDCG"] = ndcg(s, y, p)
    out["MAP"] = average_precision(s, y, p)
    out["P@10"] = precision(s, y, p, k=10)
    out["MRR"] = mrr(s, y, p)
    return out


# ---------------------------------------------------------------------------------------------
# One training run
# ---------------------------------------------------------------------------------------------


@dataclass
class Budget:
    rounds: int = 2000
    patience: int = 50
    nn_epochs: int | None = None  # None: NeuralRanker's step budget
    nn_patience: int | None = None  # None: NeuralRanker's patience in steps
    threads: int = 1


def _sizes(d):
    return np.diff(d.group_ptr)


def _binary(y):
    return (y >= 1).astype(np.float64)


def fit_predict(method: Method, fold: Fold, seed: int, config: dict, budget: Budget,
                cache: dict | None = None):
    """Train on ``fold.train`` with early stopping on ``fold.vali``; predict ``fold.test``.

    Returns ``(test_scores, valid_score, n_iterations, seconds)``; ``n_iterations`` is the
    number of boosting rounds (optimiser steps for the neural baseline) of the kept model.
    """
    if method.library == "lgb":
        return _fit_lgb(method, fold, seed, config, budget)
    if method.library == "xgb":
        return _fit_xgb(method, fold, seed, config, budget, {} if cache is None else cache)
    if method.library == "cb":
        return _fit_cb(method, fold, seed, config, budget)
    if method.library in BOOSTED:
        return _fit_boosted(method, fold, config, budget)
    return _fit_nn(method, fold, seed, config, budget)


def _fit_lgb(method, fold, seed, config, budget):
    obj_opts, other = split_options(method)
    objective = (
        make_objective(method.objective, obj_opts, seed) if method.objective in APPROX
        else method.objective
    )
    params = {
        "learning_rate": LEARNING_RATE,
        "num_leaves": NUM_LEAVES,
        "lambda_l2": config["l2"],
        "min_sum_hessian_in_leaf": config["min_hess"],
        "feature_fraction": COLSAMPLE,
        "bagging_fraction": SUBSAMPLE,
        "bagging_freq": 1,
        "seed": seed,
        "metric": "None",
        "num_threads": budget.threads,
        "deterministic": True,
        "force_col_wise": True,
        "verbosity": -1,
    }
    if config.get("depth"):
        params.update(max_depth=config["depth"], num_leaves=2 ** config["depth"])
    params.update(other)
    fit = fit_ranker("lightgbm", objective, fold.train, fold.vali, params=params,
                     num_boost_round=budget.rounds, early_stopping_rounds=budget.patience,
                     metric=STOP_METRIC)
    best = fit.best_iteration
    valid = fit.curve(STOP_METRIC)[best - 1]
    return fit.predict(fold.test.X), float(valid), int(best), fit.seconds


def _dmatrices(method, fold, cache):
    import xgboost as xgb

    binary = method.objective == "rank:map"  # XGBoost's rank:map requires 0/1 labels
    key = (fold.name, binary)
    if key not in cache:
        tr, va = fold.train, fold.vali
        ytr, yva = (_binary(tr.y), _binary(va.y)) if binary else (tr.y, va.y)
        dtr = xgb.DMatrix(tr.X, ytr)
        dtr.set_group(_sizes(tr))
        dva = xgb.DMatrix(va.X, yva)
        dva.set_group(_sizes(va))
        cache[key] = (dtr, dva, xgb.DMatrix(fold.test.X))
    return cache[key]


def _fit_xgb(method, fold, seed, config, budget, cache):
    obj_opts, other = split_options(method)
    params = {
        "eta": LEARNING_RATE,
        "max_depth": MAX_DEPTH,
        "lambda": config["l2"],
        "min_child_weight": config["min_hess"],
        "subsample": SUBSAMPLE,
        "colsample_bytree": COLSAMPLE,
        "tree_method": "hist",
        "seed": seed,
        "nthread": budget.threads,
        "disable_default_eval_metric": 1,
        "verbosity": 0,
    }
    if config.get("depth"):
        params["max_depth"] = config["depth"]
    objective = (
        make_objective(method.objective, obj_opts, seed) if method.objective in APPROX
        else method.objective
    )
    params.update(other)
    dtr, dva, dte = _dmatrices(method, fold, cache)
    fit = fit_ranker("xgboost", objective, dtr, dva, params=params,
                     num_boost_round=budget.rounds, early_stopping_rounds=budget.patience,
                     metric=STOP_METRIC)
    best = fit.best_iteration
    return fit.predict(dte), float(fit.curve(STOP_METRIC)[best - 1]), best, fit.seconds


def _best_staged(staged, data, every):
    """Index (0-based, in ``every`` steps) and value of the best validation NDCG@10 among
    staged predictions; ties go to the earliest."""
    from approx_gbdt import mean_over_queries, ndcg

    k = int(STOP_METRIC.split("@")[1])
    best_i, best_v = 0, -np.inf
    for i, pred in enumerate(staged):
        v = mean_over_queries(ndcg(pred, data.y, data.group_ptr, k=k))
        if v > best_v:
            best_i, best_v = i, v
    return (best_i + 1) * every, float(best_v)


def _fit_cb(method, fold, seed, config, budget):
    """CatBoost with its own early stopping (patience ``budget.patience`` on its
    ``NDCG:top=10;type=Exp``; for an approx objective, hosted by ``CatBoostObjective``, on
    the adapter's NDCG@10), then the round with the best validation NDCG@10 of
    ``approx_gbdt.metrics`` (as for the other libraries) among the trained ones."""
    from catboost import CatBoost, CatBoostRanker, Pool

    def pool(d, label=None):
        return Pool(d.X, d.y if label is None else label,
                    group_id=np.repeat(np.arange(d.n_queries), _sizes(d)))

    tr, va = fold.train, fold.vali
    obj_opts, other = split_options(method)
    host = None
    if method.objective in APPROX:
        from approx_gbdt.catboost_host import CatBoostObjective

        host = CatBoostObjective(make_objective(method.objective, obj_opts, seed), tr.y,
                                 tr.group_ptr, eval_set=(va.y, va.group_ptr),
                                 eval_at=int(STOP_METRIC.split("@")[1]))
    params = {
        "loss_function": method.objective,
        "eval_metric": "NDCG:top=10;type=Exp",
        "iterations": budget.rounds,
        "learning_rate": LEARNING_RATE,
        "depth": MAX_DEPTH,
        "l2_leaf_reg": config["l2"],
        "rsm": COLSAMPLE,
        "od_type": "Iter",
        "od_wait": budget.patience,
        "use_best_model": False,
        "random_seed": seed,
        "thread_count": budget.threads,
        "allow_writing_files": False,
        "verbose": False,
    }
    if config.get("depth"):
        params["depth"] = config["depth"]
    if host is None:
        params.update(method.opts)
        t0 = time.perf_counter()
        model = CatBoostRanker(**params).fit(pool(tr), eval_set=pool(va))
    else:
        params.update(host.catboost_params)
        params.update(other)
        t0 = time.perf_counter()
        with warnings.catch_warnings():  # CatBoost: numba cannot compile the adapter class
            warnings.simplefilter("ignore", UserWarning)
            model = CatBoost(params).fit(pool(tr, host.pool_label), eval_set=pool(va))
    seconds = time.perf_counter() - t0
    best, valid = _best_staged(model.staged_predict(va.X), va, 1)
    scores = model.predict(fold.test.X, ntree_end=best)
    return scores, valid, best, seconds


def _fit_nn(method, fold, seed, config, budget):
    import torch

    from approx_gbdt.neural import NeuralRanker

    torch.set_num_threads(budget.threads)
    params = {
        "loss": method.objective,
        "hidden": NN_HIDDEN,
        "lr": config["lr"],
        "batch_queries": config["batch_queries"],
        "seed": seed,
        "device": "cpu",
        "eval_at": 10,
    }
    if budget.nn_epochs is not None:
        params["max_epochs"] = budget.nn_epochs
    if budget.nn_patience is not None:
        params["patience"] = budget.nn_patience
    params.update(method.opts)
    tr, va = fold.train, fold.vali
    t0 = time.perf_counter()
    model = NeuralRanker(**params).fit(
        tr.X, tr.y, _sizes(tr), eval_set=(va.X, va.y, _sizes(va))
    )
    seconds = time.perf_counter() - t0
    return model.predict(fold.test.X), float(model.best_score_), int(model.best_step_), seconds


def _boosted_model(method, config, budget):
    """AdaRank / RankBoost with the grid point ``config``, then the method's own options."""
    from approx_gbdt import AdaRank, RankBoost

    params = dict(config or {})
    if budget is not None:
        params.update(n_estimators=budget.rounds, early_stopping_rounds=budget.patience,
                      eval_at=10)
    if method.library == "ada":
        params["measure"] = method.objective
    params.update(method.opts)
    return (AdaRank if method.library == "ada" else RankBoost)(**params)


def _fit_boosted(method, fold, config, budget):
    """AdaRank / RankBoost (deterministic: the seed plays no part), rounds chosen on the
    validation NDCG@10 as for the boosters."""
    model = _boosted_model(method, config, budget)
    tr, va = fold.train, fold.vali
    t0 = time.perf_counter()
    model.fit(tr.X, tr.y, _sizes(tr), eval_set=(va.X, va.y, _sizes(va)))
    seconds = time.perf_counter() - t0
    return model.predict(fold.test.X), float(model.best_score_), int(model.best_iteration_), \
        seconds


# ---------------------------------------------------------------------------------------------
# Worker processes
# ---------------------------------------------------------------------------------------------

_FOLDS: dict = {}
_XGB_CACHE: dict = {}


def worker_init(threads: int):
    """Limit every thread pool of a worker process (numba, OpenMP, torch) to ``threads``."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    except ImportError:  # pragma: no cover
        pass


def run_unit(task: dict) -> dict:
    """Train one (method, fold, seed) over the tuning grid, keep the best on validation.

    Returns the chosen configuration, the per-query test measures of its model and timings.
    """
    zero_based = task.get("zero_based", False)
    key = (task["data"], task["n_folds"], zero_based)
    if key not in _FOLDS:
        _FOLDS.clear()
        _XGB_CACHE.clear()
        _FOLDS[key] = load_folds(task["data"], task["n_folds"], zero_based=zero_based)
    fold = _FOLDS[key][task["fold"]]
    method = parse_method(task["method"])
    budget = Budget(**task["budget"])
    tried = []
    best = None
    t0 = time.perf_counter()
    errors = []
    for config in grid_for(method, task["grid"]):
        try:
            scores, valid, n_iter, seconds = fit_predict(
                method, fold, task["seed"], config, budget, _XGB_CACHE
            )
        except Exception as err:  # one failing configuration must not end a long run
            errors.append(f"{config_label(method, config)}: {type(err).__name__}: {err}")
            continue
        if not np.all(np.isfinite(scores)):
            errors.append(f"{config_label(method, config)}: non-finite test scores")
            continue
        tried.append((config_label(method, config), valid, n_iter, seconds))
        # ties (and NaN validation scores): the first configuration in the grid
        if best is None or valid > best[1] or (best[1] != best[1] and valid == valid):
            best = (scores, valid, n_iter, seconds, config_label(method, config))
    if best is None:
        raise RuntimeError(f"{method.name}, fold {task['fold']}, seed {task['seed']}: every "
                           "configuration failed: " + "; ".join(errors))
    scores, valid, n_iter, seconds, label = best
    return {
        "method": task["method"],
        "fold": task["fold"],
        "seed": task["seed"],
        "config": label,
        "valid": valid,
        "iterations": n_iter,
        "seconds": seconds,
        "grid_seconds": time.perf_counter() - t0,
        "tried": tried,
        "errors": errors,
        "test": per_query_measures(scores, fold.test),
    }


# ---------------------------------------------------------------------------------------------
# Report helpers
# ---------------------------------------------------------------------------------------------


def command_line(script: str, argv: list[str]) -> str:
    import shlex

    return "python " + " ".join(shlex.quote(a) for a in [script, *argv])


def commit() -> str:
    """The repository's short commit, marked when ``approx_gbdt/`` has uncommitted changes
    ("unknown" without git)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "approx_gbdt"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (approx_gbdt/ has uncommitted changes)" if dirty else "")


def environment() -> str:
    import lightgbm
    import numpy
    import scipy
    import xgboost

    import approx_gbdt

    parts = [
        f"approx_gbdt {approx_gbdt.__version__} at git {commit()}",
        f"lightgbm {lightgbm.__version__}",
        f"xgboost {xgboost.__version__}",
        f"numpy {numpy.__version__}",
        f"scipy {scipy.__version__}",
    ]
    try:
        import torch

        parts.append(f"torch {torch.__version__}")
    except ImportError:
        parts.append("torch not installed")
    parts.append(f"Python {platform.python_version()}")
    return ", ".join(parts)


def header(title: str, script: str, argv: list[str]) -> list[str]:
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"# {title}",
        "",
        f"Produced by `{command_line(script, argv)}` (from the repository root) on {date}.",
        "",
        f"Versions: {environment()}; {os.cpu_count()} CPU cores ({sys.platform}).",
        "",
    ]


def md_table(head: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    align = align or ("l" + "r" * (len(head) - 1))
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines
