"""Values, gradients and Hessians of the objectives against independent references."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approx_gbdt import (
    ApproxAP,
    ApproxNDCG,
    SoftNDCG,
    approx_ap_obj,
    approx_ndcg_obj,
    smoothed_positions,
)
from tests.reference import (
    ap_exact,
    autograd_reference,
    ndcg_exact,
    numpy_pairwise,
    torch_approx_ap,
    torch_approx_ndcg,
)

RTOL = 1e-6


def make_queries(rng, sizes, *, spread=1.0, ties=False, levels=3, empty=()):
    """Concatenated random queries; ``empty`` lists queries given no relevant document."""
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    s = rng.normal(size=ptr[-1]) * spread
    if ties:
        s = np.round(s * 2) / 2
    y = rng.integers(0, levels, size=ptr[-1]).astype(np.float64)
    for q in empty:
        y[ptr[q] : ptr[q + 1]] = 0.0
    return s, y, ptr


def assert_close(actual, expected, ptr):
    """Relative error per query below RTOL, relative to the query's largest magnitude."""
    for a, b in zip(ptr[:-1], ptr[1:]):
        scale = np.max(np.abs(expected[a:b]), initial=0.0)
        np.testing.assert_allclose(
            actual[a:b], expected[a:b], rtol=RTOL, atol=RTOL * scale + 1e-300
        )


CASES = [
    ("ndcg", lambda: ApproxNDCG(alpha=3.0, normalize=False), torch_approx_ndcg, {"alpha": 3.0}),
    (
        "ndcg@5",
        lambda: ApproxNDCG(alpha=2.0, k=5, beta=4.0, normalize=False),
        torch_approx_ndcg,
        {"alpha": 2.0, "k": 5, "beta": 4.0},
    ),
    (
        "ap",
        lambda: ApproxAP(alpha=2.0, beta=3.0, normalize=False),
        torch_approx_ap,
        {"alpha": 2.0, "beta": 3.0},
    ),
    (
        "ap-threshold2",
        lambda: ApproxAP(alpha=5.0, beta=1.0, threshold=2.0, normalize=False),
        torch_approx_ap,
        {"alpha": 5.0, "beta": 1.0, "threshold": 2.0},
    ),
]


