"""Lean ablations of the ApproxNDCG / ApproxAP objectives for LightGBM.

Protocol, per fold and seed: LightGBM, learning rate 0.05, 31 leaves,
bagging 0.8 every iteration and feature_fraction 0.8 (so that seeds matter), early stopping on
validation NDCG@10 (LightGBM's metric) with patience 50, at most 2000 trees; test NDCG@1/3/5/10
and MAP from :mod:`approx_gbdt.metrics` (worst-case ties, queries without a relevant document
excluded). The anchors (LightGBM lambdarank / rank_xendcg, XGBoost rank:ndcg / rank:map with
eta 0.05, depth 6, subsample 0.8, colsample 0.8) run under the same protocol.

Each per-query metric is first averaged over seeds; "d@k vs LR" is the paired difference to
``lgb:lambdarank`` over test queries (each query is tested in exactly one fold) with its
paired t statistic.

Variants are strings::

    lgb:lambdarank | lgb:rank_xendcg | xgb:rank:ndcg | xgb:rank:map
    lgb:lambdarank|key=val|...   a native objective with further LightGBM parameters
    ndcg[:opt=val,...]    ApproxNDCG(opts)
    hx:mode=M[,floor=F,gamma=G,alpha=A,normalize=0/1]
                          ApproxNDCG gradient with a Hessian combined from the parts of the
                          exact diagonal (``benchmarks/_hessian_parts.py``; O(n^2) loops)
    ap[:opt=val,...]      ApproxAP(hessian="mixed", beta=10, opts)  (Qin et al.'s sharp
                          indicator with the NDCG Hessian: the baseline the AP rows vary)
    A+B                   sum of the components' gradients and Hessians (component option w=)

Objective options: alpha, k, beta, hessian, hessian_floor, hessian_constant, normalize (0/1),
threshold, plus the options the installed :mod:`approx_gbdt.objectives` accepts. Wrapper
options (any component): ``scale=std|gstd`` (score-scale normalisation: per-query or global
score standard deviation, floored by ``scale_floor``, with the chain rule), ``alpha_end`` and
``sched`` (alpha grows geometrically from alpha to alpha_end over sched iterations), ``hmult``
(Hessian multiplier), ``w`` (component weight). Booster options on the first component:
``lr``, ``l2`` (lambda_l2), ``mshl`` (min_sum_hessian_in_leaf), ``leaves``, ``init``
(``noise``: small random initial scores).

Usage::

    nice -n 5 python benchmarks/ablations.py --data mq2008 --set hessian --seeds 3
    python benchmarks/ablations.py --data generated --variants lgb:lambdarank "ndcg:alpha=20"
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("APPROX_GBDT_BACKGROUND_COMPILE", "0")  # as _common: compile here

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
ANCHORS = ["lgb:lambdarank", "lgb:rank_xendcg", "xgb:rank:ndcg", "xgb:rank:map"]

SETS = {
    "anchors": ANCHORS,
    "hessian": [
        "ndcg:hessian=bound,normalize=0",
        "ndcg:hessian=bound,normalize=1",
        "ndcg:hessian=abs,normalize=1",
        "ndcg:hessian=mixed,hessian_floor=0.1,normalize=1",
        "ndcg:hessian=mixed,hessian_floor=0.3,normalize=1",
        "ndcg:hessian=mixed,hessian_floor=1,normalize=1",
        "ndcg:hessian=mixed,hessian_floor=0.1,normalize=0",
        "ndcg:hessian=constant,normalize=1",
        "ndcg:hessian=constant,normalize=0",
    ],
    "alpha": [
        "ndcg:alpha=1",
        "ndcg:alpha=3",
        "ndcg:alpha=30",
        "ndcg:alpha=100",
    ],
    "floor": [
        "ndcg:hessian_floor=0.02",
        "ndcg:hessian_floor=0.05",
        "ndcg:hessian_floor=0.2",
    ],
    "sharpness": [
        "ndcg:alpha_end=100,sched=100",
        "ndcg:alpha=3,alpha_end=30,sched=200",
        "ndcg:alpha=1,scale=std",
        "ndcg:alpha=3,scale=std",
        "ndcg:alpha=10,scale=std",
        "ndcg:alpha=3,scale=gstd",
        "ndcg:alpha=10,scale=gstd",
        "ndcg:lr=0.02",
        "ndcg:lr=0.1",
        "ndcg:hessian=constant,alpha=1",
        "ndcg:hessian=constant,alpha=3",
        "ndcg:hessian=constant,alpha=30",
    ],
    "reg": [
        "ndcg:l2=1",
        "ndcg:l2=10",
        "ndcg:mshl=0.1",
        "ndcg:mshl=1",
        "ndcg:init=noise",
    ],
    "trunc": [
        "ndcg:k=10",
        "ndcg:k=5",
        "ndcg:k=10,beta=1",
        "ndcg:k=5,beta=1",
        "ndcg+ndcg:k=10",
        "ndcg+ndcg:k=5",
        "ndcg+ndcg:k=3",
    ],
    "ap": [
        "ap",
        "ap:hessian=bound",
        "ap:normalize=0",
        "ap:beta=1",
        "ap:beta=50",
        "ap:hessian_floor=0.05",
        "ap:hessian_floor=0.3",
        "ap+ndcg",
    ],
    "extra": [
        "ndcg:hessian=bound,hmult=0.1",
        "ndcg:hessian=bound,hmult=0.3",
        "ndcg:alpha=3,scale=std,scale_floor=1e-9,init=noise",
        "ndcg:alpha=10,scale=std,scale_floor=1e-9,init=noise",
        "ndcg:alpha=30,scale=std,scale_floor=1e-9,init=noise",
    ],
    "ap2": [
        "ap:hessian=bound,beta=1",
        "ap:hessian=bound,beta=3",
        "ap:hessian=bound,beta=0.3",
        "ap:hessian=bound,normalize=0",
        "ap:hessian=abs",
        "ap:hessian=constant",
        "ap:hessian=bound,hmult=0.3",
        "ap:beta=0.3",
        "ap:beta=3",
        "ap:hessian=bound,beta=1,alpha=100",
        "ap:hessian=bound,beta=1,alpha=1",
        "ap:hessian=bound,w=0.5+ndcg:w=0.5",
    ],
    "core": [
        "ndcg",
        "ndcg:hessian=bound",
        "ndcg:hessian=bound,normalize=0",
        "ndcg:normalize=0",
        "ndcg:hessian_floor=0.2",
        "ndcg:alpha=100",
        "ndcg:k=10",
        "ap",
        "ap:hessian=bound,beta=1",
        "ap:hessian=bound,beta=0.3",
    ],
}


# ------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------


def _subset(d, queries):
    from approx_gbdt.datasets import RankingData

    ptr = d.group_ptr
    rows = np.concatenate([np.arange(ptr[q], ptr[q + 1]) for q in queries])
    sizes = np.diff(ptr)[queries]
    return RankingData(d.X[rows], d.y[rows], np.concatenate([[0], np.cumsum(sizes)]))


def _rotation(d, n_parts=5, seed=0):
    """MQ2008-like folds from one pool of queries: 5 parts, train 3 / vali 1 / test 1."""
    nq = d.group_ptr.shape[0] - 1
    perm = np.random.default_rng(seed).permutation(nq)
    parts = np.array_split(perm, n_parts)
    folds = []
    for i in range(n_parts):
        tr = np.sort(np.concatenate([parts[(i + j) % n_parts] for j in range(3)]))
        folds.append(
            (
                f"Fold{i + 1}",
                _subset(d, tr),
                _subset(d, np.sort(parts[(i + 3) % n_parts])),
                _subset(d, np.sort(parts[(i + 4) % n_parts])),
            )
        )
    return folds


def load(name):
    """List of (fold name, train, vali, test) RankingData."""
    from approx_gbdt.datasets import _concat, load_letor, load_letor_folds, make_ranking_splits

    if name == "mq2008":
        return [(f.name, f.train, f.vali, f.test) for f in load_letor_folds(DATA / "MQ2008")]
    if name == "generated":
        out = []
        for s in range(3):
            sp = make_ranking_splits((300, 100, 200), seed=s)
            out.append((f"draw{s}", sp["train"], sp["valid"], sp["test"]))
        return out
    if name in ("yahoo", "mslr"):
        if name == "yahoo":
            a = load_letor(DATA / "LightGBM-lambdarank" / "rank.train.gz", n_features=300)
            b = load_letor(DATA / "LightGBM-lambdarank" / "rank.test.gz", n_features=300)
        else:
            folder = DATA / "MSLR-rankeval-sample"
            a = load_letor(folder / "msn1.fold1.train.5k.txt.gz", n_features=136)
            b = load_letor(folder / "msn1.fold1.test.5k.txt.gz", n_features=136)
        return _rotation(_concat([a, b]))
    raise ValueError(f"unknown data set {name!r}")


# ------------------------------------------------------------------------------------------
# Variants
# ------------------------------------------------------------------------------------------

# A bare "ap" is ApproxAP(hessian="mixed", beta=10, hessian_scale=1), the package defaults when
# the ablations began (now hessian="bound", beta=0.3, hessian_scale=0.5); cached runs and tables
# keep that meaning.
AP_BASE = {"hessian": "mixed", "beta": 10.0, "hessian_scale": 1.0}
WRAP_KEYS = {"scale", "scale_floor", "alpha_end", "sched", "hmult", "w"}
BOOST_KEYS = {"lr", "l2", "mshl", "leaves", "init", "rounds"}


def _value(text):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_variant(spec):
    """'ndcg:a=1,b=2+ap:c=3' -> list of (kind, options)."""
    comps = []
    for part in spec.split("+"):
        kind, _, opts = part.partition(":")
        kw = {}
        for item in filter(None, opts.split(",")):
            key, _, val = item.partition("=")
            kw[key] = _value(val)
        comps.append((kind, kw))
    return comps


class HessianParts:
    """ApproxNDCG's gradient with a Hessian combined from the parts of its exact diagonal."""

    def __init__(self, kw):
        from approx_gbdt.objectives import ApproxNDCG

        self.alpha = float(kw.get("alpha", 10.0))
        self.mode = kw.get("mode", "mixed")
        self.floor = float(kw.get("floor", 0.1))
        self.gamma = float(kw.get("gamma", 1.0))
        self.normalize = bool(kw.get("normalize", 1))
        self._prep = ApproxNDCG(alpha=self.alpha)  # gains and 1 / ideal DCG, cached per dataset

    def __call__(self, s, y, ptr, it):
        from _hessian_parts import combine, hessian_parts

        from approx_gbdt import _reference as R

        a = self._prep._prepare(y, ptr, cache=True).arrays
        grad, B, T1, C = (np.empty_like(s) for _ in range(4))
        hessian_parts(s, a["gains"], a["inv_z"], ptr, self.alpha, grad, B, T1, C)
        g = -grad
        h = combine(self.mode, B, T1, C, floor=self.floor, gamma=self.gamma)
        for q in range(ptr.shape[0] - 1):  # log2(1 + S) / S per query, as the package does
            R.finish_query(g[ptr[q]:ptr[q + 1]], h[ptr[q]:ptr[q + 1]], np.empty(0),
                            self.normalize)
        return g, h


