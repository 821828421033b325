"""The job side of the qknorm_optuna sweeper, for any Hydra task (contract: docs/your_app.md).

    from qknorm.sweep import trial

    for step in range(n_steps):
        loss = ...
        if trial.report(step, loss):  # True: stop now, the sweeper records the run as stopped
            break
    return loss

`report(step, value) -> bool` reports the value the run has reached at `step` to the trial the
sweeper launched this job for. True means stop now: the trial's Optuna pruner pruned it, or, in
a race with rungs, the run lost at a rung (qknorm/sweep/job.py); the task then returns its last
value, and the sweeper records the run as stopped (status pruned). Outside a sweep it is always
False, and nothing but this module is imported (no optuna, no torch).

The sweeper hands each job its trial's identity through environment variables, set by Hydra
for the job's duration from `hydra.job.env_set` (ENV below; every Hydra launcher applies it, in
the process that runs the job), so the app's config needs no key of ours. qknorm.train's jobs
use this same function (qknorm/cli.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

# The variables the sweeper sets on each job (sweeper side: env_overrides).
STUDY, STORAGE, TRIAL = "QKNORM_STUDY", "QKNORM_STORAGE", "QKNORM_TRIAL"
BLOCK = "QKNORM_BLOCK"  # the job's replicate block, e.g. "seed=1" ("" without replicates)
# A race with rungs: the steps a run is judged at, and its margin (none: the baseline, never
# judged) or one margin per rung; comma-separated.
RUNGS, MARGIN, MARGINS = "QKNORM_RUNGS", "QKNORM_MARGIN", "QKNORM_MARGINS"
ENV = (STUDY, STORAGE, TRIAL, BLOCK, RUNGS, MARGIN, MARGINS)
# In the job's output dir: its last step, its seconds since its first report and the step it
# was stopped at (null: not stopped), which the sweeper reads back (qknorm/sweep/job.py).
REPORTED_FILE = "reported.json"


@dataclass(frozen=True)
class Identity:
    """Which trial and replicate block a job runs, and its rungs (a race's job)."""

    study_name: str
    storage: str
    trial: int
    block: str = ""
    rungs: tuple[int, ...] = ()
    margin: float | None = None  # None with rungs: the baseline, recorded and never judged
    margins: tuple[float, ...] = ()  # each rung's own margin; (): `margin` at every rung


def identity() -> Identity | None:
    """The identity the sweeper set on this job, or None outside a sweep."""
    env = os.environ
    if not env.get(TRIAL):
        return None
    return Identity(env.get(STUDY, ""), env.get(STORAGE, ""), int(env[TRIAL]),
                    env.get(BLOCK, ""), _numbers(env.get(RUNGS), int),
                    float(env[MARGIN]) if env.get(MARGIN) else None,
                    _numbers(env.get(MARGINS), float))


def _numbers(text: str | None, kind: type) -> tuple:
    return tuple(kind(x) for x in text.split(",")) if text else ()


_reporters: dict[Identity, Callable[[int, float], bool]] = {}


def report(step: int, value: float) -> bool:
    """Report `value` at `step` to this job's trial; True: stop now. Always False outside a
    sweep. A non-finite value is not reported (the task's own business: it returns it)."""
    me = identity()
    if me is None:
        return False
    if me not in _reporters:  # one per job: Hydra's basic launcher runs jobs in one process
        from qknorm.sweep.job import reporter  # optuna: only jobs of a sweep pay for it

        _reporters[me] = reporter(me)
    return _reporters[me](int(step), float(value))


def env_overrides(ident: Identity) -> list[str]:
    """The Hydra overrides that hand `ident` to a job (hydra.job.env_set: strings)."""
    values = {STUDY: ident.study_name, STORAGE: ident.storage, TRIAL: str(ident.trial),
              BLOCK: ident.block}
    if ident.rungs:
        values[RUNGS] = ",".join(map(str, ident.rungs))
        if ident.margins:
            values[MARGINS] = ",".join(map(repr, ident.margins))
        elif ident.margin is not None:
            values[MARGIN] = repr(ident.margin)
    return [f"++hydra.job.env_set.{k}={_quoted(v)}" for k, v in values.items()]


def _quoted(text: str) -> str:
    """A string as Hydra's override grammar reads it back, always quoted (a trial number or a
    margin stays a string, as env_set's values are)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
