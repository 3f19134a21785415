"""What a first run costs: Numba compilation per entry point, from an empty and a full cache.

Each measurement runs in a fresh Python process with ``NUMBA_CACHE_DIR`` pointing at a new
temporary folder (the empty cache a new user has), then once more in a process that reuses that
folder (the cache filled by the first run), and in a third process with another empty cache
whose first call is ApproxAP's. The process makes the first calls a user makes, in
order, on a small generated data set, and times each one; every call is then repeated to give
the warm time, so the difference is compilation (or loading from the cache). Long lists' first
calls, with an empty cache, compile the windowed loops that stand in for the grid's blocks
while those compile in background processes (``approx_gbdt._behind``, on by default here):
the process waits for them, making the calls again until none starts another, and reports
how long they ran on; the warm times are taken after that, on the grid's blocks. It also
counts the compiled specialisations of every Numba dispatcher of approx_gbdt.

Usage::

    python benchmarks/cold_start.py --out benchmarks/results/cold_start.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from approx_gbdt._kernels import SMALL_N
from approx_gbdt._lanes import LANES_N_AP

ROOT = Path(__file__).resolve().parents[1]

LONG = (1000, 2000)  # queries of the grid's tier, one query per thread
SPLIT = (10000,)  # a query whose rows are split across threads (on two or more threads)

# The first calls a user makes, in order: (label, statement). ``d`` is the data set.
STEPS = [
    ("ApproxNDCG.grad_hess", "approx_ndcg_obj.grad_hess(d.s, d.y, d.ptr)"),
    ("ApproxAP.grad_hess", "approx_ap_obj.grad_hess(d.s, d.y, d.ptr)"),
    ("ApproxMRR.grad_hess", "approx_gbdt.approx_mrr_obj.grad_hess(d.s, d.y, d.ptr)"),
    ("ApproxNDCG(k=10).grad_hess", "approx_gbdt.ApproxNDCG(k=10).grad_hess(d.s, d.y, d.ptr)"),
    ("ApproxNDCG.value", "approx_ndcg_obj.value(d.s, d.y, d.ptr)"),
    ("ApproxAP.value", "approx_ap_obj.value(d.s, d.y, d.ptr)"),
    ("metrics.evaluate (ndcg@10, map, mrr)",
     "evaluate(d.s, d.y, d.ptr, ['ndcg@10', 'map', 'mrr'])"),
    ("lgb.train, 1 round, approx_ndcg_obj", "lgb.train(d.params, d.dtrain, num_boost_round=1)"),
    (f"ApproxNDCG.grad_hess, queries of {LONG[0]:,} and {LONG[1]:,} documents",
     "approx_ndcg_obj.grad_hess(*d.long)"),
    ("ApproxAP.grad_hess, the same long queries", "approx_ap_obj.grad_hess(*d.long)"),
    (f"ApproxNDCG.grad_hess, a query of {SPLIT[0]:,} documents (rows split)",
     "approx_ndcg_obj.grad_hess(*d.split)"),
    ("ApproxAP.grad_hess, the same query", "approx_ap_obj.grad_hess(*d.split)"),
]

# A user whose first call is ApproxAP's (a third process, with its own empty cache).
AP_FIRST = [STEPS[1], STEPS[0]]

# First calls on 1,000 queries of 10 documents alone (the lane loops, _lanes); on data with
# queries of 10 and of a few hundred documents (the same 1,000 queries and 25 of 400, like the
# MSLR sample's lists of up to 308): the direct loops; then the same queries with scores so
# widely spread (alpha times the range of the long ones about 1,000) that they take the
# windowed loops.
MIXED_FIRST = [
    ("ApproxNDCG.grad_hess, queries of 10 documents", "approx_ndcg_obj.grad_hess(*d.tiny)"),
    ("ApproxAP.grad_hess, queries of 10 documents", "approx_ap_obj.grad_hess(*d.tiny)"),
    ("ApproxNDCG.grad_hess, queries of 10 and 400 documents",
     "approx_ndcg_obj.grad_hess(*d.mixed)"),
    ("ApproxAP.grad_hess, queries of 10 and 400 documents", "approx_ap_obj.grad_hess(*d.mixed)"),
    ("ApproxNDCG.grad_hess, the same queries, widely spread scores",
     "approx_ndcg_obj.grad_hess(*d.wide)"),
    ("ApproxAP.grad_hess, the same queries, widely spread scores",
     "approx_ap_obj.grad_hess(*d.wide)"),
    ('ApproxAP(hessian="exact").grad_hess, generated data',
     "approx_gbdt.ApproxAP(hessian='exact').grad_hess(d.s, d.y, d.ptr)"),
    (f"ApproxNDCG.grad_hess, queries of {LONG[0]:,} and {LONG[1]:,} documents",
     "approx_ndcg_obj.grad_hess(*d.long)"),
    ("ApproxAP.grad_hess, the same long queries", "approx_ap_obj.grad_hess(*d.long)"),
]

CHILD = r"""
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import numpy as np
import approx_gbdt
from approx_gbdt import approx_ndcg_obj, approx_ap_obj, evaluate, make_ranking
import lightgbm as lgb
times = {"import approx_gbdt, lightgbm": time.perf_counter() - t0}
cpu = {"import approx_gbdt, lightgbm": time.process_time() - c0}
class D: pass
d = D()
data = make_ranking(200, seed=0, n_features=10)
d.y, d.ptr = data.y, data.group_ptr
d.s = np.random.default_rng(0).normal(size=d.y.size)
d.params = {"objective": approx_ndcg_obj, "verbosity": -1, "num_threads": 1}
d.dtrain = lgb.Dataset(data.X, d.y, group=np.diff(d.ptr))
rng = np.random.default_rng(1)
long_ptr = np.concatenate([[0], np.cumsum(json.loads(sys.argv[2]))])
d.long = (rng.normal(size=long_ptr[-1]), rng.integers(0, 3, long_ptr[-1]).astype(float), long_ptr)
split_ptr = np.concatenate([[0], np.cumsum(json.loads(sys.argv[3]))])
d.split = (rng.normal(size=split_ptr[-1]), rng.integers(0, 3, split_ptr[-1]).astype(float),
           split_ptr)
