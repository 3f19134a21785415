"""Objectives for screening (benchmark only): pair losses of the literature and variants of
the approx objectives' pair forces.

The first two are ``L = sum_{(i, j)} w_ij log(1 + exp(-(s_i - s_j)))`` over pairs in which ``i``
has the higher label, with pair weights ``w_ij`` computed from the current scores and held fixed
while differentiating (as LambdaMART and LambdaLoss do). Every objective here is normalised per
query as the approx objectives (``log2(1 + S) / S``, ``S = sum |dL/ds|``). Host weights (a
Dataset's ``weight``) are not applied: the benchmark trains without them.

- :class:`LambdaLoss2pp`: LambdaLoss's NDCG-Loss2++ (Wang et al., CIKM 2018) with any ``mu``,
  by the package's kernel (``approx_gbdt._lambdaloss``; ``ApproxNDCG(lambdaloss=w)`` mixes it
  in with ``mu = 10``).
- :class:`YetiRankPairs` (Gulin et al. 2011; CatBoost's ``YetiRank``): ``permutations`` times,
  sort the query by ``s + eps`` (``eps`` standard logistic per document, a fresh draw each
  call); each pair of neighbours ``(k, k + 1)`` of that order with different labels gets
  ``0.15 decay^k |y_a - y_b|`` (``k`` 0-based); the weights are averaged over the
  permutations. With ``p = sigmoid(s_i - s_j)`` a pair adds ``-w (1 - p)`` to ``dL/ds_i``,
  ``+w (1 - p)`` to ``dL/ds_j`` and ``w p (1 - p)`` to both Hessian diagonals.
- :class:`APCrossPairs`: ApproxAP's tangent pair forces (``ApproxAP``'s docstring) kept on the
  pairs of a relevant and an irrelevant document only. With ``v_m = d ApproxAP / d pos^_m``
  (zero for an irrelevant document) and ``w_im = alpha sig'(alpha (s_i - s_m))``, the
  gradient of ``-ApproxAP`` is ``-sum_m w_im (v_m - v_i)`` over every pair; here a relevant
  ``i`` keeps ``v_i sum_{m irrelevant} w_im`` and an irrelevant ``i`` keeps
  ``-sum_{m relevant} w_im v_m``: two relevant documents no longer pull on each other, which
  swapping them cannot reward (docs/why_these_defaults.md, section 16). Hessian: the bound
  ``alpha sum w_im |v_m - v_i|`` over the same pairs, times ``hessian_scale``. ``graded``:
  the mean over the label values >= 1 of the query, each level a binary ApproxAP, normalised
  after the mean (``ApproxAP(graded=True)`` takes the dataset's label values, a level a query
  lacks adding 0, and normalises each level).
  O(n^2) per query; for screening on lists of a few hundred documents.
- :class:`NDCGCrossPairs`: the same for ApproxNDCG, ``v_i = d ApproxNDCG / d pos^_i =
  -(2^y_i - 1) / (Z ln 2 (1 + pos^_i) log2(1 + pos^_i)^2)``: the forces between two documents
  of equal label (which swapping them cannot reward) are dropped; Hessian ``hessian_scale``
  times the bound over the pairs kept (0.1: the floor of ApproxNDCG's ``"mixed"``, which is
  the Hessian at a constant start).
- :class:`NDCGLambdaLossMix`: ``ApproxNDCG(lambdaloss=w)``'s mix with the LambdaLoss part
  changed, to screen what a cheaper kernel could share with ApproxNDCG's: the part is
  ``sum_{y_i > y_j} w_ij log(1 + exp(-a (s_i - s_j))) / a`` (``a = ll_alpha``; LambdaLoss's
  is ``a = 1``, ApproxNDCG's sigmoids are ``a = alpha``), its weights ``w_ij`` NDCG-Loss2++'s
  from the exact positions (``ranks="exact"``) or from ApproxNDCG's smoothed positions
  ``pos^`` (``ranks="smooth"``; the rank distance ``d = max(|pos^_i - pos^_j|, 1)``), with
  ``mu`` weighing the rank-distance term. With ``p = sigmoid(a (s_i - s_j))`` a pair adds
  ``-w (1 - p)`` to ``dL/ds_i``, ``+w (1 - p)`` to ``dL/ds_j`` and ``a w p (1 - p)`` to both
  Hessian diagonals; the part is normalised per query, then mixed as ``(1 - weight)`` times
  ``ApproxNDCG()``'s gradient and Hessian plus ``weight`` times its own (``ll_alpha=1``,
  ``ranks="exact"``, ``mu=10`` is ``ApproxNDCG(lambdaloss=weight)``). O(n^2) per query.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from approx_gbdt import ApproxNDCG
from approx_gbdt._lambdaloss import lambdaloss_grad_hess
from approx_gbdt._reference import finish_query, positions_query


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


@njit(cache=True)
def _pair_forces(s, y, v, alpha, cross, g, h):
    """``g_i -= sum_m w_im (v_m - v_i)``, ``h_i += alpha sum_m w_im |v_m - v_i|`` over the pairs
    of different labels (every pair unless ``cross``)."""
    n = s.shape[0]
    for i in range(n):
        for m in range(n):
            if m == i or (cross and y[i] == y[m]):
                continue
            e = 1.0 / (1.0 + np.exp(-alpha * (s[i] - s[m])))
            w = alpha * e * (1.0 - e)
            g[i] -= w * (v[m] - v[i])
            h[i] += alpha * w * abs(v[m] - v[i])


@njit(cache=True)
def _ap_cross_level(s, rel, alpha, beta, cross, g, h):
    """Add one level's forces to ``g`` and bounds to ``h`` (unnormalised; module docstring)."""
    n = s.shape[0]
    r = 0
    for i in range(n):
        r += rel[i]
    if r == 0 or (cross and r == n):  # no pair of a relevant and an irrelevant document
        return
    pos = np.empty(n)
    positions_query(s, alpha, pos)
    # v_k = d/dpos_k of (1/R) sum_k r_k N_k / pos_k,
    # N_k = 1 + sum_{x != k} r_x sig(beta (pos_k - pos_x))
    v = np.zeros(n)
    for k in range(n):
        if rel[k] == 0:
            continue
        num = 1.0
        dnum = 0.0
        for x in range(n):
            if x != k and rel[x] == 1:
                e = 1.0 / (1.0 + np.exp(-beta * (pos[k] - pos[x])))
                num += e
                d = beta * e * (1.0 - e)
                dnum += d
                v[x] -= d / pos[k] / r
        v[k] += dnum / pos[k] / r - num / (pos[k] * pos[k]) / r
    _pair_forces(s, rel, v, alpha, cross, g, h)


