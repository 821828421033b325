"""Records over the groups of one or two sweeps (a grid of p on folds): each computed by the
report's own functions, as summary.md and scripts/paper_table.py compute it.

  means    per p: n, mean, std and the 95% interval of the metric (stats.group_summary); row
           all: the p of the lowest mean, the means' min and max
  deltas   per p: Δ vs the baseline p (stats.paired_vs_baseline): Δ, 95% interval, t p, Holm p
           over the table, the 90% interval, the verdict at δ and its strength; pairs below and
           above 0; row all: the calls counted over the table (`tally`, "6 worse, 1
           undecided"), so a page says "every" or "none" only as a count, and the largest |Δ|
  paired   per p, one metric of two sources paired by replicate (stats.paired_test): a − b;
           with `equivalence` its Holm p over the p, its verdict and call (as deltas words them)
  spread   per p, two sources' runs of the same p and fold: the largest |a − b| and the
           difference of the means (the same protocol run twice: on two devices, or commits)
  steps    the training steps a sweep spent, against the full grid's, and its distinct p; the
           wall time of a completed run (min, median, max: what the host gave, not a cost of p)
  runs     each run of a sweep (row P/FOLD): its status, the steps it trained and its metric;
           with `incumbent` (a p) also its gap to the incumbent's run of the same fold
  best     the completed run with the lowest metric (a search's answer): its value and its `by`
           column (optimizer.lr), the runs and how many completed; with `reference` also by /
           reference (row all)
  heads    per p, a per-head column family (`prefix`: p_l0_h0, ...) over every head of every run:
           how many, min, max, mean; and the range of the runs' own means (fold_min, fold_max)
  yardstick the grid's own answer as a replay scores a search against it (research.grid_runs.judge:
           one-sided t, H1: behind the best, Holm over the comparisons): per p its mean paired
           Δ to the best, its Holm p and whether it is worse, and the Holm p of the two-sided
           t it read before issue 56; row best: the best p and how many are worse
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hydra_racing_sweeper import decision
from hydra_racing_sweeper.multitest import holm

from qknorm.claims.inputs import Rows, Runs, alpha, replicate_test, row_key, selected, setting
from qknorm.claims.records import Record
from qknorm.errors import UserError
from qknorm.report import p_labels, stats
from qknorm.research import grid_runs


def _runs(runs: Runs, record: Record, part: dict | None = None) -> pd.DataFrame:
    """The runs of a record (or of its part a/b): its source, filtered by its where."""
    part = part if part is not None else record.spec
    if not isinstance(part, dict) or "source" not in part:
        raise UserError(f"record {record.id} ({record.file}) names no source; add source: NAME")
    return selected(runs.runs(part["source"], record), part.get("where"), record)


def means(record: Record, runs: Runs) -> Rows:
    frame = _runs(runs, record)
    metric = setting(record, "metric")
    table = stats.group_summary(frame, [metric], test=replicate_test(frame, record))
    lowest = table.loc[table[f"{metric}_mean"].idxmin(), "norm.p"]
    spread = {"lowest": row_key(lowest), "min": table[f"{metric}_mean"].min(),
              "max": table[f"{metric}_mean"].max()}
    rows = {row_key(r["norm.p"]): {"n": int(r["n"]), "mean": r[f"{metric}_mean"],
                                   "std": r[f"{metric}_std"], "low": r[f"{metric}_ci_low"],
                                   "high": r[f"{metric}_ci_high"]}
            for _, r in table.iterrows()}
    return rows | {"all": spread}


def _signs(d) -> dict[str, int]:
    d = np.asarray(d, dtype=float)
    return {"below": int((d < 0).sum()), "above": int((d > 0).sum())}


def _pairs(x: pd.DataFrame, base: pd.DataFrame, metric: str, test) -> tuple:
    """Two groups' replicates (stats.replicates) on the replicates both have."""
    a, b = stats.replicates(x, metric, test)[0], stats.replicates(base, metric, test)[0]
    common = a.index.intersection(b.index)
    return a[common].to_numpy(), b[common].to_numpy()


