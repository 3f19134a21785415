"""The approx-gbdt command, driven as a user would: ``python -m approx_gbdt ...`` in a subprocess.

Data are small generated LETOR files; every bad-input case must end with a one-line error on
stderr, a non-zero exit status and no traceback.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import entry_points

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from approx_gbdt.cli import main
from approx_gbdt.datasets import make_ranking_splits
from approx_gbdt.metrics import evaluate

FAST = ["--threads", "1", "--rounds", "25", "--patience", "5", "--learning-rate", "0.2"]


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "approx_gbdt", *map(str, args)],
        capture_output=True, text=True, cwd=cwd,
    )


def write_letor(path, data, columns=None):
    """Write ``data`` (RankingData) as LETOR text: ``label qid:Q 1:v 2:v ...``."""
    X = data.X if columns is None else columns
    qid = np.repeat(np.arange(data.n_queries), np.diff(data.group_ptr))
    dump_svmlight_file(X, data.y, str(path), query_id=qid, zero_based=False)
    return path


def assert_user_error(result, *needles):
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("approx-gbdt: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def letor(tmp_path_factory):
    folder = tmp_path_factory.mktemp("letor")
    splits = make_ranking_splits((30, 10, 10), seed=3, n_features=8, n_informative=5,
                                 docs_per_query=(5, 20))
    paths = {name: write_letor(folder / f"{name}.txt", d) for name, d in splits.items()}
    test = splits["test"]
    paths["narrow"] = write_letor(folder / "narrow.txt", test, test.X[:, :6])
    paths["wide"] = write_letor(folder / "wide.txt", test, np.hstack([test.X, test.X[:, :3]]))
    paths["malformed"] = folder / "malformed.txt"
    lines = paths["test"].read_text().splitlines()
    lines[4] = lines[4].replace(" 3:", " 3:x")
    paths["malformed"].write_text("\n".join(lines) + "\n")
    paths["folder"] = folder
    paths["splits"] = splits
    return paths


# --------------------------------------------------------------------------------------------
# Entry points and --help
# --------------------------------------------------------------------------------------------


def test_console_script_is_declared():
    (ep,) = entry_points(group="console_scripts", name="approx-gbdt")
    assert ep.value == "approx_gbdt.cli:main"


def test_module_help():
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("demo", "train", "evaluate", "compare"):
        assert command in result.stdout


@pytest.mark.parametrize("command", ["demo", "train", "evaluate", "compare"])
def test_command_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert f"usage: approx-gbdt {command}" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------------------------


def test_demo_small(tmp_path):
    result = run_cli("demo", "--queries", 40, "--rounds", 15, "--patience", 5,
                     "--out-dir", tmp_path, "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    header = next(line for line in out.splitlines() if line.startswith("method"))
    for column in ("NDCG@1", "NDCG@3", "NDCG@5", "NDCG@10", "MAP", "best round", "train s"):
        assert column in header
    for method in ("ApproxNDCG", "ApproxAP", "lambdarank"):
        row = next(line for line in out.splitlines() if line.startswith(method))
        values = [float(v) for v in row.split()[1:6]]
        assert all(0.0 <= v <= 1.0 for v in values), row
    png = tmp_path / "approx_gbdt_demo.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"boosting rounds: {png}" in out


# --------------------------------------------------------------------------------------------
# train -> evaluate round trip
# --------------------------------------------------------------------------------------------

CASES = [
    ("lightgbm", "approx_ndcg", "lgb_approx.txt"),
    ("lightgbm", "lambdarank", "lgb_native.txt"),
    ("xgboost", "approx_ndcg@5", "xgb_approx.json"),
    ("xgboost", "rank:ndcg", "xgb_native.ubj"),
    ("lightgbm", "approx_mrr", "lgb_mrr.txt"),
    ("xgboost", "approx_precision@5", "xgb_precision.json"),
]


@pytest.fixture(scope="module")
def models(letor):
    out = {}
    for i, (backend, objective, name) in enumerate(CASES):
        path = letor["folder"] / name
        progress = ["--progress"] if i == 0 else ["--no-progress"]
        result = run_cli("train", "--train", letor["train"], "--valid", letor["valid"],
                         "--backend", backend, "--objective", objective, "--out", path,
                         *FAST, *progress)
        out[name] = (result, path)
    return out


@pytest.mark.parametrize("backend, objective, name", CASES)
def test_train_then_evaluate(letor, models, backend, objective, name, capsys):
    result, path = models[name]
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert path.is_file()
    assert f"saved {'LightGBM' if backend == 'lightgbm' else 'XGBoost'}" in result.stdout
    if name == CASES[0][2]:
        assert "round" in result.stderr  # the progress bar

    if name.startswith("lgb_native") or name.startswith("xgb_native"):
        # in-process (cheaper); the approx models go through a subprocess
        assert main(["evaluate", "--model", str(path), "--data", str(letor["test"])]) == 0
        stdout = capsys.readouterr().out
    else:
        ev = run_cli("evaluate", "--model", path, "--data", letor["test"])
        assert ev.returncode == 0, ev.stderr
        stdout = ev.stdout
    rows = dict(line.split() for line in stdout.splitlines()
                if line.split()[:1] and line.split()[0] in
                ("NDCG@1", "NDCG@3", "NDCG@5", "NDCG@10", "MAP", "P@10", "MRR"))
    assert list(rows) == ["NDCG@1", "NDCG@3", "NDCG@5", "NDCG@10", "MAP", "P@10", "MRR"]
    assert "left out of the means" in stdout

    # The same numbers from the model loaded by the plain library (predictions below).
    scores = np.asarray(json.loads(plain_predictions(letor, models)[name]))
    test = letor["splits"]["test"]
    expected = evaluate(scores, test.y, test.group_ptr, ["ndcg@10", "map", "mrr"])
    assert float(rows["NDCG@10"]) == pytest.approx(expected["ndcg@10"], abs=1e-4)
    assert float(rows["MAP"]) == pytest.approx(expected["map"], abs=1e-4)
    assert float(rows["MRR"]) == pytest.approx(expected["mrr"], abs=1e-4)


_PLAIN = """
import json, sys
sys.modules["approx_gbdt"] = None          # the saved models must not need approx_gbdt
import lightgbm as lgb, xgboost as xgb
from sklearn.datasets import load_svmlight_file
X = load_svmlight_file(sys.argv[1])[0].toarray()
out = {}
for path in sys.argv[2:]:
    if path.endswith(".txt"):
        scores = lgb.Booster(model_file=path).predict(X)
    else:
        booster = xgb.Booster()
        booster.load_model(path)
        scores = booster.predict(xgb.DMatrix(X))
    out[path.rsplit("/", 1)[-1]] = json.dumps(scores.tolist())
