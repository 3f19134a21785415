"""ApproxNDCG's label-aware positions, chord pair forces, Gumbel noise and the NDCG-Loss2++
mix (``lambdaloss``) against references.

The references are written from the formulas in ``approx_gbdt/_pair_forces.py``'s and
``approx_gbdt/_lambdaloss.py``'s docstrings with dense tensors: label-aware positions and the
pairwise logistic loss (its weights from plain loops) by PyTorch autograd (float64), chord
forces (which are not a gradient) by a plain NumPy double loop.
"""

from __future__ import annotations

import functools
import math

import lightgbm as lgb
import numpy as np
import pytest
import torch

from approx_gbdt import ApproxNDCG, gumbel_perturbed, make_ranking_splits, metrics
from tests.reference import (
    autograd_reference,
    lambdaloss_weights,
    pair_logistic_reference,
    random_queries,
)

RTOL = 1e-6


# random queries of 1-30 documents, one of them with no relevant document
queries = functools.partial(random_queries, grades=5)


def torch_label_aware_ndcg(s, y, *, alpha, k=None, beta=10.0):
    gains = 2.0**y - 1.0
    ideal = torch.sort(gains, descending=True).values
    disc = 1.0 / torch.log2(torch.arange(y.shape[0], dtype=torch.float64) + 2.0)
    z = (ideal * disc)[: k if k else None].sum()
    if z == 0 or y.shape[0] < 2:
        return s.sum() * 0.0
    x = alpha * (s[None, :] - s[:, None])  # x[i, j] = alpha (s_j - s_i)
    less = y[None, :] < y[:, None]  # j less relevant than i
    phi = torch.where(less, torch.nn.functional.softplus(x) / math.log(2.0), torch.sigmoid(x))
    pos = 1.0 + phi.sum(1) - torch.diagonal(phi)
    terms = gains / torch.log2(1.0 + pos)
    if k:
        terms = terms * torch.sigmoid(beta * (k + 0.5 - pos))
    return terms.sum() / z


def numpy_chord(scores, labels, ptr, *, alpha, aware, k=None, beta=10.0, swap=False):
    """Gradient of L and bound Hessian for chord (or swap) forces, by an explicit loop."""
    grad = np.zeros(scores.size)
    bound = np.zeros(scores.size)

    def pair(x, soft):  # (phi, phi')
        sig = 1.0 / (1.0 + np.exp(-x))
        if soft:
            return np.logaddexp(0.0, x) / np.log(2.0), sig / np.log(2.0)
        return sig, sig * (1.0 - sig)

    def f(p):
        d = 1.0 / np.log2(1.0 + p)
        return d / (1.0 + np.exp(-beta * (k + 0.5 - p))) if k else d

    for a, b in zip(ptr[:-1], ptr[1:]):
        s, y = scores[a:b], labels[a:b]
        g = 2.0**y - 1.0
        z = (np.sort(g)[::-1] / np.log2(np.arange(b - a) + 2.0))[:k].sum()
        if z == 0 or b - a < 2:
            continue
        soft = aware & (y[None, :] < y[:, None])
        pos = 1.0 + np.array([sum(pair(alpha * (s[j] - s[i]), soft[i, j])[0]
                                  for j in range(b - a) if j != i) for i in range(b - a)])
        for i in range(b - a):
            for j in range(b - a):
                if i == j:
                    continue
                c = (f(pos[j]) - f(pos[i])) / (pos[j] - pos[i])
                if swap:
                    c *= max(1.0, abs(pos[j] - pos[i]))
                d_ij = pair(alpha * (s[j] - s[i]), soft[i, j])[1]
                d_ji = pair(alpha * (s[i] - s[j]), soft[j, i])[1]
                t = alpha * c * (g[j] * d_ji - g[i] * d_ij) / z
                grad[a + i] -= t
                bound[a + i] += alpha * abs(t)
    return grad, bound


def close(actual, expected, ptr):
    for a, b in zip(ptr[:-1], ptr[1:]):
        scale = np.max(np.abs(expected[a:b]), initial=0.0)
        np.testing.assert_allclose(actual[a:b], expected[a:b], rtol=RTOL,
                                   atol=RTOL * scale + 1e-300)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("k", [None, 3])
