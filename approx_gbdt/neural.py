"""Neural baseline: ApproxNDCG / ApproxAP and classic ranking losses for PyTorch rankers.

This module is optional: it needs PyTorch (``pip install approx-gbdt[neural]``). Importing
:mod:`approx_gbdt` itself never imports torch.

Two layers:

* Pure loss functions on padded, batched lists: ``scores`` and ``labels`` of shape
  ``[batch, list_size]`` and a boolean ``mask`` of the same shape (True = real document).
  Padded entries are excluded from every pairwise sum and every normalisation, and never produce
  NaN values or gradients. :func:`approx_ndcg` and :func:`approx_ap` return the per-query
  smoothed *measure* ``M_q`` (higher is better), with exactly the definitions of
  :mod:`approx_gbdt.objectives`; :func:`ranknet_loss`, :func:`listnet_loss` and
  :func:`listmle_loss` return per-query *losses* (lower is better); :func:`gumbel_perturb`
  gives the Gumbel-perturbed lists of Bruch et al.'s (2020) stochastic treatment.
* :class:`NeuralRanker`, a scikit-learn style feed-forward ranker in the setting of Bruch et al.
  (2019): batch normalisation on the input and after each hidden layer, ReLU, Adam, learning
  rate 0.005, batches of up to 128 queries, a budget of optimiser steps, early stopping on
  validation NDCG. ``hidden=()`` gives a linear scoring function (Qin et al. 2010).

Definitions (``sig(x) = 1 / (1 + exp(-x))``, sums over the real documents of one query)::

    pos_i      = 1 + sum_{j != i} sig(alpha (s_j - s_i))
    ApproxNDCG = (1/Z) sum_i (2^{y_i} - 1) / log2(1 + pos_i)   [* sig(beta (k + 0.5 - pos_i)) @k]
    ApproxAP   = (1/R) sum_y r_y / pos_y * (1 + sum_{x != y} r_x sig(beta (pos_y - pos_x)))

with ``Z`` the exact ideal DCG (ideal DCG@k for @k), ``r_i = 1[y_i >= threshold]`` and
``R = sum_i r_i``; a query with ``Z = 0`` (``R = 0``) has ``M_q = 0`` and zero gradient.
"""

from __future__ import annotations

import copy
import math
import numbers
import warnings

import numpy as np

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "approx_gbdt.neural requires PyTorch; install it with: pip install approx-gbdt[neural]"
    ) from exc

from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from approx_gbdt import _torch_measures
from approx_gbdt.measures import MEASURES
from approx_gbdt.metrics import average_precision, mean_over_queries, ndcg
from approx_gbdt.objectives import TRUNCATION_BETA, queries_to_rank, rank_requirement
from approx_gbdt.utils import group_ptr_from_sizes

__all__ = [
    "LOSSES",
    "NeuralRanker",
    "approx_ap",
    "approx_ndcg",
    "gumbel_perturb",
    "listmle_loss",
    "listnet_loss",
    "ranknet_loss",
    "smooth_positions",
]

# the other registered measures (approx_mrr, approx_precision, ...): approx_gbdt._torch_measures
LOSSES = ("approx_ndcg", "approx_ap", "ranknet", "listnet", "listmle", *_torch_measures.LOSSES)
# Losses that accept Gumbel-perturbed scores (NeuralRanker(gumbel_samples=...)).
GUMBEL_LOSSES = ("approx_ndcg", "approx_ap")


# ----------------------------------------------------------------------------------------------
# Loss functions on padded batches
# ----------------------------------------------------------------------------------------------


def _prepare(scores, labels, mask):
    """Broadcast to [B, L], fill padded scores/labels with 0, return (s, y, mask)."""
    if scores.dim() == 1:
        scores = scores.unsqueeze(0)
        labels = labels.unsqueeze(0)
        if mask is not None:
            mask = mask.unsqueeze(0)
    if scores.dim() != 2:
        raise ValueError(f"scores must have shape [batch, list_size], got {tuple(scores.shape)}")
    if labels.shape != scores.shape:
        raise ValueError(
            f"labels shape {tuple(labels.shape)} differs from scores shape {tuple(scores.shape)}"
        )
    if mask is None:
        mask = torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
    else:
        mask = mask.to(device=scores.device, dtype=torch.bool)
        if mask.shape != scores.shape:
            raise ValueError(
                f"mask shape {tuple(mask.shape)} differs from scores shape {tuple(scores.shape)}"
            )
    labels = labels.to(device=scores.device, dtype=scores.dtype)
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    # Padded entries may hold anything (even NaN/inf); replace them so that no NaN can leak
    # through a multiplication by zero or into a gradient.
    scores = torch.where(mask, scores, zero)
    labels = torch.where(mask, labels, zero)
    return scores, labels, mask


