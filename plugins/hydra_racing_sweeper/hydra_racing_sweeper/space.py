"""The search space: Hydra sweep grammar -> Optuna distributions, and trial params -> overrides.

A param key written `1/KEY` searches the reciprocal of KEY: the job gets KEY=1/x, and x = 0
gives KEY=inf. That is how a continuous search over p reaches p = inf (`1/norm.p:
interval(0, 1)` covers p in [1, inf]).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from hydra_racing_sweeper.errors import UserError

RECIPROCAL = "1/"
_PLAIN = re.compile(r"^[A-Za-z0-9_.\-/:+]+$")


def format_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it back (inf stays inf, strings are quoted
    when they hold characters the grammar would interpret)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)  # inf, -inf, nan
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class OutsideSpace(ValueError):
    """A value of the right type that the param's distribution cannot give (norm.p=inf under
    norm.p=interval(1, 8)); a value of the wrong type ('abc' for a number) is a ValueError."""


@dataclass(frozen=True)
class Param:
    name: str  # Optuna's param name: the key as written, e.g. norm.p or 1/norm.p
    key: str  # the config key the job gets, e.g. norm.p
    distribution: BaseDistribution
    grid: tuple | None  # the values a grid sampler walks; None for intervals

    @property
    def reciprocal(self) -> bool:
        return self.name.startswith(RECIPROCAL)

    def value(self, sampled: Any) -> Any:
        """What the job's config gets for a sampled value."""
        if not self.reciprocal:
            return sampled
        return math.inf if sampled == 0 else 1.0 / sampled

    def sampled(self, value: Any) -> Any:
        """The sampled value that gives the config `value` (value's inverse: norm.p=inf is
        1/norm.p=0.0); ValueError when no sampled value of the distribution gives it."""
        x = value
        if self.reciprocal:
            x = 0.0 if float(value) == math.inf else 1.0 / float(value)
        if isinstance(self.distribution, FloatDistribution):
            x = float(x)
        d = self.distribution
        try:
            inside = d._contains(d.to_internal_repr(x))
        except ValueError:  # a categorical's value that is none of its choices
            inside = False
        if not inside:
            raise OutsideSpace(f"{self.key}={format_value(value)} is outside {self.name}'s "
                               f"{_shown(d)}")
        return x

    def examples(self) -> list[Any]:
        """Config values to check at composition time: every choice, or both ends."""
        if self.grid is not None:
            return [self.value(v) for v in self.grid]
        d = self.distribution
        return [self.value(d.low), self.value(d.high)]


