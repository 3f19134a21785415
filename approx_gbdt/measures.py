r"""The measure registry: every smoothed measure approx_gbdt offers, by name.

Qin, Liu & Li (2010) turn any position-based measure into a smooth surrogate by replacing the
exact positions with the smoothed positions

.. math:: \hat\pi_i = 1 + \sum_{j \ne i} \sigma(\alpha (s_j - s_i)).

A *separable* measure of one query is

.. math:: M = \frac{1}{Z} \sum_i g_i \, t(\hat\pi_i), \qquad t(p) = b(p) \, T_k(p)

with a per-document gain :math:`g_i`, a per-query normaliser :math:`Z` (the query contributes
nothing when :math:`1/Z = 0`), a position term :math:`b` and, when a cutoff ``k`` is given,
the smoothed truncation :math:`T_k(p) = \sigma(\beta (k + 1/2 - p))`. The kernels need only
:math:`v_i = dM/d\hat\pi_i` and :math:`e_i = d^2M/d\hat\pi_i^2`; the pair loops that turn them
into the gradient and every Hessian approximation are shared by all measures.

- ApproxNDCG (@k): gain ``2^y - 1``, Z the ideal DCG (@k), b(p) = 1 / log2(1 + p).
- ApproxDCG (@k): as ApproxNDCG with Z = 1 (not normalised).
- ApproxMRR: gain ``r``, Z = sum_{i <= R} 1/i (the best value), b(p) = 1 / p.
- ApproxPrecision@k: gain ``r``, Z = k, b = 1 (only the truncation).
- ApproxRecall@k: gain ``r``, Z = R, b = 1.
- ApproxRBP: gain ``r``, Z = 1 / (1 - theta), b(p) = theta^(p - 1).
- ApproxAP couples the relevant documents (not separable); it has its own term.

with binary relevance :math:`r_i = 1[y_i \ge \mathrm{threshold}]` and :math:`R = \sum_i r_i`.
:data:`MEASURES` maps each objective's name (``"approx_ndcg"``, ...) to a :class:`MeasureInfo`;
:func:`parse_objective` builds an objective from a name such as ``"approx_precision@5"``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from approx_gbdt import metrics
from approx_gbdt._measure_terms import TERM_GEOM, TERM_LOG, TERM_ONE, TERM_RECIP, ideal_value
from approx_gbdt.objectives import (
    TRUNCATION_BETA,
    ApproxAP,
    ApproxNDCG,
    _ApproxObjective,
    _check_k,
    _check_truncation_beta,
    _fmt,
    _positive_float,
    _truncation_options,
    approx_ap_obj,
    approx_ndcg_obj,
    exp2_gains,
    separable_arrays,
    warn_if_truncated_away,
)

__all__ = [
    "MEASURES",
    "ApproxDCG",
    "ApproxMRR",
    "ApproxPrecision",
    "ApproxRBP",
    "ApproxRecall",
    "MeasureInfo",
    "approx_dcg_obj",
    "approx_mrr_obj",
    "approx_precision10_obj",
    "approx_rbp_obj",
    "approx_recall10_obj",
    "parse_objective",
]


def _threshold(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"threshold must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"threshold must be finite, got {value!r}")
    return float(value)


def _binary_gains(labels, threshold):
    return (labels >= threshold).astype(np.float64)


def _relevant_counts(gains, group_ptr):
    """Number of documents with a gain, per query."""
    nq = group_ptr.shape[0] - 1
    qid = np.repeat(np.arange(nq), np.diff(group_ptr))
    return np.bincount(qid, weights=(gains > 0).astype(np.float64), minlength=nq)


def _inverse(z):
    return np.divide(1.0, z, out=np.zeros_like(z), where=z > 0)


class _Separable(_ApproxObjective):
    """A separable measure: gains, normaliser and position term (see the module docstring)."""

    term = TERM_LOG  # the position term b(p), a TERM_* kind of approx_gbdt._measure_terms
    _theta = 0.0  # parameter of the position term (the persistence of RBP)

    def _init(self, *, alpha, hessian, hessian_floor, hessian_constant, hessian_scale,
              normalize, k=None, beta=TRUNCATION_BETA, threshold=None):
        super().__init__(alpha=alpha, hessian=hessian, hessian_floor=hessian_floor,
                         hessian_constant=hessian_constant, normalize=normalize,
                         hessian_scale=hessian_scale)
        self._k = _check_k(k)
        self.k = k
        self.beta = _check_truncation_beta(k, beta)
        if threshold is not None:
            self.threshold = _threshold(threshold)

    def gains(self, labels):
        """Per-document gains ``g_i`` (labels already checked: finite, non-negative)."""
        return _binary_gains(labels, self.threshold)

    def inverse_normaliser(self, gains, group_ptr):
        """``1 / Z`` per query (0: the query contributes nothing)."""
        raise NotImplementedError

    def _prep_key(self):
        return (type(self).__name__, self._k, getattr(self, "threshold", None))

    def _term_args(self):
        return self.term, self._k, self.beta, self._theta

    def _prepare_arrays(self, labels, group_ptr):
        gains = self.gains(labels)
        return separable_arrays(gains, self.inverse_normaliser(gains, group_ptr), group_ptr)

    def _grad_hess(self, s, prep, weights, hessian, n_threads=None):
        grad, hess = super()._grad_hess(s, prep, weights, hessian, n_threads)
        if self._k:
            warn_if_truncated_away(self, prep, grad, weights)
        return grad, hess

    def _options(self):
        out = _truncation_options(self.k, self.beta)
        if hasattr(self, "threshold"):
            out += f", threshold={_fmt(self.threshold)}"
        return out


_HESSIAN_DOC = """hessian : {"mixed", "mixed_sum", "bound", "abs", "constant", "exact"}
        Hessian handed to the booster, as in :class:`~approx_gbdt.ApproxNDCG` (default
        "mixed").
    hessian_floor, hessian_constant, hessian_scale, normalize
        As in :class:`~approx_gbdt.ApproxNDCG`."""


class ApproxDCG(_Separable):
    r"""Negative ApproxDCG (not normalised) as a boosting objective.

    .. math::

        \mathrm{ApproxDCG} = \sum_i \frac{2^{y_i} - 1}{\log_2(1 + \hat\pi_i)} \, T_k(\hat\pi_i)

    ApproxNDCG without the division by the ideal DCG: a query counts in proportion to its
    gains, for users who weight queries that way. A query without a relevant document or with
    a single document contributes nothing. With ``normalize=True`` (default) each query's
    gradient is still rescaled by ``log2(1 + S) / S`` (``S = sum |g|``), which evens the query
    weights out again: pass ``normalize=False`` to keep DCG's weighting.

    Parameters
    ----------
    alpha, k, beta
        As in :class:`~approx_gbdt.ApproxNDCG`.
    {hessian}

    Examples
    --------
    >>> obj = ApproxDCG(alpha=100.0)
    >>> obj.value([3.0, 2.0, 1.0], [2, 0, 1], [0, 3]).round(4).tolist()   # 3 + 1 / log2(4)
    [3.5]
    """

    term = TERM_LOG

    def __init__(self, *, alpha=10.0, k=None, hessian="mixed", beta=TRUNCATION_BETA,
                 hessian_floor=0.1, hessian_constant=1.0, hessian_scale=1.0, normalize=True):
        self._init(alpha=alpha, k=k, beta=beta, hessian=hessian, hessian_floor=hessian_floor,
                   hessian_constant=hessian_constant, hessian_scale=hessian_scale,
                   normalize=normalize)

    def gains(self, labels):
        return exp2_gains(labels)

    def inverse_normaliser(self, gains, group_ptr):
        return (_relevant_counts(gains, group_ptr) > 0).astype(np.float64)


class ApproxMRR(_Separable):
    r"""Negative ApproxMRR as a boosting objective.

    .. math::

        \mathrm{ApproxMRR} = \frac{1}{H_R} \sum_i \frac{r_i}{\hat\pi_i}, \qquad
        H_R = \sum_{i=1}^{R} \frac{1}{i}

    The sum of the smoothed reciprocal ranks of the relevant documents (as in TF-Ranking's
    ApproxMRR), divided by its largest value :math:`H_R` (every relevant document on top), so
    that it lies in (0, 1] like the reciprocal rank. With one relevant document it is exactly
    the smoothed reciprocal rank :math:`1 / \hat\pi`; with more, it also rewards the relevant
    documents after the first, which the exact reciprocal rank ignores (its smooth version
    would couple the documents through a smoothed minimum). A query with :math:`R = 0` or a
    single document contributes nothing.

    Parameters
    ----------
    alpha : float, default 10.0
        Sharpness of the smoothed positions.
    threshold : float, default 1.0
        Labels at or above it are relevant.
    {hessian}

    Examples
    --------
    >>> ApproxMRR(alpha=100.0).value([3.0, 2.0, 1.0], [0, 1, 0], [0, 3]).round(4).tolist()
    [0.5]
    """

    term = TERM_RECIP

    def __init__(self, *, alpha=10.0, threshold=1.0, hessian="mixed", hessian_floor=0.1,
                 hessian_constant=1.0, hessian_scale=1.0, normalize=True):
        self._init(alpha=alpha, threshold=threshold, hessian=hessian,
                   hessian_floor=hessian_floor, hessian_constant=hessian_constant,
                   hessian_scale=hessian_scale, normalize=normalize)

    def inverse_normaliser(self, gains, group_ptr):
        return _inverse(ideal_value(gains, group_ptr, TERM_RECIP, 0, 0.0))


class ApproxPrecision(_Separable):
    r"""Negative ApproxPrecision@k as a boosting objective.

    .. math:: \mathrm{ApproxP@k} = \frac{1}{k} \sum_i r_i \, \sigma(\beta (k + 1/2 - \hat\pi_i))

    The smoothed truncation tends to :math:`1[\pi_i \le k]` as ``beta`` grows. Divided by
    ``k`` even for a list shorter than ``k``, as :func:`~approx_gbdt.precision`. A query with
    :math:`R = 0` or a single document contributes nothing. As for ApproxNDCG@k, a query much
    longer than ``2 k`` gets (numerically) no gradient from a constant start, and a
    ``RuntimeWarning`` says so.

    Parameters
    ----------
    k : int
        Cutoff (required).
    alpha : float, default 10.0
        Sharpness of the smoothed positions.
    beta : float, default 1.0
        Sharpness of the truncation; smoother than ApproxNDCG@k's 10 because the truncation
        is this measure's only signal (a sharp one moves only the documents near position k).
    threshold : float, default 1.0
        Labels at or above it are relevant.
    {hessian}

    Examples
    --------
    >>> obj = ApproxPrecision(k=2, alpha=100.0, beta=100.0)
    >>> obj.value([3.0, 2.0, 1.0], [1, 0, 1], [0, 3]).round(4).tolist()
    [0.5]
    """

    term = TERM_ONE

    def __init__(self, *, k, alpha=10.0, beta=1.0, threshold=1.0, hessian="mixed",
                 hessian_floor=0.1, hessian_constant=1.0, hessian_scale=1.0, normalize=True):
        if k is None:
            raise ValueError(f"{type(self).__name__} needs a cutoff k")
        self._init(alpha=alpha, k=k, beta=beta, threshold=threshold, hessian=hessian,
                   hessian_floor=hessian_floor, hessian_constant=hessian_constant,
                   hessian_scale=hessian_scale, normalize=normalize)

    def inverse_normaliser(self, gains, group_ptr):
        return (_relevant_counts(gains, group_ptr) > 0) / float(self._k)


class ApproxRecall(ApproxPrecision):
    r"""Negative ApproxRecall@k as a boosting objective.

    .. math:: \mathrm{ApproxR@k} = \frac{1}{R} \sum_i r_i \, \sigma(\beta (k + 1/2 - \hat\pi_i))

    ApproxPrecision@k divided by :math:`R` instead of :math:`k`: the queries with few relevant
    documents weigh more. Parameters as in :class:`ApproxPrecision`.

    Examples
    --------
    >>> obj = ApproxRecall(k=2, alpha=100.0, beta=100.0)
    >>> obj.value([3.0, 2.0, 1.0], [1, 0, 1], [0, 3]).round(4).tolist()
    [0.5]
    """

    def inverse_normaliser(self, gains, group_ptr):
        return _inverse(_relevant_counts(gains, group_ptr))


class ApproxRBP(_Separable):
    r"""Negative ApproxRBP (rank-biased precision, Moffat & Zobel 2008) as a boosting objective.

    .. math:: \mathrm{ApproxRBP} = (1 - \theta) \sum_i r_i \, \theta^{\hat\pi_i - 1}

    with the persistence :math:`\theta` (the probability that a user goes on to the next
    document): a geometric discount, steep at the top for a small :math:`\theta`. Not
    normalised by the ideal ranking (RBP's definition); lies in [0, 1). A query with
    :math:`R = 0` or a single document contributes nothing.

    Parameters
    ----------
    alpha : float, default 10.0
        Sharpness of the smoothed positions.
    persistence : float, default 0.8
        :math:`\theta`, in (0, 1).
    threshold : float, default 1.0
        Labels at or above it are relevant.
    {hessian}

    Examples
    --------
    >>> obj = ApproxRBP(alpha=100.0, persistence=0.5)
    >>> obj.value([3.0, 2.0, 1.0], [1, 0, 2], [0, 3]).round(4).tolist()   # 0.5 (1 + 0.25)
    [0.625]
    """

    term = TERM_GEOM

    def __init__(self, *, alpha=10.0, persistence=0.8, threshold=1.0, hessian="mixed",
                 hessian_floor=0.1, hessian_constant=1.0, hessian_scale=1.0, normalize=True):
        self._init(alpha=alpha, threshold=threshold, hessian=hessian,
                   hessian_floor=hessian_floor, hessian_constant=hessian_constant,
                   hessian_scale=hessian_scale, normalize=normalize)
        p = _positive_float("persistence", persistence)
        if p >= 1.0:
            raise ValueError(f"persistence must be in (0, 1), got {persistence!r}")
        self.persistence = self._theta = p

    def inverse_normaliser(self, gains, group_ptr):
        return (_relevant_counts(gains, group_ptr) > 0) * (1.0 - self.persistence)

    def _prep_key(self):
        return (*super()._prep_key(), self.persistence)

    def _options(self):
        return f", persistence={_fmt(self.persistence)}" + super()._options()


for _cls in (ApproxDCG, ApproxMRR, ApproxPrecision, ApproxRecall, ApproxRBP):
    _cls.__doc__ = _cls.__doc__.replace("{hessian}", _HESSIAN_DOC)

approx_dcg_obj = ApproxDCG()
approx_mrr_obj = ApproxMRR()
approx_precision10_obj = ApproxPrecision(k=10)
approx_recall10_obj = ApproxRecall(k=10)
approx_rbp_obj = ApproxRBP()


# ----------------------------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasureInfo:
    """One registered measure.

    Attributes
    ----------
    name : str
        Name in :func:`parse_objective`, the CLI (``--objective``) and the benchmarks.
    objective : type
        The objective class.
    instance : object
        Its ready-made instance.
    cutoff : {"optional", "required", "none"}
        Whether ``name@k`` sets the option ``k``.
    exact : callable or None
        ``exact(scores, labels, group_ptr, objective)``: the exact per-query measure that the
        surrogate tends to as ``alpha`` and ``beta`` grow (distinct scores; NaN where it is
        undefined), for the tests. None when :mod:`approx_gbdt.metrics` has no such measure.
    formula : str
        One-line definition, for the documentation.
    """

    name: str
    objective: type
    instance: object
    cutoff: str
    exact: object
    formula: str


def _register(*infos):
    return {info.name: info for info in infos}


MEASURES = _register(
    MeasureInfo(
        "approx_ndcg", ApproxNDCG, approx_ndcg_obj, "optional",
        lambda s, y, p, o: metrics.ndcg(s, y, p, k=o.k),
        "(1/IDCG) sum_i (2^y_i - 1) / log2(1 + pos_i) [* T_k(pos_i)]",
    ),
    MeasureInfo(
        "approx_dcg", ApproxDCG, approx_dcg_obj, "optional", None,
        "sum_i (2^y_i - 1) / log2(1 + pos_i) [* T_k(pos_i)]",
    ),
    MeasureInfo(
        "approx_mrr", ApproxMRR, approx_mrr_obj, "none", None,
        "(1/H_R) sum_i r_i / pos_i,  H_R = sum_{i <= R} 1/i",
    ),
    MeasureInfo(
        "approx_precision", ApproxPrecision, approx_precision10_obj, "required",
        lambda s, y, p, o: metrics.precision(s, y, p, k=o.k, threshold=o.threshold),
        "(1/k) sum_i r_i T_k(pos_i)",
    ),
    MeasureInfo(
        "approx_recall", ApproxRecall, approx_recall10_obj, "required",
        lambda s, y, p, o: metrics.recall(s, y, p, k=o.k, threshold=o.threshold),
        "(1/R) sum_i r_i T_k(pos_i)",
    ),
    MeasureInfo(
        "approx_rbp", ApproxRBP, approx_rbp_obj, "none",
        lambda s, y, p, o: metrics.rbp(s, y, p, persistence=o.persistence,
                                       threshold=o.threshold),
        "(1 - theta) sum_i r_i theta^(pos_i - 1)",
    ),
    MeasureInfo(
        "approx_ap", ApproxAP, approx_ap_obj, "none",
        lambda s, y, p, o: metrics.average_precision(s, y, p, threshold=o.threshold),
        "(1/R) sum_a r_a / pos_a (1 + sum_{b != a} r_b sig(beta (pos_a - pos_b)))",
    ),
)

def parse_objective(spec, **options):
    """An objective from its registered name, with an optional cutoff and options.

    ``spec`` is a name of :data:`MEASURES` (``"approx_ndcg"``), optionally followed by
    ``@k`` for the measures with a cutoff (``"approx_ndcg@10"``, ``"approx_precision@5"``);
    case and surrounding spaces are ignored. Keyword ``options`` go to the constructor.

    Examples
    --------
    >>> parse_objective("approx_ndcg@10")
    ApproxNDCG(alpha=10, k=10, beta=10, hessian='mixed', hessian_floor=0.1, normalize=True)
    >>> parse_objective("approx_mrr", alpha=5.0).alpha
    5.0
    """
    if not isinstance(spec, str):
        raise TypeError(f"an objective name must be a string, got {spec!r}")
    text = spec.strip().lower()
    name, at, cutoff = text.partition("@")
    info = MEASURES.get(name)
    if info is None:
        raise ValueError(
            f"unknown objective {spec!r}: expected one of {', '.join(MEASURES)} "
            "(with @k for a cutoff, e.g. 'approx_ndcg@10')"
        )
    if at:
        if info.cutoff == "none":
            raise ValueError(f"objective {spec!r}: {name} takes no cutoff")
        if not cutoff.isdigit() or int(cutoff) < 1:
            raise ValueError(f"objective {spec!r}: the cutoff must be a positive integer")
        if "k" in options:
            raise ValueError(f"objective {spec!r}: give the cutoff either as @k or as k=")
        options["k"] = int(cutoff)
    elif info.cutoff == "required" and "k" not in options:
        options["k"] = info.instance.k
    return info.objective(**options)
