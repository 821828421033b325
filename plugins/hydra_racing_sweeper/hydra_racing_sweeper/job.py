"""What `hydra_racing_sweeper.trial.report` does inside a sweep: report a job's value to its trial,
and say when to stop (the API and how a job learns its trial: hydra_racing_sweeper/trial.py).

The job reopens the study, rebuilds the pruner its trial was asked under (stored in the trial's
user attrs), reports each value and says stop when the pruner prunes. Each report also records
the job's progress in its output dir (identity.REPORTED_FILE: the last step, the seconds since its
first report, and the step it was stopped at), which the sweeper reads back for a task that
writes no final.json (its status, steps and pace: launcher.job_result).

With replicates, several jobs share one trial: each reports its own values, the first one to
reach a step gives the trial's value there (the others skip that step: Optuna would ignore
them, with a warning), and the first job pruned marks the trial so its sibling jobs stop at
their next report too.

A race's job also checks its rungs (hydra.sweeper.race.rungs): at each rung (a step in its
identity's rungs) it records its value in its trial (user attr `race_rungs:<block>`), reads
the values the other candidates' runs of the same block recorded at that rung, and stops
when it is above the best of them by more than its margin (or that rung's entry of its
margins, when the race gave each rung its own), leaving `race_stop:<block>` for the sweeper,
which takes the candidate out of the race. The rule itself is race.looks.stop_at_rung.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from hydra_racing_sweeper.errors import UserError
from hydra_racing_sweeper.identity import REPORTED_FILE, STORAGE, STUDY, TRIAL, Identity
from hydra_racing_sweeper.race import looks
from hydra_racing_sweeper.study import (
    PRUNED_STEP_ATTR,
    PRUNER_ATTR,
    RACE_CANDIDATE_ATTR,
    RACE_RUNG_ATTR,
    RACE_STOP_ATTR,
)

log = logging.getLogger(__name__)

Reporter = Callable[[int, float], bool]  # (step, value) -> stop now


def reporter(me: Identity) -> Reporter:
    """The report function of one job (trial.report calls it)."""
    import optuna

    storage, trial_id = _open_trial(me)
    study = _trial_study(storage, trial_id, me.study_name)
    # Optuna neither stores intermediate values nor prunes multi-objective studies.
    single = len(study.directions) == 1
    pruning = single and not isinstance(study.pruner, optuna.pruners.NopPruner)
    trial = optuna.Trial(study, trial_id)
    lost = judge(storage, study, trial_id, me)  # a race's in-fold stopping
    record = _progress_record()
    state: dict[str, Any] = {"reporting": True, "stopped": None, "reported": set(),
                             "last": None, "warned": False}

    def report(step: int, value: float) -> bool:
        if state["stopped"] is not None:
            return True
        if not state["reporting"] or not math.isfinite(value):
            return False  # a non-finite value is the task's business (diverged)
        if state["last"] is not None and step <= state["last"]:
            return _ignored(state, step)
        state["last"] = step
        try:
            prune = _report(step, value)
        except optuna.exceptions.UpdateFinishedTrialError:
            # The sweeper that launched this job is gone and its trial was closed: run on,
            # report nothing more.
            log.warning("trial %d is already finished; not reporting any more", me.trial)
            state["reporting"] = False
            return False
        if prune:
            state["stopped"] = step
        record(step, state["stopped"])
        return prune

    def _report(step: int, value: float) -> bool:
        # A trial holds one value per step: the first replicate to reach a step reports it.
        # Optuna ignores a second report of a step and logs "The reported value is ignored
        # because this step is already reported" at every eval of every later fold, which
        # users read as an error; the ignoring is what we want, so we skip the report. Without
        # replicates (no block) the job is the trial's only one: no read before each report.
        frozen = storage.get_trial(trial_id) if me.block or pruning else None
        if frozen is not None and frozen.user_attrs.get(PRUNED_STEP_ATTR) is not None:
            return True  # a sibling replicate was pruned: so is the trial
        taken = frozen.intermediate_values if frozen is not None else state["reported"]
        if single and step not in taken:
            trial.report(value, step)
            state["reported"].add(step)
        if pruning and trial.should_prune():
            trial.set_user_attr(PRUNED_STEP_ATTR, step)
            return True
        return lost is not None and lost(step, value)

    return report


def _open_trial(me: Identity) -> tuple[Any, int]:
    """The storage and the trial's id the identity names; one line when it names none."""
    from hydra_racing_sweeper import specs

    storage = specs.open_storage(me.storage)
    try:
        study_id = storage.get_study_id_from_name(me.study_name)
        return storage, storage.get_trial_id_from_study_id_trial_number(study_id, me.trial)
    except KeyError:
        raise UserError(f"{TRIAL}={me.trial}: trial {me.trial} of study {me.study_name!r} is not "
                        f"in {me.storage}; {STUDY}, {STORAGE} and {TRIAL} are set by the "
                        "racing sweeper on its jobs: unset them") from None


