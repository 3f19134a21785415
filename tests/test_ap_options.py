"""ApproxAP's chord pair forces (``pair_force="chord"``) against a dense reference, and its
mean over the relevance levels (``graded=True``) against autograd and the per-level objectives.

The reference follows the formulas of ``approx_gbdt/_ap_chord.py``'s docstring with dense
matrices: the smoothed positions and ``S`` from full sigmoid matrices, ``v = dM/dpos^`` by
PyTorch autograd of ApproxAP as a function of the positions (float64), then the chord terms
by NumPy. Chord forces are not a gradient, so there is no autograd reference for them.
"""

from __future__ import annotations

import functools
import pickle

import lightgbm as lgb
import numpy as np
import pytest
import torch

from approx_gbdt import ApproxAP, make_ranking_splits, metrics
from tests.reference import autograd_reference, random_queries, torch_approx_ap

# queries of 1-30 documents: one without a relevant document, one all relevant
queries = functools.partial(random_queries, grades=3, all_relevant=True)


def dense_chord(s, y, ptr, *, alpha, beta, threshold=1.0):
    """Gradient of L and bound Hessian of ApproxAP's chord forces, query by query."""
    grad = np.zeros(s.size)
    bound = np.zeros(s.size)
    for a, b in zip(ptr[:-1], ptr[1:]):
        r = (y[a:b] >= threshold).astype(np.float64)
        if b - a < 2 or r.sum() == 0:
            continue
        x = alpha * (s[a:b][None, :] - s[a:b][:, None])  # x[k, j] = alpha (s_j - s_k)
        sig = 1.0 / (1.0 + np.exp(-x))
        w = sig * (1.0 - sig)
        np.fill_diagonal(sig, 0.0)
        np.fill_diagonal(w, 0.0)
        pos = 1.0 + sig.sum(1)
        p = torch.tensor(pos, dtype=torch.float64, requires_grad=True)
        rt = torch.tensor(r)
        ind = torch.sigmoid(beta * (p[:, None] - p[None, :])) * rt[None, :]
        ind = ind * (1.0 - torch.eye(b - a, dtype=torch.float64))
        above = 1.0 + ind.sum(1)  # 1 + S_k
        ap = (rt * above / p).sum() / rt.sum()
        (v,) = torch.autograd.grad(ap, p)
        v = v.numpy() * r
        c = above.detach().numpy() / r.sum()
        g = np.zeros(b - a)
        h = np.zeros(b - a)
        for k in np.flatnonzero(r):
            for j in np.flatnonzero(r == 0):
                vkj = v[k] + c[k] * (1.0 / pos[k] ** 2 - 1.0 / (pos[k] * pos[j]))
                t = alpha * w[k, j] * vkj
                g[k] -= t
                g[j] += t
                h[k] += alpha * abs(t)
                h[j] += alpha * abs(t)
        grad[a:b] = -g
        bound[a:b] = h
    return grad, bound


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12 * max(np.abs(want).max(), 1.0))


@pytest.mark.parametrize(("spread", "ties"), [(1.0, False), (1.0, True), (40.0, False)])
def test_chord_forces_against_dense_reference(spread, ties):
    """Spread 40: most pairs saturated, outside the pair loop's windows."""
    s, y, ptr = queries(1, spread=spread, ties=ties)
    obj = ApproxAP(alpha=2.0, beta=0.7, pair_force="chord", normalize=False, hessian_scale=1.0)
    g, h = obj.grad_hess(s, y, ptr)
    g_ref, h_ref = dense_chord(s, y, ptr, alpha=2.0, beta=0.7)
    close(g, g_ref)
    close(h, h_ref)
    assert np.abs(g_ref).max() > 0
    # "constant" on every query with a relevant and an irrelevant document, else nothing
    _, h_const = obj.grad_hess(s, y, ptr, hessian="constant")
    sizes = np.diff(ptr)
    n_rel = np.add.reduceat(y >= 1, ptr[:-1])
    has_pairs = np.repeat((n_rel > 0) & (n_rel < sizes), sizes)
    assert has_pairs.any() and not has_pairs.all()
    np.testing.assert_array_equal(h_const, np.where(has_pairs, 1.0, 0.0))


