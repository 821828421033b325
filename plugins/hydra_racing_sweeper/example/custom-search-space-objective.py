"""A search space that Hydra's override grammar cannot say: z is searched within
max_z_difference_from_x of the x this trial drew, and w, a key the config lacks, in [0, 1].

`hydra.sweeper.custom_search_space` names `extend_space` below: the sweeper calls it with the
sweep's config and each new trial, after the trial has drawn the params of hydra.sweeper.params.

    python custom-search-space-objective.py --multirun max_z_difference_from_x=0.3
"""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="custom-search-space", config_name="config")
def four_dim_sphere(cfg: DictConfig) -> float:
    return sum(float(cfg[k]) ** 2 for k in ("w", "x", "y", "z"))


def extend_space(cfg: DictConfig, trial) -> None:
    """`trial` is an optuna.trial.Trial; x was drawn already."""
    half_width = cfg.max_z_difference_from_x
    centre = trial.params["x"]
    trial.suggest_float("z", centre - half_width, centre + half_width)
    # "+w": w is not in the config, so the job's override must add it.
    trial.suggest_float("+w", 0.0, 1.0)


if __name__ == "__main__":
    four_dim_sphere()
