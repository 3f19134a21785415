"""ApproxNDCG and ApproxAP as custom objectives for LightGBM and XGBoost.

An objective instance is a callable that both libraries accept as it is::

    lgb.train({"objective": approx_ndcg_obj, "metric": "ndcg", "eval_at": [10]}, dtrain)
    lgb.LGBMRanker(objective=approx_ndcg_obj).fit(X, y, group=sizes)
    xgb.train(params, dmatrix, obj=approx_ndcg_obj)

It returns the gradient and a Hessian approximation of the loss ``L = -sum_q M_q`` where ``M_q``
is the smoothed measure of query ``q`` (Qin, Liu & Li 2010):

    pos^_i     = 1 + sum_{j != i} sigmoid(alpha (s_j - s_i))
    ApproxNDCG = (1 / Z) sum_i (2^{y_i} - 1) / log2(1 + pos^_i)
    ApproxAP   = (1 / R) sum_y r_y / pos^_y (1 + sum_{x != y} r_x sigmoid(beta (pos^_y - pos^_x)))
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import os
import sys
import warnings
import weakref
import zlib
from dataclasses import dataclass

import numpy as np

from approx_gbdt import _ap_chord as APC
from approx_gbdt import _kernels as K
from approx_gbdt import _lambdaloss as LL
from approx_gbdt import _pair_forces as P
from approx_gbdt import _reference as R
from approx_gbdt._measure_terms import TERM_LOG, ideal_value, separable_value
from approx_gbdt.hosts import doc_weights, read_call
from approx_gbdt.utils import MAX_GRADED_LABEL, check_group_ptr

__all__ = [
    "ApproxAP",
    "ApproxNDCG",
    "approx_ap_obj",
    "approx_ndcg_obj",
    "clear_cache",
    "gumbel_perturbed",
    "smoothed_positions",
]

HESSIANS = {
    "exact": K.HESS_EXACT,
    "bound": K.HESS_BOUND,
    "abs": K.HESS_ABS,
    "mixed": K.HESS_MIXED,
    "constant": K.HESS_CONSTANT,
    "mixed_sum": K.HESS_MIXED_SUM,
    "bound_sum": K.HESS_BOUND_SUM,
}

POSITIONS = ("sigmoid", "label_aware")
PAIR_FORCES = ("tangent", "chord", "swap")
AP_PAIR_FORCES = ("tangent", "chord")
AP_CHORD_HESSIANS = ("bound", "constant")  # chord forces have no exact diagonal

# 2^y - 1 must stay finite in float64, and so must the ideal DCG.
_MAX_LABEL = MAX_GRADED_LABEL
_CACHE_SIZE = 16
# Every objective that holds prepared datasets, for clear_cache() (weak: no objective is kept
# alive by this set).
_HOLDERS = weakref.WeakSet()


def clear_cache():
    """Release the prepared datasets held by every objective of this process.

    Each objective instance keeps the constants of the last 16 datasets it trained on (query
    boundaries, gains, normalisers, work arrays and the labels: about 11-12 MB per million
    documents besides the labels, measured for ApproxNDCG and ApproxAP, and 4 MB more for
    ``ApproxNDCG(lambdaloss=...)``'s sort order) so that the next
    boosting round reuses them. The ready-made objectives
    (``approx_ndcg_obj``, ...) live as long as the process, and so do their datasets; call
    this after training to give the memory back. Training afterwards works as before (the
    next call prepares its dataset again). ``obj.clear_cache()`` releases one objective's.

    Examples
    --------
    >>> clear_cache()
    >>> _ = approx_ndcg_obj([0, 1, 2], [0.0, 0.5, 1.0], None, [3])  # LGBMRanker's call
    >>> approx_ndcg_obj.cached_datasets
    1
    >>> clear_cache()
    >>> approx_ndcg_obj.cached_datasets
    0
    """
    for obj in list(_HOLDERS):
        obj.clear_cache()


def _positive_float(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


def _check_weight(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number in [0, 1], got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return float(value)


def _check_positive_int(name, value):
    """``value`` as an int (0 for None) once it is a positive integer or None."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer or None, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return int(value)


def _check_k(k):
    """The kernels' cutoff (0: none); above ``2**62`` (beyond any list) it is ``2**62``."""
    return min(_check_positive_int("k", k), 2**62)


MAX_GRADED_LEVELS = 32  # ApproxAP(graded=True): levels of relevance it accepts

TRUNCATION_BETA = 10.0  # the truncation's default sharpness


def _user_stacklevel():
    """``stacklevel`` for :func:`warnings.warn` that points at the first frame outside this
    package (the caller of ``warn`` is level 1)."""
    frame, level = sys._getframe(1), 1
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _check_truncation_beta(k, beta):
    """``beta`` of the smoothed top-k truncation; a value other than the default without ``k``
    is unused, which a ``UserWarning`` says."""
    beta = _positive_float("beta", beta)
    if k is None and beta != TRUNCATION_BETA:
        warnings.warn(f"beta={beta:g} has no effect without k: it sharpens the smoothed top-k "
                      "truncation", UserWarning, stacklevel=_user_stacklevel())
    return beta


def _check_bool(name, value):
    """``value`` as a bool: True, False, a NumPy bool or the integers 0 and 1."""
    if not (isinstance(value, (bool, np.bool_))
            or isinstance(value, numbers.Integral) and value in (0, 1)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _truncation_options(k, beta):
    """The repr's ``, k=.., beta=..`` (``beta`` without ``k`` only where it is not the
    default)."""
    if k is not None:
        return f", k={k}, beta={_fmt(beta)}"
    return "" if beta == TRUNCATION_BETA else f", beta={_fmt(beta)}"


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def _check_noise(noise, random_state):
    if isinstance(noise, bool) or not isinstance(noise, numbers.Real):
        raise TypeError(f"noise must be a non-negative number, got {noise!r}")
    if not (math.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be non-negative and finite, got {noise!r}")
    if random_state is not None and (
        isinstance(random_state, bool) or not isinstance(random_state, numbers.Integral)
        or random_state < 0
    ):
        raise ValueError(f"random_state must be a non-negative integer or None, got "
                         f"{random_state!r}")
    return float(noise)


def gumbel_perturbed(scores, *, alpha, noise, random_state):
    r"""Scores plus Gumbel noise on the scale of the smoothing, ``s + noise * eps / alpha``.

    ``eps ~ Gumbel(0, 1)`` i.i.d. per document (Bruch, Han, Bendersky & Najork 2020). The draw
    is a function of ``random_state`` and of the scores themselves (a CRC of their bytes), so
    that boosting gets a fresh draw every round (the scores change) and a training run is
    reproduced exactly, by the same or another instance, in any process.
    ``random_state=None`` draws from fresh OS entropy instead.

    Examples
    --------
    >>> s = np.zeros(4)
    >>> a = gumbel_perturbed(s, alpha=10.0, noise=1.0, random_state=0)
    >>> b = gumbel_perturbed(s, alpha=10.0, noise=1.0, random_state=0)
    >>> bool(np.array_equal(a, b)), bool(np.array_equal(a, s))
    (True, False)
    """
    noise = _check_noise(noise, random_state)
    alpha = _positive_float("alpha", alpha)
    s = np.asarray(scores, dtype=np.float64)
    if noise == 0.0:
        return s
    if random_state is None:
        rng = np.random.default_rng()
    else:
        rng = np.random.default_rng([int(random_state), zlib.crc32(s.tobytes())])
    return s + (noise / alpha) * rng.gumbel(size=s.shape)


def _as_scores(scores, n_rows=None):
    """Scores as a contiguous, writeable float64 vector; accepts float32 and XGBoost's (n, 1)
    shape."""
    s = np.asarray(scores)
    if s.ndim == 2 and s.shape[1] == 1:
        s = s[:, 0]
    if s.ndim != 1:
        raise ValueError(
            f"expected one score per document (shape (n,) or (n, 1)), got shape {s.shape}; "
            "ranking objectives do not support multi-output models"
        )
    if not np.issubdtype(s.dtype, np.number) or np.issubdtype(s.dtype, np.complexfloating):
        raise TypeError(f"scores must be real numbers, got dtype {s.dtype}")
    s = np.ascontiguousarray(s, dtype=np.float64)
    if not s.flags.writeable:  # (pandas' to_numpy, a memory map): the kernels take views of it
        s = s.copy()
    if n_rows is not None and s.shape[0] != n_rows:
        raise ValueError(f"got {s.shape[0]} scores for {n_rows} documents")
    if not np.all(np.isfinite(s)):
        bad = int(np.flatnonzero(~np.isfinite(s))[0])
        raise ValueError(f"scores must be finite: score {bad} is {s[bad]}")
    return s


def _as_labels(labels):
    y = np.asarray(labels)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.number) or np.issubdtype(y.dtype, np.complexfloating):
        raise TypeError(f"labels must be real numbers, got dtype {y.dtype}")
    y = np.ascontiguousarray(y, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        bad = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ValueError(f"labels must be finite: label {bad} is {y[bad]}")
    if y.size and y.min() < 0:
        bad = int(np.argmin(y))
        raise ValueError(f"labels must be non-negative: label {bad} is {y[bad]}")
    return y


def smoothed_positions(scores, group_ptr, *, alpha=10.0) -> np.ndarray:
    r"""Smoothed positions of Qin, Liu & Li (2010), query by query.

    .. math:: \hat\pi_i = 1 + \sum_{j \ne i} \sigma(\alpha (s_j - s_i))

    Examples
    --------
    >>> s = [4.20074, 3.12378, 4.40918, 1.55258, 4.13330]   # Qin et al., Table 1
    >>> smoothed_positions(s, [0, 5], alpha=100.0).round(5).tolist()
    [2.00118, 4.0, 1.0, 5.0, 2.99882]
    """
    alpha = _positive_float("alpha", alpha)
    s = _as_scores(scores)
    ptr = check_group_ptr(group_ptr, s.shape[0])
    pos = np.empty_like(s)
    K.smoothed_positions(s, ptr, alpha, pos)
    return pos


@functools.cache
def _option_names(cls):
    """Keyword options of an objective class, in the order of its constructor."""
    return tuple(
        name for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    )


def _option_default(cls, name):
    return inspect.signature(cls.__init__).parameters[name].default


def _fmt(x):
    """A number for a repr: ``%g`` where that is exact, else every digit (round trip)."""
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


@dataclass
class _Prepared:
    """What one dataset needs at every iteration, computed once (see ``_prepare``)."""

    labels: np.ndarray
    group_ptr: np.ndarray
    key: tuple
    arrays: dict
    work: dict
    checked: bool = False  # warn_if_nothing_to_learn has looked at it


class _ApproxObjective:
    """Shared machinery: input checks, per-dataset preparation and host-library adapters."""

    _par_min = K._PAR_MIN  # queries of at least this many documents split across threads
    _split_share = K._SPLIT_SHARE  # ... where they hold more than this times a thread's share
    _grid_mode = 0  # long queries: grid path (_grid) where cheaper; 1 always, -1 never
    _small_n = K.SMALL_N  # shorter queries take the direct loops (_small; 0: the windowed ones)
    _lanes_n = K.LANES_N  # ... and shorter still, the lane loops (_lanes; 0: never)
    hessian_scale = 1.0  # an option of the measures; 1 for SoftNDCG, which lacks it

    # the Hessian modes of the measure (the kernels' has_hessian: "bound_sum" is ApproxAP's)
    _hessians = {name: mode for name, mode in HESSIANS.items() if K.has_hessian(mode, False)}

    def __init__(self, *, alpha, hessian, hessian_floor, hessian_constant, normalize,
                 hessian_scale=1.0):
        self.alpha = _positive_float("alpha", alpha)
        self._mode(hessian)
        self.hessian = hessian
        if isinstance(hessian_floor, bool) or not isinstance(hessian_floor, numbers.Real):
            raise TypeError(f"hessian_floor must be a number, got {hessian_floor!r}")
        if not (math.isfinite(hessian_floor) and hessian_floor > 0):
            raise ValueError(f"hessian_floor must be positive and finite, got {hessian_floor!r}")
        self.hessian_floor = float(hessian_floor)
        self.hessian_constant = _positive_float("hessian_constant", hessian_constant)
        self.normalize = _check_bool("normalize", normalize)
        self.hessian_scale = _positive_float("hessian_scale", hessian_scale)
        self._cache = []

    # -- pickling (dask workers, sklearn.clone): the cache stays behind ------------------------
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_cache"] = []
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    # -- per-dataset preparation ---------------------------------------------------------------
    def _prep_key(self):
        raise NotImplementedError

    def _prepare_arrays(self, labels, group_ptr):
        raise NotImplementedError

    def _prepare(self, labels, group_ptr, *, cache):
        """Validate labels and boundaries and compute the query constants, once per dataset.

        The cache compares contents, not identities: a dataset is recognised by equal labels
        and boundaries (an O(n) check, negligible next to the O(n^2) kernels), so one instance
        can serve several datasets (``lgb.cv``) and never reuses constants after a change.
        """
        key = self._prep_key()
        if cache:
            for i, p in enumerate(self._cache):
                if (
                    p.key == key
                    and p.labels.shape == np.shape(labels)
                    and p.group_ptr.shape == np.shape(group_ptr)
                    and np.array_equal(p.group_ptr, group_ptr)
                    and np.array_equal(p.labels, labels)
                ):
                    if i:
                        self._cache.insert(0, self._cache.pop(i))
                    return p
        y = _as_labels(labels)
        ptr = check_group_ptr(group_ptr, y.shape[0])
        n = y.shape[0]
        work = K.make_work(n)
        prep = _Prepared(y, ptr, key, self._prepare_arrays(y, ptr), work)
        if cache:
            self._cache.insert(0, prep)
            del self._cache[_CACHE_SIZE:]
            _HOLDERS.add(self)
        return prep

    def clear_cache(self):
        """Release the prepared datasets of this objective (see :func:`clear_cache`)."""
        self._cache = []
        _HOLDERS.discard(self)

    @property
    def cached_datasets(self) -> int:
        """Number of prepared datasets this objective holds (at most 16)."""
        return len(self._cache)

    # -- public API ----------------------------------------------------------------------------
    def value(self, scores, labels, group_ptr) -> np.ndarray:
        """Per-query surrogate values ``M_q`` (not negated); 0 for a query with nothing relevant.

        Parameters
        ----------
        scores, labels : array_like, shape (n,)
        group_ptr : array_like of int, shape (n_queries + 1,)
            Query boundaries ``[0, n_1, n_1 + n_2, ..., n]``.
        """
        prep = self._prepare(labels, group_ptr, cache=False)
        s = _as_scores(scores, prep.labels.shape[0])
        return self._value(s, prep)

    def grad_hess(self, scores, labels, group_ptr, weights=None, *, hessian=None):
        """Gradient and Hessian of ``L = -sum_q w_q M_q`` with respect to every score.

        Parameters
        ----------
        scores, labels : array_like, shape (n,)
            Scores may be float32 or of shape (n, 1); they are used in float64.
        group_ptr : array_like of int, shape (n_queries + 1,)
            Query boundaries ``[0, n_1, n_1 + n_2, ..., n]``.
        weights : array_like, shape (n,) or (n_queries,), optional
            Per-document weights (LightGBM's convention: each document's gradient and Hessian
            are multiplied by its weight) or per-query weights (XGBoost's ranking convention:
            the whole query is multiplied). When ``n == n_queries`` every query has a single
            document and the gradient is zero either way.
        hessian : str, optional
            Override the instance's Hessian approximation for this call ("exact" gives the
            exact diagonal of the Hessian of L, which may be negative).

        Returns
        -------
        grad, hess : numpy.ndarray of float64, shape (n,)
        """
        prep = self._prepare(labels, group_ptr, cache=False)
        s = _as_scores(scores, prep.labels.shape[0])
        return self._scaled_grad_hess(s, prep, doc_weights(weights, prep.group_ptr), hessian)

    def __call__(self, preds, data, weight=None, group=None):
        """Host-library entry point: ``f(preds, lgb.Dataset)`` (``lgb.train``),
        ``f(preds, xgb.DMatrix)`` (``xgb.train``) or ``f(y_true, y_pred, weight, group)``
        (``lgb.LGBMRanker``, group = query sizes); :func:`approx_gbdt.hosts.read_call` reads
        the arguments.
        """
        scores, data = read_call(preds, data, weight, group)
        if data.host == "xgboost" and data.labels.shape[0] == 0:
            return np.zeros(0), np.zeros(0)  # a Dask worker that holds no training rows
        prep = self._prepare(data.labels, data.group_ptr, cache=True)
        if not prep.checked:  # once per training dataset; a worker's part may lack what the
            prep.checked = True  # whole data has
            if not data.part:
                warn_if_nothing_to_learn(self, prep)
            if data.positions:
                warnings.warn(
                    f"{type(self).__name__} does not read the Dataset's position= (LightGBM's "
                    "lambdarank learns a position bias from it); it is ignored",
                    UserWarning, stacklevel=2,
                )
        s = _as_scores(scores, prep.labels.shape[0])
        return self._scaled_grad_hess(s, prep, data.doc_weights(), None, data.threads)

    # -- the measure ------------------------------------------------------------------------------
    def _term_args(self):
        """``(kind, k, beta, theta)`` of the kernels (``_kernels.grad_hess``)."""
        raise NotImplementedError

    def _value(self, s, prep):
        return self._kernel_value(s, prep, prep.arrays)

    def _kernel_value(self, s, prep, a):
        """The fast kernels' per-query values with the measure's arrays ``a``."""
        kind, k, beta, theta = self._term_args()
        return K.value(s, a["gains"], a["inv_z"], a["rel_idx"], a["rel_ptr"], prep.group_ptr,
                       self.alpha, kind, k, beta, theta)

    def _relevance(self, prep):
        """Per-document relevance whose order the measure rewards (the saturation warning's
        notion of a misordered query): the gains."""
        return prep.arrays["gains"]

    def _scaled_grad_hess(self, s, prep, weights, hessian, n_threads=None):
        """:meth:`_grad_hess` with the Hessian times ``hessian_scale`` (but the exact one)."""
        grad, hess = self._grad_hess(s, prep, weights, hessian, n_threads)
        self._scale_hessian(hess, hessian)
        return grad, hess

    def _scale_hessian(self, hess, hessian):
        if self.hessian_scale != 1.0 and (self.hessian if hessian is None else hessian) != "exact":
            hess *= self.hessian_scale

    def _grad_hess(self, s, prep, weights, hessian, n_threads=None):
        grad, hess = self._kernel_grad_hess(s, prep, prep.arrays, weights, hessian, n_threads)
        warn_if_saturated(self, s, prep, grad, weights)
        return grad, hess

    def _kernel_grad_hess(self, s, prep, a, weights, hessian, n_threads):
        """The fast kernels' gradient and Hessian with the measure's arrays ``a``."""
        kind, k, beta, theta = self._term_args()
        grad = np.empty_like(s)
        hess = np.empty_like(s)
        K.grad_hess(
            s, a["gains"], a["inv_z"], a["rel_idx"], a["rel_ptr"], prep.group_ptr, weights,
            self.alpha, kind, k, beta, theta, self._mode(hessian), self.hessian_floor,
            self.hessian_constant, self.normalize, grad, hess, prep.work["order"], self._par_min,
            grid_mode=self._grid_mode, n_threads=n_threads, small_n=self._small_n,
            split_share=self._split_share, lanes_n=self._lanes_n,
        )
        return grad, hess

    def _plain(self):
        """Whether :meth:`grad_hess` is the surrogate's own gradient (no option changes it)."""
        return True

    def _reference_grad_hess(self, scores, labels, group_ptr, weights=None, *, hessian=None):
        """:meth:`grad_hess` by the exact O(n^2) reference loops (no window, no sorting), and
        the per-document ``v = dM/dpos^`` and ``e = d2M/dpos^2``: for tests and benchmarks."""
        if not self._plain():
            raise NotImplementedError(
                f"{self!r}: the reference loops compute the surrogate's own gradient only"
            )
        prep = self._prepare(labels, group_ptr, cache=False)
        s = _as_scores(scores, prep.labels.shape[0])
        w = doc_weights(weights, prep.group_ptr)
        a = prep.arrays
        kind, k, beta, theta = self._term_args()
        n = s.shape[0]
        grad, hess, pos, v, e, acc_a, acc_b, acc_w = (np.zeros(n) for _ in range(8))
        common = (self._mode(hessian), self.hessian_floor, self.hessian_constant,
                  self.normalize, grad, hess, pos, v, e, acc_a, acc_b, acc_w)
        if kind == K.KIND_AP:
            R.ref_ap_grad_hess(s, a["rel_idx"], a["rel_ptr"], a["inv_z"], prep.group_ptr, w,
                               self.alpha, beta, *common, np.zeros(n), np.zeros(n))
        else:
            R.ref_separable_grad_hess(s, a["gains"], a["inv_z"], prep.group_ptr, w, self.alpha,
                                      kind, k, beta, theta, *common)
        self._scale_hessian(hess, hessian)
        return grad, hess, v, e

    def _reference_value(self, scores, labels, group_ptr):
        """:meth:`value` by the exact O(n^2) reference loops."""
        prep = self._prepare(labels, group_ptr, cache=False)
        s = _as_scores(scores, prep.labels.shape[0])
        a = prep.arrays
        kind, k, beta, theta = self._term_args()
        pos = np.empty_like(s)
        if kind == K.KIND_AP:
            return R.ref_ap_value(s, a["rel_idx"], a["rel_ptr"], a["inv_z"], prep.group_ptr,
                                  self.alpha, beta, pos)
        return R.ref_separable_value(s, a["gains"], a["inv_z"], prep.group_ptr, self.alpha,
                                     kind, k, beta, theta, pos)

    # -- parameters -------------------------------------------------------------------------------
    def get_options(self) -> dict:
        """The constructor's keyword options and their values.

        An objective is not a scikit-learn estimator: it has no ``get_params``, so that
        ``LGBMRanker(objective=...)``, whose ``fit`` passes every nested ``objective__*``
        parameter on to LightGBM, sees none. :class:`ApproxXGBRanker` exposes the options as
        ``objective__<option>`` for searches; a LightGBM search lists objectives instead.

        Examples
        --------
        >>> ApproxNDCG(k=5).get_options()["k"]
        5
        """
        return {name: getattr(self, name) for name in _option_names(type(self))}

    def replace(self, **changes):
        """A new objective of the same class with some options changed (the others kept).

        Examples
        --------
        >>> ApproxNDCG(k=5).replace(alpha=3.0)
        ApproxNDCG(alpha=3, k=5, beta=10, hessian='mixed', hessian_floor=0.1, normalize=True)
        """
        names = _option_names(type(self))
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} has no option {', '.join(map(repr, unknown))}; "
                f"its options are {', '.join(names)}"
            )
        return type(self)(**{**self.get_options(), **changes})

    def _mode(self, hessian):
        hessian = self.hessian if hessian is None else hessian
        if hessian not in self._hessians:
            raise ValueError(
                f"{type(self).__name__}'s hessian must be one of {sorted(self._hessians)}, "
                f"got {hessian!r}"
            )
        return self._hessians[hessian]

    def _options(self):
        return ""

    def __repr__(self):
        cls = type(self)
        const = ""
        if self.hessian == "constant" or (
                self.hessian_constant != _option_default(cls, "hessian_constant")):
            const = f", hessian_constant={_fmt(self.hessian_constant)}"
        scale = ("" if self.hessian_scale == _option_default(cls, "hessian_scale")
                 else f", hessian_scale={_fmt(self.hessian_scale)}")
        return (
            f"{cls.__name__}(alpha={_fmt(self.alpha)}{self._options()}, "
            f"hessian={self.hessian!r}{const}, hessian_floor={_fmt(self.hessian_floor)}{scale}, "
            f"normalize={self.normalize})"
        )


def exp2_gains(labels):
    """Graded gains ``2^y - 1`` (labels at most 1000, so that they stay finite)."""
    if labels.size and labels.max() > _MAX_LABEL:
        top = labels.max()
        raise ValueError(
            f"label {top:g} is too large for the gain 2^y - 1 in float64 "
            f"(labels must be at most {_MAX_LABEL:g})"
            + ("; LightGBM stores an infinite label as 1e+38: check the labels with "
               "np.isfinite before building the Dataset" if top >= np.float32(1e38) else "")
        )
    return np.expm1(labels * math.log(2.0))


def separable_arrays(gains, inv_z, group_ptr):
    """Prepared arrays of a separable measure: gains, normaliser and the number of queries
    that can have a gradient (a document with a gain, a normaliser and two documents)."""
    n_active = int(np.count_nonzero((inv_z > 0) & (np.diff(group_ptr) > 1)))
    return {"gains": gains, "inv_z": inv_z, "rel_idx": None, "rel_ptr": None,
            "n_active": n_active}


def queries_to_rank(relevance, group_ptr):
    """Per query, whether it holds two documents of different ``relevance`` (else every
    ranking of it scores the same); False for an empty query."""
    sizes = np.diff(group_ptr)
    out = np.zeros(sizes.shape[0], dtype=bool)
    filled = sizes > 0
    if filled.any():
        starts = group_ptr[:-1][filled]
        out[filled] = (np.maximum.reduceat(relevance, starts)
                       > np.minimum.reduceat(relevance, starts))
    return out


def rank_requirement(threshold):
    """What a query must hold to have something to rank, in words (``threshold`` None: the
    labels are graded relevance; else binary relevance, ``label >= threshold``)."""
    if threshold is None:
        return "two documents with different labels"
    return f"a relevant (label >= {threshold:g}) and a non-relevant document"


def warn_if_nothing_to_learn(obj, prep):
    """Warn, once per training dataset (host calls), when no query holds two documents of
    different relevance to the measure (:func:`queries_to_rank`; for the measures of binary
    relevance, a relevant and a non-relevant one): every ranking then scores the same, and
    there is nothing to learn. Not on one worker's part of a distributed run
    (``HostData.part``), which may lack what the whole data has."""
    if prep.labels.shape[0] == 0 or queries_to_rank(obj._relevance(prep), prep.group_ptr).any():
        return
    threshold = getattr(obj, "threshold", None)
    y = prep.labels
    warnings.warn(
        f"{type(obj).__name__}: no query of these {prep.group_ptr.shape[0] - 1} has "
        f"{rank_requirement(threshold)} (labels {y.min():g} to {y.max():g}): every ranking "
        "scores the same, so there is nothing to learn"
        + ("" if threshold is None else
           f"; set threshold= to the labels' scale, e.g. {type(obj).__name__}(threshold=...)"),
        RuntimeWarning,
        stacklevel=5,
    )


def warn_if_truncated_away(obj, prep, grad, weights):
    """Warn when a truncated measure (``k``) gives no gradient although some query could."""
    if prep.arrays["n_active"] and not grad.any() and (weights.size == 0 or weights.any()):
        warnings.warn(
            f"{type(obj).__name__}(k={obj.k}, beta={obj.beta:g}) has no gradient at these "
            f"scores: every document's smoothed position is far below the top {obj.k}, so the "
            "truncation factor underflows and boosting will not move (typical at a "
            "constant start on queries much longer than 2 k). Use k=None, a smaller beta, "
            "or start from a fitted model (init_score / base_margin).",
            RuntimeWarning,
            stacklevel=4,
        )


def misordered_queries(scores, relevance, group_ptr):
    """Number of queries that rank a document above a more relevant one (ties worst-first)."""
    nq = group_ptr.shape[0] - 1
    qid = np.repeat(np.arange(nq), np.diff(group_ptr))
    order = np.lexsort((relevance, -scores, qid))
    r, q = relevance[order], qid[order]
    bad = (r[1:] > r[:-1]) & (q[1:] == q[:-1])
    return int(np.unique(q[1:][bad]).size)


_SATURATED = 1e-10  # warn_if_saturated: a gradient this small counts as none


def warn_if_saturated(obj, scores, prep, grad, weights):
    """Warn when no document has a gradient although some query is misordered.

    The sigmoids of the smoothed positions saturate when ``alpha`` times the score gaps is
    large (the kernels count a pair as saturated once that product exceeds a few tens): the
    documents then sit at their exact positions and boosting cannot move them, even where a
    less relevant document is ranked first. A truncated measure (``k``) has its own warning.
    "No gradient" is every ``|g|`` at most ``_SATURATED`` times its document's weight (1
    without weights): a misordered pair whose ``alpha`` times score gap exceeds about 23 has
    a force below that, e.g. 5e-14 at 30, which no tree learns from. Queries of weight 0 do
    not count as misordered.
    """
    if getattr(obj, "_k", 0) or (weights.size and not weights.any()) or grad.size == 0:
        return
    # the first documents settle the usual case (a gradient), so that a training call does
    # not pay a pass over every document
    for part in (slice(0, 64), slice(None)):
        scale = np.abs(weights[part]) if weights.size else 1.0
        if np.any(np.abs(grad[part]) > _SATURATED * scale):
            return
    a = prep.arrays
    relevance = obj._relevance(prep)
    active = np.repeat((a["inv_z"] > 0) & (np.diff(prep.group_ptr) > 1), np.diff(prep.group_ptr))
    if weights.size:  # a query of weight 0 is no query to the host
        active &= weights != 0
    bad = misordered_queries(scores, np.where(active, relevance, 0.0), prep.group_ptr)
    if bad:
        warnings.warn(
            f"{type(obj).__name__}(alpha={obj.alpha:g}) has no gradient at these scores "
            f"although {bad} of {prep.group_ptr.shape[0] - 1} queries rank a less relevant "
            "document above a more relevant one: alpha times the score gaps is so large that "
            "the sigmoids of the smoothed positions saturate, and boosting will not move. "
            "Start from smaller scores (init_score / base_margin) or use a smaller alpha.",
            RuntimeWarning,
            stacklevel=4,
        )


class ApproxNDCG(_ApproxObjective):
    r"""Negative ApproxNDCG as a boosting objective.

    .. math::

        \hat\pi_i = 1 + \sum_{j \ne i} \sigma(\alpha (s_j - s_i)), \qquad
        \mathrm{ApproxNDCG} = \frac{1}{Z} \sum_i \frac{2^{y_i} - 1}{\log_2(1 + \hat\pi_i)}
        \, T(\hat\pi_i)

    with :math:`Z` the exact ideal DCG (@k) of the query, and the smoothed truncation
    :math:`T(p) = \sigma(\beta (k + 1/2 - p))` when ``k`` is given (:math:`T = 1` otherwise),
    which tends to :math:`1[\pi_i \le k]` as ``beta`` grows. A query with :math:`Z = 0` or a
    single document contributes nothing.

    Parameters
    ----------
    alpha : float, default 10.0
        Sharpness of the smoothed positions, relative to the score scale.
    k : int, optional
        Truncate at the top ``k`` positions (ApproxNDCG@k). From a constant start every
        document sits at the smoothed position ``(n + 1) / 2``, so a query much longer than
        ``2 k`` gets (numerically) no gradient, and a ``RuntimeWarning`` says so: use the
        full list, a smaller ``beta``, or start from a fitted model. The full list ranks
        better on the benchmarks, even at @k (docs/why_these_defaults.md).
    hessian : {"mixed", "mixed_sum", "bound", "abs", "constant", "exact"}, default "mixed"
        Hessian handed to the booster (``L = -sum ApproxNDCG``); "mixed" ranks best on the
        benchmarks (docs/why_these_defaults.md):

        - ``"exact"``: exact diagonal; often negative, for analysis only.
        - ``"bound"``: ``alpha^2 sum_j w_kj |v_j - v_k|`` (Gauss-Newton-like, LambdaMART-like).
        - ``"abs"``: absolute value of the exact diagonal.
        - ``"mixed"``: ``max(exact, hessian_floor * bound)``.
        - ``"mixed_sum"``: ``max(exact, hessian_floor * alpha^2 S_k)`` with
          ``S_k = sum_j w_kj |v_j|`` (the bound) where ``v_k = 0`` and
          ``S_k = sum_j w_kj (|v_j| + |v_k|) / 2`` elsewhere: sums the gradient's pass has
          anyway, so that long lists skip the bound's own pass (about half the kernel's time
          on lists of 1,000 documents, where the grid is used). Against "mixed" on the
          benchmarks: level on NDCG@10 on three data sets (but lower MAP on generated data),
          better on the MSLR sample (docs/why_these_defaults.md, section 14). Only with
          ``positions="sigmoid"`` and ``pair_force="tangent"``.
        - ``"constant"``: ``hessian_constant`` for every document of a non-trivial query.
    beta : float, default 10.0
        Sharpness of the truncation; unused without ``k`` (another value then warns).
    hessian_floor : float, default 0.1
        Floor, relative to the bound (or ``alpha^2 S_k``), of the ``"mixed"`` (or
        ``"mixed_sum"``) Hessian.
    hessian_constant : float, default 1.0
    hessian_scale : float, default 1.0
        Multiplies the Hessian handed to the booster (every ``hessian`` but ``"exact"``, which
        stays the exact diagonal of the Hessian of L). A leaf's Newton value ``-G / (H +
        lambda)`` becomes ``-G / (hessian_scale H + lambda)``: the same trees as scale 1 with
        the learning rate, the leaf L2 ``lambda`` and the minimum child Hessian divided by
        ``hessian_scale``, and the minimum split gain (and XGBoost's ``max_delta_step``)
        multiplied by it (both 0 by default). A scale below 1 lengthens the steps of a
        Hessian approximation that overestimates the curvature.
    normalize : bool, default True
        Scale each query's gradient and Hessian by ``log2(1 + S) / S``, ``S = sum_i |g_i|``
        (as LightGBM's ``lambdarank_norm``).
    positions : {"sigmoid", "label_aware"}, default "sigmoid"
        ``"label_aware"`` counts a less relevant document ``j`` in ``i``'s position with the
        softplus ``log2(1 + e^{alpha (s_j - s_i)})`` instead of the sigmoid: an upper bound of
        the indicator whose slope does not vanish when ``j`` is far above ``i``.
    pair_force : {"tangent", "chord", "swap"}, default "tangent"
        ``"tangent"`` is the gradient of the surrogate. ``"chord"`` replaces, per pair, both
        documents' discount slopes by the slope of the chord of the (truncated) discount
        between their two smoothed positions, so that a pair's force is the value of swapping
        them per position moved; ``"swap"`` multiplies that by ``max(1, |pos^_j - pos^_i|)``
        (the whole value of the swap, as LambdaRank). Neither is a gradient, so neither has
        an exact Hessian: ``"mixed"`` is then ``max(exact diagonal of the surrogate,
        hessian_floor * bound)`` with the bound of the chord forces, and ``"exact"`` and
        ``"abs"`` are refused.
        Both options run an O(n^2) pair loop per query (approx_gbdt._pair_forces) instead of
        the windowed fast kernels.
    noise : float, default 0.0
        Stochastic smoothing: gradient and Hessian are evaluated at ``s + noise * eps /
        alpha`` with ``eps ~ Gumbel(0, 1)`` drawn afresh each round
        (:func:`gumbel_perturbed`). ``value`` is never perturbed.
    random_state : int or None, default 0
        Seed of the noise; the same seed reproduces a training run exactly.
    lambdaloss : float in [0, 1], default 0.0
        Weight ``w`` of LambdaLoss's NDCG-Loss2++ (Wang et al. 2018) in the objective: the
        gradient and Hessian are ``(1 - w)`` times those above plus ``w`` times those of

        .. math::

            \sum_{y_i > y_j} w_{ij} \log(1 + e^{-(s_i - s_j)}), \quad
            w_{ij} = \frac{G_i - G_j}{Z} \Big( \Big|\frac{1}{D(r_i)} - \frac{1}{D(r_j)}\Big|
            + \mu \Big(\frac{1}{D(d)} - \frac{1}{D(d + 1)}\Big) \Big)

        with :math:`r` the exact positions by the scores (ties by index; with ``noise``, the
        perturbed scores, as for the ApproxNDCG part), held fixed while differentiating,
        :math:`d = |r_i - r_j|`, :math:`D(x) = \log_2(1 + x)`, :math:`\mu = 10`; its Hessian
        is its exact diagonal (``hessian`` applies to the ApproxNDCG part). Each part is
        normalised per query as ``normalize`` says; with ``normalize=False`` the ApproxNDCG
        part scales with ``alpha`` and ``w`` is no longer a share. A full-list option (``k``
        must be None); an O(n^2) pair loop per query (approx_gbdt._lambdaloss). ``value``
        stays ApproxNDCG.
    lambdaloss_window : int or None, default None
        With ``lambdaloss``, count only the pairs with a document among the first
        ``lambdaloss_window`` positions (as LightGBM's ``lambdarank_truncation_level``) or at
        most ``lambdaloss_window`` positions apart: O(window n) per query instead of O(n^2).
        None counts every pair. Needs ``lambdaloss > 0``.
    """

    def __init__(
        self,
        *,
        alpha=10.0,
        k=None,
        hessian="mixed",
        beta=TRUNCATION_BETA,
        hessian_floor=0.1,
        hessian_constant=1.0,
        hessian_scale=1.0,
        normalize=True,
        positions="sigmoid",
        pair_force="tangent",
        noise=0.0,
        random_state=0,
        lambdaloss=0.0,
        lambdaloss_window=None,
    ):
        super().__init__(
            alpha=alpha,
            hessian=hessian,
            hessian_floor=hessian_floor,
            hessian_constant=hessian_constant,
            normalize=normalize,
            hessian_scale=hessian_scale,
        )
        self._k = _check_k(k)
        self.k = k
        self.beta = _check_truncation_beta(k, beta)
        self.positions = _check_choice("positions", positions, POSITIONS)
        self.pair_force = _check_choice("pair_force", pair_force, PAIR_FORCES)
        self._check_chord_hessian(hessian)
        self.noise = _check_noise(noise, random_state)
        self.random_state = random_state
        self.lambdaloss = _check_weight("lambdaloss", lambdaloss)
        if self.lambdaloss and self._k:
            raise ValueError(f"lambdaloss is a full-list option: k must be None, got k={k!r}")
        self._window = _check_positive_int("lambdaloss_window", lambdaloss_window)
        if self._window and not self.lambdaloss:
            raise ValueError("lambdaloss_window has no effect without lambdaloss > 0")
        self.lambdaloss_window = lambdaloss_window

    def _check_chord_hessian(self, hessian):
        if self.pair_force != "tangent" and hessian in ("exact", "abs"):
            raise ValueError(
                f"pair_force={self.pair_force!r} has no exact Hessian: hessian must be "
                f"'mixed', 'bound' or 'constant', got {hessian!r}"
            )
        if hessian == "mixed_sum" and (self.pair_force != "tangent"
                                       or self.positions != "sigmoid"):
            raise ValueError(
                "hessian='mixed_sum' takes its floor from the fast kernels' sums: it needs "
                "positions='sigmoid' and pair_force='tangent' (use 'mixed' with "
                f"positions={self.positions!r}, pair_force={self.pair_force!r})"
            )

    def _options(self):
        text = _truncation_options(self.k, self.beta)
        if self.positions != "sigmoid":
            text += f", positions={self.positions!r}"
        if self.pair_force != "tangent":
            text += f", pair_force={self.pair_force!r}"
        if self.noise or self.random_state != _option_default(type(self), "random_state"):
            text += f", noise={_fmt(self.noise)}, random_state={self.random_state!r}"
        if self.lambdaloss:
            text += f", lambdaloss={_fmt(self.lambdaloss)}"
        if self.lambdaloss_window is not None:
            text += f", lambdaloss_window={self.lambdaloss_window}"
        return text

    def _plain(self):
        return (self.positions == "sigmoid" and self.pair_force == "tangent" and not self.noise
                and not self.lambdaloss)

    def _prep_key(self):
        return ("ndcg", self._k)

    def _term_args(self):
        return TERM_LOG, self._k, self.beta, 0.0

    def _prepare_arrays(self, labels, group_ptr):
        gains = exp2_gains(labels)
        z = ideal_value(gains, group_ptr, TERM_LOG, self._k, 0.0)
        if not np.all(np.isfinite(z)):
            raise ValueError("the ideal DCG overflows float64: labels are too large")
        return separable_arrays(gains, np.divide(1.0, z, out=np.zeros_like(z), where=z > 0),
                                group_ptr)

    def _value(self, s, prep):
        if self.positions == "sigmoid":
            return super()._value(s, prep)
        a = prep.arrays
        kind, k, beta, theta = self._term_args()
        pos = np.empty_like(s)
        P.label_aware_positions(s, prep.labels, prep.group_ptr, self.alpha, pos)
        return separable_value(a["gains"], a["inv_z"], prep.group_ptr, kind, k, beta, theta, pos)

    def _grad_hess(self, s, prep, weights, hessian, n_threads=None):
        if hessian is not None:
            self._check_chord_hessian(hessian)
        s = gumbel_perturbed(s, alpha=self.alpha, noise=self.noise,
                             random_state=self.random_state)
        if self.positions == "sigmoid" and self.pair_force == "tangent":
            grad, hess = super()._grad_hess(s, prep, weights, hessian, n_threads)
        else:
            a = prep.arrays
            kind, k, beta, theta = self._term_args()
            grad = np.empty_like(s)
            hess = np.empty_like(s)
            with K.threads_capped(n_threads):
                P.pair_force_grad_hess(
                    s, prep.labels, a["gains"], a["inv_z"], prep.group_ptr, weights, self.alpha,
                    kind, k, beta, theta, self.positions == "label_aware",
                    self.pair_force != "tangent", self.pair_force == "swap",
                    self._mode(hessian), self.hessian_floor, self.hessian_constant,
                    self.normalize, grad, hess,
                )
            warn_if_saturated(self, s, prep, grad, weights)
        if self._k:
            warn_if_truncated_away(self, prep, grad, weights)
        if self.lambdaloss:
            w = self.lambdaloss
            g2 = np.empty_like(s)
            h2 = np.empty_like(s)
            a = prep.arrays
            # a window beyond any query's length counts every pair (and fits in int64)
            window = min(self._window, prep.labels.shape[0])
            order = prep.work.get("lambdaloss_order")
            if order is None:
                order = prep.work["lambdaloss_order"] = np.full(s.shape[0], -1, np.int32)
            with K.threads_capped(n_threads):
                LL.lambdaloss_grad_hess(s, a["gains"], a["inv_z"], prep.group_ptr, weights,
                                        LL.MU, window, self.normalize, g2, h2, order)
            grad = (1.0 - w) * grad + w * g2
            hess = (1.0 - w) * hess + w * h2
        return grad, hess


class ApproxAP(_ApproxObjective):
    r"""Negative ApproxAP as a boosting objective.

    .. math::

        \mathrm{ApproxAP} = \frac{1}{R} \sum_y \frac{r_y}{\hat\pi_y}
        \Big(1 + \sum_{x \ne y} r_x \, \sigma(\beta (\hat\pi_y - \hat\pi_x))\Big)

    with binary relevance :math:`r_i = 1[y_i \ge \mathrm{threshold}]`, :math:`R = \sum_i r_i`
    and the smoothed positions :math:`\hat\pi` of :class:`ApproxNDCG`. A query with
    :math:`R = 0` or a single document contributes nothing.

    Parameters
    ----------
    alpha : float, default 10.0
        Sharpness of the smoothed positions.
    beta : float, default 0.3
        Sharpness of the smoothed indicator ``1[pos_x < pos_y]``. A small beta ranks better
        than Qin et al.'s large values (docs/why_these_defaults.md): AP does not depend on the
        order of two relevant documents, but a sharp indicator gives such pairs large gradients.
    threshold : float, default 1.0
        Labels at or above it are relevant.
    hessian : {"bound", "bound_sum", "mixed", "abs", "constant", "exact"}, default "bound"
        As in :class:`ApproxNDCG` (not ``"mixed_sum"``, whose sums need a ``v`` of one sign);
        "bound" ranks best for ApproxAP. ``"bound_sum"``: ``alpha^2 sum_j w_kj (|v_j| +
        |v_k|)``, the bound with ``|v_j - v_k|`` replaced by its upper bound ``|v_j| + |v_k|``
        (equal on every pair with an irrelevant document, where ``v_j`` or ``v_k`` is 0). Its
        sums are kernel sums, so lists that take the grid (512 documents or more, where it is
        the cheaper path) skip the pass the bound's ``|v_j - v_k|`` between relevant documents
        takes there (25-55 % of the kernel's time);
        on the benchmarks it ranks about as well as "bound" on LightGBM and worse on XGBoost
        (docs/why_these_defaults.md, section 15). The exact diagonal (and so ``"abs"`` and
        ``"mixed"``) costs O(n R^2) per query, against O(n^2 + n R) for the bounds and
        ``"constant"``.
    hessian_floor, hessian_constant, normalize
        As in :class:`ApproxNDCG`.
    hessian_scale : float, default 0.5
        As in :class:`ApproxNDCG`: multiplies the Hessian (every mode but ``"exact"``). The
        bound is about ten times ApproxNDCG's mixed Hessian at a constant start, so its
        Newton steps are short (docs/why_these_defaults.md, sections 1 and 4.1); 0.5 gains MAP
        on the benchmarks' large data on both hosts and loses nothing significant on the
        small sets; on LightGBM 0.25 gains more on large data but loses a little on small
        data.
    pair_force : {"tangent", "chord"}, default "tangent"
        "tangent": the gradient of -ApproxAP, a sum over pairs of ``alpha w_kj (v_j - v_k)``
        (``v = dM/dpos^``, zero on the irrelevant documents). "chord": each pair gets the
        value of swapping its two documents per position moved: no force between two
        relevant documents (swapping them leaves AP unchanged), and between a relevant
        ``k`` and an irrelevant ``j``, ``k``'s precision term ``(1 + S_k) / pos^_k`` by its
        chord between the two positions instead of its tangent at ``pos^_k``:

        .. math::

            v_{kj} = v_k + \frac{1 + S_k}{R} \Big(\frac{1}{\hat\pi_k^2}
            - \frac{1}{\hat\pi_k \hat\pi_j}\Big),
            \quad S_k = \sum_{x \ne k} r_x \, \sigma(\beta (\hat\pi_k - \hat\pi_x))

        so ``dM/ds_k = -alpha sum_{j irrelevant} w_kj v_kj`` for a relevant ``k`` and
        ``alpha sum_{k relevant} w_kj v_kj`` for an irrelevant ``j``. Not the gradient of a
        function: its Hessians are "bound" (``alpha^2 sum_j w_kj |v_kj|`` over those pairs)
        and "constant". The positions come from the fast kernels, the pair terms from an
        O(n log n + n W + R W_beta) loop per query (``W`` the documents within the sigmoid's
        window of each, ``R`` the relevant ones, ``W_beta`` those within ``37 / beta``
        positions; approx_gbdt._ap_chord): 3.6-6.3 times the default's time up to 1,000
        documents a query with labels 0-4, O(n^2) on long lists with narrow scores (16 times
        at 10,000 documents a query with N(0, 1) scores).
    graded : bool, default False
        Average ApproxAP over the relevance levels: with ``t_1 < ... < t_T`` the distinct
        label values at or above ``threshold`` in the dataset the objective is called on (the
        training set; each ``lgb.cv`` fold, Dask partition or ``value`` call its own), the
        objective is

        .. math::

            \frac{1}{T} \sum_{l=1}^{T} \mathrm{ApproxAP}_{t_l},

        ``ApproxAP_t`` the measure above with ``r_i = 1[y_i >= t]`` (0 for a query with no
        label that high), each level's gradient and Hessian normalised per query as
        ``normalize`` says before the mean. Graded labels then count: a document of label 3
        gains on one of label 1 at the levels 2 and 3, while each level remains a binary AP (at
        ``t_1`` the measure the benchmarks report as MAP). With chord forces it is the first
        ApproxAP level with or ahead of LightGBM's lambdarank on MAP and NDCG on all four of
        the benchmarks' graded data sets (docs/why_these_defaults.md, section 18); with
        tangent forces it gains little. Costs up to ``T`` times the binary objective (with
        chord forces the levels share the positions, the sort, the windows, the sigmoids of
        the relevant pairs and the pair weights: 1.7-3.3 times chord forces alone with labels
        0-4); with a single level it is the binary objective. Labels with more than 32
        distinct values at or above ``threshold`` (continuous scores) are refused.
    """

    # (the kernels' has_hessian: "mixed_sum" needs v <= 0; ApproxAP's coupled v can be positive)
    _hessians = {name: mode for name, mode in HESSIANS.items() if K.has_hessian(mode, True)}

    def __init__(
        self,
        *,
        alpha=10.0,
        beta=0.3,
        threshold=1.0,
        hessian="bound",
        hessian_floor=0.1,
        hessian_constant=1.0,
        hessian_scale=0.5,
        normalize=True,
        pair_force="tangent",
        graded=False,
    ):
        super().__init__(
            alpha=alpha,
            hessian=hessian,
            hessian_floor=hessian_floor,
            hessian_constant=hessian_constant,
            normalize=normalize,
            hessian_scale=hessian_scale,
        )
        self.pair_force = _check_choice("pair_force", pair_force, AP_PAIR_FORCES)
        if not isinstance(graded, (bool, np.bool_)):
            raise TypeError(f"graded must be True or False, got {graded!r}")
        self.graded = bool(graded)
        self._check_chord_hessian(hessian)
        self.beta = _positive_float("beta", beta)
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
            raise TypeError(f"threshold must be a number, got {threshold!r}")
        if not math.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold!r}")
        self.threshold = float(threshold)

    def _check_chord_hessian(self, hessian):
        if self.pair_force == "chord" and hessian not in AP_CHORD_HESSIANS:
            raise ValueError(
                "pair_force='chord' is not a gradient and has no exact diagonal: its hessian "
                f"is 'bound' or 'constant', got {hessian!r}"
            )

    def _options(self):
        text = f", beta={_fmt(self.beta)}, threshold={_fmt(self.threshold)}"
        if self.pair_force != "tangent":
            text += f", pair_force={self.pair_force!r}"
        if self.graded:
            text += ", graded=True"
        return text

    def _levels(self, prep):
        """The arrays of each relevance level (one, the threshold's, unless ``graded``)."""
        return self._levels_of(prep.arrays)

    def _levels_of(self, arrays):
        return arrays["levels"] if self.graded else (arrays,)

    def _grad_hess(self, s, prep, weights, hessian, n_threads=None):
        if hessian is not None:
            self._check_chord_hessian(hessian)
        levels = self._levels(prep)
        if self.pair_force == "chord":  # every level in one pass over the pairs
            rel_idx, rel_ptr, inv_r = prep.arrays["stacked"]
            grad = np.empty_like(s)
            hess = np.empty_like(s)
            pos = np.empty_like(s)
            with K.threads_capped(n_threads):
                K.smoothed_positions(s, prep.group_ptr, self.alpha, pos)
                APC.ap_chord_grad_hess(
                    s, pos, rel_idx, rel_ptr, inv_r, prep.group_ptr, weights, self.alpha,
                    self.beta, self._mode(hessian), self.hessian_floor, self.hessian_constant,
                    self.normalize, grad, hess,
                )
        else:
            grad = hess = None
            for a in levels:
                g, h = self._kernel_grad_hess(s, prep, a, weights, hessian, n_threads)
                if grad is None:
                    grad, hess = g, h
                else:
                    grad += g
                    hess += h
            if len(levels) > 1:
                grad /= len(levels)
                hess /= len(levels)
        warn_if_saturated(self, s, prep, grad, weights)
        return grad, hess

    def _value(self, s, prep):
        levels = self._levels(prep)
        return sum(self._kernel_value(s, prep, a) for a in levels) / len(levels)

    def _relevance(self, prep):
        y = prep.labels
        if self.graded:  # every level: the grades at or above the threshold
            return np.where(y >= self.threshold, y - self.threshold + 1.0, 0.0)
        return (y >= self.threshold).astype(np.float64)

    def _reference_value(self, scores, labels, group_ptr):
        if self.graded:
            raise NotImplementedError(f"{self!r}: the reference loops know one level only")
        return super()._reference_value(scores, labels, group_ptr)

    def _plain(self):
        return self.pair_force == "tangent" and not self.graded

    def _prep_key(self):
        return ("ap", self.threshold, self.graded, self.pair_force)

    def _term_args(self):
        return K.KIND_AP, 0, self.beta, 0.0

    def _prepare_arrays(self, labels, group_ptr):
        arrays = self._relevant_arrays(labels >= self.threshold, group_ptr)
        if self.graded:
            values = np.unique(labels[labels >= self.threshold])
            if values.size > MAX_GRADED_LEVELS:
                raise ValueError(
                    f"graded=True makes one relevance level per distinct label at or above "
                    f"the threshold, each costing a binary ApproxAP: these labels have "
                    f"{values.size} (at most {MAX_GRADED_LEVELS}); round them to grades"
                )
            arrays["levels"] = (
                tuple(self._relevant_arrays(labels >= v, group_ptr) for v in values)
                if values.size > 1 else (arrays,)
            )
        if self.pair_force == "chord":
            arrays["stacked"] = _stacked_levels(self._levels_of(arrays))
        return arrays

    @staticmethod
    def _relevant_arrays(rel, group_ptr):
        """The kernels' arrays of ApproxAP with the relevant documents ``rel`` (a mask)."""
        qid = np.repeat(np.arange(group_ptr.shape[0] - 1), np.diff(group_ptr))
        idx = np.flatnonzero(rel)
        rel_idx = (idx - group_ptr[qid[idx]]).astype(np.int64)
        counts = np.bincount(qid[idx], minlength=group_ptr.shape[0] - 1)
        rel_ptr = np.zeros(group_ptr.shape[0], dtype=np.int64)
        np.cumsum(counts, out=rel_ptr[1:])
        inv_r = np.divide(1.0, counts, out=np.zeros(counts.shape[0]), where=counts > 0)
        return {"gains": None, "inv_z": inv_r, "rel_idx": rel_idx, "rel_ptr": rel_ptr}


def _stacked_levels(levels):
    """The relevant documents of every level in the chord kernel's layout: ``rel_idx``
    concatenated, ``rel_ptr`` of shape ``(T, n_queries + 1)`` into it and ``inv_r`` of shape
    ``(T, n_queries)`` (``approx_gbdt._ap_chord.ap_chord_grad_hess``)."""
    if len(levels) == 1:
        a = levels[0]
        return a["rel_idx"], a["rel_ptr"][None, :], a["inv_z"][None, :]
    offsets = np.cumsum([0] + [a["rel_idx"].shape[0] for a in levels[:-1]])
    rel_idx = np.concatenate([a["rel_idx"] for a in levels])
    rel_ptr = np.stack([a["rel_ptr"] + off for a, off in zip(levels, offsets)])
    inv_r = np.stack([a["inv_z"] for a in levels])
    return rel_idx, rel_ptr, inv_r


approx_ndcg_obj = ApproxNDCG()
approx_ap_obj = ApproxAP()
