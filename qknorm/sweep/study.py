"""How many trials a study has, counted so that reruns and concurrent sweepers agree.

Every trial this sweeper finishes carries a user attr `status`: completed | pruned | failed
(counted toward n_trials), or surplus (asked by a sweeper that lost a race for the last slots;
never launched, not counted). A RUNNING trial whose sweeper died stops getting heartbeats; the
next sweeper marks it FAIL (Optuna's fail_stale_trials) and re-enqueues its params (the
storage's RetryHeartbeatStaleTrialCallback, _specs.open_storage), so it does not count and its
params run again.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from qknorm.rundir import COMPLETED, FAILED, PRUNED

log = logging.getLogger(__name__)

STATUS_ATTR = "status"
COUNTED = (COMPLETED, PRUNED, FAILED)  # a trial's status: its jobs' statuses, diverged as failed
SURPLUS = "surplus"


def retried_numbers(trials: list[FrozenTrial]) -> set[int]:
    """Numbers of stale trials whose params were re-enqueued (they do not count)."""
    return {t.system_attrs["failed_trial"] for t in trials if "failed_trial" in t.system_attrs}


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
        trials = study.get_trials(deepcopy=False)
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


class Heartbeat:
    """Records a heartbeat for this sweeper's running trials every `interval` seconds, so
    another sweeper (or a rerun) can tell them from trials of a killed one."""

    def __init__(self, storage: optuna.storages.RDBStorage, interval: int):
        self._storage, self._interval = storage, interval
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="qknorm-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def add(self, trial_id: int) -> None:
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