print(json.dumps(out))
"""
_plain_cache: dict = {}


def plain_predictions(letor, models):
    """Test-set scores of every trained model, from a subprocess that blocks approx_gbdt."""
    if not _plain_cache:
        paths = [str(path) for result, path in models.values() if result.returncode == 0]
        result = subprocess.run([sys.executable, "-c", _PLAIN, str(letor["test"]), *paths],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        _plain_cache.update(json.loads(result.stdout))
    return _plain_cache


def test_evaluate_pads_missing_features(letor, models, capsys):
    """A LETOR file whose largest feature id is below the model's: absent features are 0."""
    result, path = models["lgb_approx.txt"]
    assert result.returncode == 0, result.stderr
    assert main(["evaluate", "--model", str(path), "--data", str(letor["narrow"])]) == 0
    assert "NDCG@10" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# User errors: one line, non-zero status, no traceback
# --------------------------------------------------------------------------------------------


def test_error_missing_file(letor, tmp_path):
    result = run_cli("train", "--train", tmp_path / "nope.txt", "--out", tmp_path / "m.txt")
    assert_user_error(result, "not found", "nope.txt")


def test_error_malformed_line(letor, tmp_path):
    result = run_cli("train", "--train", letor["malformed"], "--out", tmp_path / "m.txt")
    assert_user_error(result, "malformed.txt", "line 5")


