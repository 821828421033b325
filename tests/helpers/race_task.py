"""A Hydra task with a known answer, for racing tests: `python tests/helpers/race_task.py -m ...`.

Its "loss" for candidate x on fold f is MEAN[x] + FOLD[f] + NOISE[x][f]: a table, so the race it
drives has one right outcome. It writes a final.json like qknorm.train's (so the sweeper reads
cost fields back, and a resumed sweep reuses finished jobs) and appends "x fold" to calls.log in
the directory it was started from. With kill_at="x,fold" it kills the whole sweep (os._exit: the
basic launcher runs jobs in the sweeper's process) the first time it reaches that job, leaving
a marker file so the rerun gets past it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig

# With folds 0-3, min_replicates 2 and baseline x=2: x=1 leads; x=2 is a little worse on every
# fold but, the baseline, runs them all; x=3 is far worse (dropped after 2 folds); x=4 is worse by
# 0.1 with noise (Holm-adjusted p 0.15 after 2 folds, 0.04 after 3: dropped then). x=5 is level
# with x=1 (tests/test_race_level.py): its 90% interval of Δ after 2 folds is about ±0.01.
MEAN = {1: 0.0, 2: 0.02, 3: 1.0, 4: 0.1, 5: 0.0}
FOLD = [0.3, -0.2, 0.5, 0.0]  # shared by every x: pairing removes it
NOISE = {1: [0.0] * 4,
         2: [0.001, -0.001, 0.002, 0.0],
         3: [0.01, -0.02, 0.0, 0.01],
         4: [0.06, -0.05, 0.0, 0.0],
         5: [0.002, -0.001, 0.001, -0.002]}
STEPS, WALL_S, THREADS = 100, 2.0, 2  # what each job's final.json reports

ConfigStore.instance().store(name="race_task", node={
    "x": 1, "fold": 0, "kill_at": None,
    "optuna": {"study_name": None, "storage": None, "trial": None},
})


def loss(x: int, fold: int) -> float:
    return MEAN[x] + FOLD[fold] + NOISE[x][fold]


@hydra.main(version_base=None, config_name="race_task")
def main(cfg: Any) -> float:
    x, fold = int(cfg.x), int(cfg.fold)
    marker = Path("killed.marker")
    if cfg.kill_at == f"{x},{fold}" and not marker.exists():
        marker.touch()
        os._exit(9)  # as kill -9 would: no final.json, the trial left RUNNING
    with open("calls.log", "a") as f:
        f.write(f"{x} {fold}\n")
    value = loss(x, fold)
    out = Path(HydraConfig.get().runtime.output_dir)
    (out / "final.json").write_text(json.dumps({
        "status": "completed", "best_val_loss": value, "steps": STEPS, "wall_time_s": WALL_S,
        "threads": THREADS}))
    return value


if __name__ == "__main__":
    main()
