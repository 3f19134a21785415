"""Every registered measure, by the same properties (as rax's t12n_test runs each over every
metric): value, gradient and exact Hessian diagonal against PyTorch autograd (float64); the
fast kernels against the exact reference loops in every Hessian mode; the limit of sharp
smoothing against the exact measure; the names of :func:`parse_objective`.

A measure added to :data:`approx_gbdt.MEASURES` is picked up here without any edit. The
autograd reference of a separable measure is ``inv_z sum_i g_i t(pos^_i)`` written with dense
torch tensors from its gains, normaliser and ``torch_term`` (its definition); what is tested
is everything the kernels derive from it (``t'``, ``t''``, the chain rule, the pair loops).
"""

import itertools
import math

import numpy as np
import pytest
import torch

import approx_gbdt
from approx_gbdt import MEASURES, _kernels, _measure_terms, parse_objective
from approx_gbdt._kernels import SMALL_N
from approx_gbdt._measure_terms import torch_term
from tests.reference import torch_approx_ap, torch_positions

CUTOFF = 3


def _variants():
    out = []
    for name, info in MEASURES.items():
        if info.cutoff != "required":
            out.append(name)
        if info.cutoff != "none":
            out.append(f"{name}@{CUTOFF}")
    return out


VARIANTS = _variants()
MODES = ["exact", "bound", "abs", "mixed", "constant", "mixed_sum", "bound_sum"]


def _data(seed, sizes=(1, 2, 4, 9, 17, 30), spread=1.0, ties=False):
    rng = np.random.default_rng(seed)
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    y = rng.integers(0, 4, n).astype(float)
    y[ptr[2]:ptr[3]] = 0.0  # a query with nothing relevant
    s = rng.normal(size=n) * spread / 10.0
    if ties:
        s = np.round(s * 4) / 4
    return s, y, ptr


def _torch_measure(obj, prep, q):
    a, b = prep.group_ptr[q], prep.group_ptr[q + 1]
    arrays = prep.arrays
    kind, k, beta, theta = obj._term_args()
    if arrays["gains"] is None:  # ApproxAP, coupled
        y = torch.tensor(prep.labels[a:b])
        return lambda s: torch_approx_ap(s, y, alpha=obj.alpha, beta=obj.beta,
                                         threshold=obj.threshold)
    g = torch.tensor(arrays["gains"][a:b])
    iz = float(arrays["inv_z"][q])
    return lambda s: iz * (g * torch_term(kind, torch_positions(s, obj.alpha), k, beta,
                                          theta)).sum()


def _autograd(obj, s, y, ptr):
    prep = obj._prepare(y, ptr, cache=False)
    values, grads, hdiag = [], [], []
    for q in range(len(ptr) - 1):
        m = _torch_measure(obj, prep, q)
        st = torch.tensor(s[ptr[q]:ptr[q + 1]], requires_grad=True)
        value = m(st)
        values.append(float(value.detach()))
        if value.requires_grad and ptr[q + 1] - ptr[q] > 1:
            (g,) = torch.autograd.grad(-value, st)
            h = torch.autograd.functional.hessian(lambda t, m=m: -m(t), st.detach())
            grads.append(g.numpy())
            hdiag.append(torch.diagonal(h).numpy().copy())
        else:
            grads.append(np.zeros(st.shape[0]))
            hdiag.append(np.zeros(st.shape[0]))
    return np.array(values), np.concatenate(grads), np.concatenate(hdiag)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_value_gradient_hessian_against_autograd(name, ties):
    obj = parse_objective(name, normalize=False, hessian="exact", alpha=3.0)
    for seed in range(2):
        s, y, ptr = _data(seed, ties=ties)
        v0, g0, h0 = _autograd(obj, s, y, ptr)
        np.testing.assert_allclose(obj.value(s, y, ptr), v0, rtol=1e-9, atol=1e-12)
        g1, h1 = obj.grad_hess(s, y, ptr)
        scale_g = max(np.abs(g0).max(), 1e-300)
        scale_h = max(np.abs(h0).max(), 1e-300)
        np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-9 * scale_g)
        np.testing.assert_allclose(h1, h0, rtol=0, atol=1e-9 * scale_h)
        assert np.abs(g0).max() > 0  # the data exercise the measure


@pytest.mark.parametrize("name", VARIANTS)
def test_nothing_relevant_and_single_documents(name):
    obj = parse_objective(name)
    ptr = np.array([0, 1, 4, 5], dtype=np.int64)
    s = np.array([0.3, 0.1, -0.2, 0.5, 1.0])
    y = np.array([2.0, 0.0, 0.0, 0.0, 1.0])  # single relevant, nothing relevant, single
    g, h = obj.grad_hess(s, y, ptr)
    assert np.all(g == 0) and np.all(h == 0)
    v = obj.value(s, y, ptr)
    assert v[1] == 0.0 and np.all(np.isfinite(v))


