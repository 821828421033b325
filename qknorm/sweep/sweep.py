"""The sweep itself (imported lazily by sweeper.py): ask trials, launch their jobs through any
Hydra launcher, tell results.

One batch at a time: ask up to n_jobs trials, turn each into one job per replicate
combination (params + replicate values + optuna.* keys), launch them all, read every job's
final.json (status and objective fields) and tell COMPLETE / PRUNED / FAIL. Everything the user
can get wrong is checked before the study is created or touched.
"""

from __future__ import annotations

import hashlib
import logging
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, ListConfig, OmegaConf
from optuna.trial import TrialState

from qknorm import rundir
from qknorm.config import effective_key, flatten, rungs_problem
from qknorm.errors import UserError
from qknorm.rundir import COMPLETED, FAILED, PRUNED
from qknorm.sweep import outputs as results
from qknorm.sweep import race as _race
from qknorm.sweep import racestats as racing
from qknorm.sweep import slurm as _slurm
from qknorm.sweep import specs as optuna_specs
from qknorm.sweep import study as record
from qknorm.sweep.space import (
    SearchSpace,
    cli_replicates,
    format_value,
    parse_space,
    replicate_combinations,
)
from qknorm.sweep.study import (
    CONFIG_KEY_ATTR,
    DUPLICATE_ATTR,
    ERROR_ATTR,
    JOB_DIRS_ATTR,
    JOBS_ATTR,
    MEAN_ATTR,
    N_ATTR,
    PARAMS_ATTR,
    PRUNER_ATTR,
    RACE_CANDIDATE_ATTR,
    RACE_OUTCOME_ATTR,
    RACE_RUNS_ATTR,
    RACE_STOP_ATTR,
    STATUS_ATTR,
    STD_ATTR,
    Heartbeat,
    Tally,
    block_label,
)

log = logging.getLogger(__name__)

DIRECTIONS = ("minimize", "maximize")