class Component:
    """One objective with its wrappers: score scale, alpha schedule, Hessian multiplier."""

    def __init__(self, kind, kw):
        from approx_gbdt.objectives import ApproxAP, ApproxNDCG

        obj_kw = {k: v for k, v in kw.items() if k not in WRAP_KEYS | BOOST_KEYS}
        if kind == "ap":  # AP variants are relative to AP_BASE (beta=10, hessian="mixed")
            obj_kw = {**AP_BASE, **obj_kw}
        if "normalize" in obj_kw:
            obj_kw["normalize"] = bool(obj_kw["normalize"])
        self.obj = (ApproxNDCG if kind == "ndcg" else ApproxAP)(**obj_kw)
        self.alpha0 = self.obj.alpha
        self.scale = kw.get("scale")
        self.scale_floor = float(kw.get("scale_floor", 1e-3))
        self.alpha_end = kw.get("alpha_end")
        self.sched = int(kw.get("sched", 100))
        self.hmult = float(kw.get("hmult", 1.0))
        self.w = float(kw.get("w", 1.0))

    def __call__(self, s, y, ptr, it):
        if self.alpha_end is not None:
            t = min(it / self.sched, 1.0)
            self.obj.alpha = self.alpha0 * (self.alpha_end / self.alpha0) ** t
        if self.scale is None:
            g, h = self.obj.grad_hess(s, y, ptr)
        else:
            g, h = scaled_grad_hess(self.obj, s, y, ptr, self.scale, self.scale_floor)
        return self.w * g, self.w * self.hmult * h


