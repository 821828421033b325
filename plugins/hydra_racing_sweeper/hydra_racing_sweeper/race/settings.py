"""A race's settings (hydra.sweeper.race): typed as written, then every value checked before a
study is touched: the candidates (the grid's points), the blocks (replicate combinations) they
race over, and the rules that take a candidate out (hydra_racing_sweeper/race/looks.py; a racing
search's, hydra_racing_sweeper/race/intensify.py).

hydra.sweeper.race stays a plain mapping in the sweeper's schema (the plugin's config.py):
OmegaConf cannot merge a command-line dict (`++hydra.sweeper.race={...}`) into a null
structured node, and null/{} must mean "no race". `race_conf` types the mapping through
OmegaConf against RaceConf, every default written there once, so a misspelt key or a value of
the wrong type fails with OmegaConf's own words, in one line, as any other config key does;
`plan_race` checks the values and makes the RaceSpec the schedules run. The rungs' own checks
and their resolution to eval steps are hydra_racing_sweeper/race/rungs.py's.
"""

# OmegaConf 2.3 reads typing.Optional/List in structured configs, not `X | None`.
# ruff: noqa: UP006, UP007, UP035, UP045

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hydra_racing_sweeper.errors import UserError, did_you_mean, first_line
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest, choose
from hydra_racing_sweeper.race.rungs import checked_rungs, resolve_rungs

log = logging.getLogger(__name__)


@dataclass
class RaceConf:
    # One key, two roles (docs/race.md, docs/search.md; the driver's Rules.min_blocks): in a race
    # over a grid, every candidate (grid point) runs the first min_replicates replicates; after
    # each further one, those significantly worse than the leader leave (one-sided t, Holm). In
    # a racing search, the replicates a challenger must run (and the incumbent have) to take
    # over.
    min_replicates: int = 3
    alpha: float = 0.05
    # The candidate never dropped, e.g. 2.0 (a p), or {norm: lp, norm.p: 2.0}; null: none.
    baseline: Any = None
    # Where a run is judged inside its replicate: more than its margin (val loss) above the best
    # other candidate's run of that replicate, it stops there and its candidate leaves. A list:
    # fractions of train.max_iters in (0, 1), e.g. [0.25, 0.5] (the plan resolves each to the
    # eval step at or below it, so one preset fits any run length), or whole steps >= 1.
    # `margin`: one number for every rung, or a list, one per rung, e.g. [0.1, 0.04]. Both are
    # lists, not a mapping step -> margin, so that `hydra.sweeper.race.rungs=[0.5]` on the command
    # line replaces the preset's list (Hydra merges a mapping into a mapping, and cannot merge
    # a list into one). Typed by race_conf: OmegaConf types no union of a number and a list.
    rungs: Any = None
    margin: Any = 0.05
    # No run launches that would take the runs past this many training steps
    # (hydra_racing_sweeper/race/driver.py); null: none.
    budget_steps: Optional[int] = None
    # δ (objective units, nats for a loss): at a look, a candidate whose paired (1 - 2 alpha)
    # t-interval of its difference to the leader lies inside [-δ, +δ] leaves, level with it
    # (TOST at alpha); the race ends once no comparison is open. null: off.
    equivalence: Optional[float] = None
    # The test of a look (hydra_racing_sweeper/multitest.py): auto (corrected resampled t over data.fold,
    # whose folds share training text; the plain paired t over seeds), corrected or paired.
    test: str = "auto"
    # A racing search (a tpe, gp or random sampler) makes new proposals until this share of
    # budget_steps is spent, then confirms its incumbent against the close ones (docs/search.md).
    # Without a budget it proposes until n_trials are made. Not used by a race.
    explore: float = 0.7
    # A racing search's first proposals, in order, before its sampler's (an initial design, as
    # SMAC's starts from the default configuration): config values of the searched key, e.g.
    # [.inf, 1.0] for search=p_tpe's 1/norm.p (the interval's ends, which a continuous sampler
    # proposes with probability 0), or mappings key -> value when several keys are searched.
    initial: Optional[List[Any]] = None


@dataclass
class _RungList:
    rungs: Optional[List[Any]] = None  # fractions and steps: rungs.checked_rungs tells them


@dataclass
class _Margin:
    margin: float = 0.05


@dataclass
class _Margins:
    margin: List[float] = field(default_factory=list)


def _typed(schema: type, key: str, value: Any) -> Any:
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), {key: value}))


