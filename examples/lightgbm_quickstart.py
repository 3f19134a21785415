"""ApproxNDCG and ApproxAP as LightGBM objectives, next to the native lambdarank.

    python examples/lightgbm_quickstart.py

Generated data (no download); prints test NDCG@1/3/5/10 and MAP of each objective.
"""

import lightgbm as lgb

from approx_gbdt import approx_ap_obj, approx_ndcg_obj, evaluate, group_sizes_from_ptr
from approx_gbdt.datasets import make_ranking_splits

METRICS = ["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"]


def dataset(split, reference=None):
    return lgb.Dataset(
        split.X, split.y, group=group_sizes_from_ptr(split.group_ptr), reference=reference
    )


def main():
    data = make_ranking_splits(seed=0)
    train = dataset(data["train"])
    valid = dataset(data["valid"], reference=train)
    test = data["test"]
    print(f"{'objective':<12}" + "".join(f"{m:>9}" for m in METRICS) + f"{'rounds':>8}")
    for name, objective in [
        ("ApproxNDCG", approx_ndcg_obj),  # the one-line change: a callable objective
        ("ApproxAP", approx_ap_obj),
        ("lambdarank", "lambdarank"),
    ]:
        params = {
            "objective": objective,
            "metric": "ndcg",  # a callable objective has no default metric
            "eval_at": [10],
            "learning_rate": 0.05,
            "num_leaves": 31,
            "verbose": -1,
            "seed": 0,
            "deterministic": True,
        }
        booster = lgb.train(
            params,
            train,
            num_boost_round=1000,
            valid_sets=[valid],
            callbacks=[lgb.early_stopping(50, verbose=False)],
        )
        scores = booster.predict(test.X, num_iteration=booster.best_iteration)
        result = evaluate(scores, test.y, test.group_ptr, METRICS)
        print(
            f"{name:<12}"
            + "".join(f"{result[m]:>9.4f}" for m in METRICS)
            + f"{booster.best_iteration:>8}"
        )
    print("Test means over queries with a relevant document; ties ranked worst case.")


if __name__ == "__main__":
    main()
