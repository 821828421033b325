"""The question a study answers: its task, its search space and the config its runs share,
kept in the study and checked by every sweeper that opens it, for any app.

A study's trials are answers to one question: "which x, over these x, for this model, these data,
this optimizer, this many steps?". Its config part is the config of its jobs (the keys the app's
task hook says count: TaskHook.question; without a hook, all) less what a sweep varies inside it:
the searched keys (a trial's params) and the replicate keys (a trial's value is the mean over them).
A rerun that asks another question (train.max_iters=2000 after 10, optimizer.lr=3e-3 after 1e-3,
another experiment) must not find the old trials done and print their answer, nor mix both in one
mean or one best: it is refused before anything runs, naming the keys that differ and the flag that
starts a new study (hydra.sweeper.study_name). The same command resumes, as before.

Refused rather than named after a digest of the config: the study's name is what the status,
the report, the dashboard and `--study` show and take, and a typo in a key meant to resume
would silently start over in a new study; the refusal names the keys, and the user decides.

A key added to the config later must keep old studies' questions: it goes in
effective.KEYS_BEFORE at the value every earlier run had, as for the trials' digests.

Keys that say where or how fast a run is computed, not what (NOT_THE_QUESTION), and the
sweeper's own keys (hydra.*: n_trials, n_jobs, the launcher) are not part of the question.

The question has three parts, each kept where it already lives:
  - the task: the task function Hydra runs (task_name: module.function), study user attr
    TASK_ATTR. Two apps with alike configs ask two questions;
  - its config, as above: what the app's hook keeps of it, or for an app without one (whose keys
    we cannot tell apart) every key of its config less the searched and replicate keys, study
    user attr QUESTION_ATTR;
  - the search space: hydra.sweeper.params as Optuna's distributions, which Optuna keeps
    with every trial it asked (`trial.distributions`): `norm.p=choice(1,8)` on a study that
    walked the preset's grid, or `norm.p=interval(2,4)` on one that searched 1/norm.p in
    [0, 1], would be answered from trials of another space. Not a study attr of our own: the
    trials already hold it, and a study from before the record has it too.
Every app's sweep is checked by the one `check` below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from hydra_racing_sweeper import rundir
from hydra_racing_sweeper.errors import UserError
from hydra_racing_sweeper.space import format_value
from hydra_racing_sweeper.study import COUNTED, JOB_DIRS_ATTR, QUESTION_ATTR, STATUS_ATTR, TASK_ATTR
from hydra_racing_sweeper.task import TaskHook

log = logging.getLogger(__name__)

SHOWN = 12  # differing keys named in the refusal (the rest counted): a line, not a dump


def question(flat: dict[str, Any], varied: Iterable[str], hook: TaskHook) -> dict[str, Any]:
    """A job's config (flattened, Hydra's node dropped, interpolations as written; or a run
    dir's rundir.read_config) as the question its study answers: the keys the hook says
    count (TaskHook.question; without a hook, all of them: which say only where or how fast a
    job runs, only the app knows) less `varied` (the searched and the replicate keys)."""
    drop = set(varied)
    return {k: v for k, v in sorted(hook.question(flat).items()) if k not in drop}


def task_name(task_function: Callable) -> str:
    """The task Hydra runs, as module.function: pkg.cli.task (whether run as python -m
    pkg.train, which runs pkg.cli as __main__, or python -m pkg.cli), or app.main for
    a script app.py (its module is __main__: named after its file, as Hydra names its job)."""
    module = getattr(task_function, "__module__", None) or "?"
    if module == "__main__":  # the module it was defined in, from its own globals
        defined_in = getattr(task_function, "__globals__", {})
        spec = defined_in.get("__spec__")
        if spec is not None and spec.name:
            module = spec.name
        elif defined_in.get("__file__"):
            module = Path(defined_in["__file__"]).stem
    return f"{module}.{getattr(task_function, '__qualname__', repr(task_function))}"


def differences(have: dict[str, Any], want: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """key -> (the study's value, this sweep's) for every key whose values differ; a key one
    side lacks is None there (e.g. a key a norm kind does not read)."""
    return {k: (have.get(k), want.get(k)) for k in sorted({*have, *want})
            if not _same(have.get(k), want.get(k))}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):  # True == 1, but a flag is not a number
        return a is b
    return a == b


def refusal(study_name: str, url: str, diff: dict[str, tuple[Any, Any]],
            space: dict[str, tuple[Any, Any]] | None = None,
            task: tuple[str, str] | None = None) -> str:
    """The one line that refuses a sweep asking another question of a study: what differs of
    its task, its search space (param -> (the study's, this sweep's), in Hydra's grammar) and
    its config (key -> (the study's value, this sweep's))."""
    parts = []
    if task is not None:
        parts.append(f"its task is {task[0]}, this sweep's {task[1]}")
    if space:
        parts.append("its search space differs from this sweep's (the study's -> this "
                     "sweep's): " + _pairs(space))
    if diff:
        keys = f"{len(diff)} key{'s' if len(diff) > 1 else ''}"
        parts.append(f"its runs differ from this sweep's in {keys} (the study's value -> this "
                     "sweep's): " + _pairs(diff))
    return (f"study {study_name!r} in {url} answers another question: " + "; ".join(parts)
            + "; rerun with the study's values to add to it, or start a new study with "
            "hydra.sweeper.study_name=NEW_NAME")


def _pairs(diff: dict[str, tuple[Any, Any]]) -> str:
    shown = list(diff.items())[:SHOWN]
    more = f", and {len(diff) - SHOWN} more" if len(diff) > SHOWN else ""
    return ", ".join(f"{k} {_show(have)} -> {_show(want)}" for k, (have, want) in shown) + more


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)


def grammar(d: BaseDistribution) -> str:
    """A distribution as hydra.sweeper.params writes it (space.py parses it back): choice(...),
    interval(a, b), tag(log, interval(a, b)), tag(int, interval(a, b))."""
    if isinstance(d, CategoricalDistribution):
        return f"choice({', '.join(format_value(c) for c in d.choices)})"
    if isinstance(d, (FloatDistribution, IntDistribution)):
        tags = [t for t, on in (("int", isinstance(d, IntDistribution)), ("log", d.log)) if on]
        shown = f"interval({format_value(d.low)}, {format_value(d.high)})"
        if d.step is not None and not (isinstance(d, IntDistribution) and d.step == 1):
            shown += f" step {format_value(d.step)}"
        return f"tag({', '.join(tags)}, {shown})" if tags else shown
    return repr(d)


def space_differences(study: optuna.Study, want: dict[str, BaseDistribution],
                      more: bool = False) -> dict[str, tuple[str | None, str | None]]:
    """param -> (the study's, this sweep's) where the first trial asked over another space than
    `want` differs from it: Optuna keeps with every trial the distributions it was asked with.
    {} when every trial was asked over `want` (or none was asked yet). `more`: a trial also
    holds a custom_search_space's params, whose ranges may move with each trial (z within 0.3
    of its x): only `want`'s are compared."""
    for t in study.get_trials(deepcopy=False):
        have = t.distributions
        if more:
            have = {k: v for k, v in have.items() if k in want}
        if have and have != want:
            return {name: (_grammar_or_none(have.get(name)), _grammar_or_none(want.get(name)))
                    for name in sorted({*have, *want}) if have.get(name) != want.get(name)}
    return {}


