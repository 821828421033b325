"""Optuna studies and trials with known contents: frozen trials built in memory (a status's
trials at known times, a race's candidates with their runs per block), small studies in tmp
storages, the study a CLI sweep left in its cwd, and a heartbeat without its thread (Beats)."""

from __future__ import annotations

import datetime
import math
import sqlite3
import time
from pathlib import Path

import optuna
import sqlalchemy
from hydra_racing_sweeper import read_study, readback
from hydra_racing_sweeper.study import (
    HEARTBEAT_ATTR,
    PARAMS_ATTR,
    RACE_CANDIDATE_ATTR,
    RACE_OUTCOME_ATTR,
    RACE_RUNG_ATTR,
    RACE_RUNS_ATTR,
)
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial


class Beats:
    """Heartbeat's interface, without the thread: the trial ids it would keep alive."""

    def __init__(self) -> None:
        self.ids: set[int] = set()

    def add(self, trial_id: int) -> None:
        self.ids.add(trial_id)

    def discard(self, trial_id: int) -> None:
        self.ids.discard(trial_id)


# -- trials at known times (a status is read at NOW) ---------------------------------------------

NOW = 1_800_000_000.0  # Unix time the status is read at
P = FloatDistribution(0.1, 100.0)


def at(seconds_before_now: float) -> datetime.datetime:
    # Optuna keeps naive local datetimes; .timestamp() reads them back the same way.
    return datetime.datetime.fromtimestamp(NOW - seconds_before_now)


def trial(number: int, state: TrialState, start: float, took: float | None = None,
          value=None, params: dict | None = None, **attrs) -> FrozenTrial:
    """A trial that started `start` s before NOW and took `took` s (None: still running);
    `attrs`: its user attrs by their names in hydra_racing_sweeper/study.py (status, n, std, jobs, ...)."""
    params = params if params is not None else {"norm.p": 2.0 + number}
    return FrozenTrial(
        number=number, state=state, value=None, values=value if isinstance(value, list) else
        None if value is None else [value],
        datetime_start=at(start),
        datetime_complete=None if took is None else at(start - took),
        params=params, distributions={k: P for k in params},
        user_attrs={PARAMS_ATTR: params, **attrs},
        system_attrs={}, intermediate_values={}, trial_id=number)


def new_study(url_or_storage, name="s", directions=("minimize",)) -> optuna.Study:
    return optuna.create_study(storage=url_or_storage, study_name=name,
                               directions=list(directions))


def finished_study(storage, name: str = "done") -> None:
    """Study `name`: trial 0 complete (3.5 ± 0.25 over 2 jobs), trial 1 pruned; DONE_BLOCK is
    what `python -m qknorm.status` prints for it."""
    study = new_study(storage, name)
    study.add_trial(trial(0, TrialState.COMPLETE, 100, 30, 3.5, status="completed", n=2,
                          std=0.25, mean=3.5))
    study.add_trial(trial(1, TrialState.PRUNED, 70, 10, status="pruned", n=1))


DONE_BLOCK = ("study done:\n"
              "  trials 2/2: 1 complete, 1 pruned, 0 failed, 0 running; elapsed 40s, done\n"
              "  best: trial 0 (norm.p=2) 3.5000 ± 0.2500 (n=2)\n"
              "  spent: 0 jobs, 0 training steps, 0 core-h\n")

# -- a race's candidates over p -------------------------------------------------------------------


def run(value, steps=30, core_s=3.0, **stop) -> dict:
    """One block's run of a race candidate, as the sweeper records it (value None and `stop`'s
    keys: stopped at a rung)."""
    return {"value": value, "steps": steps, "core_s": core_s, **stop}


def frozen(p: float, runs: dict, state=None, record=None) -> FrozenTrial:
    """Candidate norm.p=p of a race over p in {1, 2, inf} with its runs by block; `record`: its
    race outcome. A COMPLETE one's value is the mean of its completed runs."""
    attrs = {RACE_CANDIDATE_ATTR: f"norm.p={p}", RACE_RUNS_ATTR: runs}
    if record:
        attrs[RACE_OUTCOME_ATTR] = record
    state = state or TrialState.RUNNING
    done = [r["value"] for r in readback.completed(runs).values()]
    return create_trial(params={"norm.p": p}, state=state,
                        distributions={"norm.p": CategoricalDistribution([1.0, 2.0, math.inf])},
                        user_attrs=attrs,
                        value=sum(done) / len(done) if state == TrialState.COMPLETE else None)


BLOCK = "data.fold=0"


