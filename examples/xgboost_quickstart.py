"""ApproxNDCG and ApproxAP as XGBoost objectives, next to the native rank:ndcg.

    python examples/xgboost_quickstart.py

Generated data (no download); prints test NDCG@1/3/5/10 and MAP of each objective, trained
with ``xgb.train(..., obj=...)`` and with the scikit-learn style :class:`ApproxXGBRanker`.
"""

import xgboost as xgb

from approx_gbdt import ApproxXGBRanker, approx_ap_obj, approx_ndcg_obj, evaluate
from approx_gbdt.datasets import make_ranking_splits
from approx_gbdt.utils import group_sizes_from_ptr

METRICS = ["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"]


def dmatrix(split):
    d = xgb.DMatrix(split.X, split.y)
    d.set_group(group_sizes_from_ptr(split.group_ptr))
    return d


def row(name, scores, test, rounds):
    result = evaluate(scores, test.y, test.group_ptr, METRICS)
    print(f"{name:<22}" + "".join(f"{result[m]:>9.4f}" for m in METRICS) + f"{rounds:>8}")


def main():
    data = make_ranking_splits(seed=0)
    train, valid, test = dmatrix(data["train"]), dmatrix(data["valid"]), data["test"]
    print(f"{'objective':<22}" + "".join(f"{m:>9}" for m in METRICS) + f"{'rounds':>8}")
    base = {"eta": 0.05, "max_depth": 6, "eval_metric": "ndcg@10", "seed": 0}
    for name, obj, extra in [
        ("ApproxNDCG", approx_ndcg_obj, {"min_child_weight": 0.01}),
        ("ApproxAP", approx_ap_obj, {"min_child_weight": 0.01}),
        ("rank:ndcg", None, {"objective": "rank:ndcg"}),
    ]:
        booster = xgb.train(
            {**base, **extra},
            train,
            num_boost_round=1000,
            evals=[(valid, "valid")],
            obj=obj,  # the one-line change: obj=approx_ndcg_obj
            early_stopping_rounds=50,
            verbose_eval=False,
        )
        best = booster.best_iteration
        scores = booster.predict(xgb.DMatrix(test.X), iteration_range=(0, best + 1))
        row(name, scores, test, best + 1)

    # The scikit-learn style estimator (xgboost.XGBRanker refuses callable objectives).
    ranker = ApproxXGBRanker(
        objective=approx_ndcg_obj, n_estimators=1000, learning_rate=0.05,
        min_child_weight=0.01, early_stopping_rounds=50,
    )
    v = data["valid"]
    ranker.fit(
        data["train"].X, data["train"].y, group=group_sizes_from_ptr(data["train"].group_ptr),
        eval_set=[(v.X, v.y)], eval_group=[group_sizes_from_ptr(v.group_ptr)],
    )
    row("ApproxXGBRanker", ranker.predict(test.X), test, ranker.best_iteration + 1)
    print("Test means over queries with a relevant document; ties ranked worst case.")


if __name__ == "__main__":
    main()