def _pair_mask(mask):
    """[B, L, L] mask of ordered pairs (i, j) of distinct real documents."""
    n = mask.shape[-1]
    eye = torch.eye(n, dtype=torch.bool, device=mask.device)
    return mask.unsqueeze(-1) & mask.unsqueeze(-2) & ~eye


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not (math.isfinite(float(value)) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def _check_k(k):
    if k is None:
        return
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k must be None or an integer >= 1, got {k!r}")


def smooth_positions(scores, mask=None, *, alpha=10.0):
    """Smoothed positions ``pos_i = 1 + sum_{j != i} sig(alpha (s_j - s_i))``.

    Parameters
    ----------
    scores : torch.Tensor, shape [B, L] (or [L])
    mask : torch.Tensor of bool, shape [B, L], optional
        True for real documents. Padded documents neither count in the sums nor get a
        meaningful position (their position is 1).
    alpha : float
        Sharpness, > 0.

    Returns
    -------
    torch.Tensor, shape [B, L]
    """
    _check_positive("alpha", alpha)
    s, _, mask = _prepare(scores, torch.zeros_like(scores), mask)
    return _positions(s, mask, alpha)


def _positions(s, mask, alpha):
    # diff[b, i, j] = s_j - s_i
    diff = s.unsqueeze(-2) - s.unsqueeze(-1)
    sig = torch.sigmoid(alpha * diff)
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    return 1.0 + torch.where(_pair_mask(mask), sig, zero).sum(-1)


def _ideal_dcg(gains, k):
    """Exact ideal DCG(@k) per query from non-negative gains (padded gains are 0)."""
    sorted_gains = torch.sort(gains, dim=-1, descending=True).values
    n = gains.shape[-1]
    ranks = torch.arange(1, n + 1, dtype=gains.dtype, device=gains.device)
    disc = 1.0 / torch.log2(1.0 + ranks)
    if k is not None:
        disc = torch.where(ranks <= k, disc, torch.zeros_like(disc))
    return (sorted_gains * disc).sum(-1)


def approx_ndcg(scores, labels, mask=None, *, alpha=10.0, k=None, beta=10.0):
    """Per-query ApproxNDCG (or ApproxNDCG@k), the smoothed measure ``M_q`` (not negated).

    ``M = (1/Z) sum_i (2^{y_i} - 1) / log2(1 + pos_i)``, each term multiplied by
    ``sig(beta (k + 0.5 - pos_i))`` when ``k`` is given; ``Z`` is the exact ideal DCG (@k) of
    the query. Queries with ``Z = 0`` give 0 with zero gradient.

    Parameters
    ----------
    scores, labels : torch.Tensor, shape [B, L] (or [L])
        Labels are graded relevances >= 0.
    mask : torch.Tensor of bool, shape [B, L], optional
        True for real documents, False for padding.
    alpha : float
        Sharpness of the position sigmoid, > 0.
    k : int, optional
        Truncation; None for the full list.
    beta : float
        Sharpness of the truncation sigmoid (only used with ``k``), > 0.

    Returns
    -------
    torch.Tensor, shape [B]
        To train, minimise ``-approx_ndcg(...).mean()``.
    """
    _check_positive("alpha", alpha)
    _check_positive("beta", beta)
    _check_k(k)
    s, y, mask = _prepare(scores, labels, mask)
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    gains = torch.where(mask, torch.pow(2.0, y) - 1.0, zero)
    pos = _positions(s, mask, alpha)  # >= 1, so log2(1 + pos) >= 1: no division by zero
    terms = gains / torch.log2(1.0 + pos)
    if k is not None:
        terms = terms * torch.sigmoid(beta * (k + 0.5 - pos))
    dcg = terms.sum(-1)
    z = _ideal_dcg(gains, k)
    has_rel = z > 0
    safe_z = torch.where(has_rel, z, torch.ones((), dtype=s.dtype, device=s.device))
    return torch.where(has_rel, dcg / safe_z, zero)


def approx_ap(scores, labels, mask=None, *, alpha=10.0, beta=10.0, threshold=1.0):
    """Per-query ApproxAP, the smoothed measure ``M_q`` (not negated).

    ``M = (1/R) sum_y r_y / pos_y * (1 + sum_{x != y} r_x sig(beta (pos_y - pos_x)))`` with
    ``r_i = 1[y_i >= threshold]`` and ``R = sum_i r_i``. Queries with ``R = 0`` give 0.

    Parameters
    ----------
    scores, labels : torch.Tensor, shape [B, L] (or [L])
    mask : torch.Tensor of bool, shape [B, L], optional
    alpha : float
        Sharpness of the position sigmoid, > 0.
    beta : float
        Sharpness of the sigmoid replacing ``1[pos_x < pos_y]``, > 0.
    threshold : float
        Labels >= threshold are relevant.

    Returns
    -------
    torch.Tensor, shape [B]
    """
    _check_positive("alpha", alpha)
    _check_positive("beta", beta)
    s, y, mask = _prepare(scores, labels, mask)
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    rel = mask & (y >= threshold)
    r = rel.to(s.dtype)
    n_rel = r.sum(-1)
    pos = _positions(s, mask, alpha)
    # dpos[b, y, x] = pos_y - pos_x
    dpos = pos.unsqueeze(-1) - pos.unsqueeze(-2)
    sig = torch.sigmoid(beta * dpos)
    pairs = _pair_mask(mask) & rel.unsqueeze(-2)  # x relevant and real, x != y
    inner = 1.0 + torch.where(pairs, sig, zero).sum(-1)
    terms = torch.where(rel, inner / pos, zero)
    has_rel = n_rel > 0
    safe_r = torch.where(has_rel, n_rel, torch.ones((), dtype=s.dtype, device=s.device))
    return torch.where(has_rel, terms.sum(-1) / safe_r, zero)


def gumbel_perturb(scores, labels, mask=None, *, samples=8, scale=1.0, generator=None):
    """Gumbel-perturbed copies of each list (Bruch, Han, Bendersky & Najork, WSDM 2020).

    Each list is repeated ``samples`` times and every real document's score gets independent
    Gumbel noise: ``s~_i = s_i + scale * g_i`` with ``g_i = -log(-log(u_i))``, ``u_i`` uniform
    on (0, 1). Sorting ``s~`` draws a permutation from the Plackett-Luce distribution with
    weights ``exp(s_i)`` when ``scale = 1``; a smooth measure of ``s~`` (ApproxNDCG, ApproxAP),
    averaged over the samples, is Bruch et al.'s stochastic treatment of the scores, and its
    gradient is the reparameterisation gradient. ``scale = 0`` repeats the lists unchanged.

    TF-Ranking's ``GumbelApproxNDCGLoss`` (and rax's ``gumbel_t12n``) compute
    ``log(softmax((s + g) / T) + eps)``: a per-list shift of ``(s + g) / T`` except where the
    ``eps`` floor binds. ApproxNDCG and ApproxAP depend only on score differences, so their
    temperature ``T`` is our ``alpha / T`` with ``scale = 1``; we do not apply the floor.

    Parameters
    ----------
    scores, labels : torch.Tensor, shape [B, L] (or [L])
    mask : torch.Tensor of bool, shape [B, L], optional
        True for real documents; padded entries get no noise and stay padded.
    samples : int
        Perturbed copies per list, >= 1 (Bruch et al. and TF-Ranking: 8).
    scale : float
        Noise multiplier, >= 0.
    generator : torch.Generator, optional
        CPU generator the uniforms are drawn from (float64), for reproducible noise.

    Returns
    -------
    (scores, labels, mask) : torch.Tensor, each of shape [B * samples, L]
        Rows ``b * samples .. (b + 1) * samples - 1`` are the copies of list ``b``, so the
        mean of a per-list measure over all rows is the mean over lists of the mean over
        samples.
    """
    if isinstance(samples, bool) or not isinstance(samples, numbers.Integral) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (
        math.isfinite(float(scale)) and scale >= 0
    ):
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    s, y, mask = _prepare(scores, labels, mask)
    s = s.repeat_interleave(samples, dim=0)
    y = y.repeat_interleave(samples, dim=0)
    mask = mask.repeat_interleave(samples, dim=0)
    if scale > 0:
        tiny = torch.finfo(torch.float64).tiny
        u = torch.rand(s.shape, generator=generator, dtype=torch.float64).clamp_min(tiny)
        g = (-torch.log(-torch.log(u))).to(device=s.device, dtype=s.dtype)
        zero = torch.zeros((), dtype=s.dtype, device=s.device)
        s = s + torch.where(mask, scale * g, zero)
    return s, y, mask


def _informative(y, mask):
    """Queries whose real labels are not all equal (the only ones with ordering information)."""
    big = torch.full((), torch.finfo(y.dtype).max, dtype=y.dtype, device=y.device)
    y_max = torch.where(mask, y, -big).amax(-1)
    y_min = torch.where(mask, y, big).amin(-1)
    return y_max > y_min


def ranknet_loss(scores, labels, mask=None, *, sigma=1.0):
    """Per-query RankNet loss (Burges et al. 2005), summed over the pairs of the query.

    ``sum_{(i, j): y_i > y_j} log(1 + exp(-sigma (s_i - s_j)))``. Queries with all labels
    equal (no pairs) give 0.

    Returns
    -------
    torch.Tensor, shape [B]
    """
    _check_positive("sigma", sigma)
    s, y, mask = _prepare(scores, labels, mask)
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    # pairs[b, i, j] = y_i > y_j, both real
    pairs = _pair_mask(mask) & (y.unsqueeze(-1) > y.unsqueeze(-2))
    sdiff = s.unsqueeze(-1) - s.unsqueeze(-2)
    return torch.where(pairs, nn.functional.softplus(-sigma * sdiff), zero).sum((-2, -1))


def _masked_log_softmax(x, mask):
    fill = torch.full((), torch.finfo(x.dtype).min / 4, dtype=x.dtype, device=x.device)
    return torch.log_softmax(torch.where(mask, x, fill), dim=-1)


def listnet_loss(scores, labels, mask=None):
    """Per-query ListNet loss (Cao et al. 2007), top-1 version.

    Cross-entropy ``- sum_i P_y(i) log P_s(i)`` between the top-1 probabilities of the labels,
    ``P_y = softmax(y)`` (Cao et al.'s ``phi = exp`` applied to the raw labels, not to
    ``2^y - 1``), and of the scores, ``P_s = softmax(s)``, both over the real documents.
    Queries whose labels are all equal carry no ordering information and give 0 (so do
    single-document queries).

    Returns
    -------
    torch.Tensor, shape [B]
    """
    s, y, mask = _prepare(scores, labels, mask)
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    p_y = torch.where(mask, torch.exp(_masked_log_softmax(y, mask)), zero)
    log_p_s = torch.where(mask, _masked_log_softmax(s, mask), zero)
    loss = -(p_y * log_p_s).sum(-1)
    return torch.where(_informative(y, mask), loss, zero)


def listmle_loss(scores, labels, mask=None, *, generator=None):
    """Per-query ListMLE loss (Xia et al. 2008): negative Plackett-Luce log-likelihood.

    ``- sum_{i=1}^{n} [s_{pi(i)} - log sum_{j >= i} exp(s_{pi(j)})]`` for the permutation ``pi``
    sorting the labels in descending order. Ties between equal labels are broken by stable
    (document) order when ``generator`` is None, and uniformly at random, drawn from
    ``generator`` (a CPU ``torch.Generator``), otherwise. Queries whose labels are all equal
    give 0.

    Returns
    -------
    torch.Tensor, shape [B]
    """
    s, y, mask = _prepare(scores, labels, mask)
    zero = torch.zeros((), dtype=s.dtype, device=s.device)
    neg_inf = torch.full((), -math.inf, dtype=s.dtype, device=s.device)
    if generator is not None:
        noise = torch.rand(s.shape, generator=generator, dtype=torch.float64).to(s.device)
        perm = torch.argsort(noise, dim=-1)
    else:
        perm = torch.arange(s.shape[-1], device=s.device).expand(s.shape)
    # padded entries last (key -inf), then labels descending; stable keeps the permutation order
    key = torch.where(mask, y, neg_inf).gather(-1, perm)
    order = perm.gather(-1, torch.sort(key, dim=-1, descending=True, stable=True).indices)
    s_sorted = s.gather(-1, order)
    m_sorted = mask.gather(-1, order)
    fill = torch.full((), torch.finfo(s.dtype).min / 4, dtype=s.dtype, device=s.device)
    s_filled = torch.where(m_sorted, s_sorted, fill)
    # log sum_{j >= i} exp(s_j): reverse cumulative logsumexp
    lse = torch.flip(torch.logcumsumexp(torch.flip(s_filled, [-1]), dim=-1), [-1])
    terms = torch.where(m_sorted, lse - s_sorted, zero)
    loss = terms.sum(-1)
    return torch.where(_informative(y, mask), loss, zero)


# ----------------------------------------------------------------------------------------------
# Exact NDCG for early stopping
# ----------------------------------------------------------------------------------------------


def _ndcg(scores, labels, group_ptr, k=10):
    """Mean exact NDCG@k (k=None: full list) over the queries with a relevant document.

    :func:`approx_gbdt.metrics.ndcg` with the project's default worst-case tie rule, averaged
    with ``undefined="exclude"`` (Bruch et al.); 0.0 when no query has a relevant document.
    """
    value = mean_over_queries(ndcg(scores, labels, group_ptr, k=k), undefined="exclude")
    return 0.0 if math.isnan(value) else float(value)


def _map(scores, labels, group_ptr, k=None, threshold=1.0):
    """Mean exact AP@k (k=None: full list) over the queries with a relevant document."""
    per_q = average_precision(scores, labels, group_ptr, k=k, threshold=threshold)
    value = mean_over_queries(per_q, undefined="exclude")
    return 0.0 if math.isnan(value) else float(value)


# ----------------------------------------------------------------------------------------------
# The ranker
# ----------------------------------------------------------------------------------------------


def _as_2d_float(X, name):
    if hasattr(X, "toarray"):  # scipy sparse (load_svmlight_file)
        X = X.toarray()
    # writable and C-contiguous: a pandas DataFrame may give a read-only view, which
    # torch.as_tensor would share (with a warning)
    X = np.require(X, dtype=np.float64, requirements=["C", "W"])
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D [n_documents, n_features], got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} has no rows")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


