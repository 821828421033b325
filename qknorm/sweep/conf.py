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
from typing import Any, Dict, List, Optional

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
    # Steps at which a run is judged inside its replicate: more than `margin` (val loss) above
    # the best other candidate's run of that replicate, it stops there and its candidate leaves.
    # A list of steps, each judged with `margin`, or a mapping step -> its own margin, e.g.
    # {500: 0.1, 1000: 0.05} (then `margin` is not used). Typed by race_conf: OmegaConf types
    # no union of a list and a mapping.
    rungs: Any = None
    margin: float = 0.05
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
    rungs: Optional[List[int]] = None


@dataclass
class _RungMargins:
    rungs: Dict[int, float] = field(default_factory=dict)


def race_conf(spec: Any) -> RaceConf | None:
    """hydra.sweeper.race typed (None: no race, for null or {}); UserError on a bad key or type."""
    if spec is None or spec == {}:
        return None
    if not isinstance(spec, dict):
        raise UserError(f"hydra.sweeper.race={spec!r} must be null or a mapping, e.g. "
                        "{min_replicates: 3, baseline: 2.0, rungs: [1000]}")
    for key in spec:
        if key not in RaceConf.__dataclass_fields__:
            hint = did_you_mean("hydra.sweeper.race", key, list(RaceConf.__dataclass_fields__))
            raise UserError(f"hydra.sweeper.race.{key} is not a race key; {hint}"
                            "docs/race.md lists them")
    try:
        conf = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RaceConf), spec))
        rungs = _RungMargins if isinstance(spec.get("rungs"), dict) else _RungList
        conf.rungs = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(rungs),
                                                         {"rungs": spec.get("rungs")})).rungs
        return conf
    except OmegaConfBaseException as e:
        key = str(e.full_key).split(".")[0].split("[")[0]  # rungs.500 -> rungs, as written
        raise UserError(f"hydra.sweeper.race.{key}={spec.get(key)!r}: "
                        f"{first_line(str(e))}") from None
