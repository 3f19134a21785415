"""What an objective's options cost: gradient and Hessian time against the first objective.

100,000 documents (``--total``) split into queries of 10 to 10,000 documents (``--lengths``),
N(0, 1) scores, labels 0-4, one thread (the host's ``num_threads=1``), best of ``--repeats``
calls after a warm-up call, the scores drifting by ``--drift`` times N(0, 1) per document
before each call, as a boosting round moves them (the lambdaloss part re-sorts each query
from its last call's order, as ApproxNDCG's windowed and long-list paths do; its direct loops
for short lists do not sort); the objectives of ``--objectives`` (the benchmarks' names and
options, as ``quality.py``'s methods without the library), by default ``approx_ndcg``,
``approx_ndcg(lambdaloss=0.5)`` (every pair) and ``lambdaloss_window=30``, each as a multiple
of the first.

Usage::

    python benchmarks/objective_cost.py --out benchmarks/results/lambdaloss_cost.md
    python benchmarks/objective_cost.py --objectives approx_ap 'approx_ap(pair_force=chord)' \
        'approx_ap(pair_force=chord,graded=True)' --out benchmarks/results/ap_graded_cost.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

DEFAULT_OBJECTIVES = ("approx_ndcg", "approx_ndcg(lambdaloss=0.5)",
                      "approx_ndcg(lambdaloss=0.5,lambdaloss_window=30)")


def objective(spec):
    """The objective of ``spec`` (``name`` or ``name(key=value,...)``, a package objective)."""
    method = C.parse_method(f"lgb:{spec}")
    if method.objective not in C.OBJECTIVES:
        raise SystemExit(f"--objectives: {spec!r} is not one of the package's objectives")
    return C.make_objective(method.objective, method.opts)


def seconds(obj, s, y, ptr, repeats, drift):
    prep = obj._prepare(y, ptr, cache=False)
    no_weights = np.empty(0)
    obj._grad_hess(s, prep, no_weights, None, 1)  # compile / warm up
    rng = np.random.default_rng(1)  # the same drifts for every objective
    best = np.inf
    for _ in range(repeats):
        s = s + drift * rng.normal(size=s.shape[0])
        t0 = time.perf_counter()
        obj._grad_hess(s, prep, no_weights, None, 1)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--drift", type=float, default=0.01,
                        help="score change per call, times N(0, 1) (0.01)")
    parser.add_argument("--total", type=int, default=100_000, help="documents (100,000)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 100, 1000, 10000],
                        help="documents per query (10 100 1000 10000)")
    parser.add_argument("--objectives", nargs="+", default=list(DEFAULT_OBJECTIVES),
                        metavar="SPEC", help="objectives, the first the reference for the "
                        "ratios (default: " + " ".join(DEFAULT_OBJECTIVES) + ")")
    parser.add_argument("--out", type=Path, help="Markdown file (default: print)")
    args = parser.parse_args(argv)
    objectives = [objective(spec) for spec in args.objectives]
    rng = np.random.default_rng(0)
    rows = []
    total = args.total
    for n in args.lengths:
        ptr = np.arange(total // n + 1, dtype=np.int64) * n
        s = rng.normal(size=ptr[-1])
        y = rng.integers(0, 5, ptr[-1]).astype(np.float64)
        times = [seconds(o, s, y, ptr, args.repeats, args.drift) for o in objectives]
        rows.append([f"{n:,}", f"{total // n:,}"] + [
            f"{t * 1e3:.1f} ms" + ("" if i == 0 else f" ({t / times[0]:.1f}x)")
            for i, t in enumerate(times)])
        print(rows[-1], flush=True)
    lines = C.header("Cost of objective options", "benchmarks/objective_cost.py",
                     sys.argv[1:] if argv is None else argv)
    lines += [__doc__.split("\n\n")[1].replace("\n", " "), ""]
    lines += C.md_table(["docs per query", "queries", *(f"`{s}`" for s in args.objectives)],
                        rows)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text)


if __name__ == "__main__":
    main()
