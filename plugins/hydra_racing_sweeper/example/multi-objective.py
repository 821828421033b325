"""Two objectives at once (the Binh-Korn problem): 4x^2 + 4y^2 and (x-5)^2 + (y-5)^2, both
minimised. The sweep's answer is the Pareto front, `solutions` in optimization_results.yaml.

    python multi-objective.py --multirun
"""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="multi-objective-conf", config_name="config")
def binh_korn(cfg: DictConfig) -> tuple[float, float]:
    x, y = float(cfg.x), float(cfg.y)
    near_origin = 4 * (x * x + y * y)
    near_five = (x - 5) ** 2 + (y - 5) ** 2
    return near_origin, near_five


if __name__ == "__main__":
    binh_korn()
