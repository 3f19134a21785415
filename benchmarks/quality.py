"""Ranking quality of ApproxNDCG / ApproxAP against the native ranking objectives.

k-fold evaluation, the same protocol and the same tuning budget for every method:

- per fold: train on ``train``, early stopping on the validation NDCG@10 (``approx_gbdt.metrics``:
  equal scores ranked worst case, queries without a relevant document excluded), patience 50,
  at most 2000 rounds, learning rate 0.05; LightGBM 31 leaves, XGBoost max_depth 6; row
  bagging 0.8 every round and 0.9 of the features per tree, so that the seed matters (LightGBM
  ``bagging_fraction``/``feature_fraction``, XGBoost ``subsample``/``colsample_bytree``); the
  seed is the learner's ``seed``;
- tuning (``--grid small``): 4 configurations per method, L2 on the leaf values {0, 1} x
  minimum child Hessian sum {1e-3, 1} (LightGBM ``lambda_l2``/``min_sum_hessian_in_leaf``,
  XGBoost ``lambda``/``min_child_weight``), the one with the best validation NDCG@10 kept;
  ``--grid shape``: the same 4 points at two tree shapes, 8 configurations per tree learner
  (the protocol's trees, and trees of depth 4: LightGBM ``max_depth`` 4 with 16 leaves,
  XGBoost ``max_depth`` 4, CatBoost ``depth`` 4; CatBoost's 4 L2 values at both depths);
  the neural baseline gets 4 configurations with either grid (Adam learning rate x queries
  per batch);
- test: NDCG@1/3/5/10, MAP, P@10, MRR per query (relevance ``label >= 1`` for the binary
  measures); mean over the test queries with at least one relevant document, pooled over the
  folds, of the per-query values averaged over the seeds.

Outputs (``--out``, default ``benchmarks/results``): ``quality_<data>.md`` (command, versions,
the main table, paired tests of every method against LightGBM lambdarank and against
``lgb:approx_ndcg``, the cross-metric matrix of Yilmaz & Robertson 2009) and
``quality_<data>.json`` (per-run details).

The default methods include the rivals of the papers: ``lgb:soft_ndcg`` (SoftRank),
``ada:ndcg`` / ``ada:map`` (AdaRank) and ``rb:rankboost`` (RankBoost); AdaRank and RankBoost
have their own 4-point grids (``benchmarks/_common.py``) and, being deterministic, are trained
once per fold (that run stands for every seed).

Examples::

    python benchmarks/quality.py                                # MQ2008, 5 folds, 3 seeds
    python benchmarks/quality.py --data generated
    python benchmarks/quality.py --data mq2008-small --grid none --neural   # 60 training queries
    python benchmarks/quality.py --data lgb-yahoo --seeds 5
    python benchmarks/quality.py --data path/to/MQ2008 --folds 1 --grid none
    python benchmarks/quality.py --methods default "lgb:approx_ndcg(hessian=bound)"
    python benchmarks/quality.py --methods lgb:lambdarank cb:YetiRank --seeds 1
    python benchmarks/quality.py --quick --data generated --out /tmp/q   # smoke run
"""

from __future__ import annotations

import os

