"""Bad input that used to slip through: saturated scores, labels too large for NDCG, NaN labels.

Every case ends in a clear ``ValueError`` or a ``RuntimeWarning`` that names the problem,
never in a silent NaN or in zero gradients without a word.
"""

from __future__ import annotations

import warnings

import lightgbm as lgb
import numpy as np
import pytest

from approx_gbdt import (
    ApproxAP,
    ApproxNDCG,
    ApproxXGBRanker,
    approx_mrr_obj,
    approx_ndcg_obj,
    evaluate,
    mean_over_queries,
    ndcg,
)

SATURATING = [approx_ndcg_obj, ApproxAP(), approx_mrr_obj, ApproxNDCG(hessian="bound")]


@pytest.mark.parametrize("obj", SATURATING, ids=lambda o: type(o).__name__)
def test_saturated_misordered_scores_warn(obj):
    # Gaps of 1e8 (alpha * gap = 1e9): every sigmoid is 0 or 1, every gradient exactly 0,
    # so boosting cannot move although the first query is upside down.
    scores = np.array([1e8, 0.0, -1e8, 5e8, 4e8])
    labels = np.array([0.0, 1.0, 2.0, 1.0, 0.0])
    with pytest.warns(RuntimeWarning, match="no gradient at these scores although 1 of 2 "
                                            "queries rank a less relevant document"):
        grad, _ = obj.grad_hess(scores, labels, [0, 3, 5])
    assert not grad[:3].any()


