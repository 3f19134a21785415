"""SoftNDCG: value against Monte Carlo, gradient against PyTorch autograd, training."""

from __future__ import annotations

import math

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb

from approx_gbdt import SoftNDCG
from approx_gbdt.metrics import mean_over_queries, ndcg

torch = pytest.importorskip("torch")


def torch_soft_ndcg(s, y, *, sigma, k=None):
    """Taylor et al. (2008)'s recursion, written out in torch (float64) for autograd."""
    n = s.shape[0]
    gains = 2.0 ** y - 1.0
    m = n if k is None else min(k, n)
    disc = 1.0 / torch.log2(torch.arange(m, dtype=torch.float64) + 2.0)
    ideal = (torch.sort(gains, descending=True).values[:m] * disc).sum()
    if ideal == 0 or n < 2:
        return (s * 0.0).sum()
    total = (s * 0.0).sum()
    for j in range(n):
        p = torch.zeros(n, dtype=torch.float64)
        p[0] = 1.0
        for i in range(n):
            if i == j:
                continue
            pi = 0.5 * torch.erfc(-(s[i] - s[j]) / (2.0 * sigma))
            shifted = torch.cat([torch.zeros(1, dtype=torch.float64), p[:-1]])
            p = shifted * pi + p * (1.0 - pi)
        total = total + gains[j] * (p[:m] * disc).sum()
    return total / ideal


def _queries(rng, sizes, ties=False):
    s = rng.normal(size=sum(sizes))
    if ties:
        s = np.round(s * 2) / 2  # equal scores
    y = rng.integers(0, 4, size=sum(sizes)).astype(float)
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    return s, y, ptr


@pytest.mark.parametrize("k", [None, 3])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("sigma", [0.4, 0.05])
def test_value_and_gradient_against_autograd(k, ties, sigma):
    # sigma=0.05: many pairs are certain (skipped or shifting the rank distribution)
    rng = np.random.default_rng(7 + (k or 0) + 10 * ties)
    s, y, ptr = _queries(rng, [6, 1, 9, 4], ties=ties)
    y[ptr[3]:ptr[4]] = 0.0  # a query without a relevant document
    w = rng.uniform(0.5, 2.0, size=4)
    obj = SoftNDCG(sigma=sigma, k=k, normalize=False)
    grad, hess = obj.grad_hess(s, y, ptr, weights=w)
    values = obj.value(s, y, ptr)
    for q in range(4):
        a, b = ptr[q], ptr[q + 1]
        st = torch.tensor(s[a:b], dtype=torch.float64, requires_grad=True)
        v = torch_soft_ndcg(st, torch.tensor(y[a:b], dtype=torch.float64), sigma=sigma, k=k)
        assert values[q] == pytest.approx(float(v.detach()), abs=1e-12)
        (-w[q] * v).backward()
        ref = np.zeros(b - a) if st.grad is None else st.grad.numpy()
        np.testing.assert_allclose(grad[a:b], ref, rtol=1e-9, atol=1e-13)
    # single-document and no-relevant queries: zero gradient and Hessian; others positive
    for q in (1, 3):
        assert not grad[ptr[q]:ptr[q + 1]].any() and not hess[ptr[q]:ptr[q + 1]].any()
    # the Hessian is positive wherever there is a gradient (zero for a document whose every
    # pair is certain, sigma=0.05 here), and everywhere at sigma=0.4
    assert np.all(hess >= 0) and np.all(hess[grad != 0] > 0)
    if sigma == 0.4:
        for q in (0, 2):
            assert np.all(hess[ptr[q]:ptr[q + 1]] > 0)


def test_gradient_against_finite_differences_with_extreme_probabilities():
    # scores many sigma apart: pairwise probabilities within 1e-10 of 0 or 1
    rng = np.random.default_rng(0)
    s = np.array([0.0, 0.05, 3.0, 3.1, 6.0, 9.0, 9.02])
    y = rng.integers(0, 3, size=7).astype(float)
    y[0] = 2.0
    obj = SoftNDCG(sigma=0.1, normalize=False)
    grad, _ = obj.grad_hess(s, y, [0, 7])
    eps = 1e-6
    for i in range(7):
        e = np.zeros(7)
        e[i] = eps
        fd = -(obj.value(s + e, y, [0, 7])[0] - obj.value(s - e, y, [0, 7])[0]) / (2 * eps)
        assert grad[i] == pytest.approx(fd, abs=1e-8)


def _mc_joint(s, y, sigma, draws, rng):
    """Mean NDCG of the ranking by one joint Gaussian draw of all scores."""
    n = s.size
    S = s + sigma * rng.normal(size=(draws, n))
    ranks = np.argsort(np.argsort(-S, axis=1), axis=1)
    g = 2.0 ** y - 1.0
    ideal = (np.sort(g)[::-1] / np.log2(np.arange(n) + 2.0)).sum()
    vals = (g / np.log2(ranks + 2.0)).sum(axis=1) / ideal
    return vals.mean(), vals.std() / math.sqrt(draws)


def test_value_matches_joint_monte_carlo_when_uncertainty_is_pairwise():
    # close pairs, the pairs far apart: every document has one uncertain neighbour, so the
    # recursion's independence assumption is exact and SoftNDCG = E[NDCG(s + sigma Z)]
    s = np.array([0.0, 0.25, 5.0, 5.4, 10.0, 10.1])
    y = np.array([2.0, 0.0, 1.0, 3.0, 0.0, 1.0])
    mean, se = _mc_joint(s, y, 0.3, 400_000, np.random.default_rng(1))
    value = SoftNDCG(sigma=0.3).value(s, y, [0, 6])[0]
    assert abs(value - mean) < 4 * se