@pytest.mark.parametrize("graded", [False, True])
def test_chord_forces_of_long_queries_against_dense_reference(graded):
    """Queries whose relevant documents' positions span more than ``37 / beta``: the sums over
    pairs of relevant documents take only the pairs within that distance one by one and count
    the farther ones as saturated; labels 0-3, so three levels when graded, and a query whose
    documents are all relevant at the lowest level."""
    rng = np.random.default_rng(21)
    sizes = [400, 250, 90]
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    s = rng.normal(size=ptr[-1])
    s[ptr[1]:ptr[1] + 40] = 0.5  # ties
    y = rng.integers(0, 4, ptr[-1]).astype(float)
    y[ptr[1]:ptr[2]] = rng.integers(1, 4, sizes[1])
    obj = ApproxAP(alpha=2.0, beta=0.7, pair_force="chord", graded=graded, normalize=False,
                   hessian_scale=1.0)
    g, h = obj.grad_hess(s, y, ptr)
    levels = (1.0, 2.0, 3.0) if graded else (1.0,)
    refs = [dense_chord(s, y, ptr, alpha=2.0, beta=0.7, threshold=t) for t in levels]
    close(g, sum(r[0] for r in refs) / len(levels))
    close(h, sum(r[1] for r in refs) / len(levels))
    assert np.abs(g[:ptr[1]]).max() > 0
    # all relevant at the lowest level: no force there, only from the higher levels
    assert (np.abs(g[ptr[1]:ptr[2]]).max() > 0) == graded


def test_threshold_and_normalisation():
    s, y, ptr = queries(2)
    g, h = ApproxAP(pair_force="chord", threshold=2.0, hessian_scale=1.0).grad_hess(s, y, ptr)
    g_ref, h_ref = dense_chord(s, y, ptr, alpha=10.0, beta=0.3, threshold=2.0)
    for a, b in zip(ptr[:-1], ptr[1:]):  # normalize=True: log2(1 + S) / S with S = sum |g|
        tot = np.abs(g_ref[a:b]).sum()
        f = np.log2(1.0 + tot) / tot if tot > 0 else 1.0
        g_ref[a:b] *= f
        h_ref[a:b] *= f
    close(g, g_ref)
    close(h, h_ref)


@pytest.mark.parametrize("per_query", [False, True])
def test_weights_scale_each_document_after_the_normalisation(per_query):
    s, y, ptr = queries(4)
    rng = np.random.default_rng(5)
    w = rng.uniform(0.5, 2.0, ptr.size - 1 if per_query else s.size)
    w_doc = np.repeat(w, np.diff(ptr)) if per_query else w
    obj = ApproxAP(pair_force="chord")
    g, h = obj.grad_hess(s, y, ptr, w)
    g0, h0 = obj.grad_hess(s, y, ptr)
    np.testing.assert_allclose(g, g0 * w_doc, rtol=1e-12)
    np.testing.assert_allclose(h, h0 * w_doc, rtol=1e-12)


def test_tangent_is_the_default_objective():
    s, y, ptr = queries(6)
    for a, b in zip(ApproxAP(pair_force="tangent").grad_hess(s, y, ptr),
                    ApproxAP().grad_hess(s, y, ptr)):
        np.testing.assert_array_equal(a, b)


def test_no_force_between_relevant_documents():
    """An all-relevant query has AP 1 in any order: chord forces leave it alone, the
    tangents of the smoothed surrogate do not."""
    s = np.array([0.4, -0.2, 0.1, 1.3])
    y = np.array([1.0, 2.0, 1.0, 3.0])
    ptr = np.array([0, 4])
    g, h = ApproxAP(pair_force="chord").grad_hess(s, y, ptr)
    assert not g.any() and not h.any()
    g_tangent, _ = ApproxAP().grad_hess(s, y, ptr)
    assert np.abs(g_tangent).max() > 0


