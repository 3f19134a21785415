"""Compiling the long lists' blocks in a background process while exact loops stand in.

A first call on lists of 512 documents or more needs the grid's blocks (``_kernels``), whose
compilation takes 18-33 s; the exact windowed loops of the short tier compile in a fraction
of that and give the same gradients up to the grid's error (relative differences near 1e-8).
So when such a block is neither compiled in this process nor in Numba's on-disk cache, the
scheduler (``_kernels._schedule``) starts a Python process that compiles it into the cache
(:func:`pending`) and lets the windowed loops take its lists until that process has finished;
the next call then loads the block from the cache (a fraction of a second). One such process
runs at a time per calling process (processes started apart each start their own); a block
that waits for its turn has its lists taken by the windowed loops too. A background process
that is still compiling when the calling process ends finishes its work (the next process
loads it). This only helps where the stand-in is cheap (the scheduler's ``_STAND_IN_PAIRS``)
and Numba caches (a function without a cache compiles in the calling process, as does a
block whose background process cannot start or fails, on the next call that meets it).

``APPROX_GBDT_BACKGROUND_COMPILE=0`` in the environment turns this off: every block then
compiles in the calling process on its first call, and a run's gradients never depend on how
far a background compilation has got (:func:`in_process` does the same while it is open).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import subprocess
import sys
import threading
import warnings

from numba.core.compiler_lock import global_compiler_lock

ENV = "APPROX_GBDT_BACKGROUND_COMPILE"

_LOCK = threading.Lock()
_JOBS = {}  # (pid, module, name, signature) -> the background process compiling it
_OFF = [0]  # depth of in_process() blocks


def _after_fork():
    """A forked child's lock is free (its parent's holder does not exist in it); its parent's
    background processes are told apart by their pid."""
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


_OFF_VALUES = {"0", "false", "no", "off"}
_ON_VALUES = {"", "1", "true", "yes", "on"}
_WARNED = set()  # values of the switch warned about


def enabled():
    """Whether blocks may compile in a background process: not inside :func:`in_process`,
    and ``APPROX_GBDT_BACKGROUND_COMPILE`` is not ``0`` (or ``false``, ``no``, ``off``; any
    case). Another value than those and ``1``, ``true``, ``yes``, ``on`` (or empty) leaves
    it on, with a ``RuntimeWarning`` once per value."""
    raw = os.environ.get(ENV, "1")
    flag = raw.strip().lower()
    if flag not in _OFF_VALUES | _ON_VALUES and raw not in _WARNED:
        _WARNED.add(raw)
        warnings.warn(f"{ENV}={raw!r} is neither 0/false/no/off nor 1/true/yes/on; the "
                      "long lists' kernels compile in the background", RuntimeWarning,
                      stacklevel=2)
    return _OFF[0] == 0 and flag not in _OFF_VALUES


@contextlib.contextmanager
def in_process():
    """While this context is open (in any thread: the setting is the process's), every block
    compiles in the calling process on first use, as with
    ``APPROX_GBDT_BACKGROUND_COMPILE=0``; ``precompile`` uses it."""
    with _LOCK:
        _OFF[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _OFF[0] -= 1


def _started():
    """The background processes this process has started (under ``_LOCK``)."""
    pid = os.getpid()
    return [p for (owner, *_), p in _JOBS.items() if owner == pid and p is not None]


def _signature(block, args):
    """The argument types Numba compiles ``block`` for when called with ``args``."""
    return tuple(block.typeof_pyval(a) for a in args)


def _key(block, sig):
    """``block``'s module and its name there (how the background process finds it); None
    for a function that is not a module's attribute."""
    module = sys.modules.get(block.py_func.__module__)
    name = next((n for n, v in vars(module).items() if v is block), None) if module else None
    return None if name is None else (os.getpid(), module.__name__, name, sig)


def _cached(block, sig):
    """Whether ``block`` is compiled for ``sig`` in this process, or its on-disk cache has it
    (then it is loaded now, so that the call does not compile). Under Numba's compiler lock,
    as Numba's own loading from the cache."""
    if sig in block.overloads:
        return True
    with global_compiler_lock:
        if block._cache.load_overload(sig, block.targetctx) is None:
            return False
        block.compile(sig)  # (loads it again, now as the dispatcher's own)
    return True


def _start(key):
    """A Python process that compiles the block of ``key`` into Numba's cache; None if it
    cannot start."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (f"import sys; sys.path.insert(0, {root!r}); "
            "from approx_gbdt._behind import _compile_from_stdin; _compile_from_stdin()")
    if not sys.executable or getattr(sys, "frozen", False):  # no interpreter to start
        return None
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    try:
        proc.stdin.write(pickle.dumps(key[1:]))
        proc.stdin.close()
    except OSError:
        proc.kill()
        proc.wait()
        return None
    return proc


def _compile_from_stdin():
    """The background process: compile the block named on stdin for its signature (Numba
    saves it to the cache)."""
    module, name, sig = pickle.loads(sys.stdin.buffer.read())
    getattr(importlib.import_module(module), name).compile(sig)


def pending(block, args, *, cheap):
    """Whether ``block``'s compilation for ``args`` is under way in a background process, so
    that the caller lets the stand-in loops take its lists (only where they are ``cheap``).

    False where calling ``block`` does not compile (compiled in this process, or loaded now
    from the cache), where the background process has finished (the call loads what it
    compiled, or compiles here if it failed), where it is running but the stand-in is not
    cheap (this waits for it), and where a background process cannot help (turned off, no
    on-disk cache, it cannot start) or the stand-in is not cheap: the call then compiles here.
    Otherwise a background process is started for it, unless another one of this process is
    still running (one at a time: the block's lists wait for their turn on the stand-in)."""
    overloads = getattr(block, "overloads", None)  # None: Numba's JIT turned off
    if overloads is None or len(overloads) or not enabled():
        return False  # (compiled here for some types: a call for others compiles here)
    cache = getattr(block, "_cache", None)
    if cache is None or type(cache).__name__ == "NullCache":
        return False
    sig = _signature(block, args)
    key = _key(block, sig)
    if key is None:
        return False
    with _LOCK:
        proc = _JOBS.get(key)
        if proc is None:
            if key in _JOBS or not cheap or _cached(block, sig):
                return False
            if any(p.poll() is None for p in _started()):
                return True  # one at a time: its turn comes when the running one has finished
            _JOBS[key] = proc = _start(key)
            return proc is not None
        if cheap and proc.poll() is None:
            return True
    proc.wait()  # (outside the lock: other threads' calls go on meanwhile)
    return False


def wait():
    """Wait for every background compilation this process has started; return whether all
    of them finished successfully (True when there were none). Blocks still waiting for
    their turn start on a later call that meets them."""
    with _LOCK:
        procs = _started()
    codes = [p.wait() for p in procs]
    return all(code == 0 for code in codes)
