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
    truncated = tmp_path / "cut.txt.gz"
    truncated.write_bytes(write(tmp_path / "whole.txt.gz", TINY).read_bytes()[:-10])
    with pytest.raises(ValueError, match=r"cut\.txt\.gz: cannot parse"):
        load_letor(truncated)
    with pytest.raises(ValueError, match=r"t\.txt: cannot parse"):
        load_letor(write(tmp_path / "t.txt", TINY), n_features=2)  # feature 3 does not fit


def test_load_letor_detects_gzip_by_content_and_skips_bom(tmp_path):
    # gzip is recognised by its magic bytes, whatever the file name
    for name in ("gz_named.txt", "UPPER.TXT.GZ", "no_suffix"):
        with gzip.open(tmp_path / name, "wb") as f:
            f.write(TINY)
        assert_data_equal(load_letor(tmp_path / name), TINY_X, TINY_Y, TINY_PTR)
    # plain text is read as such even when named .gz
    plain = write(tmp_path / "plain.txt", TINY).rename(tmp_path / "plain.txt.gz")
    assert_data_equal(load_letor(plain), TINY_X, TINY_Y, TINY_PTR)
    # a UTF-8 byte order mark at the start is skipped, plain or compressed
    for name in ("bom.txt", "bom.txt.gz"):
        data = load_letor(write(tmp_path / name, b"\xef\xbb\xbf" + TINY))
        assert_data_equal(data, TINY_X, TINY_Y, TINY_PTR)


def test_load_letor_error_hints(tmp_path):
    text_qid = write(tmp_path / "sq.txt", b"2 qid:abc 1:0.1\n0 qid:abc 1:0.2\n")
    with pytest.raises(ValueError, match=r"sq\.txt: .*qid: values .* must be integers"):
        load_letor(text_qid)
    for name, line in [("order.txt", b"2 qid:1 3:0.3 1:0.1\n"), ("dup.txt", b"2 qid:1 1:1 1:2\n")]:
        with pytest.raises(ValueError, match=rf"{name}: .*must increase along each line"):
            load_letor(write(tmp_path / name, line))


def test_load_letor_refuses_a_corrupt_gzip_and_a_non_bool_zero_based(tmp_path):
    body = gzip.compress(TINY)
    bad = write(tmp_path / "bad.txt.gz", body[:12] + b"\x00" * 8 + body[20:])
    with pytest.raises(ValueError, match=r"bad\.txt\.gz: cannot parse"):
        load_letor(bad)
    plain = write(tmp_path / "plain.txt", TINY)
    with pytest.raises(TypeError, match="zero_based must be True or False"):
        load_letor(plain, zero_based="auto")  # sklearn's "auto" is not an option here


def test_load_letor_is_one_based_unless_told(tmp_path):
    # feature 0 in a 1-based file is an error naming the file and the remedy
    zero = write(tmp_path / "zero.txt", b"2 qid:1 0:5 2:0.5\n0 qid:1 1:0.25\n")
    with pytest.raises(ValueError, match=r"zero\.txt: .*index 0.*zero_based=True"):
        load_letor(zero)
    # zero_based=True: feature j is column j
    X, _, _ = load_letor(zero, zero_based=True)
    np.testing.assert_array_equal(X, [[5.0, 0.0, 0.5], [0.0, 0.25, 0.0]])
    # every file is read alike: a file without index 0 is still 1-based by default ...
    X1, _, _ = load_letor(write(tmp_path / "one.txt", b"1 qid:1 1:7 2:8\n"))
    np.testing.assert_array_equal(X1, [[7.0, 8.0]])
    # ... and 0-based under zero_based=True, so splits line up column by column
    X0, _, _ = load_letor(tmp_path / "one.txt", zero_based=True)
    np.testing.assert_array_equal(X0, [[0.0, 7.0, 8.0]])