def test_chord_is_the_tangent_at_equal_positions_and_stronger_when_misordered():
    """One relevant and one irrelevant document: no pair of relevant documents, so the only
    difference is the precision term's chord, which is its tangent at equal scores and,
    with the relevant document below, the steeper slope between the two positions."""
    y = np.array([0.0, 1.0])
    ptr = np.array([0, 2])
    for s in (np.array([0.0, 0.0]), np.array([0.3, 0.3])):
        np.testing.assert_allclose(ApproxAP(pair_force="chord").grad_hess(s, y, ptr),
                                   ApproxAP().grad_hess(s, y, ptr), rtol=1e-12)
    opts = {"alpha": 2.0, "normalize": False}
    below = np.array([0.5, 0.0])  # the relevant document second
    g_chord, _ = ApproxAP(pair_force="chord", **opts).grad_hess(below, y, ptr)
    g_tangent, _ = ApproxAP(**opts).grad_hess(below, y, ptr)
    assert g_chord[1] < g_tangent[1] < 0  # pushed up, harder
    above = below[::-1].copy()  # the relevant document first: a weaker push
    g_chord, _ = ApproxAP(pair_force="chord", **opts).grad_hess(above, y, ptr)
    g_tangent, _ = ApproxAP(**opts).grad_hess(above, y, ptr)
    assert g_tangent[1] < g_chord[1] < 0


def test_degenerate_queries_get_zeros():
    s = np.array([0.5, 1.0, 2.0, 3.0, 0.0])
    y = np.array([3.0, 0.0, 0.0, 0.0, 1.0])
    ptr = np.array([0, 1, 4, 5])
    g, h = ApproxAP(pair_force="chord").grad_hess(s, y, ptr)
    assert not g.any() and not h.any()


@pytest.mark.parametrize("bad", [
    {"pair_force": "swap"},
    {"pair_force": "secant"},
    {"pair_force": "chord", "hessian": "mixed"},
    {"pair_force": "chord", "hessian": "exact"},
    {"pair_force": "chord", "hessian": "bound_sum"},
])
def test_bad_options(bad):
    with pytest.raises(ValueError):
        ApproxAP(**bad)


def test_chord_rejects_an_exact_hessian_override():
    s, y, ptr = queries(3)
    with pytest.raises(ValueError, match="chord"):
        ApproxAP(pair_force="chord").grad_hess(s, y, ptr, hessian="exact")


def test_options_round_trip():
    obj = ApproxAP(pair_force="chord", hessian="constant")
    assert obj.get_options()["pair_force"] == "chord"
    assert "pair_force='chord'" in repr(obj)
    assert obj.replace(beta=1.0).pair_force == "chord"
    copy = pickle.loads(pickle.dumps(obj))
    assert copy.get_options() == obj.get_options()
    assert ApproxAP().replace(pair_force="chord").pair_force == "chord"
    with pytest.raises(ValueError):
        obj.replace(hessian="mixed")
    s, y, ptr = queries(7)
    with pytest.raises(NotImplementedError):  # the reference loops know the tangents only
        obj._reference_grad_hess(s, y, ptr)


def test_chord_forces_train_with_lightgbm():
    d = make_ranking_splits((60, 10, 40), seed=3)
    train, test = d["train"], d["test"]
    params = {"objective": ApproxAP(pair_force="chord"), "learning_rate": 0.1, "verbose": -1,
              "num_threads": 1, "seed": 0}
    dtrain = lgb.Dataset(train.X, train.y, group=np.diff(train.group_ptr))
    booster = lgb.train(params, dtrain, num_boost_round=30)
    scores = booster.predict(test.X)
    trained = metrics.mean_over_queries(metrics.average_precision(scores, test.y,
                                                                  test.group_ptr))
    const = metrics.mean_over_queries(metrics.average_precision(np.zeros(test.y.size), test.y,
                                                                test.group_ptr))
    assert trained > const + 0.05


# -- graded=True: the mean of ApproxAP over the relevance levels ---------------------------------
def torch_graded_ap(s, y, *, alpha, beta, levels):
    """The mean over ``levels`` of ApproxAP at each level as its threshold (0 where a query has
    no label that high)."""
    return sum(torch_approx_ap(s, y, alpha=alpha, beta=beta, threshold=t) for t in levels) / len(
        levels)