def test_value_matches_pairwise_resampled_monte_carlo():
    # on a crowded list the recursion is exact for the model that draws both scores afresh
    # for every pair: the rank of j is sum_i 1[s_i + sigma Z_ij > s_j + sigma Z'_ij]
    rng = np.random.default_rng(2)
    s = rng.normal(size=8)
    y = rng.integers(0, 3, size=8).astype(float)
    y[0] = 2.0
    sigma, draws = 0.7, 100_000
    g = 2.0 ** y - 1.0
    ideal = (np.sort(g)[::-1] / np.log2(np.arange(8) + 2.0)).sum()
    total = np.zeros(draws)
    for j in range(8):
        beats = s[None, :] + sigma * rng.normal(size=(draws, 8)) > \
            s[j] + sigma * rng.normal(size=(draws, 8))
        beats[:, j] = False
        total += g[j] / np.log2(beats.sum(axis=1) + 2.0)
    vals = total / ideal
    value = SoftNDCG(sigma=sigma).value(s, y, [0, 8])[0]
    assert abs(value - vals.mean()) < 4 * vals.std() / math.sqrt(draws)
    # ... and it is not the joint expectation there (the paper's approximation)
    mean, se = _mc_joint(s, y, sigma, 100_000, rng)
    assert abs(value - mean) > 10 * se


def test_small_sigma_tends_to_ndcg():
    rng = np.random.default_rng(3)
    s, y, ptr = _queries(rng, [10, 5])
    y[0] = 3.0
    y[10] = 1.0
    value = SoftNDCG(sigma=1e-4).value(s, y, ptr)
    np.testing.assert_allclose(value, ndcg(s, y, ptr), atol=1e-9)


def test_hessian_modes_and_normalisation():
    rng = np.random.default_rng(4)
    s, y, ptr = _queries(rng, [12, 7])
    y[0] = y[12] = 2.0
    g1, h1 = SoftNDCG(normalize=False).grad_hess(s, y, ptr)
    g2, h2 = SoftNDCG().grad_hess(s, y, ptr)
    for a, b in zip(ptr[:-1], ptr[1:]):
        tot = np.abs(g1[a:b]).sum()
        np.testing.assert_allclose(g2[a:b], g1[a:b] * math.log2(1 + tot) / tot)
        np.testing.assert_allclose(h2[a:b], h1[a:b] * math.log2(1 + tot) / tot)
    assert np.all(h1 > 0)
    _, hc = SoftNDCG(hessian="constant", normalize=False, hessian_constant=2.0).grad_hess(
        s, y, ptr)
    np.testing.assert_allclose(hc, 2.0)
    with pytest.raises(ValueError, match="hessian"):
        SoftNDCG(hessian="exact")


def test_max_docs_is_a_clear_error():
    obj = SoftNDCG(max_docs=5)
    with pytest.raises(ValueError, match="max_docs=5"):
        obj.grad_hess(np.zeros(6), np.ones(6), [0, 6])
    assert obj.grad_hess(np.zeros(5), np.ones(5), [0, 5])[0].shape == (5,)
    with pytest.raises(ValueError, match="sigma"):
        SoftNDCG(sigma=0.0)


def _data(n_queries, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 30, n_queries)
    n = int(sizes.sum())
    X = rng.normal(size=(n, 6))
    latent = X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + 0.3 * rng.normal(size=n)
    return X, np.clip(np.floor(latent + 1.0), 0, 4), sizes


def _test_ndcg(scores, y, sizes):
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    return mean_over_queries(ndcg(scores, y, ptr, k=10))


def test_trains_in_lightgbm_and_xgboost():
    Xtr, ytr, gtr = _data(100, 0)
    Xte, yte, gte = _data(40, 1)
    const = _test_ndcg(np.zeros(len(yte)), yte, gte)
    obj = SoftNDCG()
    params = {"objective": obj, "verbose": -1, "seed": 0, "learning_rate": 0.1}
    booster = lgb.train(params, lgb.Dataset(Xtr, ytr, group=gtr), num_boost_round=30)
    assert _test_ndcg(booster.predict(Xte), yte, gte) > const + 0.15
    dtrain = xgb.DMatrix(Xtr, ytr)
    dtrain.set_group(gtr)
    booster = xgb.train({"eta": 0.1, "max_depth": 6, "min_child_weight": 0.01, "seed": 0},
                        dtrain, num_boost_round=30, obj=obj)
    assert _test_ndcg(booster.predict(xgb.DMatrix(Xte)), yte, gte) > const + 0.15


@pytest.mark.parametrize("k", [None, 5])
def test_long_list_gradient_against_finite_differences(k):
    # 150 documents within a few sigma of each other: long deconvolution chains, forward and
    # backward; and far-apart scores (sigma small) where most pairs are certain
    rng = np.random.default_rng(5)
    for spread, sigma in ((0.3, 0.5), (3.0, 0.05)):
        s = rng.normal(size=150) * spread
        y = rng.integers(0, 3, size=150).astype(float)
        obj = SoftNDCG(sigma=sigma, k=k, normalize=False)
        grad, _ = obj.grad_hess(s, y, [0, 150])
        eps = 1e-6
        for i in rng.choice(150, size=12, replace=False):
            e = np.zeros(150)
            e[i] = eps
            fd = -(obj.value(s + e, y, [0, 150])[0] - obj.value(s - e, y, [0, 150])[0]) / (2 * eps)
            assert grad[i] == pytest.approx(fd, rel=1e-5, abs=1e-9)
