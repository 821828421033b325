"""A committed grid as a replay reads it, and what the grid itself shows.

`load` reads a report's results.csv and its curves.csv (qknorm.report.results.read_csv, read_curves), for
in-fold stopping: p -> its runs in fold order, each {fold, value, steps, core_s, curve: {step: val_loss}}.
`judge` is the grid's own answer, the yardstick of a replayed search: the best p (lowest mean over folds),
each other p's mean paired difference to it, and the p the grid shows worse than it or level with it:
hydra_racing_sweeper.decision's outcome asked one way (the replicate test of
hydra_racing_sweeper.multitest, one-sided, H1: behind the best, Holm over the comparisons with the best,
at alpha; level first, its (1 − 2 alpha) interval inside ±δ), as the race, the search and worse_on_grid
decide (docs/report.md, "One rule for every verdict").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from hydra_racing_sweeper import decision
from hydra_racing_sweeper.multitest import ReplicateTest, for_folds, holm, tost_interval

from qknorm.errors import UserError
from qknorm.report.results import read_csv, read_curves
from qknorm.rundir import COMPLETED


def load(results: Path, curves: Path | None = None, metric: str = "best_val_loss"
         ) -> dict[float, list[dict]]:
    """p -> its completed runs in fold order (every p must have run every fold of the grid)."""
    runs = read_csv(results, ("norm.p", "data.fold", "status", metric, "steps", "wall_time_s",
                              "threads"), "pass a grid's results.csv written by scripts/report.py")
    rows = runs[runs["status"] == COMPLETED].to_dict("records")
    if any(math.isnan(r["norm.p"]) for r in rows):
        raise UserError(f"{results} has runs without a norm.p (norm.kind none or rms); a replay "
                        "needs a grid over p")
    by_dir: dict[str, dict[int, float]] = {}
    if curves:
        evals = read_curves(curves).dropna(subset=["val_loss"])
        for run_dir, step, val_loss in evals[["run_dir", "step", "val_loss"]].itertuples(
                index=False):
            by_dir.setdefault(run_dir, {})[int(step)] = float(val_loss)
    grid: dict[float, list[dict]] = {}
    for r in sorted(rows, key=lambda r: int(r["data.fold"])):
        grid.setdefault(float(r["norm.p"]), []).append({
            "fold": int(r["data.fold"]), "value": float(r[metric]), "steps": int(r["steps"]),
            "core_s": float(r["wall_time_s"]) * float(r["threads"]),
            "curve": by_dir.get(r["run_dir"])})
    folds = {p: [run["fold"] for run in runs] for p, runs in grid.items()}
    if len({tuple(f) for f in folds.values()}) != 1:
        raise UserError(f"{results}: every p must have completed the same folds ({folds}); "
                        "a replay needs a whole grid")
    if curves and any(run["curve"] is None for runs in grid.values() for run in runs):
        raise UserError(f"{curves} lacks the curves of some runs of {results}; pass the "
                        "curves.csv the same report wrote")
    return grid


def n_folds(grid: dict[float, list[dict]]) -> int:
    return len(next(iter(grid.values())))


@dataclass(frozen=True)
class GridAnswer:
    best: float
    delta: dict[float, float]  # p -> mean paired difference to the best (>= 0 up to ties)
    worse: frozenset[float]  # shown worse than the best (Holm), not level
    holm: dict[float, float] = field(default_factory=dict)  # p -> its Holm-adjusted one-sided p
    level: frozenset[float] = frozenset()  # level with the best within ±δ (TOST)
    tost: dict[float, tuple[float, float]] = field(default_factory=dict)  # p -> its TOST interval


def judge(grid: dict[float, list[dict]], test: ReplicateTest | None = None,
          alpha: float = 0.05, *, equivalence: float | None) -> GridAnswer:
    """The grid's answer under `test` (default: the corrected t of its fold layout, read as
    as many folds as the grid ran: the committed grids ran every fold of their layout), with
    δ = `equivalence` (None: no level call, worse on the p alone)."""
    test = test or for_folds(n_folds(grid))
    means = {p: statistics.fmean(r["value"] for r in runs) for p, runs in grid.items()}
    best = min(means, key=means.__getitem__)
    others = [p for p in grid if p != best]
    diffs = {p: [a["value"] - b["value"] for a, b in zip(grid[p], grid[best], strict=True)]
             for p in others}
    adjusted = dict(zip(others, holm([test.p_greater(diffs[p]) for p in others]), strict=True))
    tost = {p: tost_interval(diffs[p], alpha, test) for p in others}
    said = {p: decision.decide(adjusted[p], alpha, tost=tost[p], equivalence=equivalence).word
            for p in others}
    return GridAnswer(best, {p: statistics.fmean(d) for p, d in diffs.items()} | {best: 0.0},
                      frozenset(p for p in others if said[p] == decision.WORSE), adjusted,
                      frozenset(p for p in others if said[p] == decision.LEVEL), tost)
