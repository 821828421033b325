"""A race's settings (hydra.sweeper.race), every one checked before a study is touched: the
candidates (the grid's points), the blocks (replicate combinations) they race over, and the
rules that take a candidate out (qknorm/sweep/racestats.py)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from qknorm.config import rungs_problem
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
    rungs: tuple[int, ...]  # steps at which a run is judged inside its block; (): never
    margin: float  # a run stops when its val loss is above the best other's by more
    budget_steps: int | None = None  # no block launches once the race's runs took this many
    equivalence: float | None = None  # δ: a candidate level with the leader within ±δ leaves
    # Each rung's own margin (rungs given as a mapping step -> margin), in rung order; ():
    # `margin` at every rung. Margins that are all equal are stored as `margin`: the same race.
    margins: tuple[float, ...] = ()
    # The looks' test (multitest): corrected over folds, paired over seeds (plan.Planner picks
    # it from the replicate keys and the fold layout, hydra.sweeper.race.test overrides).
    test: ReplicateTest = PAIRED_T
    # A racing search (qknorm/sweep/race_search.py): the sampler that proposes the candidates
    # one at a time (tpe, gp, random); None: a race over the grid's candidates.
    search: str | None = None
    explore: float = 0.8  # a search's share of budget_steps for new proposals (RaceConf)

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


def _rungs(rungs: list[int] | dict[int, float] | None, margin: float,
           direction: str) -> tuple[tuple[int, ...], float, tuple[float, ...]]:
    """In-fold stopping's settings, checked as far as they go without the task's config (the
    plan checks the rungs against train.max_iters and train.eval_interval): the rungs, the one
    margin and each rung's own margin (() when one margin serves every rung)."""
    if not rungs:
        return (), float(margin), ()
    steps = sorted(rungs) if isinstance(rungs, dict) else rungs  # a mapping has no order to keep
    problem = rungs_problem(steps, max_iters=math.inf, eval_interval=1)
    if problem:
        raise UserError(f"hydra.sweeper.race.rungs={rungs!r} {problem}")
    per_rung = [rungs[r] for r in steps] if isinstance(rungs, dict) else [margin]
    for step, m in zip(steps, per_rung, strict=False):
        if math.isfinite(m) and m > 0:
            continue
        if isinstance(rungs, dict):
            raise UserError(f"hydra.sweeper.race.rungs={rungs!r} has margin {m:g} at step "
                            f"{step}: each rung's margin must be a number > 0 (val loss units: "
                            "how far behind the best run of a fold a run may be there), e.g. "
                            "{500: 0.1, 1000: 0.05}")
        raise UserError(f"hydra.sweeper.race.margin={margin:g} must be a number > 0 (val loss "
                        "units: how far behind the best run of a fold a run may be at a "
                        "rung), e.g. 0.05")
    if direction != "minimize":
        raise UserError("hydra.sweeper.race.rungs judge runs on val loss (lower is better), "
                        "but the race maximizes its objective; set rungs: null")
    if isinstance(rungs, dict) and len(set(per_rung)) > 1:
        return tuple(steps), float(margin), tuple(float(m) for m in per_rung)
    return tuple(steps), float(per_rung[0]), ()


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