def test_error_unknown_objective(letor, tmp_path):
    result = run_cli("train", "--train", letor["train"], "--objective", "approx_nothing",
                     "--out", tmp_path / "m.txt")
    assert_user_error(result, "unknown objective 'approx_nothing'", "approx_ndcg", "approx_mrr",
                      "approx_precision@K", "lambdarank", "rank:ndcg")


def test_error_objective_of_the_other_backend(letor, tmp_path):
    result = run_cli("train", "--train", letor["train"], "--backend", "xgboost",
                     "--objective", "lambdarank", "--out", tmp_path / "m.json")
    assert_user_error(result, "lambdarank", "--backend lightgbm")


def test_error_mismatched_feature_counts(letor, models):
    result, path = models["xgb_approx.json"]
    assert result.returncode == 0, result.stderr
    ev = run_cli("evaluate", "--model", path, "--data", letor["wide"])
    assert_user_error(ev, "mismatched feature counts", "11", "8")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["train", "--train", "{train}", "--out", "m.txt", "--objective", "lambdarank",
          "--alpha", "5"], "approx objectives only"),
        (["train", "--train", "{train}", "--out", "m.txt", "--objective", "approx_ap",
          "--k", "5"], "--k does not apply to approx_ap"),
        (["train", "--train", "{train}", "--out", "m.txt", "--beta", "3"],
         "--beta sharpens approx_ndcg's top-k truncation: give --k"),
        (["train", "--train", "{train}", "--out", "m.txt", "--beta", "10"], "give --k"),
        (["train", "--train", "{train}", "--out", "m.txt", "--alpha", "-1"], "alpha"),
        (["train", "--train", "{train}", "--out", "m.txt", "--learning-rate", "inf"],
         "--learning-rate must be positive and finite"),
        (["train", "--train", "{train}", "--out", "."], "is a folder: give the model's file"),
        (["train", "--train", "{train}", "--backend", "xgboost", "--out", "m.bin"], ".json"),
        (["evaluate", "--model", "missing.txt", "--data", "{test}"], "model file not found"),
        (["evaluate", "--model", "{train}", "--data", "{test}"], "not a LightGBM text model"),
        (["compare", "--data", "./no/such/folder"], "not found"),
        (["compare", "--data", "generated", "--folds", "0"], "--folds must be at least 1"),
        (["compare", "--data", "generated", "--seeds", "-1"], "--seeds must be at least 1"),
        (["compare", "--data", "generated", "--out", "{train}/x"],
         "cannot create the output folder"),
    ],
)
def test_error_in_process(letor, tmp_path, monkeypatch, capsys, argv, needle):
    """The same error path, in-process (cheaper): status 1 or 2, one line on stderr."""
    monkeypatch.chdir(tmp_path)
    argv = [a.format(train=letor["train"], test=letor["test"]) for a in argv]
    status = main(argv)
    err = capsys.readouterr().err
    assert status in (1, 2)
    assert err.count("\n") == 1 and err.startswith("approx-gbdt: error: ") and needle in err


def test_an_error_without_a_message_still_gets_its_line():
    from approx_gbdt.cli import _first_line

    assert _first_line(OSError()) == "OSError()"
    assert _first_line(ValueError("first\nsecond")) == "first"


def test_approx_options_start_from_the_ready_made_objective():
    from approx_gbdt.cli import _approx_objective
    from approx_gbdt.objectives import ApproxNDCG, approx_ap_obj, approx_ndcg_obj

    assert _approx_objective("approx_ndcg") is approx_ndcg_obj
    assert _approx_objective("approx_ap") is approx_ap_obj
    obj = _approx_objective("approx_ndcg", alpha=3.0, k=7)
    assert isinstance(obj, ApproxNDCG) and obj.alpha == 3.0 and obj.k == 7
    assert obj.hessian == approx_ndcg_obj.hessian
    assert obj.hessian_floor == approx_ndcg_obj.hessian_floor


