"""The sweep wing: everything Optuna (asking trials, launching their jobs, racing, the study's
record). The Hydra plugin (qknorm_sweeper) is a thin adapter over OptunaSweep.

What the rest of qknorm may use is named here (`__all__`: the names of _FACE and the modules of
_MODULES; tests/test_faces.py fails an import past it); the modules below are the wing's rooms:

  study       the study's record: every attribute name, replicate labels, counting, retries
  specs       samplers, pruners and storages from plain specs
  space       Hydra's sweep grammar -> Optuna distributions
  plan        every check, before a study is touched (race_plan: the race's settings)
  launcher    a trial's jobs: overrides, run dirs, outcomes, tell
  schedule    the Schedule protocol and the plain schedule (every replicate of every trial)
  driver      the racing engine: what a race or a racing search runs next, from its ledger
              (the live schedules and the replays both step it)
  race        the race schedule; racestats, its pure statistics
  race_search the racing search's schedule (a sampler's proposals raced against an incumbent);
              intensify, its pure rules; search_answer, its answer read back from a study
  sweep       OptunaSweep: one loop over a schedule
  job         a training job's side of its trial (pruning, rungs)
  slurm, outputs, progress (the status lines)

Names load lazily (PEP 562): a training job's eval_hook loads qknorm.sweep.job without paying
for the sweeper's imports.
"""

from __future__ import annotations

import importlib
from typing import Any

_FACE = {
    "OptunaSweep": "qknorm.sweep.sweep",
    "eval_hook": "qknorm.sweep.job",
    "open_storage": "qknorm.sweep.specs",
    "storage_file": "qknorm.sweep.specs",
    "absolute_url": "qknorm.sweep.specs",
    "open_reader": "qknorm.sweep.specs",
    "build_sampler": "qknorm.sweep.specs",
    "read_study": "qknorm.sweep.specs",
    "elimination": "qknorm.sweep.race",
    "propose": "qknorm.sweep.race_search",
    "status_lines": "qknorm.sweep.progress",
    # a preset's rungs (fractions of train.max_iters) as steps, for the replays (qknorm/research)
    "resolve_rungs": "qknorm.sweep.race_plan",
    "step_margins": "qknorm.sweep.race_plan",
}
# Modules the rest may import whole: the racing engine's driver, the race's statistics and the
# racing search's rules are pure functions of recorded values, which the report and the
# research tools' replays step.
_MODULES = ["driver", "racestats", "intensify", "search_answer"]
__all__ = sorted([*_FACE, *_MODULES])


def __getattr__(name: str) -> Any:
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
