"""Qin, Liu & Li (2010) protocol for the linear ApproxNDCG / ApproxAP model.

Protocol (Qin et al., section 5.3-5.4), per fold:

1. a grid of alpha values {50, 100, 150, 200, 250, 300} (and, for ApproxAP, beta values
   {1, 10, 20, 50, 100});
2. for each grid point, K = 10 random restarts of a linear model;
3. keep the model with the best validation measure (MAP for ApproxAP, NDCG@n for ApproxNDCG);
4. report that model's test NDCG@1/3/5/10 and MAP.

Differences from the paper, stated: the linear model is ``NeuralRanker(hidden=())``, i.e. a
batch-normalised input followed by one linear layer (an affine function of the features at
prediction time), trained by Adam in batches of queries (``--lr``, ``--batch-queries``) with
early stopping on the validation measure, instead of full-batch gradient descent with
step eta = 0.01 and stopping tolerance delta = 0.001. Queries without a relevant document are
excluded from every mean (Bruch et al.'s rule; LETOR's evaluation tool counts them as 0).

``--defaults`` trains with ``NeuralRanker``'s own schedule instead (its optimiser-step budget,
batch size, learning rate and patience; ``--lr``, ``--batch-queries``, ``--max-epochs`` and
``--patience`` are then ignored); with ``--alphas 10 --restarts 1`` that is the linear model with
the package defaults, one model per fold.

Usage::

    python benchmarks/neural_linear_qin.py                      # generated data, quick
    python benchmarks/neural_linear_qin.py --data path/to/MQ2008 --loss approx_ndcg
    python benchmarks/neural_linear_qin.py --data DIR --loss approx_ap --restarts 10 --out r.json
    python benchmarks/neural_linear_qin.py --data DIR --defaults --alphas 10 --restarts 1
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time

import numpy as np

from approx_gbdt.metrics import average_precision, mean_over_queries, ndcg
from approx_gbdt.neural import NeuralRanker
from approx_gbdt.utils import group_sizes_from_ptr


def _floats(text):
    return [float(v) for v in text.split(",") if v.strip()]


def _measures(scores, data, threshold):
    out = {}
    for k in (1, 3, 5, 10):
        out[f"NDCG@{k}"] = mean_over_queries(ndcg(scores, data.y, data.group_ptr, k=k))
    out["MAP"] = mean_over_queries(
        average_precision(scores, data.y, data.group_ptr, threshold=threshold)
    )
    return out


def _folds(args):
    if args.data is None:
        from approx_gbdt.datasets import make_ranking_splits

        splits = make_ranking_splits(
            (args.gen_queries, args.gen_queries // 3, args.gen_queries // 3), seed=args.seed
        )
        return [("generated", splits["train"], splits["valid"], splits["test"])]
    from approx_gbdt.datasets import load_letor_folds

    folds = load_letor_folds(args.data, folds=args.folds)
    return [(f.name, f.train, f.vali, f.test) for f in folds]


def run_fold(name, train, vali, test, args):
    metric = "map" if args.loss == "approx_ap" else "ndcg"
    betas = args.betas if args.loss == "approx_ap" else [args.beta]
    best = None
    n_fits = 0
    t0 = time.perf_counter()
    for alpha, beta in itertools.product(args.alphas, betas):
        for restart in range(args.restarts):
            schedule = {} if args.defaults else dict(
                lr=args.lr,
                batch_queries=args.batch_queries,
                max_epochs=args.max_epochs,
                patience=args.patience,
            )
            model = NeuralRanker(
                loss=args.loss,
                hidden=(),
                alpha=alpha,
                beta=beta if args.loss == "approx_ap" else None,  # ApproxNDCG: no cutoff
                threshold=args.threshold,
                **schedule,
                seed=args.seed + 1000 * restart,
                eval_metric=metric,
                eval_at=None if metric == "map" else args.eval_at,
                device=args.device,
            )
            model.fit(
                train.X,
                train.y,
                group_sizes_from_ptr(train.group_ptr),
                eval_set=(vali.X, vali.y, group_sizes_from_ptr(vali.group_ptr)),
            )
            n_fits += 1
            if args.verbose:
                print(
                    f"  {name} alpha={alpha:g} beta={beta:g} restart={restart} "
                    f"valid {metric}={model.best_score_:.4f} step={model.best_step_}"
                )
            if best is None or model.best_score_ > best[0]:
                best = (model.best_score_, alpha, beta, restart, model)
    score, alpha, beta, restart, model = best
    result = {
        "fold": name,
        "selected": {"alpha": alpha, "beta": beta, "restart": restart,
                     "epochs": model.best_iteration_, "steps": model.best_step_,
                     f"valid_{metric}": score},
        "test": _measures(model.predict(test.X), test, args.threshold),
        "fits": n_fits,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="LETOR dataset folder (Fold1..N or folds.json); "
                   "default: generated data (approx_gbdt.datasets.make_ranking_splits)")
    p.add_argument("--folds", nargs="*", help="fold names to run (default all)")
    p.add_argument("--loss", choices=["approx_ndcg", "approx_ap"], default="approx_ndcg")
    p.add_argument("--alphas", type=_floats, default=[50, 100, 150, 200, 250, 300])
    p.add_argument("--betas", type=_floats, default=[1, 10, 20, 50, 100],
                   help="beta grid for ApproxAP")
    p.add_argument("--beta", type=float, default=10.0, help="beta for ApproxNDCG (unused: k=None)")
    p.add_argument("--restarts", type=int, default=10)
    p.add_argument("--threshold", type=float, default=1.0, help="relevance threshold for AP")
    p.add_argument("--eval-at", type=int, default=10, help="NDCG@n for ApproxNDCG selection")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--batch-queries", type=int, default=128)
    p.add_argument("--max-epochs", type=int, default=100)
    p.add_argument("--patience", type=int, default=10)
    p.add_argument("--defaults", action="store_true",
                   help="NeuralRanker's own training schedule (step budget, batch size, lr, "
                        "patience) instead of --lr/--batch-queries/--max-epochs/--patience")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gen-queries", type=int, default=150, help="train queries if generated")
    p.add_argument("--device", default=None)
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--md", help="write the results as a Markdown table here "
                   "(e.g. benchmarks/results/neural_linear_qin_mq2008.md)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)

    results = []
    for name, train, vali, test in _folds(args):
        res = run_fold(name, train, vali, test, args)
        results.append(res)
        sel = res["selected"]
        print(f"{name}: alpha={sel['alpha']:g} beta={sel['beta']:g} restart={sel['restart']} "
              f"({res['fits']} fits, {res['seconds']} s)  "
              + "  ".join(f"{k} {v:.4f}" for k, v in res["test"].items()))
    keys = list(results[0]["test"])
    mean = {k: float(np.mean([r["test"][k] for r in results])) for k in keys}
    print("mean over folds: " + "  ".join(
        f"{k} {v:.4f}" for k, v in mean.items() if not math.isnan(v)))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"args": vars(args), "folds": results, "mean": mean}, fh, indent=2)
    if args.md:
        write_markdown(args.md, args, argv, results, mean)


def write_markdown(path, args, argv, results, mean):
    import datetime
    import shlex
    import sys

    import torch

    argv = sys.argv[1:] if argv is None else argv
    cmd = " ".join(["python benchmarks/neural_linear_qin.py", *map(shlex.quote, argv)])
    keys = list(mean)
    grid = f"alpha in {{{', '.join(f'{a:g}' for a in args.alphas)}}}"
    if args.loss == "approx_ap":
        grid += f", beta in {{{', '.join(f'{b:g}' for b in args.betas)}}}"
    if args.defaults:
        from approx_gbdt.neural import (
            DEFAULT_MAX_STEPS,
            DEFAULT_PATIENCE_STEPS,
            MIN_PATIENCE_STEPS,
            PATIENCE_STEPS_PER_QUERY,
        )

        training = (
            f"trained with `NeuralRanker`'s default schedule: Adam, lr {NeuralRanker().lr:g}, "
            "batches of min(128, ceil(training queries / 8)) queries, at most "
            f"{DEFAULT_MAX_STEPS} optimiser steps, patience {PATIENCE_STEPS_PER_QUERY} steps "
            f"per training query ({MIN_PATIENCE_STEPS}-{DEFAULT_PATIENCE_STEPS}), "
            "one validation evaluation per epoch"
        )
        unit = "steps"
    else:
        training = (
            f"Adam, lr {args.lr:g}, {args.batch_queries} queries a batch, at most "
            f"{args.max_epochs} epochs, patience {args.patience}"
        )
        unit = "epochs"
    lines = [
        f"# Qin et al. (2010) protocol, linear {args.loss} model\n",
        f"Produced by `{cmd}` (from the repository root) on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; torch "
        f"{torch.__version__}.\n",
        f"Per fold: {grid}, {args.restarts} random restart(s) each; the model with the best "
        f"validation {'MAP' if args.loss == 'approx_ap' else f'NDCG@{args.eval_at}'} is kept "
        "and evaluated on the test fold. The linear model is `NeuralRanker(hidden=())` (batch "
        f"normalisation, one linear layer), {training}. Test means over "
        "queries with a relevant document, ties ranked worst case.\n",
        f"| fold | alpha | beta | restart | {unit} | " + " | ".join(keys) + " | fits | s |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(keys) + "---:|---:|",
    ]
    for r in results:
        s = r["selected"]
        beta = f"{s['beta']:g}" if args.loss == "approx_ap" else "–"
        lines.append(
            f"| {r['fold']} | {s['alpha']:g} | {beta} | {s['restart']} | {s[unit]} | "
            + " | ".join(f"{r['test'][k]:.4f}" for k in keys)
            + f" | {r['fits']} | {r['seconds']} |"
        )
    lines.append("| **mean** | | | | | " + " | ".join(f"**{mean[k]:.4f}**" for k in keys)
                 + " | | |")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
