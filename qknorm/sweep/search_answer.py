"""A racing search's answer, read back from its study (qknorm/sweep/race_search.py runs it): the
proposals in the order they were first made, the search replayed from their block results
(qknorm/sweep/intensify.py) and its final answer. Light imports only: the status line reads it.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from qknorm.sweep import driver, intensify, racestats
from qknorm.sweep.study import (
    RACE_CANDIDATE_ATTR,
    RACE_RUNS_ATTR,
    RETRIED_ATTR,
    STATUS_ATTR,
    SURPLUS,
    retried_numbers,
)

SETTINGS_ATTR = "race"  # study user attr: the race's settings; a search's have `search`


def is_search(settings: Any) -> bool:
    return isinstance(settings, dict) and bool(settings.get("search"))


def rules(settings: dict) -> intensify.Rules:
    return intensify.Rules(len(settings["blocks"]), settings["min_replicates"],
                           settings["alpha"], settings.get("equivalence"),
                           racestats.settings_test(settings))


def proposals(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that are proposals, in the order they were first proposed: counted (not a
    retried original, not surplus, not waiting), with params, ordered by the trial their
    retries started from."""
    # A retry waiting to be asked holds no params yet: until a sweeper takes it, its failed
    # original stands for the proposal (same block results), so the replay does not lose it.
    retried = retried_numbers([t for t in trials if t.state != TrialState.WAITING])
    parent = {t.number: t.system_attrs.get(RETRIED_ATTR) for t in trials}

    def origin(n: int) -> int:
        while parent.get(n) is not None:
            n = parent[n]
        return n

    return sorted((t for t in trials if t.params and t.number not in retried
                   and t.user_attrs.get(STATUS_ATTR) != SURPLUS
                   and t.state != TrialState.WAITING),
                  key=lambda t: origin(t.number))


def ledger(trials: list[FrozenTrial], settings: dict, sign: float = 1.0
           ) -> tuple[list[FrozenTrial], list[intensify.Proposal]]:
    """The proposals' trials, and what the driver reads of each: its completed blocks, whether
    a run of it stopped at a rung (and how far behind there), whether it can run more, and the
    steps its runs took."""
    props_t = proposals(trials)
    return props_t, [_proposal(t, settings, sign) for t in props_t]


def _proposal(t: FrozenTrial, settings: dict, sign: float) -> intensify.Proposal:
    runs = t.user_attrs.get(RACE_RUNS_ATTR, {})
    stopped = racestats.stopped_block(t.user_attrs)
    whole = [r["steps"] for r in racestats.completed(runs).values() if r.get("steps")]
    return intensify.Proposal(
        tuple(t.params.values()), racestats.block_values(t.user_attrs, settings["blocks"], sign),
        stopped is not None, t.state == TrialState.RUNNING and stopped is None,
        runs[stopped].get("delta") if stopped else None,
        sum(r.get("steps") or 0 for r in runs.values()), max(whole, default=0))


def answer(trials: list[FrozenTrial], settings: Any) -> list[dict] | None:
    """One row per proposal: label, answer (best, level, worse, undecided, racing, failed),
    replicates run, mean, Δ vs the best with its interval and Holm-adjusted p, steps; None
    when the settings are not a racing search's."""
    if not is_search(settings):
        return None
    props_t, props = ledger(trials, settings, settings.get("sign", 1.0))
    search, final = driver.answer(props, rules(settings))
    rows = []
    for i, t in enumerate(props_t):
        racing = search.judged.get(i) is not None and search.judged[i].outcome in (
            intensify.RACING, intensify.PARKED) and props[i].live
        j = None if racing else final.get(i) or search.judged.get(i)
        runs = t.user_attrs.get(RACE_RUNS_ATTR, {})
        done = racestats.completed(runs)
        # A run stopped at a rung is out of the search, but no test called it worse (the margin
        # rule saves compute; on noisy curves it stops level p): its answer is undecided.
        word = {intensify.INCUMBENT: racestats.BEST, racestats.STOPPED: racestats.UNDECIDED}.get(
            j.outcome, j.outcome) if j else "racing"
        rows.append({"candidate": t.user_attrs.get(RACE_CANDIDATE_ATTR, str(t.params)),
                     "params": dict(t.params), "answer": word,
                     "stopped": j is not None and j.outcome == racestats.STOPPED,
                     "n": len(runs), "mean": statistics.fmean(r["value"] for r in done.values())
                     if done else None, "delta": j.delta if j else None,
                     "low": j.low if j else None, "high": j.high if j else None,
                     "p_adjusted": j.p if j else None,
                     "steps": sum(r.get("steps") or 0 for r in runs.values())})
    return rows


def short(row: dict) -> str:
    """A proposal as the answer names it, by config values: norm.p=1.987 (4 significant
    digits), also for a 1/norm.p param."""
    return " ".join(f"{k.removeprefix('1/')}="
                    + (f"{v:.4g}" if isinstance(v, float) else str(v))
                    for k, v in _config_values(row["params"]).items())


def p_of(row: dict) -> float | None:
    """The proposal's p; None if it sets no p."""
    p = _config_values(row["params"]).get("norm.p", _config_values(row["params"]).get("1/norm.p"))
    return p if isinstance(p, float) else None


def _config_values(params: dict) -> dict[str, Any]:
    """Param name -> the value the job's config gets: a 1/KEY param read back (0 is inf), as
    space.Param.value gives it (space is not imported: the status line stays light)."""
    out = {}
    for key, v in params.items():
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if key.startswith("1/") and number:
            v = math.inf if v == 0 else 1 / v
        out[key] = float(v) if number else v
    return out


def answer_lines(rows: list[dict], settings: dict) -> list[str]:
    """The search's answer in words: the best, level, worse, undecided (what the sweeper prints
    at its end and qknorm.status prints any time)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["answer"], []).append(r)
    best = by.get(racestats.BEST, [])
    delta = settings.get("equivalence")
    line = "search: " + (f"best {short(best[0])} (mean {best[0]['mean']:.4f} over "
                         f"{best[0]['n']} replicates)" if best else "no incumbent yet")
    undecided = by.pop(racestats.UNDECIDED, [])
    by[racestats.UNDECIDED] = [r for r in undecided if not r["stopped"]]
    by["stopped"] = [r for r in undecided if r["stopped"]]
    for word, what in ((racestats.LEVEL, f"level with it within ±{delta:g}" if delta else ""),
                       (racestats.WORSE, "worse"), (racestats.UNDECIDED, "undecided"),
                       ("stopped", "undecided, stopped at a rung"), ("racing", "racing")):
        if by.get(word):
            line += f"; {what or word}: " + ", ".join(short(r) for r in by[word])
    steps = sum(r["steps"] for r in rows)
    return [line + f"; {len(rows)} proposals, {steps:,} training steps"]


