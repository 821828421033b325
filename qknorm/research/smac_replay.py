"""Replay SMAC3's intensifier on a committed grid's runs: what it picks for p, for how much compute.

SMAC3 (the `smac` 2.x package, not a project dependency: this module imports it only inside
`smac_search`) searches the grid's p as one categorical hyperparameter, its labels the p's str
(so inf is "inf"), with the folds as SMAC instances "0".."K-1". What ran is SMAC's
HyperparameterOptimizationFacade with every default: a Sobol initial design (10 configs per
hyperparameter, at most 0.25 x n_trials, duplicates dropped; n_trials is the runs the budget
affords, ceil(budget / a run's mean steps)), a random-forest surrogate (sklearn, 10 trees, log
costs) with log-EI maximized by local and sorted random search, 20% interleaved random configs,
and its default Intensifier (max_config_calls=3: no config runs on more than 3 folds; a
challenger runs on 1, then 2, then up to 3 of the incumbent's folds, and is rejected as soon as
its mean cost over the folds both ran is not lower than the incumbent's there; the new incumbent
is the better mean on common folds). Scenario is deterministic=True (one seed; SMAC never repeats a
(config, fold) pair). SMAC sees each fold's recorded best_val_loss as that instance's cost and
compares configs by that mean alone: no statistics, no noise model.

We drive it with ask/tell: each asked (p, fold) is told its recorded value and charged that run's
steps and core-seconds (a repeat of a pair already run would cost nothing). The step budget is
checked before each run, so a search can end one run past it; it also ends when SMAC runs out of
new configs to propose (its ConfigurationSpaceExhaustedException). This needs no training: the
runs are deterministic, so SMAC proposing them would have spent exactly these runs.
"""

from __future__ import annotations

import logging
import math
import statistics
import tempfile
from pathlib import Path


def smac_search(grid: dict[float, list[dict]], seed: int, budget: float) -> dict:
    """One SMAC search over the grid's p, run until `budget` training steps are spent.

    grid: p -> its runs in fold order, each {"value": best val loss (lower is better),
    "steps": int, "core_s": float}. Deterministic in `seed`; leaves no files behind.
    Returns {"best_p": the incumbent's p or None, "distinct_p", "steps", "core_s", "runs",
    "incumbent_folds": the folds the incumbent ran}.
    """
    from ConfigSpace import Categorical, ConfigurationSpace
    from smac import HyperparameterOptimizationFacade, Scenario
    from smac.main.exceptions import ConfigurationSpaceExhaustedException
    from smac.runhistory.dataclasses import TrialValue

    labels = {str(float(p)): p for p in sorted(grid)}
    n_folds = min(len(runs) for runs in grid.values())
    mean_steps = statistics.fmean(r["steps"] for runs in grid.values() for r in runs[:n_folds])
    space = ConfigurationSpace(seed=seed)
    space.add(Categorical("p", list(labels)))
    spent = {"steps": 0, "core_s": 0.0}
    ran: set[tuple[float, int]] = set()
    incumbent = None
    with tempfile.TemporaryDirectory(prefix="smac_replay_") as tmp:
        scenario = Scenario(space, deterministic=True, seed=seed, output_directory=Path(tmp),
                            instances=[str(k) for k in range(n_folds)],
                            n_trials=max(1, math.ceil(budget / mean_steps)))
        smac = HyperparameterOptimizationFacade(scenario, None, logging_level=logging.ERROR, overwrite=True)
        while True:
            try:
                info = smac.ask()
            except (StopIteration, ConfigurationSpaceExhaustedException):
                break  # SMAC has nothing new to run
            p, fold = labels[info.config["p"]], int(info.instance)
            if (p, fold) not in ran:
                if spent["steps"] >= budget:
                    break  # out of budget: this run is not made (nor told)
                run = grid[p][fold]
                spent["steps"] += run["steps"]
                spent["core_s"] += run["core_s"]
                ran.add((p, fold))
            smac.tell(info, TrialValue(cost=float(grid[p][fold]["value"])), save=False)
        incumbent = smac.intensifier.get_incumbent()
        incumbent_folds = len(smac.runhistory.get_trials(incumbent)) if incumbent is not None else 0
    return {"best_p": labels[incumbent["p"]] if incumbent is not None else None,
            "distinct_p": len({p for p, _ in ran}), "steps": spent["steps"], "core_s": spent["core_s"],
            "runs": len(ran), "incumbent_folds": incumbent_folds}
