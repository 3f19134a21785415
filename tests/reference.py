"""Independent references for the tests: PyTorch autograd (float64) and plain NumPy.

Nothing here shares code with approx_gbdt's kernels: the surrogates are written from the
formulas of Qin, Liu & Li (2010) with dense n x n tensors, and derivatives come from autograd.
"""

from __future__ import annotations

import numpy as np
import torch


def torch_positions(s, alpha):
    """pos^_i = 1 + sum_{j != i} sigmoid(alpha (s_j - s_i))."""
    sig = torch.sigmoid(alpha * (s[None, :] - s[:, None]))
    return 1.0 + sig.sum(1) - torch.diagonal(sig)


def torch_approx_ndcg(s, y, *, alpha, k=None, beta=10.0):
    gains = 2.0**y - 1.0
    ideal = torch.sort(gains, descending=True).values
    disc = 1.0 / torch.log2(torch.arange(y.shape[0], dtype=torch.float64) + 2.0)
    z = (ideal * disc)[: k if k else None].sum()
    if z == 0:
        return s.sum() * 0.0
    p = torch_positions(s, alpha)
    terms = gains / torch.log2(1.0 + p)
    if k:
        terms = terms * torch.sigmoid(beta * (k + 0.5 - p))
    return terms.sum() / z


def torch_approx_ap(s, y, *, alpha, beta, threshold=1.0):
    r = (y >= threshold).to(torch.float64)
    if r.sum() == 0:
        return s.sum() * 0.0
    p = torch_positions(s, alpha)
    ind = torch.sigmoid(beta * (p[:, None] - p[None, :]))  # ind[y, x] ~ 1[pos_x < pos_y]
    inner = 1.0 + (ind * r[None, :]).sum(1) - torch.diagonal(ind) * r
    return (r / p * inner).sum() / r.sum()


def autograd_reference(measure, scores, labels, group_ptr, **kw):
    """Per-query values, gradient and exact Hessian diagonal of L = -sum_q M_q by autograd."""
    values, grads, hdiag = [], [], []
    for a, b in zip(group_ptr[:-1], group_ptr[1:]):
        s = torch.tensor(scores[a:b], requires_grad=True)
        y = torch.tensor(labels[a:b], dtype=torch.float64)
        m = measure(s, y, **kw)
        values.append(float(m.detach()))
        if not m.requires_grad:
            grads.append(np.zeros(b - a))
            hdiag.append(np.zeros(b - a))
            continue
        h = torch.autograd.functional.hessian(
            lambda t, y=y: -measure(t, y, **kw), s.detach()
        )
        (g,) = torch.autograd.grad(-m, s)
        grads.append(g.numpy())
        hdiag.append(torch.diagonal(h).numpy().copy())
    return np.array(values), np.concatenate(grads), np.concatenate(hdiag)


def lambdaloss_weights(s, y, *, mu=10.0, window=None):
    """NDCG-Loss2++ pair weights {(i, j): w_ij} for y_i > y_j, from the exact positions of the
    scores ``s`` (ties by index), by plain loops; with ``window``, only the pairs with a
    position at most ``window`` or at most ``window`` positions apart."""
    rank = np.empty(len(s), dtype=np.int64)
    rank[np.argsort(-np.asarray(s), kind="stable")] = np.arange(1, len(s) + 1)
    gains = 2.0 ** np.asarray(y) - 1.0
    z = sum(g / np.log2(2.0 + i) for i, g in enumerate(sorted(gains, reverse=True)))
    out = {}
    for i in range(len(s)):
        for j in range(len(s)):
            d = abs(rank[i] - rank[j])
            if y[i] > y[j] and (window is None or min(rank[i], rank[j]) <= window
                                or d <= window):
                rho = abs(1.0 / np.log2(1.0 + rank[i]) - 1.0 / np.log2(1.0 + rank[j]))
                delta = 1.0 / np.log2(1.0 + d) - 1.0 / np.log2(2.0 + d)
                out[i, j] = (gains[i] - gains[j]) / z * (rho + mu * delta)
    return out


def pair_logistic_reference(scores, labels, group_ptr, weights_of, weights=None):
    """Gradient and exact Hessian diagonal of sum_ij w_ij log(1 + e^-(s_i - s_j)) per query by
    autograd, the pair weights ``weights_of(s_q, y_q)`` held fixed, each query normalised by
    log2(1 + S) / S (S = sum |g|) and then multiplied by the per-document ``weights``."""
    grad, hess = np.zeros(len(scores)), np.zeros(len(scores))
    for a, b in zip(group_ptr[:-1], group_ptr[1:]):
        w = weights_of(scores[a:b], labels[a:b])
        if not w:
            continue

        def loss(u, w=w):
            return sum(c * torch.nn.functional.softplus(-(u[i] - u[j]))
                       for (i, j), c in w.items())

        t = torch.tensor(scores[a:b], dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(loss(t), t)
        h = torch.autograd.functional.hessian(loss, t.detach()).diagonal()
        total = g.abs().sum().item()
        scale = np.log2(1.0 + total) / total if total > 0 else 0.0
        grad[a:b], hess[a:b] = scale * g.numpy(), scale * h.numpy()
    if weights is not None:
        grad, hess = grad * weights, hess * weights
    return grad, hess


def numpy_pairwise(scores, alpha):
    """Dense sig_kj = sigmoid(alpha (s_j - s_k)) and w_kj = sig_kj (1 - sig_kj), zero diagonal."""
    x = alpha * (scores[None, :] - scores[:, None])
    sig = 0.5 * (1.0 + np.tanh(0.5 * x))
    w = sig * (1.0 - sig)
    np.fill_diagonal(w, 0.0)
    return sig, w


def ndcg_exact(scores, labels, group_ptr, k=None):
    """Mean exact NDCG(@k) over queries with a relevant document; ties by worst case."""
    out = []
    for a, b in zip(group_ptr[:-1], group_ptr[1:]):
        g = 2.0 ** labels[a:b] - 1.0
        order = np.lexsort((g, -scores[a:b]))  # by score desc, then least relevant first
        disc = 1.0 / np.log2(np.arange(b - a) + 2.0)
        z = (np.sort(g)[::-1] * disc)[:k].sum()
        if z > 0:
            out.append((g[order] * disc)[:k].sum() / z)
    return float(np.mean(out))


def ap_exact(scores, labels, threshold=1.0):
    """Exact AP of one query with distinct scores."""
    r = (labels >= threshold)[np.argsort(-scores)]
    hits = np.cumsum(r)
    return float(np.sum(r * hits / np.arange(1, r.size + 1)) / r.sum())


def random_queries(seed, *, grades, all_relevant=False, ties=False, spread=1.0):
    """Test queries ``(scores, labels, group_ptr)`` of 1-30 documents, N(0, spread) scores
    (with ``ties`` rounded to halves) and labels ``0..grades-1``; the fifth query has no
    relevant document and, with ``all_relevant``, a seventh of 6 documents all of the top
    grade."""
    rng = np.random.default_rng(seed)
    sizes = np.array([1, 7, 30, 12, 5, 2] + ([6] if all_relevant else []))
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    s = rng.normal(size=ptr[-1]) * spread
    if ties:
        s = np.round(s * 2) / 2
    y = rng.integers(0, grades, size=ptr[-1]).astype(np.float64)
    y[ptr[4] : ptr[5]] = 0.0
    if all_relevant:
        y[ptr[6] : ptr[7]] = grades - 1.0
    return s, y, ptr
