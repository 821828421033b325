"""Collect run dirs into one DataFrame (docs/design.md, "The report"): one row per run, results.csv's rows.

A run dir is any directory holding Hydra's `.hydra/` (single runs, grid multiruns, Optuna jobs).
Reading is safe while a sweep writes: final.json is written atomically, a torn last line of
metrics.jsonl is skipped (qknorm.rundir), and a run without a readable final.json is `incomplete`:
it is listed, never counted (only `completed` runs reach qknorm.report.stats).
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from qknorm import rundir
from qknorm.config import P_KINDS
from qknorm.effective import BOOKKEEPING, effective_key
from qknorm.errors import UserError
from qknorm.report.paxis import format_p

log = logging.getLogger(__name__)

INCOMPLETE = rundir.INCOMPLETE  # no final.json yet: killed, or still running
# In every table, varying or not; data.n_folds is the fold layout the replicate test needs.
ALWAYS = ["norm.kind", "norm.p", "seed", "data.fold", "data.n_folds"]
# final.json fields in results.csv's order. seed and fold are the config's seed and data.fold
# (one name per idea); final.json's `p` is the model's p at the end, which differs from norm.p
# only when it is learned, so it is `p_final` here.
FINAL_FIELDS = ["status", "val_loss", "best_val_loss", "val_bpc", "best_val_bpc", "val_bpb",
                "best_val_bpb", "train_loss", "steps", "wall_time_s",
                "tokens_per_s", "steady_tokens_per_s", "n_params", "p_final", "gamma",
                "diverged_step", "error", "git_sha", "torch_version", "device", "dtype", "compiled",
                "threads"]
FLOAT_FIELDS = {"val_loss", "best_val_loss", "val_bpc", "best_val_bpc", "val_bpb", "best_val_bpb",
                "train_loss", "wall_time_s", "tokens_per_s",
                "steady_tokens_per_s", "p_final", "gamma", "norm.p"}
# Attention diagnostics (issue 14, qknorm.diagnostics), in metrics.jsonl at every eval and in
# final.json at the last: means over layers (attn_logit_max: the largest over layers), per
# layer i as <name>_l<i>, gamma_l<i> for norms with a γ and p_l<i>_h<h> per head with
# norm.p_learnable; and the output logits' (issue 36: out_*, no layers). Runs from before (or
# with train.diag_batches=0) have none: their columns are NaN, never an error; asking for one as
# a report metric is (qknorm.report.check_columns).
DIAGNOSTICS = ["attn_entropy", "attn_entropy_frac", "attn_max_weight", "logit_std",
               "attn_logit_max", "out_logit_mean", "out_logit_max", "out_z"]
LAYER_DIAGNOSTIC = re.compile(rf"^({'|'.join([*DIAGNOSTICS, 'gamma', 'p'])})_l(\d+)(?:_h(\d+))?$")
TAIL = ["run_dir", "trial", "trial_state", "duplicate_of"]
LABEL_KEYS = ("name",)  # the sweep folder's name: the same run under two names is one run


@dataclass
class Collection:
    """The runs under one directory, what was read to make them, and what could not be read
    (said in the summary). Later steps reuse `configs` and `studies`: nothing is read twice."""

    root: Path
    runs: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    configs: list[dict[str, Any]] = field(default_factory=list)  # flattened, in `runs`' order
    # (study_name, storage) -> the loaded optuna.Study, or None when it could not be opened
    studies: dict[tuple[str, str], Any] = field(default_factory=dict)
    rebuilt: bool = False  # read back from a results.csv (read_results), not from run dirs
    # which runs it covers, when more than those under root: its studies' runs in their other
    # sweep dirs (a resumed sweep's earlier stamps; study_runs), said in summary.md's first lines
    covers: str | None = None


def to_float(value: Any) -> float:
    """final.json writes inf/nan as strings and absent values as null: all become floats."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def read_run(run_dir: Path, root: Path, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """One results row: flattened config (read here unless given), then final.json's fields
    (or status incomplete)."""
    row: dict[str, Any] = dict((rundir.read_config(run_dir) if config is None else config) or {})
    if "norm.kind" in row and row["norm.kind"] not in P_KINDS:
        row["norm.p"] = math.nan  # the config still carries a p; it means nothing there
    final = dict(rundir.read_finished(run_dir) or {"status": INCOMPLETE})
    final["p_final"] = final.pop("p", None)
    for key in FINAL_FIELDS:
        value = final.get(key)
        row[key] = to_float(value) if key in FLOAT_FIELDS else value
    for key in DIAGNOSTICS + [k for k in final if LAYER_DIAGNOSTIC.match(k)]:
        row[key] = to_float(final.get(key))
    # a study's run in another sweep dir: relative to root all the same (../<stamp>/trial3)
    row["run_dir"] = Path(os.path.relpath(run_dir, root)).as_posix()
    return row


def is_diagnostic(name: str) -> bool:
    return name in DIAGNOSTICS or LAYER_DIAGNOSTIC.match(name) is not None


def layer_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The per-layer diagnostics any row has, by diagnostic, then layer and head as numbers
    (l2 before l10; a layer's own column before its heads')."""
    names = {k for row in rows for k in row if LAYER_DIAGNOSTIC.match(k)}
    kinds = [*DIAGNOSTICS, "gamma", "p"]

    def order(name: str) -> tuple[int, int, int]:
        kind, layer, head = LAYER_DIAGNOSTIC.match(name).groups()
        return kinds.index(kind), int(layer), -1 if head is None else int(head)

    return sorted(names, key=order)


