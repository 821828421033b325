"""The racing schedules' base: what the race (RaceSchedule, hydra_racing_sweeper/race_schedule.py)
and the racing search (RaceSearchSchedule, hydra_racing_sweeper/search_schedule.py) do alike,
beside the plain schedule (hydra_racing_sweeper/schedule.py). The race's rules are pure
(hydra_racing_sweeper/race/: looks, intensify, stepped by its driver); these schedules adapt the driver to
a study. What both do alike is in their base, RacingSchedule (as SMAC3's AbstractIntensifier holds its
intensifiers' common steps): the study checked and its settings kept, each launched block's result kept in
its trial, a trial another sweeper failed as stale left to its retry. The records they keep in a
trial are hydra_racing_sweeper/records.py's.
"""

from __future__ import annotations

import logging
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from hydra_racing_sweeper import launcher, readback
from hydra_racing_sweeper.errors import UserError
from hydra_racing_sweeper.launcher import Job, JobResult, Launcher
from hydra_racing_sweeper.plan import Plan
from hydra_racing_sweeper.race import RaceSpec
from hydra_racing_sweeper.records import run_entry, stopped_entry
from hydra_racing_sweeper.rundir import COMPLETED, PRUNED
from hydra_racing_sweeper.study import (
    JOB_DIRS_ATTR,
    RACE_OUTCOME_ATTR,
    RACE_RUNS_ATTR,
    RACE_SETTINGS_ATTR,
    RACE_STOP_ATTR,
    Heartbeat,
    block_label,
    left_to_retry,
)

log = logging.getLogger(__name__)


def check_study(study: optuna.Study, race: RaceSpec, study_name: str) -> None:
    """A study holds one race: a rerun must race the same way. Raises before touching it."""
    have = study.user_attrs.get(RACE_SETTINGS_ATTR)
    want = race.settings()
    if have is None and study.get_trials(deepcopy=False):
        raise UserError(f"study {study_name!r} holds a sweep that was not a race; race under "
                        "another hydra.sweeper.study_name")
    for key in want if have is not None else ():
        value = have.get(key)  # a key the study lacks: raced before it existed, i.e. None
        if want.get(key) != value:
            raise UserError(f"study {study_name!r} was raced with {key}={value!r}, not "
                            f"{want.get(key)!r}; rerun with its settings or use another "
                            "hydra.sweeper.study_name")


def record_settings(study: optuna.Study, race: RaceSpec) -> None:
    if RACE_SETTINGS_ATTR not in study.user_attrs:
        study.set_user_attr(RACE_SETTINGS_ATTR, race.settings())


def with_block(trial: optuna.Trial, combo: list[str], job: JobResult, written: dict[str, Any],
               objective: str) -> dict[str, Any] | None:
    """The trial's race_runs with a launched block added: its value, or where its run stopped
    at a rung (the job's race_stop attr, in `written`, the trial's attrs fresh from the
    storage); None: the run failed (the caller fails the trial)."""
    value = launcher.objective(job, objective)
    stop = written.get(RACE_STOP_ATTR + block_label(combo))
    runs = trial.user_attrs.get(RACE_RUNS_ATTR, {})
    if value is None and job.status == PRUNED and stop is not None:
        runs[block_label(combo)] = stopped_entry(stop, job.fields)
    elif value is None:
        return None
    else:
        runs[block_label(combo)] = run_entry(value, job.fields)
    return runs


def keep_runs(trial: optuna.Trial, runs: dict[str, Any]) -> None:
    """Write race_runs as soon as a launch returns; a trial another sweeper failed as stale
    meanwhile is left to its retry, which runs the block again."""
    with launcher.unless_failed_elsewhere(trial):
        trial.set_user_attr(RACE_RUNS_ATTR, runs)

def completed_jobs(trial: FrozenTrial | optuna.Trial, blocks: tuple[str, ...],
                   objective: str) -> list[JobResult]:
    """The trial's completed blocks as job results, in block order; not one stopped at a
    rung."""
    runs = readback.completed(trial.user_attrs.get(RACE_RUNS_ATTR, {}))
    dirs = trial.user_attrs.get(JOB_DIRS_ATTR, {})
    return [JobResult(COMPLETED, dirs.get(b, "?"), {objective: runs[b]["value"]})
            for b in blocks if b in runs]


