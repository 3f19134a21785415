"""approx_gbdt: smoothed ranking measures (ApproxNDCG, ApproxAP, ApproxMRR, ...) as custom
objectives for LightGBM and XGBoost."""

from approx_gbdt import measures as _measures
from approx_gbdt.adarank import AdaRank
from approx_gbdt.catboost_host import CatBoostObjective
from approx_gbdt.datasets import (
    LetorFold,
    RankingData,
    load_letor,
    load_letor_folds,
    make_ranking,
    make_ranking_splits,
)
from approx_gbdt.measures import *  # noqa: F403  (the registered objectives, measures.__all__)
from approx_gbdt.metrics import (
    average_precision,
    evaluate,
    make_lightgbm_feval,
    make_xgboost_metric,
    mean_over_queries,
    mrr,
    ndcg,
    precision,
    rbp,
    recall,
)
from approx_gbdt.model_selection import QueryIdRanker, make_scorer, score_queries
from approx_gbdt.objectives import (
    ApproxAP,
    ApproxNDCG,
    approx_ap_obj,
    approx_ndcg_obj,
    clear_cache,
    gumbel_perturbed,
    smoothed_positions,
)
from approx_gbdt.precompile import precompile
from approx_gbdt.rankboost import RankBoost
from approx_gbdt.softrank import SoftNDCG
from approx_gbdt.training import FitResult, fit_ranker
from approx_gbdt.utils import (
    check_group_ptr,
    group_ptr_from_qid,
    group_ptr_from_sizes,
    group_sizes_from_ptr,
)
from approx_gbdt.xgboost_ranker import ApproxXGBRanker

__version__ = "0.1.0"


def __getattr__(name):
    """Optional parts load on first use, so that ``import approx_gbdt`` needs neither torch
    nor dask: ``approx_gbdt.NeuralRanker`` imports :mod:`approx_gbdt.neural`. It is not in
    ``__all__``, so that ``from approx_gbdt import *`` works without the extra."""
    if name == "NeuralRanker":
        from approx_gbdt.neural import NeuralRanker

        return NeuralRanker
    raise AttributeError(f"module 'approx_gbdt' has no attribute {name!r}")

__all__ = [
    "AdaRank",
    "ApproxAP",
    "ApproxNDCG",
    "ApproxXGBRanker",
    "CatBoostObjective",
    "FitResult",
    "LetorFold",
    "QueryIdRanker",
    "RankBoost",
    "RankingData",
    "SoftNDCG",
    "approx_ap_obj",
    "approx_ndcg_obj",
    "average_precision",
    "check_group_ptr",
    "clear_cache",
    "evaluate",
    "fit_ranker",
    "group_ptr_from_qid",
    "gumbel_perturbed",
    "group_ptr_from_sizes",
    "group_sizes_from_ptr",
    "load_letor",
    "load_letor_folds",
    "make_lightgbm_feval",
    "make_ranking",
    "make_ranking_splits",
    "make_scorer",
    "make_xgboost_metric",
    "mean_over_queries",
    "mrr",
    "ndcg",
    "precision",
    "precompile",
    "rbp",
    "recall",
    "score_queries",
    "smoothed_positions",
    *_measures.__all__,
]
