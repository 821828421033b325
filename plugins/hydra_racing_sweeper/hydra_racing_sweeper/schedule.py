"""How a sweep spends its trials: the Schedule protocol, and the plain schedule.

The loop (hydra_racing_sweeper/sweep.py) asks a schedule, each pass, what to do; a schedule answers from
the study and its own trials, tells the trials it is done with, and never calls back into the
loop (Optuna's pruners and study/_optimize.py are the pattern). Three schedules exist:
EveryReplicate here (each trial runs every replicate, then is told), RaceSchedule
(hydra_racing_sweeper/race_schedule.py: a trial per candidate, run a look at a time) and
RaceSearchSchedule (hydra_racing_sweeper/search_schedule.py: a trial per proposal, raced against the
incumbent). Each also answers, for its kind of study, what the sweep does before and after the
loop (prepare_study, log_plan, final_lines): the loop never asks which one it runs.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Protocol

import optuna
from omegaconf import OmegaConf
from optuna.trial import TrialState

from hydra_racing_sweeper import launcher, slurm
from hydra_racing_sweeper.errors import UserError
from hydra_racing_sweeper.launcher import Job, JobResult, Launcher
from hydra_racing_sweeper.plan import Plan
from hydra_racing_sweeper.readback import search_lines
from hydra_racing_sweeper.rundir import COMPLETED, PRUNED, flatten
from hydra_racing_sweeper.study import (
    CONFIG_KEY_ATTR,
    COUNTED,
    DUPLICATE_ATTR,
    JOB_DIRS_ATTR,
    OUTCOME_ATTRS,
    STATUS_ATTR,
    Heartbeat,
    Tally,
    block_label,
    replicates_option,
)

log = logging.getLogger(__name__)


class Schedule(Protocol):
    def __init__(self, plan: Plan, launcher: Launcher, objectives: list[str], n_jobs: int,
                 heartbeat: Heartbeat) -> None: ...

    @staticmethod
    def check_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        """Refuse a study this sweep cannot extend (UserError), reading only: a dry run asks it."""

    @staticmethod
    def prepare_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        """Before the loop: check_study, then ready the study."""

    @staticmethod
    def log_plan(plan: Plan) -> None:
        """Log what the sweep will do, after the plan's first line (none: nothing to add)."""

    @staticmethod
    def final_lines(study: optuna.Study) -> list[str]:
        """The lines the sweep prints at its end, after the study's counts and files."""

    def settle(self, study: optuna.Study) -> bool:
        """Tell the trials the schedule is done with; True when the sweep is done."""

    def next_jobs(self, study: optuna.Study) -> list[Job]:
        """(trial, replicate) jobs to launch now; [] for none."""

    def record(self, study: optuna.Study, jobs: list[Job], results: list[JobResult]) -> None:
        """Keep what the launched jobs gave (telling trials that are done)."""

    def wants(self, study: optuna.Study) -> int:
        """How many trials to ask now (0: none)."""

    def admit(self, study: optuna.Study, trials: list[optuna.Trial]) -> None:
        """Take the trials asked for it."""


def room(study: optuna.Study, plan: Plan, trials: list | None = None) -> int:
    """Trials still to ask: n_trials less the finished and the running ones (`trials`: the
    study's, if already read)."""
    tally = Tally.of(study) if trials is None else Tally.of_trials(trials)
    return plan.n_trials - tally.finished - tally.running


