"""Smoke tests of the benchmark scripts (no quality assertions)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"


def _load_common():
    spec = importlib.util.spec_from_file_location("_bench_common", BENCH / "_common.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_bench_common", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_parse_method_names_and_options():
    C = _load_common()
    m = C.parse_method("lgb:approx_ndcg(alpha=20, hessian=bound)")
    assert (m.library, m.objective, m.opts) == ("lgb", "approx_ndcg", {"alpha": 20,
                                                                       "hessian": "bound"})
    m = C.parse_method("xgb:rank:ndcg")
    assert (m.library, m.objective, m.opts) == ("xgb", "rank:ndcg", {})
    assert C.split_methods(["default,lgb:approx_ap(alpha=5,beta=3)"]) == [
        "default", "lgb:approx_ap(alpha=5,beta=3)"]
    with pytest.raises(ValueError):
        C.parse_method("lgb:rank:ndcg")
    with pytest.raises(ValueError):
        C.parse_method("catboost:approx_ndcg")
    m = C.parse_method("lgb:approx_precision@5(alpha=20)")
    assert (m.objective, m.opts) == ("approx_precision", {"k": 5, "alpha": 20})
    assert C.make_objective(m.objective, C.split_options(m)[0]).k == 5
    for bad in ("lgb:approx_mrr@3", "lgb:lambdarank@5", "lgb:approx_ndcg@0"):
        with pytest.raises(ValueError, match="cutoff"):
            C.parse_method(bad)
    m = C.parse_method("cb:YetiRank")
    assert (m.library, m.objective) == ("cb", "YetiRank")
    m = C.parse_method("cb:approx_ndcg(pair_force=chord,depth=4)")  # via CatBoostObjective
    assert C.split_options(m) == ({"pair_force": "chord"}, {"depth": 4})
    with pytest.raises(ValueError):
        C.parse_method("cb:rank_xendcg")


def test_pointwise_baselines_parse_but_are_not_peers():
    C = _load_common()
    for name in ("lgb:regression", "xgb:reg:squarederror", "cb:RMSE"):
        m = C.parse_method(name)
        assert m.objective not in C.NATIVE[m.library]
    with pytest.raises(ValueError):
        C.parse_method("lgb:RMSE")


def test_rival_methods_parse_and_have_four_point_grids():
    C = _load_common()
    for name, lib in (("ada:ndcg", "ada"), ("ada:map", "ada"), ("rb:rankboost", "rb"),
                      ("lgb:soft_ndcg(sigma=0.3)", "lgb")):
        m = C.parse_method(name)
        assert m.library == lib
        assert len(C.grid_for(m, "small")) == 4
    obj = C.make_objective("soft_ndcg", {"sigma": 0.3})
    assert obj.sigma == 0.3
    with pytest.raises(ValueError):
        C.parse_method("ada:mrr")
    with pytest.raises(ValueError):
        C.parse_method("rb:ndcg")


def test_shape_grid_adds_shallow_trees_for_the_tree_learners(monkeypatch):
    C = _load_common()
    for name in ("lgb:lambdarank", "xgb:rank:ndcg", "cb:QuerySoftMax"):
        m = C.parse_method(name)
        small, shape = C.grid_for(m, "small"), C.grid_for(m, "shape")
        assert len(shape) == 2 * len(small)
        assert [{k: v for k, v in g.items() if k != "depth"} for g in shape] == small * 2
        assert [g["depth"] for g in shape] == [None] * 4 + [C.SHALLOW_DEPTH] * 4
        labels = [C.config_label(m, g) for g in shape]
        assert len(set(labels)) == 8 and labels[:4] == [C.config_label(m, g) for g in small]
    for name in ("nn:approx_ndcg", "ada:ndcg", "rb:rankboost"):  # no trees: the small grid
        m = C.parse_method(name)
        assert C.grid_for(m, "shape") == C.grid_for(m, "small")

    # the depth reaches each host's parameters (and a method's own options still win)
    seen = []

    class Stop(Exception):
        pass

    def fake_fit(backend, objective, train, valid, *, params, **kwargs):
        seen.append((backend, params))
        raise Stop

    monkeypatch.setattr(C, "fit_ranker", fake_fit)
    fold = C.load_folds("generated", 1)[0]
    shallow = {"l2": 0.0, "min_hess": 1e-3, "depth": C.SHALLOW_DEPTH}
    for name in ("lgb:lambdarank", "xgb:rank:ndcg", "lgb:lambdarank(num_leaves=7)"):
        with pytest.raises(Stop):
            C.fit_predict(C.parse_method(name), fold, 0, shallow, C.Budget(), {})
    with pytest.raises(Stop):
        C.fit_predict(C.parse_method("lgb:lambdarank"), fold, 0, C.GRIDS["small"][0],
                      C.Budget(), {})
    (_, lgb), (_, xgb), (_, own), (_, default) = seen
    assert (lgb["max_depth"], lgb["num_leaves"]) == (C.SHALLOW_DEPTH, 2 ** C.SHALLOW_DEPTH)
    assert xgb["max_depth"] == C.SHALLOW_DEPTH
    assert own["num_leaves"] == 7
    assert "max_depth" not in default and default["num_leaves"] == C.NUM_LEAVES

    catboost = pytest.importorskip("catboost")

    def fake_ranker(**params):
        seen.append(("catboost", params))
        raise Stop

    monkeypatch.setattr(catboost, "CatBoostRanker", fake_ranker)
    with pytest.raises(Stop):
        C.fit_predict(C.parse_method("cb:QuerySoftMax"), fold, 0,
                      {"l2": 3.0, "depth": C.SHALLOW_DEPTH}, C.Budget(), {})
    assert seen[-1][1]["depth"] == C.SHALLOW_DEPTH


def test_objective_options_follow_the_package_defaults():
    import approx_gbdt

    C = _load_common()
    assert C.make_objective("approx_ndcg", {}) is approx_gbdt.approx_ndcg_obj
    obj = C.make_objective("approx_ap", {"beta": 3.0})
    assert obj.beta == 3.0
    assert obj.alpha == approx_gbdt.approx_ap_obj.alpha
    assert obj.hessian == approx_gbdt.approx_ap_obj.hessian
    obj_opts, other = C.split_options(C.parse_method("lgb:approx_ndcg(k=10,lambda_l2=2)"))
    assert obj_opts == {"k": 10} and other == {"lambda_l2": 2}


def test_generated_folds_rotate_and_test_every_query_once():
    C = _load_common()
    folds = C.load_folds("generated")
    assert len(folds) == 5
    n_queries = C.GENERATED["generated"]["n_queries"]
    assert sum(f.test.n_queries for f in folds) == n_queries
    f = folds[0]
    assert f.train.n_queries + f.vali.n_queries + f.test.n_queries == n_queries


def test_generated_long_folds_have_long_lists_and_rotate():
    C = _load_common()
    folds = C.load_folds("generated-long")
    spec = C.GENERATED["generated-long"]
    n_queries, (lo, hi) = spec["n_queries"], spec["docs_per_query"]
    assert len(folds) == 5
    assert sum(f.test.n_queries for f in folds) == n_queries
    sizes = np.concatenate([np.diff(f.test.group_ptr) for f in folds])
    assert sizes.min() >= lo and sizes.max() <= hi
    # every query is tested exactly once (its first document identifies it)
    first = np.concatenate([f.test.X[f.test.group_ptr[:-1], 0] for f in folds])
    assert np.unique(first).size == n_queries
    block = n_queries // C.GENERATED_BLOCKS
    for f in folds:
        assert (f.train.n_queries, f.vali.n_queries, f.test.n_queries) == (3 * block, block, block)
        split_firsts = [set(d.X[d.group_ptr[:-1], 0]) for d in (f.train, f.vali, f.test)]
        assert not (split_firsts[0] & split_firsts[1] or split_firsts[0] & split_firsts[2]
                    or split_firsts[1] & split_firsts[2])
    assert C.dataset_label("generated-long") == "generated-long"


def test_mq2008_small_subsamples_train_and_validation_only():
    C = _load_common()
    if not (C.SHARED_DATA / C.NAMED_DATA["mq2008"]).is_dir():
        pytest.skip("MQ2008 not available")
    small, full = C.load_folds("mq2008-small", 2), C.load_folds("mq2008", 2)
    for s, f in zip(small, full, strict=True):
        assert (s.train.n_queries, s.vali.n_queries) == C.SMALL_QUERIES
        assert s.test.n_queries == f.test.n_queries
        # whole queries of the full split, in their original order
        rows = {tuple(r) for r in f.train.X}
        assert all(tuple(r) in rows for r in s.train.X)
    assert not np.array_equal(small[0].train.y, small[1].train.y)
    assert C.dataset_label("mq2008-small") == "mq2008-small"


@pytest.mark.slow
def test_quality_quick_run_writes_tables(tmp_path):
    cmd = [sys.executable, str(BENCH / "quality.py"), "--quick", "--data", "generated",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "quality_generated.md").read_text()
    for part in ("## Test measures", "## Paired test against", "## Cross-metric matrix",
                 "`lgb:approx_ndcg`", "`xgb:approx_ap`", "`lgb:lambdarank`", "NDCG@10",
                 "## Paired test against `lgb:approx_ndcg`", "`lgb:soft_ndcg`", "`ada:ndcg`",
                 "`ada:map`", "`rb:rankboost`"):
        assert part in text
    assert (tmp_path / "quality_generated.json").is_file()


@pytest.mark.slow
def test_quality_quick_run_with_catboost(tmp_path):
    pytest.importorskip("catboost")
    cmd = [sys.executable, str(BENCH / "quality.py"), "--quick", "--data", "generated",
           "--methods", "lgb:lambdarank", "cb:YetiRank", "cb:QuerySoftMax", "--out",
           str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "quality_generated.md").read_text()
    assert "`cb:YetiRank`" in text and "`cb:QuerySoftMax`" in text
    assert "l2_leaf_reg=3" in text


@pytest.mark.slow
def test_quality_quick_run_hosts_approx_ndcg_and_rmse_on_catboost(tmp_path):
    pytest.importorskip("catboost")
    cmd = [sys.executable, str(BENCH / "quality.py"), "--quick", "--data", "generated",
           "--methods", "lgb:approx_ndcg", "cb:approx_ndcg", "cb:RMSE", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "quality_generated.md").read_text()
    assert "`cb:approx_ndcg`: CatBoost (oblivious trees, plain boosting) on ApproxNDCG(" in text
    assert "`cb:RMSE`: CatBoost RMSE" in text
    assert "Failed runs" not in text and "Grid points that failed" not in text


@pytest.mark.slow
def test_approximation_quick_run_writes_plots(tmp_path):
    cmd = [sys.executable, str(BENCH / "approximation.py"), "--quick", "--data", "generated",
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ApproxNDCG" in (tmp_path / "approximation_generated.md").read_text()
    for name in ("iterations", "alpha_beta"):
        assert (tmp_path / f"approximation_generated_{name}.png").stat().st_size > 1000


def test_objective_cost_quick_run_writes_a_table(tmp_path):
    out = tmp_path / "cost.md"
    subprocess.run([sys.executable, str(BENCH / "objective_cost.py"), "--total", "2000",
                    "--lengths", "10", "100", "--repeats", "1", "--out", str(out)],
                   check=True, cwd=REPO, capture_output=True)
    text = out.read_text()
    assert "| 100 | 20 |" in text and "lambdaloss_window=30" in text
    out = tmp_path / "ap.md"
    subprocess.run([sys.executable, str(BENCH / "objective_cost.py"), "--total", "200",
                    "--lengths", "10", "--repeats", "1", "--objectives", "approx_ap",
                    "approx_ap(pair_force=chord,graded=True)", "--out", str(out)],
                   check=True, cwd=REPO, capture_output=True)
    row = [line for line in out.read_text().splitlines() if line.startswith("| 10 |")]
    assert len(row) == 1 and row[0].count("x)") == 1  # one ratio to the first objective
    proc = subprocess.run([sys.executable, str(BENCH / "objective_cost.py"), "--objectives",
                           "lambdarank"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and "lambdarank" in proc.stderr


def test_neural_linear_qin_writes_markdown(tmp_path):
    pytest.importorskip("torch")
    md = tmp_path / "qin.md"
    cmd = [sys.executable, str(BENCH / "neural_linear_qin.py"), "--gen-queries", "30",
           "--alphas", "50,100", "--restarts", "1", "--max-epochs", "2", "--md", str(md)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = md.read_text()
    assert "--restarts 1" in text and "| generated | " in text and "**mean**" in text
    assert "alpha in {50, 100}" in text


def test_hessian_parts_add_up_to_the_package_hessians():
    """The ablation harness's Hessian parts (benchmarks/_hessian_parts.py) against the
    package: gradient, exact diagonal T1 - C, bound B and the default "mixed" combination."""
    import numpy as np

    from approx_gbdt import ApproxNDCG

    spec = importlib.util.spec_from_file_location("_hessian_parts", BENCH / "_hessian_parts.py")
    hp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hp)
    rng = np.random.default_rng(3)
    sizes = np.array([1, 7, 30, 12, 5])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(ptr[-1])
    y = rng.integers(0, 5, n).astype(float)
    y[ptr[4]:ptr[5]] = 0.0  # a query without a relevant document
    s = np.round(rng.normal(size=n), 1)  # with ties
    a = ApproxNDCG()._prepare(y, ptr, cache=False).arrays
    grad, B, T1, C = (np.empty(n) for _ in range(4))
    hp.hessian_parts(s, a["gains"], a["inv_z"], ptr, 10.0, grad, B, T1, C)
    for mode, h_parts in [("exact", T1 - C), ("bound", B),
                          ("mixed", hp.combine("mixed", B, T1, C, floor=0.1))]:
        g, h = ApproxNDCG(hessian=mode, normalize=False).grad_hess(s, y, ptr)
        np.testing.assert_allclose(g, -grad, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(h, h_parts, rtol=1e-9, atol=1e-12)
    assert np.all(np.abs(T1) <= B + 1e-12) and np.all(C >= 0)


def test_softmax_mix_gradient_and_hessian_against_autograd():
    torch = pytest.importorskip("torch")
    C = _load_common()
    rng = np.random.default_rng(0)
    sizes = [5, 1, 4, 3]  # a single-document query and one with no relevant document
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    s = rng.normal(size=ptr[-1])
    y = rng.integers(0, 4, size=ptr[-1]).astype(float)
    y[ptr[3]:ptr[4]] = 0
    grad, hess = C._softmax_grad_hess(s, y, ptr)
    for a, b in zip(ptr[:-1], ptr[1:]):
        t = torch.tensor(s[a:b], dtype=torch.float64, requires_grad=True)
        yt = torch.tensor(y[a:b], dtype=torch.float64)

        def loss(u, yt=yt):
            return -(yt * torch.log_softmax(u, 0)).sum()

        (g,) = torch.autograd.grad(loss(t), t)
        h = torch.autograd.functional.hessian(loss, t).diagonal()
        total = g.abs().sum().item()
        scale = np.log2(1 + total) / total if total > 0 else 0.0
        np.testing.assert_allclose(grad[a:b], scale * g.numpy(), atol=1e-12)
        np.testing.assert_allclose(hess[a:b], scale * h.numpy(), atol=1e-12)
    mix = C.make_objective("approx_ndcg", {"softmax_mix": 0.25})
    g1, h1 = C.make_objective("approx_ndcg", {}).grad_hess(s, y, ptr)
    g2, h2 = mix.grad_hess(s, y, ptr)
    np.testing.assert_allclose(g2, 0.75 * g1 + 0.25 * grad)
    np.testing.assert_allclose(h2, 0.75 * h1 + 0.25 * hess)
    m = C.parse_method("lgb:approx_ndcg(softmax_mix=0.5,num_leaves=7)")
    assert C.split_options(m) == ({"softmax_mix": 0.5}, {"num_leaves": 7})


def _pair_queries():
    rng = np.random.default_rng(5)
    sizes = [6, 1, 5, 4, 7]  # a single document, no relevant document, ties
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    s = rng.normal(size=ptr[-1])
    s[ptr[4]:ptr[4] + 3] = 0.25
    y = rng.integers(0, 4, size=ptr[-1]).astype(float)
    y[ptr[3]:ptr[4]] = 0
    return s, y, ptr


def test_lambdaloss_with_another_mu_against_autograd():
    pytest.importorskip("torch")
    from tests.reference import lambdaloss_weights, pair_logistic_reference

    C = _load_common()
    s, y, ptr = _pair_queries()
    g, h = C.make_objective("lambdaloss", {"mu": 3.0}).grad_hess(s, y, ptr)
    g_ref, h_ref = pair_logistic_reference(
        s, y, ptr, lambda sq, yq: lambdaloss_weights(sq, yq, mu=3.0))
    np.testing.assert_allclose(g, g_ref, atol=1e-12)
    np.testing.assert_allclose(h, h_ref, atol=1e-12)
    assert np.all(g[ptr[3]:ptr[4]] == 0) and g[ptr[1]] == 0


def test_ndcg_lambdaloss_mix_against_autograd():
    """``ndcg_ll``: ApproxNDCG mixed with a LambdaLoss part at the sigmoid scale ``ll_alpha``,
    its weights from the smoothed or the exact positions, by autograd with the weights held
    fixed; ``ll_alpha=1``, exact positions and ``mu=10`` are ``ApproxNDCG(lambdaloss=w)``."""
    torch = pytest.importorskip("torch")
    from approx_gbdt import ApproxNDCG

    C = _load_common()
    s, y, ptr = _pair_queries()
    alpha = 10.0

    def reference(ll_alpha, smooth, mu):
        g_ref, h_ref = np.zeros_like(s), np.zeros_like(s)
        for a, b in zip(ptr[:-1], ptr[1:]):
            sq, gains = s[a:b], 2.0 ** y[a:b] - 1.0
            if b - a < 2 or not gains.any():
                continue
            z = (np.sort(gains)[::-1] / np.log2(np.arange(b - a) + 2.0)).sum()
            if smooth:
                r = 0.5 + (1.0 / (1.0 + np.exp(-alpha * (sq[None, :] - sq[:, None])))).sum(1)
            else:
                r = np.empty(b - a)
                r[np.argsort(-sq, kind="stable")] = np.arange(1.0, b - a + 1.0)
            d = np.maximum(np.abs(r[:, None] - r[None, :]), 1.0)
            w = ((gains[:, None] - gains[None, :]) / z
                 * (np.abs(1.0 / np.log2(1.0 + r[:, None]) - 1.0 / np.log2(1.0 + r[None, :]))
                    + mu * (1.0 / np.log2(1.0 + d) - 1.0 / np.log2(2.0 + d))))
            w = torch.tensor(np.where(gains[:, None] > gains[None, :], w, 0.0))

            def loss(u, w=w):
                diff = u[:, None] - u[None, :]
                return (w * torch.nn.functional.softplus(-ll_alpha * diff)).sum() / ll_alpha

            t = torch.tensor(sq, requires_grad=True)
            g = torch.autograd.grad(loss(t), t)[0].numpy()
            h = torch.autograd.functional.hessian(loss, t.detach()).diagonal().numpy()
            f = np.log2(1.0 + np.abs(g).sum()) / np.abs(g).sum()
            g_ref[a:b], h_ref[a:b] = f * g, f * h
        return g_ref, h_ref

    g_a, h_a = ApproxNDCG().grad_hess(s, y, ptr)
    for ll_alpha, ranks, mu in [(10.0, "smooth", 0.0), (10.0, "exact", 10.0),
                                (1.0, "smooth", 3.0)]:
        obj = C.make_objective("ndcg_ll", {"ll_alpha": ll_alpha, "ranks": ranks, "mu": mu,
                                           "weight": 1.0})
        g, h = obj.grad_hess(s, y, ptr)
        g_ref, h_ref = reference(ll_alpha, ranks == "smooth", mu)
        np.testing.assert_allclose(g, g_ref, atol=1e-12)
        np.testing.assert_allclose(h, h_ref, atol=1e-12)
        assert np.all(g[ptr[3]:ptr[4]] == 0) and g[ptr[1]] == 0
        g3, h3 = obj.replace(weight=0.3).grad_hess(s, y, ptr)
        np.testing.assert_allclose(g3, 0.7 * g_a + 0.3 * g_ref, atol=1e-12)
        np.testing.assert_allclose(h3, 0.7 * h_a + 0.3 * h_ref, atol=1e-12)
    obj = C.make_objective("ndcg_ll", {"ll_alpha": 1.0, "ranks": "exact", "mu": 10.0})
    g, h = obj.grad_hess(s, y, ptr)
    g_pkg, h_pkg = ApproxNDCG(lambdaloss=0.5).grad_hess(s, y, ptr)
    np.testing.assert_allclose(g, g_pkg, atol=1e-13)
    np.testing.assert_allclose(h, h_pkg, atol=1e-13)
    with pytest.raises(ValueError, match="ranks"):
        C.make_objective("ndcg_ll", {"ranks": "soft"})


def test_yetirank_pairs_against_autograd_and_seeded():
    pytest.importorskip("torch")
    from tests.reference import pair_logistic_reference

    C = _load_common()
    s, y, ptr = _pair_queries()
    perms = 4
    eps = np.random.default_rng(1).logistic(size=(perms, len(s)))

    def weights(a):
        def of(sq, yq):
            out = {}
            for p in range(perms):
                order = np.argsort(-(sq + eps[p, a:a + len(sq)]), kind="stable")
                for k in range(1, len(sq)):
                    i, j = order[k - 1], order[k]
                    if yq[i] != yq[j]:
                        key = (i, j) if yq[i] > yq[j] else (j, i)
                        out[key] = out.get(key, 0.0) + 0.15 * 0.7 ** (k - 1) * abs(
                            yq[i] - yq[j]) / perms
            return out
        return of

    obj = C.make_objective("yetirank_pairs", {"permutations": perms, "decay": 0.7}, seed=3)
    assert obj.random_state == 3
    g, h = obj.grad_hess(s, y, ptr, eps=eps)
    ref = [pair_logistic_reference(s[a:b], y[a:b], np.array([0, b - a]), weights(a))
           for a, b in zip(ptr[:-1], ptr[1:])]
    np.testing.assert_allclose(g, np.concatenate([r[0] for r in ref]), atol=1e-12)
    np.testing.assert_allclose(h, np.concatenate([r[1] for r in ref]), atol=1e-12)
    # the random draw: the same seed gives the same sequence of gradients, another seed not
    runs = [[o.grad_hess(s, y, ptr)[0] for _ in range(2)] for o in (
        obj.replace(random_state=3), obj.replace(random_state=3), obj.replace(random_state=4))]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0][0], runs[2][0])
    assert not np.array_equal(runs[0][0], runs[0][1])
    m = C.parse_method("lgb:yetirank_pairs(decay=0.5,num_leaves=7)")
    assert C.split_options(m) == ({"decay": 0.5}, {"num_leaves": 7})


def test_ap_cross_pairs_against_autograd():
    """``ap_cross``: ApproxAP's pair forces ``w_im (v_m - v_i)`` on the pairs of a relevant and
    an irrelevant document only, with ``v = d ApproxAP / d pos^`` from autograd; every pair
    (``cross=False``) is the package's ApproxAP."""
    torch = pytest.importorskip("torch")
    from approx_gbdt import ApproxAP
    from tests.reference import torch_approx_ap

    C = _load_common()
    s, y, ptr = _pair_queries()
    alpha, beta = 10.0, 0.3
    g_ref, h_ref = np.zeros_like(s), np.zeros_like(s)
    for a, b in zip(ptr[:-1], ptr[1:]):
        sq, yq = s[a:b], y[a:b]
        rel = yq >= 1
        if b - a < 2 or not rel.any():
            continue
        p = torch.tensor(1.0 + (1.0 / (1.0 + np.exp(-alpha * (sq[None, :] - sq[:, None]))))
                         .sum(1) - 0.5, requires_grad=True)
        r = torch.tensor(rel.astype(float))
        ind = torch.sigmoid(beta * (p[:, None] - p[None, :]))
        inner = 1.0 + (ind * r[None, :]).sum(1) - torch.diagonal(ind) * r
        v = torch.autograd.grad((r / p * inner).sum() / r.sum(), p)[0].numpy()
        e = 1.0 / (1.0 + np.exp(-alpha * (sq[:, None] - sq[None, :])))
        w = alpha * e * (1.0 - e)
        keep = rel[:, None] != rel[None, :]
        g = -(w * (v[None, :] - v[:, None]) * keep).sum(1)
        h = alpha * (w * np.abs(v[None, :] - v[:, None]) * keep).sum(1)
        g_ref[a:b], h_ref[a:b] = g, h
    obj = C.make_objective("ap_cross", {"normalize": False, "hessian_scale": 1.0})
    g, h = obj.grad_hess(s, y, ptr)
    np.testing.assert_allclose(g, g_ref, atol=1e-12)
    np.testing.assert_allclose(h, h_ref, atol=1e-12)
    assert g[ptr[1]] == 0 and np.all(g[ptr[3]:ptr[4]] == 0)
    for a, b in zip(ptr[:-1], ptr[1:]):  # the forces come in opposite pairs
        assert abs(g[a:b].sum()) < 1e-12
    # every pair: ApproxAP's own gradient, its bound Hessian and its per-query normalisation
    full = obj.replace(cross=False, normalize=True)
    g_all, h_all = full.grad_hess(s, y, ptr)
    g_pkg, h_pkg = ApproxAP(hessian_scale=1.0).grad_hess(s, y, ptr)
    np.testing.assert_allclose(g_all, g_pkg, atol=1e-13)
    np.testing.assert_allclose(h_all, h_pkg, atol=1e-12)
    y_all = np.array([1.0, 2.0, 1.0, 3.0])  # every document relevant: no cross pair
    one = np.array([0, 4])
    np.testing.assert_allclose(full.grad_hess(s[:4], y_all, one)[0],
                               ApproxAP(hessian_scale=1.0).grad_hess(s[:4], y_all, one)[0],
                               atol=1e-13)
    assert np.all(obj.grad_hess(s[:4], y_all, one)[0] == 0)
    # ... and its value's gradient by autograd (the positions are the reference's own)
    st = torch.tensor(s[:ptr[1]], requires_grad=True)
    val = torch_approx_ap(st, torch.tensor(y[:ptr[1]]), alpha=alpha, beta=beta)
    g_auto = -torch.autograd.grad(val, st)[0].numpy()
    g_raw = full.replace(normalize=False).grad_hess(s[:ptr[1]], y[:ptr[1]],
                                                    np.array([0, ptr[1]]))[0]
    np.testing.assert_allclose(g_raw, g_auto, atol=1e-12)
    # graded: the mean of the levels' forces; scale multiplies the Hessian only
    gg, hg = obj.replace(graded=True, hessian_scale=0.5).grad_hess(s, y, ptr)
    a, b = ptr[0], ptr[1]
    levels = np.unique(y[a:b][y[a:b] >= 1])
    parts = [obj.grad_hess(s[a:b], (y[a:b] >= t).astype(float), np.array([0, b - a]))
             for t in levels]
    np.testing.assert_allclose(gg[a:b], np.mean([q[0] for q in parts], 0), atol=1e-13)
    np.testing.assert_allclose(hg[a:b], 0.5 * np.mean([q[1] for q in parts], 0), atol=1e-13)


