"""The docstring examples of every approx_gbdt module run as tests (as ``--doctest-modules``
would, without importing ``approx_gbdt.__main__``)."""

import doctest
import importlib
import pkgutil

import pytest

import approx_gbdt

MODULES = sorted(
    m.name for m in pkgutil.iter_modules(approx_gbdt.__path__, "approx_gbdt.")
    if m.name != "approx_gbdt.__main__"
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_examples_exist():
    counts = {}
    for name in MODULES:
        finder = doctest.DocTestFinder()
        counts[name] = sum(len(t.examples) for t in finder.find(importlib.import_module(name)))
    assert counts["approx_gbdt.measures"] > 0 and counts["approx_gbdt.metrics"] > 0