def _varying_keys(rows: list[dict[str, Any]], config_keys: list[str]) -> list[str]:
    def same(a: Any, b: Any) -> bool:
        both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
        return both_nan or a == b

    varying = []
    for key in config_keys:
        values = [row.get(key) for row in rows]
        if any(not same(v, values[0]) for v in values[1:]):
            varying.append(key)
    return varying


RESULTS_CSV, CURVES_CSV_NAME = "results.csv", "curves.csv"
INT_FIELDS = ("steps", "n_params", "diverged_step", "threads", "seed", "data.fold", "data.n_folds")


def collect(root: Path | str) -> Collection:
    """All runs under root as a DataFrame in results.csv's column order. UserError if none.
    A directory with no run dir but a results.csv (a shared sweep, or a committed one whose run
    dirs are gone) is read back from it: `read_results`."""
    root = Path(root)
    if root.is_dir() and (root / RESULTS_CSV).is_file() and not rundir.find_run_dirs(root):
        return read_results(root)
    ran_nothing = _studies_of_results(root) if root.is_dir() and not rundir.find_run_dirs(
        root) else {}  # a rerun of a finished study: its sweep dir has no run, the study has
    run_dirs = [] if ran_nothing else rundir.run_dirs_under(root)
    configs = [rundir.read_config(d) or {} for d in run_dirs]
    if any(configs) and not any("norm.kind" in c for c in configs):
        raise UserError(f"{root}: its runs are another task's, not qknorm.train's (no norm.kind "
                        "in their .hydra/config.yaml), and this report reads qknorm.train's run "
                        "dirs only; the sweep's trials are in its trials.csv, and `python -m "
                        "qknorm.status STORAGE` gives its status")
    collection = Collection(root, pd.DataFrame(), configs=configs)
    collection.studies.update(ran_nothing)
    if not (root / rundir.HYDRA_DIR).is_dir():  # a sweep dir, not one run: its studies' runs
        elsewhere, collection.covers = study_runs(root, run_dirs, configs, collection)
        if not elsewhere:  # none here, none there: the message of an empty dir
            rundir.run_dirs_under(root)
        run_dirs += elsewhere
        configs += [rundir.read_config(d) or {} for d in elsewhere]
    rows = [read_run(d, root, c) for d, c in zip(run_dirs, configs)]
    config_keys = list(dict.fromkeys(k for c in configs for k in c))
    # threads, device, dtype: final.json's column holds what the run really used
    compared = [k for k in config_keys if k not in ALWAYS and k not in FINAL_FIELDS
                and not k.startswith(BOOKKEEPING)]
    varying = _varying_keys(configs, compared)

    trials = _trials(configs, collection.studies, collection.warnings)
    for row, (trial, state) in zip(rows, trials):
        row["trial"], row["trial_state"] = trial, state
    diagnostics = DIAGNOSTICS + layer_columns(rows)
    columns = varying + ALWAYS + FINAL_FIELDS + diagnostics + TAIL
    df = pd.DataFrame(rows).reindex(columns=columns)
    _types(df, diagnostics)
    df["duplicate_of"] = _duplicate_of(df, configs)
    collection.runs = df
    unreadable = sum(1 for c in configs if not c)
    if unreadable:
        collection.warnings.append(f"{unreadable} run dir(s) without a readable .hydra/config.yaml "
                                   "(job starting, or its config was removed): listed as incomplete")
    return collection