def test_ndcg_cross_pairs_against_autograd():
    """``ndcg_cross``: ApproxNDCG's pair forces without the pairs of equal label, ``v`` by
    autograd; every pair (``cross=False``) is ApproxNDCG's gradient and its bound Hessian."""
    torch = pytest.importorskip("torch")
    from approx_gbdt import ApproxNDCG
    from tests.reference import torch_approx_ndcg

    C = _load_common()
    s, y, ptr = _pair_queries()
    alpha = 10.0
    g_ref, h_ref = np.zeros_like(s), np.zeros_like(s)
    for a, b in zip(ptr[:-1], ptr[1:]):
        sq, yq = s[a:b], y[a:b]
        gains = 2.0**yq - 1.0
        if b - a < 2 or not gains.any():
            continue
        z = (np.sort(gains)[::-1] / np.log2(np.arange(b - a) + 2.0)).sum()
        p = torch.tensor(1.0 + (1.0 / (1.0 + np.exp(-alpha * (sq[None, :] - sq[:, None]))))
                         .sum(1) - 0.5, requires_grad=True)
        v = torch.autograd.grad((torch.tensor(gains) / torch.log2(1.0 + p)).sum() / z, p)[0]
        v = v.numpy()
        e = 1.0 / (1.0 + np.exp(-alpha * (sq[:, None] - sq[None, :])))
        w = alpha * e * (1.0 - e)
        keep = yq[:, None] != yq[None, :]
        g_ref[a:b] = -(w * (v[None, :] - v[:, None]) * keep).sum(1)
        h_ref[a:b] = 0.1 * alpha * (w * np.abs(v[None, :] - v[:, None]) * keep).sum(1)
    obj = C.make_objective("ndcg_cross", {"normalize": False})
    g, h = obj.grad_hess(s, y, ptr)
    np.testing.assert_allclose(g, g_ref, atol=1e-12)
    np.testing.assert_allclose(h, h_ref, atol=1e-12)
    assert g[ptr[1]] == 0 and np.all(g[ptr[3]:ptr[4]] == 0)
    full = obj.replace(cross=False, normalize=True, hessian_scale=1.0)
    g_all, h_all = full.grad_hess(s, y, ptr)
    g_pkg, h_pkg = ApproxNDCG(hessian="bound").grad_hess(s, y, ptr)
    np.testing.assert_allclose(g_all, g_pkg, atol=1e-13)
    np.testing.assert_allclose(h_all, h_pkg, atol=1e-12)
    st = torch.tensor(s[:ptr[1]], requires_grad=True)
    val = torch_approx_ndcg(st, torch.tensor(y[:ptr[1]]), alpha=alpha)
    g_raw = full.replace(normalize=False).grad_hess(s[:ptr[1]], y[:ptr[1]],
                                                    np.array([0, ptr[1]]))[0]
    np.testing.assert_allclose(g_raw, -torch.autograd.grad(val, st)[0].numpy(), atol=1e-12)


