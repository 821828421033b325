"""A race or a racing search in words: the console's last line at the end of a race
(summary_line), a search's answer (answer_lines), a proposal by its config values (short)."""

from __future__ import annotations

import math
from typing import Any

from hydra_racing_sweeper.race import (
    BEST,
    DROPPED,
    LEVEL,
    NOT_RUN,
    NOT_STARTED,
    RACING,
    STOPPED,
    SURVIVED,
    UNDECIDED,
    WORSE,
    Proposal,
    driver,
)
from hydra_racing_sweeper.readback.kinds import settings_of
from hydra_racing_sweeper.readback.tables import Elimination, answer_rows
from hydra_racing_sweeper.units import num


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole and math.isfinite(whole) else "-"


def summary_line(e: Elimination) -> str:
    """One line for the console at the end of a race."""
    dropped = [r for r in e.rows if r["outcome"] == DROPPED]
    level = [r for r in e.rows if r["outcome"] == LEVEL]
    stopped = [r for r in e.rows if r["outcome"] == STOPPED]
    left = [r for r in e.rows if r["outcome"] == SURVIVED]
    racing = [r for r in e.rows if r["outcome"] in (RACING, NOT_STARTED)]
    line = f"race: {len(dropped)} of {len(e.rows)} candidates dropped, "
    if level:
        line += (f"{len(level)} level with the leader within ±{e.equivalence:g} ("
                 + ", ".join(r["candidate"] for r in level) + "), ")
    if stopped:
        line += (f"{len(stopped)} stopped inside a replicate ("
                 + "; ".join(f"{r['candidate']}: {stop_place(r)}, Δ {num(r['delta'], '+.4f')}"
                             for r in stopped) + "), ")
    line += f"{len(left)} left ({', '.join(r['candidate'] for r in left) or 'none'})"
    undecided = [r for r in left if r["answer"] == UNDECIDED]
    if undecided and not racing and e.equivalence is not None:  # without δ, none is decided
        line += f", {len(undecided)} of them undecided"
    if racing:  # held by another sweeper on this study, or by one that was killed
        line += (f", {len(racing)} still racing elsewhere "
                 f"({', '.join(r['candidate'] for r in racing)})")
    partial = f" ({e.spent['stopped']} stopped early)" if e.spent.get("stopped") else ""
    line += (f"; ran {e.spent['runs']}{partial} of "
             f"{e.grid['runs']} runs ({share(e.spent['runs'], e.grid['runs'])} of the grid)")
    if e.spent["core_s"]:
        line += (f", {e.spent['core_s']:,.0f} core-seconds "
                 f"({share(e.spent['core_s'], e.grid['core_s'])} of the grid's estimate)")
    if e.spent["steps"]:
        line += (f", {e.spent['steps']:,.0f} training steps "
                 f"({share(e.spent['steps'], e.grid['steps'])})")
    return line + (f"; {budget_words(e)}" if e.out_of_budget else "")


def budget_words(e: Elimination) -> str:
    return (f"no further run fits in its budget of {e.budget_steps:,} training steps: no "
            "further replicate was launched")


def stop_place(row: dict) -> str:
    return f"{row['after']} at step {row['step']}"


def short(row: dict) -> str:
    """A proposal as the answer names it, by config values: norm.p=1.987 (4 significant
    digits), also for a 1/norm.p param; a trial with no params yet by its number."""
    return " ".join(f"{k.removeprefix('1/')}="
                    + (f"{v:.4g}" if isinstance(v, float) else str(v))
                    for k, v in _config_values(row["params"]).items()) or f"trial {row['number']}"


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
    at its end and qknorm.status prints any time), and, when no further run fits in its budget,
    that the budget ended it (a proposal made before then and never run: not run)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["answer"], []).append(r)
    best = by.get(BEST, [])
    delta = settings.get("equivalence")
    line = "search: " + (f"best {short(best[0])} (mean {best[0]['mean']:.4f} over "
                         f"{best[0]['n']} replicates{range_words(rows)})" if best
                         else "no incumbent yet")
    undecided = by.pop(UNDECIDED, [])
    by[UNDECIDED] = [r for r in undecided if not r["stopped"]]
    by[STOPPED] = [r for r in undecided if r["stopped"]]
    budget = settings.get("budget_steps")
    spent = budget is not None and driver.fits(
        [Proposal(r["number"], {}, steps=r["steps"], run=r.get("run", 0)) for r in rows],
        budget) == 0
    for word, what in ((LEVEL, f"level with it within ±{delta:g}" if delta else ""),
                       (WORSE, "worse"), (UNDECIDED, "undecided"),
                       (STOPPED, "undecided, stopped at a rung"), (RACING, "racing"),
                       (NOT_RUN, "not run (budget spent)" if spent else "")):
        if by.get(word):
            line += f"; {what or word}: " + ", ".join(short(r) for r in by[word])
    for word in [w for w in by if w not in (BEST, LEVEL, WORSE, UNDECIDED, STOPPED, RACING,
                                             NOT_RUN)]:
        line += f"; {word}: " + ", ".join(short(r) for r in by[word])  # failed, ...: all named
    steps = sum(r["steps"] for r in rows)
    line += f"; {len(rows)} proposals, {steps:,} training steps"
    if spent:  # the driver's rule: the search is over once no further run fits
        line += f"; its budget of {budget:,} training steps ended the search: no further run fits"
    return [line]


def level_range(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """What the search cannot tell apart from its best: per numeric config value, its lowest
    and highest over the best and the proposals level with it ({} without a best)."""
    near = [r for r in rows if r["answer"] in (BEST, LEVEL)]
    if not any(r["answer"] == BEST for r in near):
        return {}
    values = [_config_values(r["params"]) for r in near]
    keys = [k for k in values[0] if all(isinstance(v.get(k), float) for v in values)]
    return {k: (min(v[k] for v in values), max(v[k] for v in values)) for k in keys}


def range_words(rows: list[dict]) -> str:
    """"; with those level with it, norm.p in [1.5, 2.11]" (the best alone: "; no proposal level
    with it"): the answer's range, which the console, qknorm.status and the report give beside
    the best."""
    spans = level_range(rows)
    if not spans:
        return ""
    if all(low == high for low, high in spans.values()):
        return "; no proposal level with it"
    return "; with those level with it, " + ", ".join(
        f"{k.removeprefix('1/')} in [{low:.4g}, {high:.4g}]" for k, (low, high) in spans.items())


def search_lines(study: Any) -> list[str]:
    """A racing search's answer in words (answer_lines); [] for a study of another kind."""
    settings = settings_of(study)
    rows = answer_rows(study.get_trials(deepcopy=False), settings)
    return [] if rows is None else answer_lines(rows, settings)
