"""Tests for approx_gbdt.metrics: reference implementation, properties, LightGBM/XGBoost."""

from __future__ import annotations

import itertools
import math

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st

from approx_gbdt.metrics import (
    MetricSpec,
    average_precision,
    evaluate,
    make_lightgbm_feval,
    make_xgboost_metric,
    mean_over_queries,
    mrr,
    ndcg,
    parse_metric,
    precision,
)

NAN = float("nan")

# ---------------------------------------------------------------------------------------------
# Plain-Python reference: sort each query with the tie rule, then apply the textbook formula.
# ---------------------------------------------------------------------------------------------


def ref_order(s, y, ties):
    if ties == "worst":
        return sorted(range(len(s)), key=lambda i: (-s[i], y[i]))
    return sorted(range(len(s)), key=lambda i: -s[i])


def ref_ndcg(s, y, k, ties):
    order = ref_order(s, y, ties)
    m = len(s) if k is None else min(k, len(s))
    dcg = sum((2.0 ** y[order[i]] - 1) / math.log2(i + 2) for i in range(m))
    ideal = sorted(y, reverse=True)
    idcg = sum((2.0 ** ideal[i] - 1) / math.log2(i + 2) for i in range(m))
    return dcg / idcg if idcg > 0 else NAN


def ref_ap(s, y, k, threshold, ties):
    rel = [label >= threshold for label in y]
    n_rel = sum(rel)
    if n_rel == 0:
        return NAN
    order = ref_order(s, y, ties)
    m = len(s) if k is None else min(k, len(s))
    hits, total = 0, 0.0
    for i in range(m):
        if rel[order[i]]:
            hits += 1
            total += hits / (i + 1)
    return total / (n_rel if k is None else min(n_rel, k))


def ref_precision(s, y, k, threshold, ties):
    if not any(label >= threshold for label in y):
        return NAN
    order = ref_order(s, y, ties)
    return sum(y[i] >= threshold for i in order[:k]) / k


def ref_rr(s, y, threshold, ties):
    for rank, i in enumerate(ref_order(s, y, ties), start=1):
        if y[i] >= threshold:
            return 1.0 / rank
    return NAN


def spans(ptr):
    """(start, stop) of each query."""
    return zip(ptr[:-1], ptr[1:], strict=True)


def per_query(ref, scores, labels, ptr, **kw):
    return np.array([ref(list(scores[a:b]), list(labels[a:b]), **kw) for a, b in spans(ptr)])