def scaled_grad_hess(obj, s, y, ptr, mode, floor):
    """Gradient of L(s / sigma(s)) with sigma the per-query ('std') or global ('gstd') std.

    L is shift invariant, so with u = (s - mean) / sigma (sigma per query, or over all
    documents), the chain rule gives g = (g_u - u (u . g_u) / m) / sigma where m is the
    number of documents sigma runs over; while sigma is at its floor it is a constant and
    g = g_u / sigma. The Hessian is approximated by h_u / sigma^2.
    """
    sizes = np.diff(ptr)
    qid = np.repeat(np.arange(sizes.shape[0]), sizes)
    if mode == "std":
        cnt = np.maximum(sizes, 1)
        mean = np.bincount(qid, s, minlength=sizes.shape[0]) / cnt
        c = s - mean[qid]
        sd = np.sqrt(np.bincount(qid, c * c, minlength=sizes.shape[0]) / cnt)
        sig = np.maximum(sd, floor)
        u = c / sig[qid]
        gu, hu = obj.grad_hess(u, y, ptr)
        dot = np.bincount(qid, u * gu, minlength=sizes.shape[0]) / cnt
        dot = np.where(sd > floor, dot, 0.0)
        g = (gu - u * dot[qid]) / sig[qid]
        return g, hu / sig[qid] ** 2
    if mode == "gstd":
        c = s - s.mean()
        sd = float(np.sqrt(np.mean(c * c)))
        sig = max(sd, floor)
        u = c / sig
        gu, hu = obj.grad_hess(u, y, ptr)
        g = gu - (u * (u @ gu) / u.shape[0] if sd > floor else 0.0)
        return g / sig, hu / sig**2
    raise ValueError(f"unknown scale {mode!r}")


