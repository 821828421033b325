"""A Hydra task with a noisy training loop, swept by qknorm's racing sweeper (docs/your_app.md).

    python app.py                                    # one run: prints its last loss
    python app.py -m hydra/sweeper=qknorm_optuna ... # a sweep (docs/your_app.md)

Its loss falls as 1/sqrt(step) towards a floor (log10(lr) + 1)^2, lowest at lr = 0.1, plus the
seed's luck (the same at every lr, as a seed's data order would be) and each run's own noise.
"""

import math
import random

import hydra
from hydra_racing_sweeper import trial


@hydra.main(version_base=None, config_path=".", config_name="config")
def main(cfg) -> float:
    luck = random.Random(cfg.seed).gauss(0, 0.3)  # the seed's: shared by every lr
    noise = random.Random(f"{cfg.seed} {cfg.lr}")  # the run's own
    for step in range(1, cfg.steps + 1):
        loss = (math.log10(cfg.lr) + 1) ** 2 + 1 / math.sqrt(step) + luck + noise.gauss(0, cfg.noise)
        if trial.report(step, loss):  # True: the sweeper stops this run
            break
    return loss


if __name__ == "__main__":
    main()