def test_label_aware_positions_against_autograd(ties, k):
    s, y, ptr = queries(1, ties=ties)
    beta = 2.0 if k else 10.0  # the truncation's sharpness (unused without k)
    kw = {"alpha": 2.0, "k": k, "beta": beta}
    values, grad, diag = autograd_reference(torch_label_aware_ndcg, s, y, ptr, **kw)
    obj = ApproxNDCG(alpha=2.0, k=k, beta=beta, positions="label_aware", normalize=False)
    ptr_multi = np.diff(ptr) > 1
    np.testing.assert_allclose(obj.value(s, y, ptr)[ptr_multi], values[ptr_multi], rtol=RTOL)
    g, h = obj.grad_hess(s, y, ptr, hessian="exact")
    close(g, grad, ptr)
    close(h, diag, ptr)
    # the positive Hessians are built from the same pieces as for the plain positions
    _, h_mixed = obj.grad_hess(s, y, ptr)
    _, h_bound = obj.grad_hess(s, y, ptr, hessian="bound")
    assert np.all(h_bound >= 0)
    np.testing.assert_allclose(h_mixed, np.maximum(diag, 0.1 * h_bound), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("spread", [2.0, 40.0])  # 40: most pairs saturated (windowed loop)
@pytest.mark.parametrize("force", ["chord", "swap"])
@pytest.mark.parametrize("aware", [False, True])
@pytest.mark.parametrize("k", [None, 3])
def test_chord_forces_against_numpy(aware, k, force, spread):
    s, y, ptr = queries(2, spread=spread)  # distinct scores: the difference quotient is exact
    beta = 2.0 if k else 10.0  # the truncation's sharpness (unused without k)
    obj = ApproxNDCG(alpha=2.0, k=k, beta=beta, positions="label_aware" if aware else "sigmoid",
                     pair_force=force, hessian="bound", normalize=False)
    g, h = obj.grad_hess(s, y, ptr)
    g_ref, h_ref = numpy_chord(s, y, ptr, alpha=2.0, aware=aware, k=k, beta=beta,
                               swap=force == "swap")
    close(g, g_ref, ptr)
    close(h, h_ref, ptr)
    # "mixed": the surrogate's exact diagonal, floored by the chord bound
    _, diag = ApproxNDCG(alpha=2.0, k=k, beta=beta, positions=obj.positions, hessian="exact",
                         normalize=False).grad_hess(s, y, ptr)
    _, h_mixed = ApproxNDCG(alpha=2.0, k=k, beta=beta, positions=obj.positions,
                            pair_force=force, normalize=False).grad_hess(s, y, ptr)
    np.testing.assert_allclose(h_mixed, np.maximum(diag, 0.1 * h_ref), rtol=1e-6,
                               atol=1e-12 * np.abs(h_ref).max())


def test_chord_with_ties_uses_the_tangent_limit():
    """Equal scores of equal labels give equal positions: the chord is the tangent there."""
    s = np.array([0.3, 0.3, 0.3, -1.0])
    y = np.array([2.0, 2.0, 0.0, 1.0])
    ptr = np.array([0, 4])
    g, h = ApproxNDCG(pair_force="chord", hessian="bound").grad_hess(s, y, ptr)
    assert np.all(np.isfinite(g)) and np.all(np.isfinite(h))
    assert g[0] == pytest.approx(g[1]) and g[0] < 0 < g[2]  # relevant up, irrelevant down
    s_near = s + np.array([0.0, 1e-9, 0.0, 0.0])
    g_near, _ = ApproxNDCG(pair_force="chord", hessian="bound").grad_hess(s_near, y, ptr)
    np.testing.assert_allclose(g_near, g, rtol=1e-6)


def test_chord_force_is_swap_value_not_slope():
    """A misordered pair, grade 1 above grade 2, one score unit apart at alpha 10: the
    tangents compare D'(1) with 3 D'(2) and push the more relevant document *down*; the
    chord gives the pair the value of swapping them and pushes it up."""
    s = np.array([1.0, 0.0])
    y = np.array([1.0, 2.0])
    ptr = np.array([0, 2])
    g_tangent, _ = ApproxNDCG(hessian="bound").grad_hess(s, y, ptr)
    g_chord, _ = ApproxNDCG(pair_force="chord", hessian="bound").grad_hess(s, y, ptr)
    assert g_tangent[1] > 0 > g_tangent[0]  # loss gradient: grade 2 goes down
    assert g_chord[1] < 0 < g_chord[0]  # grade 2 goes up


@pytest.mark.parametrize("hessian", ["exact", "bound", "mixed"])
def test_label_aware_without_label_differences_is_the_plain_objective(hessian):
    """Queries whose documents share one label have no softplus pair: the O(n^2) pair loop
    must then give exactly what the windowed fast kernel gives for the plain objective."""
    s, _, ptr = queries(3, ties=True)
    y = np.repeat(np.arange(ptr.size - 1) % 3, np.diff(ptr)).astype(np.float64)
    plain = ApproxNDCG(hessian=hessian).grad_hess(s, y, ptr)
    aware = ApproxNDCG(hessian=hessian, positions="label_aware").grad_hess(s, y, ptr)
    for a, b in zip(plain, aware):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-15)
    assert np.abs(plain[0]).max() > 0


