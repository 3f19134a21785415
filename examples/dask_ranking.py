"""Train ApproxNDCG rankers on Dask (LightGBM and XGBoost) and compare with one machine.

Starts a LocalCluster of 2 worker processes on 127.0.0.1, trains both backends on generated
data, prints held-out NDCG@10 next to single-machine training, and shuts the cluster down.

    python examples/dask_ranking.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd

N_FEATURES = 8
FEATURES = [f"f{i}" for i in range(N_FEATURES)]


def make_data(n_queries, seed, noise=1.0):
    """Queries of 5-29 documents, graded labels 0-4 from a noisy linear score."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 30, n_queries)
    qid = np.repeat(np.arange(n_queries), sizes)
    X = rng.normal(size=(qid.size, N_FEATURES))
    w = np.random.default_rng(12345).normal(size=N_FEATURES)
    s = X @ w + 0.5 * np.sin(3 * X[:, 0]) + rng.normal(scale=noise, size=qid.size)
    med = pd.Series(s).groupby(qid).transform("median").to_numpy()
    df = pd.DataFrame(X, columns=FEATURES)
    df["qid"] = qid
    df["y"] = np.clip(np.floor(s - med + 1.5), 0, 4)
    return df


def ndcg10(scores, df):
    from approx_gbdt.metrics import mean_over_queries, ndcg

    ptr = np.concatenate(([0], np.cumsum(df.groupby("qid", sort=False).size().to_numpy())))
    return mean_over_queries(ndcg(scores, df["y"].to_numpy(), ptr, k=10))


def main():
    import dask.dataframe as dd
    import lightgbm as lgb
    import xgboost as xgb
    from distributed import Client, LocalCluster
    from lightgbm.dask import DaskLGBMRanker

    from approx_gbdt import approx_ndcg_obj
    from approx_gbdt.dask import lightgbm_ranking_data, train_xgboost

    train, test = make_data(1000, 0), make_data(500, 1)
    # Row blocks that cut through queries, as data read in chunks usually does.
    ddf = dd.from_pandas(train, npartitions=4, sort=False)
    lgb_params = dict(n_estimators=100, learning_rate=0.1, num_leaves=15, deterministic=True,
                      force_row_wise=True, random_state=0, verbose=-1)
    xgb_params = dict(tree_method="hist", eta=0.1, max_depth=4, seed=0)
    rounds = 100

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=None)
    client = Client(cluster)
    try:
        # LightGBM: X, y and group sizes with matching chunks, every query in one chunk.
        parts = lightgbm_ranking_data(ddf, qid="qid", label="y")
        ranker = DaskLGBMRanker(objective=approx_ndcg_obj, client=client, **lgb_params)
        ranker.fit(**parts._asdict())
        lgb_dask = ndcg10(ranker.to_local().predict(test[FEATURES]), test)

        # XGBoost: partition by query, then xgboost.dask.train(..., obj=approx_ndcg_obj).
        out = train_xgboost(client, xgb_params, ddf, qid="qid", label="y",
                            obj=approx_ndcg_obj, num_boost_round=rounds)
        xgb_dask = ndcg10(out["booster"].predict(xgb.DMatrix(test[FEATURES])), test)
    finally:
        client.close()
        cluster.close()

    sizes = train.groupby("qid", sort=False).size().to_numpy()
    local_lgb = lgb.LGBMRanker(objective=approx_ndcg_obj, **lgb_params)
    local_lgb.fit(train[FEATURES], train["y"], group=sizes)
    lgb_local = ndcg10(local_lgb.predict(test[FEATURES]), test)
    dtrain = xgb.DMatrix(train[FEATURES], train["y"], qid=train["qid"])
    booster = xgb.train(xgb_params, dtrain, rounds, obj=approx_ndcg_obj)
    xgb_local = ndcg10(booster.predict(xgb.DMatrix(test[FEATURES])), test)

    print(f"held-out NDCG@10 ({test['qid'].nunique()} queries)")
    print(f"{'':10s}{'Dask (2 workers)':>18s}{'one machine':>14s}")
    print(f"{'LightGBM':10s}{lgb_dask:18.4f}{lgb_local:14.4f}")
    print(f"{'XGBoost':10s}{xgb_dask:18.4f}{xgb_local:14.4f}")


if __name__ == "__main__":
    main()
