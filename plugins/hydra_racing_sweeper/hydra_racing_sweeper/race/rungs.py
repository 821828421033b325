"""A race's rungs (hydra.sweeper.race.rungs and .margin): where a run is judged inside its
replicate, checked as written (fractions of train.max_iters, or whole steps) and resolved to
the eval steps of runs of a given length. Pure (no Hydra, no Optuna): the settings
(hydra_racing_sweeper/race/settings.py), the plan (hydra_racing_sweeper/plan.py, with the run lengths of the
candidates' composed jobs) and the research replays (qknorm/research) call it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

from hydra_racing_sweeper.errors import UserError

log = logging.getLogger(__name__)


def _is_margin(m: Any) -> bool:
    return isinstance(m, (int, float)) and not isinstance(m, bool) and math.isfinite(m) and m > 0


def _rung_kind(r: Any) -> str | None:
    """'fraction' (of train.max_iters, in (0, 1)), 'step' (a whole step >= 1), None: neither."""
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
        return None
    if 0 < r < 1:
        return "fraction"
    return "step" if r >= 1 and float(r).is_integer() else None


def checked_rungs(rungs: Any, margin: Any) -> tuple[tuple[int | float, ...], tuple[float, ...]]:
    """hydra.sweeper.race.rungs and .margin as written, checked without the task's config: the
    rungs (fractions of train.max_iters in (0, 1), or whole steps >= 1, as ints) and each
    one's margin. UserError, one line naming the value and the fix, on anything else."""
    key, example = "hydra.sweeper.race.rungs", "e.g. [0.25, 0.5] (fractions of train.max_iters)"
    if not rungs:
        return (), ()
    if isinstance(rungs, dict):  # the form before rungs were fractions: {500: 0.1, 1000: 0.04}
        raise UserError(f"{key}={rungs!r}: rungs are a list and their margins another, not a "
                        f"mapping; write {key}=[{','.join(map(str, rungs))}] hydra.sweeper.race."
                        f"margin=[{','.join(map(str, rungs.values()))}]")
    if not isinstance(rungs, (list, tuple)):
        raise UserError(f"{key}={rungs!r} must be a list, {example}, or null for none")
    kinds = [_rung_kind(r) for r in rungs]
    for r, kind in zip(rungs, kinds, strict=True):
        if kind is None:
            raise UserError(f"{key}={list(rungs)} has {r!r}: a rung is a fraction of "
                            "train.max_iters in (0, 1), e.g. 0.25, or a whole training step "
                            ">= 1, e.g. 500")
    if len(set(kinds)) > 1:
        raise UserError(f"{key}={list(rungs)} mixes fractions of train.max_iters and steps; "
                        f"give all as one, {example}")
    if any(b <= a for a, b in zip(rungs, rungs[1:])):
        raise UserError(f"{key}={list(rungs)} must be increasing, {example}")
    margins = list(margin) if isinstance(margin, (list, tuple)) else [margin] * len(rungs)
    if len(margins) != len(rungs):
        raise UserError(f"hydra.sweeper.race.margin={margins} gives {len(margins)} margin(s) "
                        f"for the {len(rungs)} rung(s) of {key}={list(rungs)}; give one per "
                        "rung, or one number for every rung, e.g. hydra.sweeper.race.margin=0.05")
    if not all(_is_margin(m) for m in margins):
        shown = f"{margin:g}" if isinstance(margin, (int, float)) else margin
        raise UserError(f"hydra.sweeper.race.margin={shown} must be a number > 0 (val loss "
                        "units: how far behind the best run of a fold a run may be at a rung), "
                        "e.g. 0.05, or one such number per rung, e.g. [0.1, 0.04]")
    steps = [int(r) if kind == "step" else r for r, kind in zip(rungs, kinds, strict=True)]
    return tuple(steps), tuple(float(m) for m in margins)


class Dropped(NamedTuple):
    """A rung left out for runs of this length (resolve_rungs): as written, its step, why."""
    rung: int | float
    step: int
    why: str

    def __str__(self) -> str:
        return f"{self.rung:g} (step {self.step}: {self.why})"


def resolve_rungs(rungs: Any, margin: Any, max_iters: int, eval_interval: int
                  ) -> tuple[tuple[int, ...], tuple[float, ...], list[Dropped]]:
    """The rungs as eval steps of runs of max_iters steps that evaluate every eval_interval
    steps, each rung's margin, and the rungs that do not fit, left out: a fraction f is the
    largest multiple of eval_interval at or below f * max_iters (a run is judged at its
    evals); a step is itself and must be an eval step (UserError: it was typed as one). A
    rung at step 0 or at/after max_iters, or at a step an earlier rung has, is dropped.
    Pure (no Hydra): the plan and the research replays (qknorm/research) call it."""
    values, margins = checked_rungs(rungs, margin)
    steps: list[int] = []
    kept: list[float] = []
    dropped: list[Dropped] = []
    for value, m in zip(values, margins, strict=True):
        if isinstance(value, int):
            step = value
            if step % eval_interval:
                raise UserError(f"hydra.sweeper.race.rungs={list(values)} has {step}, not an "
                                "eval step (a multiple of train.eval_interval="
                                f"{eval_interval}); use e.g. "
                                f"{max(1, step // eval_interval) * eval_interval}")
        else:  # + 1e-9: 0.29 * 100 is 28.999999999999996 in floats, and means step 29
            step = math.floor(value * max_iters / eval_interval + 1e-9) * eval_interval
        why = ("before the first eval" if step == 0 else
               f"not before train.max_iters={max_iters}, the run's end" if step >= max_iters
               else "an earlier rung's step" if step in steps else None)
        if why:
            dropped.append(Dropped(value, step, why))
        else:
            steps.append(step)
            kept.append(m)
    return tuple(steps), tuple(kept), dropped


def judged_at(rungs: Any, margin: Any, lengths: Iterable[tuple[Any, Any]]
              ) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The steps and margins every candidate's runs are judged at, from each one's run length
    (train.max_iters, train.eval_interval, as its job's config has them): one resolution for
    all, else UserError; the rungs that do not fit are dropped, in one log line."""
    resolved = {}
    for length in lengths:
        if not all(isinstance(n, int) and n > 0 for n in length):
            raise UserError("hydra.sweeper.race.rungs as fractions needs a run's steps and "
                            "eval interval > 0 from the task's hook (TaskHook.length: "
                            f"{length}); set rungs: null")
        resolved[tuple(length)] = resolve_rungs(rungs, margin, *length)
    if len({(steps, margins) for steps, margins, _ in resolved.values()}) > 1:
        raise UserError(f"hydra.sweeper.race.rungs={list(rungs)} gives the candidates "
                        "different steps (their train.max_iters, train.eval_interval: "
                        f"{', '.join(f'{n}, {e}' for n, e in resolved)}); give one run "
                        "length to every candidate, or whole steps that fit every one")
    (max_iters, every), (steps, margins, dropped) = next(iter(resolved.items()))
    if dropped:
        log.warning("hydra.sweeper.race.rungs=%s at train.max_iters=%d (an eval every %d "
                    "steps): dropped rung %s; %s", list(rungs), max_iters, every,
                    ", ".join(map(str, dropped)),
                    f"the runs are judged at step {', '.join(map(str, steps))}" if steps
                    else "no rung is left: the race runs without in-fold stopping")
    return steps, margins
