"""A job's trial, handed over in its environment: the variables the qknorm_optuna sweeper sets
on each job through `hydra.job.env_set` (env_overrides, the sweeper's side) and reads back
(identity, the job's side). qknorm/sweep/trial.py is the API a task calls; this is what both
sides of it share, so that neither imports the other's code.
"""

from __future__ import annotations

import os
import re
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