def graded_queries(seed, **kw):
    """Labels 0-3: every level present, and one more query of labels ``0, 1, 1, 0, 2``, with
    pairs at the levels 1 and 2 but no label of 3."""
    s, y, ptr = random_queries(seed, grades=4, all_relevant=True, **kw)
    assert set(np.unique(y)) == {0.0, 1.0, 2.0, 3.0}
    extra = np.random.default_rng(seed).normal(size=5)
    return (np.concatenate([s, extra]), np.concatenate([y, [0.0, 1.0, 1.0, 0.0, 2.0]]),
            np.concatenate([ptr, [ptr[-1] + 5]]))


@pytest.mark.parametrize("ties", [False, True])
def test_graded_against_autograd(ties):
    """Tangent forces, no normalisation: the gradient, and the exact Hessian diagonal, of the
    mean over the levels 1, 2 and 3."""
    s, y, ptr = graded_queries(6, ties=ties)
    obj = ApproxAP(alpha=3.0, beta=0.7, graded=True, normalize=False)
    values, g_ref, h_ref = autograd_reference(torch_graded_ap, s, y, ptr, alpha=3.0, beta=0.7,
                                              levels=(1.0, 2.0, 3.0))
    g, h = obj.grad_hess(s, y, ptr, hessian="exact")
    close(g, g_ref)
    close(h, h_ref)
    np.testing.assert_allclose(obj.value(s, y, ptr), values, rtol=1e-9, atol=1e-12)
    # the last query has no label of 3: a level of value 0 in its mean, and a gradient
    assert np.abs(g_ref[ptr[-2]:]).max() > 0 and values[-1] > 0
    assert values[-1] < torch_graded_ap(torch.tensor(s[ptr[-2]:]), torch.tensor(y[ptr[-2]:]),
                                        alpha=3.0, beta=0.7, levels=(1.0, 2.0)).item()


@pytest.mark.parametrize("pair_force", ["tangent", "chord"])
def test_graded_is_the_mean_of_the_normalised_levels(pair_force):
    """With the per-query normalisation and document weights: the mean over the levels of the
    binary objectives, each normalised (and weighted) by itself; the chord forces against the
    dense reference of each level."""
    s, y, ptr = graded_queries(7)
    w = np.random.default_rng(8).uniform(0.5, 2.0, s.size)
    g, h = ApproxAP(graded=True, pair_force=pair_force).grad_hess(s, y, ptr, w)
    parts = [ApproxAP(threshold=t, pair_force=pair_force).grad_hess(s, y, ptr, w)
             for t in (1.0, 2.0, 3.0)]
    close(g, sum(p[0] for p in parts) / 3)
    close(h, sum(p[1] for p in parts) / 3)
    if pair_force == "chord":
        obj = ApproxAP(alpha=2.0, beta=0.7, pair_force="chord", graded=True, normalize=False,
                       hessian_scale=1.0)
        g, h = obj.grad_hess(s, y, ptr)
        refs = [dense_chord(s, y, ptr, alpha=2.0, beta=0.7, threshold=t) for t in (1.0, 2.0, 3.0)]
        close(g, sum(r[0] for r in refs) / 3)
        close(h, sum(r[1] for r in refs) / 3)


def test_graded_chord_with_every_document_relevant_at_the_lowest_level():
    """Threshold 0: every document is relevant at the lowest level, which adds 0; the other
    levels as their binary objectives (queries with and without label 0, and with ties)."""
    rng = np.random.default_rng(12)
    y = np.array([1, 2, 3, 3, 1, 2, 3, 0, 2, 1, 3, 0, 0, 2], dtype=float)
    ptr = np.array([0, 7, 14])
    s = rng.normal(size=14)
    s[2:5] = 0.1
    g, h = ApproxAP(graded=True, threshold=0.0, pair_force="chord").grad_hess(s, y, ptr)
    parts = [ApproxAP(threshold=t, pair_force="chord").grad_hess(s, y, ptr)
             for t in (1.0, 2.0, 3.0)]
    close(g, sum(p[0] for p in parts) / 4)
    close(h, sum(p[1] for p in parts) / 4)
    assert np.abs(g[:7]).max() > 0