def test_every_registered_objective_by_name():
    from approx_gbdt import MEASURES
    from approx_gbdt.cli import _approx_objective, _parse_objective

    for name, info in MEASURES.items():
        base, k = _parse_objective(name, "lightgbm", None)
        assert base == name and k is None
        assert _approx_objective(name) is info.instance
        if info.cutoff != "none":
            base, k = _parse_objective(f"{name}@4", "xgboost", None)
            assert _approx_objective(base, k=k).k == 4
        obj = _approx_objective(name, alpha=2.0)
        assert type(obj) is info.objective and obj.alpha == 2.0
        assert _parse_objective(name.upper(), "lightgbm", None) == (name, None)  # any case


def test_compare_runs_the_quality_benchmark_in_process(tmp_path, capsys, monkeypatch):
    """Without --out the tables land in the current folder (not the checkout's results)."""
    monkeypatch.chdir(tmp_path)
    status = main(["compare", "--data", "generated", "--quick", "--methods", "lgb:lambdarank",
                   "lgb:approx_ndcg", "--no-neural", "--no-catboost", "--jobs", "1"])
    assert status == 0
    table = (tmp_path / "quality_generated.md").read_text()
    assert "| `lgb:lambdarank` |" in table and "| `lgb:approx_ndcg` |" in table


def test_compare_usage_names_the_command(capsys):
    assert main(["compare", "--data", "generated", "--no-such-option"]) == 2
    err = capsys.readouterr().err
    assert "approx-gbdt compare: error: unrecognized arguments: --no-such-option" in err


def test_compare_passes_the_runner_errors_on(tmp_path, capsys):
    status = main(["compare", "--data", "generated", "--quick", "--out", str(tmp_path),
                   "--methods", "lgb:no_such_objective", "--no-neural", "--no-catboost"])
    err = capsys.readouterr().err
    assert status == 1 and err.startswith("approx-gbdt: error: ") and "no_such_objective" in err


# --------------------------------------------------------------------------------------------
# Input on which training cannot work: an error (or a warning) before a useless model is saved
# --------------------------------------------------------------------------------------------


def _letor_lines(path, rows):
    """Write ``(label, qid, f1, f2)`` rows as LETOR text."""
    path.write_text("".join(f"{y} qid:{q} 1:{a} 2:{b}\n" for y, q, a, b in rows))
    return path


@pytest.fixture()
def small_files(tmp_path):
    rng = np.random.default_rng(0)
    graded = [(i % 3, q, *rng.random(2).round(3)) for q in range(12) for i in range(8)]
    files = {
        "graded": _letor_lines(tmp_path / "graded.txt", graded),
        "nan": _letor_lines(tmp_path / "nan.txt", [("nan", 0, 0.1, 0.2), *graded[1:]]),
        "zero": _letor_lines(tmp_path / "zero.txt", [(0, q, a, b) for _, q, a, b in graded]),
        "half": _letor_lines(tmp_path / "half.txt",
                             [(0.5 * (y > 0), q, a, b) for y, q, a, b in graded]),
        "one_query": _letor_lines(tmp_path / "one_query.txt", graded[:8]),
        "huge": _letor_lines(tmp_path / "huge.txt", [(2000, 0, 0.1, 0.2), *graded[1:]]),
    }
    return {name: str(path) for name, path in files.items()}