def test_single_document_and_empty_queries_get_zeros():
    s = np.array([0.5, 1.0, 2.0, 3.0])
    y = np.array([3.0, 0.0, 0.0, 0.0])
    ptr = np.array([0, 1, 4])
    for opts in ({"positions": "label_aware"}, {"pair_force": "chord", "hessian": "bound"},
                 {"noise": 1.0}):
        g, h = ApproxNDCG(**opts).grad_hess(s, y, ptr)
        assert not g.any() and not h.any(), opts


def test_noise_zero_is_the_plain_objective_and_seeds_reproduce():
    s, y, ptr = queries(4)
    g0, h0 = ApproxNDCG().grad_hess(s, y, ptr)
    g1, h1 = ApproxNDCG(noise=0.0, random_state=7).grad_hess(s, y, ptr)
    np.testing.assert_array_equal(g0, g1)
    np.testing.assert_array_equal(h0, h1)
    a = ApproxNDCG(noise=1.0, random_state=3).grad_hess(s, y, ptr)
    b = ApproxNDCG(noise=1.0, random_state=3).grad_hess(s, y, ptr)
    c = ApproxNDCG(noise=1.0, random_state=4).grad_hess(s, y, ptr)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.allclose(a[0], c[0]) and not np.allclose(a[0], g0)
    # the same draw is the plain objective at the perturbed scores
    sp = gumbel_perturbed(s, alpha=10.0, noise=1.0, random_state=3)
    np.testing.assert_array_equal(a[0], ApproxNDCG().grad_hess(sp, y, ptr)[0])
    # value is never perturbed
    np.testing.assert_array_equal(ApproxNDCG(noise=1.0).value(s, y, ptr),
                                  ApproxNDCG().value(s, y, ptr))


@pytest.mark.parametrize("kw, exc, match", [
    ({"alpha": 0.0}, ValueError, "alpha"),
    ({"noise": -1.0}, ValueError, "noise"),
    ({"noise": float("nan")}, ValueError, "noise"),
    ({"random_state": -2}, ValueError, "random_state"),
])
def test_gumbel_perturbed_checks_its_options(kw, exc, match):
    options = {"alpha": 10.0, "noise": 1.0, "random_state": 0, **kw}
    with pytest.raises(exc, match=match):
        gumbel_perturbed(np.zeros(3), **options)


def test_gumbel_noise_has_the_stated_scale():
    s = np.zeros(200_000)
    eps = gumbel_perturbed(s, alpha=4.0, noise=2.0, random_state=0) * 4.0 / 2.0
    assert eps.mean() == pytest.approx(np.euler_gamma, abs=0.01)  # Gumbel(0, 1) mean
    assert eps.std() == pytest.approx(math.pi / math.sqrt(6.0), abs=0.01)


def test_noisy_training_is_reproducible_and_learns():
    d = make_ranking_splits((60, 20, 20), seed=5)
    tr, te = d["train"], d["test"]
    obj = ApproxNDCG(noise=1.0, positions="label_aware", random_state=11)
    params = {"objective": obj, "learning_rate": 0.1, "num_leaves": 7, "verbosity": -1,
              "num_threads": 1, "deterministic": True, "force_col_wise": True}

    def train(objective):
        ds = lgb.Dataset(tr.X, tr.y, group=np.diff(tr.group_ptr))
        return lgb.train({**params, "objective": objective}, ds, num_boost_round=20)

    p1 = train(obj).predict(te.X)
    p2 = train(ApproxNDCG(noise=1.0, positions="label_aware", random_state=11)).predict(te.X)
    np.testing.assert_array_equal(p1, p2)
    score = metrics.mean_over_queries(metrics.ndcg(p1, te.y, te.group_ptr, k=10))
    const = metrics.mean_over_queries(metrics.ndcg(np.zeros(te.y.size), te.y, te.group_ptr,
                                                   k=10))
    assert score > const + 0.1


