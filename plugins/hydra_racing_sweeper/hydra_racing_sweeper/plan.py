"""Every check before a study is touched: what a sweep will do (a Plan), from the sweeper's
settings, the command line's sweep arguments and the task's config. Each mistake raises a
UserError that names the value and the fix; nothing is asked, launched or written before."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import HydraContext
from omegaconf import DictConfig, ListConfig, OmegaConf

from hydra_racing_sweeper import rundir, slurm, specs
from hydra_racing_sweeper.errors import UserError, first_line
from hydra_racing_sweeper.question import question
from hydra_racing_sweeper.race import RaceSpec, judged_at, race_conf, replicate_test
from hydra_racing_sweeper.raceplan import plan_race
from hydra_racing_sweeper.readback import kind
from hydra_racing_sweeper.rundir import flatten
from hydra_racing_sweeper.space import (
    SearchSpace,
    cli_replicates,
    config_key,
    format_value,
    parse_space,
    replicate_combinations,
    search_space_params,
)
from hydra_racing_sweeper.study import block_label
from hydra_racing_sweeper.task import TaskHook, load_hook

log = logging.getLogger(__name__)

DIRECTIONS = ("minimize", "maximize")


def _to_container(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


@dataclass
class Settings:
    """hydra.sweeper.* as plain Python values (the plugin's config.py holds the
    schema and the defaults)."""

    study_name: str | None  # None: the app's name (OptunaSweep.setup resolves it)
    storage: str | None  # None: in memory or a file in the sweep dir (OptunaSweep.setup)
    direction: Any
    objectives: list[str]  # the names given, or value / value_0, value_1, ... (named False)
    n_trials: int | None
    n_jobs: int
    sampler_spec: dict[str, Any]
    pruner_spec: dict[str, Any]
    replicates: dict[str, list[Any]]
    max_failure_rate: float
    fail_value: Any
    heartbeat_interval: int
    grace_period: int | None
    params: dict[str, Any]
    race: dict[str, Any] | None = None  # hydra.sweeper.race as given; None: no race
    dry_run: bool = False
    task_hook: str | None = None  # a TaskHook subclass as module.Class (task.py); None: none
    custom_search_space: str | None = None  # module.function(cfg, trial)
    search_space: dict[str, Any] | None = None  # hydra-optuna-sweeper 1.2's, deprecated
    named: bool = True  # objectives were given: a returned dict is read by these names

    @classmethod
    def of(cls, study_name: str | None, storage: str | None, direction: Any, objectives: Any,
           n_trials: int | None, n_jobs: int, sampler: Any, pruner: Any, replicates: Any,
           max_failure_rate: float, fail_value: Any, heartbeat_interval: int,
           grace_period: int | None, params: Any, race: Any = None,
           dry_run: bool = False, task_hook: str | None = None,
           custom_search_space: str | None = None, search_space: Any = None) -> Settings:
        direction = _to_container(direction)
        direction = ([_direction_name(d) for d in direction] if isinstance(direction, list)
                     else _direction_name(direction))
        named = objectives is not None
        objectives = (list(_to_container(objectives)) if named
                      else _unnamed(direction if isinstance(direction, list) else [direction]))
        return cls(study_name, storage, direction, objectives,
                   n_trials, n_jobs, dict(_to_container(sampler) or {}),
                   dict(_to_container(pruner) or {"name": "none"}),
                   dict(_to_container(replicates) or {}), max_failure_rate,
                   _to_container(fail_value), heartbeat_interval, grace_period,
                   dict(_to_container(params) or {}), _to_container(race) or None, dry_run,
                   task_hook, custom_search_space, _to_container(search_space) or None, named)

    def check(self) -> list[str]:
        """The settings no config can check: directions per objective, rates, counts; the
        sampler node in the spec form (Hydra's `_target_` node mapped). Returns the directions."""
        self.sampler_spec = specs.sampler_spec(self.sampler_spec)
        if not self.objectives:
            raise UserError("hydra.sweeper.objectives is empty; name final.json fields, "
                            "e.g. [best_val_loss], or null to take what the task returns")
        directions = self.direction if isinstance(self.direction, list) else [self.direction]
        if len(directions) != len(self.objectives) or any(d not in DIRECTIONS
                                                          for d in directions):
            raise UserError(f"hydra.sweeper.direction={self.direction!r} must give one of "
                            f"{'/'.join(DIRECTIONS)} per objective {self.objectives}; e.g. "
                            f"direction: {['minimize'] * len(self.objectives)}")
        if not 0.0 <= self.max_failure_rate <= 1.0:
            raise UserError(f"hydra.sweeper.max_failure_rate={self.max_failure_rate} must be "
                            "in [0, 1]")
        if self.n_jobs < 1:
            raise UserError(f"hydra.sweeper.n_jobs={self.n_jobs} must be >= 1")
        if self.heartbeat_interval < 1:
            raise UserError(f"hydra.sweeper.heartbeat_interval={self.heartbeat_interval} "
                            "must be >= 1 second")
        return directions

    def trials(self, space: SearchSpace) -> int:
        """n_trials, checked; null or above a grid's size: the grid's size (Hydra's rule)."""
        grid_size = space.grid_size if self.sampler_spec.get("name") == "grid" else None
        if self.n_trials is None:
            if grid_size is None:
                raise UserError("hydra.sweeper.n_trials=null is only for the grid sampler; "
                                "set a number of trials")
            return grid_size
        if self.n_trials < 1:
            raise UserError(f"hydra.sweeper.n_trials={self.n_trials} must be >= 1")
        if grid_size is not None and self.n_trials > grid_size:
            # as Hydra's Optuna sweeper: a grid runs each point once, so at most its size
            log.info("hydra.sweeper.n_trials=%d is more than the grid's %d points: running %d",
                     self.n_trials, grid_size, grid_size)
            return grid_size
        return self.n_trials

    def fail_values(self) -> list[float] | None:
        """fail_value as one float per objective; None: a failed job is told FAIL."""
        if self.fail_value is None:
            return None
        values = self.fail_value if isinstance(self.fail_value, list) else [self.fail_value]
        if len(values) != len(self.objectives) or not all(
                isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            raise UserError(f"hydra.sweeper.fail_value={self.fail_value!r} must be one finite "
                            f"number per objective {self.objectives}, or null to tell FAIL")
        return [float(v) for v in values]


def _direction_name(direction: Any) -> Any:
    """minimize/maximize as written, or Hydra's Direction enum member (its name)."""
    name = getattr(direction, "name", direction)
    return name.lower() if isinstance(name, str) else name


def _unnamed(directions: list[Any]) -> list[str]:
    """The values' names when the task returns them unnamed: value, or value_0, value_1, ..."""
    return ["value"] if len(directions) == 1 else [f"value_{i}" for i in range(len(directions))]


def race_needs_a_grid(baseline: Any, hook: TaskHook) -> str:
    """A race given no grid: what it needs, with the baseline given (None: none given), and a
    command of the app's that runs one where its hook has one (TaskHook.race_example)."""
    b = format_value(baseline).removesuffix(".0") if baseline is not None else None
    example = hook.race_example(baseline)
    return ("a race races a grid of candidates over replicates, and hydra.sweeper.params has no "
            "grid; give the key as choice(...)" + (f" with the baseline {b} in it"
                                                   if b is not None else "")
            + ", and more replicates than min_replicates" + (f", e.g. {example}" if example
                                                            else ""))


RUNGS_FOR_ANY_TASK = ("the jobs of a task whose run length the sweeper is not told (TaskHook.length) "
                      "are judged at the steps they report through trial.report: give whole "
                      "steps, e.g. hydra.sweeper.race.rungs=[50]")


@dataclass
class Plan:
    """Everything checked: what a sweep will do, before it touches a study."""

    space: SearchSpace
    base_overrides: list[str]
    combinations: list[list[str]]
    directions: list[str]
    n_trials: int
    sampler: optuna.samplers.BaseSampler
    sampler_spec: dict[str, Any]
    pruner: optuna.pruners.BasePruner
    pruner_spec: dict[str, Any]
    fail_values: list[float] | None
    race: RaceSpec | None = None  # hydra.sweeper.race: a race over the replicates
    job: Any = None  # the first job's config as the hook types it (task.TaskHook.typed), or None
    hook: TaskHook = dataclasses.field(default_factory=TaskHook)  # what the app told of its task
    length: tuple[int | None, int | None] = (None, None)  # hook.length of the first job
    # the config part of the question its study answers (question.py): its jobs' config less
    # the varied keys; None: not compared (a plan built in memory)
    question: dict[str, Any] | None = None
    varied: tuple[str, ...] = ()  # the keys its trials vary: the searched and replicate keys
    task: str | None = None  # the task its jobs run (question.task_name); None: not compared
    custom: Any = None  # custom_search_space's function(cfg, trial), or None
    named: bool = True  # the objectives were named: a returned dict is read by these names

    @property
    def kind(self) -> str:
        """The kind of study it makes (readback.kind): plain, race or search."""
        return kind(None if self.race is None else self.race.settings())


class Planner:
    """Composes the task's config for every value a sweep will use, so a key that is not in the
    config (or a value of the wrong type) fails now, not in job 37."""

    def __init__(self, settings: Settings, hydra_context: HydraContext, config: DictConfig,
                 task: str | None = None):
        self.s = settings
        self.task = task
        self.hook = load_hook(settings.task_hook)
        self.hydra_context = hydra_context
        self.config = config
        overrides = list(config.hydra.overrides.hydra)
        # sampler/pruner -> its keys the command line set (the rest may belong to another)
        self.given = {kind: given_keys(overrides, kind) for kind in ("sampler", "pruner")}

    def plan(self, arguments: list[str]) -> Plan:
        race_settings = race_conf(self.s.race)  # its keys and types first, like a config's
        directions = self.s.check()
        slurm.check(self.config.hydra.launcher)  # sbatch missing, unknown partition, ...
        self._check_outputs()
        replicates, arguments = cli_replicates(self.s.replicates, arguments)
        space, base = parse_space(self._params(), arguments)
        self._check_searched(space, arguments, race_settings)
        custom = self._custom(space)
        combinations = replicate_combinations(replicates)
        pruner_spec = self._resolve("pruner", self.s.pruner_spec, specs.PRUNERS)
        pruner = specs.build_pruner(pruner_spec)
        if len(directions) > 1 and not isinstance(pruner, optuna.pruners.NopPruner):
            raise UserError(f"hydra.sweeper.pruner.name={self.s.pruner_spec.get('name')}: "
                            "Optuna cannot prune multi-objective studies; use pruner: "
                            "{name: none}")
        sampler_spec = self._resolve("sampler", self.s.sampler_spec, specs.SAMPLERS)
        sampler = specs.build_sampler(sampler_spec, space.grid)
        n_trials = self.s.trials(space)
        # n_trials above a grid's size is the grid (Hydra's rule): a race takes it as its own
        race = plan_race(race_settings, space, [block_label(c) for c in combinations],
                         directions, self.s.objectives, sampler_spec["name"],
                         pruner_spec["name"], None if self.s.n_trials is None else n_trials)
        job = self._check_keys(space, base, replicates)
        varied = (*(p.key for p in space.params), *replicates)
        if race is not None:
            race = self._judged(race, race_settings.test, space, base, combinations[0], job,
                                replicates)
        return Plan(space=space, base_overrides=base, combinations=combinations,
                    directions=directions, n_trials=n_trials, sampler=sampler,
                    sampler_spec=sampler_spec, pruner=pruner,
                    pruner_spec=pruner_spec, fail_values=self.s.fail_values(), race=race,
                    job=self.job, question=self._question(job, space, varied),
                    varied=varied, task=self.task, hook=self.hook, length=self.length,
                    custom=custom, named=self.s.named)

    def _params(self) -> dict[str, Any]:
        """hydra.sweeper.params, over the deprecated search_space's (params win per key)."""
        if not self.s.search_space:
            return self.s.params
        log.warning("hydra.sweeper.search_space is deprecated (as in hydra-optuna-sweeper); "
                    "write it as hydra.sweeper.params in the sweep grammar%s",
                    ": params win where both set a key" if self.s.params else "")
        return {**search_space_params(self.s.search_space), **self.s.params}

    def _check_searched(self, space: SearchSpace, arguments: list[str], race_settings: Any) -> None:
        """Something left to search (a custom_search_space may search alone)."""
        if space.params or (self.s.custom_search_space and not self.s.race):
            return
        if self.s.race and self.s.sampler_spec.get("name") != "grid":
            fixed = " ".join(a for a in arguments if config_key(a.split("=", 1)[0])
                             in {config_key(k) for k in self.s.params})
            raise UserError(f"{fixed or 'the command line'} fixes every key the search searches:"
                            " nothing is left to search; run that value as one run "
                            f"({self.hook.command} {fixed or 'KEY=VALUE'}), or search another "
                            "key, e.g. 'KEY=interval(1,8)'")
        if self.s.race:  # a race needs a grid, not TPE's interval
            raise UserError(race_needs_a_grid(race_settings.baseline, self.hook))
        raise UserError("hydra.sweeper.params has nothing to search; add e.g. "
                        "x: interval(1.0, 8.0)")

    def _custom(self, space: SearchSpace) -> Any:
        """custom_search_space's function (module.function), or None; refused with a grid or a
        race (they walk the params' own values) before anything runs."""
        path = self.s.custom_search_space
        if not path:
            return None
        where = f"hydra.sweeper.custom_search_space={path}"
        if self.s.sampler_spec.get("name") == "grid" or self.s.race:
            raise UserError(f"{where}: the grid sampler and the race walk the params' own values "
                            "and cannot hold the params it suggests; use another sampler, or "
                            "write those params in hydra.sweeper.params")
        from hydra.utils import get_method

        try:
            return get_method(path)
        except Exception as e:
            raise UserError(f"{where} cannot be loaded ({first_line(e)}); name a function "
                            "module.function(cfg, trial) whose module is importable (the app's "
                            "folder is on sys.path)") from None

    def _check_outputs(self) -> None:
        """Where the sweep writes (any app's): its study's file and its jobs' folder. Checked
        in the plan, so a dry run refuses them too, and the real run before the study is
        created (a sweep dir under a file failed every trial, after the study was made)."""
        specs.check_storage_folder(self.s.storage)
        rundir.check_writable("hydra.sweep.dir", self.config.hydra.sweep.dir)

    def _resolve(self, kind: str, spec: dict[str, Any], table: dict[str, Any]) -> dict[str, Any]:
        """The spec with another pruner's/sampler's options dropped (logged: nothing silent)."""
        spec, dropped = specs.resolve(kind, spec, table, self.given.get(kind, set()))
        if dropped:
            log.info("hydra.sweeper.%s.name=%s: dropped %s, set in the config for another %s "
                     "(Optuna's %s does not take them)", kind, spec["name"],
                     ", ".join(f"{k}={v}" for k, v in dropped.items()), kind,
                     specs.optuna_name(table[spec["name"]]))
        return spec

    def _check_keys(self, space: SearchSpace, base: list[str],
                    replicates: dict[str, list[Any]]) -> DictConfig:
        """Compose the job config with every param value and replicate value, so a key that is
        not in the config (or a value of the wrong type) fails now, not in job 37. Every job gets
        a value of each replicate key, so the checks compose with one (a preset's data.fold=9 is
        no job's fold under data.n_folds=5 data.fold=0,1,2,3,4)."""
        first = {k: f"{k}={format_value(v[0])}" for k, v in replicates.items()}
        for key, values in replicates.items():  # first: a misspelt key is named as one
            self._compose_values(base, f"hydra.sweeper.replicates.{key}", key, values,
                                 keep=True)
        job = base + list(first.values())
        # A job learns its trial from hydra.job.env_set (hydra_racing_sweeper.trial): no key of ours.
        self.job_overrides = job  # the first job's (_question adds the fixed values)
        cfg = self._compose(job, "the task config", "check the command line's overrides")
        self.job = self.hook.typed(cfg)  # a bad value of the app's own is refused here
        self.length = self.hook.length(cfg)
        if self.job is not None:
            self.hook.check(self.job, {p.name: p.key for p in space.params}, cfg,
                            on_this_host=not slurm.is_slurm(self.config.hydra.launcher))
        for p in space.params:
            self._compose_values(job, f"hydra.sweeper.params.{p.name}", p.key, p.examples())
        for fixed in space.fixed:
            self._compose(job + [fixed], f"hydra.sweeper.params ({fixed})",
                          "check the key's spelling and type")
        return cfg

    def _question(self, cfg: DictConfig, space: SearchSpace,
                  varied: tuple[str, ...]) -> dict[str, Any]:
        """The config part of the question the sweep's study answers (question.py), from the
        first job's config (`cfg`, composed by _check_keys) with the space's fixed values every
        job gets: what the app's hook keeps of it (TaskHook.question)."""
        if space.fixed:
            cfg = self._compose([*self.job_overrides, *space.fixed], "hydra.sweeper.params",
                                "check the key's spelling and type")
        tree = OmegaConf.to_container(cfg, resolve=False)  # ${now:...} as written, not a time
        tree.pop("hydra", None)
        return question(flatten(tree), varied, self.hook)

    def _judged(self, race: RaceSpec, test: str, space: SearchSpace, base: list[str],
                combo: list[str], job: list[str], replicates: dict) -> RaceSpec:
        """The race with its rungs as the steps its jobs are judged at (another task's: the
        steps it reports, as written) and its replicate test."""
        if race.rungs and self.job is None:
            race = _steps_as_written(race)
        elif race.rungs:
            race = self._resolve_rungs(race, space, base, combo)
        return dataclasses.replace(race, test=self._race_test(test, replicates, base, combo))

    def _resolve_rungs(self, race: RaceSpec, space: SearchSpace, base: list[str],
                       combo: list[str]) -> RaceSpec:
        """The race judged at eval steps of its runs (race.judged_at): compose each
        candidate's job (the grid may set train.*) and read its train.max_iters and
        train.eval_interval."""
        names = [p.name for p in space.params]
        ends = [tuple(p.grid[i] if p.grid else (p.distribution.low, p.distribution.high)[i]
                      for p in space.params) for i in (0, -1)]
        candidates = race.candidates or ends  # a search's candidates: the space's two ends
        lengths = []
        for c in candidates:
            cfg = self._compose([*base, *space.overrides(dict(zip(names, c, strict=True))),
                                 *combo], "hydra.sweeper.race.rungs", "check the params")
            lengths.append(self.hook.length(cfg))
        return race.with_rungs(*judged_at(list(race.rungs), list(race.margins) or race.margin,
                                          lengths))

    def _race_test(self, option: str, replicates: dict[str, list[Any]], base: list[str],
                   combo: list[str]):
        """The looks' test (race.replicate_test), with data.n_folds from the race's job."""
        where = "hydra.sweeper.race.test"
        return replicate_test(option, replicates, lambda: self.hook.n_folds(
            self._compose([*base, *combo], where, "the race's jobs need data.n_folds")))

    def _compose_values(self, base: list[str], where: str, key: str, values: list[Any],
                        keep: bool = False) -> None:
        """Compose the job with each value, and check it as the job would (config.validate):
        a replicate data.fold=2 under data.n_folds=2 fails now, not after the first runs
        trained. keep: name the values that fit, as the command line gives a replicate list."""
        problems = []
        for value in values:
            override = f"{key}={format_value(value)}"
            cfg = self._compose(base + [override], where,
                                f"{override} does not fit the config; check the key's spelling "
                                "and type")
            problems.append(self._problem(cfg))
        bad = next((p for p in problems if p), None)
        if bad is None:
            return
        fits = [format_value(v) for v, p in zip(values, problems, strict=True) if p is None]
        hint = f"; keep the values that fit: {key}={','.join(fits)}" if keep and fits else ""
        raise UserError(f"{where}={values}: {bad}{hint}")

    def _problem(self, cfg: DictConfig) -> str | None:
        """What the hook's typed check finds wrong with a job config, as its one line."""
        try:
            self.hook.typed(cfg)
        except UserError as e:
            return str(e)
        return None

    def _compose(self, overrides: list[str], where: str, fix: str) -> DictConfig:
        try:
            return self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        except Exception as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            reason = " ".join(lines[:2]) if lines else type(e).__name__
            raise UserError(f"{where}: {reason} -- {fix}") from None


def _steps_as_written(race: RaceSpec) -> RaceSpec:
    """A race's rungs for a task whose run length the hook does not give (nothing to take
    fractions of): whole steps, judged when a job reports that step."""
    if not all(isinstance(r, int) for r in race.rungs):
        raise UserError(f"hydra.sweeper.race.rungs={list(race.rungs)}: {RUNGS_FOR_ANY_TASK}")
    return race.with_rungs(race.rungs, race.margins or (race.margin,) * len(race.rungs))


def given_keys(overrides: list[str], kind: str) -> set[str]:
    """Keys of hydra.sweeper.<kind> that command-line overrides set (a dict value sets all of
    its keys): `hydra.sweeper.pruner.name=none` -> {"name"}."""
    node = f"hydra.sweeper.{kind}"
    keys = set()
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key == node and isinstance(override.value(), dict):
            keys |= set(override.value())
        elif key.startswith(node + "."):
            keys.add(key[len(node) + 1:].split(".")[0])
    return keys