def deltas(record: Record, runs: Runs) -> Rows:
    frame = _runs(runs, record)
    metric, baseline = setting(record, "metric"), float(setting(record, "baseline"))
    equivalence, test = float(setting(record, "equivalence")), replicate_test(frame, record)
    alpha(record)
    table = stats.paired_vs_baseline(frame, metric, baseline, equivalence=equivalence,
                                     test=test)
    done = stats.completed(frame)
    base = done[done["norm.p"] == baseline]
    rows = {}
    for _, r in table.iterrows():
        x, b = _pairs(done[done["norm.p"] == r["norm.p"]], base, metric, test)
        said = _outcome(r, equivalence)
        rows[row_key(r["norm.p"])] = {
            "n": int(r["n_pairs"]), "delta": r["delta_mean"], "low": r["delta_ci_low"],
            "high": r["delta_ci_high"], "t_p": r["t_pvalue"], "holm": r["holm_pvalue"],
            "tost_low": r["tost_low"], "tost_high": r["tost_high"], "verdict": r["verdict"],
            "strength": said.strength, "call": said.worded(stats.VERDICT_WORDS),
            "room": decision.room(r["tost_low"], r["tost_high"], equivalence), **_signs(x - b)}
    rows["all"] = {"compared": len(rows), "tally": tally(r["call"] for r in rows.values()),
                   "largest": max((abs(r["delta"]) for r in rows.values()), default=math.nan)}
    return rows