# One thread per worker process: the numba kernels read this at import, and oversubscribed
# OpenMP / numba thread pools are many times slower on a shared 2-core machine.
os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from concurrent.futures import ProcessPoolExecutor, as_completed  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402
from tqdm import tqdm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DEFAULT_METHODS = [
    "lgb:lambdarank",
    "lgb:rank_xendcg",
    "xgb:rank:ndcg",
    "xgb:rank:map",
    "xgb:rank:pairwise",
    "lgb:approx_ndcg",
    "lgb:approx_ap",
    "xgb:approx_ndcg",
    "xgb:approx_ap",
    # ApproxNDCG with swap-value (chord) pair forces, with and without label-aware positions.
    "lgb:approx_ndcg(pair_force=chord,hessian=bound)",
    "lgb:approx_ndcg(positions=label_aware,pair_force=chord)",
    # Rows for the cross-metric matrix (Yilmaz & Robertson 2009): the same smoothing, a
    # truncated target measure. For k=1 the default truncation sharpness beta=10 learns
    # nothing from the constant initial score (sigmoid(beta (k + 1/2 - pos)) is ~e^-85 at
    # pos ~ (n + 1)/2 = 10 on MQ2008, so every gradient vanishes and early stopping keeps
    # round 1); beta=1 trains.
    "lgb:approx_ndcg(k=10)",
    "lgb:approx_ndcg(k=1,beta=1)",
    # The rivals of Qin, Liu & Li (2010) and Xu et al. (2008): SoftRank's expected NDCG as a
    # LightGBM objective, AdaRank-NDCG, AdaRank-MAP and RankBoost (linear, single features).
    "lgb:soft_ndcg",
    "ada:ndcg",
    "ada:map",
    "rb:rankboost",
]
NEURAL_METHODS = ["nn:approx_ndcg", "nn:approx_ndcg(gumbel_samples=8)"]
CATBOOST_METHODS = ["cb:YetiRank", "cb:YetiRankPairwise", "cb:LambdaMart", "cb:QuerySoftMax"]
REFERENCE = "lgb:lambdarank"
# Every method is also tested, paired, against these.
REFERENCES = (REFERENCE, "lgb:approx_ndcg")
# Libraries whose training does not depend on the seed: one run per fold stands for every seed.
DETERMINISTIC = ("ada", "rb")
MAIN_MEASURES = ("NDCG@1", "NDCG@3", "NDCG@5", "NDCG@10", "MAP", "P@10", "MRR")
PAIRED_MEASURES = ("NDCG@10", "MAP")


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="k-fold ranking quality of the approx objectives against native ones.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("Examples::")[1],
    )
    p.add_argument("--data", default="mq2008",
                   help="mq2008 (default), mq2008-small, generated, generated-long, lgb-yahoo, "
                        "mslr-sample or a LETOR folder")
    p.add_argument("--folds", type=int, default=None, help="use only the first N folds")
    p.add_argument("--zero-based", action="store_true",
                   help="a LETOR folder's files number features from 0 (LETOR's from 1)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    p.add_argument("--grid", choices=sorted(C.GRIDS), default="small",
                   help="tuning grid, the same for every method (default small: 4 configs; "
                        "shape: 8 for the tree learners, the small grid at two tree shapes)")
    p.add_argument("--methods", nargs="+", default=["default"],
                   help="method names (see benchmarks/_common.py); 'default' expands to the "
                        "default list; e.g. default 'lgb:approx_ndcg(alpha=20,hessian=bound)' "
                        "'xgb:approx_precision@5'")
    p.add_argument("--also-paired", nargs="*", default=[], metavar="METHOD",
                   help=f"further references for the paired test (besides {REFERENCE})")
    p.add_argument("--rounds", type=int, default=2000, help="maximum boosting rounds")
    p.add_argument("--patience", type=int, default=50, help="early-stopping patience (rounds)")
    p.add_argument("--nn-epochs", type=int, default=None,
                   help="neural baseline: epoch budget (default: NeuralRanker's step budget)")
    p.add_argument("--nn-patience", type=int, default=None,
                   help="neural baseline: patience in epochs (default: NeuralRanker's, in steps)")
    nn = p.add_mutually_exclusive_group()
    nn.add_argument("--neural", dest="neural", action="store_true", default=None,
                    help="include the neural baseline even on large data")
    nn.add_argument("--no-neural", dest="neural", action="store_false",
                    help="leave the neural baseline out")
    p.add_argument("--no-catboost", dest="catboost", action="store_false", default=None,
                   help="leave CatBoost's objectives out of 'default' (they are included "
                        "when catboost is installed)")
    p.add_argument("--neural-max-docs", type=int, default=200_000,
                   help="by default the neural baseline runs only if the training split of a "
                        "fold has at most this many documents")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--threads", type=int, default=1, help="threads per worker (default 1)")
    p.add_argument("--out", default=str(C.REPO / "benchmarks" / "results"),
                   help="output folder (default benchmarks/results)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 fold, 1 seed, no grid, 30 rounds, patience 10, "
                        "3 neural epochs")
    args = p.parse_args(argv)
    if args.quick:
        args.folds, args.seeds, args.grid = 1, 1, "none"
        args.rounds, args.patience, args.nn_epochs, args.nn_patience = 30, 10, 3, 2
    return args


