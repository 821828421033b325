"""In-fold stopping in a race (hydra.sweeper.race.rungs), the job's side: record, judge, stop.

A race's job runs one candidate on one block (e.g. data.fold=0). At each rung (an eval step
in optuna.race.rungs) it records its val loss in its trial (user attr `race_rungs:<block>`),
reads the values the other candidates' runs of the same block recorded at that rung, and stops
(RunPruned, final.json status `pruned`) when it is above the best of them by more than
optuna.race.margin, leaving `race_stop:<block>` (the step, Δ and the best) for the sweeper,
which takes the candidate out of the race. The rule itself is qknorm.race.stop_at_rung.
pruning.eval_hook calls this at every eval; it is built only for a race's jobs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from qknorm import race
from qknorm.config import RaceRungsConfig

Judge = Callable[[int, float], bool]  # (step, val loss) -> stop now


def rung_values(trials: Iterable[Any], block: str, step: int, mine: str | None) -> dict[str, float]:
    """The other candidates' val loss at `step` of `block`, by candidate label, from the
    study's trials. A candidate can have several trials (a killed sweeper's and its retry):
    the runs are the same, keep the lowest. My own candidate's trials are not others."""
    out: dict[str, float] = {}
    for t in trials:
        label = t.user_attrs.get(race.CANDIDATE_ATTR)
        value = t.user_attrs.get(race.RUNG_ATTR + block, {}).get(str(step))
        if label is None or label == mine or value is None or not math.isfinite(value):
            continue
        out[label] = min(out.get(label, math.inf), value)
    return out


def judge(storage: Any, study: Any, trial_id: int, cfg: RaceRungsConfig) -> Judge | None:
    """The rung check of one job (its trial's storage and study), or None when the job is not
    a race's (no block)."""
    if cfg.block is None:
        return None
    block, rungs = cfg.block, set(cfg.rungs)
    mine = storage.get_trial(trial_id).user_attrs.get(race.CANDIDATE_ATTR)
    recorded: dict[str, float] = {}

    def at_eval(step: int, val_loss: float) -> bool:
        if step not in rungs:
            return False
        recorded[str(step)] = val_loss
        storage.set_trial_user_attr(trial_id, race.RUNG_ATTR + block, dict(recorded))
        if cfg.margin is None:  # the baseline: others are judged against it, it never stops
            return False
        others = rung_values(study.get_trials(deepcopy=False), block, step, mine)
        stop = race.stop_at_rung(val_loss, others, cfg.margin)
        if stop is None:
            return False
        storage.set_trial_user_attr(trial_id, race.STOP_ATTR + block, {
            "step": step, "value": val_loss, "best": stop.best, "best_value": stop.best_value,
            "delta": stop.delta})
        return True

    return at_eval
