"""Racing candidates over replicates (e.g. folds): which candidates a race drops, and when.

A race runs every candidate (a grid point of a sweep) on the first `min_replicates` blocks (a
block is one replicate combination, e.g. data.fold=0), then looks: the leader is the candidate
with the lowest mean over the blocks every candidate still in the race has run, every other one
is tested against it with a one-sided paired t-test (H1: its mean paired difference to the
leader is above 0), Holm's step-down adjusts those p-values over the candidates tested at that
look, and each with an adjusted p <= alpha is dropped (the baseline never is). The others run
one more block and the race looks again, until one candidate is left or the blocks run out.

What this controls: at one look, Holm keeps the chance of dropping any candidate whose paired
difference to that look's leader is in truth <= 0 at alpha or below (family-wise over the
candidates of the look). What it does not: every further look is another chance to drop one
(no alpha spending over looks), and the leader is picked on the same data it is tested with,
which favours it when candidates are level. docs/race.md has the measured rates.

Everything here is a pure function of the values. The sweeper replays the race from the values
recorded in the study (qknorm/sweep/race.py), so a resumed sweep, or a second
sweeper on the same study, reaches the same decisions; the report reads the decisions back.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from qknorm.multitest import holm
from qknorm.sweep.study import RACE_OUTCOME_ATTR, RACE_RUNS_ATTR

DROPPED, SURVIVED, FAILED, STOPPED = "dropped", "survived", "failed", "stopped"


@dataclass(frozen=True)
class Test:
    delta: float  # mean paired difference, candidate - leader (> 0: worse)
    p: float  # one-sided paired t-test, H1: delta > 0
    p_adjusted: float  # Holm over the candidates tested at this look


@dataclass(frozen=True)
class Look:
    n: int  # the first n blocks were compared
    leader: Hashable
    tests: dict[Hashable, Test]  # every candidate in the race but the leader
    dropped: tuple[Hashable, ...]


@dataclass
class Race:
    looks: list[Look] = field(default_factory=list)
    alive: list[Hashable] = field(default_factory=list)  # in candidate order
    need: int | None = None  # blocks every alive candidate needs for the next look; None: over
    gone: dict[Hashable, int] = field(default_factory=dict)  # left without a drop, before look n
    values: Mapping[Hashable, Mapping[int, float]] = field(default_factory=dict)  # replayed from

    @property
    def over(self) -> bool:
        return self.need is None

    def dropped(self) -> dict[Hashable, Look]:
        return {c: lk for lk in self.looks for c in lk.dropped}


def paired_t_greater(d: Sequence[float]) -> float:
    """p-value of the one-sided paired t-test of H1: mean(d) > 0 (n >= 2 differences)."""
    n, mean = len(d), statistics.fmean(d)
    if max(d) - min(d) <= 1e-12 * max(1.0, abs(mean)):
        # No spread (rounding noise is not variance): a sure sign, or a tie that never drops.
        return 0.0 if mean > 1e-12 * max(1.0, abs(min(d))) else 1.0
    # scipy.special, not scipy.stats: the sweeper imports this, and scipy.stats takes seconds.
    from scipy.special import stdtr  # Student t CDF

    t = mean / (statistics.stdev(d) / math.sqrt(n))
    return float(stdtr(n - 1, -t))


def look(values: Mapping[Hashable, Sequence[float]], alpha: float,
         baseline: Hashable | None = None) -> Look:
    """One look over candidates that all ran the same blocks (equal-length lists, in block
    order). The leader is the lowest mean (the first one listed on a tie)."""
    means = {c: statistics.fmean(v) for c, v in values.items()}
    leader = min(means, key=means.__getitem__)
    others = [c for c in values if c != leader]
    diffs = {c: [x - y for x, y in zip(values[c], values[leader], strict=True)] for c in others}
    raw = [paired_t_greater(diffs[c]) for c in others]
    tests = {c: Test(statistics.fmean(diffs[c]), p, q)
             for c, p, q in zip(others, raw, holm(raw), strict=True)}
    # The baseline stays to the end so every candidate can be paired with it on its folds.
    dropped = tuple(c for c in others if tests[c].p_adjusted <= alpha and c != baseline)
    n = len(next(iter(values.values())))
    return Look(n, leader, tests, dropped)


def replay(candidates: Sequence[Hashable], values: Mapping[Hashable, Mapping[int, float]],
           live: set[Hashable], n_blocks: int, min_blocks: int, alpha: float,
           baseline: Hashable | None = None, budget_spent: bool = False) -> Race:
    """The race so far, from each candidate's values by block index (lower is better).

    `live`: candidates that can still run blocks (running, or not started yet). A candidate that
    is not live and lacks a block the next look needs (its run failed) leaves the race there
    without a test. The race waits (`need`) while a live candidate lacks a block, unless its
    budget is spent (`budget_spent`): then no block will be run, and it ends where it is.
    """
    race = Race(alive=list(candidates), need=min_blocks, values=values)
    for n in range(min_blocks, n_blocks + 1):
        has = {c: all(b in values.get(c, {}) for b in range(n)) for c in race.alive}
        race.gone.update({c: n for c in race.alive if not has[c] and c not in live})
        race.alive = [c for c in race.alive if has[c] or c in live]
        if len(race.alive) < 2:
            break  # the others failed or were stopped inside a block: nothing left to race
        if not all(has[c] for c in race.alive):
            if budget_spent:
                break
            race.need = n
            return race
        if len(race.alive) < 2:
            break
        lk = look({c: [values[c][b] for b in range(n)] for c in race.alive}, alpha, baseline)
        race.looks.append(lk)
        race.alive = [c for c in race.alive if c not in lk.dropped]
        if len(race.alive) < 2:
            break
    race.need = None
    return race


# ---------------------------------------------------------------------------------------------
# Stopping, inside a block, the runs that have lost (race.rungs, race.margin)

@dataclass(frozen=True)
class Stop:
    best: Hashable  # the other candidate with the lowest value at the rung
    best_value: float
    delta: float  # value - best_value (> margin)


def stop_at_rung(value: float, others: Mapping[Hashable, float], margin: float) -> Stop | None:
    """A run's val loss at a rung against the other candidates' runs of the same block that
    reached it: stop when it is above the best of them by more than `margin`. With no other
    run there yet nothing is known, so the run goes on (runs of a block launch best first)."""
    if not others:
        return None
    best = min(others, key=others.__getitem__)
    delta = value - others[best]
    return Stop(best, others[best], delta) if delta > margin else None


def standing(values: Mapping[Hashable, Mapping[int, float]], alive: Sequence[Hashable],
             baseline: Hashable | None = None) -> list[Hashable]:
    """The candidates in the race, best first: the order their runs of the next block launch,
    so that a later run has the leader's values at each rung to be judged against. By mean
    over the blocks every one of them completed; before there is one, the baseline first, then
    the given (grid) order."""
    common = set.intersection(*(set(values.get(c, {})) for c in alive)) if alive else set()
    if not common:
        return sorted(alive, key=lambda c: c != baseline)  # stable: grid order after it
    return sorted(alive, key=lambda c: statistics.fmean(values[c][b] for b in common))


def completed(runs: Mapping[str, dict]) -> dict[str, dict]:
    """The block results of runs that went to the end (not stopped at a rung)."""
    return {b: r for b, r in runs.items() if r.get("stopped_at") is None}


# ---------------------------------------------------------------------------------------------
# Reading a race back from its Optuna study: the elimination table and the compute it spent.



@dataclass
class Elimination:
    blocks: list[str]
    baseline: str | None
    rows: list[dict]  # per candidate, in grid order: label, outcome, n, after, leader, delta, ...
    spent: dict[str, float]  # runs, steps, core_s the race ran
    grid: dict[str, float]  # the same for the full grid (steps, core_s: estimated)
    budget_steps: int | None = None  # the race's budget, if it had one

    @property
    def out_of_budget(self) -> bool:
        """Its budget is spent with replicates left to run: it ended (or ends) there."""
        return (self.budget_steps is not None and self.spent["steps"] >= self.budget_steps
                and any(r["outcome"] in (SURVIVED, "racing") and r["n"] < len(self.blocks)
                        for r in self.rows))


def elimination(settings: dict, trials: Mapping[str, object]) -> Elimination:
    """The race a study holds: its settings (study user attr `race`) and each candidate's
    counted trial by label (the sweeper's `_race.race_trials` picks them). A run stopped at a
    rung counts in the compute spent (its partial steps and core-seconds), not in the mean."""
    blocks = list(settings["blocks"])
    runs_of = {label: dict(t.user_attrs.get(RACE_RUNS_ATTR, {})) if t is not None else {}
               for label, t in ((c, trials.get(c)) for c in settings["candidates"])}
    rows = []
    spent = {"runs": 0, "stopped": 0, "steps": 0, "core_s": 0.0}
    for label in settings["candidates"]:
        t = trials.get(label)
        record = t.user_attrs.get(RACE_OUTCOME_ATTR, {}) if t is not None else {}
        runs, done = runs_of[label], completed(runs_of[label])
        outcome = record.get("outcome") or ("racing" if t is not None else "not started")
        rows.append({"candidate": label, "outcome": outcome, "n": len(runs),
                     "mean": statistics.fmean(r["value"] for r in done.values()) if done
                     else math.nan,
                     **{k: record.get(k) for k in ("after", "step", "leader", "delta", "p",
                                                   "p_adjusted")}})
        spent["runs"] += len(runs)
        spent["stopped"] += len(runs) - len(done)
        for key in ("steps", "core_s"):
            spent[key] += sum(r[key] for r in runs.values() if r.get(key) is not None)
    return Elimination(blocks, settings.get("baseline"), rows, spent,
                       _grid_estimate(runs_of, len(blocks)), settings.get("budget_steps"))


def _grid_estimate(runs_of: Mapping[str, Mapping[str, dict]], n_blocks: int) -> dict:
    """The full grid's runs, steps and core-seconds: every candidate's mean completed run,
    times the number of blocks; for a candidate with none (stopped in its first block), the
    mean completed run of all candidates (same model, same steps)."""
    grid: dict[str, float] = {"runs": len(runs_of) * n_blocks}
    for key in ("steps", "core_s"):
        means = {}
        for label, runs in runs_of.items():
            known = [r[key] for r in completed(runs).values() if r.get(key) is not None]
            means[label] = statistics.fmean(known) if known else None
        seen = [m for m in means.values() if m is not None]
        fallback = statistics.fmean(seen) if seen else math.nan
        grid[key] = sum((fallback if m is None else m) * n_blocks for m in means.values())
    return grid


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole and math.isfinite(whole) else "-"


def summary_line(e: Elimination) -> str:
    """One line for the console at the end of a race."""
    dropped = [r for r in e.rows if r["outcome"] == DROPPED]
    stopped = [r for r in e.rows if r["outcome"] == STOPPED]
    left = [r for r in e.rows if r["outcome"] == SURVIVED]
    racing = [r for r in e.rows if r["outcome"] in ("racing", "not started")]
    line = f"race: {len(dropped)} of {len(e.rows)} candidates dropped, "
    if stopped:
        line += (f"{len(stopped)} stopped inside a replicate ("
                 + "; ".join(f"{r['candidate']}: {stop_place(r)}, Δ {_fmt(r['delta'], '+.4f')}"
                             for r in stopped) + "), ")
    line += f"{len(left)} left ({', '.join(r['candidate'] for r in left) or 'none'})"
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
    return (f"its budget of {e.budget_steps:,} training steps is spent: no further replicate "
            "was launched")


def stop_place(row: dict) -> str:
    return f"{row['after']} at step {row['step']}"


def _fmt(x, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)
