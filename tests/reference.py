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
