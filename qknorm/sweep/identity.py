"""A job's trial, handed over in its environment: the variables the qknorm_optuna sweeper sets
on each job through `hydra.job.env_set` (env_overrides, the sweeper's side) and reads back
(identity, the job's side). qknorm/sweep/trial.py is the API a task calls; this is what both
sides of it share, so that neither imports the other's code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

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


# The end of each message about a bad value: the sweeper writes these, so a bad one was set by
# hand (a job started outside a sweep, or a leftover in the shell).
_FIX = "the qknorm_optuna sweeper sets the QKNORM_* variables on its jobs: unset them"


def identity() -> Identity | None:
    """The identity the sweeper set on this job, or None outside a sweep. A value that does not
    parse is a UserError naming the variable (one line, not a traceback from deep in the job)."""
    env = os.environ
    if not env.get(TRIAL):
        return None
    (trial,) = _numbers(env, TRIAL, int, "a trial number, e.g. 3", one=True)
    rungs = _numbers(env, RUNGS, int, "comma-separated training steps, e.g. 500,1000")
    margin = _numbers(env, MARGIN, float, "a number (val loss units), e.g. 0.05", one=True)
    margins = _numbers(env, MARGINS, float, "comma-separated numbers, one per rung, e.g. 0.1,0.05")
    if rungs and margins and len(margins) != len(rungs):  # the job zips them (job.judge)
        _refuse(f"{MARGINS}={env[MARGINS]!r} gives {len(margins)} margin(s) for the "
                f"{len(rungs)} rung(s) of {RUNGS}={env[RUNGS]!r}; give one per rung")
    return Identity(env.get(STUDY, ""), env.get(STORAGE, ""), trial, env.get(BLOCK, ""), rungs,
                    margin[0] if margin else None, margins)


def _numbers(env: Mapping[str, str], name: str, kind: type, form: str, one: bool = False
             ) -> tuple:
    """The variable's comma-separated values as `kind` (one: a single value); () when unset or
    empty."""
    text = env.get(name)
    if not text:
        return ()
    try:
        values = tuple(kind(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or (one and len(values) > 1):
        _refuse(f"{name}={text!r} is not {form}")
    return values


def _refuse(problem: str) -> NoReturn:
    from qknorm.errors import UserError  # here: outside a sweep, trial.report imports no Hydra

    raise UserError(f"{problem}; {_FIX}")


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
