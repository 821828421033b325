"""The race and the racing search replayed on a grid's recorded runs, one run at a time.

Both use the sweeper's own rules: the race's looks (qknorm.sweep.racestats.replay) and the
search's (qknorm.sweep.intensify.replay), and in-fold stopping at the rungs
(racestats.stop_at_rung) on the recorded curves: a run is judged at a rung against the runs of
the same fold that ran before it (the sweepers launch the leader's, or the incumbent's, first;
the race's baseline is never judged, the search judges every run, the incumbent's too),
and a stopped run costs the steps up to its rung. Budgets: the race checks its budget before
each run, as its sweeper does between launches (it can end one run past it); the search
launches a run only when the run's whole steps fit in what is left, so it never spends more.
The runs are deterministic (seed, fold and p fix them), so this is what a sweeper would have
spent and said at the grid's commit.

The search's sampler proposes p from the grid (a categorical, as `norm.p=choice(...)` gives)
through race_search.propose, the live sweeper's own: a fresh in-memory study told every
proposal's fold-adjusted value (intensify.adjusted_value) against the incumbent of the moment,
its sampler seeded by (seed, proposal number); a repeat is told its value and asked again.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping

import optuna

from qknorm.sweep import build_sampler, intensify, propose, racestats

MAX_PROPOSALS = 24  # search=p_tpe's n_trials


def _run(grid: dict, p: float, block: int, ran: dict[int, list[dict]], rungs: Mapping[int, float],
         spent: dict, judged: bool = True) -> tuple[float | None, float | None]:
    """Run (p, block): its value, or (None, delta at the rung) when stopped at a rung."""
    run = grid[p][block]
    others = ran.setdefault(block, [])
    for step in sorted(rungs) if judged and run["curve"] else ():
        at = {k: c[step] for k, c in enumerate(others) if step in c}
        stop = racestats.stop_at_rung(run["curve"][step], at, rungs[step])
        if stop is not None:
            spent["steps"] += step
            spent["core_s"] += run["core_s"] * step / run["steps"]
            others.append({s: v for s, v in run["curve"].items() if s <= step})
            return None, stop.delta
    spent["steps"] += run["steps"]
    spent["core_s"] += run["core_s"]
    others.append(run["curve"] or {})
    return run["value"], None


def race(grid: dict, budget: float, rules: intensify.Rules, rungs: Mapping[int, float],
         baseline: float | None) -> dict:
    """The race (p_race's rules) over every p of the grid: its answer and its cost."""
    cands, values, stopped = sorted(grid), {p: {} for p in grid}, set()
    spent, ran = {"steps": 0, "core_s": 0.0}, {}
    while True:
        live = {p for p in cands if p not in stopped}
        r = racestats.replay(cands, values, live, rules.n_blocks, rules.min_blocks, rules.alpha,
                             baseline, spent["steps"] >= budget, rules.equivalence, rules.test)
        if r.over:
            break
        order = racestats.standing(values, r.alive, baseline)
        p, b = next((p, b) for b in range(r.need) for p in order
                    if b not in values[p] and p not in stopped)
        value, _ = _run(grid, p, b, ran, rungs, spent, judged=p != baseline)
        (values[p].__setitem__(b, value) if value is not None else stopped.add(p))
    last = r.looks[-1] if r.looks else None
    dropped, level = r.dropped(), r.level()
    answers = {}
    for c in cands:  # each candidate's answer by the race's own rule (racestats.answer)
        outcome = (racestats.STOPPED if c in stopped else racestats.DROPPED if c in dropped
                   else racestats.LEVEL if c in level else racestats.SURVIVED)
        t = last.tests.get(c) if last else None
        answers[c] = racestats.answer(outcome, last.leader if last else None, c,
                                      t and t.p_adjusted, t and t.low, t and t.high,
                                      rules.alpha, rules.equivalence, alone=len(r.alive) == 1)
    return {"best_p": next((c for c, a in answers.items() if a == racestats.BEST), None),
            "worse": [c for c, a in answers.items() if a == racestats.WORSE],
            "level": [c for c, a in answers.items() if a == racestats.LEVEL], **spent,
            "distinct_p": len(cands)}


def sampler_factory(name: str, preset: Mapping) -> Callable[[int], optuna.samplers.BaseSampler]:
    """The sweeper's sampler for `name`, seeded per ask (specs.build_sampler): with the preset's
    options when it names that sampler (search=p_tpe's TPE: 6 start-up trials, specs.PINNED),
    else the sampler's defaults, as hydra.sweeper.sampler.name=gp gets them."""
    options = dict(preset) if preset.get("name") == name else {"name": name}
    return lambda seed: build_sampler({**options, "seed": seed}, None)


def race_search(grid: dict, sampler: str, seed: int, budget: float, rules: intensify.Rules,
                rungs: Mapping[int, float], preset: Mapping | None = None) -> dict:
    """The racing search with `sampler` (`preset`: the preset's sampler spec; None: the
    sampler's defaults): its answer (intensify.final) and its cost."""
    make, choices = sampler_factory(sampler, preset or {}), sorted(grid)
    props: list[dict] = []  # {p, values, stopped, rung_delta}
    spent, ran = {"steps": 0, "core_s": 0.0}, {}
    dist = {"norm.p": optuna.distributions.CategoricalDistribution(choices)}
    max_run = max(r["steps"] for runs in grid.values() for r in runs)
    while True:
        proposals = [intensify.Proposal(x["p"], x["values"], x["stopped"], not x["stopped"])
                     for x in props]
        state = intensify.replay(proposals, rules)
        if state.needs:
            i = state.incumbent if state.incumbent in state.needs else min(state.needs)
            x = props[i]
            if spent["steps"] + grid[x["p"]][state.needs[i]]["steps"] > budget:
                break  # the run does not fit in what is left: the search ends here
            value, delta = _run(grid, x["p"], state.needs[i], ran, rungs, spent)
            if value is None:
                x["stopped"], x["rung_delta"] = True, delta
            else:
                x["values"][state.needs[i]] = value
            continue
        if spent["steps"] + max_run > budget or len(props) >= MAX_PROPOSALS:
            break
        told = [({"norm.p": x["p"]}, _value(x, pr, proposals, state))
                for x, pr in zip(props, proposals, strict=True)]
        params = propose(lambda n: make(seed * 100_000 + n), told, dist)
        if params is None:
            break  # the sampler proposes only p already raced
        props.append({"p": params["norm.p"], "values": {}, "stopped": False, "rung_delta": None})
    answer = intensify.final(state, proposals, rules) if proposals else {}
    by = {proposals[i].key: j.outcome for i, j in answer.items()}
    return {"best_p": proposals[state.incumbent].key if state.incumbent is not None else None,
            "worse": sorted(p for p, o in by.items() if o in (racestats.WORSE, racestats.STOPPED)),
            "level": sorted(p for p, o in by.items() if o == racestats.LEVEL), **spent,
            "distinct_p": len(props)}


def _value(x: dict, prop: intensify.Proposal, proposals: list, state: intensify.Search
           ) -> float | None:
    if state.incumbent is None:
        return None
    return intensify.adjusted_value(prop, proposals[state.incumbent], x["rung_delta"])


def mean_values(grid: dict) -> dict[float, float]:
    return {p: statistics.fmean(r["value"] for r in runs) for p, runs in grid.items()}