@pytest.mark.filterwarnings("ignore:.*has no gradient at these scores")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", VARIANTS)
def test_fast_kernels_equal_reference_loops(name, mode, monkeypatch):
    if mode not in MEASURES[name.partition("@")[0]].objective._hessians:
        pytest.skip(f"{name} has no hessian={mode!r}")
    obj = parse_objective(name, hessian=mode)
    # lists shorter than SMALL_N take the direct loops of short lists (_small; no list counts
    # as widely spread here, _kernels._mostly_wide); with the direct loops off
    # (_small_n = 0), the windowed loops
    monkeypatch.setattr(_kernels, "_WIDE_SPAN", np.inf)
    for small_n, sizes, (spread, ties) in itertools.product(
        [SMALL_N, 0], [(1, 2, 40, 200, 7), (1, 2, 9, 120, 7)],
        [(0.0, False), (1.0, True), (50.0, False), (1e4, False)],
    ):
        obj._small_n = small_n
        s, y, ptr = _data(7, sizes=sizes, spread=spread, ties=ties)
        w = np.random.default_rng(1).uniform(0.5, 2.0, s.shape[0])
        g0, h0, _, _ = obj._reference_grad_hess(s, y, ptr, w)
        g1, h1 = obj.grad_hess(s, y, ptr, w)
        for ref, fast in [(g0, g1), (h0, h1)]:
            for q in range(len(ptr) - 1):
                r, f = ref[ptr[q]:ptr[q + 1]], fast[ptr[q]:ptr[q + 1]]
                # relative 1e-6 plus the window bound (below 1e-13 of the scale here)
                np.testing.assert_allclose(f, r, rtol=0, atol=1e-6 * np.abs(r).max() + 1e-13)
        np.testing.assert_allclose(obj.value(s, y, ptr), obj._reference_value(s, y, ptr),
                                   rtol=1e-10, atol=1e-14)


# query sizes: the normaliser's ideal values are sorted in a padded [query, rank] table, in
# one without padding (equal sizes), or in one sort of all the documents (one long query)
@pytest.mark.parametrize("sizes", [(6, 7, 7, 1), (7, 7, 7), (6, 7, 7, 1, 300)])
@pytest.mark.parametrize("name", VARIANTS)
def test_sharp_limit_is_the_exact_measure(name, sizes):
    info = MEASURES[name.partition("@")[0]]
    if info.exact is None:
        pytest.skip(f"{name}: approx_gbdt.metrics has no exact counterpart")
    obj = parse_objective(name, alpha=1e3)
    if "beta" in obj.get_options() and obj.get_options().get("k", 1) is not None:
        obj = obj.replace(beta=1e3)  # AP's indicator, or a truncation's
    rng = np.random.default_rng(4)
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    y = rng.integers(0, 3, n).astype(float)
    y[ptr[1]:ptr[2]] = 0.0  # a query with nothing relevant
    s = rng.permutation(n).astype(float)  # distinct scores, 1 apart: alpha 1e3 is sharp
    exact = info.exact(s, y, ptr, obj)
    value = obj.value(s, y, ptr)
    np.testing.assert_allclose(value, np.nan_to_num(exact, nan=0.0), rtol=0, atol=1e-6)
    assert np.any(value > 0.1)  # the data exercise the normaliser


def _ideal_reference(gains, ptr, base, k=0):
    """sum_r g_(r) base(r) per query, the gains sorted descending, summed rank by rank."""
    out = []
    for q in range(len(ptr) - 1):
        g = sorted(gains[ptr[q]:ptr[q + 1]], reverse=True)
        acc = 0.0
        for r, gr in enumerate(g[:k] if k > 0 else g, start=1):
            acc += gr / base(r)
        out.append(acc)
    return np.array(out)


# the three layouts of test_sharp_limit_is_the_exact_measure, and lists past 1,620 documents,
# where NumPy's log2 and libm's differ in the last bit on some CPUs
LAYOUTS = [(6, 7, 7, 1), (7, 7, 7), (6, 7, 7, 1, 300), (2000, 1700), (3, 0, 2500, 5)]


@pytest.mark.parametrize("sizes", LAYOUTS)
def test_ideal_values_are_the_ranked_sums(sizes):
    rng = np.random.default_rng(len(sizes))
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    labels = rng.integers(0, 5, int(ptr[-1])).astype(float)
    labels[ptr[0]:ptr[1]] = 0.0  # a query with nothing relevant
    gains = 2.0 ** labels - 1.0
    for k in (0, 3, 1650):
        expected = _ideal_reference(gains, ptr, lambda r: math.log2(r + 1.0), k)
        got = _measure_terms.ideal_value(gains, ptr, _measure_terms.TERM_LOG, k, 0.0)
        assert np.array_equal(got, expected)  # bit for bit: libm's log2, in rank order
    den = _measure_terms._exact_denominators(_measure_terms.TERM_LOG, 3300)
    assert np.array_equal(den, [math.log2(r + 1.0) for r in range(1, 3301)])
    # ApproxMRR's normaliser: the harmonic number of the relevant documents' count
    relevant = (labels >= 1.0).astype(float)
    expected = _ideal_reference(relevant, ptr, float)
    got = approx_gbdt.ApproxMRR().inverse_normaliser(relevant, ptr)
    np.testing.assert_array_equal(got, np.divide(1.0, expected, out=np.zeros_like(expected),
                                                 where=expected > 0))
    assert np.any(got > 0) and np.any(got == 0)


