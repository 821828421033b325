"""A race's settings (hydra.sweeper.race), every one checked before a study is touched: the
candidates (the grid's points), the blocks (replicate combinations) they race over, and the
rules that take a candidate out (qknorm/sweep/racestats.py)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from qknorm.errors import UserError
from qknorm.multitest import PAIRED_T, ReplicateTest
from qknorm.sweep.conf import RaceConf
from qknorm.sweep.space import SearchSpace, format_value

SEARCH_SAMPLERS = ("tpe", "gp", "random")  # what may propose a racing search's candidates


@dataclass(frozen=True)
class RaceSpec:
    min_replicates: int
    alpha: float
    baseline: Hashable | None  # the baseline's candidate key (trial params, in space order)
    candidates: tuple[Hashable, ...]  # every grid point, in grid order
    labels: dict[Hashable, str]  # candidate -> "norm.p=2.0"
    blocks: tuple[str, ...]  # replicate combinations as labels, in launch order
    sign: float  # +1 minimize, -1 maximize: the race always lowers sign * value
    # Steps at which a run is judged inside its block; (): never. As written (fractions of
    # train.max_iters too) until plan.Planner resolves them (with_rungs).
    rungs: tuple[int | float, ...]
    margin: float  # a run stops when its val loss is above the best other's by more
    budget_steps: int | None = None  # no block launches once the race's runs took this many
    equivalence: float | None = None  # δ: a candidate level with the leader within ±δ leaves
    # Each rung's own margin (hydra.sweeper.race.margin as a list), in rung order; ():
    # `margin` at every rung. Margins that are all equal are stored as `margin`: the same race.
    margins: tuple[float, ...] = ()
    # The looks' test (multitest): corrected over folds, paired over seeds (plan.Planner picks
    # it from the replicate keys and the fold layout, hydra.sweeper.race.test overrides).
    test: ReplicateTest = PAIRED_T
    # A racing search (qknorm/sweep/race_search.py): the sampler that proposes the candidates
    # one at a time (tpe, gp, random); None: a race over the grid's candidates.
    search: str | None = None
    explore: float = 0.8  # a search's share of budget_steps for new proposals (RaceConf)

    def with_rungs(self, steps: Sequence[int], margins: Sequence[float]) -> RaceSpec:
        """This race judged at these steps with these margins (the plan's resolved rungs)."""
        margin, each = _one_or_each(margins, self.margin)
        return dataclasses.replace(self, rungs=tuple(steps), margin=margin, margins=each)

    def margin_at(self, step: int) -> float:
        return dict(zip(self.rungs, self.margins))[step] if self.margins else self.margin

    def rung_words(self) -> str:
        """The rungs and their margins as the log says them: "1000 (margin 0.05)"."""
        return ", ".join(f"{r} (margin {self.margin_at(r):g})" for r in self.rungs)

    def settings(self) -> dict[str, Any]:
        """What a rerun must match (stored in the study): the same race, or another study.
        Without rungs, rungs and margin are None, as a study raced before they existed reads;
        so are budget_steps without a budget and equivalence without δ."""
        return {"min_replicates": self.min_replicates, "alpha": self.alpha,
                "baseline": self.labels.get(self.baseline), "blocks": list(self.blocks),
                "candidates": [self.labels[c] for c in self.candidates],
                "rungs": list(self.rungs) or None,
                "margin": (list(self.margins) if self.margins else self.margin if self.rungs
                           else None),
                "budget_steps": self.budget_steps, "equivalence": self.equivalence,
                # paired as None: how a study raced before the test was chosen reads
                "test": None if self.test == PAIRED_T else self.test.name,
                "ratio": None if self.test == PAIRED_T else self.test.ratio,
                **({"search": self.search, "sign": self.sign, "explore": self.explore}
                   if self.search else {})}

    def job_keys(self, candidate: Hashable, block: str) -> list[str]:
        """What a race's job needs to be judged at its rungs (qknorm/sweep/job.py); the baseline
        gets margin null: it records its values for the others and is never stopped."""
        judged = candidate != self.baseline
        margin = self.margin if judged and not self.margins else None
        keys = [f"optuna.race.block={format_value(block)}",
                f"optuna.race.rungs=[{','.join(map(str, self.rungs))}]",
                f"optuna.race.margin={format_value(margin)}"]
        if judged and self.margins:  # each rung its own margin (only then: jobs as before)
            keys.append(f"optuna.race.margins=[{','.join(map(format_value, self.margins))}]")
        return keys


def plan_race(conf: RaceConf | None, space: SearchSpace, blocks: list[str],
              directions: list[str], objectives: list[str], sampler: str, pruner: str,
              n_trials: int | None) -> RaceSpec | None:
    """The race, every value checked (UserError names the value and the fix; keys and types
    were checked by Hydra against RaceConf); None: off (race: null)."""
    if conf is None:
        return None
    search = None if sampler == "grid" else sampler
    if search is not None and sampler not in SEARCH_SAMPLERS:
        raise UserError(f"hydra.sweeper.race with sampler.name={sampler}: a race needs the grid "
                        f"sampler (every candidate at once) or one of {', '.join(SEARCH_SAMPLERS)}"
                        " (a search that races its proposals)")
    if pruner != "none":
        raise UserError(f"hydra.sweeper.race runs whole folds: set pruner: {{name: none}}, not "
                        f"pruner.name={pruner}")
    if len(objectives) != 1:
        raise UserError(f"hydra.sweeper.race races one objective, not {objectives}; keep one "
                        "in hydra.sweeper.objectives")
    if search is not None and n_trials is None:
        raise UserError("hydra.sweeper.n_trials=null: a search that races its proposals needs "
                        "a number of proposals, e.g. n_trials: 24")
    if search is not None and conf.baseline is not None:
        raise UserError(f"hydra.sweeper.race.baseline={format_value(conf.baseline)}: a search "
                        "races its proposals against its incumbent, not a baseline; set "
                        "baseline: null")
    if search is None and n_trials is not None and n_trials != space.grid_size:
        raise UserError(f"hydra.sweeper.n_trials={n_trials}: a race runs the whole grid; set "
                        f"n_trials: null (the grid's {space.grid_size} points)")
    minimum, alpha = conf.min_replicates, conf.alpha
    if minimum < 2:
        raise UserError(f"hydra.sweeper.race.min_replicates={minimum} must be >= 2 (a paired "
                        "t-test needs two pairs), e.g. 3")
    if not 0 < alpha < 1:
        raise UserError(f"hydra.sweeper.race.alpha={alpha:g} must be in (0, 1), e.g. 0.05")
    if blocks == [""]:
        raise UserError("hydra.sweeper.race needs replicates to race over; set e.g. "
                        "hydra.sweeper.replicates={data.fold:[0,1,2,3,4]}")
    if len(blocks) < minimum:
        raise UserError(f"hydra.sweeper.race.min_replicates={minimum} but the replicates give "
                        f"{len(blocks)} ({', '.join(blocks)}); list at least {minimum} or lower "
                        "min_replicates")
    candidates = ([] if search else
                  [tuple(c) for c in itertools.product(*(p.grid for p in space.params))])
    labels = {c: _candidate_label(space, c) for c in candidates}
    baseline = _baseline(conf.baseline, space, candidates)
    rungs, margin, margins = _rungs(conf.rungs, conf.margin, directions[0])
    return RaceSpec(minimum, float(alpha), baseline, tuple(candidates), labels, tuple(blocks),
                    1.0 if directions[0] == "minimize" else -1.0, rungs, margin,
                    _budget(conf.budget_steps), _equivalence(conf.equivalence), margins,
                    search=search, explore=_explore(conf.explore))


def _explore(value: float) -> float:
    if not 0 < value <= 1:
        raise UserError(f"hydra.sweeper.race.explore={value:g} must be in (0, 1]: the share "
                        "of budget_steps a search spends on new proposals before it confirms "
                        "its incumbent, e.g. 0.7")
    return float(value)


def _equivalence(value: float | None) -> float | None:
    if value is None:
        return None
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"hydra.sweeper.race.equivalence={value:g} must be a number > 0 (δ in "
                        "the objective's units, nats for a loss: candidates within ±δ of the "
                        "leader count as level), e.g. 0.02, or null for off")
    return float(value)


