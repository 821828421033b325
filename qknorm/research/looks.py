"""What a replay of a race's looks reads from a report's results.csv: each p's completed runs by
fold, and the replicate test those folds call for (scripts/race_replay.py, rung_error_rates)."""

from __future__ import annotations

import csv
from pathlib import Path

from qknorm import multitest
from qknorm.errors import UserError


def completed_by_fold(path: Path, metric: str
                      ) -> tuple[dict[float, dict[int, float]], int, int | None]:
    """A report's results.csv as p -> {fold: metric} over its completed runs (every p seen, {}
    for one with none), the number of folds seen and the fold layout (data.n_folds; None for a
    results.csv written before that column): what a replay of looks reads."""
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError as e:
        raise UserError(f"{path}: {e.strerror}; pass a results.csv written by scripts/report.py") from None
    if not rows or metric not in rows[0] or "norm.p" not in rows[0]:
        raise UserError(f"{path} has no norm.p and {metric} columns; pass a results.csv written "
                        "by scripts/report.py")
    values: dict[float, dict[int, float]] = {}
    folds, layouts = set(), {row.get("data.n_folds") for row in rows} - {None, ""}
    for row in rows:
        folds.add(int(row["data.fold"]))
        runs = values.setdefault(float(row["norm.p"]), {})  # a p whose runs all stopped, too
        if row["status"] == "completed":
            runs[int(row["data.fold"])] = float(row[metric])
    layout = int(float(layouts.pop())) if len(layouts) == 1 else None
    return dict(values), len(folds), layout


def replicate_test(option: str, folds_vary: bool, layout: int | None, given: int | None):
    """multitest.choose for a replay over a results.csv's folds: the layout it recorded, or
    --n-folds (a results.csv from before data.n_folds); a UserError in one line."""
    try:
        return multitest.choose(option, folds_vary, given or layout, "--test")
    except ValueError as e:
        raise UserError(f"{e} with --n-folds K" if "not known" in str(e) else str(e)) from None
