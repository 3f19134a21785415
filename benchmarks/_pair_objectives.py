"""Weighted pairwise logistic objectives of the literature, for screening (benchmark only).

Both are ``L = sum_{(i, j)} w_ij log(1 + exp(-(s_i - s_j)))`` over pairs in which ``i`` has the
higher label, with pair weights ``w_ij`` computed from the current scores and held fixed while
differentiating (as LambdaMART and LambdaLoss do), normalised per query as the approx
objectives (``log2(1 + S) / S``, ``S = sum |dL/ds|``). Host weights (a Dataset's
``weight``) are not applied: the benchmark trains without them.

- :class:`LambdaLoss2pp`: LambdaLoss's NDCG-Loss2++ (Wang et al., CIKM 2018) with any ``mu``,
  by the package's kernel (``approx_gbdt._lambdaloss``; ``ApproxNDCG(lambdaloss=w)`` mixes it
  in with ``mu = 10``).
- :class:`YetiRankPairs` (Gulin et al. 2011; CatBoost's ``YetiRank``): ``permutations`` times,
  sort the query by ``s + eps`` (``eps`` standard logistic per document, a fresh draw each
  call); each pair of neighbours ``(k, k + 1)`` of that order with different labels gets
  ``0.15 decay^k |y_a - y_b|`` (``k`` 0-based); the weights are averaged over the
  permutations. With ``p = sigmoid(s_i - s_j)`` a pair adds ``-w (1 - p)`` to ``dL/ds_i``,
  ``+w (1 - p)`` to ``dL/ds_j`` and ``w p (1 - p)`` to both Hessian diagonals.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from approx_gbdt import ApproxNDCG
from approx_gbdt._lambdaloss import lambdaloss_grad_hess
from approx_gbdt._reference import finish_query


@njit(cache=True)
def _yetirank_grad_hess(s, y, ptr, eps, decay, normalize):
    n = s.shape[0]
    perms = eps.shape[0]
    grad = np.zeros(n)
    hess = np.zeros(n)
    no_weights = np.empty(0)
    for q in range(ptr.shape[0] - 1):
        lo, hi = ptr[q], ptr[q + 1]
        m = hi - lo
        if m < 2:
            continue
        for p in range(perms):
            order = np.argsort(-(s[lo:hi] + eps[p, lo:hi]), kind="mergesort")
            c = 1.0
            for k in range(1, m):
                a, b = order[k - 1], order[k]
                ya, yb = y[lo + a], y[lo + b]
                if ya != yb:
                    i, j = (lo + a, lo + b) if ya > yb else (lo + b, lo + a)
                    w = 0.15 * c * abs(ya - yb) / perms
                    x = 1.0 / (1.0 + np.exp(s[i] - s[j]))  # 1 - p
                    grad[i] -= w * x
                    grad[j] += w * x
                    hess[i] += w * x * (1.0 - x)
                    hess[j] += w * x * (1.0 - x)
                c *= decay
        finish_query(grad[lo:hi], hess[lo:hi], no_weights, normalize)
    return grad, hess


class _PairObjective:
    """Common host glue: ``grad_hess(scores, labels, group_ptr)`` and the LightGBM / XGBoost
    call ``f(preds, dataset)``; options as keyword arguments (``get_params``, ``replace``)."""

    _options: tuple = ()

    def get_params(self, deep=True) -> dict:
        return {k: getattr(self, k) for k in self._options}

    def replace(self, **changes):
        unknown = sorted(set(changes) - set(self._options))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no option {', '.join(unknown)}")
        return type(self)(**{**self.get_params(), **changes})

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({opts})"

    def __call__(self, preds, data, weight=None, group=None):
        from approx_gbdt.hosts import read_call

        scores, host = read_call(preds, data, weight, group)
        return self.grad_hess(scores, host.labels, host.group_ptr)

    @staticmethod
    def _arrays(scores, labels, group_ptr):
        return (np.ascontiguousarray(scores, dtype=np.float64),
                np.ascontiguousarray(labels, dtype=np.float64),
                np.ascontiguousarray(group_ptr, dtype=np.int64))


class LambdaLoss2pp(_PairObjective):
    """NDCG-Loss2++ (module docstring); ``mu`` weighs the rank-distance term."""

    _options = ("mu", "normalize")

    def __init__(self, *, mu=10.0, normalize=True):
        self.mu, self.normalize = float(mu), bool(normalize)

    def grad_hess(self, scores, labels, group_ptr):
        s, y, ptr = self._arrays(scores, labels, group_ptr)
        a = ApproxNDCG()._prepare(y, ptr, cache=False).arrays
        grad, hess = np.empty_like(s), np.empty_like(s)
        lambdaloss_grad_hess(s, a["gains"], a["inv_z"], ptr, np.empty(0), self.mu, 0,
                             self.normalize, grad, hess, np.full(s.shape[0], -1, np.int32))
        return grad, hess


class YetiRankPairs(_PairObjective):
    """YetiRank's pair weights from noisy permutations (module docstring); ``noise`` scales the
    logistic noise (1 = CatBoost's), ``random_state`` seeds it (a fresh draw per call)."""

    _options = ("permutations", "decay", "noise", "random_state", "normalize")

    def __init__(self, *, permutations=10, decay=0.85, noise=1.0, random_state=None,
                 normalize=True):
        self.permutations, self.decay = int(permutations), float(decay)
        self.noise, self.random_state, self.normalize = float(noise), random_state, normalize
        self._rng = np.random.default_rng(random_state)

    def grad_hess(self, scores, labels, group_ptr, *, eps=None):
        """``eps`` (shape ``(permutations, n)``) replaces the random draw (for tests)."""
        s, y, ptr = self._arrays(scores, labels, group_ptr)
        if eps is None:
            eps = self.noise * self._rng.logistic(size=(self.permutations, s.shape[0]))
        return _yetirank_grad_hess(s, y, ptr, np.ascontiguousarray(eps, dtype=np.float64),
                                   self.decay, bool(self.normalize))


BENCH_PAIR_OBJECTIVES = {"lambdaloss": LambdaLoss2pp, "yetirank_pairs": YetiRankPairs}