class Objective:
    """LightGBM callable built from the components; counts its iterations."""

    def __init__(self, comps):
        self.comps = [HessianParts(kw) if k == "hx" else Component(k, kw) for k, kw in comps]
        self.it = 0

    def __call__(self, preds, dataset):
        from approx_gbdt.hosts import host_data

        data = host_data(dataset)
        y, ptr = data.labels, data.group_ptr
        s = np.asarray(preds, dtype=np.float64)
        g = np.zeros_like(s)
        h = np.zeros_like(s)
        for c in self.comps:
            gc, hc = c(s, y, ptr, self.it)
            g += gc
            h += hc
        self.it += 1
        return g, h


# ------------------------------------------------------------------------------------------
# One run
# ------------------------------------------------------------------------------------------


def _sizes(d):
    return np.diff(d.group_ptr)


def _test_metrics(pred, d):
    from approx_gbdt.metrics import average_precision, ndcg

    out = {f"ndcg@{k}": ndcg(pred, d.y, d.group_ptr, k=k) for k in (1, 3, 5, 10)}
    out["map"] = average_precision(pred, d.y, d.group_ptr)
    return out


def run_one(spec, fold, seed):
    import lightgbm as lgb

    name, tr, va, te = fold
    comps = parse_variant(spec)
    first = comps[0][1] if comps[0][0] in ("ndcg", "ap") else {}
    lr = float(first.get("lr", 0.05))
    rounds = int(first.get("rounds", 2000))
    t0 = time.perf_counter()
    if spec.startswith("xgb:"):
        import xgboost as xgb

        ytr = (tr.y >= 1).astype(float) if spec == "xgb:rank:map" else tr.y  # binary labels
        dtr = xgb.DMatrix(tr.X, ytr, group=_sizes(tr))
        dva = xgb.DMatrix(va.X, va.y, group=_sizes(va))
        params = {
            "objective": spec[4:], "eta": 0.05, "max_depth": 6, "subsample": 0.8,
            "colsample_bytree": 0.8, "eval_metric": "ndcg@10", "seed": seed, "nthread": 1,
        }
        bst = xgb.train(params, dtr, rounds, evals=[(dva, "va")], early_stopping_rounds=50,
                        verbose_eval=False)
        best = bst.best_iteration + 1
        pred = bst.predict(xgb.DMatrix(te.X), iteration_range=(0, best))
    else:
        params = {
            "learning_rate": lr, "num_leaves": int(first.get("leaves", 31)),
            "bagging_fraction": 0.8, "bagging_freq": 1, "feature_fraction": 0.8,
            "seed": seed, "num_threads": 1, "verbose": -1, "metric": "ndcg", "eval_at": [10],
            "lambda_l2": float(first.get("l2", 0.0)),
            "min_sum_hessian_in_leaf": float(first.get("mshl", 1e-3)),
        }
        init_tr = init_va = None
        if spec.startswith("lgb:"):
            name, *extra = spec[4:].split("|")
            params["objective"] = name
            for item in extra:
                key, _, val = item.partition("=")
                params[key] = _value(val)
        else:
            params["objective"] = Objective(comps)
            if first.get("init") == "noise":
                rng = np.random.default_rng(seed)
                init_tr = 1e-3 * rng.standard_normal(tr.y.shape[0])
                init_va = np.zeros(va.y.shape[0])
        dtr = lgb.Dataset(tr.X, tr.y, group=_sizes(tr), init_score=init_tr)
        dva = lgb.Dataset(va.X, va.y, group=_sizes(va), reference=dtr, init_score=init_va)
        bst = lgb.train(params, dtr, rounds, valid_sets=[dva],
                        callbacks=[lgb.early_stopping(50, verbose=False)])
        best = bst.best_iteration
        pred = bst.predict(te.X, num_iteration=best)
    out = {m: v.tolist() for m, v in _test_metrics(pred, te).items()}
    sizes = _sizes(te)
    qid = np.repeat(np.arange(sizes.shape[0]), sizes)
    c = pred - (np.bincount(qid, pred) / sizes)[qid]
    out["score_sd"] = float(np.sqrt(np.mean(c * c)))
    out["best_iter"] = int(best)
    out["seconds"] = time.perf_counter() - t0
    return out