def tally(calls) -> str:
    """Calls counted, most first (ties in the order first seen): "6 worse, 1 undecided"."""
    counts: dict[str, int] = {}
    for c in calls:
        counts[c] = counts.get(c, 0) + 1
    return ", ".join(f"{n} {c}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _outcome(r, equivalence: float) -> decision.Outcome:
    """A Δ row's outcome as the report's table decided it (stats.outcome), with its strength
    from the 95% interval."""
    return stats.outcome(r["holm_pvalue"], r["delta_mean"], r["tost_low"], r["tost_high"],
                         equivalence, (r["delta_ci_low"], r["delta_ci_high"]))


def paired(record: Record, runs: Runs) -> Rows:
    a = _runs(runs, record, setting(record, "a"))
    b = _runs(runs, record, setting(record, "b"))
    metric, test = setting(record, "metric"), replicate_test(pd.concat([a, b]), record)
    equivalence = setting(record, "equivalence", None)
    a, b = stats.completed(a), stats.completed(b)
    rows, tests = {}, {}
    for p in sorted(set(a["norm.p"]) & set(b["norm.p"])):
        x, y = _pairs(a[a["norm.p"] == p], b[b["norm.p"] == p], metric, test)
        t = tests[row_key(p)] = stats.paired_test(x, y, test)
        rows[row_key(p)] = {"n": t.n, "delta": t.mean, "low": t.ci_low, "high": t.ci_high,
                            "t_p": t.t_pvalue, "tost_low": t.tost_low, "tost_high": t.tost_high,
                            **_signs(x - y)}
    if equivalence is not None:  # each p asked both ways, Holm over the p (the deltas table's)
        for (key, t), adjusted in zip(tests.items(), holm([t.t_pvalue for t in tests.values()]),
                                      strict=True):
            said = stats.outcome(adjusted, t.mean, t.tost_low, t.tost_high, float(equivalence),
                                 (t.ci_low, t.ci_high))
            rows[key].update({"holm": adjusted, "verdict": stats.VERDICT_WORDS[said.word],
                              "call": said.worded(stats.VERDICT_WORDS)})
    return rows


def spread(record: Record, runs: Runs) -> Rows:
    metric = setting(record, "metric")
    keys = ["norm.p", "data.fold", "seed"]
    a = stats.completed(_runs(runs, record, setting(record, "a")))[keys + [metric]]
    b = stats.completed(_runs(runs, record, setting(record, "b")))[keys + [metric]]
    both = a.merge(b, on=keys, suffixes=("_a", "_b"))
    both["d"] = both[f"{metric}_a"] - both[f"{metric}_b"]
    rows = {}
    for p, group in both.groupby("norm.p"):
        rows[row_key(p)] = {"n": len(group), "max_abs": float(group["d"].abs().max()),
                            "mean_diff": float(group["d"].mean())}
    rows["all"] = {"n": len(both), "max_abs": float(both["d"].abs().max()),
                   "max_mean_diff": max(abs(r["mean_diff"]) for r in rows.values())}
    return rows


def steps(record: Record, runs: Runs) -> Rows:
    frame = _runs(runs, record)
    spent = int(frame["steps"].fillna(0).sum())
    grid = (frame["norm.p"].nunique() * int(setting(record, "grid_folds"))
            * int(setting(record, "grid_steps")))
    wall = stats.completed(frame)["wall_time_s"].dropna() if "wall_time_s" in frame else []
    # core-hours of every run, stopped and diverged ones included (the sweeper's `spent` line)
    core = ({"core_h": float((frame["wall_time_s"] * frame["threads"]).sum()) / 3600}
            if {"wall_time_s", "threads"} <= set(frame.columns) else {})
    return {"all": {"runs": len(frame), "steps": spent, "grid": grid,
                    "percent": 100 * spent / grid if grid else math.nan,
                    "proposals": int(frame["norm.p"].nunique()), **core,
                    **({"wall_min": float(wall.min()), "wall_median": float(wall.median()),
                        "wall_max": float(wall.max())} if len(wall) else {})}}


def yardstick(record: Record, runs: Runs) -> Rows:
    grid = grid_runs.load(runs.folder(setting(record, "source"), record) / "results.csv")
    answer = grid_runs.judge(grid, alpha=alpha(record),
                             equivalence=float(setting(record, "equivalence")))
    rows: Rows = {"best": {"p": row_key(answer.best), "n_worse": len(answer.worse),
                           "n_level": len(answer.level)}}
    for p in (p for p in grid if p != answer.best):
        call = (decision.WORSE if p in answer.worse else decision.LEVEL if p in answer.level
                else decision.NOT_SHOWN)
        rows[row_key(p)] = {"delta": answer.delta[p], "holm": answer.holm[p],
                            "low": answer.tost[p][0], "high": answer.tost[p][1], "call": call}
    return rows


def each_run(record: Record, runs: Runs) -> Rows:
    frame = _runs(runs, record)
    metric, named = setting(record, "metric"), setting(record, "incumbent", None)
    keys = p_labels(frame["norm.p"])  # two p alike at six digits (a sampler's) keep two rows
    values = {(keys[r["norm.p"]], int(r["data.fold"])): float(r[metric])
              for _, r in frame.iterrows()}
    rows: Rows = {}
    for _, r in frame.iterrows():
        key = (keys[r["norm.p"]], int(r["data.fold"]))
        rows[f"{key[0]}/{key[1]}"] = {"status": str(r["status"]), "steps": int(r["steps"]),
                                      "value": float(r[metric])}
        if named is not None:
            base = values.get((str(named), key[1]))
            rows[f"{key[0]}/{key[1]}"]["gap"] = (float(r[metric]) - base if base is not None
                                                  else math.nan)
    return rows


def best(record: Record, runs: Runs) -> Rows:
    frame = _runs(runs, record)
    metric, by = setting(record, "metric"), setting(record, "by")
    done = stats.completed(frame)
    if done.empty:
        raise UserError(f"record {record.id}: no completed run to take the best of")
    top = done.loc[done[metric].idxmin()]
    row = {"value": float(top[metric]), "at": float(top[by]), "runs": len(frame),
           "completed": len(done)}
    reference = setting(record, "reference", None)
    if reference is not None:
        row["ratio"] = float(top[by]) / float(reference)
    return {"all": row}


def heads(record: Record, runs: Runs) -> Rows:
    frame = stats.completed(_runs(runs, record))
    prefix = str(setting(record, "prefix"))
    columns = [c for c in frame.columns if c.startswith(prefix)]
    if not columns:
        raise UserError(f"record {record.id}: its runs have no column {prefix}*")
    rows: Rows = {}
    for p, group in frame.groupby("norm.p"):
        values = group[columns].to_numpy(dtype=float)
        own = np.nanmean(values, axis=1)  # each run's mean over its heads
        rows[row_key(p)] = {"heads": int(np.isfinite(values).sum()),
                            "min": float(np.nanmin(values)), "max": float(np.nanmax(values)),
                            "mean": float(np.nanmean(values)), "fold_min": float(own.min()),
                            "fold_max": float(own.max())}
    return rows
