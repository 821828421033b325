"""The study's record: every attribute the sweeper, its jobs and the report read or write in an
Optuna study, the replicate label they are keyed by, how trials are counted so that reruns and
concurrent sweepers agree, the one way a trial is retried, and heartbeats.

Every trial this sweeper finishes carries a user attr `status`: completed | pruned | failed
(counted toward n_trials), or surplus (asked by a sweeper that lost a race for the last slots;
never launched, not counted). A RUNNING trial whose sweeper died stops getting heartbeats (or
never got one: is_stale); the next sweeper marks it FAIL (Optuna's fail_stale_trials) and
`retry` re-enqueues its params, so it does not count and its params run again. A SLURM job
that was cancelled is retried the same way (slurm.retry_interrupted).
"""

from __future__ import annotations

import logging
import shlex
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from hydra_racing_sweeper.rundir import COMPLETED, FAILED, PRUNED

log = logging.getLogger(__name__)


# -- the attributes (user attrs unless marked system) ---------------------------------------
# Trial, set by the sweeper when it tells the trial:
STATUS_ATTR = "status"  # completed | pruned | failed | surplus
JOBS_ATTR = "jobs"  # the run dirs of the trial's jobs, in replicate order
N_ATTR = "n"  # replicates the trial's value is the mean of
MEAN_ATTR, STD_ATTR = "mean", "std"  # over the replicates (sample std, n - 1)
ERROR_ATTR = "error"  # why a failed trial failed
# Its outcome as the sweeper told it: what a repeat of it is told too
OUTCOME_ATTRS = (STATUS_ATTR, JOBS_ATTR, N_ATTR, MEAN_ATTR, STD_ATTR, ERROR_ATTR)
# Trial, set when the sweeper asks it:
PARAMS_ATTR = "params"  # config key -> value the jobs got (norm.p: inf)
PRUNER_ATTR = "pruner"  # the pruner spec its jobs rebuild
SAMPLER_SEED_ATTR = "sampler_seed"  # hydra.sweeper.sampler.seed its sweeper ran with (or None)
JOB_DIRS_ATTR = "job_dirs"  # replicate label -> the job's run dir (kept across a retry)
CONFIG_KEY_ATTR = "config_key"  # digest of the trial's jobs' effective configs
DUPLICATE_ATTR = "duplicate_of"  # the trial a repeat took its result from (it ran no job)
# Trial, set by a job:
PRUNED_STEP_ATTR = "pruned_step"  # the first replicate job pruned: its siblings stop too
# Trial system attrs:
RETRIED_ATTR = "failed_trial"  # on a retry: the number of the trial it retries (Optuna's name)
HEARTBEAT_ATTR = "heartbeat"  # last heartbeat (Unix time), in a journal storage
# A race or a racing search (hydra_racing_sweeper/race/). The study and its trials both say "race",
# kept for studies raced before these names existed; the constants tell them apart.
# Study, set by every sweeper when it opens the study:
N_TRIALS_ATTR = "n_trials"  # the total its latest sweeper was given (the status's ETA from a URL)
# the latest sweeper's heartbeat_interval, grace_period, command line and directory: the status
# tells a stopped sweep from a running one and says how to resume it (record_sweeper)
SWEEPER_ATTR = "sweeper"
QUESTION_ATTR = "config"  # the config its runs share, less searched and replicate keys (question.py)
TASK_ATTR = "task"  # the task function its jobs run, module.function (question.py)
# study: the race's settings, which a rerun must match; a racing search's name its sampler
# (`search`); none for a plain sweep. The study's kind: readback.kind reads it.
RACE_SETTINGS_ATTR = "race"
RACE_OUTCOME_ATTR = "race"  # trial: how its race ended and the look that decided it
RACE_CANDIDATE_ATTR = "race_candidate"  # trial: the candidate as overrides, norm.p=2.0
RACE_RUNS_ATTR = "race_runs"  # trial: block label -> {value, steps, core_s[, stopped_at]}
# One attr per block, so two jobs of one trial on different folds never overwrite each other:
RACE_RUNG_ATTR = "race_rungs:"  # + block label -> {str(step): val_loss}, set by the job
RACE_STOP_ATTR = "race_stop:"  # + block label -> {step, value, best, best_value, delta}

