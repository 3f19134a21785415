"""The long lists' blocks compiled in a background process while the windowed loops stand in.

Each test runs in a fresh Python process with an empty Numba cache of its own and the default
``APPROX_GBDT_BACKGROUND_COMPILE`` (the test session turns it off, ``conftest.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = "APPROX_GBDT_BACKGROUND_COMPILE"


def _run(tmp_path, script, *, extra_path=(), env=None):
    """Run ``script`` in a fresh process whose Numba cache is an empty folder of ``tmp_path``;
    fail with its output unless it exits cleanly."""
    environ = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba_cache"),
               "PYTHONPATH": os.pathsep.join([str(ROOT), *map(str, extra_path)]),
               "NUMBA_NUM_THREADS": "2"}
    environ.pop(ENV, None)
    environ.update(env or {})
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=environ,
                         capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


TOY = """
from numba import njit


@njit(cache=True)
def first(x):
    return 2.0 * x.sum()


@njit(cache=True)
def second(x):
    return 3.0 * x.sum()
"""


def _toy(folder, name):
    folder.mkdir()
    (folder / f"{name}.py").write_text(TOY)
    return folder


def test_compiles_in_a_background_process_one_at_a_time(tmp_path):
    _toy(tmp_path / "toys", "toyblocks")
    _run(tmp_path, """
        import numpy as np
        import toyblocks as t
        from approx_gbdt import _behind

        x = np.arange(4.0)
        # not cheap: nothing started, the call compiles here
        assert not _behind.pending(t.first, (x,), cheap=False)
        assert not _behind._JOBS
        assert _behind.pending(t.first, (x,), cheap=True)  # started
        assert len(_behind._JOBS) == 1
        assert _behind.pending(t.second, (x,), cheap=True)  # waits for its turn
        assert len(_behind._JOBS) == 1
        assert _behind.wait()
        assert not _behind.pending(t.first, (x,), cheap=True)  # done: call it
        assert t.first(x) == 12.0
        assert t.first.stats.cache_hits and not t.first.stats.cache_misses
        assert _behind.pending(t.second, (x,), cheap=True)  # its turn now
        assert len(_behind._JOBS) == 2
        assert _behind.wait()
        assert not _behind.pending(t.second, (x,), cheap=False)
        assert t.second(x) == 18.0
        assert t.second.stats.cache_hits and not t.second.stats.cache_misses
        """, extra_path=[tmp_path / "toys"])


def test_a_call_that_is_not_cheap_waits_for_the_running_compilation(tmp_path):
    _toy(tmp_path / "toys", "toyblocks")
    _run(tmp_path, """
        import numpy as np
        import toyblocks as t
        from approx_gbdt import _behind

        x = np.arange(4.0)
        assert _behind.pending(t.first, (x,), cheap=True)
        (proc,) = _behind._JOBS.values()
        assert not _behind.pending(t.first, (x,), cheap=False)  # waited for it
        assert proc.returncode == 0
        assert t.first(x) == 12.0
        assert t.first.stats.cache_hits and not t.first.stats.cache_misses
        """, extra_path=[tmp_path / "toys"])


def test_loads_from_the_cache_without_a_background_process(tmp_path):
    _toy(tmp_path / "toys", "toyblocks")
    script = """
        import numpy as np
        import toyblocks as t
        from approx_gbdt import _behind

        x = np.arange(4.0)
        assert t.first(x) == 12.0
        """
    _run(tmp_path, script, extra_path=[tmp_path / "toys"])  # compiles into the cache
    _run(tmp_path, """
        import numpy as np
        import toyblocks as t
        from approx_gbdt import _behind

        x = np.arange(4.0)
        assert not _behind.pending(t.first, (x,), cheap=True)  # in the cache: loaded
        assert not _behind._JOBS and t.first.overloads
        assert t.first.stats.cache_hits and not t.first.stats.cache_misses
        """, extra_path=[tmp_path / "toys"])


def test_a_failed_background_process_leaves_the_compilation_to_the_caller(tmp_path):
    # the module is importable here, not in the background process (not on its path)
    folder = _toy(tmp_path / "toys", "hidden_toys")
    _run(tmp_path, f"""
        import sys
        import numpy as np
        sys.path.insert(0, {str(folder)!r})
        import hidden_toys as t
        from approx_gbdt import _behind

        x = np.arange(4.0)
        assert _behind.pending(t.first, (x,), cheap=True)
        assert not _behind.wait()
        assert not _behind.pending(t.first, (x,), cheap=True)  # compile here
        assert t.first(x) == 12.0
        assert t.first.stats.cache_misses
        """)


def test_turned_off_by_the_environment_and_in_process(tmp_path):
    _toy(tmp_path / "toys", "toyblocks")
    script = """
        import numpy as np
        import toyblocks as t
        from approx_gbdt import _behind

        x = np.arange(4.0)
        assert _behind.enabled() is {on}
        with _behind.in_process():
            assert not _behind.enabled()
            assert not _behind.pending(t.first, (x,), cheap=True)
        assert _behind.pending(t.first, (x,), cheap=True) is {on}
        assert _behind.wait()
        """
    _run(tmp_path, script.format(on=False), extra_path=[tmp_path / "toys"], env={ENV: "0"})
    _run(tmp_path, script.format(on=False), extra_path=[tmp_path / "toys"], env={ENV: "off"})
    _run(tmp_path, script.format(on=True), extra_path=[tmp_path / "toys"])


def test_stand_in_only_where_cheap():
    import numpy as np

    from approx_gbdt._kernels import _STAND_IN_PAIRS, _stand_in_cheap

    assert _stand_in_cheap(np.array([1000] * 10 + [2000] * 4), 1)
    assert not _stand_in_cheap(np.array([100_000]), 2)  # 1e10 pairs: wait for the compiler
    n = int(np.sqrt(_STAND_IN_PAIRS))
    assert _stand_in_cheap(np.array([n]), 1) and not _stand_in_cheap(np.array([n + 1]), 1)
    # one query runs on one thread, however many there are
    assert not _stand_in_cheap(np.array([n + 1]), 16)
    # many queries spread over the threads
    many = np.full(int(2 * _STAND_IN_PAIRS) // 10**6, 1000)
    assert not _stand_in_cheap(many, 1) and _stand_in_cheap(many, 2)


def test_long_lists_first_calls_stand_in_then_load_the_grid(tmp_path):
    """A first call on long lists (ApproxNDCG, ApproxAP; one query per thread and rows split)
    takes the windowed loops, equal to the reference loops; once the background processes
    have finished, the grid's blocks load from the cache (no compilation here) and agree with
    the first calls to the grid's accuracy."""
    _run(tmp_path, """
        import numpy as np
        from approx_gbdt import _behind, _kernels as K
        from approx_gbdt import approx_ap_obj, approx_ndcg_obj

        rng = np.random.default_rng(0)
        def lists(sizes):
            ptr = np.concatenate([[0], np.cumsum(sizes)])
            return rng.normal(size=ptr[-1]), rng.integers(0, 3, ptr[-1]).astype(float), ptr

        long, split = lists([1000, 2000, 1500]), lists([10_000])
        calls = [(approx_ndcg_obj, long, K._long_block_exact),
                 (approx_ap_obj, long, K._long_block_ap_bound),
                 (approx_ndcg_obj, split, K._split_block_exact)]
        first = []
        for obj, data, block in calls:
            g, h = obj.grad_hess(*data)
            assert not block.overloads  # the stand-in took them
            g0, h0 = obj._reference_grad_hess(*data)[:2]
            np.testing.assert_allclose(g, g0, rtol=1e-9, atol=1e-12 * np.abs(g0).max())
            np.testing.assert_allclose(h, h0, rtol=1e-9, atol=1e-12 * np.abs(h0).max())
            first.append((g, h))
        assert _behind._JOBS  # one at a time: the others wait for their turn
        for _ in calls:  # each round of calls starts the next one waiting
            assert _behind.wait()
            for obj, data, block in calls:
                obj.grad_hess(*data)
        assert len(_behind._JOBS) == 3
        assert _behind.wait()
        for (obj, data, block), (g1, h1) in zip(calls, first):
            g, h = obj.grad_hess(*data)
            assert block.overloads, block  # loaded from the cache, not compiled here
            assert block.stats.cache_hits and not block.stats.cache_misses, block
            np.testing.assert_allclose(g, g1, rtol=1e-6, atol=1e-7 * np.abs(g1).max())
            np.testing.assert_allclose(h, h1, rtol=1e-6, atol=1e-7 * np.abs(h1).max())
        """)


