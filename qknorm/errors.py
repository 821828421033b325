"""Exceptions that end a run, and how the command line reports them."""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user: shown as one line naming the value and the fix, no traceback."""


class RunDiverged(RuntimeError):
    """The training loss became non-finite; final.json records status `diverged` and the step."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"loss became {loss} at step {step}; lower optimizer.lr or raise "
                         "optimizer.warmup_iters")
        self.step = step
        self.loss = loss

    def __reduce__(self):  # picklable: joblib/submitit send a job's exception back
        return type(self), (self.step, self.loss)


class RunPruned(RuntimeError):
    """An Optuna pruner stopped the run early; final.json records status `pruned`."""

    def __init__(self, step: int):
        super().__init__(f"pruned at step {step}")
        self.step = step

    def __reduce__(self):
        return type(self), (self.step,)