COUNTED = (COMPLETED, PRUNED, FAILED)  # a trial's status: its jobs' statuses, diverged as failed
SURPLUS = "surplus"
# What a retry leaves behind of the trial it retries: how that attempt ended.
_NOT_INHERITED = (STATUS_ATTR, ERROR_ATTR)


def block_label(combo: list[str]) -> str:
    """A replicate's identity, e.g. "data.fold=0 seed=1": its overrides, space-joined. The key of
    JOB_DIRS_ATTR, RACE_RUNS_ATTR, RACE_RUNG_ATTR/RACE_STOP_ATTR and a job's RACING_BLOCK
    (hydra_racing_sweeper/identity.py)."""
    return " ".join(combo)


def replicates_option(labels: Iterable[str]) -> str:
    """block_label read back: labels ("data.fold=0 seed=1", ...) as the replicates option they
    come from, {data.fold:[0],seed:[1]}, for a message that tells a user what a study holds."""
    values: dict[str, list[str]] = {}
    for label in labels:
        for item in label.split():
            key, _, value = item.partition("=")
            if value not in values.setdefault(key, []):
                values[key].append(value)
    return "{" + ",".join(f"{k}:[{','.join(v)}]" for k, v in values.items()) + "}"


def retry(study: optuna.Study, trial: FrozenTrial) -> None:
    """Enqueue the trial's params once more, as a retry of it (system attr RETRIED_ATTR): the
    retry runs first, the failed trial no longer counts, and the retry inherits its user attrs
    (job dirs: replicates that completed are read back, not trained again).

    Optuna's RetryHeartbeatStaleTrialCallback does the same for stale trials, but keeps the
    first original's number in a retry of a retry; here it is always the trial retried, so
    retried_numbers finds every attempt of a chain.
    """
    study.add_trial(optuna.trial.create_trial(
        state=TrialState.WAITING, params=trial.params, distributions=trial.distributions,
        user_attrs={k: v for k, v in trial.user_attrs.items() if k not in _NOT_INHERITED},
        system_attrs={**trial.system_attrs, RETRIED_ATTR: trial.number}))


def left_to_retry(number: int) -> None:
    """Say that trial `number`, this sweeper's, was failed as stale by another sweeper (this
    sweeper's heartbeat came late, e.g. under load): this sweeper tells it nothing more, and
    the retry that the other sweeper enqueued (retry above) runs its jobs again."""
    log.warning("trial %d was failed by another sweeper (its heartbeat was late); its retry "
                "runs it again", number)


def retried_numbers(trials: list[FrozenTrial]) -> set[int]:
    """Numbers of failed trials whose params were re-enqueued (they do not count)."""
    return {t.system_attrs[RETRIED_ATTR] for t in trials if RETRIED_ATTR in t.system_attrs}


def trial_run_dirs(trials: list[FrozenTrial]) -> list[str]:
    """The run dirs a study's trials name (JOBS_ATTR, JOB_DIRS_ATTR), as the status counts
    them: not a retried trial's (its retry names the runs it kept), not a surplus one's."""
    retried = retried_numbers(trials)
    return [d for t in trials
            if t.number not in retried and t.user_attrs.get(STATUS_ATTR) != SURPLUS
            for d in [*(t.user_attrs.get(JOBS_ATTR) or ()),
                      *(t.user_attrs.get(JOB_DIRS_ATTR) or {}).values()]]


def holds_slot(trial: FrozenTrial, retried: set[int]) -> bool:
    """A trial that counts toward n_trials: finished by a sweeper, or running right now."""
    if trial.number in retried:
        return False
    if trial.state == TrialState.RUNNING:
        return True
    return trial.state.is_finished() and trial.user_attrs.get(STATUS_ATTR) in COUNTED


@dataclass(frozen=True)
class Tally:
    finished: int
    running: int
    failed: int

    @classmethod
    def of(cls, study: optuna.Study) -> Tally:
        return cls.of_trials(study.get_trials(deepcopy=False))

    @classmethod
    def of_trials(cls, trials: list[FrozenTrial]) -> Tally:
        """The tally of trials already read from the study."""
        retried = retried_numbers(trials)
        slots = [t for t in trials if holds_slot(t, retried)]
        return cls(
            finished=sum(t.state != TrialState.RUNNING for t in slots),
            running=sum(t.state == TrialState.RUNNING for t in slots),
            failed=sum(t.user_attrs.get(STATUS_ATTR) == FAILED for t in slots),
        )


