"""The sweep (imported lazily by the Hydra plugin): one loop over a schedule.

Everything the user can get wrong is checked first (plan.py), before the study is created or
touched. Then each pass of the loop asks the schedule what to do: tell the trials it is done
with, launch the jobs it wants run (through any Hydra launcher), or ask Optuna for new trials.
The schedule is picked from SCHEDULES by the kind of study the plan makes: the plain sweep
(schedule.EveryReplicate), the race (racing.RaceSchedule) or the racing search
(racing.RaceSearchSchedule). It also answers for what differs between them before and
after the loop (its checks of the study, its plan's log lines, its last lines); the loop calls
down into it, and it never calls back up.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import optuna
from hydra.core.plugins import Plugins
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig
from optuna.trial import TrialState

from hydra_racing_sweeper import cost, outputs, question, specs
from hydra_racing_sweeper.errors import UserError, first_line
from hydra_racing_sweeper.launcher import Launcher
from hydra_racing_sweeper.plan import Plan, Planner, Settings
from hydra_racing_sweeper.progress import status_lines
from hydra_racing_sweeper.race_schedule import RaceSchedule
from hydra_racing_sweeper.readback import PLAIN, RACE, SEARCH
from hydra_racing_sweeper.rundir import FAILED
from hydra_racing_sweeper.schedule import EveryReplicate, Schedule
from hydra_racing_sweeper.search_schedule import RaceSearchSchedule
from hydra_racing_sweeper.space import config_key
from hydra_racing_sweeper.study import (
    ERROR_ATTR,
    PARAMS_ATTR,
    PRUNER_ATTR,
    SAMPLER_SEED_ATTR,
    STATUS_ATTR,
    SURPLUS,
    Heartbeat,
    Tally,
    holds_slot,
    record_sweeper,
    record_total,
    retried_numbers,
    surplus,
)

log = logging.getLogger(__name__)

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
# The schedule of each kind of study (plan.kind, readback.kind).
SCHEDULES: dict[str, type[Schedule]] = {
    PLAIN: EveryReplicate, RACE: RaceSchedule, SEARCH: RaceSearchSchedule}


class OptunaSweep:
    """The sweeper's state and loop; RacingSweeper (the Hydra plugin) delegates here."""

    def __init__(self, **options: Any) -> None:
        self.settings = Settings.of(**options)

    def setup(self, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)
        self.task = question.task_name(task_function)  # part of the question its study answers
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self._resolve_nulls(config)

    def _resolve_nulls(self, config: DictConfig) -> None:
        """study_name: null is the app's name (stable: a rerun on a stored study resumes it;
        Hydra's Optuna sweeper makes a new name each time). storage: null is in memory where the
        jobs run in this process, else a SQLite file in the sweep dir; the log says which."""
        s = self.settings
        if s.study_name is None:
            s.study_name = str(config.hydra.job.name)
        if s.storage is None:
            in_process = config.hydra.launcher.get("_target_") == BASIC_LAUNCHER
            s.storage = specs.default_storage(in_process, self.sweep_dir)
            if in_process:
                log.info("storage: null -> in memory (basic launcher: the jobs run in this "
                         "process); nothing is written, so the study cannot be resumed")
            else:
                self.sweep_dir.mkdir(parents=True, exist_ok=True)  # the database's folder
                log.info("storage: null -> %s (the launcher runs jobs in other processes)",
                         s.storage)

    def sweep(self, arguments: list[str]) -> None:
        s = self.settings
        plan = Planner(s, self.hydra_context, self.config, self.task).plan(list(arguments))
        schedule_class = SCHEDULES[plan.kind]
        if s.dry_run:  # the plan, its cost, and what the real run would refuse of its study
            self._check_existing_study(plan, schedule_class)
            _log_plan(s, plan, schedule_class)
            print("dry run (hydra.sweeper.dry_run=true): nothing was asked, run or written")
            return
        url = specs.absolute_url(s.storage, Path.cwd())
        storage = specs.open_storage(url, s.heartbeat_interval, s.grace_period)
        study = self._open_study(storage, plan, schedule_class)
        _log_plan(s, plan, schedule_class, study)
        launcher = Launcher(self.launcher, self.hydra_context, self.config, self.sweep_dir,
                            s.study_name, url, plan, s.objectives)
        with Heartbeat(storage, s.heartbeat_interval) as heartbeat:
            schedule = schedule_class(plan, launcher, s.objectives, s.n_jobs, heartbeat)
            stop_message = self._run(study, plan, schedule, launcher, heartbeat)
        self._report(study, plan, schedule_class)
        if stop_message:
            raise UserError(stop_message, exit_code=1)

    def interrupted_hint(self) -> str:
        """What a Ctrl-C leaves (the plugin prints it in one line, exit 130): the study keeps
        every trial told; the ones this sweeper ran stop getting heartbeats, and the rerun
        retries them once they are grace_period old (as after a kill)."""
        s = self.settings
        if specs.in_memory(s.storage):  # storage: null under the basic launcher
            return (f"stopped by Ctrl-C; study {s.study_name!r} was in memory (storage: null) and "
                    "is gone; give hydra.sweeper.storage a database to resume a sweep")
        return (f"stopped by Ctrl-C; study {s.study_name!r} in {s.storage} keeps its finished "
                "trials, and the ones that were running run again; rerun the same command to "
                "resume it")

    def _check_existing_study(self, plan: Plan, schedule_class: type[Schedule]) -> None:
        """A dry run refuses what the real run would (UserError): the study it would extend, if
        one exists, is read with the same checks, and nothing is created or written (a storage
        file that does not exist is not made)."""
        s = self.settings
        url = specs.absolute_url(s.storage, Path.cwd())
        path = specs.storage_file(url)
        if path is not None and not path.exists():
            return
        storage = specs.open_storage(url)
        if s.study_name not in {x.study_name for x in storage.get_all_studies()}:
            return
        study = optuna.load_study(study_name=s.study_name, storage=storage)
        check_directions(study, plan, s.study_name, s.storage)  # as _open_study, in its order
        question.check(study, plan, s.study_name, s.storage)
        schedule_class.check_study(plan, study, s.study_name)

    def _open_study(self, storage: optuna.storages.BaseStorage, plan: Plan,
                    schedule_class: type[Schedule]) -> optuna.Study:
        s = self.settings
        study = optuna.create_study(study_name=s.study_name, storage=storage,
                                    sampler=plan.sampler, pruner=plan.pruner,
                                    directions=plan.directions, load_if_exists=True)
        check_directions(study, plan, s.study_name, s.storage)
        # another config's study: refused before anything is asked (its answer is not this one's)
        question.check(study, plan, s.study_name, s.storage)
        schedule_class.prepare_study(plan, study, s.study_name)
        question.record(study, plan, s.study_name, s.storage)
        record_total(study, plan.n_trials)  # the status's total, read from the URL alone
        # when its heartbeats are stale, and how to resume it (the status, read from the URL)
        record_sweeper(study, s.heartbeat_interval, s.grace_period, sys.orig_argv,
                       str(Path.cwd()))
        optuna.storages.fail_stale_trials(study)  # a killed sweeper's trials run no more
        plan.sampler_spec = shared_seed(study, plan.sampler_spec, s.study_name)
        return study

    def _run(self, study: optuna.Study, plan: Plan, schedule: Schedule, launcher: Launcher,
             heartbeat: Heartbeat) -> str | None:
        """The loop. Returns None when the schedule is done, or why the sweep stopped."""
        paced = plan.job is not None or _reported_cost_line(plan, study) is not None
        waiting = False  # said once per wait, not at every poll
        while not (stop := self._failure_stop(study, plan)):
            if schedule.settle(study):
                return None
            if jobs := schedule.next_jobs(study):
                waiting = False
                schedule.record(study, jobs, launcher.launch(jobs))
                if not paced and (line := _reported_cost_line(plan, study)):
                    log.info("%s", line)  # another task's first pace: the plan's time
                    paced = True
                self._log_status(study, plan)
            elif n := schedule.wants(study):
                waiting = False
                schedule.admit(study, self._ask(study, plan, n, heartbeat))
            else:  # another sweeper runs the blocks this look needs
                if not waiting:
                    running = sum(t.state == TrialState.RUNNING
                                  for t in study.get_trials(deepcopy=False))
                    log.info("waiting: another sweeper of study %s runs what comes next "
                             "(%d trial(s) running); this one goes on when they end",
                             self.settings.study_name, running)
                    waiting = True
                time.sleep(min(self.settings.heartbeat_interval, 5))
        schedule.settle(study)  # stopped: still tell what it is done with (e.g. a batch's repeats)
        return stop

    def _log_status(self, study: optuna.Study, plan: Plan) -> None:
        """After every launch's tells: done/total, best so far, ETA, compute (sweep/progress.py;
        `python -m qknorm.status` prints the same from any terminal)."""
        for line in status_lines(study, plan.n_trials, slots=self.settings.n_jobs):
            log.info("%s", line)

    def _failure_stop(self, study: optuna.Study, plan: Plan) -> str | None:
        """Each pass first fails killed sweepers' stale trials (their params are retried),
        then stops the sweep, with this message, once failures exceed max_failure_rate."""
        s = self.settings
        optuna.storages.fail_stale_trials(study)
        allowed_failures = math.floor(s.max_failure_rate * plan.n_trials)
        tally = Tally.of(study)
        if tally.failed <= allowed_failures:
            return None
        first = next((t for t in study.get_trials(deepcopy=False)
                      if t.user_attrs.get(STATUS_ATTR) == FAILED), None)
        # the task's own exception line, as Hydra's Optuna sweeper re-raises it
        said = "" if first is None else (f"; first failure: trial {first.number}: "
                                          f"{first.user_attrs.get(ERROR_ATTR, '?')}")
        return (f"{tally.failed} trials of study {s.study_name} failed, more than "
                f"max_failure_rate={s.max_failure_rate} x n_trials={plan.n_trials} allows "
                f"({allowed_failures}); see the errors in trials.csv, fix their cause or raise "
                f"hydra.sweeper.max_failure_rate{said}")

    def _ask(self, study: optuna.Study, plan: Plan, n: int,
             heartbeat: Heartbeat) -> list[optuna.Trial]:
        """n new trials, less those another sweeper's trials left no room for (surplus)."""
        batch = []
        for _ in range(n):
            spec = specs.reseeded(plan.sampler_spec,
                                         len(study.get_trials(deepcopy=False)))
            if spec is not None:
                study.sampler = specs.build_sampler(spec, plan.space.grid)
            trial = study.ask(plan.space.distributions)
            if getattr(plan, "custom", None) is not None:  # a plan made in memory may lack it
                _suggest_more(plan, self.config, trial)
            heartbeat.add(trial._trial_id)
            trial.set_user_attr(PRUNER_ATTR, plan.pruner_spec)
            trial.set_user_attr(SAMPLER_SEED_ATTR, plan.sampler_spec.get("seed"))
            trial.set_user_attr(PARAMS_ATTR, plan.space.values(trial.params))
            batch.append(trial)
        extra = surplus(study, [t.number for t in batch], plan.n_trials)
        for trial in [t for t in batch if t.number in extra]:
            # Another sweeper took the last slots first: give this one up before it runs.
            trial.set_user_attr(STATUS_ATTR, SURPLUS)
            study.tell(trial, state=TrialState.FAIL)
            heartbeat.discard(trial._trial_id)
            log.info("trial %d not run: another sweeper filled the study's n_trials=%d",
                     trial.number, plan.n_trials)
        return [t for t in batch if t.number not in extra]

    def _report(self, study: optuna.Study, plan: Plan, schedule_class: type[Schedule]) -> None:
        s = self.settings
        # an in-memory study has no storage to name: null, which the status and report skip
        label = None if specs.in_memory(s.storage) else s.storage
        paths = outputs.write(study, self.sweep_dir, s.objectives, plan.n_trials, label)
        print(finished_line(study, s.study_name, plan.n_trials))
        print(f"optimization results: {paths[0]}")
        print(f"trials: {paths[1]}")
        for line in schedule_class.final_lines(study):
            print(line)


