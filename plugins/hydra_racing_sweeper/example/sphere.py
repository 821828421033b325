"""The sphere x^2 + y^2, minimised by the racing sweeper (its minimum, 0, is at x = y = 0).

    python sphere.py --multirun                       # the search of conf/config.yaml
    python sphere.py --multirun 'x=interval(-3, 3)'   # another range for x
    python sphere.py --multirun error=true            # every job fails: max_failure_rate
"""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def sphere(cfg: DictConfig) -> float:
    if cfg.get("error", False):
        raise RuntimeError("cfg.error is True")
    return float(cfg.x) ** 2 + float(cfg.y) ** 2


if __name__ == "__main__":
    sphere()