@njit(cache=True)
def _by_query(query, s, y, gains, inv_z, ptr, normalize, args):
    """Gradient and Hessian of every query of two or more documents with a relevant one
    (``gains`` and ``inv_z``, 1 over the ideal DCG, 0 for none, as ApproxNDCG prepares them):
    ``query(sq, yq, gq_gains, iz, gq, hq, *args)`` adds a query's into the zeroed ``gq`` and
    ``hq``, which are then normalised per query; the others stay 0."""
    n = s.shape[0]
    grad = np.zeros(n)
    hess = np.zeros(n)
    no_weights = np.empty(0)
    for q in range(ptr.shape[0] - 1):
        lo, hi = ptr[q], ptr[q + 1]
        m = hi - lo
        if m < 2 or inv_z[q] == 0.0:
            continue
        gq = np.zeros(m)
        hq = np.zeros(m)
        query(s[lo:hi], y[lo:hi], gains[lo:hi], inv_z[q], gq, hq, *args)
        finish_query(gq, hq, no_weights, normalize)
        grad[lo:hi] = gq
        hess[lo:hi] = hq
    return grad, hess


@njit(cache=True)
def _ndcg_cross_query(sq, yq, gains, iz, gq, hq, alpha, cross):
    """One query of :class:`NDCGCrossPairs` (module docstring), unnormalised."""
    m = sq.shape[0]
    pos = np.empty(m)
    positions_query(sq, alpha, pos)
    v = np.zeros(m)
    for i in range(m):
        lg = np.log2(1.0 + pos[i])
        v[i] = -gains[i] * iz / (np.log(2.0) * (1.0 + pos[i]) * lg * lg)
    _pair_forces(sq, yq, v, alpha, cross, gq, hq)


@njit(cache=True)
def _ap_cross_grad_hess(s, y, ptr, alpha, beta, cross, graded, scale, normalize):
    n = s.shape[0]
    grad = np.zeros(n)
    hess = np.zeros(n)
    no_weights = np.empty(0)
    for q in range(ptr.shape[0] - 1):
        lo, hi = ptr[q], ptr[q + 1]
        if hi - lo < 2:
            continue
        yq = y[lo:hi]
        levels = np.unique(yq[yq >= 1.0]) if graded else np.ones(1)
        gq = np.zeros(hi - lo)
        hq = np.zeros(hi - lo)
        for t in levels:
            rel = (yq >= t).astype(np.int64)
            _ap_cross_level(s[lo:hi], rel, alpha, beta, cross, gq, hq)
        if levels.shape[0] > 0:
            gq /= levels.shape[0]
            hq /= levels.shape[0]
        finish_query(gq, hq, no_weights, normalize)
        grad[lo:hi] = gq
        hess[lo:hi] = scale * hq
    return grad, hess


