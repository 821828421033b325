"""The Hydra plugin class. Hydra imports every public module under hydra_plugins on every run
(single runs too), so this one stays light: Optuna and the sweep itself (hydra_racing_sweeper) load
only when a sweep starts."""

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class RacingSweeper(Sweeper):
    def __init__(self, **options: Any) -> None:
        from hydra_racing_sweeper import OptunaSweep

        self._sweep = OptunaSweep(**options)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self._sweep.setup(hydra_context, task_function, config)

    def sweep(self, arguments: list[str]) -> None:
        from hydra_racing_sweeper.errors import UserError, exit_interrupted, exit_with

        try:
            self._sweep.sweep(list(arguments))
        except UserError as e:
            exit_with(e)  # one line, no traceback: Hydra would add its own hint line
        except KeyboardInterrupt:  # any app's sweep: one line and 130, as a single run's
            exit_interrupted(self._sweep.interrupted_hint())
