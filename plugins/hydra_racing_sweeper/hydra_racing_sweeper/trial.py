"""The job side of the racing sweeper, for any Hydra task (contract: docs/your_app.md).

    from hydra_racing_sweeper import trial

    for step in range(n_steps):
        loss = ...
        if trial.report(step, loss):  # True: stop now, the sweeper records the run as stopped
            break
    return loss

`report(step, value) -> bool` reports the value the run has reached at `step` to the trial the
sweeper launched this job for. True means stop now: the trial's Optuna pruner pruned it, or, in
a race with rungs, the run lost at a rung (hydra_racing_sweeper/job.py); the task then returns its last
value, and the sweeper records the run as stopped (status pruned). Outside a sweep it is always
False, and nothing but this module is imported (no optuna, no torch).

The sweeper hands each job its trial's identity through environment variables, set by Hydra for the job's
duration from `hydra.job.env_set` (hydra_racing_sweeper/identity.py; every Hydra launcher applies it, in
the process that runs the job), so the app's config needs no key of ours. qknorm's jobs use this same
function.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from hydra_racing_sweeper.identity import Identity, identity

_reporters: dict[Identity, Callable[[int, float], bool]] = {}


def report(step: int, value: float) -> bool:
    """Report `value` at `step` to this job's trial; True: stop now. Always False outside a
    sweep. What it answers to each input (docs/your_app.md, "What report answers"):

    - `step`: a whole number >= 0 (an int, or any integer type operator.index takes), as
      Optuna's Trial.report asks. A bool, 2.5 or "3" raise TypeError and -1 ValueError, in a
      sweep or not, so a task tried alone finds the mistake.
    - `value`: a number (whatever float() takes; else TypeError). NaN or +-inf is not reported
      and answers False: a non-finite value is a diverged run, for the task to end (qknorm's
      raises RunDiverged), and a job that returns it fails (its value is not finite). Optuna
      would store it, and its median pruner prune it: a diverged run would read stopped.
    - A step at or before the last step this job reported (a repeat, or a step that goes back)
      is not reported, with one warning per job, and answers False: a trial keeps one value
      per step (Optuna ignores a repeated step with a warning), and the job's steps (its
      final.json, the plan's pace) stay the furthest it reached.
    - After it has answered True, every call answers True and reports nothing."""
    if isinstance(step, bool):
        raise TypeError(f"trial.report(step={step}): the step must be a whole number >= 0 "
                        "(the task's step or epoch count), not a bool")
    try:
        step = operator.index(step)
    except TypeError:
        raise TypeError(f"trial.report(step={step!r}): the step must be a whole number >= 0 "
                        f"(the task's step or epoch count), not {type(step).__name__}") from None
    if step < 0:
        raise ValueError(f"trial.report(step={step}): the step must be >= 0 (count from 0 or 1)")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"trial.report(value={value!r}): the value must be a number (the "
                        f"objective at this step), not {type(value).__name__}") from None
    me = identity()
    if me is None:
        return False
    if me not in _reporters:  # one per job: Hydra's basic launcher runs jobs in one process
        from hydra_racing_sweeper.job import reporter  # optuna: only jobs of a sweep pay for it

        _reporters[me] = reporter(me)
    return _reporters[me](step, value)
