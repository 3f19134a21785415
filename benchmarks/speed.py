"""Speed of the ApproxNDCG / ApproxAP objectives.

    python benchmarks/speed.py            # full run (over an hour on 2 cores)
    python benchmarks/speed.py --quick    # smoke run
    python benchmarks/speed.py --cold-start-only   # re-make section 5 of speed.md alone
    OMP_WAIT_POLICY=passive python benchmarks/speed.py --lengths-only   # section 4 (54 min)
    OMP_WAIT_POLICY=passive python benchmarks/speed.py --kernels-only   # sections 1 and 2

Writes benchmarks/results/speed.md (or speed_quick.md), speed_throughput.png and
speed_lengths.png:

1. Kernel throughput (ordered pairs n (n - 1) per second, gradient + Hessian) for list sizes
   10 .. 100,000 at a fixed total number of documents: fast kernel (default), exact reference
   kernel, a vectorised NumPy implementation and PyTorch autograd (what a user would write).
   Scores all equal (every pair inside the window: worst case) and N(0, 1) (alpha = 10).
2. One 100,000-document query: time and error of the fast kernel against the exact kernel;
   one 1,000,000-document query: time, and errors on 200 sampled rows against exact O(n) sums.
3. Seconds per boosting iteration and peak memory (each training in its own process) against
   LightGBM lambdarank and XGBoost rank:ndcg, light-tree and MSLR-scale settings.
4. Seconds per boosting iteration against list length (10 .. 10,000 documents per query, fixed
   total): LightGBM lambdarank and XGBoost rank:ndcg beside approx_ndcg_obj, approx_ap_obj
   and the options ApproxNDCG(hessian="mixed_sum") and ApproxAP(hessian="bound_sum") (columns
   ``mixed_sum`` and ``ap_bound_sum``), with one and two threads, on
   a quiet machine and on a busy one (a second CPU-bound process running on the same cores
   during the training), three rounds per list length, ``LENGTH_ITERS`` (100) boosting
   iterations per training (medians, and the range of the rounds' ratios to native), plotted
   log-log.
5. The first call with an empty Numba cache (a new user's first run): ApproxNDCG's first
   ``grad_hess`` and ApproxAP's after it, ApproxAP's as the first call of another process,
   and the same calls with the cache filled (``cold_start.py`` has every entry point).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

# Every kernel compiles in the timing process on its first call (no background compilation
# with the windowed loops standing in for the grid's blocks while timed calls run); the cold
# start's fresh processes (cold_start.run_child) keep the default.
os.environ.setdefault("APPROX_GBDT_BACKGROUND_COMPILE", "0")

# approx_gbdt (and with it Numba) is imported inside the functions, so that a training
# process of a native objective holds only what a user of the native objective would load.

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
def make_data(n_queries, size_range, n_features, seed=0):
    """MSLR-like generated data: labels 0..4 (about 52/30/12/4/2 %), weakly informative features."""
    rng = np.random.default_rng(seed)
    lo, hi = size_range
    sizes = rng.integers(lo, hi + 1, n_queries) if hi > lo else np.full(n_queries, lo)
    n = int(sizes.sum())
    X = rng.normal(size=(n, n_features)).astype(np.float32)
    u = X[:, : min(10, n_features)].sum(axis=1) / math.sqrt(min(10, n_features))
    u = u + 0.7 * rng.normal(size=n)
    cuts = np.quantile(u, [0.52, 0.82, 0.94, 0.98])
    y = np.searchsorted(cuts, u).astype(np.float64)
    return X, y, sizes


def _ptr(sizes):
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# baselines a user would write
# ---------------------------------------------------------------------------------------------
def numpy_grad_hess(s, y, ptr, alpha=10.0):
    """Dense per-query ApproxNDCG gradient and bound Hessian with n x n NumPy matrices."""
    g = np.zeros_like(s)
    h = np.zeros_like(s)
    for q in range(len(ptr) - 1):
        a, b = ptr[q], ptr[q + 1]
        sq, yq = s[a:b], y[a:b]
        gains = np.expm1(yq * math.log(2.0))
        ideal = np.sort(gains)[::-1] / np.log2(np.arange(2, b - a + 2))
        z = ideal.sum()
        if z == 0:
            continue
        sig = 1.0 / (1.0 + np.exp(-alpha * (sq[None, :] - sq[:, None])))  # sig_kj
        np.fill_diagonal(sig, 0.0)
        pos = 1.0 + sig.sum(axis=1)
        lg = np.log1p(pos)
        v = gains * (-math.log(2.0) / ((1.0 + pos) * lg * lg)) / z
        w = sig * (1.0 - sig)
        dv = v[None, :] - v[:, None]
        g[a:b] = -alpha * (w * dv).sum(axis=1)
        h[a:b] = alpha * alpha * (w * np.abs(dv)).sum(axis=1)
    return g, h


def torch_grad(s, y, ptr, alpha=10.0):
    """PyTorch autograd of -ApproxNDCG (gradient only: autograd gives no Hessian diagonal
    short of n backward passes)."""
    import torch

    st = torch.tensor(s, requires_grad=True)
    yt = torch.tensor(y)
    loss = 0.0
    for q in range(len(ptr) - 1):
        a, b = int(ptr[q]), int(ptr[q + 1])
        sq, yq = st[a:b], yt[a:b]
        gains = torch.expm1(yq * math.log(2.0))
        ideal = torch.sort(gains, descending=True).values
        z = (ideal / torch.log2(torch.arange(2, b - a + 2, dtype=torch.float64))).sum()
        if z == 0:
            continue
        sig = torch.sigmoid(alpha * (sq[None, :] - sq[:, None]))
        pos = 0.5 + sig.sum(dim=1)  # the diagonal adds sig(0) = 1/2
        loss = loss - (gains / torch.log2(1.0 + pos)).sum() / z
    loss.backward()
    return st.grad.numpy()


def _time(f, min_time=0.3, max_rep=20):
    f()
    best = math.inf
    t_start = time.perf_counter()
    for _ in range(max_rep):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - t_start > min_time:
            break
    return best


def bench_kernels(total, sizes_list, quick):
    from approx_gbdt.objectives import ApproxAP, ApproxNDCG

    rows = []
    for n in sizes_list:
        nq = max(1, total // n)
        sizes = np.full(nq, n)
        ptr = _ptr(sizes)
        N = int(ptr[-1])
        rng = np.random.default_rng(n)
        y = np.minimum(rng.geometric(0.55, N) - 1, 4).astype(float)
        pairs = float(nq) * n * (n - 1)
        for dist in ["equal", "normal"]:
            s = np.zeros(N) if dist == "equal" else rng.normal(size=N)
            row = {"n": n, "queries": nq, "scores": dist}
            for name, obj in [
                ("fast ndcg (mixed)", ApproxNDCG()),
                ("fast ndcg (mixed_sum)", ApproxNDCG(hessian="mixed_sum")),
                ("fast ndcg (bound)", ApproxNDCG(hessian="bound")),
                ("fast ap (mixed)", ApproxAP(hessian="mixed")),
                ("fast ap (bound)", ApproxAP()),  # the default
                ("fast ap (bound_sum)", ApproxAP(hessian="bound_sum")),
            ]:
                if name.startswith("fast ap (mixed)") and n > 1000:
                    # not the default: its exact diagonal costs O(n R w) (R relevant documents,
                    # w the second-level window, ~120 positions at beta 0.3): minutes per call
                    row[name] = None
                    continue
                prep = obj._prepare(y, ptr, cache=True)
                t = _time(
                    lambda obj=obj, prep=prep, s=s: obj._grad_hess(s, prep, np.empty(0), None))
                row[name] = pairs / t
            ref_ok = n <= (1000 if quick else 10_000)
            if ref_ok:
                obj = ApproxNDCG()

                def ref(obj=obj, s=s, y=y, ptr=ptr):
                    obj._reference_grad_hess(s, y, ptr)

                row["exact ndcg (mixed)"] = pairs / _time(ref, 0.0, 1)
            else:
                row["exact ndcg (mixed)"] = None
            if n <= 1000:
                row["numpy ndcg (bound)"] = pairs / _time(
                    lambda s=s, y=y, ptr=ptr: numpy_grad_hess(s, y, ptr), 0, 2)
                row["torch autograd ndcg (grad only)"] = pairs / _time(
                    lambda s=s, y=y, ptr=ptr: torch_grad(s, y, ptr), 0, 2)
            else:
                row["numpy ndcg (bound)"] = None
                row["torch autograd ndcg (grad only)"] = None
            rows.append(row)
            print(row, flush=True)
    return rows


def _sampled_errors(s, y, alpha, rows):
    """Errors of the default kernel (ApproxNDCG, mixed Hessian, without the per-query
    normalisation, a scalar) on a sample of rows of one huge query, against exact O(n) sums per
    row: the positions exactly; the gradient and the Hessian from the same ``v`` and ``e``
    (computed from the kernel's own positions), so that the error is the kernel sums' own."""
    from approx_gbdt import _kernels as K
    from approx_gbdt.objectives import ApproxNDCG

    n = s.shape[0]
    ptr = np.array([0, n], dtype=np.int64)
    obj = ApproxNDCG(normalize=False, alpha=alpha)
    g1, h1 = obj.grad_hess(s, y, ptr)
    pos = np.empty(n)
    K.smoothed_positions(s, ptr, alpha, pos)
    gains = np.expm1(y * math.log(2.0))
    ideal = np.sort(gains)[::-1] / np.log2(np.arange(2, n + 2))
    iz = 1.0 / ideal.sum()
    lg = np.log1p(pos)
    v = gains * iz * (-math.log(2.0) / ((1.0 + pos) * lg * lg))
    e = gains * iz * (math.log(2.0) * (2.0 + lg) / ((1.0 + pos) ** 2 * lg**3))
    err = {"pos": [0.0, 0.0], "grad": [0.0, 0.0], "hess": [0.0, 0.0]}
    for k in rows:
        d = alpha * (s - s[k])
        sig = 0.5 * (1.0 + np.tanh(0.5 * d))  # sig(x_j - x_k), no overflow
        w = sig * (1.0 - sig)
        w[k] = 0.0
        dv = v - v[k]
        p_ex = 1.0 + sig.sum() - 0.5
        g_ex = -alpha * (w * dv).sum()
        aw = w.sum()
        exact_m = alpha**2 * (-(w * (1.0 - 2.0 * sig) * dv).sum() + (w * w * e).sum()
                              + e[k] * aw * aw)
        bound = alpha**2 * (w * np.abs(dv)).sum()
        h_ex = max(-exact_m, 0.1 * bound)
        for name, fast, ex in [("pos", pos[k], p_ex), ("grad", g1[k], g_ex),
                               ("hess", h1[k], h_ex)]:
            err[name][0] = max(err[name][0], abs(fast - ex))
            err[name][1] = max(err[name][1], abs(ex))
    return {name: a / b for name, (a, b) in err.items()}


def bench_huge(n, seed=0, exact="full", sample=200):
    """One query of ``n`` documents: time of the default kernels, and their error against the
    exact kernel: the whole O(n^2) reference (``exact="full"``) or ``sample`` rows of it."""
    from approx_gbdt.objectives import ApproxAP, ApproxNDCG

    rng = np.random.default_rng(seed)
    y = np.minimum(rng.geometric(0.55, n) - 1, 4).astype(float)
    # sparse relevance, as in long candidate lists: 5 % relevant (ApproxAP's bound pays for
    # the pairs of relevant documents)
    y5 = (np.random.default_rng(seed + 1).random(n) < 0.05).astype(float)
    ptr = np.array([0, n], dtype=np.int64)
    out = []
    for dist in ["equal", "normal"]:
        s = np.zeros(n) if dist == "equal" else rng.normal(size=n)
        obj = ApproxNDCG()
        prep = obj._prepare(y, ptr, cache=True)
        t = _time(lambda obj=obj, prep=prep, s=s: obj._grad_hess(s, prep, np.empty(0), None), 0, 3)
        row = {"scores": dist, "n": n, "fast_s": t,
               "work_bytes": int(sum(v.nbytes for v in prep.work.values()))}
        if n <= 100_000:
            ap = ApproxAP()
            prep_ap = ap._prepare(y, ptr, cache=True)
            row["ap_s"] = _time(
                lambda ap=ap, prep=prep_ap, s=s: ap._grad_hess(s, prep, np.empty(0), None), 0, 1)
        ap5 = ApproxAP()
        prep5 = ap5._prepare(y5, ptr, cache=True)
        row["ap5_s"] = _time(
            lambda ap=ap5, prep=prep5, s=s: ap._grad_hess(s, prep, np.empty(0), None), 0, 1)
        if n <= 100_000:
            g1, h1 = ap5._grad_hess(s, prep5, np.empty(0), None)
            windowed = ApproxAP()
            windowed._grid_mode = -1  # the exact windowed kernel (no grid)
            g0, h0 = windowed._grad_hess(s, windowed._prepare(y5, ptr, cache=False),
                                         np.empty(0), None)
            row["ap5_err"] = float(max(np.abs(g1 - g0).max() / np.abs(g0).max(),
                                       np.abs(h1 - h0).max() / np.abs(h0).max()))
        if exact == "full":
            g1, h1 = obj._grad_hess(s, prep, np.empty(0), None)
            t0 = time.perf_counter()
            g0, h0, _, _ = obj._reference_grad_hess(s, y, ptr)
            row["exact_s"] = time.perf_counter() - t0
            row["grad_rel_err"] = float(np.abs(g1 - g0).max() / np.abs(g0).max())
            row["hess_rel_err"] = float(np.abs(h1 - h0).max() / np.abs(h0).max())
            row["errors"] = "whole query"
        else:
            rows = rng.choice(n, sample, replace=False)
            e = _sampled_errors(s, y, obj.alpha, rows)
            row["grad_rel_err"] = e["grad"]
            row["hess_rel_err"] = e["hess"]
            row["pos_rel_err"] = e["pos"]
            row["errors"] = f"{sample} sampled rows"
        out.append(row)
        print(row, flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# training (one configuration per process, for a clean peak memory)
# ---------------------------------------------------------------------------------------------
SETTINGS = {
    "light": dict(n_queries=2000, size_range=(100, 100), n_features=20, leaves=31, max_bin=63),
    "mslr": dict(n_queries=30000, size_range=(20, 220), n_features=136, leaves=255, max_bin=255),
    "light-quick": dict(n_queries=300, size_range=(100, 100), n_features=20, leaves=31,
                        max_bin=63),
    "mslr-quick": dict(n_queries=1000, size_range=(20, 220), n_features=136, leaves=255,
                       max_bin=255),
}


def _status_mb(field):
    """``VmHWM`` (peak) or ``VmRSS`` (current resident set) of this process, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _reset_peak_rss():
    """Set the peak RSS to the current RSS (Linux >= 4.0), so that generating the data does
    not count as training memory. Returns False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _setting(name):
    """A named setting, or ``len:<docs per query>:<total docs>`` (the list-length table)."""
    if name.startswith("len:"):
        _, per, total = name.split(":")
        return dict(n_queries=max(1, int(total) // int(per)), size_range=(int(per), int(per)),
                    n_features=20, leaves=31, max_bin=63)
    return SETTINGS[name]


def train_one(setting, lib, objective, iters, threads=2):
    st = _setting(setting)
    X, y, sizes = make_data(st["n_queries"], st["size_range"], st["n_features"])
    import lightgbm as lgb
    import xgboost as xgb

    obj = None
    if objective == "approx_ndcg_obj":
        from approx_gbdt import ApproxNDCG

        obj = ApproxNDCG()
    elif objective == "mixed_sum":
        from approx_gbdt import ApproxNDCG

        obj = ApproxNDCG(hessian="mixed_sum")
    elif objective == "approx_ap_obj":
        from approx_gbdt import ApproxAP

        obj = ApproxAP()
    elif objective == "ap_bound_sum":
        from approx_gbdt import ApproxAP

        obj = ApproxAP(hessian="bound_sum")
    reset = _reset_peak_rss()
    t_data = _status_mb("VmRSS")
    times = []
    if lib == "lightgbm":
        # num_threads in the Dataset's parameters, as lgb.train puts it: the objective reads it
        ds = lgb.Dataset(X, y, group=sizes, params={"max_bin": st["max_bin"], "verbose": -1,
                                                     "num_threads": threads})
        params = {"num_leaves": st["leaves"], "learning_rate": 0.1, "verbose": -1,
                  "max_bin": st["max_bin"], "min_data_in_leaf": 20, "num_threads": threads,
                  "objective": "lambdarank" if objective == "native" else "none"}
        booster = lgb.Booster(params, ds)
        for _ in range(iters):
            t0 = time.perf_counter()
            booster.update(fobj=obj)
            times.append(time.perf_counter() - t0)
    else:
        dm = xgb.DMatrix(X, y, group=sizes, nthread=threads)
        params = {"tree_method": "hist", "grow_policy": "lossguide", "max_leaves": st["leaves"],
                  "max_depth": 0, "max_bin": st["max_bin"], "eta": 0.1, "nthread": threads,
                  "objective": "rank:ndcg" if objective == "native" else "reg:squarederror"}
        booster = xgb.Booster(params, [dm])
        with xgb.config_context(nthread=threads):  # what reaches a custom objective
            for i in range(iters):
                t0 = time.perf_counter()
                booster.update(dm, i, fobj=obj)
                times.append(time.perf_counter() - t0)
    rss = _status_mb("VmHWM")
    # the first iteration includes one-off work (bin mappers, numba compile cache load, ...)
    steady = times[1:] if len(times) > 1 else times
    return {"setting": setting, "lib": lib, "objective": objective,
            "sec_per_iter": float(np.median(steady)), "first_iter": times[0],
            "peak_rss_mb": rss, "rss_after_data_mb": t_data, "peak_reset": reset,
            "docs": int(sizes.sum()), "threads": threads, "iters": iters}


# the options whose Hessians skip the bound's own pass on long lists: "mixed_sum",
# ApproxNDCG(hessian="mixed_sum"), and "ap_bound_sum", ApproxAP(hessian="bound_sum")
LENGTH_OBJECTIVES = ("native", "approx_ndcg_obj", "approx_ap_obj", "mixed_sum", "ap_bound_sum")


def bench_training(settings, iters, objectives=("native", "approx_ndcg_obj"), threads=2,
                   busy=False, tag=None):
    """Each training in its own process; ``busy``: a second CPU-bound process runs on the same
    cores while it trains; ``tag``: more fields for every row (printed with it)."""
    rows = []
    for setting in settings:
        for lib in ["lightgbm", "xgboost"]:
            for objective in objectives:
                cmd = [sys.executable, __file__, "--train-one", setting, lib, objective,
                       str(iters), str(threads)]
                burner = (subprocess.Popen([sys.executable, "-c", "while True: pass"])
                          if busy else None)
                try:
                    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
                finally:
                    if burner is not None:
                        burner.kill()
                        burner.wait()
                if out.returncode != 0:
                    print(out.stderr[-2000:], flush=True)
                    continue
                row = json.loads(out.stdout.strip().splitlines()[-1])
                row["busy"] = busy
                row["load"] = os.getloadavg()[0]
                row.update(tag or {})
                rows.append(row)
                print(row, flush=True)
    return rows


# Boosting iterations of each training of section 4. The cost per iteration changes as the
# trees fit and the scores spread (in one probe at 1,000 documents a list, 2 threads, medians:
# LightGBM lambdarank 18 ms over iterations 2-6 and 24 ms over 50-200, approx_ndcg_obj 20 and
# 27 ms, approx_ap_obj 21 ms throughout), so the table times the first 100 iterations, about a
# training's length at this learning rate (the quality benchmark's stop after 40-370 at half
# of it), not the first few.
LENGTH_ITERS = 100

# one and two threads, quiet and busy (section 4)
LENGTH_VARIANTS = ((2, False), (1, False), (2, True), (1, True))


def bench_lengths(total, iters, lengths=(10, 100, 1000, 2000, 10_000), repeats=3):
    """Section 4: per list length, ``repeats`` rounds, each training every variant (threads,
    quiet or busy) with every objective once, the objectives back to back, so that each
    round's ratios to native compare runs made close in time and a drift of the machine's
    load falls on every variant alike. 2,000 documents is the grid's tier (512-4,095)."""
    rows = []
    for p in lengths:
        for rep in range(repeats):
            for threads, busy in LENGTH_VARIANTS:
                rows += bench_training([f"len:{p}:{total}"], iters, LENGTH_OBJECTIVES,
                                       threads=threads, busy=busy, tag={"repeat": rep})
    return rows


def length_cells(lengths):
    """Section 4's cells: per (setting, library, threads, busy) and objective, the median
    seconds per iteration over the rounds and, against native, the median and range of the
    rounds' ratios (each round's run against the same round's native run)."""
    runs = {}
    for r in lengths:
        key = (r["setting"], r["lib"], r["threads"], r["busy"])
        runs.setdefault(key, {}).setdefault(r.get("repeat", 0), {})[r["objective"]] = r
    cells = {}
    for key, rounds in runs.items():
        for o in LENGTH_OBJECTIVES:
            secs = [rd[o]["sec_per_iter"] for rd in rounds.values() if o in rd]
            if not secs:
                continue
            ratios = [rd[o]["sec_per_iter"] / rd["native"]["sec_per_iter"]
                      for rd in rounds.values() if o in rd and "native" in rd]
            load = max(rd[o]["load"] for rd in rounds.values() if o in rd)
            cells[key + (o,)] = (float(np.median(secs)), ratios, load)
    return cells


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def _g(x):
    return "n/a" if x is None else f"{x / 1e9:.3f}"


def bench_cold_start():
    """Fresh processes, each with a new empty ``NUMBA_CACHE_DIR`` (see ``cold_start.py``)."""
    import tempfile

    sys.path.insert(0, HERE)
    import cold_start

    ndcg_first = cold_start.STEPS[:2]
    with tempfile.TemporaryDirectory(prefix="numba_cache_") as cache:
        empty = cold_start.run_child(cache, ndcg_first)
        full = cold_start.run_child(cache, ndcg_first)
    with tempfile.TemporaryDirectory(prefix="numba_cache_") as cache:
        ap_first = cold_start.run_child(cache, cold_start.AP_FIRST)
    rows = [(f"{label}{' (after ApproxNDCG)' if i else ''}", empty["first"][label],
             full["first"][label]) for i, (label, _) in enumerate(ndcg_first)]
    label = cold_start.AP_FIRST[0][0]
    rows.append((f"{label} as the first call of a process", ap_first["first"][label], None))
    return rows


def write_report(path, cmd, kernels, huge, training, elapsed, load, lengths=(), cold=()):
    import lightgbm
    import numba
    import xgboost

    L = ["# Speed of the ApproxNDCG / ApproxAP objectives\n",
         f"Command: `{cmd}`  ",
         f"Machine: {os.cpu_count()} cores, numba {numba.__version__} with "
         f"{numba.get_num_threads()} threads ({numba.threading_layer()} layer), "
         f"lightgbm {lightgbm.__version__}, xgboost {xgboost.__version__}, "
         f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, "
         f"NUMBA_THREADING_LAYER={os.environ.get('NUMBA_THREADING_LAYER', 'unset')}; "
         f"wall time {elapsed / 60:.1f} min; 1-minute load average {load[0]:.2f} at the start "
         f"and {load[1]:.2f} at the end (above 0 means other work shared the cores). Kernel "
         "timings are best of repeats; training times are medians over iterations.\n"]
    L += kernel_sections(kernels, huge)
    L.append("## 3. Training: seconds per boosting iteration and peak memory\n")
    reset = all(r.get("peak_reset") for r in training)
    L.append("Median of the iterations after the first. Memory: resident set of the training "
             "process with the data in memory, before training (data, libraries and, for "
             "approx_ndcg_obj, Numba), and its peak during training "
             + ("(the peak was reset after generating the data)" if reset else
                "(peak not reset: it includes generating the data)")
             + "; the native process never imports approx_gbdt or Numba. Target: "
             "approx_ndcg_obj <= 1.1x native, memory within 10 %.\n")
    L.append("| setting | library | objective | docs | s / iter | ratio to native | "
             "RSS before training (MB) | peak RSS in training (MB) | memory ratio |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    native = {(r["setting"], r["lib"]): r for r in training if r["objective"] == "native"}
    for r in training:
        nat = native.get((r["setting"], r["lib"]))
        ratio = r["sec_per_iter"] / nat["sec_per_iter"] if nat else float("nan")
        mem = r["peak_rss_mb"] / nat["peak_rss_mb"] if nat else float("nan")
        L.append(f"| {r['setting']} | {r['lib']} | {r['objective']} | {r['docs']} | "
                 f"{r['sec_per_iter']:.3f} | {ratio:.2f} | {r['rss_after_data_mb']:.0f} | "
                 f"{r['peak_rss_mb']:.0f} | {mem:.2f} |")
    L.append("")
    if lengths:
        L += lengths_section(lengths, path)
    if cold:
        L += cold_section(cold)
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def kernel_sections(kernels, huge, remade=None, load0=None):
    """Sections 1 and 2's lines (kernel throughput, one huge query); ``remade``: the command
    that re-made them alone (``--kernels-only``), stated in section 1 with the load average at
    its start, ``load0``."""
    L = ["## 1. Kernel throughput (1e9 ordered pairs n(n-1) per second, gradient + Hessian)\n"]
    if remade:
        L.append(_remade_note(remade, "Sections 1 and 2 re-made together", load0))
    L.append("Fixed total number of documents; `equal`: all scores equal (every pair in the "
             "window, the first boosting iteration), `normal`: N(0, 1) scores with alpha = 10. "
             "Target: fast ndcg >= 1.0, fast ap within 1.5x of it.\n")
    cols = ["fast ndcg (mixed)", "fast ndcg (mixed_sum)", "fast ndcg (bound)", "fast ap (mixed)",
            "fast ap (bound)", "fast ap (bound_sum)", "exact ndcg (mixed)", "numpy ndcg (bound)",
            "torch autograd ndcg (grad only)"]
    L.append("| n | queries | scores | " + " | ".join(cols) + " |")
    L.append("|" + "---|" * (3 + len(cols)))
    for r in kernels:
        L.append(f"| {r['n']} | {r['queries']} | {r['scores']} | "
                 + " | ".join(_g(r.get(c)) for c in cols) + " |")
    L.append("")
    L.append("## 2. One huge query (ApproxNDCG, mixed Hessian; ApproxAP, bound Hessian)\n")
    L.append("Error: max |fast - exact| / max |exact| over the query (or over a sample of rows "
             "against exact O(n) sums per row, without the per-query normalisation, the "
             "gradient and Hessian from the kernel's own positions, whose error is listed "
             "apart). Target: 1e5 documents < 0.3 s, 1e6 < 3 s, errors < 1e-6.\n")
    L.append("Labels 0-4 (about 45 % relevant); `ap, 5 % relevant`: ApproxAP on binary labels "
             "with 5 % relevant, and its error (max-norm relative, gradient and Hessian) "
             "against the exact windowed kernel (no grid).\n")
    L.append("| n | scores | ndcg (s) | ap (s) | ap, 5 % relevant (s) | its error | exact (s) | "
             "errors over | grad rel. err | hess rel. err | pos rel. err | "
             "work arrays kept (bytes) |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in huge:
        ap_s = f"{r['ap_s']:.2f}" if "ap_s" in r else "n/a"
        ap5_s = f"{r['ap5_s']:.2f}" if "ap5_s" in r else "n/a"
        ap5_e = f"{r['ap5_err']:.1e}" if "ap5_err" in r else "n/a"
        ex_s = f"{r['exact_s']:.1f}" if "exact_s" in r else "n/a"
        pe = f"{r['pos_rel_err']:.1e}" if "pos_rel_err" in r else "n/a"
        L.append(f"| {r['n']} | {r['scores']} | {r['fast_s']:.3f} | {ap_s} | {ap5_s} | {ap5_e} | "
                 f"{ex_s} | {r['errors']} | {r['grad_rel_err']:.1e} | {r['hess_rel_err']:.1e} | "
                 f"{pe} | {r['work_bytes']} |")
    L.append("")
    return L


def _remade_note(remade, what="Re-made alone", load0=None):
    """The line of a section re-made alone by the command ``remade``: when, at which commit,
    and the 1-minute load average at its start (``load0``, when given) and end."""
    sys.path.insert(0, HERE)
    from _common import commit

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    loads = (f"1-minute load average {load0:.2f} at the start and {load:.2f} at the end"
             if load0 is not None else f"1-minute load average {load:.2f} at the end")
    return (f"{what} by `{remade}` on {when} at commit {commit()} ({loads}); the other "
            "sections are from the run above unless they say otherwise.\n")


def lengths_section(lengths, path, remade=None, load0=None):
    """Section 4's lines (the list-length table); ``remade``: the command that re-made it
    alone (``--lengths-only``), stated in the section with the load average at its start,
    ``load0``."""
    total = lengths[0]["docs"]
    rounds = 1 + max(r.get("repeat", 0) for r in lengths)
    iters = sorted({r["iters"] for r in lengths if "iters" in r})
    L = ["## 4. Seconds per boosting iteration against list length\n"]
    if remade:
        L.append(_remade_note(remade, load0=load0))
    L.append(f"{total} documents in total, 20 features, 31 leaves, max_bin 63; native = "
             "LightGBM lambdarank / XGBoost rank:ndcg. Threads: the host library's "
             "`num_threads` / `nthread` (the objectives follow it). Busy: a second "
             "CPU-bound process (a Python busy loop) runs on the same cores during the "
             f"training. Each list length runs {rounds} round(s); a round trains every "
             "row's variant once with each objective, back to back. "
             + (f"Each training runs {iters[0]} boosting iterations; its seconds per "
                f"iteration are the median over iterations 2 to {iters[0]} (the first also "
                "loads Numba's cache and LightGBM's bins). " if len(iters) == 1 else "")
             + "Each cell: the median "
             "over the rounds of the seconds per iteration; in brackets the median over "
             "the rounds of the ratio to the same round's native run, and the lowest and "
             "highest of those ratios (single runs on this machine move by 20-50 %). Load: "
             "the highest 1-minute load average after a training of the row. Target: "
             "approx_ndcg_obj and approx_ap_obj <= 1.0x native in every row; `mixed_sum` "
             "is ApproxNDCG(hessian=\"mixed_sum\") and `ap_bound_sum` "
             "ApproxAP(hessian=\"bound_sum\"), options, not defaults. Plot (the "
             "medians): "
             f"[{os.path.basename(path)[:-3]}_lengths.png]"
             f"({os.path.basename(path)[:-3]}_lengths.png).\n")
    objs = list(LENGTH_OBJECTIVES)
    L.append("| docs per query | queries | library | threads | machine | "
             + " | ".join(objs) + " | load |")
    L.append("|---|---|---|---|---|" + "---|" * len(objs) + "---|")
    by = length_cells(lengths)
    for threads, busy in LENGTH_VARIANTS:
        for setting in dict.fromkeys(r["setting"] for r in lengths):
            per = int(setting.split(":")[1])
            for lib in ["lightgbm", "xgboost"]:
                cells = []
                load = None
                for o in objs:
                    cell = by.get((setting, lib, threads, busy, o))
                    if cell is None:
                        cells.append("n/a")
                        continue
                    sec, ratios, top = cell
                    load = top if load is None else max(load, top)
                    c = f"{sec * 1e3:.1f} ms"
                    if o != "native" and ratios:
                        c += f" ({np.median(ratios):.2f}x"
                        if len(ratios) > 1:
                            c += f", {min(ratios):.2f}-{max(ratios):.2f}"
                        c += ")"
                    cells.append(c)
                L.append(f"| {per} | {max(1, total // per)} | {lib} | {threads} | "
                         f"{'busy' if busy else 'quiet'} | " + " | ".join(cells)
                         + f" | {'' if load is None else f'{load:.1f}'} |")
    L.append("")
    return L


def cold_section(cold, remade=None, load0=None):
    """Section 5's lines; ``remade``: the command that re-made it alone (``--cold-start-only``),
    stated in the section with the load average at its start, ``load0``."""
    L = ["## 5. First call with an empty Numba cache\n"]
    if remade:
        L.append(_remade_note(remade, load0=load0))
    L.append("Each column one fresh process with a new `NUMBA_CACHE_DIR` (a new user's first "
             "run: Numba compiles the kernels) or the folder the first one filled (every "
             "later run: it loads them); 200 generated queries of 20-120 documents. "
             "Wall-clock seconds of the call; `benchmarks/cold_start.py` times every "
             "entry point. Target: a cold first call under 5 s.\n")
    L.append("| call | empty cache (s) | full cache (s) |")
    L.append("|---|---|---|")
    for label, first, loaded in cold:
        L.append(f"| {label} | {first:.2f} | "
                 f"{'n/a' if loaded is None else f'{loaded:.2f}'} |")
    L.append("")
    return L


def _replace(path, text):
    """Write ``text`` to ``path`` once it is whole: to a temporary file, then renamed over it."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def remake_cold_section(path, cmd):
    """Replace section 5 of the report at ``path`` by a new measurement (the rest kept; the
    file is replaced only once the measurement is done)."""
    with open(path) as f:
        text = f.read()
    head = text.split("## 5. First call with an empty Numba cache")[0].rstrip("\n")
    load0 = os.getloadavg()[0]
    lines = cold_section(bench_cold_start(), cmd, load0)
    _replace(path, head + "\n\n" + "\n".join(lines) + "\n")


def bench_kernel_sections(quick):
    """The rows of sections 1 and 2: kernel throughput and one huge query."""
    if quick:
        return (bench_kernels(20_000, [10, 100, 1000, 10_000], True),
                bench_huge(20_000) + bench_huge(200_000, exact="sample"))
    return (bench_kernels(100_000, [10, 100, 1000, 10_000, 100_000], False),
            bench_huge(100_000) + bench_huge(1_000_000, exact="sample"))


def remake_kernel_sections(path, cmd, quick):
    """Replace sections 1 and 2 of the report at ``path`` (kernel throughput, one huge query)
    and the throughput plot by a new measurement (the rest kept; the file is replaced only once
    the measurement is done)."""
    with open(path) as f:
        text = f.read()
    first, third = "## 1. Kernel throughput", "## 3. Training"
    if text.count(first) != 1 or text.count(third) != 1 or text.index(first) > text.index(third):
        raise SystemExit(f"{path} has no sections 1 to 3 in order to re-make sections 1 and 2 "
                         "of: run the full benchmark first")
    head, tail = text[:text.index(first)], text[text.index(third):]
    load0 = os.getloadavg()[0]
    kernels, huge = bench_kernel_sections(quick)
    lines = kernel_sections(kernels, huge, cmd, load0)
    _replace(path, head + "\n".join(lines) + "\n" + tail)
    plot(path[:-3] + "_throughput.png", kernels)


def remake_lengths_section(path, cmd, quick):
    """Replace section 4 of the report at ``path`` and its plot by a new measurement (the rest
    kept; the file is replaced only once the measurement is done)."""
    with open(path) as f:
        text = f.read()
    parts = text.split("## 4. Seconds per boosting iteration against list length")
    if len(parts) != 2:
        raise SystemExit(f"{path} has no section 4 to re-make (or more than one): run the "
                         "full benchmark first")
    head, rest = parts
    tail = rest[rest.index("## 5. "):] if "## 5. " in rest else ""
    load0 = os.getloadavg()[0]
    lengths = (bench_lengths(20_000, 4, repeats=2) if quick
               else bench_lengths(100_000, LENGTH_ITERS))
    lines = lengths_section(lengths, path, cmd, load0)
    _replace(path, head + "\n".join(lines) + "\n" + tail)
    plot_lengths(path[:-3] + "_lengths.png", lengths)


def plot(path, kernels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for c in ["fast ndcg (mixed)", "fast ap (bound)", "exact ndcg (mixed)", "numpy ndcg (bound)",
              "torch autograd ndcg (grad only)"]:
        for dist, ls in [("equal", "-"), ("normal", "--")]:
            pts = [(r["n"], r[c]) for r in kernels if r["scores"] == dist and r.get(c)]
            if pts:
                ax.plot(*zip(*pts), ls, marker="o", label=f"{c}, {dist}")
    ax.axhline(1e9, color="k", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("documents per query")
    ax.set_ylabel("ordered pairs / s")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_lengths(path, lengths):
    """Seconds per iteration against documents per query, log-log: one panel per library,
    one colour per objective, one line style per thread count and machine state."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    colours = {"native": "k", "approx_ndcg_obj": "C0", "approx_ap_obj": "C1", "mixed_sum": "C2",
               "ap_bound_sum": "C3"}
    styles = {(2, False): "-", (1, False): "--", (2, True): ":", (1, True): "-."}
    cells = length_cells(lengths)
    for ax, lib in zip(axes, ["lightgbm", "xgboost"]):
        for (threads, busy), ls in styles.items():
            for obj, colour in colours.items():
                pts = sorted((int(k[0].split(":")[1]), sec)
                             for k, (sec, _, _) in cells.items()
                             if k[1:] == (lib, threads, busy, obj))
                if pts:
                    label = f"{obj}, {threads} thr, {'busy' if busy else 'quiet'}"
                    ax.plot(*zip(*pts), ls, color=colour, marker="o", ms=3, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{lib} (native: {'lambdarank' if lib == 'lightgbm' else 'rank:ndcg'})")
        ax.set_xlabel("documents per query")
    axes[0].set_ylabel("seconds per boosting iteration")
    axes[1].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _only_cmd(flag, quick, wait=True):
    """The command line of a re-make of some sections (``flag``), as the report states it:
    with ``OMP_WAIT_POLICY`` when it was set (``wait``; the cold start does not depend on
    it)."""
    policy = os.environ.get("OMP_WAIT_POLICY") if wait else None
    return ((f"OMP_WAIT_POLICY={policy} " if policy else "") + f"python benchmarks/speed.py {flag}"
            + (" --quick" if quick else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (small sizes)")
    ap.add_argument("--train-one", nargs=5, metavar=("SETTING", "LIB", "OBJ", "ITERS", "THREADS"))
    ap.add_argument("--skip-training", action="store_true")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--cold-start-only", action="store_true",
                    help="re-make section 5 (the first call with an empty Numba cache) of the "
                         "existing report alone")
    only.add_argument("--lengths-only", action="store_true",
                    help="re-make section 4 (seconds per iteration against list length) and "
                         "its plot of the existing report alone")
    only.add_argument("--kernels-only", action="store_true",
                    help="re-make sections 1 and 2 (kernel throughput, one huge query) and "
                         "the throughput plot of the existing report alone")
    args = ap.parse_args()
    report = os.path.join(RESULTS, ("speed_quick" if args.quick else "speed") + ".md")
    if args.kernels_only:
        remake_kernel_sections(report, _only_cmd("--kernels-only", args.quick), args.quick)
        return
    if args.lengths_only:
        remake_lengths_section(report, _only_cmd("--lengths-only", args.quick), args.quick)
        return
    if args.cold_start_only:
        remake_cold_section(report, _only_cmd("--cold-start-only", args.quick, wait=False))
        return
    if args.train_one:
        setting, lib, objective, iters, threads = args.train_one
        print(json.dumps(train_one(setting, lib, objective, int(iters), int(threads))))
        return
    t0 = time.time()
    load0 = os.getloadavg()[0]
    cmd = "python benchmarks/speed.py" + (" --quick" if args.quick else "") + (
        " --skip-training" if args.skip_training else "")
    kernels, huge = bench_kernel_sections(args.quick)
    if args.quick:
        training = [] if args.skip_training else bench_training(["light-quick", "mslr-quick"], 6)
        lengths = [] if args.skip_training else bench_lengths(20_000, 4, repeats=2)
        cold = bench_cold_start()
    else:
        training = [] if args.skip_training else bench_training(["light", "mslr"], 8)
        lengths = [] if args.skip_training else bench_lengths(100_000, LENGTH_ITERS)
        cold = bench_cold_start()
    os.makedirs(RESULTS, exist_ok=True)
    write_report(report, cmd, kernels, huge, training, time.time() - t0,
                 (load0, os.getloadavg()[0]), lengths, cold)
    plot(report[:-3] + "_throughput.png", kernels)
    if lengths:
        plot_lengths(report[:-3] + "_lengths.png", lengths)


if __name__ == "__main__":
    main()