def _to_container(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


@dataclass
class JobResult:
    status: str  # one of qknorm.rundir.STATUSES
    run_dir: str
    fields: dict[str, Any] = field(default_factory=dict)
    error: str = ""


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
    race: _race.RaceSpec | None = None  # hydra.sweeper.race: a race over the replicates


class OptunaSweep:
    """The sweeper's state and logic; QknormOptunaSweeper (sweeper.py) delegates here."""

    def __init__(self, study_name: str, storage: str, direction: Any, objectives: Sequence[str],
                 n_trials: int | None, n_jobs: int, sampler: Any, pruner: Any, replicates: Any,
                 max_failure_rate: float, fail_value: Any, heartbeat_interval: int,
                 grace_period: int | None, params: Any, race: Any = None) -> None:
        self.study_name = study_name
        self.storage = storage
        self.direction = _to_container(direction)
        self.objectives = list(_to_container(objectives))
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.sampler_spec = dict(_to_container(sampler) or {})
        self.pruner_spec = dict(_to_container(pruner) or {"name": "none"})
        self.replicates = dict(_to_container(replicates) or {})
        self.max_failure_rate = max_failure_rate
        self.fail_value = _to_container(fail_value)
        self.heartbeat_interval = heartbeat_interval
        self.grace_period = grace_period
        self.params = dict(_to_container(params) or {})
        self.race = _to_container(race) or None  # {}: no race
        self.given: dict[str, set[str]] = {}  # sampler/pruner -> its keys the command line set

    def setup(self, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        overrides = list(config.hydra.overrides.hydra)
        self.given = {kind: _given_keys(overrides, kind) for kind in ("sampler", "pruner")}

    # -- checks ---------------------------------------------------------------------------

    def _plan(self, arguments: list[str]) -> Plan:
        if not self.objectives:
            raise UserError("hydra.sweeper.objectives is empty; name final.json fields, "
                             "e.g. [best_val_loss]")
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
        _slurm.check(self.config.hydra.launcher)  # sbatch missing, unknown partition, ...
        replicates, arguments = cli_replicates(self.replicates, arguments)
        space, base = parse_space(self.params, arguments)
        if not space.params:
            raise UserError("hydra.sweeper.params has nothing to search; add e.g. "
                             "norm.p: interval(1.0, 8.0)")
        combinations = replicate_combinations(replicates)
        pruner_spec = self._resolve("pruner", self.pruner_spec, optuna_specs.PRUNERS)
        pruner = optuna_specs.build_pruner(pruner_spec)
        if len(directions) > 1 and not isinstance(pruner, optuna.pruners.NopPruner):
            raise UserError(f"hydra.sweeper.pruner.name={self.pruner_spec.get('name')}: "
                             "Optuna cannot prune multi-objective studies; use pruner: "
                             "{name: none}")
        sampler_spec = self._resolve("sampler", self.sampler_spec, optuna_specs.SAMPLERS)
        sampler = optuna_specs.build_sampler(sampler_spec, space.grid)
        race = _race.plan(self.race, space, [block_label(c) for c in combinations], directions,
                          self.objectives, sampler_spec["name"], pruner_spec["name"],
                          self.n_trials)
        n_trials = self._n_trials(space)
        self._check_keys(space, base, replicates)
        if race is not None and race.rungs:
            self._check_rungs(race, space, base, combinations[0])
        return Plan(space=space, base_overrides=base, combinations=combinations,
                    directions=directions, n_trials=n_trials, sampler=sampler,
                    sampler_spec=sampler_spec, pruner=pruner,
                    pruner_spec=pruner_spec, fail_values=self._fail_values(), race=race)

    def _resolve(self, kind: str, spec: dict[str, Any], table: dict[str, Any]) -> dict[str, Any]:
        """The spec with another pruner's/sampler's options dropped (logged: nothing silent)."""
        spec, dropped = optuna_specs.resolve(kind, spec, table, self.given.get(kind, set()))
        if dropped:
            log.info("hydra.sweeper.%s.name=%s: dropped %s, set in the config for another %s "
                     "(Optuna's %s does not take them)", kind, spec["name"],
                     ", ".join(f"{k}={v}" for k, v in dropped.items()), kind,
                     optuna_specs.optuna_name(table[spec["name"]]))
        return spec

    def _n_trials(self, space: SearchSpace) -> int:
        grid_size = space.grid_size if self.sampler_spec.get("name") == "grid" else None
        if self.n_trials is None:
            if grid_size is None:
                raise UserError("hydra.sweeper.n_trials=null is only for the grid sampler; "
                                 "set a number of trials")
            return grid_size
        if self.n_trials < 1:
            raise UserError(f"hydra.sweeper.n_trials={self.n_trials} must be >= 1")
        if grid_size is not None and self.n_trials > grid_size:
            raise UserError(f"hydra.sweeper.n_trials={self.n_trials} exceeds the grid's "
                             f"{grid_size} points; set n_trials<={grid_size} or null")
        return self.n_trials

    def _fail_values(self) -> list[float] | None:
        if self.fail_value is None:
            return None
        values = self.fail_value if isinstance(self.fail_value, list) else [self.fail_value]
        if len(values) != len(self.objectives) or not all(
                isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            raise UserError(f"hydra.sweeper.fail_value={self.fail_value!r} must be one finite "
                             f"number per objective {self.objectives}, or null to tell FAIL")
        return [float(v) for v in values]

    def _check_keys(self, space: SearchSpace, base: list[str],
                    replicates: dict[str, list[Any]]) -> None:
        """Compose the job config with every param value and replicate value, so a key that is
        not in the config (or a value of the wrong type) fails now, not in job 37."""
        job_keys = [f"optuna.study_name={format_value(self.study_name)}",
                    "optuna.storage=x", "optuna.trial=0"]
        self._compose(base + job_keys, "the task config",
                      "the task needs keys optuna.study_name, optuna.storage, optuna.trial")
        for p in space.params:
            self._compose_values(base, f"hydra.sweeper.params.{p.name}", p.key, p.examples())
        for fixed in space.fixed:
            self._compose(base + [fixed], f"hydra.sweeper.params ({fixed})",
                          "check the key's spelling and type")
        for key, values in replicates.items():
            self._compose_values(base, f"hydra.sweeper.replicates.{key}", key, values)

    def _check_rungs(self, race: _race.RaceSpec, space: SearchSpace, base: list[str],
                     combo: list[str]) -> None:
        """Every rung must be an eval step before the end of every candidate's run: compose
        each candidate's job (the grid may set train.*) and read train.max_iters and
        train.eval_interval; the job must also take optuna.race.* (qknorm.train does)."""
        names = [p.name for p in space.params]
        for c in race.candidates:
            overrides = [*base, *space.overrides(dict(zip(names, c, strict=True))), *combo,
                         *_race_keys(race, c, block_label(combo))]
            cfg = self._compose(overrides, "hydra.sweeper.race.rungs",
                                "in-fold stopping needs qknorm.train's jobs (they take "
                                "optuna.race.{block,rungs,margin}), or set rungs: null")
            max_iters = OmegaConf.select(cfg, "train.max_iters")
            eval_interval = OmegaConf.select(cfg, "train.eval_interval")
            if not (isinstance(max_iters, int) and isinstance(eval_interval, int)):
                raise UserError("hydra.sweeper.race.rungs needs train.max_iters and "
                                 "train.eval_interval in the task's config (qknorm.train's); "
                                 "set rungs: null")
            problem = rungs_problem(list(race.rungs), max_iters, eval_interval)
            if problem:
                raise UserError(f"hydra.sweeper.race.rungs={list(race.rungs)} {problem}")

    def _compose_values(self, base: list[str], where: str, key: str, values: list[Any]) -> None:
        for value in values:
            override = f"{key}={format_value(value)}"
            self._compose(base + [override], where,
                          f"{override} does not fit the config; check the key's spelling and type")

    def _compose(self, overrides: list[str], where: str, fix: str) -> DictConfig:
        try:
            return self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        except Exception as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            reason = " ".join(lines[:2]) if lines else type(e).__name__
            raise UserError(f"{where}: {reason} -- {fix}") from None

    # -- the sweep ------------------------------------------------------------------------

    def sweep(self, arguments: list[str]) -> None:
        plan = self._plan(list(arguments))
        url = optuna_specs.absolute_url(self.storage, Path.cwd())
        storage = optuna_specs.open_storage(url, self.heartbeat_interval, self.grace_period)
        study = optuna.create_study(study_name=self.study_name, storage=storage,
                                    sampler=plan.sampler, pruner=plan.pruner,
                                    directions=plan.directions, load_if_exists=True)
        have = [d.name.lower() for d in study.directions]
        if have != plan.directions:
            raise UserError(f"study {self.study_name!r} in {self.storage} was created with "
                             f"direction {have}, not {plan.directions}; use another "
                             "hydra.sweeper.study_name")
        if plan.race is not None:
            _race.check_study(study, plan.race, self.study_name)
            _race.record_settings(study, plan.race)
        else:  # a scancelled job's trial, failed by the sweep that saw it end: run it again
            _slurm.retry_interrupted(study)
        log.info("study %s in %s: n_trials=%d, %d job(s) per trial, %s, %s", self.study_name,
                 self.storage, plan.n_trials, len(plan.combinations),
                 optuna_specs.optuna_name(type(plan.sampler)), type(plan.pruner).__name__)
        if plan.race is not None:
            log.info("race over %d replicates: every candidate runs the first %d, then those "
                     "significantly worse than the leader stop (alpha=%g, baseline %s)",
                     len(plan.race.blocks), plan.race.min_replicates, plan.race.alpha,
                     plan.race.labels.get(plan.race.baseline, "none"))
            if plan.race.rungs:
                log.info("in-fold stopping: a run more than %g above the best other run of its "
                         "replicate at step %s stops there, and its candidate leaves the race",
                         plan.race.margin, "/".join(map(str, plan.race.rungs)))
            if plan.race.budget_steps is not None:
                log.info("budget: no replicate launches once the race's runs took %d training "
                         "steps", plan.race.budget_steps)
        stop_message = None
        with Heartbeat(storage, self.heartbeat_interval) as heartbeat:
            stop_message = self._run(study, plan, url, heartbeat)
        paths = results.write(study, self.sweep_dir, self.objectives, plan.n_trials,
                              self.storage)
        tally = Tally.of(study)
        print(f"study {self.study_name}: {tally.finished}/{plan.n_trials} trials finished "
              f"({tally.failed} failed)")
        print(f"optimization results: {paths[0]}")
        print(f"trials: {paths[1]}")
        if plan.race is not None:
            print(racing.summary_line(_race.elimination(study)))
        if stop_message:
            raise UserError(stop_message, exit_code=1)

    def _run(self, study: optuna.Study, plan: Plan, url: str, heartbeat: Heartbeat) -> str | None:
        if plan.race is not None:
            return self._run_race(study, plan, url, heartbeat)
        job_idx = 0
        while True:
            stop = self._failure_stop(study, plan)
            if stop:
                return stop
            room = self._room(study, plan)
            if room <= 0:
                return None
            batch = self._ask(study, plan, min(self.n_jobs, room), heartbeat)
            if not batch:
                continue
            batch, repeats = self._split_repeats(study, batch, plan, url)
            results_of, launched = self._launch(batch, plan, url, job_idx)
            job_idx += launched
            for trial in batch:
                self._tell(study, trial, results_of[trial.number], plan)
                heartbeat.discard(trial._trial_id)
            for trial, original in repeats:
                self._tell_repeat(study, trial, original, plan)
                heartbeat.discard(trial._trial_id)

    def _failure_stop(self, study: optuna.Study, plan: Plan) -> str | None:
        """Each pass first fails killed sweepers' stale trials (their params are retried),
        then stops the sweep, with this message, once failures exceed max_failure_rate."""
        optuna.storages.fail_stale_trials(study)
        allowed_failures = math.floor(self.max_failure_rate * plan.n_trials)
        tally = Tally.of(study)
        if tally.failed <= allowed_failures:
            return None
        return (f"{tally.failed} trials of study {self.study_name} "
                f"failed, more than max_failure_rate={self.max_failure_rate} x "
                f"n_trials={plan.n_trials} allows ({allowed_failures}); see the "
                "errors in trials.csv, fix their cause or raise "
                "hydra.sweeper.max_failure_rate")

    @staticmethod
    def _room(study: optuna.Study, plan: Plan) -> int:
        """Trials still to ask: n_trials less the finished and the running ones."""
        tally = Tally.of(study)
        return plan.n_trials - tally.finished - tally.running

    # -- racing over replicates (hydra.sweeper.race; statistics in qknorm/sweep/racestats.py) ---------

    def _run_race(self, study: optuna.Study, plan: Plan, url: str,
                  heartbeat: Heartbeat) -> str | None:
        """A trial per candidate, launched a look at a time: ask the grid's candidates, run
        the blocks the next look needs, tell each candidate once the race is done with it.
        Every pass replays the race from the study, so blocks and decisions of another sweeper
        (or of a killed one) count; this one waits while a look needs another's blocks."""
        mine: dict[int, optuna.Trial] = {}  # this sweeper's candidates still racing
        job_idx = 0
        while True:
            stop = self._failure_stop(study, plan)
            if stop:
                return stop
            race = _race.state(study.get_trials(deepcopy=False), plan.race, plan.space)
            self._settle(study, mine, race, plan, heartbeat)
            todo = self._race_todo(mine, race, plan)
            if todo:
                job_idx += self._race_launch(study, mine, todo, plan, url, job_idx, heartbeat)
                continue
            room = 0 if race.over else self._room(study, plan)
            if room > 0:  # candidates nobody runs yet, or a killed sweeper's retries
                for trial in self._ask(study, plan, min(self.n_jobs, room), heartbeat):
                    trial.set_user_attr(RACE_CANDIDATE_ATTR,
                                        plan.race.labels[_race.candidate(trial, plan.space)])
                    mine[trial.number] = trial
                continue
            if not mine:
                return None
            time.sleep(min(self.heartbeat_interval, 5))  # another sweeper runs this look's blocks

    def _race_todo(self, mine: dict[int, optuna.Trial], race: racing.Race,
                   plan: Plan) -> list[tuple[optuna.Trial, list[str]]]:
        """(trial, replicate overrides) of the blocks my candidates need for the next look,
        block-major like _launch, leaving out blocks already in the study."""
        if race.over:
            return []
        alive = set(race.alive)
        todo = [(trial, combo) for b, combo in enumerate(plan.combinations[:race.need])
                for trial in mine.values()
                if _race.candidate(trial, plan.space) in alive
                and plan.race.blocks[b] not in trial.user_attrs.get(RACE_RUNS_ATTR, {})]
        if not plan.race.rungs or not todo:
            return todo
        # In-fold stopping: one block per launch, so a candidate stopped there runs no other,
        # and its runs best first, so each later run has the leader's to be judged against.
        first = todo[0][1]
        order = _race.launch_order(plan.race, race)
        return sorted([(t, combo) for t, combo in todo if combo == first],
                      key=lambda job: order.index(_race.candidate(job[0], plan.space)))

    def _race_launch(self, study: optuna.Study, mine: dict[int, optuna.Trial],
                     todo: list[tuple[optuna.Trial, list[str]]], plan: Plan, url: str,
                     job_idx: int, heartbeat: Heartbeat) -> int:
        """Run the blocks and keep each result in its trial (user attr race_runs) as soon as
        the launch returns; a block that failed fails its candidate, which leaves the race."""
        results_of, launched = self._launch_jobs(todo, plan, url, job_idx)
        # Fresh from the storage: what the jobs wrote there (the rung stops) is not in `trial`.
        written = {t.number: t.user_attrs for t in study.get_trials(deepcopy=False)}
        for (trial, combo), job in zip(todo, results_of, strict=True):
            if trial.number not in mine:
                continue  # failed on an earlier block of this launch
            value = _objective(job, self.objectives[0])
            stop = written[trial.number].get(RACE_STOP_ATTR + block_label(combo))
            if value is None and job.status == PRUNED and stop is not None:
                runs = trial.user_attrs.get(RACE_RUNS_ATTR, {})
                runs[block_label(combo)] = _race.stopped_entry(stop, job.fields)
                trial.set_user_attr(RACE_RUNS_ATTR, runs)  # out: _settle tells it
                continue
            if value is None:
                race = _race.state(study.get_trials(deepcopy=False), plan.race, plan.space)
                jobs = self._race_jobs(trial, plan)
                trial.set_user_attr(RACE_OUTCOME_ATTR, _race.record(
                    plan.race, race, _race.candidate(trial, plan.space), len(jobs), failed=True))
                self._tell(study, trial, [*jobs, job], plan)
                del mine[trial.number]
                heartbeat.discard(trial._trial_id)
                continue
            runs = trial.user_attrs.get(RACE_RUNS_ATTR, {})
            runs[block_label(combo)] = _race.run_entry(value, job.fields)
            trial.set_user_attr(RACE_RUNS_ATTR, runs)
        return launched

    def _race_jobs(self, trial: optuna.Trial, plan: Plan) -> list[JobResult]:
        """The trial's completed blocks as job results, in block order (for _tell); not one
        stopped at a rung."""
        runs = racing.completed(trial.user_attrs.get(RACE_RUNS_ATTR, {}))
        dirs = trial.user_attrs.get(JOB_DIRS_ATTR, {})
        return [JobResult(COMPLETED, dirs.get(b, "?"), {self.objectives[0]: runs[b]["value"]})
                for b in plan.race.blocks if b in runs]

    def _settle(self, study: optuna.Study, mine: dict[int, optuna.Trial], race: racing.Race,
                plan: Plan, heartbeat: Heartbeat) -> None:
        """Tell my candidates the race is done with: dropped ones PRUNED, and once it is over,
        the rest COMPLETE with their mean over the blocks they ran. Each gets user attr
        `race`: the outcome and the look that decided it (the report's elimination table)."""
        dropped = race.dropped()
        for number, trial in list(mine.items()):
            c = _race.candidate(trial, plan.space)
            stopped = _race.stopped_block(trial)
            if c not in dropped and not race.over and stopped is None:
                continue
            jobs = self._race_jobs(trial, plan)
            if stopped is not None:  # stopped at a rung: out, whatever the looks say
                trial.set_user_attr(RACE_OUTCOME_ATTR, _race.stop_record(
                    plan.race, trial, stopped, len(jobs) + 1))
                self._tell_stopped(study, trial, jobs, plan, stopped)
            else:
                trial.set_user_attr(RACE_OUTCOME_ATTR,
                                    _race.record(plan.race, race, c, len(jobs)))
                if c in dropped:
                    self._tell_dropped(study, trial, jobs, plan, dropped[c])
                else:
                    self._tell(study, trial, jobs, plan)
            del mine[number]
            heartbeat.discard(trial._trial_id)

    def _tell_out(self, study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult],
                  dirs: list[str]) -> None:
        """A candidate the race is done with before its end: PRUNED, with its mean/std over
        the blocks it completed (`jobs`) and every run dir it has (`dirs`)."""
        trial.set_user_attr(JOBS_ATTR, dirs)
        trial.set_user_attr(N_ATTR, len(jobs))
        if jobs:
            _mean_values(jobs, self.objectives, trial)
        trial.set_user_attr(STATUS_ATTR, PRUNED)
        study.tell(trial, state=TrialState.PRUNED)

    def _tell_stopped(self, study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult],
                      plan: Plan, block: str) -> None:
        stop = trial.user_attrs[RACE_RUNS_ATTR][block]
        stopped_dir = trial.user_attrs.get(JOB_DIRS_ATTR, {}).get(block, "?")
        self._tell_out(study, trial, jobs, [*(j.run_dir for j in jobs), stopped_dir])
        log.info("trial %d [%s] stopped in %s at step %d: val loss %.4g, above %s's %.4g by "
                 "%.4g > margin=%g", trial.number, plan.race.labels[_race.candidate(
                     trial, plan.space)], block, stop["stopped_at"], stop["val_loss"],
                 stop["best"], stop["val_loss"] - stop["delta"], stop["delta"],
                 plan.race.margin)

    def _tell_dropped(self, study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult],
                      plan: Plan, look: racing.Look) -> None:
        self._tell_out(study, trial, jobs, [j.run_dir for j in jobs])
        c = _race.candidate(trial, plan.space)
        test = look.tests[c]
        log.info("trial %d [%s] dropped after %s: worse than the leader %s by %.4g on %d "
                 "paired replicates (one-sided paired t, Holm-adjusted p=%.3g <= alpha=%g)",
                 trial.number, plan.race.labels[c], plan.race.blocks[look.n - 1],
                 plan.race.labels[look.leader], plan.race.sign * test.delta, look.n,
                 test.p_adjusted, plan.race.alpha)

    # -- trials that repeat another's effective config (issue 12: pseudo-replication) ------

    def _split_repeats(self, study: optuna.Study, batch: list[optuna.Trial], plan: Plan,
                       url: str) -> tuple[list[optuna.Trial], list[tuple[optuna.Trial, int]]]:
        """(trials to launch, [(trial, number of the trial it repeats)]). A trial repeats one
        when its jobs' effective configs (qknorm.config.effective_config) equal those of a
        trial that completed or was pruned, or of one launched in this batch: e.g. a grid over
        norm and norm.p reaches norm=none once per p. A repeat is told its original's result."""
        known = {t.user_attrs[CONFIG_KEY_ATTR]: t.number
                 for t in study.get_trials(deepcopy=False)
                 if t.user_attrs.get(STATUS_ATTR) in (COMPLETED, PRUNED)
                 and CONFIG_KEY_ATTR in t.user_attrs}
        launch, repeats = [], []
        for trial in batch:
            key = self._config_key(trial, plan, url)
            trial.set_user_attr(CONFIG_KEY_ATTR, key)
            if key in known:
                repeats.append((trial, known[key]))
            else:
                known[key] = trial.number
                launch.append(trial)
        return launch, repeats

    def _config_key(self, trial: optuna.Trial, plan: Plan, url: str) -> str:
        """A digest of the effective configs of the trial's jobs (one per replicate)."""
        keys = []
        for combo in plan.combinations:
            try:  # _check_keys composed every value already; this cannot fail on user input
                cfg = self.hydra_context.config_loader.load_sweep_config(
                    self.config, self._job_overrides(trial, combo, plan, url))
            except Exception as e:  # then the trial runs as it would have: it repeats nothing
                log.warning("trial %d: config not composed (%s); launched", trial.number, e)
                return f"trial {trial.number}"
            tree = OmegaConf.to_container(cfg, resolve=False)
            tree.pop("hydra", None)
            if "norm" not in tree:  # not qknorm's task: its runs may differ; launch them all
                return f"trial {trial.number}"
            keys.append(effective_key(flatten(tree)))
        return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]

    def _tell_repeat(self, study: optuna.Study, trial: optuna.Trial, number: int,
                     plan: Plan) -> None:
        """Tell a repeat its original's outcome without running it (the runs are deterministic);
        it counts toward n_trials like the original, so a small space still ends."""
        original = study.get_trials(deepcopy=False)[number]
        for key in (STATUS_ATTR, JOBS_ATTR, N_ATTR, MEAN_ATTR, STD_ATTR, ERROR_ATTR):
            if key in original.user_attrs:
                trial.set_user_attr(key, original.user_attrs[key])
        trial.set_user_attr(DUPLICATE_ATTR, number)
        if original.state == TrialState.COMPLETE:
            study.tell(trial, original.values)
        else:
            study.tell(trial, state=original.state)
        label = " ".join(plan.space.overrides(trial.params)[len(plan.space.fixed):])
        log.info("trial %d [%s] not run: same effective config as trial %d, told its result "
                 "(%s)", trial.number, label, number, original.state.name)

    def _launch(self, batch: list[optuna.Trial], plan: Plan, url: str,
                job_idx: int) -> tuple[dict[int, list[JobResult]], int]:
        """Run every trial's replicate jobs (those an earlier attempt did not complete) in one
        launch. Returns each trial's job results, in replicate order, and the jobs launched."""
        # Replicate-major: all trials' first fold, then their second, ...; a sweep stopped
        # early then holds whole folds, every p paired.
        jobs = [(trial, combo) for combo in plan.combinations for trial in batch]
        results_of, launched = self._launch_jobs(jobs, plan, url, job_idx)
        by_trial: dict[int, list[JobResult]] = {t.number: [] for t in batch}
        for (trial, _), result in zip(jobs, results_of, strict=True):
            by_trial[trial.number].append(result)
        return by_trial, launched

    def _launch_jobs(self, jobs: list[tuple[optuna.Trial, list[str]]], plan: Plan, url: str,
                     job_idx: int) -> tuple[list[JobResult], int]:
        """Run the (trial, replicate overrides) jobs an earlier attempt did not complete, in
        one launch. Returns every job's result, in order, and the number launched."""
        results_of = [_reused_job(trial, combo) for trial, combo in jobs]
        todo = [i for i, r in enumerate(results_of) if r is None]
        trials = {trial.number: trial for trial, _ in jobs}
        # Kept: the dirs of replicates launched earlier (a race launches a look at a time).
        dirs = {n: dict(t.user_attrs.get(JOB_DIRS_ATTR, {})) for n, t in trials.items()}
        for (trial, combo), reused in zip(jobs, results_of, strict=True):
            planned = (self.sweep_dir / _subdir(trial, combo)).resolve()
            dirs[trial.number][block_label(combo)] = reused.run_dir if reused else str(planned)
        for number, trial in trials.items():  # before launching: a killed sweep's retry finds them
            trial.set_user_attr(JOB_DIRS_ATTR, dirs[number])
        overrides = [self._job_overrides(*jobs[i], plan, url) for i in todo]
        try:
            with _slurm.each_job_answers(self.config.hydra.launcher):
                returns = self.launcher.launch(overrides, initial_job_idx=job_idx) if todo else []
            launched = [_job_result(r) for r in returns]
        except Exception as e:  # a broken launcher fails this batch, not the study
            log.exception("launcher failed")
            launched = [JobResult(FAILED, "?", error=f"launcher: {type(e).__name__}: {e}")
                        for _ in todo]
        for i, result in zip(todo, launched, strict=True):
            if result.run_dir == "?":  # no config came back (a scancelled job): its planned dir
                result.run_dir = dirs[jobs[i][0].number][block_label(jobs[i][1])]
            results_of[i] = result
        return results_of, len(todo)

    def _ask(self, study: optuna.Study, plan: Plan, n: int,
             heartbeat: Heartbeat) -> list[optuna.Trial]:
        batch = []
        for _ in range(n):
            spec = optuna_specs.reseeded(plan.sampler_spec,
                                         len(study.get_trials(deepcopy=False)))
            if spec is not None:
                study.sampler = optuna_specs.build_sampler(spec, plan.space.grid)
            trial = study.ask(plan.space.distributions)
            heartbeat.add(trial._trial_id)
            trial.set_user_attr(PRUNER_ATTR, plan.pruner_spec)
            trial.set_user_attr(PARAMS_ATTR, plan.space.values(trial.params))
            batch.append(trial)
        extra = record.surplus(study, [t.number for t in batch], plan.n_trials)
        for trial in [t for t in batch if t.number in extra]:
            # Another sweeper took the last slots first: give this one up before it runs.
            trial.set_user_attr(STATUS_ATTR, record.SURPLUS)
            study.tell(trial, state=TrialState.FAIL)
            heartbeat.discard(trial._trial_id)
            log.info("trial %d not run: another sweeper filled the study's n_trials=%d",
                     trial.number, plan.n_trials)
        return [t for t in batch if t.number not in extra]

    def _job_overrides(self, trial: optuna.Trial, combo: list[str], plan: Plan,
                       url: str) -> list[str]:
        subdir = _subdir(trial, combo)
        return [
            *plan.base_overrides, *plan.space.overrides(trial.params), *combo,
            f"optuna.study_name={format_value(self.study_name)}",
            f"optuna.storage={format_value(url)}", f"optuna.trial={trial.number}",
            # Named by trial number: unique even when several sweepers share one sweep dir.
            f"hydra.sweep.subdir={format_value(subdir)}",
            *(_race_keys(plan.race, _race.candidate(trial, plan.space), block_label(combo))
              if plan.race is not None and plan.race.rungs else []),
        ]

    def _tell(self, study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult],
              plan: Plan) -> None:
        trial.set_user_attr(JOBS_ATTR, [j.run_dir for j in jobs])
        trial.set_user_attr(N_ATTR, len(jobs))
        label = " ".join(plan.space.overrides(trial.params)[len(plan.space.fixed):])
        bad = [j for j in jobs if j.status not in (COMPLETED, PRUNED)]
        values, error = None, ""
        if not bad and not any(j.status == PRUNED for j in jobs):
            values, error = _mean_values(jobs, self.objectives, trial)
        if bad or error:
            error = error or f"job {bad[0].status} ({bad[0].run_dir}): {bad[0].error}"
            trial.set_user_attr(STATUS_ATTR, FAILED)
            trial.set_user_attr(ERROR_ATTR, error)
            if plan.fail_values is not None:
                study.tell(trial, plan.fail_values)
                log.warning("trial %d [%s] FAILED, told fail_value %s: %s", trial.number, label,
                            plan.fail_values, error)
            else:
                study.tell(trial, state=TrialState.FAIL)
                log.warning("trial %d [%s] FAILED: %s", trial.number, label, error)
        elif values is None:
            trial.set_user_attr(STATUS_ATTR, PRUNED)
            study.tell(trial, state=TrialState.PRUNED)
            log.info("trial %d [%s] PRUNED", trial.number, label)
        else:
            trial.set_user_attr(STATUS_ATTR, COMPLETED)
            study.tell(trial, values)
            shown = ", ".join(f"{o}={v:.4g}" for o, v in zip(self.objectives, values, strict=True))
            log.info("trial %d [%s] COMPLETE: %s (mean of %d)", trial.number, label, shown,
                     len(jobs))


