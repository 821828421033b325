"""The question a study answers: the config its runs share, kept in the study (study user attr
QUESTION_ATTR) and checked by every sweeper that opens it.

A study's trials are answers to one question: "which p, for this model, these data, this
optimizer, this many steps?". That question is the effective config of its jobs
(qknorm.effective) less what a sweep varies inside it: the searched keys (a trial's params)
and the replicate keys (a trial's value is the mean over them). A rerun that asks another
question (train.max_iters=2000 after 10, optimizer.lr=3e-3 after 1e-3, another experiment)
must not find the old trials done and print their answer, nor mix both in one mean or one
best: it is refused before anything runs, naming the keys that differ and the flag that starts
a new study (hydra.sweeper.study_name). The same command resumes, as before.

Refused rather than named after a digest of the config: the study's name is what the status,
the report, the dashboard and `--study` show and take, and a typo in a key meant to resume
would silently start over in a new study; the refusal names the keys, and the user decides.

A key added to the config later must keep old studies' questions: it goes in
effective.KEYS_BEFORE at the value every earlier run had, as for the trials' digests.

Keys that say where or how fast a run is computed, not what (NOT_THE_QUESTION), and the
sweeper's own keys (hydra.*: n_trials, n_jobs, the launcher) are not part of the question.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import optuna

from qknorm import rundir
from qknorm.effective import effective_config
from qknorm.errors import UserError
from qknorm.sweep.study import COUNTED, JOB_DIRS_ATTR, QUESTION_ATTR, STATUS_ATTR

log = logging.getLogger(__name__)

# Where and how fast a run is computed, not what it computes: threads, device and compile may
# change the last bits of a loss, not the question (a study started on a CPU may go on on a
# GPU); `name` is the sweep folder's; a checkpoint is saved or resumed from, the run the same.
NOT_THE_QUESTION = ("threads", "device", "compile", "name", "train.save_checkpoint",
                    "train.resume")
SHOWN = 12  # differing keys named in the refusal (the rest counted): a line, not a dump


def question(flat: dict[str, Any], varied: Iterable[str]) -> dict[str, Any]:
    """A job's task config (flattened: effective.flatten of effective.task_tree, or a run dir's
    rundir.read_config) as the question its study answers: its effective config without
    `varied` (the searched and the replicate keys) and NOT_THE_QUESTION."""
    drop = {*varied, *NOT_THE_QUESTION}
    return {k: v for k, v in sorted(effective_config(flat).items()) if k not in drop}


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


def refusal(study_name: str, url: str, diff: dict[str, tuple[Any, Any]]) -> str:
    """The one line that refuses a sweep asking another question of a study."""
    shown = list(diff.items())[:SHOWN]
    more = f", and {len(diff) - SHOWN} more" if len(diff) > SHOWN else ""
    keys = f"{len(diff)} key{'s' if len(diff) > 1 else ''}"
    return (f"study {study_name!r} in {url} answers another question: its runs differ from "
            f"this sweep's in {keys} (the study's value -> this sweep's): "
            + ", ".join(f"{k} {_show(have)} -> {_show(want)}" for k, (have, want) in shown)
            + f"{more}; rerun with the study's values to add to it, or start a new study with "
            "hydra.sweeper.study_name=NEW_NAME")


def _show(value: Any) -> str:
    return "unset" if value is None else str(value)


def check(study: optuna.Study, want: dict[str, Any] | None, study_name: str, url: str,
          varied: Iterable[str]) -> None:
    """Before a sweep touches the study: refuse it (UserError) when the study answers another
    question. `want`: this sweep's question (None: the task is not qknorm's, its configs are
    not compared). A study from before the record is read back from a run dir of its trials
    (their .hydra/config.yaml), when one is on this machine."""
    if want is None:
        return
    have = study.user_attrs.get(QUESTION_ATTR)
    if have is None and (have := _from_run_dirs(study, varied)) is not None:
        # an old run dir lacks the keys added since it ran (at their old defaults: KEYS_BEFORE)
        want = {k: v for k, v in want.items() if k in have}
    if have is not None and (diff := differences(have, want)):
        raise UserError(refusal(study_name, url, diff))


def record(study: optuna.Study, want: dict[str, Any] | None, study_name: str, url: str) -> None:
    """Once every check passed: keep this sweep's question in a study that has none."""
    if want is None or QUESTION_ATTR in study.user_attrs:
        return
    study.set_user_attr(QUESTION_ATTR, want)
    # Two sweepers that opened a new study at once both wrote: the later write stands, and
    # the sweeper whose question it is not stops here.
    if diff := differences(study.user_attrs[QUESTION_ATTR], want):
        raise UserError(refusal(study_name, url, diff))


def _from_run_dirs(study: optuna.Study, varied: Iterable[str]) -> dict[str, Any] | None:
    """The question of a study from before QUESTION_ATTR, from the config of the first run dir
    of its counted trials that is on this machine; None when none is (then the study's question
    is this sweep's from now on, said in the log)."""
    trials = [t for t in study.get_trials(deepcopy=False)
              if t.user_attrs.get(STATUS_ATTR) in COUNTED]
    for t in trials:
        for run_dir in (t.user_attrs.get(JOB_DIRS_ATTR) or {}).values():
            config = rundir.read_config(run_dir)
            if config:
                return question(config, varied)
    if trials:
        log.warning("study %s holds %d trial(s) from before studies kept their config, and "
                    "none of their run dirs is here: this sweep's config is not compared to "
                    "theirs, and is kept as the study's from now on", study.study_name,
                    len(trials))
    return None