def test_precompile_compiles_in_its_own_process(monkeypatch):
    """precompile's steps run with the background compilation off (every block it meets is
    compiled into the cache by it), whatever the environment says."""
    import importlib

    from approx_gbdt import _behind

    P = importlib.import_module("approx_gbdt.precompile")  # the module, not the function

    monkeypatch.setenv(ENV, "1")
    seen = []
    monkeypatch.setattr(P, "_steps", lambda *a: [("probe", lambda: seen.append(
        _behind.enabled()))])
    assert list(P.precompile()) == ["probe"]
    assert seen == [False]
    assert _behind.enabled()


@pytest.mark.parametrize("long_waits", [False, True])
@pytest.mark.parametrize("split_waits", [False, True])
def test_every_query_once_whichever_blocks_wait(monkeypatch, long_waits, split_waits):
    """Data with short queries, long ones and one whose rows are split: whichever of the long
    tiers' blocks is compiling in the background, every query gets its gradient and Hessian
    once, equal to the reference loops."""
    import numpy as np
    from numba import get_num_threads

    from approx_gbdt import _behind, approx_ndcg_obj
    from approx_gbdt import _kernels as K

    if get_num_threads() < 2:
        pytest.skip("the row split needs two threads")
    waits = {K._long_block_exact: long_waits, K._split_block_exact: split_waits}
    met = []

    def pending(block, args, *, cheap):
        met.append(block)
        return waits[block]

    monkeypatch.setattr(_behind, "pending", pending)
    rng = np.random.default_rng(3)
    sizes = [30, 700, 5000, 1, 1200, 12]
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    s = rng.normal(size=ptr[-1])
    y = rng.integers(0, 3, ptr[-1]).astype(float)
    g, h = approx_ndcg_obj.grad_hess(s, y, ptr)
    assert set(met) == set(waits)  # both long tiers met
    g0, h0 = approx_ndcg_obj._reference_grad_hess(s, y, ptr)[:2]
    np.testing.assert_allclose(g, g0, rtol=1e-6, atol=1e-7 * np.abs(g0).max())
    np.testing.assert_allclose(h, h0, rtol=1e-6, atol=1e-7 * np.abs(h0).max())


def test_the_switch_values(monkeypatch):
    import warnings

    from approx_gbdt import _behind

    for value in ("0", "off", " False ", "NO"):
        monkeypatch.setenv(ENV, value)
        assert not _behind.enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for value in ("1", "on", "Yes", "", "true"):
            monkeypatch.setenv(ENV, value)
            assert _behind.enabled()
    monkeypatch.setenv(ENV, "disable")
    monkeypatch.setattr(_behind, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match="'disable' is neither"):
        assert _behind.enabled()  # left on
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _behind.enabled()  # once per value
