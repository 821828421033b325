"""What a replay of a race's looks reads from a report's results.csv: each p's completed runs by
fold, and the replicate test those folds call for (scripts/race_replay.py, rung_error_rates)."""

from __future__ import annotations

from pathlib import Path

from hydra_racing_sweeper import multitest

from qknorm.errors import UserError
from qknorm.report import results
from qknorm.rundir import COMPLETED


def completed_by_fold(path: Path, metric: str
                      ) -> tuple[dict[float, dict[int, float]], int, int | None]:
    """A report's results.csv (results.read_csv) as p -> {fold: metric} over its completed runs
    (every p seen, {} for one with none), the number of folds seen and the fold layout
    (data.n_folds; None for a results.csv written before that column): what a replay of looks
    reads."""
    runs = results.read_csv(path, ("norm.p", "data.fold", "status", metric),
                            "pass a results.csv written by scripts/report.py")
    if runs["norm.p"].isna().any():
        raise UserError(f"{path} has runs without a norm.p (norm.kind none or rms); a replay of "
                        "looks races p: pass a results.csv of runs over p")
    values: dict[float, dict[int, float]] = {}
    for row in runs.to_dict("records"):
        by_fold = values.setdefault(float(row["norm.p"]), {})  # a p whose runs all stopped, too
        if row["status"] == COMPLETED:
            by_fold[int(row["data.fold"])] = float(row[metric])
    layouts = set(runs["data.n_folds"].dropna())
    layout = int(layouts.pop()) if len(layouts) == 1 else None
    return values, int(runs["data.fold"].nunique()), layout


def replicate_test(option: str, folds_vary: bool, layout: int | None, given: int | None):
    """multitest.choose for a replay over a results.csv's folds: the layout it recorded, or
    --n-folds (a results.csv from before data.n_folds); a UserError in one line."""
    try:
        return multitest.choose(option, folds_vary, given or layout, "--test")
    except ValueError as e:
        raise UserError(f"{e} with --n-folds K" if "not known" in str(e) else str(e)) from None