def test_graded_levels_start_at_the_threshold_and_skip_absent_labels():
    """Labels 0, 2 and 5 with threshold 2: the levels are 2 and 5 (not 3 or 4); with one
    level (binary labels, or every label above the threshold equal) it is the binary
    objective."""
    s, y, ptr = graded_queries(9)
    y = np.array([0.0, 0.0, 2.0, 5.0])[y.astype(int)]
    g, h = ApproxAP(graded=True, threshold=2.0).grad_hess(s, y, ptr)
    parts = [ApproxAP(threshold=t).grad_hess(s, y, ptr) for t in (2.0, 5.0)]
    close(g, (parts[0][0] + parts[1][0]) / 2)
    close(h, (parts[0][1] + parts[1][1]) / 2)
    binary = (y >= 2.0).astype(np.float64)
    for labels in (binary, 3.0 * binary):
        for pf in ("tangent", "chord"):
            got = ApproxAP(graded=True, pair_force=pf).grad_hess(s, labels, ptr)
            want = ApproxAP(pair_force=pf).grad_hess(s, labels, ptr)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


def test_graded_levels_of_unusual_labels():
    """Non-integer labels are levels of their own; a threshold above every label leaves one
    empty level (zeros, as the binary objective)."""
    s, y, ptr = graded_queries(11)
    y = y * 0.75 + np.where(y == 3.0, 0.1, 0.0)  # 0, 0.75, 1.5, 2.35
    g, _ = ApproxAP(graded=True, threshold=0.5, pair_force="chord").grad_hess(s, y, ptr)
    parts = [ApproxAP(threshold=t, pair_force="chord").grad_hess(s, y, ptr)[0]
             for t in (0.75, 1.5, 2.35)]
    close(g, sum(parts) / 3)
    for pf in ("tangent", "chord"):
        g, h = ApproxAP(graded=True, threshold=5.0, pair_force=pf).grad_hess(s, y, ptr)
        assert not g.any() and not h.any()


def test_graded_refuses_continuous_labels():
    """One level per distinct label: continuous labels would make thousands of binary
    ApproxAPs; 32 levels are taken, 33 refused."""
    s, y, ptr = graded_queries(11)
    rng = np.random.default_rng(0)
    ApproxAP(graded=True).grad_hess(s, np.arange(y.size) % 33.0, ptr)  # levels 1..32
    with pytest.raises(ValueError, match="these labels have 33 .at most 32.; round them"):
        ApproxAP(graded=True).grad_hess(s, np.arange(y.size) % 34.0, ptr)
    with pytest.raises(ValueError, match="round them to grades"):
        ApproxAP(graded=True).grad_hess(s, rng.uniform(0, 4, y.size), ptr)


def test_graded_saturation_warns_for_a_misordered_grade():
    """Labels 1, 2, 2 ranked 1 first with saturated sigmoids: no level-1 pair is misordered,
    but level 2 is (the binary objective at threshold 2 warns too)."""
    s, y, ptr = np.array([100.0, 0.0, -100.0]), np.array([1.0, 2.0, 2.0]), np.array([0, 3])
    with pytest.warns(RuntimeWarning, match="saturate"):
        g, _ = ApproxAP(alpha=50.0, graded=True).grad_hess(s, y, ptr)
    assert not g.any()


def test_graded_options():
    obj = ApproxAP(pair_force="chord", graded=True)
    assert obj.get_options()["graded"] is True
    assert "graded=True" in repr(obj) and "graded" not in repr(ApproxAP())
    assert obj.replace(beta=1.0).graded
    assert pickle.loads(pickle.dumps(obj)).get_options() == obj.get_options()
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match="graded"):
            ApproxAP(graded=bad)
    s, y, ptr = graded_queries(10)
    with pytest.raises(NotImplementedError):
        obj.replace(pair_force="tangent")._reference_grad_hess(s, y, ptr)
    # one objective, two datasets of different levels through the host call (LGBMRanker's
    # signature; the prepared levels are cached per dataset): each keeps its own levels
    sizes = np.diff(ptr)
    want = obj.grad_hess(s, y, ptr)[0]
    binary = np.minimum(y, 1.0)
    np.testing.assert_array_equal(obj(y, s, None, sizes)[0], want)
    np.testing.assert_array_equal(obj(binary, s, None, sizes)[0],
                                  ApproxAP(pair_force="chord").grad_hess(s, binary, ptr)[0])
    np.testing.assert_array_equal(obj(y, s, None, sizes)[0], want)
    assert obj.cached_datasets == 2
