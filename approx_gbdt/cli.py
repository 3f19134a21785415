"""The ``approx-gbdt`` command (also ``python -m approx_gbdt``).

Commands::

    approx-gbdt demo                      # ApproxNDCG, ApproxAP and lambdarank on generated data
    approx-gbdt train --train train.txt --valid vali.txt --objective approx_ndcg --out model.txt
    approx-gbdt evaluate --model model.txt --data test.txt
    approx-gbdt train --train path/to/MQ2008 --out model.txt   # a LETOR folder: Fold1's splits
    approx-gbdt compare --data path/to/MQ2008   # benchmarks/quality.py (source checkout only)
    approx-gbdt compile                   # compile the objectives' kernels ahead of use

User errors (a missing or malformed file, an unknown objective or parameter, mismatched
feature counts, NaN labels, data with nothing to rank) end with one line
``approx-gbdt: error: ...`` on stderr and a non-zero exit status, no traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np

__all__ = ["CLIError", "main"]

PROG = "approx-gbdt"
NATIVE = {
    "lightgbm": ("lambdarank", "rank_xendcg"),
    "xgboost": ("rank:ndcg", "rank:map", "rank:pairwise"),
}
TABLE_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
EVAL_METRICS = (*TABLE_METRICS, "p@10", "mrr")
LABELS = {"ndcg@1": "NDCG@1", "ndcg@3": "NDCG@3", "ndcg@5": "NDCG@5", "ndcg@10": "NDCG@10",
          "map": "MAP", "p@10": "P@10", "mrr": "MRR"}
# Early stopping watches NDCG@10 on --valid as approx_gbdt.metrics computes it (what evaluate
# prints): tied scores ranked worst-first, queries without a relevant document left out. The
# host libraries' own ndcg keeps tied documents in file order, which rewards the heavily tied
# scores of the first rounds on LETOR files and can stop training after a round or two.
STOP_METRIC = "ndcg@10"


class CLIError(Exception):
    """A user error: reported as one line on stderr, exit status ``status`` (no traceback)."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


def _usage(message):
    """A command-line mistake (exit status 2, as argparse)."""
    return CLIError(message, status=2)


# --------------------------------------------------------------------------------------------
# Helpers: data, objectives, progress bars
# --------------------------------------------------------------------------------------------