def _check_xyg(X, y, group, name="X"):
    X = _as_2d_float(X, name)
    y = np.require(y, dtype=np.float64, requirements=["C", "W"])
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"labels must be 1-D with {X.shape[0]} entries, got shape {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("labels contain NaN or infinite values")
    if np.any(y < 0):
        raise ValueError("labels must be non-negative relevance grades")
    if group is None:
        raise ValueError("group (query sizes) is required for ranking")
    ptr = group_ptr_from_sizes(group, n_rows=X.shape[0])
    return X, y, ptr


def _warn_if_nothing_to_rank(labels, group_ptr, threshold, which, consequence):
    """RuntimeWarning when no query holds two documents of different relevance
    (``threshold`` None: graded labels; else ``label >= threshold``)."""
    relevance = labels if threshold is None else (labels >= threshold).astype(np.float64)
    if queries_to_rank(relevance, group_ptr).any():
        return
    warnings.warn(
        f"NeuralRanker: no {which} query has {rank_requirement(threshold)} (labels "
        f"{labels.min():g} to {labels.max():g}): {consequence}",
        RuntimeWarning,
        stacklevel=3,
    )


def _predict(net, X, chunk=65536):
    """Eval-mode scores of a float64 numpy matrix, as float64 numpy."""
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    out = []
    with torch.no_grad():
        for start in range(0, X.shape[0], chunk):
            xb = torch.as_tensor(X[start : start + chunk], dtype=torch.float32, device=device)
            out.append(net(xb).to("cpu", torch.float64).numpy())
    net.train(was_training)
    return np.concatenate(out)


