"""The sweeper's config schema, registered as `hydra/sweeper=racing`.

The keys follow Hydra's Optuna sweeper (hydra-optuna-sweeper) where they mean the same thing, so
an app moves over by changing the sweeper's name; the rest (replicates, race, pruner,
task_hook, ...) is what that sweeper lacks.
"""

# OmegaConf 2.3 reads typing.Optional/Dict/List in structured configs, not `X | None`.
# ruff: noqa: UP006, UP007, UP035, UP045

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class RacingSweeperConf:
    _target_: str = "hydra_plugins.hydra_racing_sweeper.racing_sweeper.RacingSweeper"
    study_name: str = "racing"
    # Any SQLAlchemy URL. A relative SQLite path is taken from the directory the sweep starts in.
    storage: str = "sqlite:///outputs/optuna.db"
    # One direction, or a list with one direction per entry of `objectives`.
    direction: Any = "minimize"
    # final.json fields a trial is scored on; a trial's value is their mean over its replicates.
    objectives: List[str] = field(default_factory=lambda: ["best_val_loss"])
    # The study's total: a rerun tops the study up to n_trials. null = the grid's size (grid only).
    n_trials: Optional[int] = 20
    # Trials asked and launched per batch; the launcher decides where they run.
    n_jobs: int = 1
    # {name: tpe|gp|random|grid|cmaes|qmc|nsgaii, seed: int|null, ...sampler options}; options left
    # out whose Optuna default moved between releases are hydra_racing_sweeper/specs.py's PINNED
    sampler: Dict[str, Any] = field(default_factory=lambda: {"name": "tpe", "seed": None})
    # {name: none|median|hyperband|successive_halving|percentile|threshold, ...pruner options}
    pruner: Dict[str, Any] = field(default_factory=lambda: {"name": "none"})
    # override key -> list of values: every trial runs every combination; its value is the mean.
    replicates: Dict[str, List[Any]] = field(default_factory=dict)
    # The sweep stops once more than max_failure_rate * n_trials trials of the study have failed.
    max_failure_rate: float = 0.25
    # null: a failed trial is told FAIL. A number (one per objective for several): told instead.
    fail_value: Optional[Any] = None
    # Liveness of this sweeper's running trials; a rerun fails and retries trials whose heartbeat
    # is older than grace_period seconds (null = 2 * heartbeat_interval).
    heartbeat_interval: int = 10
    grace_period: Optional[int] = None
    # key -> Hydra sweep grammar: interval(a, b), tag(log, interval(a, b)), range(a, b[, step]),
    # choice(a, b, ...), or a fixed value. A key written `1/norm.p` searches the reciprocal
    # (0 means inf), so a search space can reach p = inf.
    params: Dict[str, Any] = field(default_factory=dict)
    # {} (no race), or a race over the replicates, typed by hydra_racing_sweeper/race/settings.py's RaceConf
    # (its keys and defaults; docs/race.md): {min_replicates: 3, baseline: 2.0, rungs: [0.5]},
    # or conf/search/p_race.yaml's.
    # A dict, not Optional[RaceConf]: OmegaConf cannot merge a command-line dict into a null
    # structured node.
    race: Dict[str, Any] = field(default_factory=dict)
    # true: check everything and log the plan (runs, steps, a time from a step measured here;
    # hydra_racing_sweeper/cost.py), then stop before the study is opened: nothing asked, run or written.
    dry_run: bool = False
    # What the app tells the sweeper of its task: a hydra_racing_sweeper.TaskHook subclass as
    # module.Class (hydra_racing_sweeper/task.py); null: nothing (steps from trial.report).
    task_hook: Optional[str] = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="racing", node=RacingSweeperConf, provider="hydra_racing_sweeper",
)
