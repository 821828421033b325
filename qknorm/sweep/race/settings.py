"""A race's settings (hydra.sweeper.race): typed as written, then every value checked before a
study is touched: the candidates (the grid's points), the blocks (replicate combinations) they
race over, and the rules that take a candidate out (qknorm/sweep/race/looks.py; a racing
search's, qknorm/sweep/race/intensify.py).

hydra.sweeper.race stays a plain mapping in the sweeper's schema (the plugin's config.py):
OmegaConf cannot merge a command-line dict (`++hydra.sweeper.race={...}`) into a null
structured node, and null/{} must mean "no race". `race_conf` types the mapping through
OmegaConf against RaceConf, every default written there once, so a misspelt key or a value of
the wrong type fails with OmegaConf's own words, in one line, as any other config key does;
`plan_race` checks the values and makes the RaceSpec the schedules run. The rungs' own checks
and their resolution to eval steps are qknorm/sweep/race/rungs.py's.
"""

# OmegaConf 2.3 reads typing.Optional/List in structured configs, not `X | None`.
# ruff: noqa: UP006, UP007, UP035, UP045

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from qknorm.errors import UserError, did_you_mean, first_line
from qknorm.multitest import PAIRED_T, ReplicateTest
from qknorm.sweep.race.rungs import checked_rungs, resolve_rungs
from qknorm.sweep.space import OutsideSpace, SearchSpace, format_value

log = logging.getLogger(__name__)


@dataclass
class RaceConf:
    # Every candidate (grid point) runs the first min_replicates replicates; after each further
    # one, those significantly worse than the leader leave (one-sided t, Holm).
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
    # (qknorm/sweep/race/driver.py); null: none.
    budget_steps: Optional[int] = None
    # δ (objective units, nats for a loss): at a look, a candidate whose paired (1 - 2 alpha)
    # t-interval of its difference to the leader lies inside [-δ, +δ] leaves, level with it
    # (TOST at alpha); the race ends once no comparison is open. null: off.
    equivalence: Optional[float] = None
    # The test of a look (qknorm/multitest.py): auto (corrected resampled t over data.fold,
    # whose folds share training text; the plain paired t over seeds), corrected or paired.
    test: str = "auto"
    # A racing search (a tpe, gp or random sampler) makes new proposals until this share of
    # budget_steps is spent, then confirms its incumbent against the close ones (docs/search.md).
    # Without a budget it proposes until n_trials are made. Not used by a race.
    explore: float = 0.8
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
    # A racing search (qknorm/sweep/race/search.py): the sampler that proposes the candidates
    # one at a time (tpe, gp, random); None: a race over the grid's candidates.
    search: str | None = None
    explore: float = 0.8  # a search's share of budget_steps for new proposals (RaceConf)
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
        qknorm/sweep/job.py): the baseline gets margin None, it records its values for the
        others and is never stopped; the others the one margin or each rung's."""
        judged = candidate != self.baseline
        return {"rungs": tuple(self.rungs),
                "margin": self.margin if judged and not self.margins else None,
                "margins": tuple(self.margins) if judged else ()}


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
                    search=search, explore=_explore(conf.explore),
                    initial=_initial(conf.initial, space, search))


def _initial(values: list[Any] | None, space: SearchSpace,
             search: str | None) -> tuple[dict[str, Any], ...]:
    """race.initial as trial params (SearchSpace.params_of). A point the space cannot propose
    (a preset's p = inf under norm.p=interval(1, 8)) is dropped with one log line, as a rung
    that does not fit is: the search starts from the next point, or from its sampler. A point
    that is no value of the searched keys ([abc], a bare number for two keys) is refused."""
    if not values:
        return ()
    if search is None:
        raise UserError(f"{_written(values)}: a race runs every point of its grid; initial is "
                        "a search's first proposals (sampler tpe, gp or random), or set it null")
    keys, out = [p.key for p in space.params], []
    for value in values:
        try:
            if not isinstance(value, dict) and len(keys) > 1:
                raise ValueError(f"{format_value(value)} is ambiguous, the search varies "
                                 f"{', '.join(keys)}; give each, e.g. {{{keys[0]}: ...}}")
            params = space.params_of(value if isinstance(value, dict) else {keys[0]: value})
        except OutsideSpace as e:
            log.warning("%s: %s: dropped", _written(values), e)
            continue
        except (TypeError, ValueError) as e:
            example = (f", e.g. {_written([space.params[0].examples()[0]])}"
                       if len(keys) == 1 else "")
            raise UserError(f"{_written(values)}: {first_line(e)}; give values of the searched "
                            f"keys ({', '.join(keys)}){example}") from None
        if params not in out:
            out.append(params)
    return tuple(out)


def _written(values: list[Any]) -> str:
    """race.initial as an override writes it: [inf, 1.0], [{norm.p: 2.0, model: cpu}]."""
    return "hydra.sweeper.race.initial=[" + ", ".join(
        "{" + ", ".join(f"{k}: {format_value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, dict) else format_value(v) for v in values) + "]"


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