def _grammar_or_none(d: BaseDistribution | None) -> str | None:
    return None if d is None else grammar(d)


def check(study: optuna.Study, plan: Any, study_name: str, url: str) -> None:
    """Before a sweep touches the study: refuse it (UserError) when the study answers another
    question than `plan`'s (a plan.Plan, which imports this module: its task, space.
    distributions, question and varied): another task, another search space, or another config. A part the
    study does not hold yet (a study from before its record, or a new one) is not compared.
    A study from before the config's record is read back from a run dir of its trials (their
    .hydra/config.yaml), when one is on this machine."""
    want = plan.question
    diff: dict[str, tuple[Any, Any]] = {}
    if want is not None:
        have = study.user_attrs.get(QUESTION_ATTR)
        if have is None and (have := _from_run_dirs(study, plan.varied, plan.hook)) is not None:
            # an old run dir lacks the keys added since it ran (at their old defaults:
            # KEYS_BEFORE)
            want = {k: v for k, v in want.items() if k in have}
        if have is not None:
            diff = differences(have, want)
    space = space_differences(study, plan.space.distributions,
                              more=getattr(plan, "custom", None) is not None)
    task = _task_difference(study.user_attrs.get(TASK_ATTR), plan.task)
    if diff or space or task:
        raise UserError(refusal(study_name, url, diff, space, task))


def _task_difference(have: Any, want: str | None) -> tuple[str, str] | None:
    return (have, want) if have is not None and want is not None and have != want else None


def record(study: optuna.Study, plan: Any, study_name: str, url: str) -> None:
    """Once every check passed: keep this sweep's task and config in a study that has none (its
    space is in the trials it asks)."""
    attrs = study.user_attrs
    if plan.task is not None and TASK_ATTR not in attrs:
        study.set_user_attr(TASK_ATTR, plan.task)
    if plan.question is not None and QUESTION_ATTR not in attrs:
        study.set_user_attr(QUESTION_ATTR, plan.question)
    # Two sweepers that opened a new study at once both wrote: the later write stands, and
    # the sweeper whose question it is not stops here.
    attrs = study.user_attrs  # read again from the storage
    diff = differences(attrs[QUESTION_ATTR], plan.question) if plan.question is not None else {}
    task = _task_difference(attrs.get(TASK_ATTR), plan.task)
    if diff or task:
        raise UserError(refusal(study_name, url, diff, task=task))


def _from_run_dirs(study: optuna.Study, varied: Iterable[str], hook: TaskHook
                   ) -> dict[str, Any] | None:
    """The question of a study from before QUESTION_ATTR, from the config of the first run dir
    of its counted trials that is on this machine; None when none is (then the study's question
    is this sweep's from now on, said in the log)."""
    trials = [t for t in study.get_trials(deepcopy=False)
              if t.user_attrs.get(STATUS_ATTR) in COUNTED]
    for t in trials:
        for run_dir in (t.user_attrs.get(JOB_DIRS_ATTR) or {}).values():
            config = rundir.read_config(run_dir)
            if config:  # asked as the plan asks it
                return question(config, varied, hook)
    if trials:
        log.warning("study %s holds %d trial(s) from before studies kept their config, and "
                    "none of their run dirs is here: this sweep's config is not compared to "
                    "theirs, and is kept as the study's from now on", study.study_name,
                    len(trials))
    return None
