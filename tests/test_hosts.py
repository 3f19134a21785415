"""The host adapter: one reader for what LightGBM, XGBoost and scikit-learn hand over."""

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb

from approx_gbdt import approx_ndcg_obj
from approx_gbdt.hosts import doc_weights, host_data, read_call

X = np.arange(10.0).reshape(5, 2)
Y = np.array([2.0, 0.0, 1.0, 0.0, 1.0])
SIZES = np.array([3, 2])
PTR = [0, 3, 5]
PREDS = np.array([0.3, -0.1, 0.2, 0.5, 0.0])


def _lgb(weight=None):
    return lgb.Dataset(X, Y, group=SIZES, weight=weight, free_raw_data=False).construct()


def _xgb(weight=None):
    d = xgb.DMatrix(X, Y, weight=weight)
    d.set_group(SIZES)
    return d


def test_the_three_hosts_read_the_same_data():
    for host, (scores, data) in {
        "lightgbm": read_call(PREDS, _lgb()),
        "xgboost": read_call(PREDS, _xgb()),
        "sklearn": read_call(Y, PREDS, None, SIZES),
    }.items():
        assert data.host == host
        np.testing.assert_array_equal(scores, PREDS)
        np.testing.assert_array_equal(data.labels, Y)
        np.testing.assert_array_equal(data.group_ptr, PTR)
        assert data.doc_weights().size == 0


def test_weight_conventions():
    w_doc = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    w_query = np.array([2.0, 3.0])
    np.testing.assert_array_equal(host_data(_lgb(w_doc)).doc_weights(), w_doc)
    # XGBoost's ranking weights are per query: each applies to every document of its query
    np.testing.assert_array_equal(host_data(_xgb(w_query)).doc_weights(), [2, 2, 2, 3, 3])
    # a direct call decides by the length
    np.testing.assert_array_equal(doc_weights(w_doc, np.array(PTR)), w_doc)
    np.testing.assert_array_equal(doc_weights(w_query, np.array(PTR)), [2, 2, 2, 3, 3])
    with pytest.raises(ValueError, match="expected one per document"):
        doc_weights([1.0, 2.0, 3.0], np.array(PTR))
    with pytest.raises(ValueError, match="finite and non-negative"):
        doc_weights([1.0, -1.0], np.array(PTR))


def test_objective_gives_the_same_result_on_every_host():
    results = [
        approx_ndcg_obj(PREDS, _lgb()),
        approx_ndcg_obj(PREDS, _xgb()),
        approx_ndcg_obj(Y, PREDS, None, SIZES),
    ]
    for grad, hess in results[1:]:
        np.testing.assert_allclose(grad, results[0][0], rtol=1e-12)
        np.testing.assert_allclose(hess, results[0][1], rtol=1e-12)
    assert np.any(results[0][0] != 0)


def test_missing_query_information():
    with pytest.raises(ValueError, match="no query information"):
        host_data(lgb.Dataset(X, Y).construct())
    with pytest.raises(ValueError, match="no query information"):
        host_data(xgb.DMatrix(X, Y))
    with pytest.raises(ValueError, match="needs query information"):
        read_call(Y, PREDS)
    with pytest.raises(TypeError, match="lightgbm.Dataset or an xgboost.DMatrix"):
        host_data(X)


def test_thread_count_comes_from_the_host():
    ds = lgb.Dataset(X, Y, group=SIZES, params={"num_threads": 1, "verbose": -1}).construct()
    assert host_data(ds).threads == 1
    assert host_data(_lgb()).threads is None
    with xgb.config_context(nthread=1):
        assert host_data(_xgb()).threads == 1
    assert read_call(Y, PREDS, None, SIZES)[1].threads is None