def random_queries(seed, n_queries=60, max_docs=15):
    """Integer-rounded scores (many ties), graded labels 0-4, some queries with no relevant doc,
    some with a single document."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_docs + 1, n_queries)
    sizes[:3] = 1
    n = int(sizes.sum())
    scores = np.round(rng.normal(size=n) * 1.5)
    labels = rng.choice(5, size=n, p=[0.5, 0.2, 0.15, 0.1, 0.05]).astype(float)
    ptr = np.concatenate(([0], np.cumsum(sizes)))
    for q in rng.choice(n_queries, size=8, replace=False):
        labels[ptr[q] : ptr[q + 1]] = 0.0
    return scores, labels, ptr


def assert_same(actual, expected):
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# Hand-computed values
# ---------------------------------------------------------------------------------------------


def test_hand_computed_values():
    # ranked labels 0, 1, 2
    s, y, ptr = [3.0, 2.0, 1.0], [0, 1, 2], [0, 3]
    dcg = 1 / math.log2(3) + 3 / math.log2(4)
    idcg = 3 + 1 / math.log2(3)
    assert ndcg(s, y, ptr)[0] == pytest.approx(dcg / idcg)
    assert ndcg(s, y, ptr, k=1)[0] == 0.0
    assert average_precision(s, y, ptr)[0] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert average_precision(s, y, ptr, k=2)[0] == pytest.approx((1 / 2) / 2)
    assert average_precision(s, y, ptr, threshold=2)[0] == pytest.approx(1 / 3)
    assert precision(s, y, ptr, k=2)[0] == 0.5
    assert mrr(s, y, ptr)[0] == 0.5
    assert mrr(s, y, ptr, threshold=2)[0] == pytest.approx(1 / 3)


def test_ap_at_k_normaliser_is_min_of_relevant_and_k():
    # 4 relevant documents, the first 2 ranked perfectly: AP@2 = 1 (normaliser min(R, k) = 2)
    s, y, ptr = [4.0, 3.0, 2.0, 1.0, 0.0], [1, 1, 0, 1, 1], [0, 5]
    assert average_precision(s, y, ptr, k=2)[0] == 1.0
    assert average_precision(s, y, ptr)[0] == pytest.approx((1 + 1 + 3 / 4 + 4 / 5) / 4)


def test_precision_divides_by_k_when_list_is_shorter():
    assert precision([1.0, 0.0], [1, 1], [0, 2], k=10)[0] == pytest.approx(0.2)


def test_k_larger_than_list_equals_full_list():
    s, y, ptr = random_queries(1)
    assert_same(ndcg(s, y, ptr, k=1000), ndcg(s, y, ptr))
    assert_same(average_precision(s, y, ptr, k=1000), average_precision(s, y, ptr))


def test_tie_rules_on_constant_scores():
    s, ptr = [0.0, 0.0, 0.0], [0, 3]
    # worst: the relevant documents go last whatever the input order
    for y in ([2, 1, 0], [0, 1, 2], [1, 2, 0]):
        assert ndcg(s, y, ptr)[0] == pytest.approx(ndcg([3.0, 2.0, 1.0], [0, 1, 2], ptr)[0])
        assert mrr(s, y, ptr)[0] == pytest.approx(1 / 2)
    # stable: input order
    assert ndcg(s, [2, 1, 0], ptr, ties="stable")[0] == 1.0
    assert ndcg(s, [0, 1, 2], ptr, ties="stable")[0] < 1.0
    assert mrr(s, [1, 0, 0], ptr, ties="stable")[0] == 1.0
    assert mrr(s, [0, 0, 1], ptr, ties="stable")[0] == pytest.approx(1 / 3)


def test_ties_only_within_equal_scores():
    # worst-case applies to the tied pair only; the higher score still comes first
    s, y, ptr = [1.0, 1.0, 5.0], [2, 0, 0], [0, 3]
    # ranks: doc2 (5.0, label 0), then doc1 (label 0), then doc0 (label 2)
    assert ndcg(s, y, ptr)[0] == pytest.approx(1 / math.log2(4))
    assert ndcg(s, y, ptr, ties="stable")[0] == pytest.approx(1 / math.log2(3))


def test_undefined_queries_are_nan():
    s = [1.0, 2.0, 3.0, 1.0]
    y = [0, 0, 0.5, 2]
    ptr = [0, 2, 3, 4]
    # query 0: all zero labels; query 1: label 0.5 (gain > 0, but below threshold 1)
    assert_same(ndcg(s, y, ptr), [NAN, 1.0, 1.0])
    assert_same(average_precision(s, y, ptr), [NAN, NAN, 1.0])
    assert_same(precision(s, y, ptr, k=1), [NAN, NAN, 1.0])
    assert_same(mrr(s, y, ptr), [NAN, NAN, 1.0])
    assert_same(average_precision(s, y, ptr, threshold=0.5), [NAN, 1.0, 1.0])


def test_single_documents_and_empty_input():
    assert_same(ndcg([0.3], [1], [0, 1]), [1.0])
    assert_same(average_precision([0.3], [0], [0, 1]), [NAN])
    assert ndcg(np.zeros(0), np.zeros(0), [0]).shape == (0,)


# ---------------------------------------------------------------------------------------------
# Against the reference implementation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ties", ["worst", "stable"])
@pytest.mark.parametrize("k", [None, 1, 3, 5, 40])
def test_matches_reference(ties, k):
    for seed in range(3):
        s, y, ptr = random_queries(seed)
        assert_same(ndcg(s, y, ptr, k=k, ties=ties), per_query(ref_ndcg, s, y, ptr, k=k, ties=ties))
        for threshold in (1.0, 2.0):
            assert_same(
                average_precision(s, y, ptr, k=k, threshold=threshold, ties=ties),
                per_query(ref_ap, s, y, ptr, k=k, threshold=threshold, ties=ties),
            )
            assert_same(
                precision(s, y, ptr, k=k or 10, threshold=threshold, ties=ties),
                per_query(ref_precision, s, y, ptr, k=k or 10, threshold=threshold, ties=ties),
            )
            assert_same(
                mrr(s, y, ptr, threshold=threshold, ties=ties),
                per_query(ref_rr, s, y, ptr, threshold=threshold, ties=ties),
            )


def test_evaluate_matches_individual_measures():
    s, y, ptr = random_queries(5)
    out = evaluate(s, y, ptr, ["ndcg@5", "map", "p@3", "mrr"], ties="stable", undefined="zero")
    assert list(out) == ["ndcg@5", "map", "p@3", "mrr"]
    expected = [
        ndcg(s, y, ptr, k=5, ties="stable"),
        average_precision(s, y, ptr, ties="stable"),
        precision(s, y, ptr, k=3, ties="stable"),
        mrr(s, y, ptr, ties="stable"),
    ]
    for value, per_q in zip(out.values(), expected, strict=True):
        assert value == pytest.approx(np.nan_to_num(per_q, nan=0.0).mean())


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------

queries = st.lists(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=8),
    min_size=1,
    max_size=6,
)


def arrays(qs):
    scores = np.array([s for q in qs for s, _ in q], dtype=float)
    labels = np.array([y for q in qs for _, y in q], dtype=float)
    ptr = np.concatenate(([0], np.cumsum([len(q) for q in qs])))
    return scores, labels, ptr


def all_measures(s, y, ptr, ties, k=3):
    return [
        ndcg(s, y, ptr, ties=ties),
        ndcg(s, y, ptr, k=k, ties=ties),
        average_precision(s, y, ptr, ties=ties),
        average_precision(s, y, ptr, k=k, ties=ties),
        precision(s, y, ptr, k=k, ties=ties),
        mrr(s, y, ptr, ties=ties),
    ]


@settings(max_examples=60, deadline=None)
@given(queries)
def test_values_in_unit_interval_and_nan_only_without_relevant(qs):
    s, y, ptr = arrays(qs)
    no_gain = np.array([not np.any(y[a:b] > 0) for a, b in spans(ptr)])
    no_rel = np.array([not np.any(y[a:b] >= 1) for a, b in spans(ptr)])
    for ties in ("worst", "stable"):
        values = all_measures(s, y, ptr, ties)
        for i, v in enumerate(values):
            np.testing.assert_array_equal(np.isnan(v), no_gain if i < 2 else no_rel)
            assert np.all((v[~np.isnan(v)] >= 0) & (v[~np.isnan(v)] <= 1 + 1e-12))


@settings(max_examples=60, deadline=None)
@given(queries, st.randoms(use_true_random=False))
def test_permutation_invariance(qs, rnd):
    """Shuffling documents within queries changes nothing under "worst" (even with ties), and
    nothing under "stable" once the scores are distinct."""
    s, y, ptr = arrays(qs)
    s_distinct = s + np.arange(s.size) * 1e-3  # break ties, keep the order of distinct scores
    perm = np.arange(s.size)
    for a, b in spans(ptr):
        block = list(perm[a:b])
        rnd.shuffle(block)
        perm[a:b] = block
    for before, after in zip(
        all_measures(s, y, ptr, "worst"), all_measures(s[perm], y[perm], ptr, "worst"), strict=True
    ):
        assert_same(after, before)
    for before, after in zip(
        all_measures(s_distinct, y, ptr, "stable"),
        all_measures(s_distinct[perm], y[perm], ptr, "stable"),
        strict=True,
    ):
        assert_same(after, before)


@settings(max_examples=40, deadline=None)
@given(queries)
def test_monotone_transform_of_scores_changes_nothing(qs):
    s, y, ptr = arrays(qs)
    for ties in ("worst", "stable"):
        for before, after in zip(
            all_measures(s, y, ptr, ties),
            all_measures(np.exp(0.5 * s) - 7.0, y, ptr, ties),
            strict=True,
        ):
            assert_same(after, before)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=5))
def test_worst_is_the_minimum_over_tie_orders(query):
    """ties="worst" equals the minimum of ties="stable" over every input order of the query."""
    s, y, _ = arrays([query])
    perms = [np.array(p) for p in itertools.permutations(range(s.size))]
    s_all = np.concatenate([s[p] for p in perms])
    y_all = np.concatenate([y[p] for p in perms])
    ptr_all = np.arange(len(perms) + 1) * s.size
    worst = all_measures(s, y, np.array([0, s.size]), "worst", k=2)
    stable = all_measures(s_all, y_all, ptr_all, "stable", k=2)
    for w, st_values in zip(worst, stable, strict=True):
        if np.isnan(w[0]):
            assert np.all(np.isnan(st_values))
        else:
            assert w[0] == pytest.approx(st_values.min(), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(queries)
def test_ideal_scores_give_one(qs):
    s, y, ptr = arrays(qs)
    for v in all_measures(y, y, ptr, "worst")[:4] + [mrr(y, y, ptr)]:
        assert np.all(np.isnan(v) | (np.abs(v - 1.0) < 1e-12))


# ---------------------------------------------------------------------------------------------
# mean_over_queries, parsing, validation
# ---------------------------------------------------------------------------------------------


def test_mean_over_queries_rules():
    v = [0.2, NAN, 0.6, NAN]
    assert mean_over_queries(v) == pytest.approx(0.4)
    assert mean_over_queries(v, undefined="exclude") == pytest.approx(0.4)
    assert mean_over_queries(v, undefined="one") == pytest.approx(2.8 / 4)
    assert mean_over_queries(v, undefined="zero") == pytest.approx(0.8 / 4)
    assert math.isnan(mean_over_queries([NAN, NAN]))
    assert mean_over_queries([NAN, NAN], undefined="one") == 1.0
    assert math.isnan(mean_over_queries([]))
    with pytest.raises(ValueError, match="undefined must be one of"):
        mean_over_queries(v, undefined="skip")
    with pytest.raises(ValueError, match="1-D"):
        mean_over_queries([[0.1]])


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("ndcg", MetricSpec("ndcg", "ndcg", None)),
        ("NDCG@10", MetricSpec("ndcg@10", "ndcg", 10)),
        (" map ", MetricSpec("map", "map", None)),
        ("map@5", MetricSpec("map@5", "map", 5)),
        ("p@3", MetricSpec("p@3", "precision", 3)),
        ("precision@3", MetricSpec("p@3", "precision", 3)),
        ("mrr", MetricSpec("mrr", "mrr", None)),
    ],
)
def test_parse_metric(spec, expected):
    assert parse_metric(spec) == expected


@pytest.mark.parametrize(
    "spec, message",
    [
        ("ndgc@10", "unknown metric"),
        ("ndcg@", "unknown metric"),
        ("ndcg@-1", "unknown metric"),
        ("ndcg@0", "cutoff must be >= 1"),
        ("p", "precision needs a cutoff"),
        ("mrr@10", "mrr takes no cutoff"),
    ],
)
def test_parse_metric_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_metric(spec)
    with pytest.raises(TypeError, match="must be a string"):
        parse_metric(10)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"scores": [[1.0, 2.0]], "labels": [1, 0]}, ValueError, "scores must be 1-D"),
        ({"labels": [[1, 0]]}, ValueError, "labels must be 1-D"),
        ({"labels": [1, 0, 1]}, ValueError, "differ in length"),
        ({"scores": [NAN, 1.0]}, ValueError, "scores must be finite"),
        ({"labels": [float("inf"), 0]}, ValueError, "labels must be finite"),
        ({"labels": [-1, 0]}, ValueError, "labels must be >= 0"),
        ({"group_ptr": [0, 3]}, ValueError, "query boundaries end at 3"),
        ({"group_ptr": [1, 2]}, ValueError, "must start at 0"),
        ({"k": 0}, ValueError, "k must be >= 1"),
        ({"k": 2.5}, TypeError, "k must be an integer"),
        ({"k": True}, TypeError, "k must be an integer"),
        ({"ties": "best"}, ValueError, "ties must be one of"),
    ],
)
def test_validation(kwargs, error, message):
    args = {"scores": [1.0, 2.0], "labels": [1, 0], "group_ptr": [0, 2]} | kwargs
    with pytest.raises(error, match=message):
        ndcg(args.pop("scores"), args.pop("labels"), args.pop("group_ptr"), **args)


def test_validation_threshold_and_required_k():
    with pytest.raises(ValueError, match="threshold must be finite and > 0"):
        average_precision([1.0], [1], [0, 1], threshold=0)
    with pytest.raises(TypeError, match="threshold must be a real number"):
        mrr([1.0], [1], [0, 1], threshold="1")
    with pytest.raises(ValueError, match="k is required"):
        precision([1.0], [1], [0, 1], k=None)
    assert ndcg(np.array([1, 2]), np.array([1, 0], dtype=np.int32), [0, 2])[0] == pytest.approx(
        1 / math.log2(3)
    )


def test_adapter_options_fail_early():
    with pytest.raises(ValueError, match="unknown metric"):
        make_lightgbm_feval("ndcg@10", "auc")
    with pytest.raises(ValueError, match="at least one metric"):
        make_xgboost_metric()
    with pytest.raises(ValueError, match="undefined must be one of"):
        make_xgboost_metric("map", undefined="skip")
    with pytest.raises(ValueError, match="ties must be one of"):
        make_lightgbm_feval("map", ties="random")


# ---------------------------------------------------------------------------------------------
# LightGBM and XGBoost
# ---------------------------------------------------------------------------------------------


def ranking_data(seed, n_queries=80):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 30, n_queries)
    n = int(sizes.sum())
    X = rng.normal(size=(n, 6))
    utility = X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + rng.normal(size=n)
    y = np.digitize(utility, [0.5, 1.5, 2.5]).astype(float)
    ptr = np.concatenate(([0], np.cumsum(sizes)))
    for q in range(0, n_queries, 7):  # some queries without relevant document
        y[ptr[q] : ptr[q + 1]] = 0.0
    return X, y, sizes, ptr


def has_ties_within_queries(scores, ptr):
    return any(np.unique(scores[a:b]).size < b - a for a, b in spans(ptr))


def test_lightgbm_ndcg_metric_is_stable_ties_and_undefined_one():
    X, y, sizes, _ = ranking_data(0)
    Xv, yv, sizes_v, ptr_v = ranking_data(1)
    train = lgb.Dataset(X, y, group=sizes)
    valid = lgb.Dataset(Xv, yv, group=sizes_v, reference=train)
    eval_at = [1, 3, 5, 10]
    params = {
        "objective": "lambdarank",
        "metric": "ndcg",
        "eval_at": eval_at,
        "num_leaves": 4,
        "min_data_in_leaf": 50,
        "verbose": -1,
        "num_threads": 1,
    }
    record = {}
    booster = lgb.train(
        params,
        train,
        num_boost_round=3,
        valid_sets=[valid],
        valid_names=["v"],
        callbacks=[lgb.record_evaluation(record)],
    )
    pred = booster.predict(Xv)
    assert has_ties_within_queries(pred, ptr_v)  # so that the tie rule is exercised
    for k in eval_at:
        ours = mean_over_queries(ndcg(pred, yv, ptr_v, k=k, ties="stable"), undefined="one")
        assert ours == pytest.approx(record["v"][f"ndcg@{k}"][-1], rel=1e-9)
    worst = mean_over_queries(ndcg(pred, yv, ptr_v, k=3), undefined="one")
    assert worst < record["v"]["ndcg@3"][-1] - 1e-6


def test_lightgbm_map_metric_matches_ap_at_k_with_min_normaliser():
    """LightGBM's map@k: relevant = label > 0.5, normaliser min(R, k), no relevant -> 1. Its
    sort is not stable, so the scores are made distinct with a continuous init_score."""
    X, y, sizes, _ = ranking_data(2)
    Xv, yv, sizes_v, ptr_v = ranking_data(3)
    init = np.random.default_rng(4).uniform(0, 1e-3, size=yv.size)
    train = lgb.Dataset(X, y, group=sizes)
    valid = lgb.Dataset(Xv, yv, group=sizes_v, init_score=init, reference=train)
    eval_at = [1, 3, 5, 10, 100]  # 100 exceeds every query: full-list AP
    params = {
        "objective": "lambdarank",
        "metric": "map",
        "eval_at": eval_at,
        "num_leaves": 4,
        "verbose": -1,
        "num_threads": 1,
    }
    record = {}
    booster = lgb.train(
        params,
        train,
        num_boost_round=5,
        valid_sets=[valid],
        valid_names=["v"],
        callbacks=[lgb.record_evaluation(record)],
    )
    pred = booster.predict(Xv) + init
    assert not has_ties_within_queries(pred, ptr_v)
    for k in eval_at:
        ours = average_precision(pred, yv, ptr_v, k=k, threshold=1.0, ties="stable")
        assert mean_over_queries(ours, undefined="one") == pytest.approx(
            record["v"][f"map@{k}"][-1], rel=1e-9
        )
    full = mean_over_queries(average_precision(pred, yv, ptr_v), undefined="one")
    assert full == pytest.approx(record["v"]["map@100"][-1], rel=1e-9)


def test_lightgbm_feval_inside_train():
    X, y, sizes, _ = ranking_data(5)
    Xv, yv, sizes_v, ptr_v = ranking_data(6)
    train = lgb.Dataset(X, y, group=sizes)
    valid = lgb.Dataset(Xv, yv, group=sizes_v, reference=train)
    feval = make_lightgbm_feval("ndcg@5", ["map", "mrr"], undefined="zero")
    params = {
        "objective": "lambdarank",
        "metric": "None",
        "num_leaves": 4,
        "verbose": -1,
        "num_threads": 1,
    }
    record = {}
    booster = lgb.train(
        params,
        train,
        num_boost_round=4,
        valid_sets=[valid],
        valid_names=["v"],
        feval=feval,
        callbacks=[lgb.record_evaluation(record)],
    )
    assert set(record["v"]) == {"ndcg@5", "map", "mrr"}
    for i in range(4):
        pred = booster.predict(Xv, num_iteration=i + 1)
        expected = evaluate(pred, yv, ptr_v, ["ndcg@5", "map", "mrr"], undefined="zero")
        for name, value in expected.items():
            assert record["v"][name][i] == pytest.approx(value, rel=1e-12)
    out = feval(booster.predict(Xv), valid)
    assert [(name, higher) for name, _, higher in out] == [
        ("ndcg@5", True),
        ("map", True),
        ("mrr", True),
    ]
    with pytest.raises(ValueError, match="no query information"):
        feval(np.zeros(yv.size), lgb.Dataset(Xv, yv).construct())


def test_xgboost_metric_inside_train():
    X, y, sizes, ptr = ranking_data(7)
    Xv, yv, sizes_v, ptr_v = ranking_data(8)
    dtrain = xgb.DMatrix(X, y, group=sizes)
    dvalid = xgb.DMatrix(Xv, yv, group=sizes_v)
    metric = make_xgboost_metric("ndcg@5", "p@3", ties="stable")
    record = {}
    booster = xgb.train(
        {"objective": "rank:ndcg", "max_depth": 3, "disable_default_eval_metric": 1, "nthread": 1},
        dtrain,
        num_boost_round=4,
        evals=[(dvalid, "v")],
        custom_metric=metric,
        evals_result=record,
        verbose_eval=False,
    )
    assert set(record["v"]) == {"ndcg@5", "p@3"}
    for i in range(4):
        pred = booster.predict(dvalid, iteration_range=(0, i + 1), output_margin=True)
        expected = evaluate(pred, yv, ptr_v, ["ndcg@5", "p@3"], ties="stable")
        for name, value in expected.items():
            assert record["v"][name][i] == pytest.approx(value, rel=1e-6)
    single = make_xgboost_metric("mrr")(booster.predict(dvalid), dvalid)
    assert single[0] == "mrr" and 0 < single[1] <= 1
    with pytest.raises(ValueError, match="no query information"):
        metric(np.zeros(yv.size), xgb.DMatrix(Xv, yv))


def _relevant_everywhere(seed):
    X, y, sizes, ptr = ranking_data(seed)
    for a in ptr[:-1]:  # a relevant document in every query: the hosts' weighted rule for
        y[a] = max(y[a], 2.0)  # a query without one is not a weighted mean (adapter docs)
    return X, y, sizes, ptr


def test_weighted_metrics_match_the_hosts():
    """With weights on the evaluation data, the adapters' NDCG and MAP equal LightGBM's (a
    query weighs the mean of its documents' weights) and XGBoost's (one weight per query)."""
    X, y, sizes, _ = ranking_data(9)
    Xv, yv, sizes_v, ptr_v = _relevant_everywhere(10)
    rng = np.random.default_rng(11)
    qw = rng.uniform(0.1, 3.0, sizes_v.size)
    dw = np.repeat(qw, sizes_v) * rng.uniform(0.5, 1.5, yv.size)  # varies within a query
    init = rng.uniform(0, 1e-3, size=yv.size)  # distinct scores: LightGBM's sort is unstable
    train = lgb.Dataset(X, y, group=sizes)
    valid = lgb.Dataset(Xv, yv, group=sizes_v, weight=dw, init_score=init, reference=train)
    record = {}
    params = {"objective": "lambdarank", "metric": ["ndcg", "map"], "eval_at": [5],
              "num_leaves": 4, "verbose": -1, "num_threads": 1}
    lgb.train(params, train, num_boost_round=3, valid_sets=[valid], valid_names=["v"],
              feval=make_lightgbm_feval("ndcg@5", "map@5", ties="stable", undefined="one",
                                        prefix="ag_"),
              callbacks=[lgb.record_evaluation(record)])
    for name in ("ndcg@5", "map@5"):
        # (LightGBM keeps the weights in float32)
        assert record["v"]["ag_" + name][-1] == pytest.approx(record["v"][name][-1], rel=1e-7)

    dtrain = xgb.DMatrix(X, y, group=sizes)
    dvalid = xgb.DMatrix(Xv, yv, group=sizes_v, weight=qw)
    record = {}
    xgb.train({"objective": "rank:ndcg", "max_depth": 3, "eval_metric": ["ndcg@5"],
               "nthread": 1}, dtrain, num_boost_round=3, evals=[(dvalid, "v")],
              custom_metric=make_xgboost_metric("ndcg@5", ties="stable", undefined="one",
                                                prefix="ag_"),
              evals_result=record, verbose_eval=False)
    assert record["v"]["ag_ndcg@5"][-1] == pytest.approx(record["v"]["ndcg@5"][-1], rel=1e-5)


def test_a_cutoff_beyond_any_list_is_the_whole_list():
    s, y, ptr = np.array([1.0, 2.0, 3.0]), np.array([2.0, 1.0, 0.0]), np.array([0, 3])
    assert ndcg(s, y, ptr, k=2**64)[0] == ndcg(s, y, ptr)[0]
    big = 10**20
    got = evaluate(s, y, ptr, [f"ndcg@{big}", f"map@{big}", f"recall@{big}", f"p@{big}"])
    assert got[f"ndcg@{big}"] == ndcg(s, y, ptr)[0]
    assert got[f"map@{big}"] == average_precision(s, y, ptr)[0]
    assert got[f"recall@{big}"] == 1.0 and 0 < got[f"p@{big}"] < 1e-18


def test_evaluate_with_weights():
    s, y = np.array([3.0, 2.0, 1.0, 1.0, 2.0]), np.array([0.0, 1.0, 2.0, 1.0, 0.0])
    ptr = np.array([0, 3, 5])
    per_query = ndcg(s, y, ptr)
    got = evaluate(s, y, ptr, "ndcg", weights=[1.0, 1.0, 1.0, 2.0, 4.0])["ndcg"]
    assert got == pytest.approx((per_query[0] * 1.0 + per_query[1] * 3.0) / 4.0)
    assert evaluate(s, y, ptr, "ndcg", weights=[1.0, 3.0])["ndcg"] == pytest.approx(got)
    with pytest.raises(ValueError, match="one per query or one per document"):
        evaluate(s, y, ptr, "ndcg", weights=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="non-negative"):
        evaluate(s, y, ptr, "ndcg", weights=[1.0, -3.0])
    with pytest.raises(ValueError, match="non-negative"):  # a positive mean does not hide it
        evaluate(s, y, ptr, "ndcg", weights=[1.0, 1.0, -1.0, 2.0, 4.0])


def test_metric_prefix_keeps_the_hosts_own_metric_apart():
    """LightGBM's ndcg@5 and approx_gbdt's, side by side: with a prefix each has its own
    history (without one both land under one key, two values a round)."""
    X, y, sizes, _ = ranking_data(5)
    Xv, yv, sizes_v, ptr_v = ranking_data(6)
    train = lgb.Dataset(X, y, group=sizes)
    valid = lgb.Dataset(Xv, yv, group=sizes_v, reference=train)
    record = {}
    params = {"objective": "lambdarank", "metric": "ndcg", "eval_at": [5], "num_leaves": 4,
              "verbose": -1, "num_threads": 1}
    lgb.train(params, train, num_boost_round=3, valid_sets=[valid], valid_names=["v"],
              feval=make_lightgbm_feval("ndcg@5", ties="stable", undefined="one",
                                        prefix="ag_"),
              callbacks=[lgb.record_evaluation(record)])
    assert len(record["v"]["ndcg@5"]) == len(record["v"]["ag_ndcg@5"]) == 3
    np.testing.assert_allclose(record["v"]["ag_ndcg@5"], record["v"]["ndcg@5"], rtol=1e-6)
    dvalid = xgb.DMatrix(Xv, yv, group=sizes_v)
    name, _ = make_xgboost_metric("map", prefix="ag_")(np.zeros(yv.size), dvalid)
    assert name == "ag_map"
    with pytest.raises(TypeError, match="prefix must be a string"):
        make_lightgbm_feval("map", prefix=None)
