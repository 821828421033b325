"""Racing candidates over replicates (e.g. folds): which candidates a race drops, and when.

A race runs every candidate (a grid point of a sweep) on the first `min_replicates` blocks (a
block is one replicate combination, e.g. data.fold=0), then looks: the leader is the candidate
with the lowest mean over the blocks every candidate still in the race has run, every other one
is tested against it with a one-sided t-test of its paired differences (H1: their mean is
above 0; the replicate test of hydra_racing_sweeper.multitest: over folds the corrected resampled t, whose
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
recorded in the study (hydra_racing_sweeper/race_schedule.py, through hydra_racing_sweeper/race/driver.py), so
a resumed sweep, or a second sweeper on the same study, reaches the same decisions; the report
reads the decisions back (hydra_racing_sweeper/readback/). The words of the decisions are
hydra_racing_sweeper/race/verdicts.py's.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from hydra_racing_sweeper import decision
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest, holm, no_spread, tost_interval
from hydra_racing_sweeper.race import verdicts
from hydra_racing_sweeper.race.verdicts import BEST, SURVIVED, UNDECIDED


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


def test_outcome(test: Test, alpha: float, equivalence: float | None) -> decision.Outcome:
    """The comparison's outcome (hydra_racing_sweeper.decision, asked one way: behind the leader or not):
    level, worse or not shown."""
    return decision.decide(test.p_adjusted, alpha, tost=(test.low, test.high),
                           equivalence=equivalence)


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
    said = {c: test_outcome(tests[c], alpha, equivalence).word for c in others}
    # The baseline stays to the end so every candidate can be paired with it on its folds.
    level = tuple(c for c in others if c != baseline and said[c] == decision.LEVEL)
    dropped = tuple(c for c in others if c != baseline and said[c] == decision.WORSE)
    n = len(next(iter(values.values())))
    if equivalence is None:
        return Look(n, leader, tests, dropped)
    decided = all(said[c] != decision.NOT_SHOWN for c in others)
    return Look(n, leader, tests, dropped, level, decided)


def replay_race(candidates: Sequence[Hashable], values: Mapping[Hashable, Mapping[int, float]],
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


def look_answer(outcome: str, leader: str | None, label: str, p_adjusted: float | None,
           low: float | None, high: float | None, alpha: float, equivalence: float | None,
           alone: bool = False) -> str:
    """What the race says of a candidate, from its record (pure: the report and the sweeper
    agree). WORSE: dropped, or a survivor (the baseline, which never leaves) whose
    Holm-adjusted p at its last look is <= alpha and whose interval is not inside ±δ; LEVEL:
    left level, or a surviving baseline whose interval lies inside ±δ (level first, as at a
    look); BEST: the leader of the last look (or the one survivor when no look was made);
    UNDECIDED: stopped at a rung (the margin rule tests nothing: on noisy curves it stops p
    that the grid does not show worse, docs/search.md), or any other survivor. Other outcomes
    (failed, racing, not started) are their own answer."""
    if outcome != SURVIVED:
        return verdicts.outcome_answer(outcome)  # dropped: worse, stopped: undecided, ...
    if leader is None:  # no look: every other candidate left before it (or the budget ended it)
        return BEST if alone else UNDECIDED
    if leader == label:
        return BEST
    said = decision.decide(p_adjusted, alpha, tost=(low, high), equivalence=equivalence)
    return verdicts.ANSWER_OF[said.word]

