"""A task whose return value takes the shape `kind` names, for the tests of what a task may
return: a float, a numpy scalar, a tuple, a list, a dict, or `n_values` numbers.

With x the searched key:
  float, numpy: (x - 1)^2
  tuple, list:  (x^2, (x - 2)^2), or the first n_values of (x^2, (x - 2)^2, x) when n_values is set
  dict:         {loss: (x - 1)^2, size: x}, or {loss: (x - 1)^2} with single_key=true
"""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="shapes")
def shapes(cfg: DictConfig):
    x = float(cfg.x)
    if cfg.kind == "float":
        return (x - 1) ** 2
    if cfg.kind == "numpy":
        import numpy as np

        return np.float64((x - 1) ** 2)
    if cfg.kind in ("tuple", "list"):
        values = (x**2, (x - 2) ** 2, x)[: cfg.n_values or 2]
        return tuple(values) if cfg.kind == "tuple" else list(values)
    if cfg.kind == "dict":
        return {"loss": (x - 1) ** 2} if cfg.single_key else {"loss": (x - 1) ** 2, "size": x}
    raise ValueError(f"kind={cfg.kind!r} is none of float, numpy, tuple, list, dict")


if __name__ == "__main__":
    shapes()