@pytest.mark.parametrize("obj", SATURATING, ids=lambda o: type(o).__name__)
def test_saturated_but_well_ordered_scores_are_quiet(obj):
    scores = np.array([-1e8, 0.0, 1e8, 1e300, -1e300])
    labels = np.array([0.0, 1.0, 2.0, 1.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grad, _ = obj.grad_hess(scores, labels, [0, 3, 5])
    assert not grad.any()


def test_saturation_warning_through_lightgbm():
    """From lgb.train, with an init_score that puts the irrelevant documents far ahead."""
    rng = np.random.default_rng(0)
    X = rng.random((40, 3))
    y = np.tile([0.0, 0.0, 1.0, 2.0], 10)
    init = np.tile([2e6, 1e6, -1e6, -2e6], 10)
    data = lgb.Dataset(X, y, group=[4] * 10, init_score=init)
    with pytest.warns(RuntimeWarning, match="saturate"):
        lgb.train({"objective": approx_ndcg_obj, "verbosity": -1, "min_data_in_leaf": 1},
                  data, num_boost_round=1)


@pytest.mark.parametrize("obj", SATURATING, ids=lambda o: type(o).__name__)
def test_nearly_saturated_misordered_scores_warn(obj):
    """alpha times the misordered gaps 30 (not 1e9): the gradients are about 1e-13, not
    exactly 0, and no tree learns from them; the warning counts them as none."""
    scores = np.array([6.0, 3.0, 0.0, 5.0, 2.0])
    labels = np.array([0.0, 1.0, 2.0, 1.0, 0.0])
    with pytest.warns(RuntimeWarning, match="no gradient at these scores although 1 of 2"):
        grad, _ = obj.grad_hess(scores, labels, [0, 3, 5])
    assert 0 < np.abs(grad).max() < 1e-10


@pytest.mark.parametrize("obj", [ApproxAP(), approx_mrr_obj, approx_ndcg_obj],
                         ids=lambda o: type(o).__name__)
def test_training_data_with_nothing_to_learn_warns(obj):
    """Fractional labels below ApproxAP's threshold of 1 (every document non-relevant), or one
    label everywhere: no query has anything to rank. lgb.train says so once per dataset."""
    rng = np.random.default_rng(0)
    X = rng.random((40, 3))
    y = np.full(40, 1.0) if obj is approx_ndcg_obj else rng.integers(0, 5, 40) / 5.0
    data = lgb.Dataset(X, y, group=[4] * 10)
    with pytest.warns(RuntimeWarning, match="no query of these 10 has .* nothing to learn"):
        lgb.train({"objective": obj, "verbosity": -1, "min_data_in_leaf": 1}, data,
                  num_boost_round=2)
    # the same objective on data with something to rank stays quiet
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lgb.train({"objective": obj, "verbosity": -1, "min_data_in_leaf": 1},
                  lgb.Dataset(X, np.tile([0.0, 1.0, 2.0, 0.0], 10), group=[4] * 10),
                  num_boost_round=2)


def test_saturation_warning_reads_each_documents_weight():
    """A misordered query with small but real gradients next to a heavy, saturated, well
    ordered one: no warning (the threshold is per document, not the largest weight's). A
    misordered saturated query of weight 0 is no query to the host: no warning either."""
    scores = np.array([1.5, 0.0, 1e8, 0.0, -1e8])  # alpha times the misordered gap: 15
    labels = np.array([0.0, 1.0, 2.0, 1.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grad, _ = approx_ndcg_obj.grad_hess(scores, labels, [0, 2, 5], weights=[1.0, 1e7])
        assert 1e-10 < np.abs(grad[:2]).max() < 1e-10 * 1e7
        approx_ndcg_obj.grad_hess(np.array([1e8, -1e8, 1e8, 0.0, -1e8]), labels, [0, 2, 5],
                                  weights=[0.0, 1.0])


def test_no_warning_on_one_workers_part_of_a_distributed_run():
    """A LightGBM Dataset of a run on several machines (num_machines > 1) is one worker's
    part: a part with nothing to learn says nothing about the whole data."""
    X = np.random.default_rng(0).random((20, 2))
    y = np.zeros(20)
    part = lgb.Dataset(X, y, group=[5] * 4, params={"num_machines": 2, "verbosity": -1})
    alone = lgb.Dataset(X, y, group=[5] * 4, params={"verbosity": -1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ApproxAP()(np.zeros(20), part.construct())
    with pytest.warns(RuntimeWarning, match="nothing to learn"):
        ApproxAP()(np.zeros(20), alone.construct())


def test_position_bias_input_is_named_as_ignored():
    """LightGBM's position= (displayed positions for lambdarank's position bias) does not
    reach the approx objectives: a UserWarning says so, once per training dataset."""
    if not hasattr(lgb.Dataset, "get_position"):
        pytest.skip("LightGBM before 4.1 has no position=")
    rng = np.random.default_rng(0)
    X, y = rng.random((40, 3)), np.tile([0.0, 1.0, 2.0, 0.0], 10)
    params = {"objective": approx_ndcg_obj, "verbosity": -1, "min_data_in_leaf": 1}
    data = lgb.Dataset(X, y, group=[4] * 10, position=np.tile(np.arange(4), 10))
    with pytest.warns(UserWarning, match="does not read the Dataset's position=") as rec:
        lgb.train(params, data, num_boost_round=3)
    assert len([w for w in rec if "position=" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lgb.train(params, lgb.Dataset(X, y, group=[4] * 10), num_boost_round=3)


def test_infinite_label_through_lightgbm_is_named():
    """LightGBM stores an infinite label as 1e38 before the objective sees it: the error says
    so instead of only calling 1e38 too large."""
    X = np.random.default_rng(0).random((8, 2))
    y = np.array([0.0, 1.0, np.inf, 0.0, 1.0, 2.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="LightGBM stores an infinite label as 1e\\+38"):
        lgb.train({"objective": approx_ndcg_obj, "verbosity": -1, "min_data_in_leaf": 1},
                  lgb.Dataset(X, y, group=[4, 4]), num_boost_round=1)


def test_ndcg_refuses_labels_too_large_for_the_gain():
    # 2^2000 overflows: before, NDCG was NaN and mean_over_queries dropped the query silently.
    with pytest.raises(ValueError, match="label 2000 is too large.*at most 1000"):
        ndcg([1.0, 2.0, 3.0], [0.0, 1.0, 2000.0], [0, 3])
    with pytest.raises(ValueError, match="too large"):
        evaluate([1.0, 2.0, 3.0], [0.0, 1.0, 2000.0], [0, 3], ["map", "ndcg@10"])
    # The objective's bound (1000) is accepted and gives finite values ...
    assert ndcg([1.0, 2.0, 3.0], [0.0, 1.0, 1000.0], [0, 3]).tolist() == [1.0]
    # ... and so is a large label for the binary measures, which do not use 2^y.
    assert evaluate([1.0, 2.0, 3.0], [0.0, 1.0, 2000.0], [0, 3], "map") == {"map": 1.0}
    assert np.isfinite(ndcg(np.arange(1000.0), np.full(1000, 1000.0), [0, 1000])).all()


def test_undefined_ndcg_is_still_nan_and_excluded():
    values = ndcg([1.0, 2.0, 1.0, 2.0], [0.0, 0.0, 1.0, 0.0], [0, 2, 4])
    assert np.isnan(values[0]) and values[1] < 1
    assert mean_over_queries(values) == values[1]


def test_xgb_ranker_refuses_nan_labels():
    X = np.random.default_rng(0).random((6, 2))
    with pytest.raises(ValueError, match="labels must be finite: label 1 is nan"):
        ApproxXGBRanker(n_estimators=1).fit(X, [0.0, np.nan, 1.0, 0.0, 1.0, 2.0], group=[3, 3])


def test_clear_cache_releases_every_objectives_datasets():
    import gc
    import weakref

    from approx_gbdt import ApproxAP, SoftNDCG, approx_ap_obj, clear_cache

    clear_cache()
    y = np.array([0.0, 1.0, 2.0, 0.0, 1.0])
    mine, soft = ApproxAP(beta=1.0), SoftNDCG()
    for obj in (approx_ndcg_obj, approx_ap_obj, mine, soft):
        obj(y, np.zeros(5), None, [2, 3])  # the LGBMRanker entry point caches
        assert obj.cached_datasets == 1
    gains = weakref.ref(approx_ndcg_obj._cache[0].arrays["gains"])
    clear_cache()
    gc.collect()
    assert [o.cached_datasets for o in (approx_ndcg_obj, approx_ap_obj, mine, soft)] == [0] * 4
    assert gains() is None  # nothing else held the prepared arrays
    # Training goes on as before, and one objective can be cleared alone.
    g1, _ = approx_ndcg_obj(y, np.zeros(5), None, [2, 3])
    mine(y, np.zeros(5), None, [2, 3])
    approx_ndcg_obj.clear_cache()
    assert approx_ndcg_obj.cached_datasets == 0 and mine.cached_datasets == 1
    assert np.array_equal(approx_ndcg_obj(y, np.zeros(5), None, [2, 3])[0], g1)


def test_read_only_scores_are_accepted():
    """Read-only scores (pandas' ``to_numpy``, a memory map) give the same results as
    writeable ones, for every registered objective and on the long lists' tiers too."""
    import approx_gbdt
    from approx_gbdt import MEASURES, SoftNDCG, smoothed_positions

    rng = np.random.default_rng(4)
    for sizes in ([3, 20, 50], [600, 30]):
        ptr = np.concatenate([[0], np.cumsum(sizes)])
        y = rng.integers(0, 3, ptr[-1]).astype(float)
        s = rng.normal(size=ptr[-1])
        frozen = s.copy()
        frozen.setflags(write=False)
        objectives = [info.instance for info in MEASURES.values()] + [SoftNDCG()]
        if sizes[0] >= 512:
            objectives = [approx_gbdt.approx_ndcg_obj, approx_gbdt.approx_ap_obj]
        for obj in objectives:
            for got, want in zip(obj.grad_hess(frozen, y, ptr), obj.grad_hess(s, y, ptr)):
                np.testing.assert_array_equal(got, want, err_msg=repr(obj))
            np.testing.assert_array_equal(obj.value(frozen, y, ptr), obj.value(s, y, ptr))
        np.testing.assert_array_equal(smoothed_positions(frozen, ptr),
                                      smoothed_positions(s, ptr))
