"""Racing candidates over replicates (e.g. folds): which candidates a race drops, and when.

A race runs every candidate (a grid point of a sweep) on the first `min_replicates` blocks (a
block is one replicate combination, e.g. data.fold=0), then looks: the leader is the candidate
with the lowest mean over the blocks every candidate still in the race has run, every other one
is tested against it with a one-sided t-test of its paired differences (H1: their mean is
above 0; the replicate test of qknorm.multitest: over folds the corrected resampled t, whose
variance knows folds share training text; over seeds the plain paired t), Holm's step-down
adjusts those p-values over the candidates tested at that look, and each with an adjusted
p <= alpha is dropped (the baseline never is). The others run one more block and the race looks
again, until one candidate is left or the blocks run out.

With an equivalence margin δ (race.equivalence, in the objective's units; None: off), a look
also takes out every candidate (not the leader, not the baseline, not dropped) whose paired
(1 - 2 alpha) t-interval of its difference to the leader lies inside [-δ, +δ]: TOST, two
one-sided paired t-tests at alpha, each rejecting "behind by δ or more" and "ahead by δ or
more". It leaves *level with the leader*. Level takes precedence over a drop: a candidate can
be both significantly behind and surely behind by less than δ, and the user, by naming δ, has
said such a difference does not matter (with δ = 0.02 a race had dropped p = 3 for 0.0035 on 3
folds where the grid had 0.0002: docs/results). The race
then also ends once no comparison is open: every candidate but the leader was decided at the
last look (dropped, level, or for the baseline, which stays, worse or level); at its last block
the survivors that are neither the leader nor decided are *undecided*. What the equivalence
rule controls: for one candidate at one look against a fixed leader, calling it level when its
true difference is δ or more has probability at most alpha (the TOST's size). What it does not:
the chance over the candidates of a look (no Holm: each interval is at 1 - 2 alpha), over the
looks (no alpha spending), and the leader is picked on the same blocks (its lead is biased
low, which pushes the others' differences up, away from -δ). docs/race.md has the simulated
rates.

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
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from qknorm.multitest import PAIRED_T, ReplicateTest, holm, no_spread, tost_interval, within
from qknorm.sweep.study import RACE_OUTCOME_ATTR, RACE_RUNS_ATTR

DROPPED, SURVIVED, FAILED, STOPPED = "dropped", "survived", "failed", "stopped"
LEVEL = "level"  # left the race level with the leader (equivalence, TOST)
# A candidate's answer (verdict): behind (dropped, stopped at a rung, or a baseline shown
# behind), level within ±δ, the best (the leader at the end), or none of these.
WORSE, BEST, UNDECIDED = "worse", "best", "undecided"


@dataclass(frozen=True)
class Test:
    delta: float  # mean paired difference, candidate - leader (> 0: worse)
    p: float  # one-sided t-test of the paired differences (the race's test), H1: delta > 0
    p_adjusted: float  # Holm over the candidates tested at this look
    # The paired (1 - 2 alpha) t-interval of delta (the TOST's); None without equivalence.
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Look:
    n: int  # the first n blocks were compared
    leader: Hashable
    tests: dict[Hashable, Test]  # every candidate in the race but the leader
    dropped: tuple[Hashable, ...]
    level: tuple[Hashable, ...] = ()  # left level with the leader (with equivalence only)
    decided: bool = False  # no comparison left open (with equivalence only): the race ends


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

    def level(self) -> dict[Hashable, Look]:
        """Candidates that left level with the leader, and the look that found it."""
        return {c: lk for lk in self.looks for c in lk.level}


def paired_t_greater(d: Sequence[float], test: ReplicateTest = PAIRED_T) -> float:
    """p-value of the one-sided t-test of H1: mean(d) > 0 (n >= 2 differences) under `test`
    (multitest: corrected over folds, plain paired over seeds)."""
    if no_spread(d):
        # No spread (rounding noise is not variance): a sure sign, or a tie that never drops.
        return 0.0 if statistics.fmean(d) > 1e-12 * max(1.0, abs(min(d))) else 1.0
    return test.p_greater(d)


def is_level(test: Test, equivalence: float | None) -> bool:
    """Its (1 - 2 alpha) interval lies inside [-δ, +δ] (closed: TOST p <= alpha)."""
    return within(test.low, test.high, equivalence)


def look(values: Mapping[Hashable, Sequence[float]], alpha: float,
         baseline: Hashable | None = None, equivalence: float | None = None,
         test: ReplicateTest = PAIRED_T) -> Look:
    """One look over candidates that all ran the same blocks (equal-length lists, in block
    order). The leader is the lowest mean (the first one listed on a tie). With `equivalence`
    (δ), every test carries its (1 - 2 alpha) interval, candidates inside ±δ leave as level
    (before any drop), and `decided` says no comparison is left open. `test`: the replicate
    test of both (multitest.ReplicateTest: corrected over folds)."""
    means = {c: statistics.fmean(v) for c, v in values.items()}
    leader = min(means, key=means.__getitem__)
    others = [c for c in values if c != leader]
    diffs = {c: [x - y for x, y in zip(values[c], values[leader], strict=True)] for c in others}
    raw = [paired_t_greater(diffs[c], test) for c in others]
    tests = {c: Test(statistics.fmean(diffs[c]), p, q,
                     *(tost_interval(diffs[c], alpha, test) if equivalence is not None else ()))
             for c, p, q in zip(others, raw, holm(raw), strict=True)}
    # The baseline stays to the end so every candidate can be paired with it on its folds.
    level = tuple(c for c in others if c != baseline and is_level(tests[c], equivalence))
    dropped = tuple(c for c in others
                    if tests[c].p_adjusted <= alpha and c != baseline and c not in level)
    n = len(next(iter(values.values())))
    if equivalence is None:
        return Look(n, leader, tests, dropped)
    decided = all(tests[c].p_adjusted <= alpha or is_level(tests[c], equivalence)
                  for c in others)
    return Look(n, leader, tests, dropped, level, decided)


def replay(candidates: Sequence[Hashable], values: Mapping[Hashable, Mapping[int, float]],
           live: set[Hashable], n_blocks: int, min_blocks: int, alpha: float,
           baseline: Hashable | None = None, budget_spent: bool = False,
           equivalence: float | None = None, test: ReplicateTest = PAIRED_T) -> Race:
    """The race so far, from each candidate's values by block index (lower is better).

    `live`: candidates that can still run blocks (running, or not started yet). A candidate that
    is not live and lacks a block the next look needs (its run failed) leaves the race there
    without a test. The race waits (`need`) while a live candidate lacks a block, unless its
    budget is spent (`budget_spent`): then no block will be run, and it ends where it is.
    With `equivalence` (δ), level candidates leave too, and the race ends at a look that
    leaves no comparison open (look.decided).
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
        lk = look({c: [values[c][b] for b in range(n)] for c in race.alive}, alpha, baseline,
                  equivalence, test)
        race.looks.append(lk)
        race.alive = [c for c in race.alive if c not in lk.dropped and c not in lk.level]
        if len(race.alive) < 2 or lk.decided:
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