class EveryReplicate:
    """Ask up to n_jobs trials, launch every replicate of each in one launch, tell each trial the
    mean over its replicates. A trial whose jobs' effective configs repeat an earlier trial's is
    not run: it is told that trial's result (docs/sweeper.md, "Repeated runs are not launched")."""

    def __init__(self, plan: Plan, launcher: Launcher, objectives: list[str], n_jobs: int,
                 heartbeat: Heartbeat):
        self.plan, self.launcher, self.objectives = plan, launcher, objectives
        self.n_jobs, self.heartbeat = n_jobs, heartbeat
        self.pending: list[optuna.Trial] = []  # admitted, to launch
        self.repeats: list[tuple[optuna.Trial, int]] = []  # (trial, the trial it repeats)

    @staticmethod
    def check_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        check_replicates(study, plan, study_name)

    @staticmethod
    def prepare_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        check_replicates(study, plan, study_name)
        # a scancelled job's trial, failed by the sweep that saw it end: run it again
        slurm.retry_interrupted(study)

    @staticmethod
    def log_plan(plan: Plan) -> None:
        """Nothing beyond the plan's first line."""

    @staticmethod
    def final_lines(study: optuna.Study) -> list[str]:
        """None; but a study a racing search made (check_replicates lets a plain sweep extend
        one whose trials all ran its replicates) still ends with the search's answer."""
        return search_lines(study)

    def settle(self, study: optuna.Study) -> bool:
        finished = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
        waiting = []
        for trial, number in self.repeats:  # once the original is told (it may be in this batch)
            if number not in finished:
                waiting.append((trial, number))
                continue
            self._tell_repeat(study, trial, number)
            self.heartbeat.discard(trial._trial_id)
        self.repeats = waiting
        return not self.pending and room(study, self.plan) <= 0

    def next_jobs(self, study: optuna.Study) -> list[Job]:
        # Replicate-major: all trials' first fold, then their second, ...; a sweep stopped
        # early then holds whole folds, every p paired.
        return [(trial, combo) for combo in self.plan.combinations for trial in self.pending]

    def record(self, study: optuna.Study, jobs: list[Job], results: list[JobResult]) -> None:
        by_trial: dict[int, list[JobResult]] = {t.number: [] for t in self.pending}
        for (trial, _), result in zip(jobs, results, strict=True):
            by_trial[trial.number].append(result)
        for trial in self.pending:
            launcher.tell(study, trial, by_trial[trial.number], self.plan, self.objectives)
            self.heartbeat.discard(trial._trial_id)
        self.pending = []

    def wants(self, study: optuna.Study) -> int:
        return 0 if self.pending else max(0, min(self.n_jobs, room(study, self.plan)))

    def admit(self, study: optuna.Study, trials: list[optuna.Trial]) -> None:
        self.pending, self.repeats = self._split_repeats(study, trials)

    def _split_repeats(self, study: optuna.Study, batch: list[optuna.Trial]
                       ) -> tuple[list[optuna.Trial], list[tuple[optuna.Trial, int]]]:
        """(trials to launch, [(trial, number of the trial it repeats)]). A trial repeats one
        when its jobs' effective configs (TaskHook.effective) equal those of a
        trial that completed or was pruned, or of one launched in this batch: e.g. a grid over
        norm and norm.p reaches norm=none once per p. A repeat is told its original's result."""
        known = {t.user_attrs[CONFIG_KEY_ATTR]: t.number
                 for t in study.get_trials(deepcopy=False)
                 if t.user_attrs.get(STATUS_ATTR) in (COMPLETED, PRUNED)
                 and CONFIG_KEY_ATTR in t.user_attrs}
        launch, repeats = [], []
        for trial in batch:
            key = self._config_key(trial)
            trial.set_user_attr(CONFIG_KEY_ATTR, key)
            if key in known:
                repeats.append((trial, known[key]))
            else:
                known[key] = trial.number
                launch.append(trial)
        return launch, repeats

    def _config_key(self, trial: optuna.Trial) -> str:
        """A digest of the effective configs of the trial's jobs (one per replicate)."""
        keys = []
        for combo in self.plan.combinations:
            try:  # the plan composed every value already; this cannot fail on user input
                cfg = self.launcher.compose(self.launcher.overrides(trial, combo))
            except Exception as e:  # then the trial runs as it would have: it repeats nothing
                log.warning("trial %d: config not composed (%s); launched", trial.number, e)
                return f"trial {trial.number}"
            tree = OmegaConf.to_container(cfg, resolve=False)
            tree.pop("hydra", None)
            effective = self.plan.hook.effective(flatten(tree))
            if effective is None:  # the app did not say which runs are the same: launch all
                return f"trial {trial.number}"
            keys.append(repr(sorted(effective.items())))  # order-free; values may be lists
        return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]

    def _tell_repeat(self, study: optuna.Study, trial: optuna.Trial, number: int) -> None:
        """Tell a repeat its original's outcome without running it (the runs are deterministic);
        it counts toward n_trials like the original, so a small space still ends."""
        original = study.get_trials(deepcopy=False)[number]
        # A repeat waits (running) on its original's jobs: it may be failed as stale meanwhile.
        with launcher.unless_failed_elsewhere(trial):
            for key in OUTCOME_ATTRS:
                if key in original.user_attrs:
                    trial.set_user_attr(key, original.user_attrs[key])
            trial.set_user_attr(DUPLICATE_ATTR, number)
            if original.state == TrialState.COMPLETE:
                study.tell(trial, original.values)
            else:
                study.tell(trial, state=original.state)
            log.info("trial %d [%s] not run: same effective config as trial %d, told its "
                     "result (%s)", trial.number, self.plan.space.label(trial.params), number,
                     original.state.name)


def check_replicates(study: optuna.Study, plan: Plan, study_name: str) -> None:
    """A trial's value is the mean over its replicates: a study holds one replicate set. A rerun
    with another set (data.fold=0,1,2 after 0,1) would find its trials done and end without a
    word, or mix means over different folds; refused, naming what the study holds."""
    want = [block_label(c) for c in plan.combinations]
    held: dict[tuple[str, ...], int] = {}
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(STATUS_ATTR) in COUNTED and JOB_DIRS_ATTR in t.user_attrs:
            labels = tuple(t.user_attrs[JOB_DIRS_ATTR])
            held[labels] = held.get(labels, 0) + 1
    other = [labels for labels in held if sorted(labels) != sorted(want)]
    if not other:
        return
    have, option = other[0], replicates_option
    raise UserError(
        f"study {study_name!r} holds {held[have]} trial(s) run on the replicates "
        f"{option(have)}, not {option(want)}; a trial's value is the mean over its "
        f"replicates, so one study keeps one set: rerun with "
        f"'hydra.sweeper.replicates={option(have)}' to extend it with more trials, or run "
        "the new set in its own study with hydra.sweeper.study_name=NEW_NAME")