def _race_keys(race: _race.RaceSpec, candidate: Any, block: str) -> list[str]:
    """What a race's job needs to be judged at its rungs (qknorm/sweep/job.py); the baseline gets
    margin null: it records its values for the others and is never stopped."""
    margin = None if candidate == race.baseline else race.margin
    return [f"optuna.race.block={format_value(block)}",
            f"optuna.race.rungs=[{','.join(map(str, race.rungs))}]",
            f"optuna.race.margin={format_value(margin)}"]


def _subdir(trial: optuna.Trial, combo: list[str]) -> str:
    rep = "_".join(o.split("=", 1)[1] for o in combo)
    return f"trial{trial.number}" + (f"_{rep}" if rep else "")


def _reused_job(trial: optuna.Trial, combo: list[str]) -> JobResult | None:
    """The completed job of an earlier attempt at this trial, if any.

    A trial retried after its sweeper was killed (RetryHeartbeatStaleTrialCallback re-enqueues
    it with the killed trial's user attrs) inherits that attempt's job dirs: the replicates that
    completed there are read back instead of trained again, so a resumed sweep runs only what
    is missing.
    """
    earlier = trial.user_attrs.get(JOB_DIRS_ATTR, {}).get(block_label(combo))
    result = _final_result(earlier, None) if earlier else None
    return result if result is not None and result.status == COMPLETED else None