class _Net(nn.Module):
    """BatchNorm(input) -> [Linear -> BatchNorm -> ReLU] * len(hidden) -> Linear(1)."""

    def __init__(self, n_features, hidden, momentum):
        super().__init__()
        layers = [nn.BatchNorm1d(n_features, momentum=momentum)]
        width = n_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h, momentum=momentum), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x).squeeze(-1)


# Defaults of the training schedule (see NeuralRanker): a budget of optimiser steps, early
# stopping patience in optimiser steps, and batches of at most 128 queries (Bruch et al.) that
# cut smaller training sets into about BATCHES_PER_EPOCH batches (at most that many).
DEFAULT_MAX_STEPS = 5000
DEFAULT_PATIENCE_STEPS = 1000  # the most steps the default patience waits
MIN_PATIENCE_STEPS = 100  # the fewest
PATIENCE_STEPS_PER_QUERY = 2  # the default patience per training query, between those
MAX_BATCH_QUERIES = 128
BATCHES_PER_EPOCH = 8
# NeuralRanker(beta=None)'s ApproxAP beta (Qin et al.; approx_ap_obj has 0.3)
APPROX_AP_BETA = 10.0


def _check_hidden(hidden):
    """The hidden layer widths as a tuple of ints; ``hidden`` must be a tuple, list or 1-D
    array of positive integers."""
    if isinstance(hidden, np.ndarray) and hidden.ndim == 1:
        hidden = hidden.tolist()
    if not isinstance(hidden, (tuple, list)):
        raise TypeError(
            f"hidden must be a tuple or list of positive integers (layer widths, () for a linear "
            f"model), got {hidden!r}"
        )
    for h in hidden:
        if isinstance(h, bool) or not isinstance(h, numbers.Integral):
            raise TypeError(f"hidden must hold integer layer widths, got {h!r} in {hidden!r}")
    if any(h < 1 for h in hidden):
        raise ValueError(f"hidden layer widths must be >= 1, got {hidden!r}")
    return tuple(int(h) for h in hidden)


def _ready_options(loss):
    """The options of ``loss``'s ready-made objective (:data:`approx_gbdt.MEASURES`; ApproxNDCG
    and ApproxAP included), ``{}`` for RankNet, ListNet and ListMLE."""
    info = MEASURES.get(loss)
    return {} if info is None else info.instance.get_options()


def _takes_k(loss):
    """Whether ``loss`` has a cutoff ``k`` (ApproxNDCG, ApproxDCG, ApproxPrecision,
    ApproxRecall)."""
    return "k" in _ready_options(loss)


def _positive_int_or_none(name, value):
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be None or an integer >= 1, got {value!r}")


