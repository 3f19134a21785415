"""precompile / ``approx-gbdt compile``: after it, a user's first calls load compiled kernels.

Each process below has its own Numba cache folder (``NUMBA_CACHE_DIR``); compilations are
counted with Numba's compile events, which fire only when a kernel is not in the cache.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# A user's first calls on lists under 512 documents, unlike the ones precompile makes (other
# sizes and seeds, LightGBM training, widely spread scores, lists of 10); prints how many
# approx_gbdt kernels were compiled rather than loaded from the cache.
USER = r"""
import numpy as np
from numba.core import event
import lightgbm as lgb
import approx_gbdt as ag

compiled = []

class Count(event.Listener):
    def on_start(self, ev):
        if ev.data["dispatcher"].py_func.__module__.startswith("approx_gbdt"):
            compiled.append(ev.data["dispatcher"].py_func.__qualname__)
    def on_end(self, ev):
        pass

with event.install_listener("numba:compile", Count()):
    data = ag.make_ranking(60, seed=5, n_features=12)
    ds = lgb.Dataset(data.X, data.y, group=np.diff(data.group_ptr))
    for obj in (ag.approx_ndcg_obj, ag.approx_ap_obj):
        booster = lgb.train({"objective": obj, "verbose": -1, "num_threads": 1}, ds, 3)
        s = booster.predict(data.X)
        obj.value(s, data.y, data.group_ptr)
        obj.grad_hess(30.0 * s, data.y, data.group_ptr)
    rng = np.random.default_rng(7)
    ptr = np.arange(0, 3001, 300)
    for obj in (ag.approx_ndcg_obj, ag.approx_ap_obj):
        obj.grad_hess(25.0 * rng.normal(size=3000), rng.integers(0, 4, 3000), ptr)
    ptr = np.arange(0, 1001, 10)  # lists of 10 documents: the lane loops
    for obj in (ag.approx_ndcg_obj, ag.approx_ap_obj):
        obj.grad_hess(rng.normal(size=1000), rng.integers(0, 4, 1000), ptr)
        obj.value(rng.normal(size=1000), rng.integers(0, 4, 1000), ptr)
    ag.evaluate(s, data.y, data.group_ptr, ["ndcg@5", "map", "mrr", "p@5"])
print("compiled", len(compiled), sorted(set(compiled)))
"""


def _run(args, cache):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=900)


def _compiled(cache):
    out = _run(["-c", USER], cache)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("compiled "), out.stdout
    return int(line.split()[1]), line


@pytest.mark.slow
def test_after_compile_a_users_first_calls_compile_nothing(tmp_path):
    filled = tmp_path / "filled"
    out = _run(["-m", "approx_gbdt", "compile", "--short-only"], filled)
    assert out.returncode == 0, out.stderr
    assert "ApproxAP.grad_hess, lists under 512 documents" in out.stdout
    assert str(filled) in out.stdout  # names the cache folder
    count, line = _compiled(filled)
    assert count == 0, line
    # the control: with an empty cache the same calls compile kernels
    count, line = _compiled(tmp_path / "empty")
    assert count > 0, line


def test_compiled_closures_hold_only_plain_constants():
    """Numba keys the cache entry of a function made by a factory (a closure) by a hash of its
    pickled closure variables; a compiled function, for one, pickles differently in every
    process, so a closure that held one would be compiled again by every process, never
    loaded from the cache. The factories' closures hold flags and numbers only."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import approx_gbdt

    seen = 0
    for mod in pkgutil.iter_modules(approx_gbdt.__path__):
        try:
            module = importlib.import_module(f"approx_gbdt.{mod.name}")
        except ImportError:  # an optional extra (torch) that is not installed
            continue
        for name, obj in vars(module).items():
            if not isinstance(obj, CPUDispatcher) or obj.py_func.__closure__ is None:
                continue
            seen += 1
            for cell in obj.py_func.__closure__:
                value = cell.cell_contents
                assert value is None or type(value) in (bool, int, float, str), (name, value)
    assert seen >= 8  # the kernels' block variants are closures