def _ignored(state: dict[str, Any], step: int) -> bool:
    """A repeat, or a step that goes back (a count restarted each epoch): the trial has a value
    there or past it, and the job's steps stay the furthest it reached. Said once a job."""
    if not state["warned"]:
        log.warning("trial.report(step=%d) after step %d is ignored, as every step at or before "
                    "the last one reported: report steps that increase (the global step, not "
                    "one that restarts each epoch)", step, state["last"])
        state["warned"] = True
    return False


def _trial_study(storage: Any, trial_id: int, name: str) -> Any:
    """The study with the pruner the trial was asked under (its user attr PRUNER_ATTR)."""
    import optuna

    from hydra_racing_sweeper import specs

    spec = storage.get_trial(trial_id).user_attrs.get(PRUNER_ATTR, {"name": "none"})
    # RandomSampler: Trial() consults the study's sampler; the job must not run TPE or GP.
    return optuna.load_study(study_name=name, storage=storage, pruner=specs.build_pruner(spec),
                             sampler=optuna.samplers.RandomSampler())


def _progress_record() -> Callable[[int, int | None], None]:
    """Writes the job's last step, its seconds since its first report and the step it was
    stopped at to REPORTED_FILE in its Hydra output dir, where the sweeper reads them back
    (launcher.job_result): a file, not the study, so a report costs no extra database write.
    Outside a Hydra job (no output dir) it writes nothing."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return lambda step, stopped: None
    path = Path(HydraConfig.get().runtime.output_dir) / REPORTED_FILE
    start = time.perf_counter()

    def record(step: int, stopped: int | None) -> None:
        path.write_text(json.dumps({"step": step, "seconds": time.perf_counter() - start,
                                    "stopped": stopped}))

    return record


Judge = Callable[[int, float], bool]  # (step, value) -> stop now


def rung_values(trials: Iterable[Any], block: str, step: int, mine: str | None) -> dict[str, float]:
    """The other candidates' val loss at `step` of `block`, by candidate label, from the
    study's trials. A candidate can have several trials (a killed sweeper's and its retry):
    the runs are the same, keep the lowest. My own candidate's trials are not others."""
    out: dict[str, float] = {}
    for t in trials:
        label = t.user_attrs.get(RACE_CANDIDATE_ATTR)
        value = t.user_attrs.get(RACE_RUNG_ATTR + block, {}).get(str(step))
        if label is None or label == mine or value is None or not math.isfinite(value):
            continue
        out[label] = min(out.get(label, math.inf), value)
    return out


def judge(storage: Any, study: Any, trial_id: int, me: Identity) -> Judge | None:
    """The rung check of one job (its trial's storage and study), or None when the job is not
    judged at rungs (a race's without rungs, or no race's)."""
    if not me.rungs:
        return None
    block = me.block
    # Each rung's margin: its own (race.margin given as a list) or the one margin; None for the
    # baseline: others are judged against its values, it never stops.
    margins = (dict(zip(me.rungs, me.margins, strict=True)) if me.margins
               else dict.fromkeys(me.rungs, me.margin))
    mine = storage.get_trial(trial_id).user_attrs.get(RACE_CANDIDATE_ATTR)
    recorded: dict[str, float] = {}
    # Rungs this run passed before any other run of the block had reached them: with a
    # launcher running several jobs at once, the run beside the baseline gets there at the
    # same moment. It is judged at a later eval, on its value and the others' at that rung.
    unjudged: list[int] = []

    def at_eval(step: int, val_loss: float) -> bool:
        if step in margins:
            recorded[str(step)] = val_loss
            storage.set_trial_user_attr(trial_id, RACE_RUNG_ATTR + block, dict(recorded))
            if margins[step] is not None:  # the baseline: recorded, never judged
                unjudged.append(step)
        if not unjudged:
            return False
        trials = study.get_trials(deepcopy=False)
        for rung in list(unjudged):
            others = rung_values(trials, block, rung, mine)
            if not others:
                continue
            unjudged.remove(rung)
            stop = looks.stop_at_rung(recorded[str(rung)], others, margins[rung])
            if stop is not None:
                storage.set_trial_user_attr(trial_id, RACE_STOP_ATTR + block, {
                    "step": rung, "value": recorded[str(rung)], "best": stop.best,
                    "best_value": stop.best_value, "delta": stop.delta,
                    **({"at": step} if step != rung else {})})
                return True
        return False

    return at_eval
