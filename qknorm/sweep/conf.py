"""The race's settings as a typed dataclass, every default written here once.

hydra.sweeper.race stays a plain mapping in the sweeper's schema (the plugin's config.py):
OmegaConf cannot merge a command-line dict (`++hydra.sweeper.race={...}`) into a null
structured node, and null/{} must mean "no race". `race_conf` types the mapping through
OmegaConf against RaceConf before the study is touched, so a misspelt key or a value of the
wrong type fails with OmegaConf's own words, in one line, as any other config key does.
"""

# OmegaConf 2.3 reads typing.Optional/List in structured configs, not `X | None`.
# ruff: noqa: UP006, UP007, UP035, UP045

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from qknorm.errors import UserError, did_you_mean, first_line


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
    # No replicate launches once the race's runs took this many training steps; null: none.
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


@dataclass
class _RungList:
    rungs: Optional[List[Any]] = None  # fractions and steps: race_plan.checked_rungs tells them


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
        if not isinstance(conf.rungs, dict):  # a mapping: race_plan says what to write
            conf.rungs = _typed(_RungList, "rungs", conf.rungs).rungs
        margins = _Margins if isinstance(conf.margin, list) else _Margin
        conf.margin = _typed(margins, "margin", conf.margin).margin
        return conf
    except OmegaConfBaseException as e:
        key = str(e.full_key).split(".")[0].split("[")[0]  # rungs[1] -> rungs, as written
        raise UserError(f"hydra.sweeper.race.{key}={spec.get(key)!r}: "
                        f"{first_line(str(e))}") from None
