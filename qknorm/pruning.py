"""The job side of an Optuna trial: report val loss at every eval, stop when pruned.

The qknorm_optuna sweeper sets optuna.{study_name,storage,trial} on each job it launches. The
job reopens the study, rebuilds the pruner its trial was asked under (stored in the trial's
user attrs), reports val_loss at each eval and raises RunPruned when the pruner says so.
Outside a study (optuna.trial null) there is no hook and optuna is never imported.

With replicates, several jobs share one trial: each reports its own val_loss (the last one to
reach a step is the trial's value there), and the first job pruned marks the trial so its
sibling jobs stop at their next eval too. A race's job also checks its rungs (qknorm/rungs.py):
stopped there, it ends as pruned too, and only its own block is marked.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from qknorm import rungs
from qknorm.config import OptunaTrialConfig
from qknorm.errors import RunPruned, UserError

log = logging.getLogger(__name__)

EvalHook = Callable[[int, dict[str, Any]], None]


def eval_hook(cfg: OptunaTrialConfig) -> EvalHook | None:
    if cfg.trial is None:
        return None
    if not (cfg.study_name and cfg.storage):
        raise UserError("optuna.trial is set but optuna.study_name or optuna.storage is not; "
                        "these keys are set by the qknorm_optuna sweeper, leave them null")
    import optuna  # only jobs of a study pay for the import

    from hydra_plugins.qknorm_sweeper import _specs as optuna_specs

    storage = optuna_specs.open_storage(cfg.storage)
    try:
        study_id = storage.get_study_id_from_name(cfg.study_name)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, cfg.trial)
    except KeyError:
        raise UserError(f"optuna.trial={cfg.trial} of study {cfg.study_name!r} is not in "
                        f"{cfg.storage}; these keys are set by the sweeper") from None
    spec = storage.get_trial(trial_id).user_attrs.get(optuna_specs.PRUNER_ATTR, {"name": "none"})
    # RandomSampler: Trial() consults the study's sampler; the job must not run TPE or GP.
    study = optuna.load_study(study_name=cfg.study_name, storage=storage,
                              sampler=optuna.samplers.RandomSampler(),
                              pruner=optuna_specs.build_pruner(spec))
    if len(study.directions) > 1:
        return None  # Optuna neither stores intermediate values nor prunes multi-objective
    trial = optuna.Trial(study, trial_id)
    lost = rungs.judge(storage, study, trial_id, cfg.race)  # a race's in-fold stopping
    reporting = True

    def on_eval(step: int, row: dict[str, Any]) -> None:
        nonlocal reporting
        if not reporting or not math.isfinite(row["val_loss"]):
            return  # a non-finite loss is the training loop's business (diverged)
        try:
            siblings = storage.get_trial(trial_id).user_attrs
            if siblings.get(optuna_specs.PRUNED_STEP_ATTR) is not None:
                raise RunPruned(step)  # a sibling replicate was pruned: so is the trial
            trial.report(row["val_loss"], step)
            prune = trial.should_prune()
            if prune:
                trial.set_user_attr(optuna_specs.PRUNED_STEP_ATTR, step)
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