def rung_study(tmp_path: Path) -> str:
    """A race's study (its storage URL): p=2 ran fold 0 to the end, its rung values recorded
    (2.40 at step 250, 2.20 at 500); p=4's and p=1's trials are running. Another fold's values
    must never count."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    s = optuna.create_study(study_name="r", storage=url)
    trials = [s.ask() for _ in range(3)]
    for t, label in zip(trials, ("norm.p=2.0", "norm.p=4.0", "norm.p=1.0"), strict=True):
        t.set_user_attr(RACE_CANDIDATE_ATTR, label)
    trials[0].set_user_attr(RACE_RUNG_ATTR + BLOCK, {"250": 2.40, "500": 2.20})
    trials[0].set_user_attr(RACE_RUNG_ATTR + "data.fold=1", {"250": 1.00, "500": 1.00})
    return url


def job_hook(url: str, trial: int, block: str, rungs, margin=None, margins=()):
    """A qknorm.train job's eval hook on trial `trial` of study "r": what the job-side API
    (qknorm.sweep.trial.report) does for it, and RunPruned when it says stop."""
    from hydra_racing_sweeper.identity import Identity
    from hydra_racing_sweeper.job import reporter

    from qknorm.errors import RunPruned

    report = reporter(Identity("r", url, trial, block, tuple(rungs), margin, tuple(margins)))

    def on_eval(step: int, row: dict) -> None:
        if report(step, row["val_loss"]):
            raise RunPruned(step)

    return on_eval


def attrs(url: str, trial: int) -> dict:
    """The user attrs of study "r"'s trial number `trial`, read back from its storage."""
    return optuna.load_study(study_name="r", storage=url).trials[trial].user_attrs


# -- the study a CLI sweep left ----------------------------------------------------------------------


def study_of(cwd: Path, name: str) -> optuna.Study:
    """Study `name` of a sweep run in cwd (the sweeper's default storage, outputs/optuna.db)."""
    return optuna.load_study(study_name=name, storage=f"sqlite:///{cwd}/outputs/optuna.db")


def counted(study: optuna.Study) -> list[FrozenTrial]:
    """Trials that count toward n_trials: those with the sweeper's `status` user attr, less a
    trial another trial retries (system attr `failed_trial`). A sweeper killed, or failed as
    stale, after it wrote the status but before its tell leaves the trial FAIL with a status."""
    trials = study.get_trials()
    retried = {t.system_attrs["failed_trial"] for t in trials if "failed_trial" in t.system_attrs}
    return [t for t in trials if t.number not in retried
            and t.user_attrs.get("status") in ("completed", "pruned", "failed")]


# -- a killed sweeper's trials made stale now (its resume need not wait out grace_period) ----------

def age_heartbeats(cwd: Path) -> int:
    """Make the killed sweep's RUNNING trials stale now, as they are grace_period after the
    kill, without waiting on the clock: their heartbeats (Optuna's trial_heartbeats table, in
    the SQLite storage's own CURRENT_TIMESTAMP format) set back one hour, so the resumed
    sweepers fail and retry them the moment they start, however soon that is. A kill between
    a trial's ask and its first beat leaves it no heartbeat: its start is set back instead
    (study.is_stale). Returns the heartbeat rows changed."""
    with sqlite3.connect(cwd / "outputs" / "optuna.db") as db:
        changed = db.execute("UPDATE trial_heartbeats SET heartbeat = "
                             "datetime(heartbeat, '-1 hour')").rowcount
        db.execute("UPDATE trials SET datetime_start = datetime(datetime_start, '-1 hour') "
                   "WHERE state = 'RUNNING' AND trial_id NOT IN "
                   "(SELECT trial_id FROM trial_heartbeats)")
    db.close()
    return changed


def age_heartbeat(url: str, name: str, number: int) -> None:
    """The same for trial `number` of study `name` on PostgreSQL or a journal file (the cluster
    tests): its last heartbeat set back one hour. The grace period can then be long, so a live
    sweeper's heartbeat late by seconds under CI load does not get its trial failed and run
    twice."""
    study = read_study(name, url)
    trial_id = study.trials[number]._trial_id
    if url.startswith("journal:"):  # a beat is a trial system attr there (specs.py)
        study._storage.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time() - 3600)
        return
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as db:
        changed = db.execute(sqlalchemy.text(
            "UPDATE trial_heartbeats SET heartbeat = heartbeat - interval '1 hour' "
            "WHERE trial_id = :id"), {"id": trial_id}).rowcount
    engine.dispose()
    assert changed == 1


def median_pruned_trial(url: str, steps: int) -> tuple[optuna.Study, optuna.Trial]:
    """A study "m" at `url` with two finished trials that reported 1.0 at each of `steps` steps,
    and a third asked under Optuna's MedianPruner (n_startup_trials 2, n_warmup_steps 2: the
    trial's pruner spec, which the job rebuilds)."""
    study = optuna.create_study(study_name="m", storage=url)
    for _ in range(2):
        t = study.ask()
        for step in range(steps):
            t.report(1.0, step)
        study.tell(t, 1.0)
    t = study.ask()
    t.set_user_attr("pruner", {"name": "median", "n_startup_trials": 2, "n_warmup_steps": 2})
    return study, t
