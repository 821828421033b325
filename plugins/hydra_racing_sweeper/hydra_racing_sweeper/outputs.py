"""What a sweep leaves in its sweep dir: optimization_results.yaml and trials.csv; and the one
reader of the first (studies_named: the status and the report find a sweep dir's studies by it)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from hydra_racing_sweeper.rundir import COMPLETED, atomic_write_text
from hydra_racing_sweeper.study import (
    DUPLICATE_ATTR,
    ERROR_ATTR,
    JOBS_ATTR,
    N_ATTR,
    PARAMS_ATTR,
    RACE_OUTCOME_ATTR,
    STATUS_ATTR,
    STD_ATTR,
    SURPLUS,
)

RESULTS_FILE = "optimization_results.yaml"
TRIALS_FILE = "trials.csv"


def _yaml_scalar(value: Any) -> Any:
    """YAML-safe Python scalars (numpy floats and the like become float)."""
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


RESULTS_NAME = "racing"  # the file's `name` (Hydra's Optuna sweeper writes `optuna`)


def _params(trial: FrozenTrial) -> dict[str, Any]:
    """The params as the jobs got them: each searched key (a 1/KEY search's as KEY), then those
    a custom_search_space suggested, named as suggested (`+w`); fixed values are none of them."""
    params = trial.user_attrs.get(PARAMS_ATTR, trial.params)
    return {k: _yaml_scalar(v) for k, v in params.items()}


def _solution(trial: FrozenTrial) -> dict[str, Any]:
    """A Pareto-front trial as Hydra's `solutions` entry: params, and values in direction order
    (the objectives' names are the file's `objectives`), plus its number."""
    return {"trial": trial.number, "params": _params(trial),
            "values": [_yaml_scalar(v) for v in trial.values]}


def summary(study: optuna.Study, objectives: Sequence[str], n_trials: int,
            storage_label: str | None) -> dict[str, Any]:
    """Hydra's Optuna sweeper's keys (name, best_params and best_value, or solutions) and ours
    (study_name, storage: null for one in memory, directions, objectives, counts)."""
    trials = [t for t in study.get_trials(deepcopy=False)
              if t.user_attrs.get(STATUS_ATTR) != SURPLUS]
    states = {s.name: sum(t.state == s for t in trials) for s in TrialState if
              any(t.state == s for t in trials)}
    out: dict[str, Any] = {
        "name": RESULTS_NAME, "study_name": study.study_name, "storage": storage_label,
        "directions": [d.name.lower() for d in study.directions],
        "objectives": list(objectives), "n_trials": n_trials, "states": states,
    }
    # A penalised failure is COMPLETE for Optuna but never the best: keep only real results.
    done = [t for t in trials if t.state == TrialState.COMPLETE
            and t.user_attrs.get(STATUS_ATTR) == COMPLETED]
    if len(study.directions) == 1:
        if done:
            sign = 1 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1
            best = min(done, key=lambda t: sign * t.value)
            out.update(best_trial=best.number, best_params=_params(best),
                       best_value=_yaml_scalar(best.value))
        else:
            out.update(best_trial=None, best_params=None, best_value=None)
    else:
        pareto = {t.number for t in study.best_trials}
        out["solutions"] = [_solution(t) for t in done if t.number in pareto]
    return out


def trials_rows(study: optuna.Study, objectives: Sequence[str]) -> list[dict[str, Any]]:
    """One row per trial: number, state, status, the config values it ran (norm.p), the
    objective means and their std over replicates, n and the job dirs."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        attrs = t.user_attrs
        if attrs.get(STATUS_ATTR) == SURPLUS:
            continue
        row: dict[str, Any] = {"trial": t.number, "state": t.state.name,
                               "status": attrs.get(STATUS_ATTR, "stale")}
        row.update(attrs.get(PARAMS_ATTR, {}))
        # Only completed trials have objective values; Optuna keeps a pruned trial's last
        # intermediate value and a penalised failure's fail_value, which are not results.
        done = t.values is not None and attrs.get(STATUS_ATTR) == COMPLETED
        values = t.values if done else [math.nan] * len(objectives)
        std = attrs.get(STD_ATTR)
        std = std if isinstance(std, list) else [std] * len(objectives)
        for name, value, s in zip(objectives, values, std, strict=True):
            row[name] = value
            row[f"{name}_std"] = s
        row["n"] = attrs.get(N_ATTR)
        row["duration_s"] = t.duration.total_seconds() if t.duration else math.nan
        row["jobs"] = ";".join(attrs.get(JOBS_ATTR, []))
        row["error"] = attrs.get(ERROR_ATTR, "")
        row["duplicate_of"] = attrs.get(DUPLICATE_ATTR, "")  # a repeat: it ran no job
        if RACE_OUTCOME_ATTR in attrs:  # a race's decision: dropped after which fold
            row["race"] = attrs[RACE_OUTCOME_ATTR].get("outcome", "")
            row["race_after"] = attrs[RACE_OUTCOME_ATTR].get("after", "")
        rows.append(row)
    return rows


def csv_text(rows: list[dict[str, Any]]) -> str:
    """Rows as CSV: columns in the order they first appear, a missing value or NaN empty."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if _blank(row.get(c)) else row.get(c) for c in columns])
    return out.getvalue()


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def write(study: optuna.Study, sweep_dir: Path, objectives: Sequence[str], n_trials: int,
          storage_label: str | None) -> tuple[Path, Path]:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    results, trials = sweep_dir / RESULTS_FILE, sweep_dir / TRIALS_FILE
    atomic_write_text(results, yaml.safe_dump(summary(study, objectives, n_trials, storage_label),
                                              sort_keys=False))
    atomic_write_text(trials, csv_text(trials_rows(study, objectives)))
    return results, trials


def studies_named(root: Path) -> list[dict[str, Any]]:
    """The studies the optimization_results.yaml files under root name (the sweeper writes one
    at its end, even when it ran nothing), in path order: study_name, storage and n_trials
    (None where it has none). A storage file given relative to the directory the sweep ran in
    is made absolute against the nearest ancestor of the file that holds it (a sweep dir
    outputs/sweeps/NAME/DATE sits in that directory). A file Hydra is writing, or not ours,
    is skipped."""
    from hydra_racing_sweeper.specs import absolute_url, storage_file

    found = []
    for results in sorted(Path(root).rglob(RESULTS_FILE)):
        try:
            summary = yaml.safe_load(results.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        name, url = summary.get("study_name"), summary.get("storage")
        if not (isinstance(name, str) and isinstance(url, str)):
            continue
        path = storage_file(url)
        if path is not None and not path.is_absolute():
            base = next((d for d in results.parents if (d / path).exists()), None)
            if base is not None:
                url = absolute_url(url, base.resolve())
        n = summary.get("n_trials")
        found.append({"study_name": name, "storage": url,
                      "n_trials": n if isinstance(n, int) else None})
    return found
