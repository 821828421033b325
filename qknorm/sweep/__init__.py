"""The sweep wing: everything Optuna (asking trials, launching their jobs, racing, the study's
record). The Hydra plugin (qknorm_sweeper) is a thin adapter over OptunaSweep.

What the rest of qknorm may use is named here (`__all__`: the names of _FACE and the modules of
_MODULES; tests/test_faces.py fails an import past it); the modules below are the wing's rooms:

  study       the study's record: every attribute name, replicate labels, counting, retries
  specs       samplers, pruners and storages from plain specs
  space       Hydra's sweep grammar -> Optuna distributions
  plan        every check, before a study is touched (raceplan: the race's)
  launcher    a trial's jobs: overrides, run dirs, outcomes, tell
  schedule    the Schedule protocol and the plain schedule (every replicate of every trial)
  race/       the race and the racing search (a sampler's proposals raced against an
              incumbent): their settings, verdicts, pure rules and driver, a layer below the
              rest of the wing (race/__init__.py has its own map)
  raceplan    the race's settings completed against the search space (plan_race)
  racing      the racing schedules: RaceSchedule, RaceSearchSchedule and their base
  readback/   a race or a search read back from its study (kinds, ledger, tables, words)
  sweep       OptunaSweep: one loop over a schedule, picked by the kind of study
  trial       the job-side API of any task: trial.report(step, value) -> stop now
  identity    a job's trial handed over in its environment (the sweeper sets, the job reads)
  job         what trial.report does in a sweep (pruning, rungs)
  slurm, outputs, progress (the status lines), cost (the plan's cost line)

Names load lazily (PEP 562): `from qknorm.sweep import trial` (any task's job) imports no
optuna, Hydra or torch; trial.report loads qknorm.sweep.job only inside a sweep.
"""

from __future__ import annotations

import importlib
from typing import Any

_FACE = {
    "OptunaSweep": "qknorm.sweep.sweep",
    "open_storage": "qknorm.sweep.specs",
    "storage_file": "qknorm.sweep.specs",
    "absolute_url": "qknorm.sweep.specs",
    "open_reader": "qknorm.sweep.specs",
    "build_sampler": "qknorm.sweep.specs",
    "build_pruner": "qknorm.sweep.specs",
    "read_study": "qknorm.sweep.specs",
    "elimination": "qknorm.sweep.readback",
    "propose": "qknorm.sweep.racing",
    "proposal_sampler": "qknorm.sweep.racing",
    "status_lines": "qknorm.sweep.progress",
    "stopped_sweep": "qknorm.sweep.progress",
    "task_config": "qknorm.sweep.plan",  # a job's config as qknorm.train's Config, or None
    "trial_run_dirs": "qknorm.sweep.study",  # the run dirs a study's trials name (the report's)
    "studies_named": "qknorm.sweep.outputs",  # the studies a sweep dir's results files name
    # a preset's rungs (fractions of train.max_iters) as steps, for the replays (qknorm/research)
    "resolve_rungs": "qknorm.sweep.race",
    "step_margins": "qknorm.sweep.race",
    # a race's runs and outcome as its study keeps them: what the report writes to rebuild a
    # committed race without its study (qknorm/report/racerebuild.py)
    "run_entry": "qknorm.sweep.racing",
    "stopped_entry": "qknorm.sweep.racing",
    "outcome_record": "qknorm.sweep.racing",
    "stopped_record": "qknorm.sweep.racing",
    "RACE_RUNS_ATTR": "qknorm.sweep.study",
    "RACE_OUTCOME_ATTR": "qknorm.sweep.study",
}
# Modules the rest may import whole: trial (the job-side API, any task's), identity (what the
# sweeper hands a job), cost (the plan line, the basic sweeper's too), the race package
# (through its own face, qknorm/sweep/race/__init__.py), whose driver, rules (looks,
# intensify) and verdicts are pure functions and words of recorded values, which the report,
# the status and the research tools' replays use, and readback (a race or a search read back
# from its study: the report's tables, the status lines).
_MODULES = ["race", "readback", "trial", "identity", "cost"]
__all__ = sorted([*_FACE, *_MODULES])


def __getattr__(name: str) -> Any:
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
