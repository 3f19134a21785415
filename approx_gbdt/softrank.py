r"""SoftNDCG (Taylor, Guiver, Robertson & Minka 2008, "SoftRank") as a boosting objective.

Each score is smoothed into a Gaussian :math:`S_j \sim N(s_j, \sigma^2)`, so document :math:`i`
beats document :math:`j` with probability

.. math:: \pi_{ij} = P(S_i > S_j) = \Phi\Big(\frac{s_i - s_j}{\sigma \sqrt 2}\Big).

The rank (0-based) of document :math:`j` is a sum of independent Bernoulli variables
:math:`1[S_i > S_j]` given :math:`s`, whose distribution :math:`p_j(r)` the paper builds by adding
the other documents one at a time:

.. math:: p_j^{(i)}(r) = p_j^{(i-1)}(r - 1)\, \pi_{ij} + p_j^{(i-1)}(r)\, (1 - \pi_{ij}),
          \qquad p_j^{(0)} = \delta_0.

SoftNDCG is the expected NDCG, :math:`\frac1Z \sum_j (2^{y_j} - 1) \sum_r D(r) p_j(r)` with
:math:`D(r) = 1 / \log_2(2 + r)` (0 beyond ``k``) and :math:`Z` the exact ideal DCG(@k).

The recursion treats the events :math:`S_i > S_j` (:math:`i \ne j`) as independent; they share
:math:`S_j`, so it is exact for a model that draws both scores afresh for every pair, and the
paper's approximation of the expectation under one joint draw of all scores. The two agree
when every document has at most one uncertain neighbour (the others many :math:`\sigma` away);
on crowded lists they differ (e.g. 0.690 against 0.743 for 7 documents with unit-variance
scores and :math:`\sigma = 0.7`).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from numba import njit, prange

from approx_gbdt._pairs import query_weights
from approx_gbdt._reference import finish_query
from approx_gbdt.objectives import (
    ApproxNDCG,
    _ApproxObjective,
    _check_bool,
    _check_k,
    _fmt,
    _positive_float,
)

__all__ = ["SoftNDCG"]

_HESSIANS = ("bound", "constant")
_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True)
def _add_bernoulli(p, m, prob):
    """``p <- p * [1 - prob, prob]`` on the first ``m`` entries (exact under truncation)."""
    for r in range(m - 1, 0, -1):
        p[r] = p[r] * (1.0 - prob) + p[r - 1] * prob
    p[0] *= 1.0 - prob


@njit(cache=True)
def _leave_one_out(probs, m, delta, buf, stack, out):
    """``out[i] = sum_r delta[r] q_i(r)``, ``q_i`` the rank distribution without Bernoulli ``i``.

    Divide and conquer: a segment's accumulator holds the convolution of every Bernoulli outside
    it; its halves get the accumulator times the other half. Only additions of Bernoullis (no
    division, so no loss of accuracy for probabilities near 0 or 1): O(len(probs) m log) time,
    O(m log) memory (``buf`` has one row per tree level).
    """
    nb = probs.shape[0]
    buf[0, :m] = 0.0
    buf[0, 0] = 1.0
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3], stack[0, 4] = 0, nb, 0, 0, 0
    sp = 1
    while sp > 0:
        sp -= 1
        lo, hi, d, olo, ohi = stack[sp, 0], stack[sp, 1], stack[sp, 2], stack[sp, 3], stack[sp, 4]
        if d > 0:
            buf[d, :m] = buf[d - 1, :m]
            for t in range(olo, ohi):
                _add_bernoulli(buf[d], m, probs[t])
        if hi - lo == 1:
            acc = 0.0
            for r in range(m):
                acc += delta[r] * buf[d, r]
            out[lo] = acc
        else:
            mid = (lo + hi) // 2
            stack[sp, 0], stack[sp, 1], stack[sp, 2], stack[sp, 3], stack[sp, 4] = (
                mid, hi, d + 1, lo, mid)
            sp += 1
            stack[sp, 0], stack[sp, 1], stack[sp, 2], stack[sp, 3], stack[sp, 4] = (
                lo, mid, d + 1, mid, hi)
            sp += 1


# A pair more than _U_MAX noise widths apart (|s_i - s_j| > _U_MAX sigma sqrt 2) is certain:
# its probability is within 1 - Phi(8.5) = 9.5e-18 of 0 or 1 (below the float64 resolution of
# the rank distribution's entries) and its density phi(8.5) = 8.2e-17 (times 1 / (sigma sqrt 2))
# is dropped from the gradient. A document certainly below j is left out of j's recursion, one
# certainly above shifts j's rank distribution by one.
_U_MAX = 8.5


@njit(cache=True)
def _discount_table(n, k):
    """m = min(k, n) (n without k) and D(x) = 1 / log2(x + 2) for x < m, 0 for m <= x <= n."""
    m = n if k <= 0 else min(k, n)
    disc = np.zeros(n + 1)
    for x in range(m):
        disc[x] = 1.0 / math.log2(x + 2.0)
    return m, disc


@njit(cache=True)
def _uncertain(s, a, b, j, scale, probs, dens, others):
    """The documents of query [a, b) whose order with j is uncertain: their pi_ij, density and
    in-query index in ``probs``, ``dens``, ``others``. Returns (count, number certainly above j)."""
    above = 0
    t = 0
    for i in range(a, b):
        if i == j:
            continue
        u = (s[i] - s[j]) * scale
        if u > _U_MAX:
            above += 1
        elif u >= -_U_MAX:
            probs[t] = 0.5 * math.erfc(-u / _SQRT2)
            dens[t] = math.exp(-0.5 * u * u) * _INV_SQRT_2PI * scale
            others[t] = i - a
            t += 1
    return t, above


@njit(cache=True)
def _rank_distribution(probs, u, length, p):
    """p[:length] = rank distribution of the u Bernoullis ``probs[:u]`` (truncated)."""
    p[:length] = 0.0
    p[0] = 1.0
    for t in range(u):
        _add_bernoulli(p, length, probs[t])


@njit(cache=True)
def _deconvolve_sensitivities(p, u, probs, delta, coef, inv, state, acc, idx, sens):
    """``sens[t] = sum_r delta[r] q_t(r)`` with ``q_t`` the distribution ``p`` (u + 1 entries) of
    the u Bernoullis ``probs[:u]`` without the t-th one, removed by deconvolution:

        q(r) = (p(r) - pi q(r - 1)) / (1 - pi)          forward, for pi <= 1/2
        q(r - 1) = (p(r) - (1 - pi) q(r)) / pi          backward, for pi > 1/2

    so that every step multiplies the error by at most 1. The loop over r is outside, the loop
    over the Bernoullis inside (independent, vectorised): O(u^2) per distribution.
    """
    for backward in (False, True):
        nb = 0
        for t in range(u):
            if (probs[t] > 0.5) == backward:
                idx[nb] = t
                coef[nb] = 1.0 - probs[t] if backward else probs[t]
                inv[nb] = 1.0 / probs[t] if backward else 1.0 / (1.0 - probs[t])
                nb += 1
        state[:nb] = 0.0
        acc[:nb] = 0.0
        for step in range(u):
            r = u - step if backward else step  # entry of p used
            pr = p[r]
            dr = delta[r - 1] if backward else delta[r]  # entry of q produced: r - 1 or r
            for b in range(nb):
                v = (pr - coef[b] * state[b]) * inv[b]
                state[b] = v
                acc[b] += dr * v
        for b in range(nb):
            sens[idx[b]] = acc[b]


@njit(parallel=True, cache=True)
def _value_kernel(s, gains, inv_z, group_ptr, sigma, k, out):
    scale = 1.0 / (sigma * _SQRT2)
    for q in prange(group_ptr.shape[0] - 1):
        a, b = group_ptr[q], group_ptr[q + 1]
        n = b - a
        if inv_z[q] == 0.0 or n < 2:
            out[q] = 0.0
            continue
        m, disc = _discount_table(n, k)
        probs = np.empty(n - 1)
        dens = np.empty(n - 1)
        others = np.empty(n - 1, dtype=np.int64)
        p = np.empty(n)
        total = 0.0
        for j in range(a, b):
            if gains[j] == 0.0:
                continue
            u, above = _uncertain(s, a, b, j, scale, probs, dens, others)
            if above >= m:
                continue
            length = min(m - above, u + 1)
            _rank_distribution(probs, u, length, p)
            e = 0.0
            for r in range(length):
                e += disc[r + above] * p[r]
            total += gains[j] * e
        out[q] = total * inv_z[q]


@njit(parallel=True, cache=True)
def _grad_hess_kernel(s, gains, inv_z, group_ptr, weights, sigma, k, constant_mode, constant,
                      normalize, grad, hess):
    """Gradient and Hessian approximation of L = -sum_q w_q SoftNDCG_q (see SoftNDCG)."""
    scale = 1.0 / (sigma * _SQRT2)
    for q in prange(group_ptr.shape[0] - 1):
        a, b = group_ptr[q], group_ptr[q + 1]
        n = b - a
        for i in range(a, b):
            grad[i] = 0.0
            hess[i] = 0.0
        if inv_z[q] == 0.0 or n < 2:
            continue
        m, disc = _discount_table(n, k)
        levels = 2
        while (1 << (levels - 2)) < n:
            levels += 1
        buf = np.empty((levels, n))
        stack = np.empty((2 * levels + 4, 5), dtype=np.int64)
        probs = np.empty(n - 1)
        dens = np.empty(n - 1)
        others = np.empty(n - 1, dtype=np.int64)
        sens = np.empty(n - 1)
        p = np.empty(n)
        delta = np.empty(n)
        coef = np.empty(n)
        inv = np.empty(n)
        state = np.empty(n)
        acc = np.empty(n)
        idx = np.empty(n, dtype=np.int64)
        g = grad[a:b]
        h = hess[a:b]
        iz = inv_z[q]
        for j in range(a, b):
            if gains[j] == 0.0:
                continue
            u, above = _uncertain(s, a, b, j, scale, probs, dens, others)
            if above >= m or u == 0:
                continue
            length = min(m - above, u + 1)
            for r in range(length):  # change of D when j drops one more rank
                delta[r] = disc[r + above + 1] - disc[r + above]
            # sens[t] = d E_j / d pi_ij for the t-th uncertain i
            if length == u + 1:  # whole distribution: remove one Bernoulli at a time
                _rank_distribution(probs, u, length, p)
                _deconvolve_sensitivities(p, u, probs, delta, coef, inv, state, acc, idx, sens)
            else:  # truncated at k: leave-one-out by divide and conquer
                _leave_one_out(probs[:u], length, delta, buf, stack, sens)
            gj = gains[j] * iz
            for t in range(u):
                lam = gj * sens[t] * dens[t]  # d (G_j / Z) / d s_i; minus that for s_j
                i = others[t]
                # L = -SoftNDCG
                g[i] -= lam
                g[j - a] += lam
                h[i] += abs(lam) * scale
                h[j - a] += abs(lam) * scale
        if constant_mode:
            for i in range(n):
                h[i] = constant
        finish_query(g, h, query_weights(weights, a, b), normalize)


class SoftNDCG(_ApproxObjective):
    r"""Negative SoftNDCG (expected NDCG under Gaussian score noise) as a boosting objective.

    .. math::

        \mathrm{SoftNDCG} = \frac1Z \sum_j (2^{y_j} - 1) \sum_{r} D(r)\, p_j(r), \qquad
        \pi_{ij} = \Phi\Big(\frac{s_i - s_j}{\sigma\sqrt2}\Big)

    with the rank distributions :math:`p_j` of Taylor et al. (2008) (module docstring). Used
    exactly like :class:`approx_gbdt.ApproxNDCG`: ``lgb.train({"objective": SoftNDCG()}, ...)``,
    ``xgb.train(params, dtrain, obj=SoftNDCG())``, and :meth:`value` / :meth:`grad_hess`.

    Gradient (analytic). :math:`p_j` is linear in each :math:`\pi_{ij}`:
    :math:`\partial p_j(r) / \partial \pi_{ij} = q_{ij}(r - 1) - q_{ij}(r)`, with :math:`q_{ij}` the
    rank distribution of :math:`j` without document :math:`i`, so
    :math:`c_{ij} = \partial E_j / \partial \pi_{ij} = \sum_r (D(r + 1) - D(r))\, q_{ij}(r)`,
    and with :math:`d_{ij} = \phi(u_{ij}) / (\sigma\sqrt2)`,
    :math:`u_{ij} = (s_i - s_j)/(\sigma\sqrt2)`,
    every pair contributes :math:`\lambda_{ij} = g_j c_{ij} d_{ij} / Z` to
    :math:`\partial\,\mathrm{SoftNDCG} / \partial s_i` and :math:`-\lambda_{ij}` to that of
    :math:`s_j`. For the whole list (``k=None``) every :math:`q_{ij}` is :math:`p_j` with one
    Bernoulli removed by deconvolution, run forward for :math:`\pi_{ij} \le 1/2` and backward
    otherwise, so that no step amplifies rounding errors (checked against autograd and finite
    differences). With ``k`` the truncated :math:`p_j` cannot be deconvolved backward, and a
    divide-and-conquer over the other documents (additions of Bernoullis only) gives every
    :math:`q_{ij}` in :math:`O(n\, k \log n)`. Pairs more than :math:`8.5\,\sigma\sqrt2` apart
    are certain (probability within 1e-17 of 0 or 1, below the float64 resolution of the
    distributions): a document certainly above :math:`j` shifts its distribution by one, one
    certainly below drops out, and neither costs anything.

    Cost and memory. Per query of :math:`n` documents, :math:`R` of them relevant and
    :math:`u \le n - 1` uncertain neighbours per relevant document: :math:`O(R\, u^2)` time
    for the whole list (:math:`O(n^3)`, the paper's recursion, when every document is
    relevant and the scores are close), :math:`O(R\, u\, k \log u)` with ``k``, and
    :math:`O(n + k \log n)` memory: one rank distribution at a time, never an
    :math:`n \times n` matrix. Only relevant documents need a rank distribution.

    Parameters
    ----------
    sigma : float, default 0.1
        Standard deviation :math:`\sigma_s` of the score noise, in score units (0.1 makes the
        pairwise probability about as sharp as ApproxNDCG's default ``alpha=10``).
    k : int, optional
        Expected NDCG@k: the rank distributions are kept only for ranks below ``k``, which is
        exact for NDCG@k (the recursion never moves probability to a lower rank) and costs
        :math:`O(R\, n\, k \log n)` per query. From a constant start every rank is
        Binomial(n - 1, 1/2), so on lists much longer than ``2 k`` the gradient is tiny, as for
        ``ApproxNDCG(k=...)``.
    max_docs : int, default 1000
        Longest query accepted; a longer one raises ``ValueError`` when the data set is first
        seen. One gradient of a query whose documents are all relevant and all within a few
        ``sigma`` of each other (the worst case) takes, on one core, about 1 ms at 100
        documents, 8 ms at 200, 45 ms at 400, 0.35 s at 800 and 3.2 s at 1,600 (``k=10``:
        1 ms, 14 ms, 46 ms, 0.18 s, 0.76 s); the cost scales with the number of relevant
        documents and drops as the scores spread out. Raise it knowingly, preferably with ``k``.
    hessian : {"bound", "constant"}, default "bound"
        ``"bound"``: :math:`\sum_{\text{pairs} \ni i} |\lambda| / (\sigma\sqrt2)`, the analogue of
        ApproxNDCG's ``"bound"`` (LambdaMART-like: each pair's absolute gradient times the
        sharpness of its smoothing). For one pair term :math:`G = c\,\Phi(u)`,
        :math:`|G''| = |G'|\,|u| / (\sigma\sqrt2)`; the approximation takes :math:`|u| = 1` (the
        pairs within one noise width carry the gradient) and holds :math:`c` fixed. It is
        positive wherever the gradient is not zero. The exact diagonal is not offered: it needs
        second derivatives of every rank distribution, O(n) times the gradient's cost.
        ``"constant"``: ``hessian_constant`` for every document of a non-trivial query.
    hessian_constant : float, default 1.0
    normalize : bool, default True
        Scale each query's gradient and Hessian by ``log2(1 + S) / S``, ``S = sum_i |g_i|``.

    Examples
    --------
    >>> obj = SoftNDCG(sigma=0.5)
    >>> obj.value([2.0, 1.0, 0.0], [2, 1, 0], [0, 3]).round(4).tolist()
    [0.9801]
    >>> grad, hess = obj.grad_hess([2.0, 1.0, 0.0], [2, 1, 0], [0, 3])
    >>> bool(grad[0] < 0 < grad[2]), bool((hess > 0).all())   # L = -SoftNDCG
    (True, True)
    """

    def __init__(self, *, sigma=0.1, k=None, max_docs=1000, hessian="bound",
                 hessian_constant=1.0, normalize=True):
        self.sigma = _positive_float("sigma", sigma)
        self._k = _check_k(k)
        self.k = k
        if isinstance(max_docs, bool) or not isinstance(max_docs, numbers.Integral) or \
                max_docs < 1:
            raise ValueError(f"max_docs must be a positive integer, got {max_docs!r}")
        self.max_docs = int(max_docs)
        if hessian not in _HESSIANS:
            raise ValueError(f"hessian must be one of {list(_HESSIANS)}, got {hessian!r}")
        self.hessian = hessian
        self.hessian_constant = _positive_float("hessian_constant", hessian_constant)
        self.normalize = _check_bool("normalize", normalize)
        self._cache = []

    def __repr__(self):
        k = "" if self.k is None else f", k={self.k}"
        const = ("" if self.hessian != "constant" and self.hessian_constant == 1.0
                 else f", hessian_constant={_fmt(self.hessian_constant)}")
        return (f"SoftNDCG(sigma={_fmt(self.sigma)}{k}, max_docs={self.max_docs}, "
                f"hessian={self.hessian!r}{const}, normalize={self.normalize})")

    def _prep_key(self):
        return ("softndcg", self._k, self.max_docs)

    def _prepare_arrays(self, labels, group_ptr):
        sizes = np.diff(group_ptr)
        if sizes.size and sizes.max() > self.max_docs:
            q = int(np.argmax(sizes))
            raise ValueError(
                f"query {q} has {sizes[q]} documents, more than SoftNDCG's max_docs="
                f"{self.max_docs}: its cost grows like n^3 log n per query and iteration. "
                "Raise max_docs knowingly, use k= (cost n^2 k log n), or ApproxNDCG (n^2)."
            )
        return ApproxNDCG._prepare_arrays(self, labels, group_ptr)

    def _value(self, s, prep):
        a = prep.arrays
        out = np.empty(prep.group_ptr.shape[0] - 1)
        _value_kernel(s, a["gains"], a["inv_z"], prep.group_ptr, self.sigma, self._k, out)
        return out

    def _grad_hess(self, s, prep, weights, hessian, n_threads=None):
        hessian = self.hessian if hessian is None else hessian
        if hessian not in _HESSIANS:
            raise ValueError(f"hessian must be one of {list(_HESSIANS)}, got {hessian!r}")
        a = prep.arrays
        grad = np.empty_like(s)
        hess = np.empty_like(s)
        _grad_hess_kernel(
            s, a["gains"], a["inv_z"], prep.group_ptr, weights, self.sigma, self._k,
            hessian == "constant", self.hessian_constant, self.normalize, grad, hess,
        )
        return grad, hess
