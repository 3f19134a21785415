"""Compiling the kernels ahead of use: :func:`precompile` (``approx-gbdt compile``).

Numba compiles each kernel on its first call and caches the machine code on disk
(``__pycache__`` next to the package, Numba's per-user cache folder when that is read-only, or
``NUMBA_CACHE_DIR``); every later process loads it in a fraction of a second. A first call
compiles only the kernels of what it meets (the README's "First run" section has the
seconds): short lists a few seconds, scores spread far apart or another kind of Hessian more,
each when it first appears, possibly late in a training run; lists of 512 documents or more
compile the grid's blocks, with an empty cache and where the stand-in is cheap, in a
background process while exact loops stand in for them, so that a run's first rounds on long
lists take the exact loops (``APPROX_GBDT_BACKGROUND_COMPILE=0``
compiles them in the calling process instead). :func:`precompile` makes those first calls at
once, on small generated inputs and all in this process, so that no later call waits for the
compiler or takes a stand-in: run it once after installing (in a Docker image's build, a CI
cache step) on the kind of machine that trains. Numba keys its cache by the CPU and by the
versions of Python, Numba and the package's source files: a change of any of them compiles
again.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["precompile"]


def _lists(sizes, *, scale, seed):
    """Scores ``scale * N(0, 1)``, labels 0-2 and the boundaries of lists of ``sizes``."""
    rng = np.random.default_rng(seed)
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    return scale * rng.normal(size=n), rng.integers(0, 3, n).astype(float), ptr


def _steps(long_lists, all_hessians, threads):
    """``(label, call)`` for every first call :func:`precompile` makes."""
    from approx_gbdt.metrics import evaluate
    from approx_gbdt.objectives import ApproxAP, ApproxNDCG

    ndcg, ap = ApproxNDCG(), ApproxAP()
    short = _lists(np.random.default_rng(0).integers(10, 121, 200), scale=1.0, seed=1)
    # lists all under 24 documents take the lane loops (_lanes)
    tiny = _lists(np.random.default_rng(5).integers(2, 24, 300), scale=1.0, seed=6)
    # lists of 128 to 511 documents whose scores are spread so far (alpha times their range
    # about 1,000) that most pairs are saturated take the windowed loops
    wide = _lists([10] * 100 + [400] * 5, scale=20.0, seed=2)
    grid = _lists([1000, 2000], scale=1.0, seed=3)  # the grid's tier
    split = _lists([10_000], scale=1.0, seed=4)  # its rows split across the threads
    data = [("lists under 512 documents", short),
            ("lists under 24 documents", tiny),
            ("lists under 512 documents, widely spread scores", wide)]
    if long_lists:
        data.append(("lists of 1,000 and 2,000 documents", grid))
        if threads > 1:
            data.append(("a list of 10,000 documents, rows split across threads", split))
    # the Hessian modes that need the exact diagonal's sums, and those that do not
    modes = [(ndcg, ndcg.hessian), (ap, ap.hessian)]
    if all_hessians:
        modes += [(ndcg, "bound"), (ap, "exact")]
    steps = []
    for where, (s, y, ptr) in data:
        for obj, mode in modes:
            name = type(obj).__name__ + ("" if mode == obj.hessian else f"(hessian={mode!r})")
            steps.append((f"{name}.grad_hess, {where}",
                          lambda obj=obj, mode=mode, s=s, y=y, ptr=ptr:
                          obj.grad_hess(s, y, ptr, hessian=mode)))
        if where.startswith("lists under"):
            steps.append((f"ApproxNDCG.value and ApproxAP.value, {where}",
                          lambda s=s, y=y, ptr=ptr: (ndcg.value(s, y, ptr), ap.value(s, y, ptr))))
    s, y, ptr = short
    steps.append(("metrics.evaluate (NDCG@k, MAP, P@k, MRR)",
                  lambda: evaluate(s, y, ptr, ["ndcg@10", "map", "p@10", "mrr"])))
    return steps


def precompile(*, long_lists=True, all_hessians=False, progress=None):
    """Compile (or load from Numba's cache) the kernels of the objectives and the metrics.

    Makes the first calls of ``approx_ndcg_obj`` and ``approx_ap_obj`` (gradient and Hessian,
    and their values) on every tier of lists the kernels have, and of
    :func:`~approx_gbdt.metrics.evaluate`, on small generated inputs, so that later calls in
    this and every later process (on the same kind of machine) load compiled code instead of
    compiling it. The other measures (ApproxMRR, ApproxNDCG@k, ...) use the same kernels; the
    options with kernels of their own (``positions="label_aware"``, ``pair_force``,
    ``lambdaloss``) and the neural baseline compile on first use.

    Parameters
    ----------
    long_lists : bool, default True
        Also the kernels of lists of 512 documents or more (the grid), and, with two or more
        Numba threads, those of a list whose rows are split across the threads: most of the
        compilation time. Without them, lists under 512 documents.
    all_hessians : bool, default False
        Also the kernels of the Hessian modes of the other kind than each objective's default:
        ``hessian="bound"`` or ``"constant"`` for ApproxNDCG (default ``"mixed"``), and
        ``"exact"``, ``"abs"`` or ``"mixed"`` for ApproxAP (default ``"bound"``).
    progress : callable, optional
        Called with each step's label before it runs (``print``, for example).

    Returns
    -------
    dict
        Wall-clock seconds of each step: the compilation, or loading from the cache when it
        has been filled before (a fraction of a second).

    Examples
    --------
    >>> from approx_gbdt import precompile
    >>> seconds = precompile(long_lists=False)
    >>> for label in list(seconds)[:2]:
    ...     print(label)
    ApproxNDCG.grad_hess, lists under 512 documents
    ApproxAP.grad_hess, lists under 512 documents
    """
    from numba import get_num_threads

    from approx_gbdt._behind import in_process

    seconds = {}
    with in_process():  # every step compiles here, none in a background process
        for label, call in _steps(bool(long_lists), bool(all_hessians), get_num_threads()):
            if progress is not None:
                progress(label)
            start = time.perf_counter()
            call()
            seconds[label] = time.perf_counter() - start
    return seconds