def _schedule(n_queries, *, batch_queries=None, max_steps=None, max_epochs=None,
              patience=None, patience_steps=None):
    """The training schedule of :class:`NeuralRanker` for ``n_queries`` training queries.

    Returns ``(batch_queries, max_steps, max_epochs, patience, patience_steps)`` with the
    defaults filled in: ``batch_queries = min(128, ceil(n_queries / 8))``; a budget of
    ``DEFAULT_MAX_STEPS`` optimiser steps unless ``max_steps`` or ``max_epochs`` is given
    (``max_epochs`` alone: no step limit); unless ``patience`` (in evaluations) or
    ``patience_steps`` is given, a patience of ``PATIENCE_STEPS_PER_QUERY * n_queries`` steps
    within ``[MIN_PATIENCE_STEPS, DEFAULT_PATIENCE_STEPS]``. Unused entries are None.
    """
    if max_steps is not None and max_epochs is not None:
        raise ValueError("give max_steps or max_epochs, not both")
    if patience is not None and patience_steps is not None:
        raise ValueError("give patience (evaluations) or patience_steps, not both")
    if batch_queries is None:
        batch_queries = max(1, min(MAX_BATCH_QUERIES, math.ceil(n_queries / BATCHES_PER_EPOCH)))
    if max_steps is None and max_epochs is None:
        max_steps = DEFAULT_MAX_STEPS
    if patience is None and patience_steps is None:
        patience_steps = min(DEFAULT_PATIENCE_STEPS,
                             max(MIN_PATIENCE_STEPS, PATIENCE_STEPS_PER_QUERY * n_queries))
    return int(batch_queries), max_steps, max_epochs, patience, patience_steps


