"""hydra-racing-sweeper: a Hydra sweeper on Optuna that races a trial's replicates (seeds,
folds) and stops the losers early, plus the job-side API any task calls (`trial.report`).

    python app.py -m hydra/sweeper=racing 'x=interval(-5,5)'       # in the app: nothing else
    from hydra_racing_sweeper import trial; trial.report(step, value)  # True: stop now

What an app or a tool may use is named here (`__all__`: the names of _FACE and the modules of
_MODULES; a name past it is the package's own); the modules are its rooms:

  study       the study's record: every attribute name, replicate labels, counting, retries
  specs       samplers, pruners and storages from plain specs
  space       Hydra's sweep grammar -> Optuna distributions
  plan        every check, before a study is touched (raceplan: the race's)
  task        the task hook: what an app may tell the sweeper of its config (TaskHook)
  launcher    a trial's jobs: overrides, run dirs, outcomes, tell
  schedule    the Schedule protocol and the plain schedule (every replicate of every trial)
  race/       the race and the racing search (a sampler's proposals raced against an
              incumbent): their settings, verdicts, pure rules and driver, a layer below the
              rest (race/__init__.py has its own map)
  raceplan    the race's settings completed against the search space (plan_race)
  racing      the racing schedules' base (RacingSchedule); race_schedule: the race
              (RaceSchedule); search_schedule: the racing search (RaceSearchSchedule, propose)
  records     what a race keeps in its study: a block's result, a candidate's outcome
  readback/   a race or a search read back from its study (kinds, ledger, tables, words)
  sweep       OptunaSweep: one loop over a schedule, picked by the kind of study
  trial       the job-side API of any task: trial.report(step, value) -> stop now
  identity    a job's trial handed over in its environment (the sweeper sets, the job reads)
  job         what trial.report does in a sweep (pruning, rungs)
  decision    the one rule that calls a difference worse, better, level or not shown
  multitest   the tests and corrections the rule is given (paired t, Holm, TOST)
  rundir      final.json and Hydra's run files: the one reader and writer
  errors, units, slurm, outputs, progress (the status lines), cost (the plan's cost line)

Names load lazily (PEP 562): `from hydra_racing_sweeper import trial` (any task's job) imports
no optuna and no Hydra; trial.report loads the job module only inside a sweep.
"""

from __future__ import annotations

import importlib
from typing import Any

_FACE = {
    "OptunaSweep": "hydra_racing_sweeper.sweep",
    "open_storage": "hydra_racing_sweeper.specs",
    "storage_file": "hydra_racing_sweeper.specs",
    "absolute_url": "hydra_racing_sweeper.specs",
    "open_reader": "hydra_racing_sweeper.specs",
    "build_sampler": "hydra_racing_sweeper.specs",
    "build_pruner": "hydra_racing_sweeper.specs",
    "read_study": "hydra_racing_sweeper.specs",
    "elimination": "hydra_racing_sweeper.readback",
    "propose": "hydra_racing_sweeper.search_schedule",
    "proposal_sampler": "hydra_racing_sweeper.search_schedule",
    "status_lines": "hydra_racing_sweeper.progress",
    "stopped_sweep": "hydra_racing_sweeper.progress",
    "TaskHook": "hydra_racing_sweeper.task",  # what an app tells the sweeper (task.py)
    "flatten": "hydra_racing_sweeper.rundir",
    "format_value": "hydra_racing_sweeper.space",  # a value as an override writes it
    "UserError": "hydra_racing_sweeper.errors",  # the one class of a user's mistake
    "trial_run_dirs": "hydra_racing_sweeper.study",  # the run dirs a study's trials name (the report's)
    "studies_named": "hydra_racing_sweeper.outputs",  # the studies a sweep dir's results files name
    # a preset's rungs (fractions of train.max_iters) as steps, for the replays (qknorm/research)
    "resolve_rungs": "hydra_racing_sweeper.race",
    "step_margins": "hydra_racing_sweeper.race",
    # a race's runs and outcome as its study keeps them: what the report writes to rebuild a
    # committed race without its study (qknorm/report/racerebuild.py)
    "run_entry": "hydra_racing_sweeper.records",
    "stopped_entry": "hydra_racing_sweeper.records",
    "outcome_record": "hydra_racing_sweeper.records",
    "stopped_record": "hydra_racing_sweeper.records",
    "RACE_RUNS_ATTR": "hydra_racing_sweeper.study",
    "RACE_OUTCOME_ATTR": "hydra_racing_sweeper.study",
}
# Modules an app may import whole: trial (the job-side API, any task's), identity (what the
# sweeper hands a job), cost (the plan line, qknorm's basic sweeper's too), errors, units
# (how a number or a time is written), rundir (final.json), decision and multitest (the
# verdicts' rule and tests, which qknorm's report and claims use too), the race package
# (through its own face, hydra_racing_sweeper/race/__init__.py), whose driver, rules (looks,
# intensify) and verdicts are pure functions and words of recorded values, which the report,
# the status and the research tools' replays use, and readback (a race or a search read back
# from its study: the report's tables, the status lines).
_MODULES = ["race", "readback", "trial", "identity", "cost", "errors", "units", "rundir",
            "decision", "multitest"]
__all__ = sorted([*_FACE, *_MODULES])


def __getattr__(name: str) -> Any:
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
