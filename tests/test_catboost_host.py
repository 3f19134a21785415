"""CatBoostObjective: CatBoost trains on the approx objectives' exact derivatives, or refuses."""

import warnings

import numpy as np
import pytest

catboost = pytest.importorskip("catboost")

from approx_gbdt import (  # noqa: E402
    ApproxNDCG,
    CatBoostObjective,
    approx_ap_obj,
    approx_ndcg_obj,
    make_ranking,
    mean_over_queries,
    ndcg,
)


def _split(n_train=40, n_valid=15, seed=0):
    d = make_ranking(n_train + n_valid, seed=seed)
    cut = d.group_ptr[n_train]
    tr = (d.X[:cut], d.y[:cut], d.group_ptr[: n_train + 1])
    va = (d.X[cut:], d.y[cut:], d.group_ptr[n_train:] - cut)
    return tr, va


def _pool(X, label, ptr):
    return catboost.Pool(X, label, group_id=np.repeat(np.arange(len(ptr) - 1), np.diff(ptr)))


def _fit(host, tr, va, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # numba cannot compile the adapter class
        return catboost.CatBoost(
            {**host.catboost_params, "iterations": 4, "depth": 3, "learning_rate": 0.3,
             "thread_count": 1, "random_seed": 0, "verbose": False, "use_best_model": False,
             "allow_writing_files": False,
             **params}
        ).fit(_pool(tr[0], host.pool_label, tr[2]), eval_set=_pool(*va))


CALLS = []  # module-level: CatBoost's fit works on a deep copy of the adapter


class _Recording(CatBoostObjective):
    """Keeps every block's rows, scores and returned derivatives in CALLS."""

    def calc_ders_range(self, approxes, targets, weights):
        out = super().calc_ders_range(approxes, targets, weights)
        rows = np.asarray(targets).astype(np.int64)
        CALLS.append((rows, np.array(approxes, dtype=np.float64), out))
        return out


@pytest.mark.parametrize("objective", [
    approx_ndcg_obj,
    ApproxNDCG(pair_force="chord", hessian="bound"),
    approx_ap_obj,
])
@pytest.mark.parametrize("bootstrap", [
    {"bootstrap_type": "Bernoulli", "subsample": 0.8},
    {"bootstrap_type": "Bayesian"},
    {"bootstrap_type": "No"},
])
def test_derivatives_are_the_objective_at_catboosts_scores(objective, bootstrap):
    tr, va = _split()
    host = _Recording(objective, tr[1], tr[2], eval_set=va[1:])
    CALLS.clear()
    model = _fit(host, tr, va, **bootstrap)
    assert CALLS
    n = tr[1].size
    # CatBoost's own scores before each tree: 0, then its staged raw predictions
    staged = [np.zeros(n)] + list(model.staged_predict(tr[0], prediction_type="RawFormulaVal"))
    covered = np.zeros((len(staged) - 1, n), dtype=bool)
    for rows, approx, ders in CALLS:
        # the iteration whose scores these are
        t = int(np.argmin([np.max(np.abs(s[rows] - approx)) for s in staged[:-1]]))
        np.testing.assert_allclose(approx, staged[t][rows], rtol=0, atol=1e-9)
        grad, hess = objective.grad_hess(staged[t], tr[1], tr[2])
        np.testing.assert_allclose(ders[:, 0], -grad[rows], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(ders[:, 1], -hess[rows], rtol=1e-9, atol=1e-12)
        covered[t, rows] = True
    assert covered.all()  # every row's derivatives were asked for in every iteration
    assert np.any(staged[-1] != 0)  # and the model learned something


def test_metric_is_the_validation_ndcg_and_training_improves_it():
    tr, va = _split(60, 20)
    host = CatBoostObjective(approx_ndcg_obj, tr[1], tr[2], eval_set=va[1:], eval_at=5)
    model = _fit(host, tr, va, iterations=30, depth=4, learning_rate=0.1)
    evals = model.get_evals_result()["validation"]
    (curve,) = evals.values()
    for i, pred in enumerate(model.staged_predict(va[0], prediction_type="RawFormulaVal")):
        assert np.isclose(curve[i], mean_over_queries(ndcg(pred, va[1], va[2], k=5)))
    assert max(curve) > mean_over_queries(ndcg(np.zeros(va[1].size), va[1], va[2], k=5)) + 0.1


@pytest.mark.parametrize("params, match", [
    ({"boosting_type": "Ordered"}, "Plain"),
    ({"leaf_estimation_iterations": 3}, "has not seen"),
    # both shrink the model's scores between the metric and the next derivatives (the
    # adapter's one check of the scores catches them, and its message names them)
    ({"model_shrink_rate": 0.1}, "has not seen.*model_shrink_rate above 0"),
    ({"langevin": True}, "has not seen.*langevin=True sets one"),
])
def test_refuses_settings_it_cannot_follow(params, match):
    tr, va = _split()
    host = CatBoostObjective(approx_ndcg_obj, tr[1], tr[2], eval_set=va[1:])
    with pytest.raises(Exception, match=match):
        _fit(host, tr, va, **params)


def test_refuses_wrong_label_weights_and_unknown_pools():
    tr, va = _split()
    host = CatBoostObjective(approx_ndcg_obj, tr[1], tr[2], eval_set=va[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        params = {**host.catboost_params, "iterations": 2, "verbose": False, "thread_count": 1,
                  "allow_writing_files": False}
        with pytest.raises(Exception, match="pool_label"):
            catboost.CatBoost(params).fit(_pool(*tr), eval_set=_pool(*va))
        weighted = _pool(tr[0], host.pool_label, tr[2])
        weighted.set_weight(np.ones(tr[1].size))
        with pytest.raises(Exception, match="weights"):
            catboost.CatBoost(params).fit(weighted, eval_set=_pool(*va))
        with pytest.raises(Exception, match="neither"):
            catboost.CatBoost(params).fit(_pool(tr[0], host.pool_label, tr[2]),
                                          eval_set=_pool(va[0], va[1] + 1, va[2]))


def test_constructor_checks():
    tr, _ = _split()
    with pytest.raises(TypeError, match="grad_hess"):
        CatBoostObjective(object(), tr[1], tr[2])
    with pytest.raises(ValueError):
        CatBoostObjective(approx_ndcg_obj, tr[1], tr[2][:-1])
    with pytest.raises(ValueError, match="eval_at"):
        CatBoostObjective(approx_ndcg_obj, tr[1], tr[2], eval_at=0)
    host = CatBoostObjective(approx_ndcg_obj, tr[1], tr[2])
    np.testing.assert_array_equal(host.pool_label, np.arange(tr[1].size))
    assert host.catboost_params["boosting_type"] == "Plain"


def test_eval_set_without_relevant_document_is_refused():
    tr, va = _split()
    # CatBoost would get NaN from the metric and fail in its JSON writer
    with pytest.raises(ValueError, match="no query of eval_set has a relevant document"):
        CatBoostObjective(approx_ndcg_obj, tr[1], tr[2], eval_set=(np.zeros(va[1].size), va[2]))


def test_metric_is_zero_not_nan_without_relevant_document():
    tr, va = _split()
    labels = np.zeros(tr[1].size)
    host = CatBoostObjective(approx_ndcg_obj, labels, tr[2], eval_set=va[1:])
    model = _fit(host, (tr[0], labels, tr[2]), va, bootstrap_type="No")
    scores = np.arange(labels.size) * 0.1
    assert host.metric.evaluate([scores], host.pool_label, None) == (0.0, 1.0)
    assert model.get_evals_result()["learn"]["NDCGMetric"] == [0.0] * 4


def test_one_adapter_serves_several_fits():
    tr, va = _split()
    host = CatBoostObjective(approx_ndcg_obj, tr[1], tr[2], eval_set=va[1:])
    first = _fit(host, tr, va).predict(va[0])
    np.testing.assert_array_equal(_fit(host, tr, va).predict(va[0]), first)