def resolve_methods(args, folds) -> list[C.Method]:
    names = []
    for name in C.split_methods(args.methods):
        if name == "default":
            names += DEFAULT_METHODS
            include_nn = args.neural
            if include_nn is None:
                include_nn = max(f.train.y.size for f in folds) <= args.neural_max_docs
            if include_nn and C.neural_available():
                names += NEURAL_METHODS
            if args.catboost is not False and C.catboost_available():
                names += CATBOOST_METHODS
        else:
            names.append(name)
    methods, seen = [], set()
    for name in names:
        m = C.parse_method(name)
        if m.name in seen:
            continue
        if m.library == "nn" and not C.neural_available():
            raise SystemExit(f"{m.name}: approx_gbdt.neural does not import (torch missing?)")
        if m.library == "cb" and not C.catboost_available():
            raise SystemExit(f"{m.name}: catboost is not installed (pip install catboost)")
        seen.add(m.name)
        methods.append(m)
    return methods


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------


def t_interval(x):
    """Mean and half-width of the 95 % t interval."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    if n < 2:
        return float(np.mean(x)) if n else float("nan"), float("nan")
    half = stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / np.sqrt(n)
    return float(x.mean()), float(half)


def pooled(results, methods, n_folds):
    """``{method: {measure: per-(fold, query) value averaged over seeds}}``, folds in order."""
    by = defaultdict(list)
    for r in results:
        by[(r["method"], r["fold"])].append(r["test"])
    out = {}
    for m in methods:
        out[m.name] = {}
        for measure in C.MEASURES:
            parts = []
            for f in range(n_folds):
                runs = np.stack([t[measure] for t in by[(m.name, f)]])
                parts.append(runs.mean(axis=0))  # NaN (no relevant document) in every seed
            out[m.name][measure] = np.concatenate(parts)
    return out


def paired(a, b):
    """a - b over the queries where both are defined: mean, CI half-width, t-test p, Wilcoxon p."""
    ok = ~(np.isnan(a) | np.isnan(b))
    d = a[ok] - b[ok]
    mean, half = t_interval(d)
    if d.size < 2 or np.allclose(d, 0):
        return mean, half, float("nan"), float("nan"), int(d.size)
    p_t = float(stats.ttest_rel(a[ok], b[ok]).pvalue)
    p_w = float(stats.wilcoxon(d).pvalue)
    return mean, half, p_t, p_w, int(d.size)


def target_measure(m: C.Method) -> str | None:
    """The test measure (column of the cross-metric matrix) a method's objective targets."""
    if m.library == "ada":
        return "MAP" if m.objective == "map" else "NDCG"
    k = m.opts.get("k")
    if m.objective in ("approx_ndcg", "approx_dcg", "soft_ndcg"):  # DCG: listed with NDCG
        return "NDCG" if k is None else f"NDCG@{k}"
    if m.objective in ("approx_ap", "rank:map"):
        return "MAP"
    if m.objective == "approx_mrr":
        return "MRR"
    if m.objective == "approx_precision":
        return f"P@{k if k is not None else C.OBJECTIVES['approx_precision'].instance.k}"
    if m.objective in ("lambdarank", "rank_xendcg", "rank:ndcg") or m.library == "cb":
        return "NDCG"
    return None


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def shape_text(config) -> str:
    """The tree depth of a grid point of the ``shape`` grid, for the protocol's text."""
    return f", depth {config['depth']}" if config.get("depth") else ""


def rivals_protocol(methods, grid) -> str:
    """The protocol sentence of the AdaRank / RankBoost rows (empty without them)."""
    libs = {m.library for m in methods} & set(DETERMINISTIC)
    if not libs:
        return ""
    parts = []
    if "ada" in libs:
        parts.append("AdaRank: " + "; ".join(C.config_label(C.parse_method("ada:ndcg"), g)
                                             for g in C.ADA_GRIDS[grid]))
    if "rb" in libs:
        parts.append("RankBoost: " + "; ".join(C.config_label(C.parse_method("rb:rankboost"), g)
                                               for g in C.RB_GRIDS[grid]))
    return (
        "AdaRank and RankBoost (linear in the features) boost up to the same maximum number of "
        "rounds with the same patience on the validation NDCG@10, over their own grids of "
        + ("4 points, having no trees to shape" if grid == "shape" else "the same size")
        + " (" + "; ".join(parts) + "); they do not depend on the seed, so each is "
        "trained once per fold and that run stands for every seed. "
    )