@pytest.mark.parametrize(
    "argv, status, needles",
    [
        (["--train", "{nan}"], 1, ["nan.txt", "label of data line 1 is nan"]),
        (["--train", "{graded}", "--valid", "{nan}"], 1, ["nan.txt", "is nan"]),
        (["--train", "{zero}"], 1, ["zero.txt", "nothing to rank"]),
        (["--train", "{half}", "--objective", "approx_ap"], 1, ["relevant (label >= 1)"]),
        (["--train", "{graded}", "--valid", "{zero}"], 1, ["no validation query has a relevant"]),
        (["--train", "{one_query}"], 1, ["8 documents", "min_data_in_leaf=4"]),
        (["--train", "{graded}", "--param", "bogus_param=1"], 2,
         ["bogus_param: not a LightGBM parameter"]),
        (["--train", "{graded}", "--param", "num_leave=7"], 2, ["did you mean 'num_leaves'"]),
        (["--train", "{graded}", "--backend", "xgboost", "--out", "m.json", "--param",
          "bogus_param=1"], 2, ["bogus_param: XGBoost does not use"]),
        (["--train", "{graded}", "--param", "objective=lambdarank"], 2,
         ["--param objective: the objective is set by --objective"]),
        (["--train", "{graded}", "--param", "application=lambdarank"], 2,
         ["--param application: the objective is set by --objective"]),
        (["--train", "{graded}", "--backend", "xgboost", "--out", "m.json", "--param",
          "objective=rank:ndcg"], 2, ["--objective rank:ndcg"]),
        (["--train", "{graded}", "--threads", "-3"], 2, ["--threads must be 0"]),
    ],
)
def test_train_refuses_unusable_input(small_files, tmp_path, monkeypatch, capsys, argv, status,
                                      needles):
    monkeypatch.chdir(tmp_path)
    argv = [a.format(**small_files) for a in argv]
    if "--out" not in argv:
        argv += ["--out", "m.txt"]
    assert main(["train", *FAST, *argv]) == status  # argv last: its --threads wins
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("approx-gbdt: error: "), err
    for needle in needles:
        assert needle in err
    assert not (tmp_path / "m.txt").exists() and not (tmp_path / "m.json").exists()


def test_train_warns_about_few_validation_queries(small_files, tmp_path, capsys):
    out = tmp_path / "m.txt"
    argv = ["train", "--train", small_files["graded"], "--valid", small_files["one_query"],
            "--out", str(out), "--no-progress", *FAST]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "warning: early stopping watches NDCG@10 on 1 validation query" in captured.err
    # The summary counts the rounds it times, and keeps the best of them.
    summary = next(line for line in captured.out.splitlines() if " in " in line)
    match = re.match(r"(\d+) rounds? in [\d.]+ s; the model keeps rounds? (?:1-)?(\d+) ",
                     summary)
    assert match, summary
    trained, best = int(match.group(1)), int(match.group(2))
    assert summary.startswith(f"{trained} round{'s' if trained > 1 else ''} in ")
    assert 1 <= best <= trained <= 25
    assert lgb_rounds(out) == best
    assert "1 query," in captured.out and "(12 queries," in captured.out


def lgb_rounds(path):
    import lightgbm as lgb

    return lgb.Booster(model_file=str(path)).current_iteration()


def test_evaluate_refuses_bad_labels_without_traceback(small_files, tmp_path):
    model = tmp_path / "m.txt"
    assert main(["train", "--train", small_files["graded"], "--out", str(model),
                 "--objective", "lambdarank", "--param", "min_data_in_leaf=5", *FAST]) == 0
    result = run_cli("evaluate", "--model", model, "--data", small_files["nan"])
    assert_user_error(result, "nan.txt", "is nan")
    result = run_cli("evaluate", "--model", model, "--data", small_files["huge"])
    assert_user_error(result, "huge.txt", "label 2000 is too large")


def test_demo_creates_the_output_folder(tmp_path, capsys):
    out_dir = tmp_path / "new" / "folder"
    assert main(["demo", "--queries", "10", "--rounds", "3", "--patience", "2",
                 "--out-dir", str(out_dir), "--no-progress"]) == 0
    assert (out_dir / "approx_gbdt_demo.png").is_file()
    # 2 validation queries: the same warning as train gives
    assert "early stopping watches NDCG@10 on 2 validation queries" in capsys.readouterr().err


def test_zero_based_files_need_the_flag(tmp_path, capsys):
    """A file with feature index 0 is refused as LETOR (1-based) and read with --zero-based."""
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(0)
    X, y = rng.random((60, 3)), np.tile([0.0, 1.0, 2.0], 20)
    path = tmp_path / "zero.txt"
    dump_svmlight_file(X, y, str(path), query_id=np.repeat(np.arange(20), 3), zero_based=True)
    argv = ["train", "--train", str(path), "--out", str(tmp_path / "m.txt"), "--rounds", "2",
            "--param", "min_data_in_leaf=2", "--no-progress"]
    assert main(argv) == 1
    assert "use --zero-based" in capsys.readouterr().err
    assert main([*argv, "--zero-based"]) == 0
    assert (tmp_path / "m.txt").is_file()
    # a byte order mark in front does not turn the hint into "line 1 is not ..."
    marked = tmp_path / "marked.txt"
    marked.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert main(["train", "--train", str(marked), *argv[3:]]) == 1
    assert "use --zero-based" in capsys.readouterr().err


