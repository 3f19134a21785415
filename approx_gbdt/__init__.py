"""approx_gbdt: ApproxNDCG and ApproxAP as custom objectives for LightGBM and XGBoost."""

from approx_gbdt.objectives import ApproxAP, ApproxNDCG, approx_ap_obj, approx_ndcg_obj
from approx_gbdt.utils import (
    check_group_ptr,
    group_ptr_from_qid,
    group_ptr_from_sizes,
    group_sizes_from_ptr,
)

__version__ = "0.1.0"

__all__ = [
    "ApproxAP",
    "ApproxNDCG",
    "approx_ap_obj",
    "approx_ndcg_obj",
    "check_group_ptr",
    "group_ptr_from_qid",
    "group_ptr_from_sizes",
    "group_sizes_from_ptr",
]