@pytest.mark.parametrize("name", VARIANTS)
def test_parse_objective_and_parameters(name):
    obj = parse_objective(name)
    info = MEASURES[name.partition("@")[0]]
    assert type(obj) is info.objective
    if "@" in name:
        assert obj.k == CUTOFF
    assert type(obj.replace()) is type(obj) and obj.replace().get_options() == obj.get_options()
    changed = obj.replace(alpha=2.5)
    assert changed.alpha == 2.5 and obj.alpha != 2.5
    assert {k: v for k, v in changed.get_options().items() if k != "alpha"} == {
        k: v for k, v in obj.get_options().items() if k != "alpha"}
    with pytest.raises(TypeError, match="no option"):
        obj.replace(not_an_option=1)
    assert getattr(approx_gbdt, info.objective.__name__) is info.objective
    assert isinstance(info.instance, info.objective)


def test_parse_objective_errors():
    with pytest.raises(ValueError, match="unknown objective"):
        parse_objective("approx_nothing")
    with pytest.raises(ValueError, match="takes no cutoff"):
        parse_objective("approx_ap@5")
    with pytest.raises(ValueError, match="positive integer"):
        parse_objective("approx_ndcg@0")
    with pytest.raises(ValueError, match="positive integer"):
        parse_objective("approx_ndcg@")
    with pytest.raises(ValueError, match="takes no cutoff"):
        parse_objective("approx_ap@")
    with pytest.raises(TypeError):
        parse_objective(3)
    with pytest.warns(UserWarning, match="no effect without k"):
        approx_gbdt.ApproxDCG(beta=2.0)
    assert parse_objective(" APPROX_NDCG@7 ").k == 7
    assert parse_objective("approx_precision").k == 10


@pytest.mark.filterwarnings("ignore:.*has no gradient at these scores")
def test_measures_train_with_lightgbm():
    lgb = pytest.importorskip("lightgbm")
    data = approx_gbdt.make_ranking(60, docs_per_query=(10, 20), seed=0)
    ds = lgb.Dataset(data.X, data.y, group=np.diff(data.group_ptr))
    for name in VARIANTS:
        obj = parse_objective(name)
        if getattr(obj, "k", None):  # from a constant start, a sharp truncation gives nothing
            obj = obj.replace(beta=1.0)
        booster = lgb.train({"objective": obj, "verbose": -1, "num_leaves": 7}, ds,
                            num_boost_round=5)
        pred = booster.predict(data.X)
        assert np.isfinite(pred).all() and pred.std() > 0, name
    assert math.isfinite(float(pred.sum()))


def _padded(s, y, ptr):
    sizes = np.diff(ptr)
    S = torch.zeros(len(sizes), sizes.max(), dtype=torch.float64)
    Y = torch.zeros_like(S)
    M = torch.zeros(S.shape, dtype=torch.bool)
    for q, (a, b) in enumerate(zip(ptr[:-1], ptr[1:])):
        S[q, :b - a] = torch.tensor(s[a:b])
        Y[q, :b - a] = torch.tensor(y[a:b])
        M[q, :b - a] = True
    return S, Y, M


def _torch_losses():
    pytest.importorskip("torch")
    from approx_gbdt import _torch_measures

    return _torch_measures.LOSSES


@pytest.mark.parametrize("name", [n for n in VARIANTS if n.partition("@")[0] not in
                                  ("approx_ndcg", "approx_ap")])
def test_neural_loss_is_the_objective(name):
    from approx_gbdt import _torch_measures
    from approx_gbdt.neural import NeuralRanker, smooth_positions

    assert name.partition("@")[0] in _torch_losses()
    obj = parse_objective(name)
    s, y, ptr = _data(3, ties=True)
    S, Y, M = _padded(s, y, ptr)
    v = _torch_measures.separable_measure(obj, S, Y, M, smooth_positions(S, M, alpha=obj.alpha))
    np.testing.assert_allclose(v.numpy(), obj.value(s, y, ptr), rtol=1e-10, atol=1e-13)

    data = approx_gbdt.make_ranking(40, docs_per_query=(5, 15), n_features=6, n_informative=3,
                                   seed=1)
    ranker = NeuralRanker(loss=name.partition("@")[0], hidden=(8,), max_epochs=2,
                          k=obj.k if "@" in name else None)
    ranker.fit(data.X, data.y, np.diff(data.group_ptr))
    assert np.isfinite(ranker.predict(data.X)).all()