def answer(outcome: str, leader: str | None, label: str, p_adjusted: float | None,
           low: float | None, high: float | None, alpha: float, equivalence: float | None,
           alone: bool = False) -> str:
    """What the race says of a candidate, from its record (pure: the report and the sweeper
    agree). WORSE: dropped, stopped at a rung (the margin rule), or a survivor (the baseline,
    which never leaves) whose Holm-adjusted p at its last look is <= alpha and whose interval
    is not inside ±δ; LEVEL: left level, or a surviving baseline whose interval lies inside ±δ
    (level first, as at a look); BEST: the leader of the last look
    (or the one survivor when no look was made); UNDECIDED: any other survivor. Other
    outcomes (failed, racing, not started) are their own answer."""
    if outcome in (DROPPED, STOPPED):
        return WORSE
    if outcome != SURVIVED:
        return outcome
    if leader is None:  # no look: every other candidate left before it (or the budget ended it)
        return BEST if alone else UNDECIDED
    if leader == label:
        return BEST
    if is_level(Test(math.nan, math.nan, math.nan, low, high), equivalence):
        return LEVEL
    return WORSE if p_adjusted is not None and p_adjusted <= alpha else UNDECIDED


def completed(runs: Mapping[str, dict]) -> dict[str, dict]:
    """The block results of runs that went to the end (not stopped at a rung)."""
    return {b: r for b, r in runs.items() if r.get("stopped_at") is None}


