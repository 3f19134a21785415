"""Weighted pairwise logistic objectives of the literature, for screening (benchmark only).

Both are ``L = sum_{(i, j)} w_ij log(1 + exp(-(s_i - s_j)))`` over pairs in which ``i`` has the
higher label, with pair weights ``w_ij`` computed from the current scores and held fixed while
differentiating (as LambdaMART and LambdaLoss do). Per pair, with ``p = sigmoid(s_i - s_j)``:
``dL/ds_i = -w (1 - p)``, ``dL/ds_j = +w (1 - p)``, and the Hessian diagonal gets
``w p (1 - p)`` on both. Each query's gradient and Hessian are then scaled by
``log2(1 + S) / S``, ``S = sum |dL/ds|`` (the approx objectives' ``normalize``, LightGBM
lambdarank's ``lambdarank_norm``).

- :class:`LambdaLoss2pp` (Wang et al., CIKM 2018, NDCG-Loss2++): with ``r`` the 1-based
  positions by the current scores (ties by index), ``G = 2^y - 1``, ``D(x) = log2(1 + x)``,
  ``w_ij = |G_i - G_j| / maxDCG * (|1/D(r_i) - 1/D(r_j)| + mu * delta_ij)``,
  ``delta_ij = |1/D(|r_i - r_j|) - 1/D(|r_i - r_j| + 1)|``.
- :class:`YetiRankPairs` (Gulin et al. 2011; CatBoost's ``YetiRank``): ``permutations`` times,
  sort the query by ``s + eps`` (``eps`` standard logistic per document, a fresh draw each
  call); each pair of neighbours ``(k, k + 1)`` of that order with different labels gets
  ``0.15 decay^k |y_a - y_b|`` (``k`` 0-based); the weights are averaged over the
  permutations.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _pair_logit(s, lo, win, lose, w, grad, hess):
    for t in range(win.shape[0]):
        i, j = lo + win[t], lo + lose[t]
        x = s[i] - s[j]
        q = 1.0 / (1.0 + np.exp(x))  # 1 - p
        g = w[t] * q
        h = w[t] * q * (1.0 - q)
        grad[i] -= g
        grad[j] += g
        hess[i] += h
        hess[j] += h


@njit(cache=True)
def _normalize(grad, hess, lo, hi):
    total = 0.0
    for i in range(lo, hi):
        total += abs(grad[i])
    if total > 0.0:
        scale = np.log2(1.0 + total) / total
        for i in range(lo, hi):
            grad[i] *= scale
            hess[i] *= scale


@njit(cache=True)
def _lambdaloss_grad_hess(s, y, ptr, mu, normalize):
    n = s.shape[0]
    grad = np.zeros(n)
    hess = np.zeros(n)
    for q in range(ptr.shape[0] - 1):
        lo, hi = ptr[q], ptr[q + 1]
        m = hi - lo
        if m < 2:
            continue
        order = np.argsort(-s[lo:hi], kind="mergesort")
        rank = np.empty(m, np.int64)
        for k in range(m):
            rank[order[k]] = k + 1
        gains = 2.0 ** y[lo:hi] - 1.0
        ideal = np.sort(gains)[::-1]
        max_dcg = 0.0
        for k in range(m):
            max_dcg += ideal[k] / np.log2(2.0 + k)
        if max_dcg <= 0.0:
            continue
        npairs = 0
        for a in range(m):
            for b in range(m):
                if y[lo + a] > y[lo + b]:
                    npairs += 1
        win = np.empty(npairs, np.int64)
        lose = np.empty(npairs, np.int64)
        w = np.empty(npairs)
        t = 0
        for a in range(m):
            for b in range(m):
                if y[lo + a] > y[lo + b]:
                    ra, rb = rank[a], rank[b]
                    d = abs(ra - rb)
                    rho = abs(1.0 / np.log2(1.0 + ra) - 1.0 / np.log2(1.0 + rb))
                    delta = abs(1.0 / np.log2(1.0 + d) - 1.0 / np.log2(2.0 + d))
                    win[t], lose[t] = a, b
                    w[t] = (gains[a] - gains[b]) / max_dcg * (rho + mu * delta)
                    t += 1
        _pair_logit(s, lo, win, lose, w, grad, hess)
        if normalize:
            _normalize(grad, hess, lo, hi)
    return grad, hess


@njit(cache=True)
def _yetirank_grad_hess(s, y, ptr, eps, decay, normalize):
    n = s.shape[0]
    perms = eps.shape[0]
    grad = np.zeros(n)
    hess = np.zeros(n)
    for q in range(ptr.shape[0] - 1):
        lo, hi = ptr[q], ptr[q + 1]
        m = hi - lo
        if m < 2:
            continue
        # neighbour pairs of each permutation: at most perms * (m - 1), merged later by weight
        win = np.empty(perms * (m - 1), np.int64)
        lose = np.empty(perms * (m - 1), np.int64)
        w = np.empty(perms * (m - 1))
        t = 0
        for p in range(perms):
            order = np.argsort(-(s[lo:hi] + eps[p, lo:hi]), kind="mergesort")
            c = 1.0
            for k in range(1, m):
                a, b = order[k - 1], order[k]
                ya, yb = y[lo + a], y[lo + b]
                if ya != yb:
                    win[t], lose[t] = (a, b) if ya > yb else (b, a)
                    w[t] = 0.15 * c * abs(ya - yb) / perms
                    t += 1
                c *= decay
        _pair_logit(s, lo, win[:t], lose[:t], w[:t], grad, hess)
        if normalize:
            _normalize(grad, hess, lo, hi)
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
    """NDCG-Loss2++ (module docstring); ``mu`` weighs the position-difference term."""

    _options = ("mu", "normalize")

    def __init__(self, *, mu=10.0, normalize=True):
        self.mu, self.normalize = float(mu), bool(normalize)

    def grad_hess(self, scores, labels, group_ptr):
        s, y, ptr = self._arrays(scores, labels, group_ptr)
        return _lambdaloss_grad_hess(s, y, ptr, self.mu, self.normalize)


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
