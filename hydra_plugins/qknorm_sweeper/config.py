"""qknorm's name for the racing sweeper, `hydra/sweeper=qknorm_optuna` (docs/sweeper.md): the
racing sweeper's schema (hydra_racing_sweeper's config.py, whose defaults are Hydra's Optuna
sweeper's) with qknorm's defaults and its task hook (qknorm/sweep/hook.py), which the search/
presets select. qknorm's defaults are kept here so its presets behave as before the schema took
Hydra's.
"""

# OmegaConf 2.3 reads typing.Optional/Dict/List in structured configs, not `X | None`.
# ruff: noqa: UP006, UP007, UP035, UP045

from dataclasses import dataclass, field
from typing import List, Optional

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_racing_sweeper.config import RacingSweeperConf


@dataclass
class QknormOptunaSweeperConf(RacingSweeperConf):
    study_name: Optional[str] = "qknorm"
    storage: Optional[str] = "sqlite:///outputs/optuna.db"
    n_jobs: int = 1
    max_failure_rate: float = 0.25
    objectives: Optional[List[str]] = field(default_factory=lambda: ["best_val_loss"])  # final.json
    task_hook: Optional[str] = "qknorm.sweep.hook.QknormTask"


ConfigStore.instance().store(
    group="hydra/sweeper", name="qknorm_optuna", node=QknormOptunaSweeperConf,
    provider="qknorm_sweeper",
)