@njit(cache=True)
def _ll_query(sq, yq, gains, iz, gq, hq, alpha, ll_alpha, smooth, mu):
    """One query of the LambdaLoss part of :class:`NDCGLambdaLossMix` (module docstring),
    unnormalised."""
    m = sq.shape[0]
    r = np.empty(m)
    if smooth:
        positions_query(sq, alpha, r)
    else:
        o = np.argsort(-sq, kind="mergesort")
        for t in range(m):
            r[o[t]] = t + 1.0
    for i in range(m):
        for j in range(m):
            dG = gains[i] - gains[j]
            if dG <= 0.0:
                continue
            d = max(abs(r[i] - r[j]), 1.0)
            rho = abs(1.0 / np.log2(1.0 + r[i]) - 1.0 / np.log2(1.0 + r[j]))
            delta = 1.0 / np.log2(1.0 + d) - 1.0 / np.log2(2.0 + d)
            w = dG * iz * (rho + mu * delta)
            p = 1.0 / (1.0 + np.exp(-ll_alpha * (sq[i] - sq[j])))
            gq[i] -= w * (1.0 - p)
            gq[j] += w * (1.0 - p)
            c = ll_alpha * w * p * (1.0 - p)
            hq[i] += c
            hq[j] += c


class _PairObjective:
    """Common host glue: ``grad_hess(scores, labels, group_ptr)`` and the LightGBM / XGBoost
    call ``f(preds, dataset)``; options as keyword arguments (``get_options``, ``replace``)."""

    _options: tuple = ()

    def get_options(self) -> dict:
        return {k: getattr(self, k) for k in self._options}

    def replace(self, **changes):
        unknown = sorted(set(changes) - set(self._options))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no option {', '.join(unknown)}")
        return type(self)(**{**self.get_options(), **changes})

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.get_options().items())
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


class APCrossPairs(_PairObjective):
    """ApproxAP's tangent forces on the pairs of a relevant and an irrelevant document only
    (module docstring); ``cross=False`` keeps every pair (ApproxAP's own gradient)."""

    _options = ("alpha", "beta", "cross", "graded", "hessian_scale", "normalize")

    def __init__(self, *, alpha=10.0, beta=0.3, cross=True, graded=False, hessian_scale=0.5,
                 normalize=True):
        self.alpha, self.beta = float(alpha), float(beta)
        self.cross, self.graded = bool(cross), bool(graded)
        self.hessian_scale, self.normalize = float(hessian_scale), bool(normalize)

    def grad_hess(self, scores, labels, group_ptr):
        s, y, ptr = self._arrays(scores, labels, group_ptr)
        return _ap_cross_grad_hess(s, y, ptr, self.alpha, self.beta, self.cross, self.graded,
                                   self.hessian_scale, self.normalize)


class NDCGCrossPairs(_PairObjective):
    """ApproxNDCG's tangent forces without the pairs of equal label (module docstring);
    ``cross=False`` keeps every pair (ApproxNDCG's own gradient)."""

    _options = ("alpha", "cross", "hessian_scale", "normalize")

    def __init__(self, *, alpha=10.0, cross=True, hessian_scale=0.1, normalize=True):
        self.alpha, self.cross = float(alpha), bool(cross)
        self.hessian_scale, self.normalize = float(hessian_scale), bool(normalize)

    def grad_hess(self, scores, labels, group_ptr):
        s, y, ptr = self._arrays(scores, labels, group_ptr)
        a = ApproxNDCG()._prepare(y, ptr, cache=False).arrays
        grad, hess = _by_query(_ndcg_cross_query, s, y, a["gains"], a["inv_z"], ptr,
                               self.normalize, (self.alpha, self.cross))
        return grad, self.hessian_scale * hess


class NDCGLambdaLossMix(_PairObjective):
    """ApproxNDCG mixed with a LambdaLoss part at the sigmoid scale ``ll_alpha`` and with
    weights from the exact or the smoothed positions (module docstring)."""

    _options = ("weight", "ll_alpha", "ranks", "mu", "alpha", "normalize")

    def __init__(self, *, weight=0.5, ll_alpha=10.0, ranks="smooth", mu=0.0, alpha=10.0,
                 normalize=True):
        if ranks not in ("exact", "smooth"):
            raise ValueError(f"ranks must be 'exact' or 'smooth', got {ranks!r}")
        self.weight, self.ll_alpha, self.ranks = float(weight), float(ll_alpha), ranks
        self.mu, self.alpha, self.normalize = float(mu), float(alpha), bool(normalize)

    def grad_hess(self, scores, labels, group_ptr):
        s, y, ptr = self._arrays(scores, labels, group_ptr)
        base = ApproxNDCG(alpha=self.alpha, normalize=self.normalize)
        a = base._prepare(y, ptr, cache=False).arrays
        g1, h1 = base.grad_hess(s, y, ptr)
        g2, h2 = _by_query(_ll_query, s, y, a["gains"], a["inv_z"], ptr, self.normalize,
                           (self.alpha, self.ll_alpha, self.ranks == "smooth", self.mu))
        w = self.weight
        return (1.0 - w) * g1 + w * g2, (1.0 - w) * h1 + w * h2


BENCH_PAIR_OBJECTIVES = {"lambdaloss": LambdaLoss2pp, "yetirank_pairs": YetiRankPairs,
                         "ap_cross": APCrossPairs, "ndcg_cross": NDCGCrossPairs,
                         "ndcg_ll": NDCGLambdaLossMix}
