"""The sweeper's config schema, registered as `hydra/sweeper=racing`, and its sampler group
`hydra/sweeper/sampler`.

The keys and defaults are those of Hydra's Optuna sweeper (hydra-optuna-sweeper), so an app moves
over by changing `optuna` to `racing`; the rest (objectives, replicates, race, pruner,
task_hook, ...) is what that sweeper lacks. qknorm's `qknorm_optuna` subclasses this schema with
qknorm's defaults.

Beside Hydra's plugin: its group `hydra/sweeper/sampler` has the same names (tpe, random, cmaes,
nsgaii, grid, motpe; qmc and gp at Hydra's HEAD). Our nodes are plain dicts with Hydra's
`_target_` and keyword arguments (grid adds `seed: null`). Hydra's nodes win a name both have:
ours is registered only where the name is free, and Hydra's overwrites it when it loads later.
Its sweeper types `sampler` as its own SamplerConfig, which a dict of ours would not merge into;
ours takes either (specs.sampler_spec maps a `_target_`). `spec`, our default entry, is ours
alone: `{name: tpe, seed: null}`, the form qknorm's presets write (`sampler: {name: gp, seed: 0}`).
"""

# OmegaConf 2.3 reads typing.Optional/Dict/List in structured configs, not `X | None`.
# ruff: noqa: UP006, UP007, UP035, UP045

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore

SAMPLER_GROUP = "hydra/sweeper/sampler"
_SEEDED = {"seed": None}
# Hydra's nodes: each sampler's _target_ and keyword arguments at Hydra's defaults (None: Optuna's).
SAMPLER_NODES: Dict[str, Dict[str, Any]] = {
    "spec": {"name": "tpe", "seed": None},
    "tpe": {"_target_": "optuna.samplers.TPESampler", **_SEEDED, "consider_prior": None,
            "prior_weight": None, "consider_magic_clip": None, "consider_endpoints": None,
            "n_startup_trials": 10, "n_ei_candidates": 24, "multivariate": False,
            "warn_independent_sampling": None},
    "random": {"_target_": "optuna.samplers.RandomSampler", **_SEEDED},
    "cmaes": {"_target_": "optuna.samplers.CmaEsSampler", **_SEEDED, "x0": None, "sigma0": None,
              "independent_sampler": None, "warn_independent_sampling": True,
              "consider_pruned_trials": False, "restart_strategy": None, "inc_popsize": 2,
              "use_separable_cma": False, "source_trials": None},
    "nsgaii": {"_target_": "optuna.samplers.NSGAIISampler", **_SEEDED, "population_size": 50,
               "mutation_prob": None, "crossover_prob": 0.9, "swapping_prob": 0.5,
               "constraints_func": None},
    "gp": {"_target_": "optuna.samplers.GPSampler", **_SEEDED, "independent_sampler": None,
           "n_startup_trials": 10, "deterministic_objective": False, "constraints_func": None,
           "warn_independent_sampling": True},
    "qmc": {"_target_": "optuna.samplers.QMCSampler", **_SEEDED, "qmc_type": "sobol",
            "scramble": False, "independent_sampler": None, "warn_asynchronous_seeding": True,
            "warn_independent_sampling": True},
    # the search space is the sweeper's to pass; seed: our presets seed the grid's order
    "grid": {"_target_": "optuna.samplers.GridSampler", "_partial_": True, **_SEEDED},
    # removed in Optuna 4.0: the builder refuses it, naming tpe (hydra_racing_sweeper/specs.py)
    "motpe": {"_target_": "hydra_racing_sweeper.specs.motpe_removed"},
}