def _budget(value: Any) -> int | None:
    if value is None:
        return None
    if value < 1:
        raise UserError(f"hydra.sweeper.race.budget_steps={value!r} must be a whole number of "
                        "training steps >= 1 (summed over the race's runs), e.g. 26667 for a "
                        "third of paper_cpu's 80,000, or null for no budget")
    return value


def _rungs(rungs: Any, margin: Any,
           direction: str) -> tuple[tuple[int | float, ...], float, tuple[float, ...]]:
    """In-fold stopping's settings, checked as far as they go without the task's config (the
    plan resolves them against train.max_iters and train.eval_interval): the rungs as written,
    the one margin and each rung's own margin (() when one margin serves every rung)."""
    values, margins = checked_rungs(rungs, margin)
    if values and direction != "minimize":
        raise UserError("hydra.sweeper.race.rungs judge runs on val loss (lower is better), "
                        "but the race maximizes its objective; set rungs: null")
    return values, *_one_or_each(margins, margin)


def _one_or_each(margins: Sequence[float], margin: Any) -> tuple[float, tuple[float, ...]]:
    """(the one margin, ()) when every rung has the same (the same race, in the study too, as
    a single margin gives), else (the first, each rung's)."""
    if len(set(margins)) > 1:
        return float(margins[0]), tuple(margins)
    if margins:
        return float(margins[0]), ()
    return (float(margin) if isinstance(margin, (int, float)) else RaceConf.margin), ()


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