def _suggest_more(plan: Plan, config: DictConfig, trial: optuna.Trial) -> None:
    """custom_search_space(cfg, trial), after the trial drew the params: what it suggests
    becomes an override named as suggested. A name that a fixed value sets too is refused (the
    job would get both)."""
    plan.custom(config, trial)
    fixed = {config_key(f.split("=", 1)[0]).lstrip("+")
             for f in (*plan.space.fixed, *plan.base_overrides)  # params', the command line's
             if "=" in f and not f.startswith("~")}
    for name in trial.params:
        if name not in plan.space.distributions and name.lstrip("+") in fixed:
            raise UserError(f"hydra.sweeper.custom_search_space suggests {name}, which "
                            f"hydra.sweeper.params or the command line fixes too; drop one")


def finished_line(study: optuna.Study, study_name: str, n_trials: int) -> str:
    """The sweep's count line. Trials that hold no slot are told FAIL too (a killed sweeper's,
    whose params ran again; asks beyond n_trials): optuna-dashboard shows them as FAIL, so the
    line says how many there are and that they are not failures."""
    trials = study.get_trials(deepcopy=False)
    tally = Tally.of_trials(trials)
    retried = retried_numbers(trials)
    uncounted = sum(t.state == TrialState.FAIL and not holds_slot(t, retried) for t in trials)
    return (f"study {study_name}: {tally.finished}/{n_trials} trials finished ({tally.failed} "
            "failed)" + (f"; {uncounted} more in state FAIL (optuna-dashboard) are no failures: "
                         "a killed sweeper's trials, whose params ran again, or asks beyond "
                         "n_trials (docs/sweeper.md)" if uncounted else ""))