def _types(df: pd.DataFrame, diagnostics: list[str]) -> None:
    """results.csv's column types, in place, whether read from run dirs or from the csv."""
    df["trial"] = df["trial"].astype("Int64")
    for key in INT_FIELDS:
        df[key] = pd.to_numeric(df[key], errors="coerce").astype("Int64")
    for key in [*FLOAT_FIELDS, *diagnostics]:
        df[key] = pd.to_numeric(df[key], errors="coerce").astype(float)


READ_BACK = ["norm.kind", "norm.p", "seed", "data.fold", "status", "run_dir"]


def read_results(root: Path) -> Collection:
    """The runs as a report's results.csv recorded them, for a report rebuilt without its run
    dirs (how a collaborator re-analyses a shared sweep): `read_csv`. No study is opened: trial
    and trial_state stay as recorded."""
    df = read_csv(root / RESULTS_CSV, READ_BACK, "pass a results.csv written by "
                  "scripts/report.py, or a directory of run dirs")
    note = (f"rebuilt from {RESULTS_CSV} (no run dir under this directory): the runs as "
            "recorded there; studies were not opened")
    return Collection(root, df, warnings=[note], rebuilt=True)


def read_curves(path: Path) -> pd.DataFrame:
    """A report's curves.csv, the one reader of that file (the report rebuilt from it, the
    claims, the replays): run_dir as text, as results.csv's, which it joins; values parsed as
    Python's float parses them (round trip), so a replay reads the curves it was made from.
    UserError, one line, when there is none (a report written before curves.csv was)."""
    if not Path(path).exists():
        raise UserError(f"{path} does not exist; pass a report dir written by scripts/report.py "
                        "(curves.csv since the report wrote it: rerun the report on the run dirs)")
    return pd.read_csv(path, dtype={"run_dir": str}, float_precision="round_trip")


def read_csv(path: Path, needs: Sequence[str] = READ_BACK,
             fix: str = "pass a results.csv written by scripts/report.py") -> pd.DataFrame:
    """A results.csv as a report wrote it, the one reader of that file (the report rebuilt from
    it, the claims, the replays, the scripts): every column kept, the typed ones typed as
    `collect` types them, columns a newer qknorm writes added empty (an old results.csv has no
    data.n_folds: --n-folds gives it). UserError, one line ending in `fix`, when it cannot be
    read or lacks a column of `needs`."""
    try:
        df = pd.read_csv(path, dtype={"run_dir": str, "duplicate_of": str, "error": str})
    except OSError as e:
        raise UserError(f"{path}: {e.strerror}; {fix}") from None
    except ValueError as e:
        raise UserError(f"{path} cannot be read ({e}); {fix}") from None
    missing = [k for k in needs if k not in df.columns]
    if missing:
        raise UserError(f"{path} has no {', '.join(missing)} column(s); {fix}")
    for key in [*ALWAYS, *FINAL_FIELDS, *DIAGNOSTICS, *TAIL]:
        if key not in df.columns:
            df[key] = None
    diagnostics = [c for c in df.columns if is_diagnostic(c)]
    _types(df, diagnostics)
    df["duplicate_of"] = df["duplicate_of"].astype(object).where(df["duplicate_of"].notna(), None)
    return df


def _duplicate_of(df: pd.DataFrame, configs: list[dict[str, Any]]) -> list[str | None]:
    """For each completed run that repeats an earlier completed run's effective config (seed and
    data.fold included; keys its norm kind does not use, the sweep's name and Optuna bookkeeping
    left out), that run's run_dir; None otherwise. Such a run is the same deterministic run
    again: statistics count it once (qknorm.report.stats.completed)."""
    first: dict[str, str] = {}
    out: list[str | None] = []
    for config, status, run_dir in zip(configs, df["status"], df["run_dir"]):
        if status != rundir.COMPLETED or not config:
            out.append(None)
            continue
        key = effective_key({k: v for k, v in config.items() if k not in LABEL_KEYS})
        out.append(first.get(key))
        first.setdefault(key, run_dir)
    return out


