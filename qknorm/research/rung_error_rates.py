"""How often in-fold stopping (race.looks.stop_at_rung) stops a run that would have won its fold,
measured on recorded curves: `python -m qknorm.research.rung_error_rates SWEEP_DIR... [--out F.json]`.

Each SWEEP_DIR holds a grid's run dirs (final.json, metrics.jsonl, .hydra/config.yaml); only
completed runs are read, grouped by fold, the candidates being norm.p. For each rungs x margin
setting it replays the race's rule fold by fold as the sweeper runs it: one run at a time, in
the race's standing (fold 0: the baseline first, then ascending p; later folds: by mean
best_val_loss over the earlier folds), each non-baseline run judged at each rung against the
runs launched before it that reached that rung. It counts the runs judged and stopped, the
training steps saved, and the stops of a run that ended as its fold's winner (lowest
best_val_loss) or within the margin of it. Two views: `per_fold` judges every recorded run (a
candidate stopped in one fold is still judged in the next: more judgments), `race` takes a
stopped candidate out of the later folds as the sweeper does (the compute it would spend).
Plain successive halving (keep the best ceil(n / eta) of a fold's runs at each rung, no
baseline rule) is measured on the same folds for comparison; `winner_deficit` and
`largest_gap` give, per eval step, how far the eventual winner (any run) was behind its fold's
best run then.

`--room CURVES GRID` (repeatable) reads curves instead of run dirs: CURVES is a report dir
(results.csv and curves.csv, of a grid or of a race: a run stopped at a rung counts up to its
stop), GRID the report dir of the grid over the same p and folds, whose paired runs say which p
are worse than the baseline (one-sided paired t, Holm over the p, at --alpha). At each eval
step it gives the largest gap of a run of a p the grid does not call worse to its fold's best
run then (a margin at or below it could stop such a run) and the smallest gap of a worse p's
run (a margin below it stops that run there); with --rungs 500:0.1,1000:0.04 it lists the runs
each rung's margin would stop. The gap is to the best of all the fold's recorded runs, never
less than to the runs a race launched before it, so a run not over the margin here is not
stopped by the race.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd
from hydra_racing_sweeper import decision, rundir
from hydra_racing_sweeper.multitest import holm, tost_interval
from hydra_racing_sweeper.race import Rules, paired_t_greater, standing, stop_at_rung

from qknorm.errors import UserError, run_main
from qknorm.report import format_p, results
from qknorm.research import race_sims, recorded_folds

RUNGS = ([250], [500], [750], [1000], [500, 1000], [250, 500, 1000])
MARGINS = (0.01, 0.02, 0.05, 0.1, 0.2)


def load_folds(sweep: Path) -> dict[int, dict[float, dict]]:
    """fold -> p -> {"curve": {step: val_loss}, "final": best_val_loss, "steps": steps}, for
    the folds every p completed (a fold's winner needs them all; a grid may still be running)."""
    folds: dict[int, dict[float, dict]] = {}
    for d in sorted(p for p in sweep.iterdir() if (p / rundir.FINAL_FILE).exists()):
        final = rundir.read_final(d)
        if final.get("status") != rundir.COMPLETED:
            continue
        cfg = rundir.read_config(d)
        curve = {r["step"]: r["val_loss"] for r in rundir.read_metrics(d)}
        p = float(cfg["norm.p"])
        folds.setdefault(int(cfg["data.fold"]), {})[p] = {
            "curve": curve, "final": final["best_val_loss"], "steps": final["steps"]}
    grid = set().union(*folds.values()) if folds else set()
    return {f: runs for f, runs in folds.items() if set(runs) == grid}


def launch_orders(folds: dict[int, dict[float, dict]], baseline: float) -> dict[int, list]:
    """Each fold's runs in the order the race launches them (race.looks.standing)."""
    orders, finals = {}, {}
    for f in sorted(folds):
        ps = sorted(folds[f])
        orders[f] = standing(finals, ps, baseline)
        for p in ps:
            finals.setdefault(p, {})[f] = folds[f][p]["final"]
    return orders


def judge_fold(runs: dict[float, dict], order: list, rungs: list[int], margin: float,
               baseline: float) -> dict[float, int]:
    """p -> the rung it was stopped at, for the runs the rule stops (one run at a time)."""
    stopped: dict[float, int] = {}
    for i, p in enumerate(order):
        for r in rungs:
            earlier = {q: runs[q]["curve"][r] for q in order[:i]
                       if stopped.get(q, math.inf) >= r and r in runs[q]["curve"]}
            if p != baseline and stop_at_rung(runs[p]["curve"][r], earlier, margin):
                stopped[p] = r
                break
    return stopped


def halving_fold(runs: dict[float, dict], rungs: list[int], eta: int) -> dict[float, int]:
    """Synchronous successive halving: at each rung keep the best ceil(n / eta) runs."""
    alive, stopped = sorted(runs), {}
    for r in rungs:
        keep = sorted(alive, key=lambda p: runs[p]["curve"][r])[:math.ceil(len(alive) / eta)]
        stopped.update({p: r for p in alive if p not in keep})
        alive = keep
    return stopped


def score(folds: dict[int, dict[float, dict]], stops: dict[int, dict[float, int]],
          margin: float) -> dict:
    """Runs stopped, steps saved, and the stops of a fold's winner or a run within margin."""
    out = {"runs": 0, "stopped": 0, "steps": 0, "steps_saved": 0, "stopped_winner": 0,
           "stopped_within_margin": 0, "stops": []}
    for f, runs in folds.items():
        winner = min(runs, key=lambda p: runs[p]["final"])
        for p, run in runs.items():
            out["runs"] += 1
            out["steps"] += run["steps"]
            if p not in stops.get(f, {}):
                continue
            r = stops[f][p]
            behind = run["final"] - runs[winner]["final"]
            out["stopped"] += 1
            out["steps_saved"] += run["steps"] - r
            out["stopped_winner"] += p == winner
            out["stopped_within_margin"] += p != winner and behind <= margin
            out["stops"].append({"fold": f, "p": p, "rung": r, "final_behind_winner": behind})
    return out


def race_view(folds: dict[int, dict[float, dict]], rungs: list[int], margin: float,
              baseline: float) -> dict:
    """The race as the sweeper runs it, stopping by the rungs alone: the sweeper's driver
    (race_sims.race) steps it over these folds with looks that never drop (alpha below any
    p-value), so a candidate leaves only when a run of it is stopped at a rung, and runs no
    later fold."""
    grid = {p: [{"fold": f, "value": folds[f][p]["final"], "steps": folds[f][p]["steps"],
                 "core_s": 0.0, "curve": folds[f][p]["curve"]} for f in sorted(folds)]
            for p in folds[min(folds)]}
    never = Rules(len(folds), 1, alpha=-1.0)
    out = race_sims.race(grid, None, never, dict.fromkeys(rungs, margin), baseline)
    return {"runs": out["runs"], "steps": out["steps"], "grid_runs": sum(map(len, folds.values())),
            "grid_steps": sum(run["steps"] for f in folds for run in folds[f].values()),
            "out": out["stopped"]}


def gaps(folds: dict[int, dict[float, dict]], who: str) -> dict[int, float]:
    """Per eval step, the largest gap (over folds) between a run's val loss and the best of
    its fold then: of the eventual winner (who="winner"; a margin below it would have stopped
    a winner), or of any run (who="any"; a margin above it stops nothing at that step)."""
    steps = sorted(set.intersection(*(set(r["curve"]) for runs in folds.values()
                                       for r in runs.values())))
    out = {}
    for s in steps:
        behind = []
        for runs in folds.values():
            best = min(r["curve"][s] for r in runs.values())
            winner = min(runs, key=lambda p: runs[p]["final"])
            judged = [winner] if who == "winner" else list(runs)
            behind += [runs[p]["curve"][s] - best for p in judged]
        out[s] = max(behind)
    return out


def measure(sweep: Path, baseline: float, eta: int) -> dict:
    folds = load_folds(sweep)
    orders = launch_orders(folds, baseline)
    result = {"sweep": sweep.name, "folds": {f: sorted(runs) for f, runs in folds.items()},
              "winner_deficit": gaps(folds, "winner"), "largest_gap": gaps(folds, "any"),
              "rule": [], "halving": []}
    for rungs in RUNGS:
        for margin in MARGINS:
            stops = {f: judge_fold(folds[f], orders[f], rungs, margin, baseline) for f in folds}
            result["rule"].append({"rungs": rungs, "margin": margin,
                                   "per_fold": score(folds, stops, margin),
                                   "race": race_view(folds, rungs, margin, baseline)})
        stops = {f: halving_fold(folds[f], rungs, eta) for f in folds}
        result["halving"].append({"rungs": rungs, "eta": eta,
                                  "per_fold": score(folds, stops, 0.05)})
    return result


def worse_on_grid(grid: Path, baseline: float, alpha: float, equivalence: float | None,
                  n_folds: int | None = None) -> set[float]:
    """The p whose completed runs are worse than the baseline's on the grid: hydra_racing_sweeper.decision's
    outcome asked one way, as a race drops (one-sided t over the folds both ran, the corrected
    resampled t of the grid's fold layout, as the race and the report; Holm over the p with two
    pairs or more; level within ±`equivalence` first)."""
    values, seen, layout = recorded_folds.completed_by_fold(grid / "results.csv", "best_val_loss")
    test = recorded_folds.replicate_test("auto", seen > 1, layout, n_folds)
    if not values.get(baseline):
        raise UserError(f"--baseline {format_p(baseline)} has no completed run in "
                        f"{grid / 'results.csv'}; use one of its p: "
                        + ", ".join(format_p(p) for p in sorted(values)))
    base = values[baseline]
    diffs = {p: [v[f] - base[f] for f in sorted(v) if f in base]
             for p, v in values.items() if p != baseline}
    tested = [p for p, d in diffs.items() if len(d) >= 2]
    adjusted = holm([paired_t_greater(diffs[p], test) for p in tested])
    return {p for p, q in zip(tested, adjusted, strict=True)
            if decision.decide(q, alpha, tost=tost_interval(diffs[p], alpha, test),
                               equivalence=equivalence).word == decision.WORSE}


def _extreme(rows: pd.DataFrame, pick) -> dict | None:
    """The row of rows["gap"] that pick (idxmax or idxmin) names, with how many rows there were."""
    if rows.empty:
        return None
    row = rows.loc[pick(rows["gap"])]
    return {"gap": float(row["gap"]), "p": float(row["norm.p"]), "fold": int(row["data.fold"]),
            "runs": len(rows)}


def room(curves_dir: Path, grid: Path, baseline: float, alpha: float,
         equivalence: float | None, rungs: dict[int, float], n_folds: int | None = None) -> dict:
    """Per eval step, how far runs of worse and of not-worse p were behind their fold's best."""
    runs = results.read_csv(curves_dir / results.RESULTS_CSV, ("run_dir", "norm.p", "data.fold"),
                            "pass a report dir written by scripts/report.py"
                            )[["run_dir", "norm.p", "data.fold"]]
    evals = results.read_curves(curves_dir / results.CURVES_CSV_NAME).merge(runs, on="run_dir").dropna(
        subset=["val_loss"])
    evals["gap"] = evals["val_loss"] - evals.groupby(["data.fold", "step"])["val_loss"].transform("min")
    worse = worse_on_grid(grid, baseline, alpha, equivalence, n_folds)
    judged = evals[evals["norm.p"] != baseline]  # the baseline is never judged
    steps = {}
    for step, at in judged.groupby("step"):
        bad = at["norm.p"].isin(worse)
        steps[int(step)] = {"not_worse_largest": _extreme(at[~bad], pd.Series.idxmax),
                            "worse_smallest": _extreme(at[bad], pd.Series.idxmin)}
    stops = []
    for (p, fold), run in judged.groupby(["norm.p", "data.fold"]):
        over = [r for r, m in sorted(rungs.items())
                if not run[(run["step"] == r) & (run["gap"] > m)].empty]
        if over:
            gap = float(run.loc[run["step"] == over[0], "gap"].iloc[0])
            stops.append({"p": float(p), "fold": int(fold), "rung": over[0], "gap": gap,
                          "worse_on_grid": float(p) in worse})
    return {"curves": str(curves_dir), "grid": str(grid), "worse_on_grid": sorted(worse),
            "steps": steps, "rungs": {str(r): m for r, m in rungs.items()}, "stops": stops}


def _cell(x: dict | None) -> str:
    return "-" if x is None else f"{x['gap']:.3f} (p = {format_p(x['p'])}, fold {x['fold']}; {x['runs']})"


def room_lines(r: dict) -> list[str]:
    worse = ", ".join(format_p(p) for p in r["worse_on_grid"]) or "none"
    lines = [f"{r['curves']} (worse on {r['grid']}: {worse})",
             "| step | largest gap, p not worse (p, fold; runs) | smallest gap, p worse |",
             "|---|---|---|"]
    for step, cell in r["steps"].items():
        lines.append(f"| {step} | {_cell(cell['not_worse_largest'])} | {_cell(cell['worse_smallest'])} |")
    for s in r["stops"]:
        kind = "worse on the grid" if s["worse_on_grid"] else "NOT worse on the grid"
        lines.append(f"  rungs {r['rungs']}: p = {format_p(s['p'])}, fold {s['fold']}: over the "
                     f"margin at step {s['rung']} ({s['gap']:.3f} behind), {kind}")
    return lines


def parse_rungs(text: str) -> dict[int, float]:
    try:
        return {int(step): float(m) for step, m in (item.split(":") for item in text.split(","))}
    except ValueError:
        raise UserError(f"--rungs {text!r}: write step:margin pairs, e.g. 500:0.1,1000:0.04") from None


def table(results: list[dict]) -> list[str]:
    """The rule's totals over every sweep given, one row per setting."""
    lines = ["| rungs | margin | runs stopped / judged | steps saved | stopped a fold's winner "
             "| stopped one within margin | race: steps vs grid |", "|---|---|---|---|---|---|---|"]
    for i, cell in enumerate(results[0]["rule"]):
        rows = [r["rule"][i] for r in results]
        tot = {k: sum(r["per_fold"][k] for r in rows) for k in
               ("runs", "stopped", "steps", "steps_saved", "stopped_winner",
                "stopped_within_margin")}
        steps = sum(r["race"]["steps"] for r in rows)
        grid = sum(r["race"]["grid_steps"] for r in rows)
        lines.append(f"| {cell['rungs']} | {cell['margin']} | {tot['stopped']} / {tot['runs']} | "
                     f"{tot['steps_saved'] / tot['steps']:.0%} | {tot['stopped_winner']} | "
                     f"{tot['stopped_within_margin']} | {steps / grid:.0%} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", type=Path)
    parser.add_argument("--baseline", type=float, default=2.0)
    parser.add_argument("--eta", type=int, default=2, help="successive halving's keep 1/eta")
    parser.add_argument("--room", nargs=2, action="append", type=Path, metavar=("CURVES", "GRID"),
                        help="report dirs: the curves' (a race's or grid's) and their grid's")
    parser.add_argument("--alpha", type=float, default=0.05, help="--room: the grid's Holm level")
    parser.add_argument("--equivalence", type=float, default=0.02,
                        help="--room: δ, level within it is not worse (the presets' 0.02)")
    parser.add_argument("--rungs", default="", help="--room: e.g. 500:0.1,1000:0.04")
    parser.add_argument("--out", type=Path, help="write every number as JSON here")
    parser.add_argument("--n-folds", type=int, default=None, metavar="K",
                        help="--room: the grid's data.n_folds, for a results.csv written "
                        "before that column (its worse p: the corrected t, as the report)")
    args = parser.parse_args()
    if args.room:
        rungs = parse_rungs(args.rungs) if args.rungs else {}
        rooms = [room(c, g, args.baseline, args.alpha, args.equivalence, rungs, args.n_folds)
                 for c, g in args.room]
        if args.out:
            args.out.write_text(json.dumps(rooms, indent=1) + "\n")
        print("\n".join(line for r in rooms for line in room_lines(r)))
        return
    if not args.sweeps:
        raise UserError("give SWEEP_DIR... (run dirs of grids) or --room CURVES GRID")
    results = [measure(s, args.baseline, args.eta) for s in args.sweeps]
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(table(results)))
    for r in results:
        for key, what in (("winner_deficit", "the eventual winner"), ("largest_gap", "any run")):
            print(f"{r['sweep']}: largest gap of {what} to its fold's best, by eval step: "
                  + ", ".join(f"{s}: {d:+.3f}" for s, d in r[key].items()))
        for h in r["halving"]:
            pf = h["per_fold"]
            print(f"  halving eta={h['eta']} rungs {h['rungs']}: stopped {pf['stopped']}/"
                  f"{pf['runs']}, winner {pf['stopped_winner']}, steps saved "
                  f"{pf['steps_saved'] / pf['steps']:.0%}")


if __name__ == "__main__":
    run_main(main)