def shared_seed(study: optuna.Study, spec: dict[str, Any], study_name: str) -> dict[str, Any]:
    """The sampler spec this sweeper asks with, given the seeds the study's trials were asked
    with (user attr SAMPLER_SEED_ATTR).

    A grid study's sweepers must share the seed: Optuna orders the grid by it, and the study's
    record of which points are taken assumes one order; another seed is refused (UserError). A
    stream sampler's (tpe, gp, ...) concurrent sweepers need distinct seeds: two with one seed
    that ask at the same study size draw the same point (specs.reseeded). A seed that a running
    trial (another live sweeper's: stale ones were failed before this) was asked with is moved
    to the next free one, and logged. A rerun after the others finished keeps its seed, so the
    same command still proposes the same points."""
    seed = spec.get("seed")
    trials = study.get_trials(deepcopy=False)
    if spec.get("name") == "grid":
        seeds = sorted({t.user_attrs[SAMPLER_SEED_ATTR] for t in trials
                        if SAMPLER_SEED_ATTR in t.user_attrs and "grid_id" in t.system_attrs}
                       - {seed}, key=repr)
        if seeds:
            raise UserError(
                f"hydra.sweeper.sampler.seed={seed}: the grid trials of study {study_name!r} "
                f"were asked with seed {seeds[0]}; sweepers on one grid study share its seed "
                f"(Optuna orders the grid by it): rerun with hydra.sweeper.sampler.seed={seeds[0]}")
        return spec
    if seed is None or spec.get("name") not in specs.STREAM_SAMPLERS:
        return spec
    taken = {t.user_attrs.get(SAMPLER_SEED_ATTR) for t in trials
             if t.state == TrialState.RUNNING}
    if seed not in taken:
        return spec
    free = next(s for s in range(seed + 1, seed + len(taken) + 2) if s not in taken)
    log.warning("hydra.sweeper.sampler.seed=%s is in use by another sweeper running trials of "
                "study %s (two sweepers with one seed propose the same points): this one uses "
                "seed %d", seed, study_name, free)
    return {**spec, "seed": free}


