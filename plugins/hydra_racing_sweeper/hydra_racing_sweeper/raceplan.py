"""The race's plan: hydra.sweeper.race checked (hydra_racing_sweeper/race/settings.py: every value that
needs no search space) and completed against the search space: the grid's candidates and
their labels, the baseline among them, a search's initial design as trial params. The
settings and rules are the race layer's (hydra_racing_sweeper/race/); this module reads the space."""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Hashable, Sequence
from typing import Any

from hydra_racing_sweeper.errors import UserError, first_line
from hydra_racing_sweeper.race import RaceConf, RaceSpec, checked_race
from hydra_racing_sweeper.space import OutsideSpace, SearchSpace, format_value

log = logging.getLogger(__name__)


def plan_race(conf: RaceConf | None, space: SearchSpace, blocks: list[str],
              directions: list[str], objectives: list[str], sampler: str, pruner: str,
              n_trials: int | None) -> RaceSpec | None:
    """The race, every value checked (UserError names the value and the fix; keys and types
    were checked by Hydra against RaceConf); None: off (race: null)."""
    if conf is None:
        return None
    spec = checked_race(conf, blocks, directions, objectives, sampler, pruner, n_trials,
                        space.grid_size)
    if spec.search is not None and conf.baseline is not None:
        raise UserError(f"hydra.sweeper.race.baseline={format_value(conf.baseline)}: a search "
                        "races its proposals against its incumbent, not a baseline; set "
                        "baseline: null")
    candidates = ([] if spec.search else
                  [tuple(c) for c in itertools.product(*(p.grid for p in space.params))])
    return dataclasses.replace(
        spec, baseline=_baseline(conf.baseline, space, candidates), candidates=tuple(candidates),
        labels={c: _candidate_label(space, c) for c in candidates},
        initial=_initial(conf.initial, space, spec.search))


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