def fmt(x, nd=4):
    return "nan" if x != x else f"{x:.{nd}f}"


def pfmt(p):
    if p != p:
        return "–"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def nn_schedule(args) -> str:
    """The neural baseline's training schedule, in words."""
    try:
        from approx_gbdt.neural import (
            DEFAULT_MAX_STEPS,
            DEFAULT_PATIENCE_STEPS,
            MIN_PATIENCE_STEPS,
            PATIENCE_STEPS_PER_QUERY,
        )
    except ImportError:  # no torch: no neural rows
        return "not run"

    budget = (f"at most {args.nn_epochs} epochs" if args.nn_epochs is not None
              else f"at most {DEFAULT_MAX_STEPS} optimiser steps")
    patience = (f"patience {args.nn_patience} epochs" if args.nn_patience is not None
                else f"patience {PATIENCE_STEPS_PER_QUERY} steps per training query, "
                     f"{MIN_PATIENCE_STEPS}-{DEFAULT_PATIENCE_STEPS}")
    return f"{budget}, {patience}; batch 'auto' = min(128, ceil(training queries / 8))"


def report(args, argv, folds, methods, results, elapsed, failed=()) -> tuple[str, dict]:
    data = C.dataset_label(args.data)
    n_folds = len(folds)
    values = pooled(results, methods, n_folds)
    lines = C.header(f"Ranking quality on {data}", "benchmarks/quality.py", argv)
    lines += [
        f"Data: {C.describe_folds(folds)}.",
        "",
        f"Protocol: {n_folds} fold(s) x {args.seeds} seed(s); per fold, train on train, early "
        f"stopping on the validation NDCG@10 (patience {args.patience}, at most {args.rounds} "
        f"rounds; neural: {nn_schedule(args)}), learning rate "
        f"{C.LEARNING_RATE}, LightGBM {C.NUM_LEAVES} leaves, XGBoost max_depth {C.MAX_DEPTH}, "
        f"CatBoost oblivious trees of depth {C.MAX_DEPTH} (its own early stopping on "
        "NDCG:top=10;type=Exp, then the best round by the validation NDCG@10 below), "
        f"row bagging {C.SUBSAMPLE} per round and {C.COLSAMPLE} of the features per tree (the "
        "seed is the learner's seed). Tuning grid "
        f"'{args.grid}' ({len(C.GRIDS[args.grid])} configuration(s) per "
        f"{'tree learner' if args.grid == 'shape' else 'method'}, chosen per fold "
        "and seed on the validation NDCG@10): "
        + "; ".join(f"L2={g['l2']:g}, min child Hessian={g['min_hess']:g}{shape_text(g)}"
                    for g in C.GRIDS[args.grid])
        + " (LightGBM lambda_l2 / min_sum_hessian_in_leaf, XGBoost lambda / min_child_weight"
        + (f"; depth {C.SHALLOW_DEPTH}: LightGBM max_depth {C.SHALLOW_DEPTH} with "
           f"{2 ** C.SHALLOW_DEPTH} leaves, XGBoost max_depth {C.SHALLOW_DEPTH}, CatBoost depth "
           f"{C.SHALLOW_DEPTH}" if args.grid == "shape" else "")
        + "); CatBoost: " + "; ".join(f"l2_leaf_reg={g['l2']:g}{shape_text(g)}"
                                 for g in C.CB_GRIDS[args.grid])
        + " (CatBoost's defaults otherwise: MVS bootstrap of 0.8, random_strength 1, each "
        f"loss's own leaf estimation; rsm {C.COLSAMPLE}; the approx objectives, `cb:approx_*`, "
        "through approx_gbdt.catboost_host.CatBoostObjective: plain boosting, one Newton step "
        "per leaf, early stopping on the adapter's NDCG@10); "
        "neural: " + "; ".join(f"lr={g['lr']:g}, batch of {g['batch_queries'] or 'auto'} queries"
                               for g in C.NN_GRIDS[args.grid])
        + ". " + rivals_protocol(methods, args.grid)
        + "XGBoost rank:map is trained on binarised labels (label >= 1; XGBoost 3 refuses "
        "graded labels for it); every test measure uses the original labels.",
        "",
        "Measures: equal scores ranked worst case; relevance label >= 1 for MAP, P@10 and MRR; "
        "queries without a relevant document are excluded (LightGBM's own ndcg/map metrics "
        "count them as 1, so its logged values are higher on MQ2008, where 220 of 784 queries "
        "have none).",
        "",
        f"Wall time {elapsed / 60:.1f} min with {args.jobs} worker(s) x {args.threads} "
        "thread(s).",
        "",
        "Methods (objective settings at run time):",
        "",
    ]
    lines += [f"- `{m.name}`: {C.objective_repr(m)}" for m in methods]
    if failed:
        lines += ["", "Failed runs (their methods are left out):", ""]
        lines += [f"- {text}" for text in failed]
    config_errors = [f"{r['method']} fold {r['fold']} seed {r['seed']}: {e}"
                     for r in results for e in r.get("errors", [])]
    if config_errors:
        lines += ["", "Grid points that failed (the others were compared):", ""]
        lines += [f"- {text}" for text in config_errors]

    # -- main table ---------------------------------------------------------------------------
    by_method = defaultdict(list)
    for r in results:
        by_method[r["method"]].append(r)
    summary = {}
    rows = []
    best = {meas: max(np.nanmean(values[m.name][meas]) for m in methods)
            for meas in MAIN_MEASURES}
    for m in methods:
        runs = by_method[m.name]
        cells = []
        summary[m.name] = {}
        for meas in MAIN_MEASURES:
            v = values[m.name][meas]
            mean, half = t_interval(v[~np.isnan(v)])
            summary[m.name][meas] = {"mean": mean, "ci95": half}
            text = f"{fmt(mean)} ± {fmt(half, 3)}"
            cells.append(f"**{text}**" if np.isclose(mean, best[meas]) else text)
        iters = [r["iterations"] for r in runs]
        secs = [r["seconds"] for r in runs]
        configs = Counter(r["config"] for r in runs).most_common(1)[0]
        summary[m.name].update(iterations=float(np.mean(iters)), seconds=float(np.mean(secs)))
        rows.append([f"`{m.name}`", *cells, f"{np.mean(iters):.0f}", f"{np.mean(secs):.1f}",
                     f"{configs[0]} ({configs[1]}/{len(runs)})"])
    n_q = int(np.sum(~np.isnan(values[methods[0].name]["NDCG@10"])))
    lines += [
        "",
        "## Test measures",
        "",
        f"Mean ± half-width of the 95 % t interval over the {n_q} test queries with a relevant "
        f"document (pooled over {n_folds} fold(s)) of the per-query value averaged over "
        f"{args.seeds} seed(s); best mean in bold. Rounds: boosting rounds (optimiser steps "
        "for `nn:`) of the kept model, mean over folds and seeds; seconds: training time of "
        "the kept model (one process, one thread); config: the most often chosen grid point.",
        "",
    ]
    lines += C.md_table(
        ["method", *MAIN_MEASURES, "rounds", "train s", "config (times chosen)"], rows,
        "l" + "r" * (len(MAIN_MEASURES) + 2) + "l",
    )

    # -- paired tests -------------------------------------------------------------------------
    names = [m.name for m in methods]
    for reference in dict.fromkeys([*REFERENCES, *(C.parse_method(n).name
                                                 for n in args.also_paired)]):
        if reference not in names:
            continue
        ref = values[reference]
        key = "" if reference == REFERENCE else f"_vs_{reference}"
        rows = []
        for m in methods:
            if m.name == reference:
                continue
            row = [f"`{m.name}`"]
            for meas in PAIRED_MEASURES:
                mean, half, p_t, p_w, n = paired(values[m.name][meas], ref[meas])
                summary[m.name][f"paired_{meas}{key}"] = {
                    "diff": mean, "ci95": half, "p_ttest": p_t, "p_wilcoxon": p_w, "n": n
                }
                row += [f"{mean:+.4f} ± {fmt(half, 4)}", pfmt(p_t), pfmt(p_w)]
            rows.append(row + [str(n)])
        lines += [
            "",
            f"## Paired test against `{reference}`",
            "",
            "Difference (method − reference) of the seed-averaged per-query test value, paired "
            "over (fold, query), queries with a relevant document only: mean ± half-width of "
            "the 95 % t interval, two-sided p-values of the paired t-test "
            "(`scipy.stats.ttest_rel`) and of the Wilcoxon signed-rank test "
            "(`scipy.stats.wilcoxon`, zero differences dropped). No correction for the "
            f"{len(methods) - 1} comparisons.",
            "",
        ]
        head = ["method"]
        for meas in PAIRED_MEASURES:
            head += [f"Δ{meas}", "p (t)", "p (Wilcoxon)"]
        lines += C.md_table(head + ["queries"], rows)

    # -- against the best peer ----------------------------------------------------------------
    peers = [m for m in methods if m.library != "nn" and m.objective in C.NATIVE.get(m.library, ())]
    ours = [m for m in methods if m not in peers]
    if peers and ours:
        avg = {m.name: np.mean([values[m.name][f"NDCG@{k}"] for k in (1, 3, 5, 10)], axis=0)
               for m in methods}
        best_peer = max(peers, key=lambda m: np.nanmean(avg[m.name])).name
        peer_mean = float(np.nanmean(avg[best_peer]))
        rows = []
        for m in ours:
            mine = float(np.nanmean(avg[m.name]))
            mean, half, p_t, p_w, _ = paired(avg[m.name], avg[best_peer])
            summary[m.name]["ndcg_1_10"] = {"mean": mine, "best_peer": best_peer,
                                            "ratio": mine / peer_mean, "diff": mean,
                                            "ci95": half, "p_ttest": p_t}
            rows.append([f"`{m.name}`", fmt(mine), f"{mine / peer_mean:.3f}",
                         f"{mean:+.4f} ± {fmt(half, 4)}", pfmt(p_t), pfmt(p_w)])
        lines += [
            "",
            "## Against the best peer",
            "",
            "NDCG@1-10: the mean of NDCG@1, @3, @5 and @10 per query. Best peer: the native "
            f"objective (LightGBM, XGBoost, CatBoost) with the highest mean, `{best_peer}` "
            f"({fmt(peer_mean)}). Ratio: method / best peer; difference paired over queries "
            "as above.",
            "",
        ]
        lines += C.md_table(["method", "NDCG@1-10", "ratio", "Δ vs best peer", "p (t)",
                             "p (Wilcoxon)"], rows)

    # -- cross-metric matrix ------------------------------------------------------------------
    means = {m.name: {meas: float(np.nanmean(values[m.name][meas])) for meas in C.MEASURES}
             for m in methods}
    ranks = {}
    for meas in C.MEASURES:
        order = sorted(names, key=lambda n, meas=meas: -means[n][meas])
        for i, n in enumerate(order):
            ranks[(n, meas)] = i + 1
    rows = []
    for m in methods:
        target = target_measure(m)
        cells = []
        for meas in C.MEASURES:
            text = f"{means[m.name][meas]:.4f} ({ranks[(m.name, meas)]})"
            cells.append(f"**{text}**" if meas == target else text)
        mean_rank = np.mean([ranks[(m.name, meas)] for meas in C.MEASURES])
        rows.append([f"`{m.name}`", target or "–", *cells, f"{mean_rank:.1f}"])
    lines += [
        "",
        "## Cross-metric matrix (Yilmaz & Robertson 2009)",
        "",
        "Rows: the objective trained on (its target measure; LightGBM lambdarank, rank_xendcg, "
        "XGBoost rank:ndcg, CatBoost's objectives and approx_dcg are listed as NDCG "
        "surrogates; rank:pairwise, approx_recall and approx_rbp target no column); "
        "columns: the test measure (NDCG = untruncated). Cell: mean test value as above "
        "(rank among the rows in that column); the cell of the row's own target in bold.",
        "",
    ]
    lines += C.md_table(["trained on", "target", *C.MEASURES, "mean rank"], rows,
                        "ll" + "r" * (len(C.MEASURES) + 1))

    rows = []
    for meas in C.MEASURES:
        direct = [n for n in names if target_measure(C.parse_method(n)) == meas]
        other = [n for n in names if n not in direct]
        if not direct or not other:
            continue
        d = max(direct, key=lambda n, meas=meas: means[n][meas])
        o = max(other, key=lambda n, meas=meas: means[n][meas])
        mean, half, p_t, _, _ = paired(values[o][meas], values[d][meas])
        rows.append([meas, f"`{d}`", fmt(means[d][meas]), f"`{o}`", fmt(means[o][meas]),
                     f"{mean:+.4f} ± {fmt(half, 4)}", pfmt(p_t)])
    if rows:
        lines += [
            "",
            "Does training on the test measure itself win? Per test measure: the best row "
            "whose objective targets it, against the best row that targets something else "
            "(difference other − direct, paired over queries, t-test p; the best-of selection "
            "makes these optimistic for the winner).",
            "",
        ]
        lines += C.md_table(["test measure", "best direct", "value", "best other", "value",
                             "Δ (other − direct)", "p (t)"], rows, "lllllrr")
    lines.append("")
    return "\n".join(lines), summary


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    folds = C.load_folds(args.data, args.folds, zero_based=args.zero_based)
    methods = resolve_methods(args, folds)
    missing = [n for n in args.also_paired
               if C.parse_method(n).name not in {m.name for m in methods}]
    if missing:
        raise SystemExit(f"--also-paired: not among the methods run: {', '.join(missing)}")
    budget = {
        "rounds": args.rounds, "patience": args.patience, "nn_epochs": args.nn_epochs,
        "nn_patience": args.nn_patience, "threads": args.threads,
    }
    tasks = [
        {"data": args.data, "n_folds": args.folds, "zero_based": args.zero_based, "fold": f,
         "method": m.name, "seed": s, "grid": args.grid, "budget": budget}
        for m in methods for f in range(len(folds))
        for s in range(1 if m.library in DETERMINISTIC else args.seeds)
    ]
    # Longest first (neural, then XGBoost) for a better balance across the workers.
    order = {"nn": 0, "cb": 1, "xgb": 2, "lgb": 3}
    tasks.sort(key=lambda t: order.get(t["method"].split(":")[0], 4))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results, failed = [], []
    bar = tqdm(total=len(tasks), desc=f"quality {C.dataset_label(args.data)}", unit="run")
    if args.jobs <= 1:
        C.worker_init(args.threads)
        for task in tasks:
            try:
                results.append(C.run_unit(task))
            except RuntimeError as err:
                failed.append(str(err))
                tqdm.write(f"FAILED: {err}")
            bar.update()
    else:
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(args.jobs, mp_context=ctx, initializer=C.worker_init,
                                 initargs=(args.threads,)) as pool:
            futures = {pool.submit(C.run_unit, t): t for t in tasks}
            for fut in as_completed(futures):
                try:
                    results.append(fut.result())
                    bar.set_postfix_str(results[-1]["method"], refresh=False)
                except RuntimeError as err:
                    failed.append(str(err))
                    tqdm.write(f"FAILED: {err}")
                bar.update()
    bar.close()
    elapsed = time.perf_counter() - t0
    # a deterministic method's seed-0 run stands for every seed (identical models)
    results += [dict(r, seed=s) for r in list(results)
                if r["method"].split(":")[0] in DETERMINISTIC for s in range(1, args.seeds)]
    done = Counter(r["method"] for r in results)
    incomplete = [m for m in methods if done[m.name] < len(folds) * args.seeds]
    if incomplete:
        print("left out of the report (failed runs): " + ", ".join(m.name for m in incomplete))
        methods = [m for m in methods if m not in incomplete]
        results = [r for r in results if done[r["method"]] == len(folds) * args.seeds]
    if not methods:
        raise SystemExit("every method failed:\n" + "\n".join(failed))
    text, summary = report(args, argv, folds, methods, results, elapsed, failed)
    label = C.dataset_label(args.data)
    md = out_dir / f"quality_{label}.md"
    md.write_text(text)
    runs = [{k: v for k, v in r.items() if k != "test"} for r in results]
    runs.sort(key=lambda r: (r["method"], r["fold"], r["seed"]))
    (out_dir / f"quality_{label}.json").write_text(json.dumps(
        {"command": C.command_line("benchmarks/quality.py", argv), "summary": summary,
         "runs": runs}, indent=1))
    print(f"wrote {md} ({elapsed / 60:.1f} min)")
    return md


if __name__ == "__main__":
    main()