def check_directions(study: optuna.Study, plan: Plan, study_name: str, storage: str) -> None:
    have = [d.name.lower() for d in study.directions]
    if have != plan.directions:
        raise UserError(f"study {study_name!r} in {storage} was created with "
                        f"direction {have}, not {plan.directions}; use another "
                        "hydra.sweeper.study_name")


def _log_plan(s: Settings, plan: Plan, schedule_class: type[Schedule],
              study: optuna.Study | None = None) -> None:
    log.info("study %s in %s: n_trials=%d, %d job(s) per trial, %s, %s", s.study_name,
             s.storage, plan.n_trials, len(plan.combinations),
             specs.optuna_name(type(plan.sampler)), type(plan.pruner).__name__)
    schedule_class.log_plan(plan)
    log.info("%s", (study is not None and _reported_cost_line(plan, study)) or _cost_line(plan))


def _budget(plan: Plan) -> int | None:
    return plan.race.budget_steps if plan.race is not None else None


def _cost_line(plan: Plan) -> str:
    """The plan's runs and steps at most, and their time at a step measured here (cost.py)."""
    steps, evals = plan.length if plan.job is not None else (None, None)
    work = cost.work(plan.n_trials, len(plan.combinations), steps, evals, _budget(plan))
    if plan.job is None:
        return cost.line(work, None)
    try:
        pace = plan.hook.measure(plan.job)
    except Exception as e:  # an estimate must not stop a sweep the planner passed
        return cost.line(work, None) + f"; no time estimate ({first_line(e)})"
    return cost.line(work, pace)


def _reported_cost_line(plan: Plan, study: optuna.Study) -> str | None:
    """Another task's plan line with its steps and time, once a job of the study has
    reported them (cost.reported_pace); None before, and for qknorm.train's jobs."""
    if plan.job is not None:
        return None
    found = cost.reported_pace(study.get_trials(deepcopy=False))
    if found is None:
        return None
    steps, pace = found
    return cost.line(cost.work(plan.n_trials, len(plan.combinations), steps, None,
                               _budget(plan)), pace)