def duplicates(runs: pd.DataFrame) -> pd.Series:
    """How many runs were folded into another, per label (norm=none, p=2, ...), for the summary."""
    dup = runs[runs["duplicate_of"].notna()]
    labels = [f"norm={k}" if pd.isna(p) else f"p={format_p(p)}"
              for k, p in zip(dup["norm.kind"], dup["norm.p"])]
    return pd.Series(labels, dtype=object).value_counts(sort=False)


def swept_keys(runs: pd.DataFrame) -> list[str]:
    """The config keys that vary across the runs: results.csv's columns before norm.kind."""
    columns = list(runs.columns)
    return columns[: columns.index("norm.kind")]


# ---------------------------------------------------------------------------------------------
# Optuna studies: the trial number comes from the job's config, its state from the study.

def study_runs(root: Path, run_dirs: list[Path], configs: list[dict[str, Any]],
               collection: Collection) -> tuple[list[Path], str | None]:
    """The run dirs the studies of the runs under root name that lie elsewhere (a resumed
    sweep's earlier sweep dirs: each rerun writes a new <stamp>/), and the line that says what
    the report covers then (None when nothing lies elsewhere). A study's runs: those its trials
    name (JOBS_ATTR, JOB_DIRS_ATTR), as the status counts them: not a retried trial's (its
    retry names the runs it kept), not a surplus one's; only those on this machine."""
    from hydra_racing_sweeper import trial_run_dirs

    _trials(configs, collection.studies, collection.warnings)  # opens each study once
    here = {d.resolve() for d in run_dirs}
    found: dict[Path, str] = {}  # run dir -> its study's name
    for (name, _), study in collection.studies.items():
        if study is None:
            continue
        for d in trial_run_dirs(study.get_trials(deepcopy=False)):
            path = Path(d)
            if path.resolve() not in here and (path / rundir.HYDRA_DIR).is_dir():
                found.setdefault(path.resolve(), name)
    if not found:
        return [], None
    names = sorted(set(found.values()))
    sweeps = sorted({Path(os.path.relpath(d.parent, root)).as_posix() for d in found})
    here_too = (f"{len(run_dirs)} under this directory" if run_dirs
                else "none under this directory (its rerun found the study done)")
    covers = (f"Covers every run of study {', '.join(names)}: {here_too} and {len(found)} from "
              f"its other sweep dirs ({', '.join(sweeps)}), which a resumed sweep wrote.")
    return sorted(found, key=rundir.natural_key), covers


def _studies_of_results(root: Path) -> dict[tuple[str, str], Any]:
    """The studies the optimization_results.yaml files under root name (the sweeper writes one
    at its end, even when it ran nothing: its study was done), opened to read; {} when none
    does, or none opens (the report then says the directory holds no run)."""
    from hydra_racing_sweeper import studies_named

    notes: list[str] = []
    studies = {(s["study_name"], s["storage"]): _load_study(s["study_name"], s["storage"], notes)[0]
               for s in studies_named(root)}
    return {k: v for k, v in studies.items() if v is not None}


def _trials(configs: list[dict[str, Any]], studies: dict[tuple[str, str], Any],
            notes: list[str]) -> list[tuple[Any, Any]]:
    """(trial number, trial state) per run; fills `studies` with every study the runs name."""
    states: dict[tuple[str, str], dict[int, str]] = {}
    out = []
    for config in configs:
        name, storage, number = (config.get(f"optuna.{k}") for k in ("study_name", "storage",
                                                                       "trial"))
        if name is None or storage is None or number is None:
            out.append((None, None))
            continue
        key = (name, storage)
        if key not in studies:
            studies[key], states[key] = _load_study(name, storage, notes)
        elif key not in states:  # opened by an earlier call (study_runs)
            study = studies[key]
            states[key] = {} if study is None else {
                t.number: t.state.name for t in study.get_trials(deepcopy=False)}
        out.append((int(number), states[key].get(int(number))))
    return out


