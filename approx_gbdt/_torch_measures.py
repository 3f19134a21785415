"""PyTorch surrogates of the registered separable measures, as losses for the neural ranker.

Needs PyTorch (imported by :mod:`approx_gbdt.neural` only). A separable measure of
:mod:`approx_gbdt.measures` is ``M_q = inv_z sum_i g_i t(pos^_i)``; here its gains and
normaliser come from the objective itself (computed in NumPy from the labels, constants for
autograd) and ``t`` from ``_measure_terms.torch_term``, so the neural loss and the boosting
objective are one definition. ApproxNDCG and ApproxAP keep their own functions in
:mod:`approx_gbdt.neural`.
"""

from __future__ import annotations

import numpy as np
import torch

from approx_gbdt._measure_terms import torch_term
from approx_gbdt.measures import MEASURES

__all__ = ["LOSSES", "measure_objective", "separable_measure"]

LOSSES = tuple(name for name in MEASURES if name not in ("approx_ndcg", "approx_ap"))


def measure_objective(name, *, alpha, beta, k, threshold):
    """The registered objective ``name`` with those of the given options it has (None: keep
    the ready-made instance's)."""
    ready = MEASURES[name].instance
    params = ready.get_options()
    given = {"alpha": alpha, "beta": beta, "k": k, "threshold": threshold}
    changes = {key: value for key, value in given.items()
               if key in params and value is not None}
    return ready.replace(**changes) if changes else ready


def separable_measure(objective, scores, labels, mask, positions):
    """Per-query ``M_q`` (not negated) of a separable objective on a padded batch.

    Parameters
    ----------
    objective : a separable objective of :mod:`approx_gbdt.measures`
    scores, labels : torch.Tensor, shape [B, L]
    mask : torch.Tensor of bool, shape [B, L]
        True for real documents.
    positions : torch.Tensor, shape [B, L]
        Smoothed positions of the real documents (with the objective's ``alpha``).

    Returns
    -------
    torch.Tensor, shape [B]
    """
    sizes = mask.sum(-1).cpu().numpy()
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    y = labels[mask].detach().cpu().numpy().astype(np.float64)
    arrays = objective._prepare_arrays(y, ptr)
    gains = torch.zeros_like(scores)
    gains[mask] = torch.as_tensor(arrays["gains"], dtype=scores.dtype, device=scores.device)
    inv_z = torch.as_tensor(arrays["inv_z"], dtype=scores.dtype, device=scores.device)
    kind, k, beta, theta = objective._term_args()
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    terms = torch.where(mask, gains * torch_term(kind, positions, k, beta, theta), zero)
    return inv_z * terms.sum(-1)