mixed_ptr = np.concatenate([np.arange(0, 10001, 10), np.arange(10400, 20001, 400)])
d.mixed = (rng.normal(size=20000), rng.integers(0, 3, 20000).astype(float), mixed_ptr)
d.wide = (20.0 * d.mixed[0], d.mixed[1], mixed_ptr)
d.tiny = (d.mixed[0][:10000], d.mixed[1][:10000], mixed_ptr[:1001])
steps = json.loads(sys.argv[1])
warm = {}
for label, stmt in steps:
    t, c = time.perf_counter(), time.process_time(); exec(stmt)
    times[label] = time.perf_counter() - t; cpu[label] = time.process_time() - c
# the long lists' blocks compile in background processes (approx_gbdt._behind), one at a
# time: wait for the running one, make the calls again (which starts the next one, or loads
# what has been compiled), until no call starts another
import resource
from approx_gbdt import _behind
t = time.perf_counter()
behind_ok = True
while True:
    started = len(_behind._JOBS)
    behind_ok &= _behind.wait()
    for label, stmt in steps:
        exec(stmt)
    if len(_behind._JOBS) == started:
        break
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
behind = {"wait": time.perf_counter() - t, "ok": behind_ok,
          "cpu": usage.ru_utime + usage.ru_stime,
          "processes": sum(p is not None for p in _behind._JOBS.values())}
for label, stmt in steps:
    t = time.perf_counter(); exec(stmt); warm[label] = time.perf_counter() - t
import importlib, pkgutil
from numba.core.registry import CPUDispatcher
specs = {}
for m in pkgutil.iter_modules(approx_gbdt.__path__, "approx_gbdt."):
    if m.name.split(".")[-1] in ("neural", "dask", "_torch_measures", "__main__"):
        continue
    mod = importlib.import_module(m.name)
    for name, obj in vars(mod).items():
        if isinstance(obj, CPUDispatcher) and obj.__module__ == m.name and obj.signatures:
            specs[f"{m.name.split('.')[-1]}.{name}"] = len(obj.signatures)
print(json.dumps({"first": times, "cpu": cpu, "warm": warm, "specs": specs,
                  "n_docs": int(d.y.size), "behind": behind}))