def _load_study(name: str, storage: str, notes: list[str]) -> tuple[Any, dict[int, str]]:
    """The optuna.Study (opened only to read) and {trial number: state name}, or (None, {}) with
    a note when the study cannot be opened."""
    from hydra_racing_sweeper import read_study

    try:
        study = read_study(name, storage)
        return study, {t.number: t.state.name for t in study.get_trials(deepcopy=False)}
    except UserError as e:
        notes.append(f"study {name!r}: {e}; trial states are empty")
    except Exception as e:  # any storage error: the table still stands without trial states
        notes.append(f"study {name!r} at {storage} could not be opened ({type(e).__name__}: {e}); "
                     "trial states are empty")
    return None, {}


# ---------------------------------------------------------------------------------------------
# curves: metrics.jsonl of every run, long format, for the val-loss-vs-step figure

CURVE_KEYS = ["step", "train_loss", "val_loss", "lr", "elapsed_s", "tokens_per_s", "gamma_mean",
              "p_mean", *DIAGNOSTICS]


# curves.csv's columns: the losses of every eval, joined to results.csv by run_dir. What a rung
# rule is chosen on (qknorm.research.rung_error_rates --room) once the run dirs are gone. Of the
# diagnostics (the rest stay in each run's metrics.jsonl) it keeps the largest attention logit,
# over layers, per layer and per head (LOGIT_FAMILY), where any run logged them (issue 46).
CURVES_CSV = ["run_dir", "step", "train_loss", "val_loss", "lr", "elapsed_s"]
LOGIT_FAMILY = "attn_logit_max"


def logit_layer_columns(names) -> list[str]:
    """The per-layer and per-head attn_logit_max columns among `names`, in layer_columns' order."""
    found = [n for n in map(str, names)
             if (m := LAYER_DIAGNOSTIC.match(n)) and m.group(1) == LOGIT_FAMILY]
    return layer_columns([dict.fromkeys(found)])


def curves_csv_columns(curves: pd.DataFrame) -> list[str]:
    """curves.csv's columns for these curves: CURVES_CSV, then the attention-logit readings some
    run logged (none for runs before the diagnostics: the six columns alone)."""
    logits = [c for c in [LOGIT_FAMILY, *logit_layer_columns(curves.columns)]
              if c in curves.columns and curves[c].notna().any()]
    return [*CURVES_CSV, *logits]


def collect_curves(runs: pd.DataFrame, root: Path | str) -> pd.DataFrame:
    """One row per (run, eval): run_dir, norm.kind, norm.p, status and metrics.jsonl's keys."""
    root = Path(root)
    saved = root / CURVES_CSV_NAME
    if saved.is_file() and not any((root / d / rundir.HYDRA_DIR).is_dir() for d in runs["run_dir"]):
        # A report rebuilt from results.csv: the evals as its curves.csv kept them.
        curves = read_curves(saved)
        curves = curves.reindex(columns=["run_dir", *CURVE_KEYS,
                                         *logit_layer_columns(curves.columns)])
        keys = runs[["run_dir", "norm.kind", "norm.p", "status"]]
        return curves.merge(keys, on="run_dir", how="left")
    frames = []
    for run in runs[runs["duplicate_of"].isna()].itertuples(index=False):  # a repeat: once
        rows = rundir.read_metrics(root / run.run_dir)
        if not rows:
            continue
        keys = [*CURVE_KEYS, *logit_layer_columns({k for r in rows for k in r})]
        frame = pd.DataFrame([{k: to_float(r.get(k)) for k in keys} for r in rows])
        frame.insert(0, "run_dir", run.run_dir)
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["run_dir", *CURVE_KEYS, "norm.kind", "norm.p", "status"])
    curves = pd.concat(frames, ignore_index=True)
    keys = runs[["run_dir", "norm.kind", "norm.p", "status"]]
    return curves.merge(keys, on="run_dir", how="left")


def add_best_step(runs: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """runs with `best_step`: the eval step of each run's lowest val_loss (its first, on ties),
    read from metrics.jsonl; NaN for a run without evals. Placed right after best_val_loss."""
    runs = runs.drop(columns="best_step", errors="ignore")
    logged = curves.dropna(subset=["val_loss"])
    at_best = logged.loc[logged.groupby("run_dir")["val_loss"].idxmin(), ["run_dir", "step"]]
    best = runs["run_dir"].map(dict(zip(at_best["run_dir"], at_best["step"])))
    runs.insert(runs.columns.get_loc("best_val_loss") + 1, "best_step", best.astype(float))
    return runs