# ------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------


def _cache_file(cache, data, spec, fold, seed):
    h = hashlib.sha1(spec.encode()).hexdigest()[:16]
    return Path(cache) / data / f"{h}_{fold}_{seed}.json"


_FOLDS = None


def _work(args):
    data, spec, i, seed, cache = args
    f = _cache_file(cache, data, spec, _FOLDS[i][0], seed)
    if f.is_file():
        return spec, i, seed, json.loads(f.read_text())
    res = run_one(spec, _FOLDS[i], seed)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(res))
    return spec, i, seed, res


def _alpha_of(spec):
    comps = parse_variant(spec)
    if comps[0][0] not in ("ndcg", "ap", "hx"):
        return None
    return float(comps[0][1].get("alpha", 10.0))


def table(results, specs, n_folds, seeds, ref="lgb:lambdarank"):
    """Markdown table: mean metrics, paired differences to ref, iterations, score scale."""

    def per_query(spec, m):
        runs = [[results[spec, i, s][m] for s in seeds] for i in range(n_folds)]
        return np.concatenate([np.nanmean(np.array(r, dtype=float), axis=0) for r in runs])

    r = "LR" if ref == "lgb:lambdarank" else f"`{ref}`"
    head = ("| variant | " + " | ".join(METRICS) + f" | d@1 vs {r} (t) | d@10 vs {r} (t) "
            f"| dMAP vs {r} (t) | trees | alpha x score sd |")
    lines = [head, "|" + "---|" * (len(METRICS) + 6)]
    for spec in specs:
        cells = []
        for m in METRICS:
            v = per_query(spec, m)
            cells.append(f"{np.nanmean(v):.4f}")
        for m in ("ndcg@1", "ndcg@10", "map"):
            if ref in specs and spec != ref:
                d = per_query(spec, m) - per_query(ref, m)
                d = d[np.isfinite(d)]
                t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size)) if d.std() > 0 else 0.0
                cells.append(f"{d.mean():+.4f} ({t:+.1f})")
            else:
                cells.append("")
        iters = np.mean([results[spec, i, s]["best_iter"] for i in range(n_folds) for s in seeds])
        sd = np.mean([results[spec, i, s]["score_sd"] for i in range(n_folds) for s in seeds])
        a = _alpha_of(spec)
        cells.append(f"{iters:.0f}")
        cells.append(f"{a * sd:.2f}" if a else f"(sd {sd:.2f})")
        lines.append(f"| `{spec}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    global _FOLDS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="mq2008", choices=["mq2008", "generated", "yahoo", "mslr"])
    p.add_argument("--set", nargs="*", default=[], choices=sorted(SETS))
    p.add_argument("--variants", nargs="*", default=[])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cache", default="/tmp/approx_gbdt_ablation_cache")
    p.add_argument("--out", default=None, help="markdown file (default results/ablations_DATA.md)")
    p.add_argument("--title", default="")
    p.add_argument("--ref", default="lgb:lambdarank", help="variant of the paired differences")
    a = p.parse_args(argv)
    specs = list(dict.fromkeys(["lgb:lambdarank", "lgb:rank_xendcg", a.ref]
                               + [v for s in a.set for v in SETS[s]] + a.variants))
    _FOLDS = load(a.data)
    seeds = list(range(a.seeds))
    jobs = [(a.data, s, i, seed, a.cache) for s in specs for i in range(len(_FOLDS))
            for seed in seeds]
    results = {}
    t0 = time.time()
    if a.jobs > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(a.jobs) as pool:
            for spec, i, seed, res in pool.imap_unordered(_work, jobs):
                results[spec, i, seed] = res
    else:
        for j in jobs:
            spec, i, seed, res = _work(j)
            results[spec, i, seed] = res
    md = table(results, specs, len(_FOLDS), seeds, ref=a.ref)
    cmd = "python benchmarks/ablations.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    header = (
        f"# Ablations on {a.data}{': ' + a.title if a.title else ''}\n\n"
        f"Command: `{cmd}`\n\n"
        f"{len(_FOLDS)} folds x {len(seeds)} seeds; LightGBM lr 0.05 (unless `lr=`), 31 leaves, "
        "bagging 0.8, feature_fraction 0.8, early stopping on validation NDCG@10 (patience 50); "
        "test metrics with worst-case ties, queries without a relevant document excluded; "
        "per-query values averaged over seeds, then over queries. `d@k vs LR`: paired "
        "difference to LightGBM lambdarank over test queries (t statistic in brackets). "
        "`trees`: mean best iteration. `alpha x score sd`: alpha times the within-query "
        "standard deviation of the test scores (the effective sharpness). A bare `ndcg` is "
        "ApproxNDCG() (alpha 10, hessian mixed, floor 0.1, normalize); a bare `ap` is "
        "ApproxAP(hessian='mixed', beta=10), the defaults before the ablations (now "
        "hessian='bound', beta=0.3).\n\n"
    )
    text = header + md + "\n"
    print(text)
    print(f"[{time.time() - t0:.0f}s]", file=sys.stderr)
    if a.out != "-":
        out = Path(a.out) if a.out else HERE / "results" / f"ablations_{a.data}.md"
        out.write_text(text)


if __name__ == "__main__":
    main()