def _given_keys(overrides: list[str], kind: str) -> set[str]:
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


def _objective(job: JobResult, name: str) -> float | None:
    """A completed job's finite objective, or None (the job failed, or it has no such field)."""
    if job.status != COMPLETED:
        return None
    try:
        value = float(job.fields[name])
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _mean_values(jobs: list[JobResult], objectives: list[str],
                 trial: optuna.Trial) -> tuple[list[float] | None, str]:
    """Mean of each objective over the replicate jobs; mean/std/n go into user attrs."""
    means, stds = [], []
    for name in objectives:
        try:
            xs = [float(j.fields[name]) for j in jobs]
        except (KeyError, TypeError, ValueError):
            return None, (f"final.json of {jobs[0].run_dir} has no number {name!r}; "
                          "hydra.sweeper.objectives must name final.json fields")
        if not all(math.isfinite(x) for x in xs):
            return None, f"{name} is not finite in {[j.run_dir for j in jobs]}"
        means.append(statistics.fmean(xs))
        stds.append(statistics.stdev(xs) if len(xs) > 1 else 0.0)
    single = len(objectives) == 1
    trial.set_user_attr(MEAN_ATTR, means[0] if single else means)
    trial.set_user_attr(STD_ATTR, stds[0] if single else stds)  # sample std (n - 1)
    return means, ""