@pytest.mark.parametrize("name, make, measure, kw", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize(
    "sizes, spread, ties",
    [
        ([1, 2, 7, 30, 64], 1.0, False),
        ([12, 25, 40], 1.0, True),
        ([20, 33], 1e-7, False),
        ([20, 33], 50.0, False),
        ([300], 0.3, False),
    ],
    ids=["random", "ties", "tiny-spread", "huge-spread", "300-docs"],
)
def test_value_grad_exact_hessian_match_autograd(name, make, measure, kw, sizes, spread, ties):
    rng = np.random.default_rng(len(sizes) * 7 + int(spread * 10))
    s, y, ptr = make_queries(rng, sizes, spread=spread, ties=ties, empty=(0,))
    obj = make()
    ref_v, ref_g, ref_h = autograd_reference(measure, s, y, ptr, **kw)
    np.testing.assert_allclose(obj.value(s, y, ptr), ref_v, rtol=RTOL, atol=1e-12)
    g, h = obj.grad_hess(s, y, ptr, hessian="exact")
    assert_close(g, ref_g, ptr)
    assert_close(h, ref_h, ptr)


def _bound_reference(obj, s, y, ptr):
    """alpha^2 sum_j w_kj |v_j - v_k| with v = -(dL/ds solved back) from autograd of M(pos)."""
    import torch

    out = np.zeros_like(s)
    for a, b in zip(ptr[:-1], ptr[1:]):
        st_ = torch.tensor(s[a:b])
        yt = torch.tensor(y[a:b])
        pos = torch.tensor(
            smoothed_positions(s[a:b], np.array([0, b - a]), alpha=obj.alpha), requires_grad=True
        )
        # M as a function of the positions only: the same formulas with pos given.
        if isinstance(obj, ApproxNDCG):
            gains = 2.0**yt - 1.0
            disc = 1.0 / torch.log2(torch.arange(b - a, dtype=torch.float64) + 2.0)
            z = (torch.sort(gains, descending=True).values * disc)[: obj.k].sum()
            if z == 0:
                continue
            terms = gains / torch.log2(1.0 + pos)
            if obj.k:
                terms = terms * torch.sigmoid(obj.beta * (obj.k + 0.5 - pos))
            m = terms.sum() / z
        else:
            r = (yt >= obj.threshold).double()
            if r.sum() == 0:
                continue
            ind = torch.sigmoid(obj.beta * (pos[:, None] - pos[None, :]))
            inner = 1 + (ind * r[None, :]).sum(1) - torch.diagonal(ind) * r
            m = (r / pos * inner).sum() / r.sum()
        (v,) = torch.autograd.grad(m, pos)
        v = v.numpy()
        _, w = numpy_pairwise(st_.numpy(), obj.alpha)
        out[a:b] = obj.alpha**2 * (w * np.abs(v[None, :] - v[:, None])).sum(1)
    return out


@pytest.mark.parametrize("name, make, measure, kw", CASES, ids=[c[0] for c in CASES])
def test_hessian_approximations(name, make, measure, kw):
    rng = np.random.default_rng(3)
    s, y, ptr = make_queries(rng, [1, 5, 17, 40], empty=(1,))
    obj = make().replace(hessian_scale=1.0)  # the formulas (hessian_scale: test_objective_options)
    _, exact = obj.grad_hess(s, y, ptr, hessian="exact")
    bound_ref = _bound_reference(obj, s, y, ptr)
    _, bound = obj.grad_hess(s, y, ptr, hessian="bound")
    assert_close(bound, bound_ref, ptr)
    _, ab = obj.grad_hess(s, y, ptr, hessian="abs")
    np.testing.assert_allclose(ab, np.abs(exact), rtol=1e-12)
    _, mixed = obj.grad_hess(s, y, ptr, hessian="mixed")
    np.testing.assert_allclose(mixed, np.maximum(exact, obj.hessian_floor * bound), rtol=1e-12)
    _, const = obj.grad_hess(s, y, ptr, hessian="constant")
    live = np.zeros(s.shape, bool)
    for q, (a, b) in enumerate(zip(ptr[:-1], ptr[1:])):
        live[a:b] = b - a > 1 and q != 1 and np.any(y[a:b] >= 1)
    np.testing.assert_array_equal(const, np.where(live, obj.hessian_constant, 0.0))
    for mode in ("bound", "mixed", "constant", "abs"):
        _, h = obj.grad_hess(s, y, ptr, hessian=mode)
        assert np.all(np.isfinite(h)) and np.all(h[live] >= 0)
    for mode in ("bound", "mixed", "constant"):
        _, h = obj.grad_hess(s, y, ptr, hessian=mode)
        assert np.all(h[live] > 0)
    assert np.any(exact < 0), "the exact diagonal of -ApproxMeasure is not convex"


@pytest.mark.parametrize("obj", [ApproxNDCG(hessian="bound"), ApproxAP(hessian="bound"),
                                 ApproxAP(hessian="bound_sum")])
def test_normalisation_scales_each_query(obj):
    rng = np.random.default_rng(4)
    s, y, ptr = make_queries(rng, [6, 30, 9])
    raw = type(obj)(hessian=obj.hessian, normalize=False)
    g0, h0 = raw.grad_hess(s, y, ptr)
    g1, h1 = obj.grad_hess(s, y, ptr)
    for a, b in zip(ptr[:-1], ptr[1:]):
        tot = np.abs(g0[a:b]).sum()
        f = math.log2(1 + tot) / tot
        np.testing.assert_allclose(g1[a:b], g0[a:b] * f, rtol=1e-12)
        np.testing.assert_allclose(h1[a:b], h0[a:b] * f, rtol=1e-12)


def test_qin_table1_positions():
    s = np.array([4.20074, 3.12378, 4.40918, 1.55258, 4.13330])
    pos = smoothed_positions(s, np.array([0, 5]), alpha=100.0)
    np.testing.assert_allclose(pos, [2.00118, 4.00000, 1.00000, 5.00000, 2.99882], atol=6e-6)


def test_single_document_and_irrelevant_queries_are_inert():
    s = np.array([0.3, 1.0, -2.0, 0.5, 0.1])
    y = np.array([2.0, 0.0, 0.0, 0.0, 1.0])
    ptr = np.array([0, 1, 4, 5])  # single relevant doc, no relevant doc, single doc
    for obj in (ApproxNDCG(), ApproxNDCG(k=3), ApproxAP()):
        for mode in obj._hessians:
            g, h = obj.grad_hess(s, y, ptr, hessian=mode)
            np.testing.assert_array_equal(g, 0.0)
            np.testing.assert_array_equal(h, 0.0)
        assert obj.value(s, y, ptr)[1] == 0.0


def test_surrogate_tends_to_exact_measure():
    rng = np.random.default_rng(5)
    s = rng.permutation(30).astype(float)  # distinct, spaced scores
    y = rng.integers(0, 3, 30).astype(float)
    ptr = np.array([0, 30])
    exact = ndcg_exact(s, y, ptr)
    errs = [abs(ApproxNDCG(alpha=a).value(s, y, ptr)[0] - exact) for a in (1, 5, 50)]
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-9
    errs_k = [
        abs(ApproxNDCG(alpha=a, k=5, beta=b).value(s, y, ptr)[0] - ndcg_exact(s, y, ptr, k=5))
        for a, b in ((1, 1), (5, 5), (50, 50))
    ]
    assert errs_k[0] > errs_k[1] > errs_k[2] and errs_k[2] < 1e-9
    errs_ap = [
        abs(ApproxAP(alpha=a, beta=b).value(s, y, ptr)[0] - ap_exact(s, y))
        for a, b in ((1, 1), (5, 5), (50, 50))
    ]
    assert errs_ap[0] > errs_ap[1] > errs_ap[2] and errs_ap[2] < 1e-9


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 25),
    seed=st.integers(0, 2**16),
    shift=st.floats(-1e3, 1e3),
    which=st.sampled_from(["ndcg", "ndcg@3", "ap"]),
)
def test_permutation_and_shift(n, seed, shift, which):
    obj = {"ndcg": ApproxNDCG(), "ndcg@3": ApproxNDCG(k=3), "ap": ApproxAP()}[which]
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = rng.integers(0, 3, n).astype(float)
    ptr = np.array([0, n])
    g, h = obj.grad_hess(s, y, ptr)
    perm = rng.permutation(n)
    gp, hp = obj.grad_hess(s[perm], y[perm], ptr)
    np.testing.assert_allclose(gp, g[perm], rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(hp, h[perm], rtol=1e-9, atol=1e-15)
    gs, hs = obj.grad_hess(s + shift, y, ptr)
    np.testing.assert_allclose(gs, g, rtol=1e-6, atol=1e-9 * max(1.0, abs(shift)))
    np.testing.assert_allclose(hs, h, rtol=1e-6, atol=1e-9 * max(1.0, abs(shift)))


@pytest.mark.filterwarnings("ignore:.*has no gradient at these scores")  # saturated, as meant
@pytest.mark.parametrize("obj", [ApproxNDCG(hessian="exact"), ApproxNDCG(k=2), ApproxAP()])
def test_no_overflow_for_huge_gaps(obj):
    s = np.array([0.0, 1e5, -1e5, 3.0, 1e5 + 1e-3])
    y = np.array([1.0, 0.0, 2.0, 1.0, 0.0])
    ptr = np.array([0, 5])
    for alpha in (10.0, 1e6):
        o = type(obj)(alpha=alpha, hessian="exact")
        g, h = o.grad_hess(s, y, ptr)
        assert np.all(np.isfinite(g)) and np.all(np.isfinite(h))
        assert np.isfinite(o.value(s, y, ptr)).all()


def test_weights_per_document_and_per_query():
    rng = np.random.default_rng(6)
    s, y, ptr = make_queries(rng, [8, 12])
    g, h = approx_ndcg_obj.grad_hess(s, y, ptr)
    w_doc = rng.uniform(0.5, 2.0, size=s.size)
    gw, hw = approx_ndcg_obj.grad_hess(s, y, ptr, weights=w_doc)
    np.testing.assert_allclose(gw, g * w_doc)
    np.testing.assert_allclose(hw, h * w_doc)
    gq, hq = approx_ap_obj.grad_hess(s, y, ptr, weights=[2.0, 0.5])
    g0, h0 = approx_ap_obj.grad_hess(s, y, ptr)
    np.testing.assert_allclose(gq, g0 * np.repeat([2.0, 0.5], [8, 12]))
    np.testing.assert_allclose(hq, h0 * np.repeat([2.0, 0.5], [8, 12]))
    with pytest.raises(ValueError, match="weights"):
        approx_ndcg_obj.grad_hess(s, y, ptr, weights=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="non-negative"):
        approx_ndcg_obj.grad_hess(s, y, ptr, weights=-np.ones(2))


def test_scores_float32_and_column_shapes():
    rng = np.random.default_rng(7)
    s, y, ptr = make_queries(rng, [10, 10])
    g, h = approx_ndcg_obj.grad_hess(s.astype(np.float32), y, ptr)
    g2, _ = approx_ndcg_obj.grad_hess(s.astype(np.float32)[:, None], y, ptr)
    assert g.dtype == np.float64 and g.shape == (20,) and h.shape == (20,)
    np.testing.assert_array_equal(g, g2)
    with pytest.raises(ValueError, match="one score per document"):
        approx_ndcg_obj.grad_hess(np.stack([s, s], 1), y, ptr)


@pytest.mark.parametrize(
    "scores, labels, ptr, match",
    [
        ([0.0, np.nan], [1, 0], [0, 2], "scores must be finite"),
        ([0.0, np.inf], [1, 0], [0, 2], "scores must be finite"),
        ([0.0, 1.0], [1, np.nan], [0, 2], "labels must be finite"),
        ([0.0, 1.0], [1, -1], [0, 2], "non-negative"),
        ([0.0, 1.0], [1, 2000], [0, 2], "too large"),
        ([0.0, 1.0], [1, 0], [0, 3], "do not add up"),
        ([0.0, 1.0], [1, 0], [0, 1], "do not add up"),
        ([0.0, 1.0], [1, 0], [0, 0, 2], "empty"),
        ([0.0, 1.0], [1, 0], [1, 2], "start at 0"),
        ([0.0, 1.0, 2.0], [1, 0], [0, 2], "3 scores for 2 documents"),
    ],
)
def test_bad_input(scores, labels, ptr, match):
    with pytest.raises(ValueError, match=match):
        approx_ndcg_obj.grad_hess(np.array(scores), np.array(labels, float), np.array(ptr))


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: ApproxNDCG(alpha=0), ValueError, "alpha"),
        (lambda: ApproxNDCG(alpha=-1.0), ValueError, "alpha"),
        (lambda: ApproxNDCG(alpha=float("nan")), ValueError, "alpha"),
        (lambda: ApproxNDCG(k=0), ValueError, "k must be at least 1"),
        (lambda: ApproxNDCG(k=2.5), TypeError, "k must be"),
        (lambda: ApproxNDCG(hessian="newton"), ValueError, "hessian"),
        (lambda: ApproxNDCG(normalize="no"), TypeError, "normalize must be True or False"),
        (lambda: ApproxAP(normalize=2), TypeError, "normalize must be True or False"),
        (lambda: SoftNDCG(normalize="yes"), TypeError, "normalize must be True or False"),
        (lambda: ApproxAP(beta=0.0), ValueError, "beta"),
        (lambda: ApproxAP(threshold=float("inf")), ValueError, "threshold"),
        (lambda: ApproxAP(hessian_floor=-1.0), ValueError, "hessian_floor"),
    ],
)
def test_bad_options(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_a_cutoff_beyond_any_list_is_the_whole_list():
    s, y, ptr = np.array([1.0, 2.0, 3.0, 0.5]), np.array([2.0, 1.0, 0.0, 1.0]), np.array([0, 4])
    for k in (10**6, 2**64):
        np.testing.assert_array_equal(ApproxNDCG(k=k).grad_hess(s, y, ptr)[0],
                                      ApproxNDCG(k=10**6).grad_hess(s, y, ptr)[0])
    np.testing.assert_allclose(ApproxNDCG(k=2**64).value(s, y, ptr),
                               ApproxNDCG().value(s, y, ptr), rtol=1e-12)


def test_beta_without_k_warns():
    """beta sharpens only the top-k truncation: another value without k warns (a k x beta
    grid search still runs), at the user's line."""
    with pytest.warns(UserWarning, match="beta=5 has no effect without k") as rec:
        ApproxNDCG(beta=5.0)
    assert rec[0].filename == __file__
    with pytest.warns(UserWarning, match="beta=20 has no effect without k"):
        ApproxNDCG(k=5, beta=20.0).replace(k=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ApproxNDCG(k=5, beta=20.0)
        ApproxNDCG(beta=10.0)
        ApproxNDCG(k=5, beta=20.0).replace(k=None, beta=10.0)


def test_call_without_query_information():
    with pytest.raises(ValueError, match="query information"):
        approx_ndcg_obj(np.zeros(3), np.zeros(3))


def test_pickle_drops_cache_and_keeps_options():
    import pickle

    obj = ApproxNDCG(alpha=7.0, k=4)
    s, y, ptr = make_queries(np.random.default_rng(8), [5, 6])
    obj(y, s, None, np.diff(ptr))
    assert obj._cache
    clone = pickle.loads(pickle.dumps(obj))
    assert clone._cache == [] and clone.alpha == 7.0 and clone.k == 4
    sizes = np.diff(ptr)
    np.testing.assert_array_equal(clone(y, s, None, sizes)[0], obj(y, s, None, sizes)[0])
    assert "ApproxNDCG(alpha=7" in repr(obj)
