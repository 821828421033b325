"""A noisy training curve, raced over seeds: what the racing sweeper adds to Optuna's.

The loss falls as 1/sqrt(step) towards (log10(lr) + 1)^2, lowest at lr = 0.1, plus the seed's
luck (the same at every lr, as a seed's data order would be) and each run's own noise. Each lr
runs on the seeds of hydra.sweeper.replicates (its value: the mean over them); the race drops
an lr once it is significantly worse than the leader, and stops a run that is far behind the
best other run of its seed at a rung (step 10), which the task hears through trial.report.

    python noisy.py --multirun
"""

import math
import random

import hydra
from hydra_racing_sweeper import trial
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="noisy-conf", config_name="config")
def noisy(cfg: DictConfig) -> float:
    floor = (math.log10(cfg.lr) + 1) ** 2
    luck = random.Random(cfg.seed).gauss(0, 0.3)
    noise = random.Random(f"{cfg.seed}/{cfg.lr}")
    loss = math.inf
    for step in range(1, cfg.steps + 1):
        loss = floor + 1 / math.sqrt(step) + luck + noise.gauss(0, cfg.noise)
        if trial.report(step, loss):  # True: the race (or a pruner) stopped this run
            break
    return loss


if __name__ == "__main__":
    noisy()
