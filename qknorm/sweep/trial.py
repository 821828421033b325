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
for the job's duration from `hydra.job.env_set` (qknorm/sweep/identity.py; every Hydra launcher applies it, in
the process that runs the job), so the app's config needs no key of ours. qknorm.train's jobs
use this same function (qknorm/cli.py).
"""

from __future__ import annotations

from collections.abc import Callable

from qknorm.sweep.identity import Identity, identity

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
