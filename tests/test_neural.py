"""Tests of the optional PyTorch baseline (approx_gbdt.neural)."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from approx_gbdt import neural  # noqa: E402
from approx_gbdt.neural import (  # noqa: E402
    LOSSES,
    NeuralRanker,
    approx_ap,
    approx_ndcg,
    gumbel_perturb,
    listmle_loss,
    listnet_loss,
    ranknet_loss,
    smooth_positions,
)

# ----------------------------------------------------------------------------------------------
# numpy references (one query at a time, straight from the definitions)
# ----------------------------------------------------------------------------------------------


def _sig(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # 1 / (1 + exp(-x)) without overflow


def ref_positions(s, alpha):
    n = len(s)
    return np.array(
        [1.0 + sum(_sig(alpha * (s[j] - s[i])) for j in range(n) if j != i) for i in range(n)]
    )


def ref_approx_ndcg(s, y, alpha, k=None, beta=10.0):
    pos = ref_positions(s, alpha)
    gains = 2.0 ** np.asarray(y, dtype=float) - 1.0
    terms = gains / np.log2(1.0 + pos)
    if k is not None:
        terms = terms * _sig(beta * (k + 0.5 - pos))
    ideal = np.sort(gains)[::-1]
    kk = len(s) if k is None else min(k, len(s))
    z = sum(ideal[r] / np.log2(2.0 + r) for r in range(kk))
    return 0.0 if z == 0 else terms.sum() / z


def ref_approx_ap(s, y, alpha, beta=10.0, threshold=1.0):
    pos = ref_positions(s, alpha)
    r = (np.asarray(y) >= threshold).astype(float)
    n_rel = r.sum()
    if n_rel == 0:
        return 0.0
    total = 0.0
    for yy in range(len(s)):
        if not r[yy]:
            continue
        inner = 1.0 + sum(
            r[x] * _sig(beta * (pos[yy] - pos[x])) for x in range(len(s)) if x != yy
        )
        total += inner / pos[yy]
    return total / n_rel


def random_queries(rng, sizes, n_levels=5, scale=1.0):
    queries = []
    for n in sizes:
        s = rng.normal(scale=scale, size=n)
        y = rng.integers(0, n_levels, size=n).astype(float)
        queries.append((s, y))
    return queries


def pad(queries, fill_score=0.0, fill_label=0.0, extra=0):
    """Padded float64 [B, L] tensors and mask from a list of (scores, labels)."""
    length = max(len(s) for s, _ in queries) + extra
    b = len(queries)
    S = torch.full((b, length), fill_score, dtype=torch.float64)
    Y = torch.full((b, length), fill_label, dtype=torch.float64)
    M = torch.zeros((b, length), dtype=torch.bool)
    for q, (s, y) in enumerate(queries):
        S[q, : len(s)] = torch.as_tensor(s)
        Y[q, : len(y)] = torch.as_tensor(y)
        M[q, : len(s)] = True
    return S, Y, M


def flat(queries):
    s = np.concatenate([q[0] for q in queries])
    y = np.concatenate([q[1] for q in queries])
    ptr = np.concatenate(([0], np.cumsum([len(q[0]) for q in queries]))).astype(np.int64)
    return s, y, ptr


SIZES = [1, 2, 3, 5, 8, 13, 30]


# ----------------------------------------------------------------------------------------------
# ApproxNDCG / ApproxAP values and gradients
# ----------------------------------------------------------------------------------------------


def test_positions_qin_table1():
    s = torch.tensor([4.20074, 3.12378, 4.40918, 1.55258, 4.13330], dtype=torch.float64)
    pos = smooth_positions(s, alpha=100.0)[0]
    expected = [2.00118, 4.00000, 1.00000, 5.00000, 2.99882]
    np.testing.assert_allclose(pos.numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("k", [None, 1, 3, 10])
@pytest.mark.parametrize("alpha", [1.0, 10.0])
def test_approx_ndcg_matches_numpy_reference(k, alpha):
    rng = np.random.default_rng(1)
    queries = random_queries(rng, SIZES)
    S, Y, M = pad(queries)
    got = approx_ndcg(S, Y, M, alpha=alpha, k=k, beta=7.0).numpy()
    want = [ref_approx_ndcg(s, y, alpha, k=k, beta=7.0) for s, y in queries]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("threshold", [1.0, 2.0, 3.5])
@pytest.mark.parametrize("alpha,beta", [(10.0, 10.0), (2.0, 30.0)])
def test_approx_ap_matches_numpy_reference(threshold, alpha, beta):
    rng = np.random.default_rng(2)
    queries = random_queries(rng, SIZES)
    S, Y, M = pad(queries)
    got = approx_ap(S, Y, M, alpha=alpha, beta=beta, threshold=threshold).numpy()
    want = [ref_approx_ap(s, y, alpha, beta=beta, threshold=threshold) for s, y in queries]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_approx_measures_near_exact_for_large_alpha():
    # well separated scores, big alpha: ApproxNDCG -> NDCG, ApproxAP -> AP
    s = torch.tensor([[3.0, 1.0, 2.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([[0.0, 2.0, 1.0, 0.0]], dtype=torch.float64)
    dcg = 1.0 / math.log2(3) + 3.0 / math.log2(4)
    idcg = 3.0 + 1.0 / math.log2(3)
    assert approx_ndcg(s, y, alpha=200.0).item() == pytest.approx(dcg / idcg, abs=1e-10)
    ap = (1.0 / 2 + 2.0 / 3) / 2  # relevant at ranks 2 and 3
    assert approx_ap(s, y, alpha=200.0, beta=200.0).item() == pytest.approx(ap, abs=1e-10)


def test_gradcheck_approx_measures():
    rng = np.random.default_rng(3)
    queries = random_queries(rng, [1, 4, 6])
    S, Y, M = pad(queries, extra=2)
    S.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s: approx_ndcg(s, Y, M, alpha=3.0).sum(), (S,))
    assert torch.autograd.gradcheck(lambda s: approx_ndcg(s, Y, M, alpha=3.0, k=2).sum(), (S,))
    assert torch.autograd.gradcheck(lambda s: approx_ap(s, Y, M, alpha=3.0, beta=4.0).sum(), (S,))


@pytest.mark.parametrize("k", [None, 1, 3, 10])
def test_approx_ndcg_matches_objectives(k):
    from approx_gbdt.objectives import ApproxNDCG

    rng = np.random.default_rng(4)
    queries = random_queries(rng, SIZES + [1, 4])
    S, Y, M = pad(queries, extra=1)
    s, y, ptr = flat(queries)
    # beta sharpens the truncation only: the objective takes it with k alone
    obj = ApproxNDCG(alpha=10.0, k=k, normalize=False, **({} if k is None else {"beta": 5.0}))
    np.testing.assert_allclose(
        approx_ndcg(S, Y, M, alpha=10.0, k=k, beta=5.0).numpy(),
        np.asarray(obj.value(s, y, ptr), dtype=np.float64),
        rtol=1e-10,
        atol=1e-13,
    )
    S.requires_grad_(True)
    (-approx_ndcg(S, Y, M, alpha=10.0, k=k, beta=5.0).sum()).backward()
    grad_torch = S.grad[M].numpy()
    grad_obj = np.asarray(obj.grad_hess(s, y, ptr)[0], dtype=np.float64)
    np.testing.assert_allclose(grad_torch, grad_obj, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("threshold", [1.0, 2.0])
def test_approx_ap_matches_objectives(threshold):
    from approx_gbdt.objectives import ApproxAP

    rng = np.random.default_rng(5)
    queries = random_queries(rng, SIZES + [1, 4])
    S, Y, M = pad(queries, extra=1)
    s, y, ptr = flat(queries)
    obj = ApproxAP(alpha=10.0, beta=5.0, threshold=threshold, normalize=False)
    kw = dict(alpha=10.0, beta=5.0, threshold=threshold)
    np.testing.assert_allclose(
        approx_ap(S, Y, M, **kw).numpy(),
        np.asarray(obj.value(s, y, ptr), dtype=np.float64),
        rtol=1e-10,
        atol=1e-13,
    )
    S.requires_grad_(True)
    (-approx_ap(S, Y, M, **kw).sum()).backward()
    grad_obj = np.asarray(obj.grad_hess(s, y, ptr)[0], dtype=np.float64)
    np.testing.assert_allclose(S.grad[M].numpy(), grad_obj, rtol=1e-6, atol=1e-12)


def _torch_hessian_diag(fn, s):
    st = torch.tensor(s, dtype=torch.float64)
    return torch.diagonal(torch.autograd.functional.hessian(fn, st)).numpy()


@pytest.mark.parametrize("measure", ["ndcg", "ndcg@3", "ap"])
def test_exact_hessian_diagonal_matches_objectives(measure):
    from approx_gbdt.objectives import ApproxAP, ApproxNDCG

    rng = np.random.default_rng(7)
    queries = random_queries(rng, [1, 2, 5, 9, 16])
    s, y, ptr = flat(queries)
    if measure == "ap":
        obj = ApproxAP(alpha=4.0, beta=6.0, threshold=2.0, hessian="exact", normalize=False)

        def m(sq, yq):
            return approx_ap(sq, yq, alpha=4.0, beta=6.0, threshold=2.0)
    else:
        k = 3 if measure == "ndcg@3" else None
        obj = ApproxNDCG(alpha=4.0, k=k, hessian="exact", normalize=False,
                         **({} if k is None else {"beta": 6.0}))

        def m(sq, yq):
            return approx_ndcg(sq, yq, alpha=4.0, k=k, beta=6.0)

    want = np.concatenate(
        [_torch_hessian_diag(lambda v, yq=yq: -m(v, torch.tensor(yq)).sum(), sq)
         for sq, yq in queries]
    )
    got = np.asarray(obj.grad_hess(s, y, ptr)[1], dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)


ALL_LOSSES = {
    "approx_ndcg": lambda s, y, m: approx_ndcg(s, y, m),
    "approx_ndcg@3": lambda s, y, m: approx_ndcg(s, y, m, k=3),
    "approx_ap": lambda s, y, m: approx_ap(s, y, m),
    "ranknet": lambda s, y, m: ranknet_loss(s, y, m),
    "listnet": lambda s, y, m: listnet_loss(s, y, m),
    "listmle": lambda s, y, m: listmle_loss(s, y, m),
}


@pytest.mark.parametrize("name", sorted(ALL_LOSSES))
@pytest.mark.parametrize("fill", [0.0, 1e6, -1e6, math.inf, math.nan])
def test_padding_changes_nothing(name, fill):
    fn = ALL_LOSSES[name]
    rng = np.random.default_rng(6)
    queries = random_queries(rng, [3, 7, 1, 5])
    # each query alone, unpadded
    alone_vals, alone_grads = [], []
    for s, y in queries:
        st = torch.tensor(s, requires_grad=True)
        v = fn(st.unsqueeze(0), torch.tensor(y).unsqueeze(0), None)
        v.sum().backward()
        alone_vals.append(v.item())
        alone_grads.append(st.grad.numpy().copy())
    # all together, padded with garbage scores and labels
    S, Y, M = pad(queries, fill_score=fill, fill_label=fill if math.isfinite(fill) else 7.0,
                  extra=3)
    S.requires_grad_(True)
    v = fn(S, Y, M)
    v.sum().backward()
    np.testing.assert_allclose(v.detach().numpy(), alone_vals, rtol=1e-12, atol=1e-14)
    assert torch.all(torch.isfinite(S.grad))
    assert torch.all(S.grad[~M] == 0)
    for q, g in enumerate(alone_grads):
        np.testing.assert_allclose(S.grad[q, : len(g)].numpy(), g, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(ALL_LOSSES))
def test_degenerate_queries_zero_and_finite(name):
    fn = ALL_LOSSES[name]
    queries = [
        (np.array([0.3, -1.2, 2.0, 0.0]), np.zeros(4)),  # no relevant document
        (np.array([1.5]), np.array([3.0])),  # single relevant document
        (np.array([-0.5]), np.array([0.0])),  # single irrelevant document
        (np.array([1.0, 1.0, 1.0]), np.array([2.0, 2.0, 2.0])),  # all labels equal, tied scores
    ]
    S, Y, M = pad(queries, extra=1)
    S.requires_grad_(True)
    v = fn(S, Y, M)
    v.sum().backward()
    assert torch.all(torch.isfinite(v)) and torch.all(torch.isfinite(S.grad))
    np.testing.assert_array_equal(S.grad.numpy(), 0.0)
    values = v.detach().numpy()
    assert values[0] == 0.0 and values[2] == 0.0
    if name.startswith("approx"):
        # a lone relevant document is ranked perfectly: M = 1 (times sig(beta (k - 1/2)) @k),
        # a constant, as in approx_gbdt.objectives; all-relevant tied query: M > 0
        assert values[1] == pytest.approx(1.0, abs=1e-10)
        assert values[3] > 0
    else:
        assert values[1] == 0.0 and values[3] == 0.0


def test_all_relevant_tied_query_is_stationary():
    # labels all equal and positive: ApproxNDCG is permutation invariant, so the gradient at
    # identical scores is zero by symmetry
    s = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
    y = torch.full((1, 3), 2.0, dtype=torch.float64)
    v = approx_ndcg(s, y, alpha=10.0)
    v.sum().backward()
    assert torch.allclose(s.grad, torch.zeros_like(s.grad), atol=1e-15)


def test_losses_validate_parameters():
    s = torch.zeros(1, 3)
    y = torch.zeros(1, 3)
    with pytest.raises(ValueError, match="alpha"):
        approx_ndcg(s, y, alpha=0.0)
    with pytest.raises(ValueError, match="beta"):
        approx_ap(s, y, beta=-1.0)
    with pytest.raises(ValueError, match="k must"):
        approx_ndcg(s, y, k=0)
    with pytest.raises(ValueError, match="mask shape"):
        approx_ndcg(s, y, torch.ones(1, 2, dtype=torch.bool))


# ----------------------------------------------------------------------------------------------
# Gumbel perturbation (Bruch et al. 2020)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("measure", ["ndcg", "ndcg@3", "ap"])
def test_gumbel_scale_zero_equals_plain_loss(measure):
    fn = {"ndcg": lambda s, y, m: approx_ndcg(s, y, m, alpha=5.0),
          "ndcg@3": lambda s, y, m: approx_ndcg(s, y, m, alpha=5.0, k=3),
          "ap": lambda s, y, m: approx_ap(s, y, m, alpha=5.0, beta=3.0)}[measure]
    rng = np.random.default_rng(11)
    S, Y, M = pad(random_queries(rng, [1, 4, 9, 6]), fill_score=math.nan, extra=2)
    S1 = S.clone().requires_grad_(True)
    plain = fn(S1, Y, M)
    plain.mean().backward()
    S2 = S.clone().requires_grad_(True)
    gen = torch.Generator().manual_seed(0)
    sp, yp, mp = gumbel_perturb(S2, Y, M, samples=5, scale=0.0, generator=gen)
    assert sp.shape == (4 * 5, S.shape[1])
    perturbed = fn(sp, yp, mp)
    np.testing.assert_allclose(perturbed.detach().reshape(4, 5).numpy(),
                               np.repeat(plain.detach().numpy()[:, None], 5, axis=1),
                               rtol=1e-14, atol=0)
    perturbed.mean().backward()
    np.testing.assert_allclose(S2.grad.numpy(), S1.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_gumbel_noise_is_seeded_masked_and_gumbel_distributed():
    rng = np.random.default_rng(12)
    S, Y, M = pad(random_queries(rng, [3, 7]), extra=1)

    def draw(seed, samples=4, scale=0.5):
        gen = torch.Generator().manual_seed(seed)
        return gumbel_perturb(S, Y, M, samples=samples, scale=scale, generator=gen)

    s1, y1, m1 = draw(0)
    s2, _, _ = draw(0)
    s3, _, _ = draw(1)
    assert torch.equal(s1, s2) and not torch.equal(s1, s3)
    base = S.repeat_interleave(4, dim=0)
    assert torch.equal(y1, Y.repeat_interleave(4, dim=0))
    assert torch.equal(m1, M.repeat_interleave(4, dim=0))
    assert torch.all(s1[~m1] == 0) and torch.all(s1[m1] != base[m1])
    # scale * Gumbel(0, 1): mean scale * Euler's gamma, variance scale^2 pi^2 / 6
    big, _, mb = draw(3, samples=4000, scale=2.0)
    noise = (big - S.repeat_interleave(4000, dim=0))[mb].numpy()
    assert noise.mean() == pytest.approx(2.0 * 0.5772156649, abs=0.02)
    assert noise.var() == pytest.approx(4.0 * math.pi**2 / 6, rel=0.03)


def test_gumbel_perturb_validates():
    s = torch.zeros(1, 3)
    with pytest.raises(ValueError, match="samples"):
        gumbel_perturb(s, s, samples=0)
    with pytest.raises(ValueError, match="scale"):
        gumbel_perturb(s, s, scale=-1.0)
    with pytest.raises(ValueError, match="scale"):
        gumbel_perturb(s, s, scale=math.inf)


# ----------------------------------------------------------------------------------------------
# RankNet / ListNet / ListMLE against hand-computed values
# ----------------------------------------------------------------------------------------------

S3 = torch.tensor([[1.0, 2.0, 0.5]], dtype=torch.float64)
Y3 = torch.tensor([[2.0, 0.0, 1.0]], dtype=torch.float64)


def _lse(*xs):
    return math.log(sum(math.exp(x) for x in xs))


def test_ranknet_hand_computed():
    # pairs with y_i > y_j: (0, 1), (0, 2), (2, 1)
    want = math.log1p(math.exp(1.0)) + math.log1p(math.exp(-0.5)) + math.log1p(math.exp(1.5))
    assert ranknet_loss(S3, Y3).item() == pytest.approx(want, rel=1e-12)
    want2 = (
        math.log1p(math.exp(2.0)) + math.log1p(math.exp(-1.0)) + math.log1p(math.exp(3.0))
    )
    assert ranknet_loss(S3, Y3, sigma=2.0).item() == pytest.approx(want2, rel=1e-12)


def test_listnet_hand_computed():
    zy = math.exp(2) + math.exp(0) + math.exp(1)
    p_y = [math.exp(2) / zy, 1 / zy, math.exp(1) / zy]
    lz = _lse(1.0, 2.0, 0.5)
    want = -sum(p * (s - lz) for p, s in zip(p_y, [1.0, 2.0, 0.5], strict=True))
    assert listnet_loss(S3, Y3).item() == pytest.approx(want, rel=1e-12)


def test_listmle_hand_computed():
    # label order: doc 0 (2), doc 2 (1), doc 1 (0) -> scores 1.0, 0.5, 2.0
    want = (_lse(1.0, 0.5, 2.0) - 1.0) + (_lse(0.5, 2.0) - 0.5)
    assert listmle_loss(S3, Y3).item() == pytest.approx(want, rel=1e-12)


def test_listmle_ties_stable_and_random():
    s = torch.tensor([[0.2, 1.0, -0.3]], dtype=torch.float64)
    y = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    stable = (_lse(0.2, 1.0, -0.3) - 0.2) + (_lse(1.0, -0.3) - 1.0)
    swapped = (_lse(1.0, 0.2, -0.3) - 1.0) + (_lse(0.2, -0.3) - 0.2)
    assert listmle_loss(s, y).item() == pytest.approx(stable, rel=1e-12)
    gen = torch.Generator().manual_seed(0)
    seen = [listmle_loss(s, y, generator=gen).item() for _ in range(40)]
    for v in seen:
        assert v == pytest.approx(stable, rel=1e-12) or v == pytest.approx(swapped, rel=1e-12)
    n_stable = sum(v == pytest.approx(stable, rel=1e-12) for v in seen)
    assert 0 < n_stable < 40
    # reproducible with the same seed
    gen2 = torch.Generator().manual_seed(0)
    assert [listmle_loss(s, y, generator=gen2).item() for _ in range(40)] == seen


# ----------------------------------------------------------------------------------------------
# NeuralRanker
# ----------------------------------------------------------------------------------------------


def make_data(n_queries, seed, n_features=10, noise=0.5):
    """Labels 0..4 from a noisy linear function of the features (fixed weights)."""
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(1234).normal(size=n_features)
    sizes = rng.integers(1, 25, size=n_queries)
    n = int(sizes.sum())
    X = rng.normal(size=(n, n_features)) * rng.uniform(0.5, 5.0, size=n_features) + 3.0
    f = (X - 3.0) @ w + noise * rng.normal(size=n)
    y = np.clip(np.floor((f - f.mean()) / f.std() + 1.0), 0, 4)
    return X, y, sizes


@pytest.fixture(scope="module")
def data():
    return make_data(120, seed=0), make_data(50, seed=1)


@pytest.mark.parametrize("loss", LOSSES)
def test_training_improves_validation_ndcg(data, loss):
    (X, y, g), (Xv, yv, gv) = data
    model = NeuralRanker(loss=loss, hidden=(16, 8), max_epochs=8, batch_queries=32, seed=0)
    model.fit(X, y, g, eval_set=(Xv, yv, gv))
    assert len(model.history_) <= 8
    assert model.best_score_ == max(model.history_)
    assert model.history_[model.best_iteration_ - 1] == model.best_score_
    assert model.best_score_ > model.initial_score_ + 0.05
    # the best epoch's weights are the ones kept
    ptr = np.concatenate(([0], np.cumsum(gv)))
    pred = model.predict(Xv)
    assert pred.dtype == np.float64 and pred.shape == (Xv.shape[0],)
    assert neural._ndcg(pred, yv, ptr, k=10) == pytest.approx(model.best_score_, abs=1e-12)


def test_linear_model_and_approx_ndcg_at_k(data):
    (X, y, g), (Xv, yv, gv) = data
    model = NeuralRanker(hidden=(), k=5, max_epochs=6, batch_queries=16, lr=0.05)
    model.fit(X, y, g, eval_set=[(Xv, yv, gv)])
    assert model.best_score_ > model.initial_score_ + 0.05
    linear = [m for m in model.model_.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linear) == 1 and linear[0].in_features == X.shape[1]


def test_early_stopping_on_map(data):
    (X, y, g), (Xv, yv, gv) = data
    model = NeuralRanker(loss="approx_ap", hidden=(8,), max_epochs=4, eval_metric="map",
                         eval_at=None, threshold=2.0)
    model.fit(X, y, g, eval_set=(Xv, yv, gv))
    ptr = np.concatenate(([0], np.cumsum(gv)))
    got = neural._map(model.predict(Xv), yv, ptr, threshold=2.0)
    assert got == pytest.approx(model.best_score_, abs=1e-12)
    assert model.best_score_ > model.initial_score_


def test_same_seed_same_predictions(data):
    (X, y, g), (Xv, yv, gv) = data
    kw = dict(hidden=(8,), max_epochs=3, batch_queries=16, loss="listmle")
    p1 = NeuralRanker(seed=7, **kw).fit(X, y, g, eval_set=(Xv, yv, gv)).predict(Xv)
    p2 = NeuralRanker(seed=7, **kw).fit(X, y, g, eval_set=(Xv, yv, gv)).predict(Xv)
    p3 = NeuralRanker(seed=8, **kw).fit(X, y, g, eval_set=(Xv, yv, gv)).predict(Xv)
    np.testing.assert_array_equal(p1, p2)
    assert not np.array_equal(p1, p3)


def test_gumbel_ranker_deterministic_for_seed(data):
    (X, y, g), (Xv, yv, gv) = data
    kw = dict(hidden=(8,), max_steps=30, gumbel_samples=4, gumbel_scale=1.0)
    p1 = NeuralRanker(seed=5, **kw).fit(X, y, g, eval_set=(Xv, yv, gv)).predict(Xv)
    p2 = NeuralRanker(seed=5, **kw).fit(X, y, g, eval_set=(Xv, yv, gv)).predict(Xv)
    p3 = NeuralRanker(seed=6, **kw).fit(X, y, g, eval_set=(Xv, yv, gv)).predict(Xv)
    plain = NeuralRanker(seed=5, **{**kw, "gumbel_samples": 0}).fit(X, y, g).predict(Xv)
    np.testing.assert_array_equal(p1, p2)
    assert not np.array_equal(p1, p3)
    assert not np.array_equal(p1, plain)


def test_default_schedule():
    assert neural._schedule(60) == (8, neural.DEFAULT_MAX_STEPS, None, None, 120)
    # the default patience: two steps per training query, within [100, 1000]
    assert [neural._schedule(n)[4] for n in (5, 50, 51, 471, 500, 30_000)] == [
        neural.MIN_PATIENCE_STEPS, 100, 102, 942, neural.DEFAULT_PATIENCE_STEPS, 1000]
    assert neural._schedule(5)[0] == 1
    assert neural._schedule(1000)[0] == 125
    assert neural._schedule(30_000)[0] == 128
    # explicit settings win; an epoch budget has no step limit, patience in evaluations none
    # in steps
    assert neural._schedule(60, batch_queries=128, max_epochs=100, patience=10) == (
        128, None, 100, 10, None)
    assert neural._schedule(60, max_steps=7, patience_steps=3) == (8, 7, None, None, 3)
    with pytest.raises(ValueError, match="max_steps or max_epochs"):
        neural._schedule(60, max_steps=10, max_epochs=2)
    with pytest.raises(ValueError, match="patience"):
        neural._schedule(60, patience=2, patience_steps=10)


def test_step_budget_and_evaluation_points(data):
    (X, y, g), (Xv, yv, gv) = data  # 120 training queries
    m = NeuralRanker(hidden=(), max_steps=37).fit(X, y, g)
    assert m.batch_queries_ == 15 and m.n_steps_ == 37 and m.best_step_ == 37
    assert m.best_iteration_ == 5  # 8 steps an epoch: 4 epoch ends and the budget's end
    assert len(m.train_loss_) == 5
    m = NeuralRanker(hidden=(), max_steps=23, eval_every=5, patience_steps=1000)
    m.fit(X, y, g, eval_set=(Xv, yv, gv))
    assert m.history_steps_ == [5, 10, 15, 20, 23] and len(m.history_) == 5
    assert m.best_step_ == m.history_steps_[m.best_iteration_ - 1]
    assert m.history_[m.best_iteration_ - 1] == m.best_score_ == max(m.history_)
    # the epoch schedule of earlier versions: one evaluation per epoch
    m = NeuralRanker(hidden=(), batch_queries=16, max_epochs=3, patience=10)
    m.fit(X, y, g, eval_set=(Xv, yv, gv))
    assert m.n_steps_ == 3 * 8 and m.history_steps_ == [8, 16, 24]


@pytest.mark.parametrize("kw,gap", [(dict(patience_steps=3, eval_every=1), 3),
                                    (dict(patience=2, eval_every=2), 4)])
def test_patience_in_steps_and_in_evaluations(data, kw, gap):
    (X, y, g), (Xv, yv, gv) = data
    # a learning rate too small to change the ranking: no evaluation beats the first one
    m = NeuralRanker(hidden=(), lr=1e-9, max_steps=500, **kw).fit(X, y, g, eval_set=(Xv, yv, gv))
    assert m.n_steps_ < 500
    assert m.n_steps_ - m.best_step_ == gap
    assert m.best_iteration_ == 1


def test_default_patience_stops_after_its_steps(data):
    (X, y, g), (Xv, yv, gv) = data  # 120 training queries: patience 240 steps
    # nothing beats the untrained network's first evaluation (at step 1)
    m = NeuralRanker(hidden=(), lr=1e-9, max_steps=500, eval_every=1).fit(
        X, y, g, eval_set=(Xv, yv, gv))
    assert m.best_step_ == 1
    assert m.n_steps_ == 1 + 240


def test_default_schedule_trains_small_data_further():
    # 60 training queries: the old schedule (128 queries a batch, 100 epochs) is 100 steps on
    # one batch; the default step budget trains further (lower training loss)
    X, y, g = make_data(60, seed=3)
    Xv, yv, gv = make_data(40, seed=4)
    old = NeuralRanker(hidden=(), batch_queries=128, max_epochs=100, patience=10)
    new = NeuralRanker(hidden=())
    old.fit(X, y, g, eval_set=(Xv, yv, gv))
    new.fit(X, y, g, eval_set=(Xv, yv, gv))
    assert new.batch_queries_ == 8 and old.n_steps_ <= 100
    assert new.n_steps_ > 2 * old.n_steps_
    assert min(new.train_loss_) < min(old.train_loss_)


def test_fit_without_eval_set_and_global_state_untouched(data):
    (X, y, g), _ = data
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    model = NeuralRanker(hidden=(4,), max_epochs=2, batch_queries=64).fit(X, y, g)
    after = torch.rand(3)
    assert torch.equal(before, after)  # fit does not consume the global RNG
    assert not torch.are_deterministic_algorithms_enabled()
    assert model.best_iteration_ == 2 and model.history_ == [] and model.best_score_ is None
    assert np.all(np.isfinite(model.predict(X)))


def test_degenerate_training_data_no_nan():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(9, 3))
    y = np.array([0, 0, 0, 2, 0, 0, 1, 0, 0], dtype=float)
    g = [3, 1, 1, 4]  # no relevant doc, single docs, one informative query
    model = NeuralRanker(hidden=(4,), max_epochs=3, batch_queries=1, patience=1)
    for loss in LOSSES:
        model.set_params(loss=loss).fit(X, y, g, eval_set=(X, y, g))
        assert np.all(np.isfinite(model.predict(X)))
        assert all(math.isfinite(v) for v in model.train_loss_)
    # only queries without relevant documents in validation: score 0, no crash, a warning
    with pytest.warns(RuntimeWarning, match="no validation query"):
        model.fit(X, y, g, eval_set=(X[:3], np.zeros(3), [3]))
    assert model.best_score_ == 0.0


def test_sparse_input(data):
    sparse = pytest.importorskip("scipy.sparse")
    (X, y, g), _ = data
    m1 = NeuralRanker(hidden=(4,), max_epochs=2).fit(sparse.csr_matrix(X), y, g)
    m2 = NeuralRanker(hidden=(4,), max_epochs=2).fit(X, y, g)
    np.testing.assert_array_equal(m1.predict(sparse.csr_matrix(X)), m2.predict(X))


X_ = np.random.default_rng(0).normal(size=(6, 2))
Y_ = np.array([0, 1, 2, 0, 1, 0], dtype=float)
G_ = [3, 3]


@pytest.mark.parametrize(
    "params,fit_args,match",
    [
        (dict(loss="lambdarank"), (X_, Y_, G_), "unknown loss"),
        (dict(alpha=0.0), (X_, Y_, G_), "alpha"),
        (dict(alpha=-1.0), (X_, Y_, G_), "alpha"),
        (dict(beta=0), (X_, Y_, G_), "beta"),
        (dict(k=0), (X_, Y_, G_), "k must"),
        (dict(k=2.5), (X_, Y_, G_), "k must"),
        (dict(lr=0), (X_, Y_, G_), "lr"),
        (dict(hidden=(4, 0)), (X_, Y_, G_), "hidden"),
        (dict(batch_queries=0), (X_, Y_, G_), "batch_queries"),
        (dict(max_epochs=0), (X_, Y_, G_), "max_epochs"),
        (dict(max_steps=0), (X_, Y_, G_), "max_steps"),
        (dict(max_steps=2.5), (X_, Y_, G_), "max_steps"),
        (dict(max_steps=5, max_epochs=1), (X_, Y_, G_), "not both"),
        (dict(patience=0), (X_, Y_, G_), "patience"),
        (dict(patience_steps=-1), (X_, Y_, G_), "patience_steps"),
        (dict(patience=2, patience_steps=10), (X_, Y_, G_), "not both"),
        (dict(eval_every=0), (X_, Y_, G_), "eval_every"),
        (dict(gumbel_samples=-1), (X_, Y_, G_), "gumbel_samples"),
        (dict(gumbel_samples=True), (X_, Y_, G_), "gumbel_samples"),
        (dict(gumbel_samples=8, loss="listnet"), (X_, Y_, G_), "gumbel_samples applies"),
        (dict(gumbel_scale=-0.5), (X_, Y_, G_), "gumbel_scale"),
        (dict(gumbel_scale=math.nan), (X_, Y_, G_), "gumbel_scale"),
        (dict(eval_metric="auc"), (X_, Y_, G_), "eval_metric"),
        (dict(eval_at=0), (X_, Y_, G_), "eval_at"),
        ({}, (X_, Y_, [3, 2]), "add up"),
        ({}, (X_, Y_, [3, 4]), "add up"),
        ({}, (X_, Y_, [3, 0, 3]), "positive"),
        ({}, (X_, Y_, None), "group"),
        ({}, (np.where(np.eye(6, 2) > 0, np.nan, X_), Y_, G_), "NaN"),
        ({}, (np.where(np.eye(6, 2) > 0, np.inf, X_), Y_, G_), "NaN or infinite"),
        ({}, (X_, np.where(Y_ > 1, np.nan, Y_), G_), "labels contain"),
        ({}, (X_, -Y_, G_), "non-negative"),
        ({}, (X_, Y_[:5], G_), "labels must be 1-D"),
        ({}, (X_[:, 0], Y_, G_), "2-D"),
    ],
)
def test_fit_errors(params, fit_args, match):
    with pytest.raises(ValueError, match=match):
        NeuralRanker(**{"max_epochs": 1, **params}).fit(*fit_args)


def test_predict_errors():
    with pytest.raises(ValueError, match="not fitted"):
        NeuralRanker().predict(X_)
    model = NeuralRanker(hidden=(), max_epochs=1).fit(X_, Y_, G_)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        model.predict(np.full((2, 2), np.nan))
    with pytest.raises(ValueError, match="features"):
        NeuralRanker(max_epochs=1).fit(X_, Y_, G_, eval_set=(np.zeros((3, 3)), Y_[:3], [3]))
    with pytest.raises(ValueError, match="eval_set"):
        NeuralRanker(max_epochs=1).fit(X_, Y_, G_, eval_set=(X_, Y_))



@pytest.mark.parametrize("hidden", ["64", (8.7,), (True,), 8, None, (4, "2")])
def test_hidden_must_be_integer_widths(hidden):
    # a string would build one layer per character, a float width would be truncated
    with pytest.raises(TypeError, match="hidden"):
        NeuralRanker(hidden=hidden, max_steps=1).fit(X_, Y_, G_)


def test_hidden_accepts_lists_and_numpy_integers():
    for hidden in ([np.int64(3), 2], np.array([3, 2])):
        model = NeuralRanker(hidden=hidden, max_steps=1).fit(X_, Y_, G_)
        widths = [m.out_features for m in model.model_.modules()
                  if isinstance(m, torch.nn.Linear)]
        assert widths == [3, 2, 1]


@pytest.mark.parametrize("option", [dict(patience=2), dict(patience_steps=5),
                                    dict(eval_every=1)])
def test_early_stopping_options_need_eval_set(option):
    (name,) = option
    with pytest.raises(ValueError, match=f"{name}=.* needs eval_set"):
        NeuralRanker(hidden=(), max_steps=2, **option).fit(X_, Y_, G_)
    NeuralRanker(hidden=(), max_steps=2, **option).fit(X_, Y_, G_, eval_set=(X_, Y_, G_))


@pytest.mark.parametrize("loss", ["approx_ap", "approx_mrr", "approx_rbp", "ranknet",
                                  "listnet", "listmle"])
def test_k_for_a_loss_without_cutoff(loss):
    with pytest.raises(ValueError, match=f"k=3 .*{loss}"):
        NeuralRanker(loss=loss, k=3, max_steps=1).fit(X_, Y_, G_)


def _fit_predict(data, **params):
    (X, y, g), _ = data
    model = NeuralRanker(hidden=(), max_steps=3, **params).fit(X, y, g)
    return model.predict(X)


@pytest.mark.parametrize("loss,k,own_beta", [
    ("approx_precision", None, 1.0),  # ApproxPrecision(k=10)'s beta
    ("approx_recall", 4, 1.0),
    ("approx_dcg", 4, 10.0),
    ("approx_ndcg", 4, 10.0),
    ("approx_ap", None, 10.0),
])
def test_beta_none_is_the_losses_own_default(data, loss, k, own_beta):
    default = _fit_predict(data, loss=loss, k=k)
    np.testing.assert_array_equal(default, _fit_predict(data, loss=loss, k=k, beta=own_beta))
    # and the ranker's beta is passed on where the loss uses it
    other = _fit_predict(data, loss=loss, k=k, beta=own_beta * 3)
    assert not np.array_equal(default, other)


@pytest.mark.parametrize("loss", ["approx_dcg", "approx_ndcg", "approx_mrr", "ranknet"])
def test_an_unused_beta_warns_once_per_fit(data, loss):
    with pytest.warns(UserWarning, match=f"beta=3 has no effect with loss='{loss}'") as rec:
        with_beta = _fit_predict(data, loss=loss, beta=3.0)
    assert len([w for w in rec if issubclass(w.category, UserWarning)]) == 1
    np.testing.assert_array_equal(with_beta, _fit_predict(data, loss=loss))


def test_warns_when_validation_cannot_select_a_model(data):
    (X, y, g), (Xv, yv, gv) = data
    kw = dict(hidden=(), max_steps=6, eval_every=1)
    with pytest.warns(RuntimeWarning, match="no validation query has two documents with "
                                            "different labels") as record:
        model = NeuralRanker(**kw).fit(X, y, g, eval_set=(Xv, np.zeros_like(yv), gv))
    assert len([w for w in record if issubclass(w.category, RuntimeWarning)]) == 1
    assert model.history_ == [0.0] * 6 and model.best_iteration_ == 1
    # MAP with relevance label >= 5: no validation query has a relevant document
    with pytest.warns(RuntimeWarning, match=r"relevant \(label >= 5\)"):
        NeuralRanker(eval_metric="map", threshold=5.0, **kw).fit(X, y, g, eval_set=(Xv, yv, gv))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NeuralRanker(**kw).fit(X, y, g, eval_set=(Xv, yv, gv))


@pytest.mark.parametrize("loss,labels", [("approx_ndcg", 2.0), ("ranknet", 0.0),
                                         ("approx_mrr", 0.0)])
def test_warns_when_training_labels_leave_nothing_to_learn(data, loss, labels):
    (X, y, g), _ = data
    with pytest.warns(RuntimeWarning, match="no training query has .*nothing to learn"):
        NeuralRanker(loss=loss, hidden=(), max_steps=2).fit(X, np.full_like(y, labels), g)


def test_pandas_input_without_warnings(data):
    pd = pytest.importorskip("pandas")
    (X, y, g), (Xv, yv, gv) = data
    kw = dict(hidden=(4,), max_steps=3, eval_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyTorch's "The given NumPy array is not writable"
        model = NeuralRanker(**kw).fit(pd.DataFrame(X), pd.Series(y), g,
                                       eval_set=(pd.DataFrame(Xv), pd.Series(yv), gv))
        pred = model.predict(pd.DataFrame(Xv))
    plain = NeuralRanker(**kw).fit(X, y, g, eval_set=(Xv, yv, gv)).predict(Xv)
    np.testing.assert_array_equal(pred, plain)

def test_import_error_message_and_package_import_without_torch():
    # block torch with a meta-path finder (setting sys.modules["torch"] = None confuses
    # scipy's array-API helpers, which look torch up in sys.modules)
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import approx_gbdt\n"
        "assert 'torch' not in sys.modules\n"
        "try:\n"
        "    import approx_gbdt.neural\n"
        "except ImportError as e:\n"
        "    assert 'pip install approx-gbdt[neural]' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
