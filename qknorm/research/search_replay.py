"""Replay Optuna's TPE and GP searches on a committed grid's runs: what they find for how much compute.

    python -m qknorm.research.search_replay docs/results/paper_cpu/qknorm/results.csv \
        --budgets 26667,80000 --seeds 100 --out search_replay.json

The search space is the grid's p (a categorical over its points, as `norm.p=choice(...)` gives
the sweeper); a trial's value is its p's mean best_val_loss over every fold, read from the grid's
results.csv, and its cost is those runs' steps and core-seconds (wall_time_s x threads). A trial
that repeats a p already run costs nothing (the sweeper tells a repeat its original's result).
"TPE, median-pruned" reports each fold's value as a step (folds run one after another, Optuna's
pattern for pruning over folds): after a fold, MedianPruner stops a trial whose mean so far is
above the median of the completed trials' means over the same folds, and the trial costs the folds
it ran. Each search starts trials until it has spent its budget (training steps; checked between
trials, as a race checks between launches, so it can end up one trial past it); per sampler
and budget the JSON gives, over seeds, how often its best p is the grid's best, the distinct p it
ran, and the steps it had spent when it first completed the grid's best p.

This needs no training: the runs are deterministic (seed, fold and p fix them), so a search that
proposes p would have spent exactly these runs at the grid's commit.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import optuna
import pandas as pd

SEARCHES = {  # name -> (sampler, pruner); the presets' settings (conf/search/p_tpe.yaml)
    "tpe": (lambda seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials=6), None),
    "tpe_median_pruned": (lambda seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials=6),
                          lambda: optuna.pruners.MedianPruner(n_startup_trials=2,
                                                              n_warmup_steps=1)),
    "gp": (lambda seed: optuna.samplers.GPSampler(seed=seed), None),
}
MAX_TRIALS = 64  # a search that keeps repeating p it has run stops here (repeats cost nothing)


def load_grid(path: Path) -> dict[float, list[dict]]:
    """p -> its runs in fold order: {value, steps, core_s}."""
    df = pd.read_csv(path)
    df = df[df["status"] == "completed"].sort_values("data.fold")
    return {float(p): [{"value": r["best_val_loss"], "steps": int(r["steps"]),
                        "core_s": float(r["wall_time_s"]) * float(r["threads"])}
                       for _, r in g.iterrows()] for p, g in df.groupby("norm.p")}


def search(grid: dict[float, list[dict]], name: str, seed: int, budget: float) -> dict:
    """One search: trials until `budget` steps are spent (checked before each trial)."""
    make_sampler, make_pruner = SEARCHES[name]
    study = optuna.create_study(sampler=make_sampler(seed),
                                pruner=make_pruner() if make_pruner else optuna.pruners.NopPruner())
    choices = sorted(grid)
    best_p = min(grid, key=lambda p: statistics.fmean(r["value"] for r in grid[p]))
    spent = {"steps": 0, "core_s": 0.0}
    ran: dict[float, tuple[float, bool]] = {}  # p -> (its mean over the folds it ran, pruned)
    found_at = None
    for _ in range(MAX_TRIALS):
        trial = study.ask({"norm.p": optuna.distributions.CategoricalDistribution(choices)})
        p = trial.params["norm.p"]
        if p in ran:  # a repeat: told its original's outcome, no runs
            value, pruned = ran[p]
            study.tell(trial, None if pruned else value,
                       state=optuna.trial.TrialState.PRUNED if pruned else None)
            continue
        if spent["steps"] >= budget:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # not run: out of budget
            break
        value, pruned = _run(trial, grid[p], spent)
        ran[p] = (value, pruned)
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, value)
            if p == best_p and found_at is None:
                found_at = spent["steps"]
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = min(done, key=lambda t: t.value).params["norm.p"] if done else None
    return {"best_p": best, "found_grid_best": best == best_p, "distinct_p": len(ran),
            "steps": spent["steps"], "core_s": spent["core_s"], "steps_to_grid_best": found_at}


def _run(trial: optuna.Trial, runs: list[dict], spent: dict) -> tuple[float, bool]:
    """The p's folds one after another, each reported as a step; (mean so far, pruned)."""
    values = []
    for fold, run in enumerate(runs):
        values.append(run["value"])
        spent["steps"] += run["steps"]
        spent["core_s"] += run["core_s"]
        trial.report(statistics.fmean(values), fold)
        if fold < len(runs) - 1 and trial.should_prune():
            return statistics.fmean(values), True
    return statistics.fmean(values), False


def summarize(outcomes: list[dict]) -> dict:
    found = [o["steps_to_grid_best"] for o in outcomes if o["steps_to_grid_best"] is not None]
    return {"seeds": len(outcomes),
            "found_grid_best": sum(o["found_grid_best"] for o in outcomes) / len(outcomes),
            "distinct_p_median": statistics.median(o["distinct_p"] for o in outcomes),
            "steps_median": statistics.median(o["steps"] for o in outcomes),
            "core_s_median": statistics.median(o["core_s"] for o in outcomes),
            "steps_to_grid_best_median": statistics.median(found) if found else None,
            "never_completed_grid_best": len(outcomes) - len(found)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a grid's results.csv (every p on every fold)")
    ap.add_argument("--budgets", default="26667,80000",
                    help="training-step budgets, comma-separated (default: a third of "
                         "paper_cpu's 80,000, and all of it)")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--out", type=Path, default=None, help="JSON out (default: stdout)")
    args = ap.parse_args(argv)
    try:
        budgets = [float(b) for b in args.budgets.split(",")]
    except ValueError:
        print(f"error: --budgets={args.budgets} must be numbers, e.g. 26667,80000",
              file=sys.stderr)
        return 2
    if args.seeds < 1 or any(not (b > 0 and math.isfinite(b)) for b in budgets):
        print(f"error: --seeds={args.seeds} and --budgets={args.budgets} must be > 0",
              file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = load_grid(args.results)
    out = {"command": "python -m qknorm.research.search_replay " + " ".join(argv or sys.argv[1:]),
           "grid": {"p": sorted(grid), "runs": sum(map(len, grid.values())),
                    "steps": sum(r["steps"] for runs in grid.values() for r in runs),
                    "core_s": sum(r["core_s"] for runs in grid.values() for r in runs)},
           "searches": {name: {str(int(b)): summarize([search(grid, name, s, b)
                                                      for s in range(args.seeds)])
                               for b in budgets} for name in SEARCHES}}
    text = json.dumps(out, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