def log_limits(spec: RaceSpec) -> None:
    """The plan's lines every racing schedule logs after its own: the rungs, δ, the budget."""
    if spec.rungs:
        log.info("in-fold stopping: a run more than its margin above the best other run of "
                 "its replicate at a rung stops there, and its candidate leaves the race; "
                 "rungs: %s", spec.rung_words())
    if spec.equivalence is not None:
        log.info("equivalence: a candidate whose %g%% paired t-interval of its difference to "
                 "the leader lies inside ±%g leaves, level with it (TOST at alpha=%g)",
                 100 * (1 - 2 * spec.alpha), spec.equivalence, spec.alpha)
    if spec.budget_steps is not None:
        log.info("budget: no run launches that would take the runs past %d training steps",
                 spec.budget_steps)


class RacingSchedule:
    """What the two racing schedules do alike (SMAC3's AbstractIntensifier holds its
    intensifiers' common steps so): the study checked and its settings kept before the loop,
    each launched block's result kept in its trial, a block that failed failing its trial, and
    a trial another sweeper failed as stale left to its retry. A subclass says how it plans,
    settles, asks and what a failed block's trial records (_failed_outcome)."""

    def __init__(self, plan: Plan, launcher: Launcher, objectives: list[str], n_jobs: int,
                 heartbeat: Heartbeat):
        # launcher: the loop's (a schedule's common signature); a racing schedule's jobs need
        # none
        self.plan, self.spec, self.objectives = plan, plan.race, objectives
        self.n_jobs, self.heartbeat = n_jobs, heartbeat
        self.mine: dict[int, optuna.Trial] = {}  # this sweeper's trials still racing

    @staticmethod
    def check_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        check_study(study, plan.race, study_name)

    @staticmethod
    def prepare_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        """Before the loop: a rerun must race (or search) as the study was (check_study), which
        then keeps the settings."""
        check_study(study, plan.race, study_name)
        record_settings(study, plan.race)

    def record(self, study: optuna.Study, jobs: list[Job], results: list[JobResult]) -> None:
        """Keep each block's result in its trial (RACE_RUNS_ATTR) as soon as the launch returns;
        a block that failed fails its trial, which leaves the race."""
        # Fresh from the storage: what the jobs wrote there (the rung stops) is not in `trial`.
        written = {t.number: t.user_attrs for t in study.get_trials(deepcopy=False)}
        for (trial, combo), job in zip(jobs, results, strict=True):
            if trial.number not in self.mine:
                continue  # failed on an earlier block of this launch
            runs = with_block(trial, combo, job, written[trial.number], self.objectives[0])
            if runs is None:
                self._tell_failed(study, trial, job)
                continue
            keep_runs(trial, runs)  # a stopped block: out, settle tells it

    def _tell_failed(self, study: optuna.Study, trial: optuna.Trial, job: JobResult) -> None:
        jobs = self._completed(trial)
        self._keep_outcome(trial, self._failed_outcome(study, trial, jobs))
        launcher.tell(study, trial, [*jobs, job], self.plan, self.objectives,
                      self._logged_as(trial))
        self._forget(trial)

    def _failed_outcome(self, study: optuna.Study, trial: optuna.Trial,
                        jobs: list[JobResult]) -> dict[str, Any]:
        raise NotImplementedError

    def _logged_as(self, trial: optuna.Trial) -> str | None:
        """The trial as the log names it (None: its overrides)."""
        return None

    def _forget_stale(self, trials: list[FrozenTrial]) -> None:
        """Mine that another sweeper failed as stale: its retry carries the trial on."""
        for t in trials:
            if t.number in self.mine and t.state.is_finished():
                left_to_retry(t.number)
                self._forget(self.mine[t.number])

    def _keep_outcome(self, trial: optuna.Trial, outcome: dict[str, Any]) -> None:
        """The trial user attr RACE_OUTCOME_ATTR: how its race ended (the report's table)."""
        with launcher.unless_failed_elsewhere(trial):
            trial.set_user_attr(RACE_OUTCOME_ATTR, outcome)

    def _completed(self, trial: FrozenTrial | optuna.Trial) -> list[JobResult]:
        return completed_jobs(trial, self.spec.blocks, self.objectives[0])

    def _missing(self, trial: FrozenTrial | optuna.Trial, block: int) -> bool:
        """The block is not in the trial's race_runs yet (not run, nor running elsewhere)."""
        return self.spec.blocks[block] not in trial.user_attrs.get(RACE_RUNS_ATTR, {})

    def _forget(self, trial: optuna.Trial) -> None:
        del self.mine[trial.number]
        self.heartbeat.discard(trial._trial_id)