def block_values(user_attrs: Mapping[str, object], blocks: Sequence[str],
                 sign: float = 1.0) -> dict[int, float]:
    """A trial's completed blocks (user attr RACE_RUNS_ATTR): block index -> sign * value."""
    runs = completed(user_attrs.get(RACE_RUNS_ATTR, {}))
    return {i: sign * runs[b]["value"] for i, b in enumerate(blocks) if b in runs}


def stopped_block(user_attrs: Mapping[str, object]) -> str | None:
    """The block in which a trial's run was stopped at a rung (it is out), or None."""
    runs = user_attrs.get(RACE_RUNS_ATTR, {})
    return next((b for b, r in runs.items() if r.get("stopped_at") is not None), None)


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
    equivalence: float | None = None  # δ, if the race took out level candidates
    alpha: float = 0.05  # the race's
    test: ReplicateTest = PAIRED_T  # its looks' test (a study raced before the key: paired)

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
    records = {label: (trials[label].user_attrs.get(RACE_OUTCOME_ATTR, {})
                       if trials.get(label) is not None else {})
               for label in settings["candidates"]}
    survivors = sum(r.get("outcome") == SURVIVED for r in records.values())
    equivalence = settings.get("equivalence")  # a study raced before the key: None
    for label in settings["candidates"]:
        t, record = trials.get(label), records[label]
        runs, done = runs_of[label], completed(runs_of[label])
        outcome = record.get("outcome") or ("racing" if t is not None else "not started")
        row = {"candidate": label, "outcome": outcome, "n": len(runs),
               "mean": statistics.fmean(r["value"] for r in done.values()) if done
               else math.nan,
               **{k: record.get(k) for k in ("after", "step", "leader", "delta", "p",
                                             "p_adjusted", "low", "high")}}
        row["answer"] = answer(outcome, row["leader"], label, row["p_adjusted"], row["low"],
                               row["high"], settings["alpha"], equivalence, survivors == 1)
        # What the candidate's runs cost (a stopped run's partial steps and core-seconds too).
        for key in ("steps", "core_s"):
            row[key] = sum(r[key] for r in runs.values() if r.get(key) is not None)
        rows.append(row)
        spent["runs"] += len(runs)
        spent["stopped"] += len(runs) - len(done)
        for key in ("steps", "core_s"):
            spent[key] += row[key]
    return Elimination(blocks, settings.get("baseline"), rows, spent,
                       _grid_estimate(runs_of, len(blocks)), settings.get("budget_steps"),
                       equivalence, settings["alpha"], settings_test(settings))


def settings_test(settings: Mapping[str, object]) -> ReplicateTest:
    """The looks' test as a study's race settings record it (a race or a racing search; one
    raced before the key existed: the paired t)."""
    return (ReplicateTest(settings["test"], settings["ratio"]) if settings.get("test")
            else PAIRED_T)


def steps_spent(trials: Iterable[object]) -> int:
    """The training steps of every run the trials' race_runs record (a run stopped at a rung:
    its steps to the rung)."""
    return sum(r.get("steps") or 0 for t in trials
               for r in t.user_attrs.get(RACE_RUNS_ATTR, {}).values())


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
    level = [r for r in e.rows if r["outcome"] == LEVEL]
    stopped = [r for r in e.rows if r["outcome"] == STOPPED]
    left = [r for r in e.rows if r["outcome"] == SURVIVED]
    racing = [r for r in e.rows if r["outcome"] in ("racing", "not started")]
    line = f"race: {len(dropped)} of {len(e.rows)} candidates dropped, "
    if level:
        line += (f"{len(level)} level with the leader within ±{e.equivalence:g} ("
                 + ", ".join(r["candidate"] for r in level) + "), ")
    if stopped:
        line += (f"{len(stopped)} stopped inside a replicate ("
                 + "; ".join(f"{r['candidate']}: {stop_place(r)}, Δ {_fmt(r['delta'], '+.4f')}"
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
    return (f"its budget of {e.budget_steps:,} training steps is spent: no further replicate "
            "was launched")


def stop_place(row: dict) -> str:
    return f"{row['after']} at step {row['step']}"


def _fmt(x, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)
