"""The grid path of long queries (``_grid``) against the exact kernels.

Three checks:

- the far partner boxes' series (``_far_tables``, ``_node_exps``) against the kernels;
- the kernel sums of ``_grid`` against dense NumPy sums, per document, within the stated bound
  ``|err_k| <= eps_K sum_{j in k's window} |c_j| + (n - 1) e^-T * scale`` (``_grid`` module notes);
- the objectives with the grid forced (``_grid_mode = 1``) against the exact O(n^2) reference
  loops, within the target ``1e-6 * max_k |exact_k|`` (max-norm relative over the query), on
  adversarial queries: all scores equal, two far-apart clusters, heavy ties, huge spreads, a
  dense cluster with a sparse tail; and the automatic choice on a long query against the exact
  windowed kernel.
"""

import math

import numpy as np
import pytest
from numba import njit

from approx_gbdt import _grid as G
from approx_gbdt import _kernels as K
from approx_gbdt import _reference as R
from approx_gbdt._pairs import _windows, pair_work
from approx_gbdt.measures import ApproxDCG, ApproxMRR, ApproxPrecision, ApproxRBP
from approx_gbdt.objectives import ApproxAP, ApproxNDCG

ET = math.exp(-K._T)
LN2 = math.log(2.0)


def _sorted_x(kind, n, rng):
    if kind == "equal":
        x = np.zeros(n)
    elif kind == "clusters":
        x = np.where(rng.random(n) < 0.5, 0.0, -1e5) + rng.normal(size=n)
    elif kind == "ties":
        x = np.round(rng.normal(size=n) * 3.0)
    elif kind == "spread":
        x = rng.normal(size=n) * 1e4
    elif kind == "tail":
        x = np.concatenate([rng.normal(size=n // 2) * 0.3, -rng.exponential(200.0, n - n // 2)])
    elif kind == "far_clusters":  # 12 boxes apart: every pair of two clusters takes the series
        x = -12.0 * rng.integers(0, 3, n) + rng.normal(size=n) * 1.5
    else:
        x = rng.normal(size=n) * 8.0
    x = np.sort(x)[::-1]
    return x - x[0]


def _dense(x, v, e):
    """Exact sums (O(n^2) memory: small n only) and the magnitudes of their terms."""
    d = x[None, :] - x[:, None]  # d[k, j] = x_j - x_k
    with np.errstate(over="ignore"):
        sig = 1.0 / (1.0 + np.exp(-d))
    wf = sig * (1.0 - sig)  # the grid's sums include j = k; its magnitudes count it
    w = wf.copy()
    np.fill_diagonal(w, 0.0)
    k2 = wf * (1.0 - 2.0 * sig)
    dv = v[None, :] - v[:, None]
    off = 1.0 - np.eye(x.size)
    win = np.abs(d) < (G._D + 1) * G._H  # the window's pairs
    av = win * (np.abs(v)[None, :] + np.abs(v)[:, None])
    ek = G._EPS_K
    out = {
        "pos": (1.0 + (sig * off).sum(1), ek[0] * win.sum(1)),
        "g": ((w * dv).sum(1), ek[1] * av.sum(1)),
        "bnd": ((w * np.abs(dv)).sum(1), 3 * ek[1] * av.sum(1)),
        "aa": ((k2 * dv).sum(1), ek[2] * av.sum(1)),
        "ab": ((w * w * e[None, :]).sum(1), ek[3] * (win * np.abs(e)[None, :]).sum(1)),
        "aw": (w.sum(1), ek[1] * win.sum(1)),
    }
    return out


def test_far_series_reproduce_the_kernels():
    # partner boxes more than _DN apart meet through the kernels' series (far tables and the
    # nodes' exponentials): every kernel within a tenth of the interpolation's own eps_K
    # (_EPS_K / 2) for targets and sources anywhere in their boxes, at every far offset
    z, lam, _, _, far, E = G.grid_tables()
    rng = np.random.default_rng(3)
    tk = np.concatenate([rng.random(3000), [0.0, 1.0 - 1e-12, z[0]]])
    tj = np.concatenate([rng.random(3000), [1.0 - 1e-12, 0.0, z[-1]]])

    def lagrange(t):  # barycentric, in NumPy (a node takes its own value)
        d = t[:, None] - z[None, :]
        q = lam / np.where(d == 0.0, 1.0, d)
        L = q / q.sum(1, keepdims=True)
        on = (d == 0.0).any(1)
        L[on] = (d[on] == 0.0).astype(float)
        return L

    src = lagrange(tj) @ E.T  # a source's e^(m t_j), then e^(-m t_j)
    Lk = lagrange(tk)
    tgt = np.concatenate([Lk @ E[G._M:].T, Lk @ E[:G._M].T], axis=1)  # the target's factors
    worst = np.zeros(4)
    offsets = [d for d in range(-G._D, G._D + 1) if abs(d) > G._DN]
    assert offsets
    for delta in offsets:
        x = (tk - tj - delta) * G._H  # x_j - x_k for a source delta boxes further down
        sig = 1.0 / (1.0 + np.exp(-x))
        w = sig * (1.0 - sig)
        exact = [sig, w, w * (1.0 - 2.0 * sig), w * w]
        for k in range(4):
            got = (far[k, delta + G._D][None, :] * src * tgt).sum(1)
            if k == 0 and delta < 0:
                got = got + 1.0  # sig's constant above, counted apart
            worst[k] = max(worst[k], np.abs(got - exact[k]).max())
    assert np.all(worst <= np.array(G._EPS_K) / 20), worst
    assert np.all(far[:, G._D - G._DN:G._D + G._DN + 1] == 0.0)  # near offsets: the tables


@pytest.mark.parametrize(
    "kind", ["equal", "clusters", "ties", "spread", "tail", "normal", "far_clusters"])
@pytest.mark.parametrize("par", [False, True])
@pytest.mark.parametrize("vsign", ["negative", "positive"])
def test_grid_sums_within_stated_bound(kind, par, vsign):
    # "negative": ApproxNDCG's v (every v <= 0: the bound as g_k - 2 sum_G C_kG); "positive":
    # v > 0, non-decreasing within each class (the bound as sum_G A_kG - 2 C_kG)
    rng = np.random.default_rng(len(kind))
    n = 1500
    x = _sorted_x(kind, n, rng)
    pos = np.empty(n)
    lag = np.empty((n, G._P))  # the positions' Lagrange values, which the chain step reads
    if par:
        G.grid_positions_par(x, pos, G.grid_tables(), 3, lag)
    else:
        G.grid_positions_seq(x, pos, G.grid_tables(), lag)
    # v = g t'(pos) (ApproxNDCG's log term) with the exact positions: monotone in each class
    gain = np.array([0.0, 1.0, 3.0, 7.0, 15.0])[rng.integers(0, 5, n)]
    ex = _dense(x, np.zeros(n), np.zeros(n))
    p = ex["pos"][0]
    lg = np.log1p(p)
    v = gain * (-LN2 / ((1.0 + p) * lg * lg)) / 40.0
    if vsign == "positive":
        v = gain * p / (40.0 * n)
    e = gain * (LN2 * (2.0 + lg) / ((1.0 + p) ** 2 * lg**3)) / 40.0
    ex = _dense(x, v, e)
    cls = np.empty(n, dtype=np.int64)
    ncls = G.gain_classes(gain, np.arange(n), n, cls)
    assert ncls == 4
    # the sums with extra weights va (ApproxAP's |v|) against the dense g of va
    va = np.abs(v[::-1]).copy()
    ex["gva"] = _dense(x, va, e)["g"]
    out = {k: np.empty(n) for k in ["g", "bnd", "aa", "ab", "aw", "gva"]}
    args = (x, v, e, va, out["g"], out["bnd"], out["aa"], out["ab"], out["aw"], out["gva"],
            cls, ncls, True, True, 0.0, G.grid_tables())
    if par:
        G.grid_chain_par(*args, 3, False, lag)
    else:
        G.grid_chain_seq(*args, False, lag)
    out["pos"] = pos
    for name, (exact, mag) in ex.items():
        err = np.abs(out[name] - exact)
        bound = mag + (n - 1) * ET * (1.0 + 2.0 * np.abs(v).max() + np.abs(e).max())
        worst = int(np.argmax(err - bound))
        assert err[worst] <= bound[worst], (name, kind, worst, err[worst], bound[worst])


@pytest.mark.parametrize("par", [False, True])
def test_grid_sums_without_the_exact_diagonal_are_the_same_sums(par):
    # need_exact=False leaves aa and ab unwritten and gives the other sums bit for bit
    rng = np.random.default_rng(5)
    n = 1200
    x = _sorted_x("normal", n, rng)
    gain = np.array([0.0, 1.0, 3.0])[rng.integers(0, 3, n)]
    v = np.sort(rng.random(n)) * gain
    e = rng.normal(size=n)
    cls = np.empty(n, dtype=np.int64)
    ncls = G.gain_classes(gain, np.arange(n), n, cls)
    outs = []
    for need_exact in (True, False):
        out = [np.full(n, np.nan) for _ in range(6)]
        args = (x, v, e, np.abs(e), *out[:5], out[5], cls, ncls, True, need_exact, 0.0,
                G.grid_tables())
        no_lag = np.empty((0, G._P))  # computed by the chain step
        if par:
            G.grid_chain_par(*args, 2, False, no_lag)
        else:
            G.grid_chain_seq(*args, False, no_lag)
        outs.append(out)
    (g, bnd, aa, ab, aw, gva), (g2, bnd2, aa2, ab2, aw2, gva2) = outs
    assert np.isfinite(aa).all() and np.isfinite(ab).all()
    assert np.isnan(aa2).all() and np.isnan(ab2).all()
    for a, b in ((g, g2), (bnd, bnd2), (aw, aw2), (gva, gva2)):
        assert np.isfinite(a).all() and np.array_equal(a, b)


@pytest.mark.parametrize("kind", ["normal", "tail", "ties"])
@pytest.mark.parametrize("par", [False, True])
def test_grid_bound_skipped_only_where_the_floor_cannot_bind(kind, par):
    # hessian="mixed" takes max(h_k, floor alpha^2 bnd_k): with the floor given, a target whose
    # sum_j w_kj (|v_j| + |v_k|) (at least its bound) times the floor is at most h_k gets
    # bnd_k = 0, every other sum unchanged; the mixed Hessian is the same either way, up to
    # the grid's error of the bound (max-norm relative). (All scores equal skip nothing: h_k
    # < 0 there.)
    rng = np.random.default_rng(20 + len(kind))
    n, floor = 1500, 0.1
    x = _sorted_x(kind, n, rng)
    pos = np.empty(n)
    lag = np.empty((n, G._P))
    G.grid_positions_seq(x, pos, G.grid_tables(), lag)
    gain = np.array([0.0, 1.0, 3.0, 7.0, 15.0])[rng.integers(0, 5, n)]
    lg = np.log1p(pos)
    v = gain * (-LN2 / ((1.0 + pos) * lg * lg)) / 40.0  # ApproxNDCG's v and e at these positions
    e = gain * (LN2 * (2.0 + lg) / ((1.0 + pos) ** 2 * lg**3)) / 40.0
    cls = np.empty(n, dtype=np.int64)
    ncls = G.gain_classes(gain, np.arange(n), n, cls)
    outs = []
    for fl in (0.0, floor):
        out = [np.full(n, np.nan) for _ in range(5)]  # g, bnd, aa, ab, aw
        args = (x, v, e, x[:0], *out, x[:0], cls, ncls, True, True, fl, G.grid_tables())
        if par:
            G.grid_chain_par(*args, 3, False, lag)
        else:
            G.grid_chain_seq(*args, False, lag)
        outs.append(out)
    (g, bnd, aa, ab, aw), (g1, bnd1, aa1, ab1, aw1) = outs
    for a, b in ((g, g1), (aa, aa1), (ab, ab1), (aw, aw1)):
        assert np.isfinite(a).all() and np.array_equal(a, b)
    relevant = gain > 0
    h = aa - ab - e * aw * aw  # the exact diagonal over alpha^2
    # the rule, in the kernel's order of operations
    skipped = relevant & (floor * (-g - 2.0 * v * aw) <= h)
    assert (bnd1[skipped] == 0.0).all() and np.array_equal(bnd1[~skipped], bnd[~skipped])
    assert 0 < skipped.sum() < relevant.sum()  # both kinds of target occur: the check can fail
    assert (relevant & (floor * bnd > h)).any()  # and targets where the floor binds
    with_bound = np.maximum(h, floor * bnd)
    without = np.maximum(h, floor * bnd1)
    assert np.abs(without - with_bound).max() <= 1e-7 * np.abs(with_bound).max()


@pytest.mark.parametrize("kind", ["equal", "ties", "tail", "normal"])
@pytest.mark.parametrize("par", [False, True])
def test_grid_bound_over_v_separated_classes(kind, par):
    # vsep: classes of consecutive v (by rank, v in any order along the scores within a class)
    # give the bound over the other classes only, each with the sign of the classes' order
    rng = np.random.default_rng(7 + len(kind))
    n = 1500
    x = _sorted_x(kind, n, rng)
    v = rng.normal(size=n) * 0.01
    e = np.zeros(n)
    cls = np.empty(n, dtype=np.int64)
    cls[np.argsort(v, kind="stable")] = 1 + (np.arange(n) * G._CMAX) // n
    d = x[None, :] - x[:, None]
    sig = 1.0 / (1.0 + np.exp(-d))
    w = sig * (1.0 - sig)
    other = cls[None, :] != cls[:, None]
    exact = (w * other * np.abs(v[None, :] - v[:, None])).sum(1)
    win = np.abs(d) < (G._D + 1) * G._H  # the window's pairs
    bound = 3 * G._EPS_K[1] * (win * (np.abs(v)[None, :] + np.abs(v)[:, None])).sum(1)
    bound += (n - 1) * ET * 2.0 * np.abs(v).max()
    out = [np.empty(n) for _ in range(5)]
    args = (x, v, e, x[:0], *out, x[:0], cls, G._CMAX, True, False, 0.0, G.grid_tables())
    if par:
        G.grid_chain_par(*args, 3, True, np.empty((0, G._P)))
    else:
        G.grid_chain_seq(*args, True, np.empty((0, G._P)))
    err = np.abs(out[1] - exact)
    assert np.all(err <= bound), (kind, float((err - bound).max()))
    assert exact.max() > 100 * bound.max()  # the check can fail: the sums are far above it


@pytest.mark.parametrize("kind", ["equal", "clusters", "ties", "tail", "normal", "compact"])
@pytest.mark.parametrize("vkind", ["normal", "falling", "rising", "steps", "equal"])
@pytest.mark.parametrize("par", [False, True])
def test_grid_abs_sums_for_any_v(kind, vkind, par):
    # ApproxAP's bound over its relevant documents: sum_j w_kj |v_j - v_k| for v in any order
    # along the scores (each box sorted by v), and sum_j w_kj, within the stated bound
    rng = np.random.default_rng(7 + len(kind) + len(vkind))
    n = 1500
    if kind == "compact":  # every document within two boxes (ApproxAP's first rounds)
        x = np.sort(-1.7 * rng.random(n))[::-1]
        x -= x[0]
    else:
        x = _sorted_x(kind, n, rng)
    v = {"normal": rng.normal(size=n) * 0.01,
         "falling": -np.arange(n) / n + rng.normal(size=n) * 0.02,  # ApproxAP's, roughly
         "rising": np.arange(n) / n + rng.normal(size=n) * 0.02,
         # runs of equal v: members equal to a target's v at the ends of a partner's range
         "steps": -np.floor(np.arange(n) / 97.0) * 0.1,
         "equal": np.full(n, -0.3)}[vkind]
    ex = _dense(x, v, np.zeros(n))
    bnd, aw = np.full(n, np.nan), np.full(n, np.nan)
    lag, rows = np.empty((0, G._P)), np.empty(0, dtype=np.int64)  # computed here
    if par:
        G.grid_abs_par(x, v, bnd, aw, G.grid_tables(), 3, lag, rows)
    else:
        G.grid_abs_seq(x, v, bnd, aw, G.grid_tables(), lag, rows)
    # one w-sum of |v_j - v_k| <= |v_j| + |v_k| (g's magnitudes), and one of 1
    for out, exact, mag in ((bnd, ex["bnd"][0], ex["g"][1]), (aw, ex["aw"][0], ex["aw"][1])):
        err = np.abs(out - exact)
        bound = mag + (n - 1) * ET * (1.0 + 2.0 * np.abs(v).max())
        worst = int(np.argmax(err - bound))
        assert err[worst] <= bound[worst], (worst, err[worst], bound[worst])
    if vkind != "equal":  # the check can fail: the sums are far above the bound
        assert ex["bnd"][0].max() > 100 * ex["g"][1].max()


@pytest.mark.parametrize("par", [False, True])
def test_grid_abs_sums_read_the_positions_lagrange_values(par):
    # the kernels pass the positions step's Lagrange values of the whole query and the rows of
    # its relevant documents: the same sums as with the values computed afresh
    rng = np.random.default_rng(12)
    n, R = 2000, 900
    x = _sorted_x("tail", n, rng)
    lag = np.empty((n, G._P))
    G.grid_positions_seq(x, np.empty(n), G.grid_tables(), lag)
    rows = np.sort(rng.choice(n, R, replace=False)).astype(np.int64)
    xr = x[rows]
    v = -np.linspace(0.0, 1.0, R) + rng.normal(size=R) * 0.05
    outs = []
    for lg, rw in ((np.empty((0, G._P)), np.empty(0, dtype=np.int64)), (lag, rows)):
        bnd, aw = np.full(R, np.nan), np.full(R, np.nan)
        if par:
            G.grid_abs_par(xr, v, bnd, aw, G.grid_tables(), 3, lg, rw)
        else:
            G.grid_abs_seq(xr, v, bnd, aw, G.grid_tables(), lg, rw)
        outs.append((bnd, aw))
    (b0, a0), (b1, a1) = outs
    assert np.isfinite(b0).all() and np.isfinite(a0).all()
    assert np.array_equal(b0, b1) and np.array_equal(a0, a1)


def _data(kind, n, seed, nq=1):
    rng = np.random.default_rng(seed)
    sizes = np.full(nq, n)
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    m = int(ptr[-1])
    s = np.concatenate([_sorted_x(kind, n, rng)[rng.permutation(n)] for _ in range(nq)]) / 10.0
    y = rng.integers(0, 5, m).astype(float)
    y[rng.random(m) < 0.3] = 0.0
    return s, y, ptr


def _split_from(obj, par_min):
    """``obj`` with every query of at least ``par_min`` documents split across threads by
    rows, the others one query per thread."""
    obj._par_min = par_min
    obj._split_share = 0.0
    return obj


def _check(obj, s, y, ptr, grid_mode=1, par_min=K._PAR_MIN, w=None):
    """Max-norm relative error <= 1e-6 per query, plus the grid's absolute bound (module notes:
    ``eps_K`` times the summed weights, normalisation <= 1 / ln 2, weights <= max w), which
    only matters where the exact gradient nearly vanishes (ApproxNDCG@k far below the top k)."""
    obj._grid_mode = grid_mode
    _split_from(obj, par_min)
    g1, h1 = obj.grad_hess(s, y, ptr, w)
    g0, h0, v, e = obj._reference_grad_hess(s, y, ptr, w)
    wmax = 1.0 if w is None else w.max()
    a1 = obj.alpha * wmax / LN2
    for q in range(len(ptr) - 1):
        a, b = ptr[q], ptr[q + 1]
        sv = np.abs(v[a:b]).sum()
        se = np.abs(e[a:b]).sum()
        eps = max(G._EPS_K)
        checks = [("grad", g1, g0, eps * a1 * sv)]
        if np.abs(g0[a:b]).sum() > 1e-12 * a1 * sv:
            # (a vanishing gradient makes the normalisation log2(1 + S) / S, S = sum |g|,
            # lose its digits to rounding in both kernels: the Hessian is not compared there)
            checks.append(("hess", h1, h0, eps * a1 * obj.alpha * (sv + se)))
        for name, f, r, floor in checks:
            ref = np.abs(r[a:b]).max()
            err = np.abs(f[a:b] - r[a:b]).max()
            assert err <= 1e-6 * ref + floor + 1e-300, (repr(obj), name, q, err, ref)


SEPARABLE = [
    lambda m: ApproxNDCG(hessian=m),
    lambda m: ApproxNDCG(hessian=m, normalize=False, alpha=3.0),
    lambda m: ApproxDCG(hessian=m),
    lambda m: ApproxMRR(hessian=m),
    lambda m: ApproxRBP(hessian=m),
]


@pytest.mark.parametrize("kind", ["equal", "clusters", "ties", "spread", "tail", "normal"])
@pytest.mark.parametrize("mode", ["mixed", "bound", "exact", "abs", "constant", "mixed_sum",
                                  "bound_sum"])
def test_objectives_on_the_grid(kind, mode):
    s, y, ptr = _data(kind, 1200, 5)
    if mode in ApproxNDCG._hessians:  # (ApproxAP's "bound_sum" only)
        for make in SEPARABLE:
            _check(make(mode), s, y, ptr)
        # the paths that keep the bound exact (ApproxAP: its relevant documents' sums on the
        # grid)
        _check(ApproxNDCG(hessian=mode, k=5), s, y, ptr)
        _check(ApproxPrecision(k=10, hessian=mode), s, y, ptr)
    _check(ApproxAP(hessian=mode if mode in ApproxAP._hessians and mode != "exact" else "bound"),
           s, y, ptr)


@pytest.mark.parametrize("mode", ["mixed", "bound", "mixed_sum", "bound_sum"])
def test_grid_with_weights_threads_and_many_queries(mode):
    s, y, ptr = _data("normal", 600, 9, nq=5)
    w = np.random.default_rng(2).uniform(0.5, 2.0, s.shape[0])
    ap_mode = mode if mode in ApproxAP._hessians else "mixed"
    mode = mode if mode in ApproxNDCG._hessians else "bound"
    _check(ApproxNDCG(hessian=mode), s, y, ptr, w=w)
    _check(ApproxNDCG(hessian=mode), s, y, ptr, par_min=100, w=w)  # rows across threads
    _check(ApproxAP(hessian=ap_mode), s, y, ptr, w=w)
    _check(ApproxAP(hessian=ap_mode), s, y, ptr, par_min=100, w=w)
    y[ptr[1]:ptr[2]] = 0.0  # a query with nothing relevant
    _check(ApproxNDCG(hessian=mode), s, y, ptr)
    _check(ApproxAP(hessian=ap_mode), s, y, ptr, par_min=100)


@pytest.mark.parametrize("n_relevant", [1, 2, 50, 3000])
def test_approx_ap_bound_on_the_grid_few_and_many_relevant(n_relevant):
    # the bound's relevant-only loops from one relevant document to half the query, with a
    # block of ties among them and scores spread over many windows; "bound_sum" (no such loops:
    # the chain's sums with weights |v|) on the same queries
    rng = np.random.default_rng(n_relevant)
    n = 6000
    s = rng.normal(size=n) * 3.0
    s[:500] = 0.25
    y = np.zeros(n)
    y[rng.choice(n, n_relevant, replace=False)] = 1.0
    if n_relevant > 100:
        y[:20] = 1.0  # relevant documents among the ties
    ptr = np.array([0, n], dtype=np.int64)
    for mode in ("bound", "bound_sum"):
        _check(ApproxAP(hessian=mode), s, y, ptr)
        _check(ApproxAP(hessian=mode), s, y, ptr, par_min=1000)


def test_more_gain_classes_than_the_split_takes():
    # continuous labels: more than _CMAX distinct gains, the bound falls back to the exact path
    s, y, ptr = _data("normal", 1200, 4)
    y = np.random.default_rng(0).uniform(0.0, 4.0, s.shape[0])
    _check(ApproxNDCG(), s, y, ptr)


def test_positions_and_values_on_the_grid():
    s, y, ptr = _data("tail", 2000, 3)
    pos0 = np.empty(s.size)
    R.ref_positions(s, ptr, 10.0, pos0)
    obj = ApproxNDCG()
    obj._grid_mode = 1
    g, _ = obj.grad_hess(s, y, ptr)  # sorted once
    pos1 = np.empty(s.size)
    K.smoothed_positions(s, ptr, 10.0, pos1)  # automatic choice (dense: grid)
    np.testing.assert_allclose(pos1, pos0, rtol=1e-9, atol=0)
    np.testing.assert_allclose(obj.value(s, y, ptr), obj._reference_value(s, y, ptr),
                               rtol=1e-9)


def test_long_query_auto_against_exact_windowed_kernel():
    # 100,000 documents, windows of ~2,000 pairs per document and a block of 10,000 ties: the
    # automatic choice takes the grid; the exact windowed kernel (itself checked against the
    # O(n^2) loops in test_kernels_fast) is the reference
    rng = np.random.default_rng(1)
    n = 100_000
    ptr = np.array([0, n], dtype=np.int64)
    s = rng.normal(size=n) * 70.0
    s[: n // 10] = 0.0
    y = (rng.random(n) < 0.4) * rng.integers(1, 5, n).astype(float)
    assert _takes_grid(s)
    _auto_against_exact(ApproxNDCG, s, y, ptr)


def _sorted_windows(s):
    """``x`` (alpha 10) and window ends of one query of scores ``s``, sorted."""
    x = np.sort(10.0 * s)[::-1]
    x -= x[0]
    return x, np.searchsorted(-x, -x + K._T, side="right").astype(np.int64)


def _takes_grid(s):
    """Whether the automatic choice takes the grid for one query of scores ``s``."""
    x, jend = _sorted_windows(s)
    return G.use_grid(x, jend, x.size, 0)


def _auto_against_exact(make, s, y, ptr):
    """The automatic choice within 1e-6 (max-norm relative) of the exact windowed kernel."""
    g1, h1 = make().grad_hess(s, y, ptr)
    exact = make()
    exact._grid_mode = -1
    g0, h0 = exact.grad_hess(s, y, ptr)
    assert np.abs(g1 - g0).max() <= 1e-6 * np.abs(g0).max()
    assert np.abs(h1 - h0).max() <= 1e-6 * np.abs(h0).max()


def _one_long_ap_query(seed, sd, n=8000):
    """One query of ``n`` documents, N(0, sd) scores, 45 % relevant."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n) * sd
    y = (rng.random(n) < 0.45).astype(float)
    return s, y, np.array([0, n], dtype=np.int64)


@njit
def _abs_choice(xr, vr):
    """``_kernels._abs_cheaper`` for relevant documents at ``xr`` (sorted, the query's frame)
    with weights ``vr``: whether their own bound sums take ``grid_abs_seq``."""
    R = xr.shape[0]
    S = pair_work(R)
    S.x[:R] = xr
    S.v[:R] = vr
    _windows(S.x[:R], S.ex[:R], S.jend[:R], S.bend[:R])
    return K._abs_cheaper(S, R)


def _relevant_sorted(s, y):
    """``x`` (alpha 10, the query's frame) and ApproxAP's ``v`` (the reference's, up to the
    factor ``1 / R``) of the relevant documents of one query, in sorted order."""
    obj = ApproxAP()
    order = np.argsort(-s, kind="stable")
    x, _ = _sorted_windows(s)
    pos = np.empty(s.size)
    R.positions_query(s.astype(np.float64), obj.alpha, pos)
    rel = np.flatnonzero(y > 0).astype(np.int64)
    v, e = np.zeros(s.size), np.zeros(s.size)
    R._ap_first_second(pos, rel, obj.beta, 1.0, v, e)
    keep = y[order] > 0
    return x[keep], v[order][keep]


def test_approx_ap_auto_relevant_bound_many_boxes():
    # a long query whose 3,600 relevant documents spread over about 20 boxes: ApproxAP's v is
    # close to monotone along the scores, so that few partner boxes straddle a document's v,
    # and the automatic choice takes grid_abs_seq (partners whose members lie wholly above or
    # below v_k summed once per box); the exact windowed kernel is the reference
    s, y, ptr = _one_long_ap_query(3, 0.3)
    assert _takes_grid(s[y >= 1])  # the relevant documents alone take the grid
    xr, vr = _relevant_sorted(s, y)
    inside, partners = njit(lambda x, v, c: G.abs_cost(x, v, x.shape[0], c))(xr, vr, 10**9)
    assert partners > 8 * xr.size and inside <= K._ABS_INSIDE * xr.size
    assert _abs_choice(xr, vr)
    _auto_against_exact(ApproxAP, s, y, ptr)
    _auto_against_exact(lambda: ApproxAP(hessian="bound_sum"), s, y, ptr)
    _auto_against_exact(lambda: _split_from(ApproxAP(), 1000), s, y, ptr)


def test_ap_bound_cost_model_takes_the_classes_where_v_straddles_the_boxes():
    # where v is in no order along the scores every partner box straddles a document's v, and
    # the relevant documents' bound takes the classes of v, not grid_abs_seq; v along the
    # scores (either way) takes grid_abs_seq
    rng = np.random.default_rng(21)
    n = 3000
    x = np.sort(-12.0 * rng.random(n))[::-1]
    x -= x[0]
    jend = np.searchsorted(-x, -x + K._T, side="right").astype(np.int64)
    assert G.use_grid(x, jend, n, 0)  # the grid is cheaper than the exact loops: the classes
    assert not _abs_choice(x, rng.normal(size=n))
    assert _abs_choice(x, np.linspace(-1.0, 0.0, n))
    assert _abs_choice(x, np.linspace(0.0, -1.0, n))
    # the count stops soon after the cap
    cost = njit(lambda x, v, c: G.abs_cost(x, v, x.shape[0], c))
    v = rng.normal(size=n)
    full, partners = cost(x, v, 10**9)
    capped, _ = cost(x, v, n)
    assert full > 8 * n and partners >= full and n < capped < full


def test_approx_ap_auto_relevant_bound_few_boxes():
    # a long query whose relevant documents all lie within about two boxes (ApproxAP's first
    # rounds): their own sums take the grid with each box sorted by v (grid_abs_seq); the
    # exact windowed kernel is the reference
    s, y, ptr = _one_long_ap_query(4, 0.02)
    n = s.size
    xr, vr = _relevant_sorted(s, y)
    assert _abs_choice(xr, vr)

    # the query on one thread (grid_abs_seq), then its rows across threads (grid_abs_par)
    _auto_against_exact(lambda: _split_from(ApproxAP(), n + 1), s, y, ptr)
    _auto_against_exact(lambda: _split_from(ApproxAP(), 1000), s, y, ptr)


def test_approx_ap_auto_relevant_bound_few_boxes_below_grid_min():
    # a query of 1,000 documents with fewer relevant documents than the grid's threshold, all
    # within one box: the cost model (_kernels._abs_cheaper) takes grid_abs_seq for their own
    # sums rather than the exact windowed loops; the exact windowed kernel is the reference
    s, y, ptr = _one_long_ap_query(5, 0.01, n=1000)
    # the kernel's choices on this query: its positions and its bound on the grid, and the
    # cost model's for the relevant documents (their x in the query's frame, sorted)
    x, jend = _sorted_windows(s)
    xr, vr = _relevant_sorted(s, y)
    R = xr.size

    @njit
    def bound_on_grid(x, jend, xr):
        S = pair_work(xr.shape[0])
        S.x[:xr.shape[0]] = xr
        R = xr.shape[0]
        _windows(S.x[:R], S.ex[:R], S.jend[:R], S.bend[:R])
        return K._ap_bound_on_grid(x, jend, x.shape[0], S.jend[:R], 0)

    assert 200 < R < G.GRID_MIN_N and _takes_grid(s)
    assert bound_on_grid(x, jend, xr) and _abs_choice(xr, vr)
    _auto_against_exact(ApproxAP, s, y, ptr)
    _auto_against_exact(lambda: _split_from(ApproxAP(), 500), s, y, ptr)


@pytest.mark.parametrize("kind", ["distinct", "equal", "few values", "short"])
def test_v_classes_are_ordered_and_about_equal(kind):
    # ApproxAP's bound splits its relevant documents into classes of consecutive v: every v of
    # a class at most every v of the next, and classes of about R / C documents (cuts from a
    # sample), equal values split by index so that they too spread over the classes
    classes = njit(lambda v: K._v_classes(v))
    rng = np.random.default_rng(11)
    R = 7 if kind == "short" else 5000
    v = {"distinct": rng.normal(size=R), "equal": np.full(R, -0.3),
         "few values": rng.integers(0, 3, R) * 0.5, "short": rng.normal(size=R)}[kind]
    cls, C = classes(v)
    assert C == min(K._V_CLASSES, R)
    assert cls.min() >= 1 and cls.max() <= C
    for c in range(1, C):
        if (cls == c).any() and (cls > c).any():
            assert v[cls == c].max() <= v[cls > c].min()
    sizes = np.bincount(cls, minlength=C + 1)[1:]
    if kind == "short":  # fewer documents than classes: one each
        assert np.all(sizes == 1), sizes
    else:
        assert sizes.max() <= 1.5 * R / C and sizes.min() >= 0.5 * R / C, sizes
    if kind == "equal":  # by index: consecutive runs
        assert np.all(np.diff(cls) >= 0)


@pytest.mark.parametrize("spread", [0.0, 0.02])
def test_approx_ap_auto_relevant_sums_on_the_grid(spread):
    # equal or nearly equal scores (a constant start): the relevant documents' positions all lie
    # within one second-level window, so the automatic choice takes the grid for their sums
    # (S, and the tau sums of v); the exact windowed kernel is the reference
    rng = np.random.default_rng(4)
    n = 20_000
    ptr = np.array([0, n], dtype=np.int64)
    s = rng.normal(size=n) * spread
    y = (rng.random(n) < 0.45) * rng.integers(1, 4, n).astype(float)
    R = int((y > 0).sum())
    assert G.use_grid(np.zeros(R), np.full(R, R, dtype=np.int64), R, 0)
    for mode in ("bound_sum", "bound", "constant"):
        _auto_against_exact(lambda mode=mode: ApproxAP(hessian=mode), s, y, ptr)
    np.testing.assert_allclose(ApproxAP().value(s, y, ptr),
                               ApproxAP()._reference_value(s, y, ptr), rtol=1e-8)