class NeuralRanker(BaseEstimator):
    """Feed-forward neural ranker trained with ApproxNDCG, ApproxAP, RankNet, ListNet or ListMLE.

    Architecture after Bruch et al. (2019): batch normalisation on the input features, then per
    hidden layer ``Linear -> BatchNorm -> ReLU`` (the paper puts batch normalisation "between
    consecutive layers"; we normalise the pre-activations, as Ioffe & Szegedy and TF-Ranking's
    examples do), then a final ``Linear`` to one score. ``hidden=()`` is a linear model of the
    (normalised) features, as in Qin et al. (2010). Batch statistics use only real documents:
    the network is applied to the flat tensor of a batch's documents and the scores are then
    scattered into the padded ``[batch_queries, max_len]`` layout for the loss (lists are
    padded to the longest list of the batch and masked, never truncated).

    Training: Adam, batches of ``batch_queries`` queries reshuffled each epoch, loss
    ``-mean_q M_q`` for ApproxNDCG/ApproxAP and ``mean_q loss_q`` for the others (mean over the
    queries of the batch). The budget is counted in optimiser steps, so that a small training
    set gets as many updates as a large one: by default at most ``5000`` steps in batches of
    ``min(128, ceil(n_queries / 8))`` queries (about 8 batches an epoch on small data, Bruch
    et al.'s 128 from 1,024 queries up). After each epoch (or every ``eval_every`` steps) the
    exact validation NDCG@``eval_at`` (or MAP@``eval_at`` with ``eval_metric="map"``; mean over
    queries with a relevant document, equal scores ranked worst case, as
    :mod:`approx_gbdt.metrics`) is computed; training stops when ``patience_steps`` optimiser
    steps have passed since the best evaluation (default: two per training query, between
    100 and 1000: a small training set is overfitted within fewer steps, and its small
    validation set, searched over many evaluations, picks a late lucky score), and the best
    evaluation's weights are restored.
    ``max_epochs`` and ``patience`` (in evaluations, i.e. epochs by default) give an epoch
    schedule instead; ``batch_queries=128, max_epochs=100, patience=10`` under-trains small
    data (a 60-query set is one batch, 100 epochs are 100 steps).

    With ``gumbel_samples > 0`` (ApproxNDCG/ApproxAP only) each training list is scored
    ``gumbel_samples`` times with Gumbel noise added to its scores (:func:`gumbel_perturb`,
    the stochastic treatment of Bruch, Han, Bendersky & Najork, WSDM 2020) and the loss is the
    mean over the samples; validation and prediction use the plain scores.

    Differences from Bruch et al. (2019), who tuned on MSLR-WEB30K / Yahoo! (~30,000 queries):
    they train B1024 (1024-512-256-128-64-32-16) for their main results and select models on
    NDCG@5; the default here is B64 (64-32-16) and NDCG@10. The paper does not name the
    optimiser (Adam here; its learning rate 0.005 and batch size 128 are followed), the number
    of training steps or the list size; we pad each batch to its longest list and never
    truncate lists. Their batch-normalisation momentum (TensorFlow 0.8 / 0.99, i.e. PyTorch
    0.2 / 0.01) is ``batchnorm_momentum``; the default is PyTorch's 0.1.

    Parameters
    ----------
    loss : str
        One of :data:`LOSSES`: ``"approx_ndcg"``, ``"approx_ap"``, ``"ranknet"``,
        ``"listnet"``, ``"listmle"`` or another registered measure (``"approx_dcg"``,
        ``"approx_mrr"``, ``"approx_precision"``, ``"approx_recall"``, ``"approx_rbp"``).
    hidden : tuple or list of int
        Hidden layer widths, each >= 1; ``()`` for a linear model.
    alpha : float
        Position sharpness for the approx losses (Bruch et al.: 10).
    beta : float or None
        Sharpness of the loss's sigmoids where it has one: the smoothed top-k truncation of
        ApproxNDCG, ApproxDCG, ApproxPrecision and ApproxRecall (used only with a cutoff: ``k``
        given, or ApproxPrecision's and ApproxRecall's own ``k=10``), and ApproxAP's
        ``sig(beta (pos_y - pos_x))``. None (default): the loss's own default, 10 for the
        truncation of ApproxNDCG / ApproxDCG and for ApproxAP (Qin et al.; not
        ``approx_ap_obj``'s 0.3), 1 for ApproxPrecision and ApproxRecall. A value that the
        loss does not use (another loss, or no cutoff) gets a ``UserWarning`` at ``fit``.
    k : int, optional
        Cutoff of the losses that have one (ApproxNDCG, ApproxDCG, ApproxPrecision,
        ApproxRecall); None: the full list for ApproxNDCG / ApproxDCG, the objective's own
        ``k=10`` for ApproxPrecision / ApproxRecall. Giving ``k`` with another loss is a
        ``ValueError``.
    threshold : float
        Relevance threshold (``label >= threshold``) of the losses of binary relevance
        (ApproxAP, ApproxMRR, ApproxPrecision, ApproxRecall, ApproxRBP) and of
        ``eval_metric="map"``.
    lr : float
        Adam learning rate (Bruch et al.: 0.005).
    batch_queries : int or None
        Queries per batch; None: ``min(128, ceil(n_queries / 8))`` (Bruch et al.: 128).
    max_steps : int or None
        Budget of optimiser steps; None: 5000, unless ``max_epochs`` is given.
    max_epochs : int or None
        Budget in epochs instead of steps (passes over the training queries). Give at most one
        of ``max_steps`` and ``max_epochs``.
    patience : int or None
        Early stopping patience in evaluations (epochs unless ``eval_every`` is set) without
        improvement.
    patience_steps : int or None
        Early stopping patience in optimiser steps since the best evaluation. None (unless
        ``patience`` is given): two steps per training query, at least 100 and at most 1000.
        Give at most one of the two. Both need ``eval_set``: ``fit`` without it raises a
        ``ValueError`` when either is given.
    eval_every : int or None
        Optimiser steps between validation evaluations; None: at the end of every epoch. The
        last step of the budget is always evaluated. Needs ``eval_set``, as ``patience``.
    gumbel_samples : int
        Gumbel-perturbed samples per training list for ApproxNDCG/ApproxAP; 0 (default): the
        plain loss. Bruch et al. (2020) and TF-Ranking use 8.
    gumbel_scale : float
        Multiplier of the Gumbel noise, >= 0 (1: Plackett-Luce sampling; 0: the plain loss
        repeated). TF-Ranking's temperature ``T`` is ``alpha / T`` here.
    seed : int
        Seeds weight initialisation, shuffling, Gumbel noise and ListMLE tie breaking.
    device : str or torch.device, optional
        None: CUDA when available, else CPU.
    verbose : bool
        Print the validation measure at each evaluation.
    eval_at : int or None
        Cut-off of the validation measure used for early stopping (None: full list). Bruch et
        al. selected models on NDCG@5; the default 10 matches this project's GBDT protocol.
    eval_metric : {"ndcg", "map"}
        Validation measure for early stopping: NDCG@eval_at (default) or MAP@eval_at with
        relevance ``label >= threshold`` (Qin et al. select ApproxAP models on MAP).
    batchnorm_momentum : float
        PyTorch BatchNorm momentum (Bruch et al.'s TensorFlow momentum 0.8 on Web30K is 0.2
        here, 0.99 on Yahoo! is 0.01).

    Attributes
    ----------
    n_features_in_ : int
    model_ : torch.nn.Module
        The trained network (best evaluation), in eval mode.
    batch_queries_ : int
        The batch size used.
    history_ : list of float
        Validation measure (NDCG@eval_at by default) at each evaluation (empty without
        ``eval_set``).
    history_steps_ : list of int
        Optimiser steps taken at each evaluation.
    best_iteration_ : int
        1-based index of the kept evaluation (``history_[best_iteration_ - 1]``): the epoch
        with the default ``eval_every``. Without ``eval_set``, the number of epochs run, the
        last one possibly partial (the last weights are kept).
    best_step_ : int
        Optimiser steps of the kept weights.
    n_steps_ : int
        Optimiser steps taken.
    best_score_ : float or None
        Validation measure of the kept weights.
    initial_score_ : float or None
        Validation measure of the untrained network.
    train_loss_ : list of float
        Mean training loss per epoch (the last one possibly partial).
    """

    def __init__(
        self,
        loss="approx_ndcg",
        hidden=(64, 32, 16),
        alpha=10.0,
        beta=None,
        k=None,
        threshold=1.0,
        lr=0.005,
        batch_queries=None,
        max_steps=None,
        max_epochs=None,
        patience=None,
        patience_steps=None,
        eval_every=None,
        gumbel_samples=0,
        gumbel_scale=1.0,
        seed=0,
        device=None,
        verbose=False,
        eval_at=10,
        eval_metric="ndcg",
        batchnorm_momentum=0.1,
    ):
        self.loss = loss
        self.hidden = hidden
        self.alpha = alpha
        self.beta = beta
        self.k = k
        self.threshold = threshold
        self.lr = lr
        self.batch_queries = batch_queries
        self.max_steps = max_steps
        self.max_epochs = max_epochs
        self.patience = patience
        self.patience_steps = patience_steps
        self.eval_every = eval_every
        self.gumbel_samples = gumbel_samples
        self.gumbel_scale = gumbel_scale
        self.seed = seed
        self.device = device
        self.verbose = verbose
        self.eval_at = eval_at
        self.eval_metric = eval_metric
        self.batchnorm_momentum = batchnorm_momentum

    # -- validation --------------------------------------------------------------------------

    def _check_params(self):
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; choose one of {LOSSES}")
        _check_positive("alpha", self.alpha)
        if self.beta is not None:
            _check_positive("beta", self.beta)
        _check_k(self.k)
        if self.k is not None and not _takes_k(self.loss):
            raise ValueError(
                f"k={self.k!r} is a cutoff, which loss {self.loss!r} does not have; the losses "
                f"with one: {tuple(loss for loss in LOSSES if _takes_k(loss))}"
            )
        if self.beta is not None and not self._uses_beta():
            warnings.warn(
                f"NeuralRanker: beta={self.beta:g} has no effect with loss={self.loss!r}"
                + (" without k" if _takes_k(self.loss) else ""),
                UserWarning, stacklevel=3,
            )
        if not (isinstance(self.threshold, numbers.Real) and math.isfinite(self.threshold)):
            raise ValueError(f"threshold must be a finite number, got {self.threshold!r}")
        _check_positive("lr", self.lr)
        hidden = _check_hidden(self.hidden)
        for name in ("batch_queries", "max_steps", "max_epochs", "patience", "patience_steps",
                     "eval_every"):
            _positive_int_or_none(name, getattr(self, name))
        gs = self.gumbel_samples
        if isinstance(gs, bool) or not isinstance(gs, numbers.Integral) or gs < 0:
            raise ValueError(f"gumbel_samples must be an integer >= 0, got {gs!r}")
        if gs > 0 and self.loss not in GUMBEL_LOSSES:
            raise ValueError(
                f"gumbel_samples applies to the losses {GUMBEL_LOSSES}, not {self.loss!r}"
            )
        sc = self.gumbel_scale
        if isinstance(sc, bool) or not isinstance(sc, numbers.Real) or not (
            math.isfinite(float(sc)) and sc >= 0
        ):
            raise ValueError(f"gumbel_scale must be a finite number >= 0, got {sc!r}")
        if self.eval_at is not None:
            ea = self.eval_at
            if isinstance(ea, bool) or not isinstance(ea, numbers.Integral) or ea < 1:
                raise ValueError(f"eval_at must be None or an integer >= 1, got {ea!r}")
        if self.eval_metric not in ("ndcg", "map"):
            raise ValueError(f"eval_metric must be 'ndcg' or 'map', got {self.eval_metric!r}")
        m = self.batchnorm_momentum
        if not (isinstance(m, numbers.Real) and 0 < m <= 1):
            raise ValueError(f"batchnorm_momentum must be in (0, 1], got {m!r}")
        return hidden

    def _device(self):
        if self.device is not None:
            return torch.device(self.device)
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    # -- training ----------------------------------------------------------------------------

    def _score(self, net, valid):
        pred = _predict(net, valid[0])
        # The first call of a parallel numba kernel can reset the OpenMP thread count that
        # torch shares (torch.set_num_threads); keep the caller's setting.
        threads = torch.get_num_threads()
        if self.eval_metric == "map":
            value = _map(pred, valid[1], valid[2], k=self.eval_at, threshold=self.threshold)
        else:
            value = _ndcg(pred, valid[1], valid[2], k=self.eval_at)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return value

    def _measure(self):
        """The objective of a registered separable-measure loss with the ranker's options it
        uses (``beta`` only with a cutoff; None: the objective's own), else None."""
        if self.loss not in _torch_measures.LOSSES:
            return None
        return _torch_measures.measure_objective(
            self.loss, alpha=self.alpha, beta=self.beta if self._has_cutoff() else None,
            k=self.k, threshold=self.threshold,
        )

    def _has_cutoff(self):
        """Whether the loss truncates: ``k`` given, or its objective's own (ApproxPrecision's
        and ApproxRecall's ``k=10``)."""
        return self.k is not None or _ready_options(self.loss).get("k") is not None

    def _uses_beta(self):
        """Whether the loss reads ``beta``: ApproxAP, and the losses with a cutoff when they
        have one."""
        if self.loss == "approx_ap":
            return True
        return "beta" in _ready_options(self.loss) and self._has_cutoff()

    def _relevance_threshold(self):
        """The threshold of binary relevance the loss uses, None for graded labels."""
        if self.loss == "approx_ap":
            return self.threshold
        measure = self._measure()
        if measure is not None and "threshold" in measure.get_options():
            return self.threshold
        return None

    def _batch_loss(self, s, y, mask, generator, measure):
        if self.gumbel_samples > 0:
            s, y, mask = gumbel_perturb(
                s, y, mask, samples=self.gumbel_samples, scale=self.gumbel_scale,
                generator=generator,
            )
        if self.loss == "approx_ndcg":
            beta = TRUNCATION_BETA if self.beta is None else self.beta
            per_q = -approx_ndcg(s, y, mask, alpha=self.alpha, k=self.k, beta=beta)
        elif self.loss == "approx_ap":
            beta = APPROX_AP_BETA if self.beta is None else self.beta
            per_q = -approx_ap(s, y, mask, alpha=self.alpha, beta=beta, threshold=self.threshold)
        elif measure is not None:
            per_q = -_torch_measures.separable_measure(measure, s, y, mask,
                                                       _positions(s, mask, self.alpha))
        elif self.loss == "ranknet":
            per_q = ranknet_loss(s, y, mask)
        elif self.loss == "listnet":
            per_q = listnet_loss(s, y, mask)
        else:
            per_q = listmle_loss(s, y, mask, generator=generator)
        return per_q.mean()

    def fit(self, X, y, group, eval_set=None):
        """Train on queries given by their sizes ``group`` (rows contiguous by query).

        Parameters
        ----------
        X : array_like or scipy sparse, shape (n_documents, n_features)
        y : array_like, shape (n_documents,)
            Relevance grades >= 0.
        group : array_like of int
            Query sizes, in row order (LightGBM's ``group``), adding up to ``n_documents``.
        eval_set : tuple (X_valid, y_valid, group_valid), optional
            Validation queries for early stopping and model selection; needed by
            ``patience``, ``patience_steps`` and ``eval_every``.

        Returns
        -------
        self

        Warns
        -----
        RuntimeWarning
            When no training query has two documents of different labels (for the losses of
            binary relevance: a relevant and a non-relevant document), so that every ranking
            scores the same; and when no validation query has them for the validation
            measure, so that every evaluation scores the same and early stopping keeps the
            first evaluation's weights.
        """
        hidden = self._check_params()
        X, y, ptr = _check_xyg(X, y, group)
        sizes = np.diff(ptr)
        n_queries = sizes.size
        batch_queries, max_steps, max_epochs, patience, patience_steps = _schedule(
            n_queries, batch_queries=self.batch_queries, max_steps=self.max_steps,
            max_epochs=self.max_epochs, patience=self.patience,
            patience_steps=self.patience_steps,
        )
        if eval_set is None:
            for name in ("patience", "patience_steps", "eval_every"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} needs eval_set: early stopping "
                        "and its evaluations run on the validation queries"
                    )
        _warn_if_nothing_to_rank(y, ptr, self._relevance_threshold(), "training",
                                 "every ranking scores the same, so there is nothing to learn")
        valid = None
        if eval_set is not None:
            if isinstance(eval_set, list) and len(eval_set) == 1:
                eval_set = eval_set[0]
            if not (isinstance(eval_set, tuple) and len(eval_set) == 3):
                raise ValueError("eval_set must be a tuple (X_valid, y_valid, group_valid)")
            Xv, yv, ptr_v = _check_xyg(*eval_set, name="X_valid")
            if Xv.shape[1] != X.shape[1]:
                raise ValueError(
                    f"X_valid has {Xv.shape[1]} features but X has {X.shape[1]}"
                )
            valid = (Xv, yv, ptr_v)
            _warn_if_nothing_to_rank(
                yv, ptr_v, self.threshold if self.eval_metric == "map" else None, "validation",
                f"every evaluation of {self.eval_metric}@{self.eval_at} scores the same, so "
                "early stopping cannot select a model (the first evaluation's weights are "
                "kept)",
            )

        device = self._device()
        self.n_features_in_ = X.shape[1]
        dtype = torch.float32
        X_t = torch.as_tensor(X, dtype=dtype, device=device)
        y_t = torch.as_tensor(y, dtype=dtype, device=device)
        self.batch_queries_ = batch_queries

        was_deterministic = torch.are_deterministic_algorithms_enabled()
        was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
                torch.manual_seed(self.seed)
                net = _Net(X.shape[1], hidden, self.batchnorm_momentum).to(device)
            generator = torch.Generator().manual_seed(self.seed)
            opt = torch.optim.Adam(net.parameters(), lr=self.lr)
            measure = self._measure()

            self.history_, self.history_steps_, self.train_loss_ = [], [], []
            self.initial_score_ = None
            best_state, best_score, best_eval, best_step = None, -math.inf, 0, 0
            if valid is not None:
                self.initial_score_ = self._score(net, valid)
            step, n_evals, stop = 0, 0, False

            def evaluate():
                # One evaluation point; returns True when early stopping says stop.
                nonlocal best_state, best_score, best_eval, best_step, n_evals
                n_evals += 1
                if valid is None:
                    best_eval, best_step = n_evals, step
                    return False
                score = self._score(net, valid)
                self.history_.append(score)
                self.history_steps_.append(step)
                if self.verbose:
                    print(
                        f"[NeuralRanker] step {step:6d}  valid {self.eval_metric}@"
                        f"{self.eval_at}: {score:.6f}"
                    )
                if score > best_score:
                    best_score, best_eval, best_step = score, n_evals, step
                    best_state = copy.deepcopy(net.state_dict())
                    return False
                if patience is not None:
                    return n_evals - best_eval >= patience
                return step - best_step >= patience_steps

            epoch = 0
            while not stop and (max_epochs is None or epoch < max_epochs):
                epoch += 1
                net.train()
                order = torch.randperm(n_queries, generator=generator).numpy()
                total, n_batches = 0.0, 0
                for start in range(0, n_queries, batch_queries):
                    if max_steps is not None and step >= max_steps:
                        break
                    qs = order[start : start + batch_queries]
                    qsizes = sizes[qs]
                    if qsizes.sum() < 2:  # BatchNorm needs two rows; no ranking signal anyway
                        continue
                    rows = np.concatenate([np.arange(ptr[q], ptr[q + 1]) for q in qs])
                    rows_t = torch.as_tensor(rows, device=device)
                    max_len = int(qsizes.max())
                    mask = torch.as_tensor(
                        np.arange(max_len)[None, :] < qsizes[:, None], device=device
                    )
                    flat = net(X_t[rows_t])
                    s = torch.zeros(mask.shape, dtype=dtype, device=device).masked_scatter(
                        mask, flat
                    )
                    yy = torch.zeros(mask.shape, dtype=dtype, device=device).masked_scatter(
                        mask, y_t[rows_t]
                    )
                    loss = self._batch_loss(s, yy, mask, generator, measure)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    step += 1
                    total += float(loss.detach())
                    n_batches += 1
                    if self.eval_every is not None and step % self.eval_every == 0:
                        stop = evaluate()  # _predict restores training mode
                        if stop:
                            break
                if n_batches:
                    self.train_loss_.append(total / n_batches)
                out_of_steps = n_batches == 0 or (max_steps is not None and step >= max_steps)
                last_epoch = max_epochs is not None and epoch >= max_epochs
                evaluated = self.eval_every is not None and step % self.eval_every == 0
                if not stop and (self.eval_every is None or
                                 ((out_of_steps or last_epoch) and not evaluated)):
                    stop = evaluate()
                if out_of_steps:
                    break
            if best_state is not None:
                net.load_state_dict(best_state)
        finally:
            torch.use_deterministic_algorithms(was_deterministic, warn_only=was_warn_only)

        net.eval()
        self.model_ = net
        self.n_steps_ = step
        self.best_iteration_ = best_eval
        self.best_step_ = best_step
        self.best_score_ = best_score if valid is not None else None
        return self

    # -- prediction --------------------------------------------------------------------------

    def predict(self, X):
        """Scores of the documents (higher = more relevant), float64 of shape (n_documents,)."""
        if not hasattr(self, "model_"):
            raise NotFittedError("this NeuralRanker is not fitted yet; call fit first")
        X = _as_2d_float(X, "X")
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features but the model was fitted with {self.n_features_in_}"
            )
        return _predict(self.model_, X)
