"""Tests for approx_gbdt.datasets: LETOR loaders (real and tiny files) and synthetic data."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from approx_gbdt.datasets import (
    LetorFold,
    RankingData,
    load_letor,
    load_letor_folds,
    make_ranking,
    make_ranking_splits,
)
from approx_gbdt.metrics import evaluate, ndcg
from approx_gbdt.utils import check_group_ptr

DATA = Path(os.environ.get("APPROX_GBDT_DATA",
                         Path(__file__).resolve().parents[2] / "shared" / "data"))
MQ2008 = DATA / "MQ2008"
LGB_RANK = DATA / "LightGBM-lambdarank"


def needs(path: Path):
    if not path.exists():
        pytest.skip(f"{path} is not available")
    return path


# A tiny LETOR file: CRLF line endings, comments, sparse indices, a blank line.
TINY = (
    b"# a comment line\r\n"
    b"2 qid:10 1:0.5 3:1.5 # docid = A\r\n"
    b"0 qid:10 2:-1 #docid = B inc = 1 prob = 0.5\r\n"
    b"\r\n"
    b"1 qid:7 1:1 2:2 3:3\r\n"
)
TINY_X = np.array([[0.5, 0.0, 1.5], [0.0, -1.0, 0.0], [1.0, 2.0, 3.0]])
TINY_Y = np.array([2.0, 0.0, 1.0])
TINY_PTR = np.array([0, 2, 3])


def write(path: Path, data: bytes) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def assert_data_equal(actual: RankingData, X, y, ptr):
    np.testing.assert_array_equal(actual.X, X)
    np.testing.assert_array_equal(actual.y, y)
    np.testing.assert_array_equal(actual.group_ptr, ptr)


# ---------------------------------------------------------------------------------------------
# load_letor on small files
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny.txt", "tiny.txt.gz"])
def test_load_letor_crlf_comments_and_gzip(tmp_path, name):
    data = load_letor(write(tmp_path / name, TINY))
    assert isinstance(data, RankingData)
    assert_data_equal(data, TINY_X, TINY_Y, TINY_PTR)
    assert data.X.dtype == np.float64 and data.y.dtype == np.float64
    assert data.group_ptr.dtype == np.int64 and data.n_queries == 2


def test_load_letor_n_features_and_dtype(tmp_path):
    X, y, ptr = load_letor(write(tmp_path / "t.txt", TINY), n_features=5, dtype=np.float32)
    assert X.shape == (3, 5) and X.dtype == np.float32
    np.testing.assert_array_equal(X[:, :3], TINY_X)
    assert not X[:, 3:].any()


def test_load_letor_query_file(tmp_path):
    body = b"1 1:0.1 2:0.2\n0 1:0.3\n2 2:0.4\n0 1:0.5\n1 1:0.6\n"
    write(tmp_path / "rank.train.gz", body)
    (tmp_path / "rank.train.query").write_text("2\n3\n")
    data = load_letor(tmp_path / "rank.train.gz")
    np.testing.assert_array_equal(data.group_ptr, [0, 2, 5])
    np.testing.assert_array_equal(data.y, [1, 0, 2, 0, 1])
    # <path>.query is found too
    write(tmp_path / "a.txt", body)
    (tmp_path / "a.txt.query").write_text("1\n4\n")
    np.testing.assert_array_equal(load_letor(tmp_path / "a.txt").group_ptr, [0, 1, 5])
    # sizes that do not add up to the rows
    write(tmp_path / "b.txt", body)
    (tmp_path / "b.query").write_text("2\n2\n")
    with pytest.raises(ValueError, match=r"b\.query.*add up to 4 documents but there are 5"):
        load_letor(tmp_path / "b.txt")


def test_load_letor_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        load_letor(tmp_path / "nowhere.txt")
    bad = write(tmp_path / "bad.txt", b"1 qid:1 1:0.5\n0 qid:1 1:abc\n")
    with pytest.raises(ValueError, match=r"bad\.txt: cannot parse"):
        load_letor(bad)
    split = write(tmp_path / "split.txt", b"1 qid:1 1:1\n0 qid:2 1:1\n1 qid:1 1:2\n")
    with pytest.raises(ValueError, match=r"split\.txt: .*contiguous"):
        load_letor(split)
    noqid = write(tmp_path / "noqid.txt", b"1 1:1\n0 1:2\n")
    with pytest.raises(ValueError, match=r"noqid\.txt: the file has no qid: fields"):
        load_letor(noqid)
    mixed = write(tmp_path / "mixed.txt", b"1 qid:1 1:1\n0 1:2\n1 qid:2 1:3\n")
    with pytest.raises(ValueError, match="some lines have a qid"):
        load_letor(mixed)
    empty = write(tmp_path / "empty.txt", b"# nothing here\n")
    with pytest.raises(ValueError, match="no data lines"):
        load_letor(empty)
    not_gzip = write(tmp_path / "plain.txt", TINY).rename(tmp_path / "plain.txt.gz")
    with pytest.raises(ValueError, match=r"plain\.txt\.gz: cannot parse"):
        load_letor(not_gzip)
    with pytest.raises(ValueError, match=r"t\.txt: cannot parse"):
        load_letor(write(tmp_path / "t.txt", TINY), n_features=2)  # feature 3 does not fit


# ---------------------------------------------------------------------------------------------
# load_letor_folds on small folders
# ---------------------------------------------------------------------------------------------


def make_fold_folder(root: Path, names=("Fold1", "Fold2", "Fold10")) -> Path:
    for i, name in enumerate(names):
        d = root / name
        d.mkdir(parents=True)
        write(d / "train.txt", TINY)
        write(d / "vali.txt.gz", f"1 qid:{i} 5:1.0\r\n0 qid:{i} 1:2.0\r\n".encode())
        write(d / "test.txt", b"0 qid:3 2:1\n2 qid:4 1:1\n1 qid:4 1:0\n")
    return root


def test_load_letor_folds_fold_folders(tmp_path):
    folds = load_letor_folds(make_fold_folder(tmp_path / "data"))
    assert [f.name for f in folds] == ["Fold1", "Fold2", "Fold10"]
    fold = folds[1]
    assert isinstance(fold, LetorFold)
    # common width 5 over train (max index 3), vali (5) and test (2)
    assert {part.X.shape[1] for f in folds for part in (f.train, f.vali, f.test)} == {5}
    assert_data_equal(fold.train, np.pad(TINY_X, ((0, 0), (0, 2))), TINY_Y, TINY_PTR)
    np.testing.assert_array_equal(fold.vali.X, [[0, 0, 0, 0, 1.0], [2.0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(fold.test.group_ptr, [0, 1, 3])
    only = load_letor_folds(tmp_path / "data", folds=["Fold2"])
    assert [f.name for f in only] == ["Fold2"]
    # a single fold folder
    single = load_letor_folds(tmp_path / "data" / "Fold1")
    assert len(single) == 1 and single[0].train.X.shape == (3, 5)


def test_load_letor_folds_json_layout(tmp_path):
    write(tmp_path / "A.txt.gz", TINY)
    write(tmp_path / "B.txt", b"0 qid:10 4:1\n1 qid:10 1:1\n")
    (tmp_path / "folds.json").write_text(
        '{"partitions": {"A": {"file": "A.txt.gz"}, "B": {"file": "B.txt"}},'
        ' "folds": {"F": {"train": ["A", "B"], "vali": ["B"], "test": ["A"]}}}'
    )
    (fold,) = load_letor_folds(tmp_path)
    assert fold.name == "F" and fold.train.X.shape == (5, 4)
    # concatenation keeps the boundary between the parts (both use qid 10)
    np.testing.assert_array_equal(fold.train.group_ptr, [0, 2, 3, 5])
    np.testing.assert_array_equal(fold.train.y, [2, 0, 1, 0, 1])
    np.testing.assert_array_equal(fold.test.X, fold.train.X[:3])


def test_load_letor_folds_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="folder not found"):
        load_letor_folds(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no folds.json and no Fold1"):
        load_letor_folds(tmp_path)
    (tmp_path / "Fold1").mkdir()
    write(tmp_path / "Fold1" / "train.txt", TINY)
    with pytest.raises(FileNotFoundError, match="no vali.txt or vali.txt.gz"):
        load_letor_folds(tmp_path)
    with pytest.raises(ValueError, match="no fold named"):
        load_letor_folds(make_fold_folder(tmp_path / "ok"), folds=["Fold3"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "folds.json").write_text('{"folds": {}}')
    with pytest.raises(ValueError, match="folds.json: expected 'partitions'"):
        load_letor_folds(bad)


# ---------------------------------------------------------------------------------------------
# The real data in $APPROX_GBDT_DATA (skipped when absent)
# ---------------------------------------------------------------------------------------------


def test_mq2008_partition():
    X, y, ptr = load_letor(needs(MQ2008 / "S1.txt.gz"))
    assert X.shape == (2933, 46)
    assert ptr.size - 1 == 157
    check_group_ptr(ptr, 2933)
    np.testing.assert_array_equal(np.bincount(y.astype(int)), [2316, 427, 190])
    no_relevant = sum(not y[a:b].any() for a, b in zip(ptr[:-1], ptr[1:], strict=True))
    assert no_relevant == 52


def test_lightgbm_lambdarank_query_files():
    X, y, ptr = load_letor(needs(LGB_RANK / "rank.train.gz"))
    assert X.shape == (3005, 300) and ptr.size - 1 == 201
    np.testing.assert_array_equal(np.bincount(y.astype(int)), [645, 1211, 858, 222, 69])
    sizes = np.loadtxt(LGB_RANK / "rank.train.query", dtype=int)
    np.testing.assert_array_equal(np.diff(ptr), sizes)
    X_test, _, ptr_test = load_letor(LGB_RANK / "rank.test.gz", n_features=300)
    assert X_test.shape == (768, 300) and ptr_test.size - 1 == 50


def test_mq2008_folds():
    folds = load_letor_folds(needs(MQ2008))
    assert [f.name for f in folds] == [f"Fold{i}" for i in range(1, 6)]
    fold1 = folds[0]
    assert fold1.train.X.shape == (9630, 46)
    assert fold1.vali.X.shape == (2707, 46) and fold1.test.X.shape == (2874, 46)
    assert (fold1.train.n_queries, fold1.vali.n_queries, fold1.test.n_queries) == (471, 157, 156)
    s1 = load_letor(MQ2008 / "S1.txt.gz")
    assert_data_equal(folds[1].test, *s1)  # Fold2 test = S1
    assert_data_equal(folds[2].vali, *s1)  # Fold3 vali = S1
    # Fold1 train = S1 + S2 + S3: it starts with S1
    np.testing.assert_array_equal(fold1.train.X[: s1.X.shape[0]], s1.X)
    np.testing.assert_array_equal(fold1.train.group_ptr[:158], s1.group_ptr)


# ---------------------------------------------------------------------------------------------
# Synthetic data
# ---------------------------------------------------------------------------------------------


def test_make_ranking_shapes_labels_and_determinism():
    data = make_ranking(50, docs_per_query=(5, 30), n_features=12, n_informative=4, seed=3)
    X, y, ptr = data
    sizes = np.diff(ptr)
    assert data.n_queries == 50 and X.shape == (ptr[-1], 12) and y.shape == (ptr[-1],)
    assert sizes.min() >= 5 and sizes.max() <= 30
    check_group_ptr(ptr, y.size)
    assert set(np.unique(y)) <= {0.0, 1.0, 2.0, 3.0, 4.0}
    again = make_ranking(50, docs_per_query=(5, 30), n_features=12, n_informative=4, seed=3)
    for a, b in zip(data, again, strict=True):
        np.testing.assert_array_equal(a, b)
    other = make_ranking(50, docs_per_query=(5, 30), n_features=12, n_informative=4, seed=4)
    assert not np.array_equal(other.X[:10], X[:10])


def test_make_ranking_label_distribution_is_skewed():
    X, y, ptr = make_ranking(400, seed=0)
    counts = np.bincount(y.astype(int), minlength=5)
    assert counts.size == 5 and np.all(np.diff(counts) < 0)  # most 0s, fewest 4s
    assert 0.5 < counts[0] / y.size < 0.62
    no_relevant = np.array([not y[a:b].any() for a, b in zip(ptr[:-1], ptr[1:], strict=True)])
    assert 0 < no_relevant.mean() < 0.1
    _, y3, _ = make_ranking(20, label_levels=3, seed=0)
    assert set(np.unique(y3)) == {0.0, 1.0, 2.0}


def test_make_ranking_errors():
    with pytest.raises(ValueError, match="n_queries"):
        make_ranking(0)
    with pytest.raises(ValueError, match="docs_per_query"):
        make_ranking(5, docs_per_query=(10, 5))
    with pytest.raises(ValueError, match="n_informative"):
        make_ranking(5, n_features=3, n_informative=4)
    with pytest.raises(ValueError, match="label_levels"):
        make_ranking(5, label_levels=1)
    with pytest.raises(ValueError, match="label_decay"):
        make_ranking(5, label_decay=0)
    with pytest.raises(ValueError, match="noise"):
        make_ranking(5, noise=-1)
    with pytest.raises(ValueError, match="three counts"):
        make_ranking_splits((10, 5))


def test_make_ranking_splits_disjoint_queries():
    splits = make_ranking_splits((30, 10, 12), seed=1, docs_per_query=(5, 15))
    assert list(splits) == ["train", "valid", "test"]
    assert [s.n_queries for s in splits.values()] == [30, 10, 12]
    for s in splits.values():
        check_group_ptr(s.group_ptr, s.y.size)
    whole = make_ranking(52, seed=1, docs_per_query=(5, 15))
    np.testing.assert_array_equal(np.concatenate([s.X for s in splits.values()]), whole.X)
    train_rows = {row.tobytes() for row in splits["train"].X}
    assert not any(row.tobytes() in train_rows for row in splits["test"].X)


def test_make_ranking_has_learnable_signal():
    """A LightGBM lambdarank model beats random scores on held-out queries by a wide margin."""
    splits = make_ranking_splits(seed=0)
    train, test = splits["train"], splits["test"]
    booster = lgb.train(
        {"objective": "lambdarank", "verbose": -1, "num_threads": 2},
        lgb.Dataset(train.X, train.y, group=np.diff(train.group_ptr)),
        num_boost_round=30,
    )
    model = evaluate(booster.predict(test.X), test.y, test.group_ptr, "ndcg@10")["ndcg@10"]
    rng = np.random.default_rng(0)
    random = np.nanmean(
        [
            np.nanmean(ndcg(rng.normal(size=test.y.size), test.y, test.group_ptr, k=10))
            for _ in range(5)
        ]
    )
    assert model > random + 0.3
    assert model < 1.0  # noisy labels: not a trivial ordering either
