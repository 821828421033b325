"""The race and the racing search replayed on a grid's recorded runs: the sweeper's own driver
(hydra_racing_sweeper.race.driver) takes their turns, and each run it asks for is looked up in the grid
instead of trained.

The runs are deterministic (seed, fold and p fix them), so this is what a sweeper would have
spent and said at the grid's commit, with the basic launcher (a launch's runs one after
another, in the turn's order). In-fold stopping at the rungs (race.looks.stop_at_rung, the rule
the jobs apply) judges a run at each rung against the runs of the same fold that ran before it
(the race's baseline is never judged; the search judges every run, the incumbent's too); a
stopped run costs the steps up to its rung.

The search's sampler proposes p from the grid (a categorical, as `norm.p=choice(...)` gives),
after the preset's initial design (race.initial's p that the grid ran; search_replay drops the
others with a line, as the live sweeper does), through the live sweeper's own
search_schedule.propose: a fresh in-memory study told every proposal's fold-adjusted value
(driver.told), its sampler seeded by (seed, proposal number).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Hashable, Mapping

import optuna
from hydra_racing_sweeper import build_sampler, propose
from hydra_racing_sweeper.race import driver, intensify, looks, verdicts

MAX_PROPOSALS = 24  # search=p_tpe's n_trials


def _run(grid: dict, p: float, block: int, ran: dict[int, list[dict]], rungs: Mapping[int, float],
         judged: bool = True) -> tuple[float | None, float | None, int, float]:
    """Run (p, block) of the grid: (its value or None when stopped at a rung, the Δ at that
    rung, the steps and core-seconds it took)."""
    return play(grid[p][block], block, ran, rungs, judged)


def play(run: dict, block: int, ran: dict[int, list[dict]], rungs: Mapping[int, float],
         judged: bool = True) -> tuple[float | None, float | None, int, float]:
    """A recorded run ({value, steps, core_s, curve}) made in `block`, judged at each rung
    against the runs of that block made before it (`ran`, which it joins): as _run."""
    others = ran.setdefault(block, [])
    for step in sorted(rungs) if judged and run["curve"] else ():
        at = {k: c[step] for k, c in enumerate(others) if step in c}
        stop = looks.stop_at_rung(run["curve"][step], at, rungs[step])
        if stop is not None:
            others.append({s: v for s, v in run["curve"].items() if s <= step})
            return None, stop.delta, step, run["core_s"] * step / run["steps"]
    others.append(run["curve"] or {})
    return run["value"], None, run["steps"], run["core_s"]


def race(grid: dict, budget: float | None, rules: intensify.Rules, rungs: Mapping[int, float],
         baseline: float | None) -> dict:
    """The race (p_race's rules) over every p of the grid: its answer and its cost."""
    cands, values, stopped = sorted(grid), {p: {} for p in grid}, set()
    spent, ran, whole = {"steps": 0, "core_s": 0.0, "runs": 0}, {}, 0
    while True:
        ledger = driver.RaceLedger(cands, values, set(cands) - stopped, spent["steps"], whole)
        step = driver.race_turn(ledger, rules, baseline, budget, bool(rungs))
        if not step.runs:
            break
        for p, b in step.runs:
            value, _, steps, core_s = _run(grid, p, b, ran, rungs, judged=p != baseline)
            spent["steps"] += steps
            spent["core_s"] += core_s
            spent["runs"] += 1
            (values[p].__setitem__(b, value) if value is not None else stopped.add(p))
            whole = max(whole, steps if value is not None else 0)
    answers = {c: driver.race_verdict(step.race, c, rules, c in stopped).answer for c in cands}
    return {"best_p": next((c for c, a in answers.items() if a == verdicts.BEST), None),
            "worse": [c for c, a in answers.items() if a == verdicts.WORSE],
            "level": [c for c, a in answers.items() if a == verdicts.LEVEL], **spent,
            "stopped": sorted(stopped), "distinct_p": len(cands)}


def sampler_factory(name: str, preset: Mapping) -> Callable[[int], optuna.samplers.BaseSampler]:
    """The sweeper's sampler for `name`, seeded per ask (specs.build_sampler): with the preset's
    options when it names that sampler (search_replay.GRID_SAMPLER: TPE with 6 start-up trials),
    else the sampler's defaults, as hydra.sweeper.sampler.name=gp gets them."""
    options = dict(preset) if preset.get("name") == name else {"name": name}
    return lambda seed: build_sampler({**options, "seed": seed}, None)


def race_search(grid: dict, sampler: str, seed: int, budget: float | None,
                rules: intensify.Rules, rungs: Mapping[int, float], preset: Mapping | None = None,
                explore: float = 1.0, initial: tuple[float, ...] = (),
                max_proposals: int = MAX_PROPOSALS) -> dict:
    """The racing search with `sampler` (`preset`: the preset's sampler spec; None: the
    sampler's defaults; `explore`: the share of the budget it proposes in; `initial`: the first
    p to propose, each one the grid ran; `max_proposals`: n_trials): its answer (driver.search_answer)
    and its cost."""
    if not set(initial) <= set(grid):
        raise ValueError(f"initial p {sorted(set(initial) - set(grid))} not in the grid: drop "
                         "them first (search_replay._initial)")
    make = sampler_factory(sampler, preset or {})
    props, core_s = search_loop(
        lambda n: make(seed * 100_000 + n), "norm.p",
        optuna.distributions.CategoricalDistribution(sorted(grid)),
        lambda p, b, ran: _run(grid, p, b, ran, rungs), budget, rules, explore, initial,
        max_proposals=max_proposals)
    return outcome(props, rules, core_s)


def search_loop(make: Callable[[int], optuna.samplers.BaseSampler], name: str,
                dist: optuna.distributions.BaseDistribution,
                run: Callable[[Hashable, int, dict], tuple], budget: float | None,
                rules: intensify.Rules, explore: float, initial: tuple = (), slots: int = 1,
                max_proposals: int = MAX_PROPOSALS) -> tuple[list[intensify.Proposal], float]:
    """The racing search's loop, one parameter `name` over `dist`, as the live sweeper steps
    it (search_schedule.RaceSearchSchedule): driver.search_turn, a proposal (search_schedule.propose, its
    sampler made by `make(n)` for the n-th ask) when the turn makes one, else the turn's runs
    one after another (`run(key, block, ran)`: as _run), until the turn says it is over.
    Returns the proposals (key: the parameter's value) and the core-seconds spent."""
    props: list[intensify.Proposal] = []
    core_s, ran, exhausted = 0.0, {}, False
    while True:
        step = driver.search_turn(props, rules, budget, explore, slots,
                                  max_proposals - len(props), exhausted)
        for i in driver.closed(step):  # told: runs no more, as the sweeper's trial
            props[i] = dataclasses.replace(props[i], live=False)
        if step.over:
            return props, core_s
        if step.propose:
            told = [({name: p.key}, v) for p, v in zip(props, driver.told(props, step.search),
                                                      strict=True)]
            params = propose(make, told, {name: dist}, [{name: p} for p in initial])
            exhausted = params is None  # the sampler proposes only points already raced
            props += [] if exhausted else [intensify.Proposal(params[name], {})]
            continue
        for i, b in step.runs:
            value, delta, steps, cost = run(props[i].key, b, ran)
            props[i], core_s = _record(props[i], b, value, delta, steps), core_s + cost


def outcome(props: list[intensify.Proposal], rules: intensify.Rules, core_s: float) -> dict:
    """The search's answer (driver.search_answer) by key, and its cost."""
    search, answer = driver.search_answer(props, rules)
    by = {props[i].key: j.outcome for i, j in answer.items()}  # stopped: undecided, untested
    return {"best_p": props[search.incumbent].key if search.incumbent is not None else None,
            "worse": sorted(p for p, o in by.items() if o == verdicts.WORSE),
            "level": sorted(p for p, o in by.items() if o == verdicts.LEVEL),
            "undecided": sorted(p for p, o in by.items()
                                if o not in (verdicts.WORSE, verdicts.LEVEL, verdicts.INCUMBENT)),
            "steps": driver.spent(props), "core_s": core_s, "distinct_p": len(props),
            "proposed": [p.key for p in props]}


def _record(prop: intensify.Proposal, block: int, value: float | None, delta: float | None,
            steps: int) -> intensify.Proposal:
    """The proposal with a run of `block` recorded, as the sweeper's ledger reads it back."""
    if value is None:
        return dataclasses.replace(prop, stopped=True, live=False, rung_delta=delta,
                                   steps=prop.steps + steps)
    return dataclasses.replace(prop, values={**prop.values, block: value},
                               steps=prop.steps + steps, run=max(prop.run, steps))


def mean_values(grid: dict) -> dict[float, float]:
    return {p: statistics.fmean(r["value"] for r in runs) for p, runs in grid.items()}