def step_margins(race: Mapping[str, Any], max_iters: int, eval_interval: int) -> dict[int, float]:
    """A race's settings as a preset writes them (conf/search/*.yaml's hydra.sweeper.race) ->
    {step: margin} for runs of max_iters steps (resolve_rungs; the dropped rungs left out)."""
    steps, margins, _ = resolve_rungs(race.get("rungs"), race.get("margin", RaceConf.margin),
                                      max_iters, eval_interval)
    return dict(zip(steps, margins, strict=True))


def _candidate_label(space: SearchSpace, candidate: Sequence[Any]) -> str:
    values = space.values(dict(zip((p.name for p in space.params), candidate, strict=True)))
    return " ".join(f"{k}={format_value(v)}" for k, v in values.items())


def _same(a: Any, b: Any) -> bool:
    """A baseline as written (2, 2.0, 'inf') against a config value (2.0, inf)."""
    try:
        return not isinstance(a, bool) and not isinstance(b, bool) and float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _baseline(value: Any, space: SearchSpace, candidates: list[tuple]) -> Hashable | None:
    if value is None:
        return None
    keys = [p.key for p in space.params]
    if not isinstance(value, dict):
        if len(keys) > 1:
            raise UserError(f"hydra.sweeper.race.baseline={format_value(value)} is ambiguous: "
                            f"the candidates vary {', '.join(keys)}; give each, e.g. baseline: "
                            f"{{{', '.join(f'{k}: ...' for k in keys)}}}")
        value = {keys[0]: value}
    names = [p.name for p in space.params]
    for c in candidates:
        config = space.values(dict(zip(names, c, strict=True)))
        if set(value) == set(config) and all(_same(value[k], config[k]) for k in config):
            return c
    shown = ", ".join(f"{k}={format_value(v)}" for k, v in value.items())
    choices = "; ".join(" ".join(f"{k}={format_value(v)}" for k, v in
                                 space.values(dict(zip(names, c, strict=True))).items())
                        for c in candidates)
    raise UserError(f"hydra.sweeper.race.baseline={shown} is not among the candidates "
                    f"({choices}); pick one of them, or null for none")