def test_speed_kernel_sections_remade_alone(tmp_path, monkeypatch):
    """``speed.py --kernels-only`` replaces sections 1 and 2 of an existing report (and the
    throughput plot), keeping the header and sections 3 to 5."""
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("_bench_speed", BENCH / "speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    kernels = [{"n": n, "queries": 1000 // n, "scores": d, "fast ndcg (mixed)": 2.5e9 * n,
                "fast ap (bound)": 1.25e9 * n} for n in (10, 100) for d in ("equal", "normal")]
    huge = [{"n": 1000, "scores": "normal", "fast_s": 0.0123, "ap_s": 0.0456, "ap5_s": 0.01,
             "ap5_err": 2e-9, "exact_s": 1.5, "errors": "whole query", "grad_rel_err": 3e-9,
             "hess_rel_err": 4e-9, "work_bytes": 8000}]
    monkeypatch.setattr(speed, "bench_kernel_sections", lambda quick: (kernels, huge))
    report = tmp_path / "speed.md"
    report.write_text("# Speed\n\nCommand: `kept header`\n\n"
                      "## 1. Kernel throughput (old)\n\nSTALE-1\n\n"
                      "## 2. One huge query (old)\n\nSTALE-2\n\n"
                      "## 3. Training\n\nkept 3\n\n## 4. Lengths\n\nkept 4\n\n"
                      "## 5. First call with an empty Numba cache\n\nkept 5\n")
    speed.remake_kernel_sections(str(report), "CMD", False)
    text = report.read_text()
    assert "STALE" not in text and "kept header" in text
    assert "kept 3" in text and "kept 4" in text and text.endswith("kept 5\n")
    assert text.index("# Speed") < text.index("## 1.") < text.index("## 2.") < text.index("## 3.")
    assert "|\n\n## 3. Training" in text  # one blank line after the table
    assert "Sections 1 and 2 re-made together by `CMD`" in text
    line = next(t for t in text.splitlines() if t.startswith("| 100 | 10 | normal |"))
    assert line.startswith("| 100 | 10 | normal | 250.000 | n/a | n/a | n/a | 125.000 |"), line
    assert "| 1000 | normal | 0.012 | 0.05 | 0.01 | 2.0e-09 | 1.5 | whole query |" in text
    assert (tmp_path / "speed_throughput.png").stat().st_size > 0
    other = tmp_path / "other.md"  # sections out of order
    other.write_text("# Speed\n\n## 3. Training\n\n## 1. Kernel throughput\n")
    with pytest.raises(SystemExit, match="no sections 1 to 3 in order"):
        speed.remake_kernel_sections(str(other), "CMD", False)