def test_load_letor_folds_zero_based_applies_to_every_file(tmp_path):
    # only train.txt uses index 0 (as sklearn's dump_svmlight_file writes by default)
    write(tmp_path / "train.txt", b"2 qid:1 0:5 1:0.2 2:0.3\n0 qid:1 0:1 1:0.5 2:0.6\n")
    write(tmp_path / "vali.txt", b"1 qid:2 1:0.7 2:0.8\n")
    write(tmp_path / "test.txt", b"1 qid:3 1:0.1 2:0.2\n")
    with pytest.raises(ValueError, match=r"train\.txt: .*zero_based=True"):
        load_letor_folds(tmp_path)
    (fold,) = load_letor_folds(tmp_path, zero_based=True)
    np.testing.assert_array_equal(fold.train.X[:, 1:], [[0.2, 0.3], [0.5, 0.6]])
    np.testing.assert_array_equal(fold.vali.X, [[0.0, 0.7, 0.8]])
    np.testing.assert_array_equal(fold.test.X, [[0.0, 0.1, 0.2]])


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
    # one fold may be named by a plain string
    only = load_letor_folds(tmp_path / "data", folds="Fold10")
    assert [f.name for f in only] == ["Fold10"]
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


def test_load_letor_folds_json_keeps_listed_order(tmp_path):
    write(tmp_path / "A.txt", TINY)
    (tmp_path / "folds.json").write_text(
        '{"partitions": {"A": {"file": "A.txt"}}, "folds": {'
        '"Fold2": {"train": ["A"], "vali": ["A"], "test": ["A"]},'
        '"Fold1": {"train": ["A"], "vali": ["A"], "test": ["A"]}}}'
    )
    assert [f.name for f in load_letor_folds(tmp_path)] == ["Fold2", "Fold1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected 'partitions'"),
        ('{"partitions": {"A": "A.txt"}, "folds": {}}', "partition 'A'"),
        ('{"partitions": {"A": {"file": "A.txt"}}, "folds": {}}', "lists no fold"),
        ('{"partitions": {"A": {"file": "A.txt"}}, "folds": {"F": ["A"]}}', "fold 'F'"),
        # a string instead of a list of names, one character long or not
        ('{"partitions": {"A": {"file": "A.txt"}}, '
         '"folds": {"F": {"train": "A", "vali": ["A"], "test": ["A"]}}}', "'train' of fold 'F'"),
        ('{"partitions": {"AB": {"file": "A.txt"}}, '
         '"folds": {"F": {"train": "AB", "vali": ["AB"], "test": ["AB"]}}}', "'train' of fold"),
        ('{"partitions": {"A": {"file": "A.txt"}}, '
         '"folds": {"F": {"train": ["A"], "vali": [], "test": ["A"]}}}', "'vali' of fold 'F'"),
        ('{"partitions": {"A": {"file": "A.txt"}}, '
         '"folds": {"F": {"train": ["A"], "vali": ["Z"], "test": ["A"]}}}', "unknown .*'Z'"),
    ],
)
def test_load_letor_folds_json_structure_errors(tmp_path, text, message):
    write(tmp_path / "A.txt", TINY)
    (tmp_path / "folds.json").write_text(text)
    with pytest.raises(ValueError, match=rf"folds\.json: .*{message}"):
        load_letor_folds(tmp_path)


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


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.5])
def test_make_ranking_noise_must_be_finite(value):
    with pytest.raises(ValueError, match="noise"):
        make_ranking(5, noise=value)
    with pytest.raises(ValueError, match="query_effect"):
        make_ranking(5, query_effect=value)


def test_make_ranking_counts_must_be_integers():
    with pytest.raises(ValueError, match=r"three counts >= 1 \(integers\)"):
        make_ranking_splits((10.5, 5, 5))
    with pytest.raises(ValueError, match="docs_per_query"):
        make_ranking(5, docs_per_query=(5.5, 10))
    with pytest.raises(ValueError, match="docs_per_query"):
        make_ranking(5, docs_per_query=(5, 10, 20))
    with pytest.raises(ValueError, match="n_queries"):
        make_ranking(5.0)
    with pytest.raises(ValueError, match="n_features"):
        make_ranking(5, n_features=12.0)
    # numpy integers are integers
    assert make_ranking(np.int64(3), docs_per_query=(np.int32(2), 4)).n_queries == 3


def test_make_ranking_default_informative_fits_few_features():
    X, _, _ = make_ranking(5, n_features=5, docs_per_query=(3, 6))
    assert X.shape[1] == 5
    # the default is 10 informative features when there are at least 10
    for a, b in zip(make_ranking(5), make_ranking(5, n_informative=10), strict=True):
        np.testing.assert_array_equal(a, b)


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
