"""How often in-fold stopping (racestats.stop_at_rung) stops a run that would have won its fold,
measured on recorded curves: `python scripts/rung_error_rates.py SWEEP_DIR... [--out F.json]`.

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
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import yaml

from qknorm import rundir
from qknorm.sweep import racestats as race

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
        cfg = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
        curve = {r["step"]: r["val_loss"] for r in rundir.read_metrics(d)}
        p = float(cfg["norm"]["p"])
        folds.setdefault(int(cfg["data"]["fold"]), {})[p] = {
            "curve": curve, "final": final["best_val_loss"], "steps": final["steps"]}
    grid = set().union(*folds.values()) if folds else set()
    return {f: runs for f, runs in folds.items() if set(runs) == grid}


def launch_orders(folds: dict[int, dict[float, dict]], baseline: float) -> dict[int, list]:
    """Each fold's runs in the order the race launches them (racestats.standing)."""
    orders, finals = {}, {}
    for f in sorted(folds):
        ps = sorted(folds[f])
        orders[f] = race.standing(finals, ps, baseline)
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
            if p != baseline and race.stop_at_rung(runs[p]["curve"][r], earlier, margin):
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
    """The race as the sweeper runs it: a candidate stopped in a fold runs no later fold."""
    out_of_race: set[float] = set()
    finals: dict[float, dict[int, float]] = {}
    runs = steps = 0
    grid_steps = sum(run["steps"] for f in folds for run in folds[f].values())
    for f in sorted(folds):
        alive = [p for p in sorted(folds[f]) if p not in out_of_race]
        order = race.standing({p: finals.get(p, {}) for p in alive}, alive, baseline)
        stopped = judge_fold(folds[f], order, rungs, margin, baseline)
        for p in alive:
            runs += 1
            steps += stopped.get(p, folds[f][p]["steps"])
            if p in stopped:
                out_of_race.add(p)
            else:
                finals.setdefault(p, {})[f] = folds[f][p]["final"]
    return {"runs": runs, "steps": steps, "grid_runs": sum(map(len, folds.values())),
            "grid_steps": grid_steps, "out": sorted(out_of_race)}


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
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--baseline", type=float, default=2.0)
    parser.add_argument("--eta", type=int, default=2, help="successive halving's keep 1/eta")
    parser.add_argument("--out", type=Path, help="write every number as JSON here")
    args = parser.parse_args()
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
    main()