def surplus(study: optuna.Study, mine: list[int], n_trials: int) -> set[int]:
    """Which of my just-asked trial numbers fall beyond n_trials.

    Two sweepers can both see room for one more trial and both ask. After asking, each ranks
    all slot-holding trials by number: the first n_trials keep their slots, later ones are
    surplus. Both rank the same list, so exactly one of them yields.
    """
    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    ranked = sorted((t for t in trials if holds_slot(t, retried)), key=lambda t: t.number)
    beyond = {t.number for t in ranked[n_trials:]}
    # Two sweepers can draw the same grid point at once: the later trial gives it up.
    first_at: dict[int, int] = {}
    for t in ranked:
        point = t.system_attrs.get("grid_id")
        if point is not None and first_at.setdefault(point, t.number) != t.number:
            beyond.add(t.number)
    return {n for n in mine if n in beyond}


def is_stale(trial: FrozenTrial, last_beat: float | None, grace: float, now: float) -> bool:
    """Whether RUNNING `trial` was left by a killed sweeper: its last heartbeat (Unix time) is
    over `grace` seconds old, or it never beat (None) and started over `grace` seconds ago.

    A sweeper beats right after it asks (Heartbeat.add), so a trial that never beat was asked by
    a sweeper killed in between. Optuna's test (RDBStorage._get_stale_trial_ids) skips such a
    trial: it would stay RUNNING for ever, holding a slot of n_trials, and the status would
    call its sweep running. Its start is the asking machine's local time, read in this one's
    (as a journal's beats): keep clocks in sync."""
    since = trial.datetime_start.timestamp() if last_beat is None else last_beat
    return now - since > grace


class Heartbeat:
    """Records a heartbeat for this sweeper's running trials every `interval` seconds, so
    another sweeper (or a rerun) can tell them from trials of a killed one (is_stale)."""

    def __init__(self, storage: optuna.storages.RDBStorage, interval: int):
        self._storage, self._interval = storage, interval
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="racing-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def add(self, trial_id: int) -> None:
        if not hasattr(self._storage, "record_heartbeat"):
            return  # an in-memory study (storage: null): no other process can see it stall
        self._storage.record_heartbeat(trial_id)  # at once: a trial never runs without one
        with self._lock:
            self._ids.add(trial_id)

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self._ids.discard(trial_id)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                ids = list(self._ids)
            for trial_id in ids:
                try:
                    self._storage.record_heartbeat(trial_id)
                except Exception as e:  # a busy database must not end the sweep; retry next beat
                    log.warning("heartbeat for trial id %d failed: %s", trial_id, e)


def record_total(study: optuna.Study, n_trials: int) -> None:
    """Keep the sweep's total in the study (N_TRIALS_ATTR), so that a reader with only the
    storage URL knows it: a rerun that tops the study up records its larger total."""
    if study.user_attrs.get(N_TRIALS_ATTR) != n_trials:
        study.set_user_attr(N_TRIALS_ATTR, n_trials)


def record_sweeper(study: optuna.Study, heartbeat_interval: int, grace_period: int | None,
                   argv: list[str], cwd: str) -> None:
    """Keep how this sweeper beats and how it was started (SWEEPER_ATTR), so that a reader with
    only the storage knows when its trials' heartbeats are stale (grace_period, as Optuna's
    default: 2 x heartbeat_interval) and what command resumes it. `argv`: the process's
    (sys.orig_argv), its interpreter written `python`."""
    study.set_user_attr(SWEEPER_ATTR, {
        "heartbeat_interval": heartbeat_interval,
        "grace_period": grace_period or 2 * heartbeat_interval,
        "command": shlex.join(["python", *argv[1:]]), "cwd": cwd})


def recorded_total(study_attrs: dict) -> int | None:
    """The total a sweeper recorded (record_total), or None for a study from before it."""
    n = study_attrs.get(N_TRIALS_ATTR)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None
