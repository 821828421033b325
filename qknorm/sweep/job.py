"""The job side of an Optuna trial: report val loss at every eval, stop when pruned.

The qknorm_optuna sweeper sets optuna.{study_name,storage,trial} on each job it launches. The
job reopens the study, rebuilds the pruner its trial was asked under (stored in the trial's
user attrs), reports val_loss at each eval and raises RunPruned when the pruner says so.
Outside a study (optuna.trial null) there is no hook and optuna is never imported.

With replicates, several jobs share one trial: each reports its own val_loss, the first one to
reach a step gives the trial's value there (the others skip that step: Optuna would ignore
them, with a warning), and the first job pruned marks the trial so its sibling jobs stop at
their next eval too.

A race's job also checks its rungs (hydra.sweeper.race.rungs): at each rung (an eval step in
optuna.race.rungs) it records its val loss in its trial (user attr `race_rungs:<block>`), reads
the values the other candidates' runs of the same block recorded at that rung, and stops
(RunPruned, final.json status `pruned`) when it is above the best of them by more than
optuna.race.margin (or that rung's entry of optuna.race.margins, when the race gave each rung
its own), leaving `race_stop:<block>` for the sweeper, which takes the candidate out
of the race. The rule itself is race.looks.stop_at_rung.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

from qknorm.config import OptunaTrialConfig, RaceRungsConfig
from qknorm.errors import RunPruned, UserError
from qknorm.hooks import EvalHook
from qknorm.sweep.race import looks
from qknorm.sweep.study import (
    PRUNED_STEP_ATTR,
    PRUNER_ATTR,
    RACE_CANDIDATE_ATTR,
    RACE_RUNG_ATTR,
    RACE_STOP_ATTR,
)

log = logging.getLogger(__name__)


def eval_hook(cfg: OptunaTrialConfig) -> EvalHook | None:
    if cfg.trial is None:
        return None
    if not (cfg.study_name and cfg.storage):
        raise UserError("optuna.trial is set but optuna.study_name or optuna.storage is not; "
                        "these keys are set by the qknorm_optuna sweeper, leave them null")
    import optuna  # only jobs of a study pay for the import

    from qknorm.sweep import specs

    storage = specs.open_storage(cfg.storage)
    try:
        study_id = storage.get_study_id_from_name(cfg.study_name)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, cfg.trial)
    except KeyError:
        raise UserError(f"optuna.trial={cfg.trial} of study {cfg.study_name!r} is not in "
                        f"{cfg.storage}; these keys are set by the sweeper") from None
    spec = storage.get_trial(trial_id).user_attrs.get(PRUNER_ATTR, {"name": "none"})
    # RandomSampler: Trial() consults the study's sampler; the job must not run TPE or GP.
    study = optuna.load_study(study_name=cfg.study_name, storage=storage,
                              sampler=optuna.samplers.RandomSampler(),
                              pruner=specs.build_pruner(spec))
    if len(study.directions) > 1:
        return None  # Optuna neither stores intermediate values nor prunes multi-objective
    trial = optuna.Trial(study, trial_id)
    lost = judge(storage, study, trial_id, cfg.race)  # a race's in-fold stopping
    reporting = True

    def on_eval(step: int, row: dict[str, Any]) -> None:
        nonlocal reporting
        if not reporting or not math.isfinite(row["val_loss"]):
            return  # a non-finite loss is the training loop's business (diverged)
        try:
            frozen = storage.get_trial(trial_id)
            if frozen.user_attrs.get(PRUNED_STEP_ATTR) is not None:
                raise RunPruned(step)  # a sibling replicate was pruned: so is the trial
            # A trial holds one value per step: the first replicate to reach a step reports it.
            # Optuna ignores a second report of a step and logs "The reported value is ignored
            # because this step is already reported" at every eval of every later fold, which
            # users read as an error; the ignoring is what we want, so we skip the report.
            if step not in frozen.intermediate_values:
                trial.report(row["val_loss"], step)
            prune = trial.should_prune()
            if prune:
                trial.set_user_attr(PRUNED_STEP_ATTR, step)
            elif lost is not None:
                prune = lost(step, row["val_loss"])
        except optuna.exceptions.UpdateFinishedTrialError:
            # The sweeper that launched this job is gone and its trial was closed: train on,
            # report nothing more.
            log.warning("trial %d is already finished; not reporting any more", cfg.trial)
            reporting = False
            return
        if prune:
            raise RunPruned(step)

    return on_eval


Judge = Callable[[int, float], bool]  # (step, val loss) -> stop now


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


def judge(storage: Any, study: Any, trial_id: int, cfg: RaceRungsConfig) -> Judge | None:
    """The rung check of one job (its trial's storage and study), or None when the job is not
    a race's (no block)."""
    if cfg.block is None:
        return None
    block = cfg.block
    # Each rung's margin: its own (race.margin given as a list) or the one margin; None for the
    # baseline: others are judged against its values, it never stops.
    margins = (dict(zip(cfg.rungs, cfg.margins, strict=True)) if cfg.margins
               else dict.fromkeys(cfg.rungs, cfg.margin))
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
