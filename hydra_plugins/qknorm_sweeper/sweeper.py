"""The Hydra plugin class. Hydra imports every public module under hydra_plugins on every run
(single runs too), so this one stays light: Optuna and the logic load only when a sweep starts
(hydra_plugins/qknorm_sweeper/_sweep.py; underscored modules are not scanned)."""

import sys
from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class QknormOptunaSweeper(Sweeper):
    def __init__(self, **options: Any) -> None:
        from hydra_plugins.qknorm_sweeper._sweep import OptunaSweep

        self._sweep = OptunaSweep(**options)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self._sweep.setup(hydra_context, task_function, config)

    def sweep(self, arguments: list[str]) -> None:
        from hydra_plugins.qknorm_sweeper._errors import SweepError

        try:
            self._sweep.sweep(list(arguments))
        except SweepError as e:
            # One line, no traceback: Hydra would print its own hint line after the message.
            print(f"{'error' if e.exit_code == 2 else 'stopped'}: {e}", file=sys.stderr)
            raise SystemExit(e.exit_code) from None
