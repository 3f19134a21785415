"""approx_gbdt: ApproxNDCG and ApproxAP as custom objectives for LightGBM and XGBoost."""

from approx_gbdt.objectives import (
    ApproxAP,
    ApproxNDCG,
    approx_ap_obj,
    approx_ndcg_obj,
    smoothed_positions,
)
from approx_gbdt.utils import (
    check_group_ptr,
    group_ptr_from_qid,
    group_ptr_from_sizes,
    group_sizes_from_ptr,
)
from approx_gbdt.xgboost_ranker import ApproxXGBRanker

__version__ = "0.1.0"

__all__ = [
    "ApproxAP",
    "ApproxNDCG",
    "ApproxXGBRanker",
    "approx_ap_obj",
    "approx_ndcg_obj",
    "check_group_ptr",
    "group_ptr_from_qid",
    "group_ptr_from_sizes",
    "group_sizes_from_ptr",
    "smoothed_positions",
]