"""


def run_child(cache_dir, steps=STEPS):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    env.pop("APPROX_GBDT_BACKGROUND_COMPILE", None)  # a new user's default
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(steps), json.dumps(LONG),
                          json.dumps(SPLIT)],
                         env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - start
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/cold_start.md")
    parser.add_argument("--repeats", type=int, default=8,
                        help="more fresh processes per first call, for its range (default 8)")
    args = parser.parse_args(argv)
    command = "python benchmarks/cold_start.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="numba_cache_") as cache:
        empty = run_child(cache)
        full = run_child(cache)
    with tempfile.TemporaryDirectory(prefix="numba_cache_") as cache:
        ap_first = run_child(cache, AP_FIRST)
    firsts = {step[0]: [] for step in (STEPS[0], STEPS[1], *MIXED_FIRST)}
    behind = {}  # label -> seconds the background compilation ran on after the first call
    for _ in range(args.repeats):  # alternating, each process with its own empty cache
        for step in (STEPS[0], STEPS[1], *MIXED_FIRST):
            with tempfile.TemporaryDirectory(prefix="numba_cache_") as cache:
                result = run_child(cache, [step])
            firsts[step[0]].append(result["first"][step[0]])
            if result["behind"]["processes"]:
                behind.setdefault(step[0], []).append(result["behind"]["wait"])
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    import numba

    lines = [
        "# Cold start: Numba compilation per entry point",
        "",
        f"Produced by `{command.strip()}` (from the repository root) on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"numba {numba.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPU cores, load average {load:.1f} when it finished (other jobs "
        "share the machine: the seconds are upper bounds).",
        "",
        f"Each column is one fresh process on generated data ({empty['n_docs']} documents, "
        "200 queries), making the calls below in this order. 'Empty cache': "
        "`NUMBA_CACHE_DIR` is a new empty folder (a new user's first run); 'full cache': the "
        "same folder afterwards (every later run). 'Warm' is the same call repeated in the "
        "process: the rest is compilation or loading from the cache. The calls before the "
        f"last four meet only queries of fewer than {SMALL_N} documents, which take the direct "
        "loops of `_small`; the next two meet longer queries (the grid's tier, one query per "
        "thread), the last two a query whose rows are split across threads (their own "
        "block, with parallel loops); with an empty cache, the windowed loops stand in for "
        "those blocks while they compile in background processes (below). Wall-clock seconds, "
        "and the CPU seconds of the process (all threads) with an empty cache: Numba compiles "
        "on one thread, so on a busy machine the CPU seconds are closer to what an idle "
        "machine's wall clock shows.",
        "",
        "| step | empty cache (s) | empty cache, CPU s | full cache (s) | warm (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label in empty["first"]:
        warm = empty["warm"].get(label)
        lines.append(f"| {label} | {empty['first'][label]:.2f} | {empty['cpu'][label]:.2f} | "
                     f"{full['first'][label]:.2f} | {'' if warm is None else f'{warm:.3f}'} |")
    lines.append(f"| whole process | {empty['process']:.2f} | | {full['process']:.2f} | |")
    b = empty["behind"]
    lines += ["", f"The long lists' first calls compile the short tier's windowed loops, which "
              "stand in for the grid's blocks while those compile in background processes "
              "(`approx_gbdt._behind`, one at a time, each started by a call that meets its "
              "block when none is running): in the empty-cache process "
              f"{b['processes']} of them, which went on for {b['wait']:.1f} s after the last "
              f"call above returned (the calls made again until none started another; "
              f"{b['cpu']:.1f} CPU s in all; "
              f"{'all' if b['ok'] else 'not all'} finished successfully). The warm column is "
              "timed after they finished, on the grid's blocks; the full-cache process loads "
              "them."]
    lines += ["", "A user whose first call is ApproxAP's: one more fresh process with its own "
              "empty cache, making these calls in this order (seconds as above).", "",
              "| step | empty cache (s) | empty cache, CPU s |", "| --- | ---: | ---: |"]
    for label in ap_first["first"]:
        lines.append(f"| {label} | {ap_first['first'][label]:.2f} | "
                     f"{ap_first['cpu'][label]:.2f} |")
    if args.repeats:
        lines += ["", f"The first call of a process, in {args.repeats} more fresh processes for "
                  "each (alternating, each with its own empty cache; wall-clock seconds): the "
                  "first two on the generated data above (queries of 20 to 120 documents, the "
                  "direct loops), the next two on 1,000 queries of 10 documents alone (all "
                  f"fewer than {LANES_N_AP} documents: the lane loops of `_lanes`), the next two "
                  "on the same 1,000 queries and 25 of 400 "
                  f"(queries of fewer than {SMALL_N} documents, the direct loops), the next "
                  "two on the same queries with N(0, 20) scores (alpha times the score range "
                  "of the long ones about 1,000: the windowed loops), then ApproxAP's exact "
                  "Hessian on the generated data (the windowed loops: the direct ones lack its "
                  f"off-diagonal sums), and the queries of {LONG[0]:,} and {LONG[1]:,} "
                  "documents (alone: the grid's tier, one query per thread; no short queries "
                  "and no row split):", "",
                  "| first call of the process | min | median | max |",
                  "| --- | ---: | ---: | ---: |"]
        for label, values in firsts.items():
            lines.append(f"| {label} | {min(values):.2f} | {statistics.median(values):.2f} | "
                         f"{max(values):.2f} |")
        if behind:
            lines += ["", "Of these, the first calls on long lists started a background "
                      "compilation of the grid's blocks (the windowed loops standing in); it "
                      "went on after the first call returned for (seconds):", "",
                      "| first call of the process | min | median | max |",
                      "| --- | ---: | ---: | ---: |"]
            for label, values in behind.items():
                lines.append(f"| {label} | {min(values):.2f} | "
                             f"{statistics.median(values):.2f} | {max(values):.2f} |")
    lines += ["", "Compiled specialisations per Numba dispatcher after these calls (empty cache):",
              "", "| dispatcher | specialisations |", "| --- | ---: |"]
    for name, count in sorted(empty["specs"].items()):
        lines.append(f"| `{name}` | {count} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