@dataclass
class RacingSweeperConf:
    # The sampler group's entry: `spec` ({name: tpe, seed: null}), or Hydra's node of a sampler
    # (hydra/sweeper/sampler=random).
    defaults: List[Any] = field(default_factory=lambda: [{"sampler": "spec"}])
    _target_: str = "hydra_plugins.hydra_racing_sweeper.racing_sweeper.RacingSweeper"
    # The sampler node reaches the sweeper as config: Hydra would instantiate its `_target_`
    # (and motpe's refusal) while making the sweeper, before any check of ours.
    _recursive_: bool = False
    # null: the app's name (hydra.job.name), so a rerun with a storage resumes its study.
    study_name: Optional[str] = None
    # Any SQLAlchemy or journal URL (a relative SQLite path is from the directory the sweep
    # starts in). null: in memory when the jobs run in the sweeper's process (basic launcher),
    # else a SQLite file in hydra.sweep.dir (the log says which).
    storage: Optional[str] = None
    # One direction, or a list with one per objective (per value the task returns).
    direction: Any = "minimize"
    # The names of the values a trial is scored on: final.json fields, or the keys of a dict
    # the task returns. null: the task returns its values (value, or value_0, value_1, ...).
    objectives: Optional[List[str]] = None
    # The study's total: a rerun tops the study up to n_trials. A grid runs at most its size;
    # null = the grid's size (grid only).
    n_trials: Optional[int] = 20
    # Trials asked and launched per batch; the launcher decides where they run.
    n_jobs: int = 2
    # The `spec` form {name: tpe|gp|random|grid|cmaes|qmc|nsgaii, seed: int|null, ...options},
    # or Hydra's node ({_target_: optuna.samplers.XSampler, ...}); options left out whose Optuna
    # default moved between releases are hydra_racing_sweeper/specs.py's PINNED. Filled by the
    # sampler group (defaults above): no default here, which would merge into Hydra's node.
    sampler: Dict[str, Any] = field(default_factory=dict)
    # {name: none|median|hyperband|successive_halving|percentile|threshold, ...pruner options}
    pruner: Dict[str, Any] = field(default_factory=lambda: {"name": "none"})
    # override key -> list of values: every trial runs every combination; its value is the mean.
    replicates: Dict[str, List[Any]] = field(default_factory=dict)
    # The sweep stops once more than max_failure_rate * n_trials trials of the study have failed
    # (study-wide, not per batch as Hydra's), naming the first failure; 1.0 never stops.
    max_failure_rate: float = 0.0
    # null: a failed trial is told FAIL. A number (one per objective for several): told instead.
    fail_value: Optional[Any] = None
    # Liveness of this sweeper's running trials; a rerun fails and retries trials whose heartbeat
    # is older than grace_period seconds (null = 2 * heartbeat_interval). None in memory.
    heartbeat_interval: int = 10
    grace_period: Optional[int] = None
    # key -> Hydra sweep grammar: interval(a, b), int(interval(a, b)), tag(log, interval(a, b)),
    # range(a, b[, step]) (b excluded), choice(a, b, ...), or a fixed value. A key written
    # `1/norm.p` searches the reciprocal (0 means inf), so a search space can reach p = inf.
    params: Optional[Dict[str, Any]] = None
    # module.function(cfg, trial): suggests further params on each trial after the params above
    # (each becomes an override named as suggested: `+w` adds w).
    custom_search_space: Optional[str] = None
    # hydra-optuna-sweeper 1.2's deprecated form {KEY: {type: int|float|categorical, low, high,
    # step, log, choices}}, turned into params (params win per key), with a warning.
    search_space: Optional[Dict[str, Any]] = None
    # {} (no race), or a race over the replicates, typed by hydra_racing_sweeper/race/settings.py's
    # RaceConf (docs/race.md): {min_replicates: 3, baseline: 2.0, rungs: [0.5]}.
    # A dict, not Optional[RaceConf]: OmegaConf cannot merge a command-line dict into a null
    # structured node.
    race: Dict[str, Any] = field(default_factory=dict)
    # true: check everything and log the plan (runs, steps, a time from a step measured here;
    # hydra_racing_sweeper/cost.py), then stop before the study is opened: nothing asked, run or
    # written.
    dry_run: bool = False
    # What the app tells the sweeper of its task: a hydra_racing_sweeper.TaskHook subclass as
    # module.Class (hydra_racing_sweeper/task.py); null: nothing (steps from trial.report).
    task_hook: Optional[str] = None


def _registered(cs: ConfigStore, group: str, name: str) -> bool:
    folder: Any = cs.repo
    for part in group.split("/"):
        folder = folder.get(part, {})
    return f"{name}.yaml" in folder


def register_samplers(cs: ConfigStore) -> None:
    """Our sampler nodes, each where no other plugin (Hydra's Optuna sweeper) holds its name."""
    for name, node in SAMPLER_NODES.items():
        if not _registered(cs, SAMPLER_GROUP, name):
            cs.store(group=SAMPLER_GROUP, name=name, node=dict(node),
                     provider="hydra_racing_sweeper")


_cs = ConfigStore.instance()
_cs.store(group="hydra/sweeper", name="racing", node=RacingSweeperConf,
          provider="hydra_racing_sweeper")
register_samplers(_cs)