@pytest.mark.parametrize("bad, err", [
    ({"positions": "softplus"}, ValueError),
    ({"pair_force": "secant"}, ValueError),
    ({"pair_force": "chord", "hessian": "exact"}, ValueError),
    ({"pair_force": "swap", "hessian": "abs"}, ValueError),
    ({"noise": -1.0}, ValueError),
    ({"noise": float("nan")}, ValueError),
    ({"noise": "1"}, TypeError),
    ({"noise": 1.0, "random_state": -2}, ValueError),
    ({"noise": 1.0, "random_state": 1.5}, ValueError),
    ({"lambdaloss": 1.5}, ValueError),
    ({"lambdaloss": -0.1}, ValueError),
    ({"lambdaloss": float("nan")}, ValueError),
    ({"lambdaloss": "0.5"}, TypeError),
    ({"lambdaloss": True}, TypeError),
    ({"lambdaloss": 0.5, "k": 10}, ValueError),
    ({"lambdaloss": 0.5, "lambdaloss_window": 0}, ValueError),
    ({"lambdaloss": 0.5, "lambdaloss_window": 2.5}, TypeError),
    ({"lambdaloss": 0.5, "lambdaloss_window": True}, TypeError),
    ({"lambdaloss_window": 30}, ValueError),
])
def test_bad_options(bad, err):
    with pytest.raises(err):
        ApproxNDCG(**bad)


def test_chord_rejects_an_exact_hessian_override():
    s, y, ptr = queries(5)
    with pytest.raises(ValueError, match="chord"):
        ApproxNDCG(pair_force="chord", hessian="bound").grad_hess(s, y, ptr, hessian="exact")