def test_compare_reads_zero_based_folders_with_the_flag(tmp_path, capsys):
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(1)
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("train.txt", "vali.txt", "test.txt"):
        X, y = rng.random((120, 3)), np.tile([0.0, 1.0, 2.0], 40)
        dump_svmlight_file(X, y, str(folder / name), query_id=np.repeat(np.arange(40), 3),
                           zero_based=True)
    argv = ["compare", "--data", str(folder), "--quick", "--out", str(tmp_path), "--methods",
            "lgb:lambdarank", "--no-neural", "--no-catboost", "--jobs", "1"]
    assert main(argv) == 1
    assert "use --zero-based" in capsys.readouterr().err
    assert main([*argv, "--zero-based"]) == 0
    assert len(list(tmp_path.glob("quality_*.md"))) == 1


def test_fold_of_a_folder_without_folds_is_refused(tmp_path, capsys):
    rows = [(y, q, 0.1 * y + 0.01 * i, 0.5) for q in range(12) for i, y in enumerate([0, 1, 2])]
    for name in ("train.txt", "vali.txt", "test.txt"):
        _letor_lines(tmp_path / name, rows)
    assert main(["train", "--train", str(tmp_path), "--fold", "Fold7", "--out",
                 str(tmp_path / "m.txt")]) == 2
    assert "no folds: leave out --fold" in capsys.readouterr().err
    # with FoldN folders beside the files, the folder has folds (as load_letor_folds reads it)
    (tmp_path / "Fold1").mkdir()
    for name in ("train.txt", "vali.txt", "test.txt"):
        _letor_lines(tmp_path / "Fold1" / name, rows)
    assert main(["train", "--train", str(tmp_path), "--fold", "Fold1", "--out",
                 str(tmp_path / "m.txt"), "--rounds", "2", "--param", "min_data_in_leaf=2",
                 "--no-progress"]) == 0


@pytest.mark.parametrize("layout", ["Fold1", "folds.json"])
def test_train_and_evaluate_take_a_letor_folder(letor, tmp_path, capsys, layout):
    root = tmp_path / "data"
    splits = letor["splits"]
    if layout == "Fold1":
        (root / "Fold1").mkdir(parents=True)
        for split, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
            write_letor(root / "Fold1" / f"{name}.txt", splits[split])
    else:
        root.mkdir()
        for i, split in enumerate(("train", "valid", "test")):
            write_letor(root / f"S{i}.txt", splits[split])
        (root / "folds.json").write_text(json.dumps({
            "partitions": {f"S{i}": {"file": f"S{i}.txt"} for i in range(3)},
            "folds": {"Fold1": {"train": ["S0"], "vali": ["S1"], "test": ["S2"]}},
        }))
    model = tmp_path / "m.txt"
    assert main(["train", "--train", str(root), "--out", str(model), "--no-progress",
                 *FAST]) == 0
    out = capsys.readouterr().out
    assert f"training: {root} Fold1/train (30 queries" in out
    assert f"validation: {root} Fold1/vali (10 queries" in out
    assert "the model keeps" in out  # early stopping on the fold's validation split
    assert main(["evaluate", "--model", str(model), "--data", str(root)]) == 0
    by_folder = capsys.readouterr().out
    assert main(["evaluate", "--model", str(model), "--data", str(letor["test"])]) == 0
    by_file = capsys.readouterr().out
    assert f"data: {root} Fold1/test (10 queries" in by_folder
    table = [line for line in by_folder.splitlines() if line.startswith("NDCG@10")]
    assert table == [line for line in by_file.splitlines() if line.startswith("NDCG@10")]
    assert main(["evaluate", "--model", str(model), "--data", str(root), "--fold", "Fold7"]) == 1
    assert "no fold named ['Fold7']" in capsys.readouterr().err