def _first_bad_line(path):
    """``(line number, line)`` of the first line that is not ``label [qid:Q] i:v ... [# ...]``."""
    from approx_gbdt.datasets import _open  # gzip by content, past a byte order mark

    try:
        with io.TextIOWrapper(_open(Path(path)), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                tokens = line.split("#", 1)[0].split()
                if not tokens:
                    continue
                try:
                    float(tokens[0])
                    for token in tokens[1:]:
                        key, sep, value = token.partition(":")
                        if not sep:
                            raise ValueError(token)
                        if key == "qid":
                            int(value)
                        else:
                            int(key)
                            float(value)
                except ValueError:
                    return number, line.strip()
    except (OSError, EOFError, zlib.error):
        return None
    return None


def _cli_message(err):
    """A loader's error on one line, with the command line's flag for its keyword."""
    return " ".join(str(err).split()).replace("pass zero_based=True", "use --zero-based")


def _load(path, what="data", *, zero_based=False):
    """load_letor with its errors turned into one-line user errors; labels must be usable.

    LightGBM turns a NaN label into 0 before an objective sees it, so NaN and negative labels
    are refused here, where the file's own labels are still at hand.
    """
    return _check_labels(_read(path, what, zero_based=zero_based), path)


def _check_labels(data, name):
    y = data.y
    bad = np.flatnonzero(~np.isfinite(y) | (y < 0))
    if bad.size:
        i = int(bad[0])
        raise CLIError(
            f"{name}: the label of data line {i + 1} is {y[i]:g}; labels must be finite "
            f"numbers >= 0 ({bad.size} bad label{'s' if bad.size > 1 else ''})"
        )
    return data


def _load_fold(path, fold, *, zero_based=False):
    """One fold of a LETOR folder (Fold1..FoldN, folds.json, or a folder with train.txt)."""
    from approx_gbdt.datasets import _split_folders, load_letor_folds

    path = Path(path)
    # one split (no folds.json, no FoldN folder), as load_letor_folds decides
    single = not (path / "folds.json").is_file() and _split_folders(path) == [path]
    if single and fold is not None:
        raise _usage(f"{path} holds one split (train.txt, ...), no folds: leave out --fold")
    try:
        (data,) = load_letor_folds(path, folds=None if single else [fold or "Fold1"],
                                   zero_based=zero_based)
    except FileNotFoundError as err:
        raise CLIError(str(err)) from err
    except ValueError as err:
        raise CLIError(_cli_message(err)) from err
    for split in ("train", "vali", "test"):
        _check_labels(getattr(data, split), f"{path} {data.name}/{split}")
    return data


def _read(path, what, *, zero_based=False):
    from approx_gbdt.datasets import load_letor

    try:
        return load_letor(path, zero_based=zero_based)
    except FileNotFoundError as err:
        raise CLIError(f"{what} file not found: {path}") from err
    except ValueError as err:
        bad = _first_bad_line(path)
        if bad is not None:
            number, line = bad
            shown = line if len(line) <= 60 else line[:57] + "..."
            raise CLIError(
                f"{path}: line {number} is not 'label qid:Q index:value ...': {shown!r}"
            ) from err
        raise CLIError(_cli_message(err)) from err


def _pad(data, width):
    """Zero columns up to ``width`` (sparse LETOR convention: an absent feature is 0)."""
    missing = width - data.X.shape[1]
    return data if missing <= 0 else data._replace(X=np.pad(data.X, ((0, 0), (0, missing))))


def _approx_names():
    """The registered objectives as the command line writes them (``approx_ndcg@K``, ...)."""
    from approx_gbdt.measures import MEASURES

    names = []
    for name, info in MEASURES.items():
        if info.cutoff != "required":
            names.append(name)
        if info.cutoff != "none":
            names.append(f"{name}@K")
    return tuple(names)


def _all_objectives():
    names = list(_approx_names())
    for backend, native in NATIVE.items():
        names.append(f"{', '.join(native)} ({backend})")
    return ", ".join(names)


def _parse_objective(name, backend, k):
    """``(base name, k)`` for a valid name on ``backend``; CLIError otherwise."""
    from approx_gbdt.measures import MEASURES

    base, at, cutoff = name.partition("@")
    info = MEASURES.get(base.strip().lower())  # as parse_objective: any case
    if info is not None:
        base = base.strip().lower()
        if at:
            if info.cutoff == "none":
                raise _usage(f"objective {name!r}: {base} takes no cutoff")
            if not cutoff.isdigit() or int(cutoff) < 1:
                raise _usage(f"objective {name!r}: the cutoff must be a positive integer")
            if k is not None and k != int(cutoff):
                raise _usage(f"--objective {name} and --k {k} disagree")
            return base, int(cutoff)
        return base, k
    if name in NATIVE[backend]:
        return name, k
    for other, native in NATIVE.items():
        if name in native:
            raise _usage(
                f"objective {name!r} needs --backend {other}; for --backend {backend} use one "
                f"of: {', '.join(_approx_names() + NATIVE[backend])}"
            )
    raise _usage(f"unknown objective {name!r}; valid objectives: {_all_objectives()}")


def _first_line(err):
    """The first line of an exception's message (its repr when the message is empty)."""
    return (str(err).splitlines() or [repr(err)])[0]


def _approx_objective(name, **given):
    """The ready-made objective, or a new one with the given options overriding its settings.

    Settings that are not given are those of the ready-made instance (``approx_ndcg_obj``,
    ``approx_mrr_obj``, ...; ``objective.replace``), so the command line always starts from
    the package's defaults.
    """
    from approx_gbdt.measures import MEASURES

    ready = MEASURES[name].instance
    given = {key: value for key, value in given.items() if value is not None}
    if not given:
        return ready
    params = ready.get_options()
    for key in given:
        if key not in params:
            raise _usage(f"--{key} does not apply to {name}")
    if "beta" in given and "k" in params and given.get("k", params["k"]) is None:
        raise _usage(f"--beta sharpens {name}'s top-k truncation: give --k as well")
    try:
        return ready.replace(**given)
    except (TypeError, ValueError) as err:
        raise _usage(str(err)) from err


def _bar(total, desc, enabled):
    from tqdm.auto import tqdm

    # enabled: True, False, or None (on when stderr is a terminal)
    disable = None if enabled is None else not enabled
    return tqdm(total=total, desc=desc, unit="round", disable=disable, file=sys.stderr,
                dynamic_ncols=True, leave=True)


class _LightGBMProgress:
    """LightGBM callback: one tqdm step per boosting round, the validation metric as postfix."""

    order = 10
    before_iteration = False

    def __init__(self, bar):
        self.bar = bar

    def __call__(self, env):
        self.bar.update(1)
        if env.evaluation_result_list:
            _, metric, value = env.evaluation_result_list[0][:3]
            self.bar.set_postfix_str(f"valid {metric} {value:.4f}", refresh=False)


def _xgboost_progress(bar):
    import xgboost as xgb

    class _XGBoostProgress(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            bar.update(1)
            for data_name, metrics in evals_log.items():
                for metric, values in metrics.items():
                    bar.set_postfix_str(f"{data_name} {metric} {values[-1]:.4f}", refresh=False)
            return False

    return _XGBoostProgress()


def _lightgbm_params(objective, *, learning_rate, seed, threads, extra=None):
    params = {
        "objective": objective,
        "metric": "None",  # early stopping uses approx_gbdt's NDCG@10 (feval)
        "learning_rate": learning_rate,
        "num_leaves": 31,
        "min_data_in_leaf": 20,
        "seed": seed,
        "deterministic": True,
        "force_row_wise": True,
        "num_threads": threads,
        "verbosity": -1,
    }
    params.update(extra or {})
    return params


def _train(backend, objective, params, train, valid, *, rounds, patience, progress, desc):
    """:func:`approx_gbdt.training.fit_ranker` with early stopping on ``valid`` (if any) by
    NDCG@10 and a progress bar. Returns ``(FitResult, validation curve)``."""
    from approx_gbdt.training import fit_ranker

    with _bar(rounds, desc, progress) as bar:
        progress_cb = _LightGBMProgress(bar) if backend == "lightgbm" else _xgboost_progress(bar)
        fit = fit_ranker(backend, objective, train, valid, params=params, num_boost_round=rounds,
                         early_stopping_rounds=None if valid is None else patience,
                         metric=STOP_METRIC, callbacks=[progress_cb])
        if valid is not None and fit.rounds_run < rounds:
            bar.set_postfix_str(f"stopped early, best round {fit.best_iteration}")
    return fit, fit.curve(STOP_METRIC)


def _format_table(header, rows, floats=4):
    """Plain aligned text table; the first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in header]]
    for row in rows:
        cells.append([c if isinstance(c, str) else f"{c:.{floats}f}" if isinstance(c, float)
                      else str(c) for c in row])
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for r in cells:
        parts = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _undefined_note(data, threshold=1.0):
    n_q = data.n_queries
    best = np.maximum.reduceat(data.y, data.group_ptr[:-1]) if data.y.size else np.zeros(0)
    none_rel = int(np.sum(best < threshold))
    all_zero = int(np.sum(best <= 0))
    if none_rel == all_zero:
        return (f"queries without a relevant document (label >= {threshold:g}) are left out of "
                f"the means: {none_rel} of {n_q}")
    return (f"queries left out of the means: {all_zero} of {n_q} (all labels 0) for NDCG, "
            f"{none_rel} of {n_q} (no label >= {threshold:g}) for MAP, P@10 and MRR")


# --------------------------------------------------------------------------------------------
# demo
# --------------------------------------------------------------------------------------------


def _plot(curves, best, path, title):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for name, curve in curves.items():
        rounds = np.arange(1, len(curve) + 1)
        (line,) = ax.plot(rounds, curve, label=f"{name} (best round {best[name]})", lw=1.5)
        ax.plot(best[name], curve[best[name] - 1], "o", color=line.get_color())
    ax.set_xlabel("boosting round")
    ax.set_ylabel("validation NDCG@10")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)


def _check_boosting_args(args):
    """The options shared by demo and train: --rounds, --patience, --learning-rate,
    --threads."""
    if args.rounds < 1:
        raise _usage(f"--rounds must be at least 1, got {args.rounds}")
    if args.patience < 1:
        raise _usage(f"--patience must be at least 1, got {args.patience}")
    if not 0 < args.learning_rate < float("inf"):
        raise _usage(f"--learning-rate must be positive and finite, got {args.learning_rate}")
    if args.threads < 0:
        raise _usage(f"--threads must be 0 (all cores) or a positive count, got {args.threads}")


def cmd_demo(args):
    import lightgbm  # noqa: F401  (fail early if missing)

    from approx_gbdt.datasets import make_ranking_splits
    from approx_gbdt.metrics import evaluate
    from approx_gbdt.objectives import approx_ap_obj, approx_ndcg_obj

    if args.queries < 10:
        raise _usage(f"--queries must be at least 10, got {args.queries}")
    _check_boosting_args(args)
    out_dir = Path(args.out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CLIError(f"cannot create the output folder {out_dir}: {err}") from err
    n_valid = n_test = max(1, args.queries // 5)
    sizes = (args.queries - n_valid - n_test, n_valid, n_test)
    splits = make_ranking_splits(sizes, seed=args.seed)
    train, valid, test = splits["train"], splits["valid"], splits["test"]
    print(f"Generated data (seed {args.seed}): {sizes[0]} / {sizes[1]} / {sizes[2]} "
          f"train / valid / test queries, {train.y.size} / {valid.y.size} / {test.y.size} "
          f"documents, {train.X.shape[1]} features, labels 0-{int(train.y.max())}.")
    print(f"LightGBM, learning rate {args.learning_rate:g}, at most {args.rounds} rounds, "
          f"early stopping on validation NDCG@10 (patience {args.patience}).")
    print(flush=True)
    _check_validation_data(valid, "the generated validation data",
                           "use more --queries or another --seed")

    methods = {"ApproxNDCG": approx_ndcg_obj, "ApproxAP": approx_ap_obj,
               "lambdarank": "lambdarank"}
    rows, curves, best = [], {}, {}
    for name, objective in methods.items():
        params = _lightgbm_params(objective, learning_rate=args.learning_rate, seed=args.seed,
                                  threads=args.threads)
        result, curve = _train("lightgbm", objective, params, train, valid,
                               rounds=args.rounds, patience=args.patience,
                               progress=args.progress, desc=f"{name:<10}")
        best_round = result.best_iteration
        values = evaluate(result.predict(test.X), test.y, test.group_ptr, TABLE_METRICS)
        rows.append([name, *values.values(), best_round, f"{result.seconds:.1f}"])
        curves[name], best[name] = curve, best_round

    header = ["method", *(LABELS[m] for m in TABLE_METRICS), "best round", "train s"]
    print(_format_table(header, rows))
    print(f"Test set, {test.n_queries} queries; {_undefined_note(test)}.")
    path = out_dir / "approx_gbdt_demo.png"
    _plot(curves, best, path, f"Generated data, {sizes[0]} training queries (seed {args.seed})")
    print(f"Plot of validation NDCG@10 against boosting rounds: {path}")
    return 0


# --------------------------------------------------------------------------------------------
# train
# --------------------------------------------------------------------------------------------


def _parse_params(items):
    params = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _usage(f"--param expects KEY=VALUE, got {item!r}")
        for convert in (int, float):
            try:
                value = convert(value)
                break
            except ValueError:
                pass
        params[key.strip()] = value
    return params


def _plural(n, word, plural=None):
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _warn(message):
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


def _check_training_data(data, path, objective):
    """Refuse training data on which every ranking scores the same (nothing to rank)."""
    from approx_gbdt.objectives import queries_to_rank, rank_requirement

    threshold = getattr(objective, "threshold", None)
    relevance = data.y if threshold is None else (data.y >= threshold).astype(np.float64)
    if not queries_to_rank(relevance, data.group_ptr).any():
        raise CLIError(
            f"{path}: no query has {rank_requirement(threshold)}, so there is nothing to rank "
            "(every ranking scores the same)"
        )


# A query counts for the validation NDCG@10 only if it has a relevant document (label > 0);
# fewer such queries than this make the best round of early stopping a matter of chance.
_FEW_VALID_QUERIES = 10


def _check_validation_data(data, path, remedy="use other validation data or leave out --valid"):
    counted = int(np.count_nonzero(np.maximum.reduceat(data.y, data.group_ptr[:-1]) > 0))
    if counted == 0:
        raise CLIError(
            f"{path}: no validation query has a relevant document (label > 0), so the "
            f"validation NDCG@10 is undefined and early stopping cannot work; {remedy}"
        )
    if counted < _FEW_VALID_QUERIES:
        queries = _plural(counted, "validation query", "validation queries")
        _warn(f"early stopping watches NDCG@10 on {queries} with a relevant document; so few "
              "make the best round a matter of chance")


def _lightgbm_names():
    """Every LightGBM parameter name and alias, or None if this LightGBM cannot list them."""
    try:
        from lightgbm.basic import _ConfigAliases

        aliases = _ConfigAliases._get_all_param_aliases()
    except Exception:  # a private helper of LightGBM: without it, names are not checked
        return None
    return set(aliases) | {alias for names in aliases.values() for alias in names}


def _lightgbm_aliases(name):
    """A LightGBM parameter's name and aliases (only the name if this LightGBM cannot list
    them)."""
    try:
        from lightgbm.basic import _ConfigAliases  # private: LightGBM's alias table

        return set(_ConfigAliases.get(name)) | {name}
    except Exception:
        return {name}


def _check_fixed_params(extra, backend):
    """Refuse --param keys that the command sets itself: the objective (``--objective``)."""
    names = _lightgbm_aliases("objective") if backend == "lightgbm" else {"objective"}
    for key in extra:
        if key in names:
            raise _usage(f"--param {key}: the objective is set by --objective "
                         f"(e.g. --objective {extra[key]})")


def _check_lightgbm_params(extra):
    import difflib

    known = _lightgbm_names()
    if known is None:
        return
    for key in extra:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _usage(f"--param {key}: not a LightGBM parameter{hint}")


def _check_xgboost_params(params, extra, data):
    """XGBoost lists the parameters it does not use when it configures a booster."""
    import re
    import warnings

    import xgboost as xgb

    if not extra:
        return
    d = xgb.DMatrix(data.X[:2], label=data.y[:2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:  # verbosity 1: XGBoost's warning level is global and may have been lowered
            with xgb.config_context(verbosity=1):
                xgb.Booster({**params, "verbosity": 1}, [d]).save_config()
        except xgb.core.XGBoostError as err:
            raise CLIError(f"XGBoost: {_first_line(err)}") from err
    unused = set()
    for w in caught:
        match = re.search(r"Parameters: \{(.*?)\} are not used", str(w.message), re.S)
        if match:
            unused |= {name.strip().strip('"') for name in match.group(1).split(",")}
    bad = sorted(unused & set(extra))
    if bad:
        raise _usage(f"--param {bad[0]}: XGBoost does not use this parameter here")


def _check_min_data_in_leaf(params, data, path):
    """LightGBM needs 2 x min_data_in_leaf rows for any split; with fewer it has no feature."""
    value = 20  # LightGBM's default
    for alias in sorted(_lightgbm_aliases("min_data_in_leaf")):
        value = params.get(alias, value)
    n = data.y.size
    if n < 2 * int(value):
        raise CLIError(
            f"{path} has {_plural(n, 'document')}, fewer than 2 x min_data_in_leaf = "
            f"{2 * int(value)}, so LightGBM can split on no feature; add --param "
            f"min_data_in_leaf={max(1, n // 2)} (or less)"
        )


def cmd_train(args):
    backend = args.backend
    name, k = _parse_objective(args.objective, backend, args.k)
    is_approx = name not in NATIVE[backend]
    if not is_approx and (args.alpha is not None or k is not None or args.beta is not None):
        raise _usage("--alpha, --k and --beta apply to the approx objectives only")
    _check_boosting_args(args)
    out = Path(args.out)
    if backend == "xgboost" and out.suffix not in (".json", ".ubj"):
        raise _usage(f"XGBoost models are saved as .json or .ubj, got --out {out}")
    if not out.parent.is_dir():
        raise CLIError(f"output folder not found: {out.parent}")
    if out.is_dir():
        raise CLIError(f"--out {out} is a folder: give the model's file name")
    if not os.access(out if out.exists() else out.parent, os.W_OK):
        raise CLIError(f"cannot write {out}: permission denied")
    objective = _approx_objective(name, alpha=args.alpha, k=k, beta=args.beta) if is_approx \
        else name
    extra = _parse_params(args.param)
    _check_fixed_params(extra, backend)
    if backend == "lightgbm":
        _check_lightgbm_params(extra)

    train_name, valid_name = args.train, args.valid
    if Path(args.train).is_dir():
        fold = _load_fold(args.train, args.fold, zero_based=args.zero_based)
        train, train_name = fold.train, f"{args.train} {fold.name}/train"
        if args.valid is None:
            valid, valid_name = fold.vali, f"{args.train} {fold.name}/vali"
        else:
            valid = _load(args.valid, "validation", zero_based=args.zero_based)
    else:
        train = _load(args.train, "training", zero_based=args.zero_based)
        valid = None if args.valid is None else _load(args.valid, "validation",
                                                      zero_based=args.zero_based)
    width = max(train.X.shape[1], 0 if valid is None else valid.X.shape[1])
    train = _pad(train, width)
    valid = None if valid is None else _pad(valid, width)
    print(f"training: {train_name} ({_plural(train.n_queries, 'query', 'queries')}, "
          f"{_plural(train.y.size, 'document')}, {_plural(width, 'feature')})")
    if valid is not None:
        print(f"validation: {valid_name} ({_plural(valid.n_queries, 'query', 'queries')}, "
              f"{_plural(valid.y.size, 'document')})")
    print(f"objective: {objective if is_approx else name} ({backend})", flush=True)
    _check_training_data(train, train_name, objective if is_approx else None)
    if valid is not None:
        _check_validation_data(valid, valid_name)

    fit = {"rounds": args.rounds, "patience": args.patience, "progress": args.progress,
           "desc": "train"}
    if backend == "lightgbm":
        import lightgbm as lgb

        params = _lightgbm_params(objective, learning_rate=args.learning_rate, seed=args.seed,
                                  threads=args.threads, extra=extra)
        _check_min_data_in_leaf(params, train, train_name)
        try:
            result, curve = _train(backend, objective, params, train, valid, **fit)
        except lgb.basic.LightGBMError as err:
            raise CLIError(f"LightGBM: {err}") from err
        except ValueError as err:  # the approx objectives' checks of the labels
            raise CLIError(f"{train_name}: {err}") from err
        save = lambda: result.booster.save_model(  # noqa: E731
            out, num_iteration=result.best_iteration)
        kind, save_error = "LightGBM text model", lgb.basic.LightGBMError
    else:
        import xgboost as xgb

        params = {
            "eta": args.learning_rate,
            "max_depth": 6,
            "tree_method": "hist",
            "disable_default_eval_metric": 1,  # early stopping uses approx_gbdt's NDCG@10
            "seed": args.seed,
        }
        if args.threads > 0:
            params["nthread"] = args.threads
        params.update(extra)
        _check_xgboost_params(params, extra, train)
        try:
            result, curve = _train(backend, objective, params, train, valid, **fit)
        except xgb.core.XGBoostError as err:
            raise CLIError(f"XGBoost: {_first_line(err)}") from err
        except ValueError as err:
            raise CLIError(f"{train_name}: {err}") from err
        save = lambda: result.kept_booster().save_model(out)  # noqa: E731
        kind, save_error = f"XGBoost {out.suffix[1:].upper()} model", xgb.core.XGBoostError
    try:
        save()
    except (OSError, save_error) as err:  # the hosts report a failed write as their own error
        raise CLIError(f"cannot write {out}: {_first_line(err)}") from err
    best_round, seconds = result.best_iteration, result.seconds
    trained = result.rounds_run
    summary = f"{_plural(trained, 'round')} in {seconds:.1f} s"
    if curve:
        kept = "round 1" if best_round == 1 else f"rounds 1-{best_round}"
        summary += (f"; the model keeps {kept} (best validation NDCG@10 "
                    f"{curve[best_round - 1]:.4f})")
    print(summary)
    print(f"saved {kind}: {out}")
    return 0


# --------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------


def _load_model(path):
    """``(library, predict(X), number of features)`` for a LightGBM or XGBoost model file."""
    path = Path(path)
    if not path.is_file():
        raise CLIError(f"model file not found: {path}")
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"tree":
        import lightgbm as lgb

        try:
            booster = lgb.Booster(model_file=str(path))
        except lgb.basic.LightGBMError as err:
            raise CLIError(f"{path}: not a valid LightGBM model ({err})") from err
        return "LightGBM", booster.predict, booster.num_feature()
    import xgboost as xgb

    booster = xgb.Booster()
    try:
        booster.load_model(str(path))
    except xgb.core.XGBoostError as err:
        raise CLIError(
            f"{path}: not a LightGBM text model or an XGBoost JSON/UBJSON model"
        ) from err

    def predict(X):
        return booster.predict(xgb.DMatrix(X))

    return "XGBoost", predict, booster.num_features()


def cmd_compile(args):
    from approx_gbdt._pairs import argsort_desc
    from approx_gbdt.precompile import precompile

    def show(label):
        print(f"  {label} ...", end="", flush=True)

    total = time.perf_counter()
    seconds = precompile(long_lists=not args.short_only, all_hessians=args.all_hessians,
                         progress=show if args.verbose else None)
    if args.verbose:
        print()
    for label, sec in seconds.items():
        print(f"{sec:7.2f} s  {label}")
    where = getattr(getattr(argsort_desc, "_cache", None), "_cache_path", "Numba's cache")
    print(f"Compiled kernels cached in {where} ({time.perf_counter() - total:.1f} s in all).")
    return 0


def cmd_evaluate(args):
    from approx_gbdt.metrics import evaluate

    library, predict, n_model = _load_model(args.model)
    data_name = args.data
    if Path(args.data).is_dir():
        fold = _load_fold(args.data, args.fold, zero_based=args.zero_based)
        data, data_name = fold.test, f"{args.data} {fold.name}/test"
    else:
        data = _load(args.data, zero_based=args.zero_based)
    n_data = data.X.shape[1]
    if n_data > n_model:
        extra = data.X[:, n_model:]
        if np.any(extra != 0):
            raise CLIError(
                f"mismatched feature counts: {data_name} has {n_data} features, the model "
                f"{args.model} was trained on {n_model}"
            )
        data = data._replace(X=data.X[:, :n_model])
    data = _pad(data, n_model)
    try:
        values = evaluate(predict(data.X), data.y, data.group_ptr, EVAL_METRICS)
    except ValueError as err:  # e.g. labels too large for NDCG's gain
        raise CLIError(f"{data_name}: {err}") from err
    print(f"model: {args.model} ({library}, {n_model} features)")
    print(f"data: {data_name} ({_plural(data.n_queries, 'query', 'queries')}, "
          f"{_plural(data.y.size, 'document')})")
    print()
    print(_format_table(["metric", "value"], [[LABELS[m], v] for m, v in values.items()]))
    print(_undefined_note(data) + ".")
    return 0


# --------------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------------


def _quality_script():
    import approx_gbdt

    return Path(approx_gbdt.__file__).resolve().parents[1] / "benchmarks" / "quality.py"


def cmd_compare(args, rest):
    script = _quality_script()
    if not script.is_file():
        raise CLIError(
            "compare needs a source checkout of approx_gbdt (it runs benchmarks/quality.py, "
            f"which an installed wheel does not include; looked for {script})"
        )
    data = args.data
    if not Path(data).exists() and ("/" in data or "\\" in data or data.startswith(".")):
        raise CLIError(f"LETOR folder not found: {data}")
    for flag, value in (("--folds", args.folds), ("--seeds", args.seeds)):
        if value is not None and value < 1:
            raise _usage(f"{flag} must be at least 1, got {value}")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CLIError(f"cannot create the output folder {out}: {_first_line(err)}") from err
    argv = ["--data", data, "--out", str(out)]
    for flag, value in (("--folds", args.folds), ("--seeds", args.seeds)):
        if value is not None:
            argv += [flag, str(value)]
    if args.quick:
        argv.append("--quick")
    if args.zero_based:
        argv.append("--zero-based")
    # the runner sets one-thread defaults (NUMBA_NUM_THREADS, ...) for its worker processes;
    # they are put back afterwards, as numba refuses a new thread count once it has started
    saved_environ, saved_path, saved_argv = dict(os.environ), list(sys.path), list(sys.argv)
    sys.argv[:1] = ["approx-gbdt compare"]  # the runner's usage lines name this command
    spec = importlib.util.spec_from_file_location("approx_gbdt_quality_benchmark", script)
    quality = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(quality)
        quality.main([*argv, *rest])
    except ValueError as err:  # a bad --methods entry, unreadable data
        raise CLIError(_cli_message(err)) from None
    except SystemExit as stop:  # the runner's own argument and data errors
        if stop.code in (None, 0):
            return 0
        if isinstance(stop.code, int):
            return stop.code
        raise CLIError(str(stop.code)) from None
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        sys.path[:] = saved_path
        sys.argv[:] = saved_argv
    return 0


# --------------------------------------------------------------------------------------------
# Parser and entry point
# --------------------------------------------------------------------------------------------


def _add_progress(p):
    group = p.add_mutually_exclusive_group()
    group.add_argument("--progress", dest="progress", action="store_true", default=None,
                       help="always show the progress bar (default: when stderr is a terminal)")
    group.add_argument("--no-progress", dest="progress", action="store_false",
                       help="never show the progress bar")


def _wrap(text):
    return textwrap.fill(text, width=78)


def _wrap_names(names, width=41):
    """Comma-separated names in lines of at most ``width`` characters."""
    lines, line = [], ""
    for name in names:
        piece = name if not line else f"{line}, {name}"
        if len(piece) > width and line:
            lines.append(line + ",")
            line = name
        else:
            line = piece
    return [*lines, line]


def build_parser():
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=formatter,
        description=_wrap(
            "ApproxNDCG and ApproxAP (Qin, Liu & Li 2010) as LightGBM/XGBoost objectives: a "
            "demo, and training and evaluation on LETOR files."
        ),
        epilog="Run 'approx-gbdt COMMAND --help' for the options of a command.",
    )
    from approx_gbdt import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser(
        "demo", formatter_class=formatter,
        help="train ApproxNDCG, ApproxAP and lambdarank on generated data; print a table",
        description=_wrap(
            "Train LightGBM with ApproxNDCG, ApproxAP and the native lambdarank on generated "
            "data (no download), print test NDCG@1/3/5/10 and MAP with the training time, and "
            "plot validation NDCG@10 against boosting rounds (approx_gbdt_demo.png in "
            "--out-dir). Deterministic for a seed (except the timings)."
        ),
    )
    p.add_argument("--queries", type=int, default=600,
                   help="number of generated queries, split 3:1:1 into train/valid/test "
                        "(default 600)")
    p.add_argument("--rounds", type=int, default=500, help="maximum boosting rounds (500)")
    p.add_argument("--patience", type=int, default=40, help="early-stopping patience (40)")
    p.add_argument("--learning-rate", type=float, default=0.1, help="learning rate (0.1)")
    p.add_argument("--seed", type=int, default=0, help="data and LightGBM seed (0)")
    p.add_argument("--threads", type=int, default=1,
                   help="LightGBM threads (1: on small data more threads mostly wait)")
    p.add_argument("--out-dir", default=".",
                   help="folder for approx_gbdt_demo.png, created if missing (.)")
    _add_progress(p)

    p = sub.add_parser(
        "train", formatter_class=formatter,
        help="train a ranker on a LETOR file and save it in the library's own format",
        description=_wrap(
            "Train a ranker on a LETOR/SVMlight file ('label qid:Q 1:v 2:v ...') with early "
            "stopping on --valid (NDCG@10), and save it in the host library's own format: a "
            "LightGBM text model or an XGBoost .json/.ubj model, which load without "
            "approx_gbdt."
        ),
        epilog="objectives:\n"
               + "".join(f"  {line:<41}  both backends\n" for line in _wrap_names(_approx_names()))
               + "  lambdarank, rank_xendcg                    lightgbm\n"
               "  rank:ndcg, rank:map, rank:pairwise         xgboost\n\n"
               "example:\n"
               "  approx-gbdt train --train Fold1/train.txt --valid Fold1/vali.txt \\\n"
               "      --objective approx_ndcg@10 --backend lightgbm --out model.txt",
    )
    p.add_argument("--train", required=True, metavar="PATH",
                   help="training LETOR file, or a LETOR folder (Fold1..FoldN or folds.json): "
                        "its --fold's train split")
    p.add_argument("--valid", metavar="PATH",
                   help="validation LETOR file (early stopping); default with a folder: its "
                        "--fold's vali split")
    p.add_argument("--fold", help="fold of a LETOR folder with folds (default Fold1)")
    p.add_argument("--zero-based", action="store_true",
                   help="feature indices start at 0 (LETOR's start at 1)")
    p.add_argument("--objective", default="approx_ndcg",
                   help="objective name (default approx_ndcg; see below)")
    p.add_argument("--backend", choices=sorted(NATIVE), default="lightgbm",
                   help="host library (default lightgbm)")
    p.add_argument("--out", required=True, metavar="MODEL",
                   help="model file: LightGBM text (e.g. model.txt) or XGBoost .json/.ubj")
    p.add_argument("--alpha", type=float, help="approx objectives: sharpness of the smoothed "
                                               "positions (default: the package's)")
    p.add_argument("--k", type=int, help="approx objectives with a cutoff: truncation at the "
                                         "top K (approx_ndcg@K)")
    p.add_argument("--beta", type=float, help="approx objectives: sharpness of the smoothed "
                                              "truncation (ndcg@K) / indicator (ap)")
    p.add_argument("--rounds", type=int, default=1000, help="maximum boosting rounds (1000)")
    p.add_argument("--patience", type=int, default=50, help="early-stopping patience (50)")
    p.add_argument("--learning-rate", type=float, default=0.05, help="learning rate (0.05)")
    p.add_argument("--seed", type=int, default=0, help="seed (0)")
    p.add_argument("--threads", type=int, default=0,
                   help="threads (default 0: the library's default, all cores)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="further LightGBM/XGBoost parameter, e.g. num_leaves=63 (repeatable)")
    _add_progress(p)

    p = sub.add_parser(
        "evaluate", formatter_class=formatter,
        help="NDCG@1/3/5/10, MAP, P@10 and MRR of a saved model on a LETOR file",
        description=_wrap(
            "Score a LETOR file with a saved LightGBM or XGBoost model (the library is "
            "detected from the file) and print NDCG@1/3/5/10, MAP, P@10 and MRR, averaged "
            "over the queries that have a relevant document (label >= 1). Features the file "
            "lacks count as 0."
        ),
    )
    p.add_argument("--model", required=True, metavar="MODEL", help="saved model file")
    p.add_argument("--data", required=True, metavar="PATH",
                   help="LETOR file to evaluate on, or a LETOR folder: its --fold's test split")
    p.add_argument("--fold", help="fold of a LETOR folder with folds (default Fold1)")
    p.add_argument("--zero-based", action="store_true",
                   help="feature indices start at 0 (LETOR's start at 1)")

    p = sub.add_parser(
        "compile", formatter_class=formatter,
        help="compile the objectives' and metrics' kernels ahead of use (Numba's cache)",
        description=_wrap(
            "Compile the kernels of approx_ndcg_obj, approx_ap_obj and the metrics for every "
            "tier of list lengths (approx_gbdt.precompile), so that later training runs with "
            "them do not wait for Numba's compiler: run once after installing, on the kind "
            "of machine "
            "that trains (Numba's cache is keyed by the CPU and the versions of Python, Numba "
            "and the package). Prints the seconds of each step and the cache's folder."
        ),
    )
    p.add_argument("--short-only", action="store_true",
                   help="only the kernels of lists under 512 documents (about 30 s, not "
                        "about 90 s; lists of 512 or more then compile in a background "
                        "process on first use, exact loops standing in)")
    p.add_argument("--all-hessians", action="store_true",
                   help="also the Hessian modes of the other kind than each objective's "
                        "default")
    p.add_argument("--verbose", action="store_true", help="name each step as it starts")

    p = sub.add_parser(
        "compare", formatter_class=formatter,
        help="quality benchmark on a LETOR folder (benchmarks/quality.py; source checkout)",
        description=_wrap(
            "Run the quality benchmark (benchmarks/quality.py of a source checkout) on a "
            "LETOR folder: k-fold test NDCG and MAP of the approx objectives against the "
            "native ones. Options not listed here are passed to quality.py (see 'python "
            "benchmarks/quality.py --help')."
        ),
    )
    p.add_argument("--data", required=True, metavar="PATH",
                   help="a LETOR folder (Fold1..FoldN, folds.json, or train/vali/test files), "
                        "or a name of the quality benchmark: generated, generated-long, "
                        "mq2008, mq2008-small, lgb-yahoo, mslr-sample")
    p.add_argument("--folds", type=int, help="use only the first N folds")
    p.add_argument("--seeds", type=int, help="number of seeds")
    p.add_argument("--quick", action="store_true", help="smoke run")
    p.add_argument("--zero-based", action="store_true",
                   help="the folder's files number features from 0 (LETOR's from 1)")
    p.add_argument("--out", metavar="DIR", default=".",
                   help="output folder of the tables (default: the current folder)")
    return parser


def main(argv=None):
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "compare":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "demo":
            return cmd_demo(args)
        if args.command == "train":
            return cmd_train(args)
        if args.command == "evaluate":
            return cmd_evaluate(args)
        if args.command == "compile":
            return cmd_compile(args)
        return cmd_compare(args, rest)
    except CLIError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return err.status
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