def race_conf(spec: Any) -> RaceConf | None:
    """hydra.sweeper.race typed (None: no race, for null or {}); UserError on a bad key or type."""
    if spec is None or spec == {}:
        return None
    if not isinstance(spec, dict):
        raise UserError(f"hydra.sweeper.race={spec!r} must be null or a mapping, e.g. "
                        "{min_replicates: 3, baseline: 2.0, rungs: [0.5]}")
    for key in spec:
        if key not in RaceConf.__dataclass_fields__:
            hint = did_you_mean("hydra.sweeper.race", key, list(RaceConf.__dataclass_fields__))
            raise UserError(f"hydra.sweeper.race.{key} is not a race key; {hint}"
                            "docs/race.md lists them")
    try:
        conf = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RaceConf), spec))
        if not isinstance(conf.rungs, dict):  # a mapping: checked_rungs says what to write
            conf.rungs = _typed(_RungList, "rungs", conf.rungs).rungs
        margins = _Margins if isinstance(conf.margin, list) else _Margin
        conf.margin = _typed(margins, "margin", conf.margin).margin
        return conf
    except OmegaConfBaseException as e:
        key = str(e.full_key).split(".")[0].split("[")[0]  # rungs[1] -> rungs, as written
        raise UserError(f"hydra.sweeper.race.{key}={spec.get(key)!r}: "
                        f"{first_line(str(e))}") from None


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
    # A racing search (hydra_racing_sweeper/search_schedule.py): the sampler that proposes the candidates
    # one at a time (tpe, gp, random); None: a race over the grid's candidates.
    search: str | None = None
    explore: float = 0.7  # a search's share of budget_steps for new proposals (RaceConf)
    initial: tuple[dict[str, Any], ...] = ()  # a search's first proposals, as trial params

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
                   if self.search else {}),
                # only when set: a study searched before initial existed reads the same
                **({"initial": [dict(p) for p in self.initial]} if self.initial else {})}

    def judging(self, candidate: Hashable) -> dict[str, Any]:
        """How a race's job with rungs is judged (its trial.Identity's rungs, margin, margins;
        hydra_racing_sweeper/job.py): the baseline gets margin None, it records its values for the
        others and is never stopped; the others the one margin or each rung's."""
        judged = candidate != self.baseline
        return {"rungs": tuple(self.rungs),
                "margin": self.margin if judged and not self.margins else None,
                "margins": tuple(self.margins) if judged else ()}


def checked_race(conf: RaceConf, blocks: list[str], directions: list[str],
                 objectives: list[str], sampler: str, pruner: str, n_trials: int | None,
                 grid_size: int) -> RaceSpec:
    """The race's values that need no search space, checked (UserError names the value and the
    fix; keys and types were checked by Hydra against RaceConf), as a RaceSpec with no
    candidates yet: the plan (hydra_racing_sweeper/raceplan.py) adds the grid's candidates, their
    labels, the baseline and a search's initial design, which read the search space."""
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
    if search is None and n_trials is not None and n_trials != grid_size:
        raise UserError(f"hydra.sweeper.n_trials={n_trials}: a race runs the whole grid; set "
                        f"n_trials: null (the grid's {grid_size} points)")
    minimum, alpha = conf.min_replicates, conf.alpha
    if search is None and minimum < 2:
        raise UserError(f"hydra.sweeper.race.min_replicates={minimum} must be >= 2 in a race (its "
                        "first look is a paired t-test, which needs two pairs), e.g. 3")
    if minimum < 1:  # a search: the folds a takeover needs, at least the one it is screened on
        raise UserError(f"hydra.sweeper.race.min_replicates={minimum} must be >= 1 in a search "
                        "(the folds a takeover needs), e.g. 1")
    if not 0 < alpha < 1:
        raise UserError(f"hydra.sweeper.race.alpha={alpha:g} must be in (0, 1), e.g. 0.05")
    if blocks == [""]:
        raise UserError("hydra.sweeper.race needs replicates to race over; set e.g. "
                        "hydra.sweeper.replicates={data.fold:[0,1,2,3,4]}")
    if len(blocks) < minimum:
        raise UserError(f"hydra.sweeper.race.min_replicates={minimum} but the replicates give "
                        f"{len(blocks)} ({', '.join(blocks)}); list at least {minimum} or lower "
                        "min_replicates")
    rungs, margin, margins = _rungs(conf.rungs, conf.margin, directions[0])
    return RaceSpec(minimum, float(alpha), None, (), {}, tuple(blocks),
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


def replicate_test(option: str, replicates: Mapping[str, Sequence[Any]],
                   n_folds: Callable[[], Any]) -> ReplicateTest:
    """The looks' test (multitest.choose): corrected over data.fold with the fold layout's
    n_test/n_train (data.n_folds, which `n_folds` reads from the race's job config, asked only
    when needed), paired over seeds. A race over folds and seeds at once has no one test (seeds
    within a fold are not independent of each other the way folds are): race over one of
    them."""
    folds = "data.fold" in replicates and len(set(map(str, replicates["data.fold"]))) > 1
    others = [k for k, v in replicates.items() if k != "data.fold" and len(v) > 1]
    where = "hydra.sweeper.race.test"
    if folds and others and option != "paired":
        raise UserError(f"{where}={option}: the race's replicates vary data.fold and "
                        f"{', '.join(others)}; race over data.fold alone (the corrected test "
                        "over folds), or set race.test=paired to treat every combination "
                        "as independent")
    layout = n_folds() if folds and option != "paired" else None
    try:
        return choose(option, folds, layout if isinstance(layout, int) else None, where)
    except ValueError as e:
        raise UserError(str(e)) from None


def step_margins(race: Mapping[str, Any], max_iters: int, eval_interval: int) -> dict[int, float]:
    """A race's settings as a preset writes them (conf/search/*.yaml's hydra.sweeper.race) ->
    {step: margin} for runs of max_iters steps (resolve_rungs; the dropped rungs left out)."""
    steps, margins, _ = resolve_rungs(race.get("rungs"), race.get("margin", RaceConf.margin),
                                      max_iters, eval_interval)
    return dict(zip(steps, margins, strict=True))
