"""What an app may tell the sweeper about its task: the hook (`hydra.sweeper.task_hook`).

The sweeper knows nothing of the task it sweeps: a job is its composed config, its run dir and
what it returns or reports (`trial.report`). An app that knows more about its own config can say
so by naming a subclass of `TaskHook` in `hydra.sweeper.task_hook` (a dotted path, loaded when a
sweep starts). Each method has a default that knows nothing, so a hook overrides what it knows:

  typed(cfg)           the job's config as the task reads it, checked (raise UserError on a bad
                       value, so the plan refuses it before anything runs); None: not this task
  check(job, params)   refuse a sweep before it starts (e.g. a job that cannot fit in memory)
  effective(flat)      the keys that make two jobs the same run (a key the task never reads
                       under another key's value is dropped); two trials with equal effective
                       configs are one run (the second is told the first's result)
  question(flat)       the keys that make a study's question (question.py): not those that
                       say only where or how fast a job runs
  length(cfg)          (steps, eval interval) a composed job runs: a race's rungs given as
                       fractions of a run are steps of it, and the plan line counts steps
  measure(job)         seconds of a job's setup, a step and an eval, timed here (cost.Pace):
                       the plan line's time before anything runs
  n_folds(cfg)         the job's number of folds (the corrected resampled t-test's ratio)
  records(...)         keys (and values) that record a job's trial in its own config
  command, race_example(baseline)   the app's commands, for the examples in error lines

qknorm's hook is `qknorm.sweep.hook.QknormTask` (its `qknorm_optuna` sweeper sets it). Without a
hook, a job's steps and pace come from what it reports through `trial.report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the hook's types; importing them here would load Hydra and Optuna
    from omegaconf import DictConfig

    from hydra_racing_sweeper.cost import Pace


class TaskHook:
    """The default: a task the sweeper knows nothing about (module doc)."""

    command = "python your_app.py"  # how a user runs the app, in the examples of error lines

    def race_example(self, baseline: Any) -> str | None:
        """A command that runs a race of this app, for the line that refuses a race given no
        grid (`baseline`: the race's, None when none is given); None: none."""
        return None

    def typed(self, cfg: DictConfig) -> Any | None:
        return None

    def check(self, job: Any, params: dict[str, str], cfg: DictConfig, on_this_host: bool) -> None:
        """`job`: typed(cfg) (not None); `params`: each searched param's name as written
        under hydra.sweeper.params (`1/norm.p`) to the key it sets (`norm.p`); `on_this_host`: its
        jobs run on this machine (not a SLURM node)."""

    def effective(self, flat: dict[str, Any]) -> dict[str, Any] | None:
        """None: every trial is its own run (the default: which keys a task reads, only the
        app knows)."""
        return None

    def question(self, flat: dict[str, Any]) -> dict[str, Any]:
        """The keys of a job's config its study's question holds (question.py); the default:
        all (which say only where or how fast a job runs, only the app knows)."""
        return flat

    def length(self, cfg: DictConfig) -> tuple[int | None, int | None]:
        return None, None

    def measure(self, job: Any) -> Pace | None:
        return None

    def n_folds(self, cfg: DictConfig) -> int | None:
        return None

    def records(self, study_name: str, storage: str, trial: int) -> dict[str, Any]:
        return {}


def load_hook(path: str | None) -> TaskHook:
    """The hook `hydra.sweeper.task_hook` names (a dotted path to a TaskHook subclass), made;
    the default TaskHook for None."""
    if not path:
        return TaskHook()
    from hydra.utils import get_class

    from hydra_racing_sweeper.errors import UserError, first_line

    try:
        cls = get_class(path)
    except Exception as e:
        raise UserError(f"hydra.sweeper.task_hook={path}: cannot be imported ({first_line(e)}); "
                        "name a TaskHook subclass as module.Class, or null") from None
    if not (isinstance(cls, type) and issubclass(cls, TaskHook)):
        raise UserError(f"hydra.sweeper.task_hook={path} is not a subclass of "
                        "hydra_racing_sweeper.task.TaskHook; name one, or null")
    return cls()