@pytest.mark.parametrize(("ties", "spread"), [(False, 1.0), (True, 1.0), (False, 400.0)])
def test_lambdaloss_part_against_autograd(ties, spread):
    """``lambdaloss=1``: NDCG-Loss2++ with the weights from the exact positions held fixed;
    per-document weights scale each document after the per-query normalisation. A spread of
    400 puts pairs more than one and more than two exp blocks (300 score units) apart."""
    s, y, ptr = queries(8, ties=ties, spread=spread)
    g, h = ApproxNDCG(lambdaloss=1.0).grad_hess(s, y, ptr)
    g_ref, h_ref = pair_logistic_reference(s, y, ptr, lambdaloss_weights)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(h, h_ref, rtol=1e-10, atol=1e-14)
    assert np.all(h >= 0) and np.abs(g).max() > 0
    w = np.random.default_rng(1).uniform(0.5, 2.0, size=s.size)
    gw, hw = ApproxNDCG(lambdaloss=1.0).grad_hess(s, y, ptr, weights=w)
    np.testing.assert_allclose(gw, g_ref * w, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(hw, h_ref * w, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("window", [1, 3, 8])
def test_lambdaloss_window_counts_top_and_near_pairs(window):
    s, y, ptr = queries(10, ties=True)
    g, h = ApproxNDCG(lambdaloss=1.0, lambdaloss_window=window).grad_hess(s, y, ptr)
    g_ref, h_ref = pair_logistic_reference(
        s, y, ptr, lambda sq, yq: lambdaloss_weights(sq, yq, window=window))
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(h, h_ref, rtol=1e-10, atol=1e-14)
    full = ApproxNDCG(lambdaloss=1.0).grad_hess(s, y, ptr)
    assert not np.allclose(g, full[0])  # the 30-document query has pairs outside the window
    every = ApproxNDCG(lambdaloss=1.0, lambdaloss_window=30).grad_hess(s, y, ptr)
    np.testing.assert_allclose(every[0], full[0], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("opts", [{}, {"positions": "label_aware", "pair_force": "chord"}])
def test_lambdaloss_mixes_the_two_parts(opts):
    s, y, ptr = queries(9)
    g0, h0 = ApproxNDCG(**opts).grad_hess(s, y, ptr)
    g1, h1 = ApproxNDCG(**opts, lambdaloss=1.0).grad_hess(s, y, ptr)
    g, h = ApproxNDCG(**opts, lambdaloss=0.25).grad_hess(s, y, ptr)
    np.testing.assert_allclose(g, 0.75 * g0 + 0.25 * g1, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(h, 0.75 * h0 + 0.25 * h1, rtol=1e-12, atol=1e-15)
    g_off, _ = ApproxNDCG(**opts, lambdaloss=0.0).grad_hess(s, y, ptr)
    np.testing.assert_array_equal(g_off, g0)
    # ApproxNDCG's value is what value() reports, whatever the mix
    np.testing.assert_array_equal(ApproxNDCG(**opts, lambdaloss=0.5).value(s, y, ptr),
                                  ApproxNDCG(**opts).value(s, y, ptr))


def test_lambdaloss_sorts_from_the_last_order_with_ties_by_index():
    """The hosted objective keeps each query's sort between calls and re-sorts from it:
    whatever the last scores (slightly different, reversed, tied), a call equals a fresh
    objective's, whose ranks break ties by document index."""
    s, y, ptr = queries(12)
    ds = lgb.Dataset(np.zeros((s.size, 1)), y, group=np.diff(ptr)).construct()
    obj = ApproxNDCG(lambdaloss=1.0)
    drift = 1e-3 * np.random.default_rng(3).normal(size=s.size)
    # s, then ties that s's order breaks otherwise than the index, then drift, reversal, all
    # equal, and back
    for scores in (s, np.round(s), s + drift, -s, np.zeros_like(s), np.round(s, 1), s):
        g, h = obj(scores, ds)
        g_ref, h_ref = ApproxNDCG(lambdaloss=1.0).grad_hess(scores, y, ptr)
        np.testing.assert_array_equal(g, g_ref)
        np.testing.assert_array_equal(h, h_ref)
    g, _ = obj(np.round(s), ds)
    g_ref, _ = pair_logistic_reference(np.round(s), y, ptr, lambdaloss_weights)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-14)


def test_lambdaloss_gives_zeros_without_pairs_and_keeps_its_settings():
    s = np.array([0.5, 1.0, 2.0, 3.0, 1.0, 1.0])
    y = np.array([3.0, 0.0, 0.0, 0.0, 2.0, 2.0])  # one document; none relevant; one grade
    ptr = np.array([0, 1, 4, 6])
    g, h = ApproxNDCG(lambdaloss=1.0).grad_hess(s, y, ptr)
    assert not g.any() and not h.any()
    obj = ApproxNDCG(lambdaloss=0.5)
    assert obj.get_options()["lambdaloss"] == 0.5
    assert "lambdaloss=0.5" in repr(obj)
    assert obj.replace(alpha=5.0).lambdaloss == 0.5


def test_lambdaloss_with_noise_sees_the_perturbed_scores():
    s, y, ptr = queries(11)
    mixed = ApproxNDCG(lambdaloss=0.3, noise=1.0, random_state=5).grad_hess(s, y, ptr)
    sp = gumbel_perturbed(s, alpha=10.0, noise=1.0, random_state=5)
    g0, h0 = ApproxNDCG().grad_hess(sp, y, ptr)
    g_ref, h_ref = pair_logistic_reference(sp, y, ptr, lambdaloss_weights)
    np.testing.assert_allclose(mixed[0], 0.7 * g0 + 0.3 * g_ref, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(mixed[1], 0.7 * h0 + 0.3 * h_ref, rtol=1e-10, atol=1e-14)


def test_lambdaloss_objective_pickles_and_trains():
    import pickle

    obj = ApproxNDCG(lambdaloss=0.5, lambdaloss_window=5)
    back = pickle.loads(pickle.dumps(obj))
    assert back.get_options() == obj.get_options()
    d = make_ranking_splits((60, 20, 20), seed=6)
    tr, te = d["train"], d["test"]
    ds = lgb.Dataset(tr.X, tr.y, group=np.diff(tr.group_ptr))
    params = {"objective": back, "learning_rate": 0.1, "num_leaves": 7, "verbosity": -1,
              "num_threads": 1, "deterministic": True, "force_col_wise": True}
    pred = lgb.train(params, ds, num_boost_round=20).predict(te.X)
    score = metrics.mean_over_queries(metrics.ndcg(pred, te.y, te.group_ptr, k=10))
    const = metrics.mean_over_queries(metrics.ndcg(np.zeros(te.y.size), te.y, te.group_ptr,
                                                   k=10))
    assert score > const + 0.1