@dataclass(frozen=True)
class SearchSpace:
    params: tuple[Param, ...]
    fixed: tuple[str, ...]  # overrides every job gets (params given as plain values)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return {p.name: p.distribution for p in self.params}

    @property
    def grid(self) -> dict[str, tuple] | None:
        if any(p.grid is None for p in self.params):
            return None
        return {p.name: p.grid for p in self.params}

    @property
    def grid_size(self) -> int | None:
        grid = self.grid
        return None if grid is None else math.prod(len(v) for v in grid.values())

    def values(self, trial_params: Mapping[str, Any]) -> dict[str, Any]:
        """Config key -> value for one trial (1/norm.p=0.25 becomes norm.p=4.0), then the params
        a custom_search_space suggested, named as suggested (`+w`)."""
        names = {p.name for p in self.params}
        return {**{p.key: p.value(trial_params[p.name]) for p in self.params},
                **{k: v for k, v in trial_params.items() if k not in names}}

    def params_of(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The trial params that give these config values (values' inverse), in the space's
        order; ValueError naming the key that is missing or outside its param's range."""
        missing = [p.key for p in self.params if p.key not in config]
        if missing or set(config) - {p.key for p in self.params}:
            raise ValueError(f"{dict(config)} does not give each searched key "
                             f"({', '.join(p.key for p in self.params)}) once")
        return {p.name: p.sampled(config[p.key]) for p in self.params}

    def overrides(self, trial_params: Mapping[str, Any]) -> list[str]:
        """The fixed values, then every param's (searched, then a custom_search_space's)."""
        return [*self.fixed,
                *(f"{k}={format_value(v)}" for k, v in self.values(trial_params).items())]

    def label(self, trial_params: Mapping[str, Any]) -> str:
        """The searched params as overrides, for the log: "norm.p=4.0"."""
        return " ".join(self.overrides(trial_params)[len(self.fixed):])

    def candidate(self, trial: Any) -> tuple:
        """A trial's grid point: its param values in the space's order (a race's candidate)."""
        return tuple(trial.params[p.name] for p in self.params)


def _where(section: str, key: str, text: Any) -> str:
    return f"hydra.sweeper.{section}.{key}={text}"


def parse_param(key: str, text: Any) -> Param | str:
    """A Param for a sweep expression, or the override string for a fixed value."""
    reciprocal = key.startswith(RECIPROCAL)
    bare = key[len(RECIPROCAL):] if reciprocal else key
    if not bare:
        raise UserError(f"hydra.sweeper.params has an empty key {key!r}; name a config key")
    if not isinstance(text, str):
        text = format_value(text)
    try:
        override = OverridesParser.create().parse_override(f"{bare}={text}")
    except Exception as e:
        raise UserError(f"{_where('params', key, text)} is not Hydra sweep grammar ({e}); "
                        "use interval(a, b), tag(log, interval(a, b)), range(a, b) or "
                        "choice(a, b, ...)") from None
    value = override.value()
    if not override.is_sweep_override():
        if reciprocal:
            raise UserError(f"{_where('params', key, text)}: a 1/ key needs a sweep; write "
                            f"{bare}={text} for a fixed value")
        return f"{bare}={format_value(value)}"
    distribution, grid = _distribution(key, text, value)
    if reciprocal:
        values = grid if grid is not None else (distribution.low, distribution.high)
        if any(not isinstance(v, (int, float)) or v < 0 for v in values):
            raise UserError(f"{_where('params', key, text)}: a reciprocal search needs numbers "
                            ">= 0 (0 means inf); fix the range")
    param = Param(name=key, key=bare, distribution=distribution, grid=grid)
    _check_domain(param, text)
    return param


# Keys whose values have a floor their type does not say: key -> (floor, why). A search that
# reaches below it would train trials that each fail at run time (config.validate refuses them).
DOMAINS = {"norm.p": (1.0, "norm.p must be >= 1 or inf (below 1 it is not a norm)")}


def _check_domain(param: Param, text: str) -> None:
    """Every grid value, or both ends of an interval (the domains are rays: the ends suffice),
    must lie in the key's domain; for a 1/KEY search, KEY = 1/x must, so x lies in [0, 1/floor]."""
    if param.key not in DOMAINS:
        return
    floor, why = DOMAINS[param.key]
    d = param.distribution
    ends = param.grid if param.grid is not None else (d.low, d.high)
    where = _where("params", param.name, text)
    for x in ends:
        value = param.value(x)
        if isinstance(value, (int, float)) and not value >= floor:  # nan fails too
            if param.reciprocal:
                raise UserError(f"{where}: {x} gives {param.key}={value:g}, below {floor:g}: "
                                f"{param.name} must be within [0, {1 / floor:g}] (0 is inf); "
                                f"search e.g. {param.name}=interval(0,{1 / floor:g})")
            raise UserError(f"{where}: {x} is below {floor:g}; {why}; search e.g. "
                            f"{param.key}=interval({floor:g},8)")


def _distribution(key: str, text: str, value: Any) -> tuple[BaseDistribution, tuple | None]:
    if isinstance(value, IntervalSweep):
        low, high, tags = value.start, value.end, value.tags
        # int(interval(a, b)) casts both ends to int (the grammar gives an interval floats)
        whole = isinstance(low, int) and isinstance(high, int)
        if not low < high:
            raise UserError(f"{_where('params', key, text)}: low {low:g} must be below "
                            f"high {high:g}; swap them or widen the interval")
        log = "log" in tags
        if log and low <= 0:
            raise UserError(f"{_where('params', key, text)}: a log interval needs low > 0; "
                            "raise low or drop tag(log)")
        if "int" in tags or whole:
            return IntDistribution(int(low), int(high), log=log), None
        return FloatDistribution(float(low), float(high), log=log), None
    if isinstance(value, RangeSweep):
        items = [v for v in value.range()]
        if not items:
            raise UserError(f"{_where('params', key, text)} is empty; check start < stop")
        if value.shuffle:  # shuffle(range(...)): no order left to model
            return CategoricalDistribution(items), tuple(items)
        return _stepped(items, abs(value.step)), tuple(items)
    if isinstance(value, ChoiceSweep):
        items = list(value.list)
        if len(set(map(repr, items))) != len(items):
            raise UserError(f"{_where('params', key, text)} repeats a value; list each once")
        return CategoricalDistribution(items), tuple(items)
    raise UserError(f"{_where('params', key, text)}: this sweep is not supported; use "
                    "interval, tag(log, interval), range or choice")


def _stepped(items: list[Any], step: float) -> BaseDistribution:
    """range(a, b, step) as an ordered distribution (TPE, GP, CMA-ES and QMC model its order):
    its items from the first to the last, b excluded as Hydra's grammar says (Hydra's Optuna
    sweeper includes b for samplers other than the grid; its grid excludes it, as here)."""
    low = min(items)
    if all(isinstance(v, int) for v in items):
        return IntDistribution(low, max(items), step=int(step))
    # the last item as low + k * step, so Optuna finds high on the step (no float drift)
    high = low + (len(items) - 1) * step
    return FloatDistribution(float(low), float(high), step=float(step))


def config_key(name: str) -> str:
    """The config key a param sets: norm.p for both norm.p and 1/norm.p."""
    return name[len(RECIPROCAL):] if name.startswith(RECIPROCAL) else name


def _one_param_per_key(entries: Mapping[str, Any]) -> None:
    seen: dict[str, str] = {}
    for name in entries:
        other = seen.setdefault(config_key(name), name)
        if other != name:
            raise UserError(f"hydra.sweeper.params.{other} and hydra.sweeper.params.{name} both "
                            f"set {config_key(name)}; keep one of them")


def parse_space(params: Mapping[str, Any], cli_arguments: Sequence[str]) -> tuple[SearchSpace,
                                                                                  list[str]]:
    """The space from hydra.sweeper.params plus any sweep on the command line. Returns the space
    and the plain command-line overrides every job gets.

    One param per config key: two params in hydra.sweeper.params that set the same key (norm.p
    and 1/norm.p) are a UserError naming both. The command line wins over the params: a value or
    a sweep given there for a key replaces every param that sets that key, its reciprocal
    included (`search=p_tpe norm.p=3` removes the preset's 1/norm.p, which leaves nothing to
    search: the planner says so in one line; `'norm.p=interval(1,8)'` searches norm.p instead
    of the preset's 1/norm.p, one dimension)."""
    # null removes a param: a search preset drops the grid an experiment sets on the same key
    # (search=p_tpe's `norm.p: null` beside its 1/norm.p, over experiment=paper_cpu's norm.p).
    entries: dict[str, Any] = {k: v for k, v in params.items() if v is not None}
    _one_param_per_key(entries)
    plain: list[str] = []
    parser = OverridesParser.create()
    for arg in cli_arguments:
        override = parser.parse_override(arg)
        key = override.key_or_group
        for name in [n for n in entries if config_key(n) == config_key(key) and n != key]:
            del entries[name]  # the same key's other param (1/KEY): its own key keeps its place
        if override.is_sweep_override():
            entries[key] = arg.split("=", 1)[1]
        else:
            entries.pop(key, None)
            plain.append(arg)
    parsed = [parse_param(k, v) for k, v in entries.items()]
    space = SearchSpace(params=tuple(p for p in parsed if isinstance(p, Param)),
                        fixed=tuple(p for p in parsed if isinstance(p, str)))
    return space, plain


def cli_replicates(replicates: Mapping[str, Sequence[Any]], cli_arguments: Sequence[str]
                   ) -> tuple[dict[str, list[Any]], list[str]]:
    """A replicate key on the command line replaces the preset's list: `data.fold=0` runs fold 0
    only, `data.fold=0,1` folds 0 and 1. Returns the replicates and the other arguments."""
    chosen = {k: list(v) for k, v in replicates.items()}
    rest: list[str] = []
    parser = OverridesParser.create()
    for arg in cli_arguments:
        override = parser.parse_override(arg)
        key = override.key_or_group
        if key not in chosen:
            rest.append(arg)
        elif not override.is_sweep_override():
            chosen[key] = [override.value()]
        elif isinstance(override.value(), ChoiceSweep):
            chosen[key] = list(override.value().list)
        else:
            raise UserError(f"{arg}: {key} is a replicate key (hydra.sweeper.replicates); give "
                            f"its values as a list, e.g. {key}=0,1")
    return chosen, rest


def replicate_combinations(replicates: Mapping[str, Sequence[Any]]) -> list[list[str]]:
    """Every combination of the replicate values, as override lists ([[]] for none)."""
    for key, values in replicates.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise UserError(f"hydra.sweeper.replicates.{key}={values!r} must be a non-empty "
                            f"list, e.g. replicates: {{{key}: [0, 1]}}")
    keys = list(replicates)
    return [[f"{k}={format_value(v)}" for k, v in zip(keys, combo, strict=True)]
            for combo in itertools.product(*(replicates[k] for k in keys))]


def _shown(d: BaseDistribution) -> str:
    """A distribution as an error names it: "range [0.0, 1.0]", "choices (1.0, 2.0)"."""
    if isinstance(d, CategoricalDistribution):
        return f"choices ({', '.join(format_value(c) for c in d.choices)})"
    return f"range [{format_value(d.low)}, {format_value(d.high)}]"


def search_space_params(search_space: Mapping[str, Any]) -> dict[str, str]:
    """hydra-optuna-sweeper 1.2's deprecated `search_space` ({KEY: {type: int|float|categorical,
    low, high, step, log, choices}}) as params in the sweep grammar: high is inclusive there, so
    a stepped one is range(low, high + step, step); log is tag(log, ...)."""
    params = {}
    for key, spec in search_space.items():
        where = f"hydra.sweeper.search_space.{key}"
        if not isinstance(spec, Mapping) or spec.get("type") not in ("int", "float", "categorical"):
            raise UserError(f"{where}={spec!r} needs type: int, float or categorical; or write it "
                            f"as hydra.sweeper.params.{key} in Hydra's sweep grammar")
        if spec["type"] == "categorical":
            choices = spec.get("choices") or []
            params[key] = f"choice({', '.join(format_value(c) for c in choices)})"
            continue
        try:
            low, high, step = spec["low"], spec["high"], spec.get("step")
        except KeyError as e:
            raise UserError(f"{where} needs {e.args[0]}; give low and high") from None
        if step is not None:
            params[key] = f"range({low}, {high + step}, {step})"
            continue
        text = f"interval({low}, {high})"
        if spec["type"] == "int":
            text = f"int({text})"
        params[key] = f"tag(log, {text})" if spec.get("log") else text
    return params