def test_speed_lengths_section_remade_alone(tmp_path, monkeypatch):
    """``speed.py --lengths-only`` replaces section 4 of an existing report (and its plot),
    keeping the other sections; each cell is the median over the rounds of the seconds, with
    the median and range of the rounds' ratios to the same round's native run."""
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("_bench_speed", BENCH / "speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    rows = []
    # native 10, 12 and 20 ms in the three rounds; approx_ndcg_obj 1.1, 1.2 and 1.0 times it
    for rep, (native, ratio) in enumerate([(0.010, 1.1), (0.012, 1.2), (0.020, 1.0)]):
        for threads, busy in speed.LENGTH_VARIANTS:
            for lib in ("lightgbm", "xgboost"):
                for o in speed.LENGTH_OBJECTIVES:
                    sec = native * (ratio if o == "approx_ndcg_obj" else 1.5)
                    rows.append({"setting": "len:10:1000", "lib": lib, "objective": o,
                                 "sec_per_iter": native if o == "native" else sec,
                                 "docs": 1000, "threads": threads, "busy": busy, "load": 1.5,
                                 "repeat": rep, "iters": 50})
    monkeypatch.setattr(speed, "bench_lengths", lambda *a, **k: rows)
    report = tmp_path / "speed.md"
    report.write_text("# Speed\n\n## 3. Training\n\nkept 3\n\n"
                      "## 4. Seconds per boosting iteration against list length\n\nSTALE-4\n\n"
                      "## 5. First call with an empty Numba cache\n\nkept 5\n")
    speed.remake_lengths_section(str(report), "CMD", False)
    text = report.read_text()
    assert "STALE-4" not in text and "kept 3" in text and "kept 5" in text
    assert text.index("## 3.") < text.index("## 4.") < text.index("## 5.")
    assert "|\n\n## 5. First call" in text  # one blank line after the table
    assert "Re-made alone by `CMD`" in text and "runs 50 boosting iterations" in text
    # medians: native 12 ms, approx_ndcg_obj 12 ms (11, 14.4, 20), ratios 1.1, 1.2, 1.0
    line = next(t for t in text.splitlines() if t.startswith("| 10 | 100 | lightgbm | 2 | quiet"))
    assert "| 12.0 ms | 14.4 ms (1.10x, 1.00-1.20) |" in line
    assert (tmp_path / "speed_lengths.png").stat().st_size > 0
    other = tmp_path / "other.md"  # a report without section 4 (made with --skip-training)
    other.write_text("# Speed\n\n## 3. Training\n\n## 5. First call\n")
    with pytest.raises(SystemExit, match="no section 4"):
        speed.remake_lengths_section(str(other), "CMD", False)
