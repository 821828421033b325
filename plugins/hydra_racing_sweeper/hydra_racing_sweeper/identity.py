"""A job's trial, handed over in its environment: the variables the racing sweeper sets
on each job through `hydra.job.env_set` (env_overrides, the sweeper's side) and reads back
(identity, the job's side). hydra_racing_sweeper/trial.py is the API a task calls; this is what both
sides of it share, so that neither imports the other's code.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

# The variables the sweeper sets on each job (sweeper side: env_overrides).
STUDY, STORAGE, TRIAL = "RACING_STUDY", "RACING_STORAGE", "RACING_TRIAL"
BLOCK = "RACING_BLOCK"  # the job's replicate block, e.g. "seed=1" ("" without replicates)
# A race with rungs: the steps a run is judged at, and its margin (none: the baseline, never
# judged) or one margin per rung; comma-separated.
RUNGS, MARGIN, MARGINS = "RACING_RUNGS", "RACING_MARGIN", "RACING_MARGINS"
ENV = (STUDY, STORAGE, TRIAL, BLOCK, RUNGS, MARGIN, MARGINS)
# In the job's output dir: its last step, its seconds since its first report and the step it
# was stopped at (null: not stopped), which the sweeper reads back (hydra_racing_sweeper/job.py).
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
    """The identity the sweeper set on this job, or None outside a sweep (RACING_TRIAL unset or
    empty). A variable the sweeper would not have set (a trial that is not a whole number, no
    study or storage beside a trial, a rung that is not a number) raises ValueError in one
    line naming it: someone set it by hand."""
    env = os.environ
    if not env.get(TRIAL):
        return None
    missing = [name for name in (STUDY, STORAGE) if not env.get(name)]
    if missing:
        raise ValueError(f"{TRIAL}={env[TRIAL]!r} is set without {' and '.join(missing)}; "
                         f"{', '.join(ENV)} are set by the racing sweeper on its jobs "
                         "(hydra.job.env_set): unset them")
    rungs, margins = _numbers(env, RUNGS, int), _numbers(env, MARGINS, float)
    if rungs and margins and len(margins) != len(rungs):  # the job zips them (job.judge)
        raise ValueError(f"{MARGINS}={env[MARGINS]!r} gives {len(margins)} margin(s) for the "
                         f"{len(rungs)} rung(s) of {RUNGS}={env[RUNGS]!r}, which the "
                         "racing sweeper never sets (one per rung): unset them")
    return Identity(env[STUDY], env[STORAGE], _one(env, TRIAL, int), env.get(BLOCK, ""), rungs,
                    _one(env, MARGIN, float) if env.get(MARGIN) else None, margins)


def _numbers(env: Mapping[str, str], name: str, kind: type) -> tuple:
    """The comma-separated numbers of variable `name` (() when unset or empty)."""
    text = env.get(name)
    try:
        return tuple(kind(x) for x in text.split(",")) if text else ()
    except ValueError:
        raise _odd(name, text, f"{_WHAT[kind]}s separated by commas") from None


def _one(env: Mapping[str, str], name: str, kind: type) -> int | float:
    try:
        return kind(env[name])
    except ValueError:
        raise _odd(name, env[name], f"one {_WHAT[kind]}") from None


_WHAT = {int: "whole number", float: "number"}


def _odd(name: str, text: str | None, what: str) -> ValueError:
    return ValueError(f"{name}={text!r} is not {what}, as the racing sweeper sets it on "
                      "its jobs (hydra.job.env_set): unset it")


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
    r"""`text` as the job's environment gets it back through env_set, always quoted (a trial
    number or a margin stays a string, as env_set's values are). Two readers unescape it, each
    a backslash only where its grammar says: Hydra's override parser, a run of backslashes
    before a quote (the closing quote included: `'a\\'` is `a\`), then OmegaConf, which
    resolves `${` in the config the override sets (a run before `${`). Every other backslash
    is read as written: a storage `sqlite:///C:\runs\o.db` is passed as it is."""
    # OmegaConf: n backslashes then `${` are read back from 2n + 1 of them then `${`.
    text = re.sub(r"(\\*)\$\{", lambda m: 2 * m[1] + "\\${", text)
    # Hydra, in single quotes: n backslashes then a quote from 2n + 1 then the quote; n at the
    # end from 2n (the closing quote follows them).
    text = re.sub(r"(\\*)'", lambda m: 2 * m[1] + "\\'", text)
    text = re.sub(r"(\\+)\Z", lambda m: 2 * m[1], text)
    return f"'{text}'"