def _job_result(ret: JobReturn) -> JobResult:
    """A job's outcome from its final.json; a job that wrote none failed before training, and
    a task that writes none but returns a number (not qknorm.train) is scored on that."""
    run_dir = str(ret.hydra_cfg.hydra.runtime.output_dir) if ret.hydra_cfg else "?"
    result = _final_result(run_dir, ret)
    if result is not None:
        return result
    if ret.status == JobStatus.COMPLETED:
        value = ret._return_value
        if isinstance(value, (int, float)):
            return JobResult(COMPLETED, run_dir, {"best_val_loss": value, "value": value})
        return JobResult(FAILED, run_dir, error=f"no {rundir.FINAL_FILE} and no number returned")
    return JobResult(FAILED, run_dir, error=_exception_line(ret))


def _final_result(run_dir: str, ret: JobReturn | None) -> JobResult | None:
    """The job's outcome as its final.json says, or None when it wrote none."""
    try:
        final = rundir.read_final(run_dir)
    except (OSError, ValueError) as e:  # ValueError: a JSON decode error
        return JobResult(FAILED, run_dir, error=f"unreadable {Path(run_dir) / rundir.FINAL_FILE}: {e}")
    if final is None:
        return None
    error = final.get("error", "")
    if ret is not None and ret.status == JobStatus.FAILED and not error:
        error = _exception_line(ret)
    return JobResult(final.get("status", FAILED), run_dir, final, error)


def _exception_line(ret: JobReturn) -> str:
    e = ret._return_value
    return f"{type(e).__name__}: {e}" if isinstance(e, BaseException) else "job failed"
