"""Racing a search's proposals against an incumbent: SMAC's intensification, explore first, then
confirm, judged with the race's paired statistics (hydra_racing_sweeper.multitest).

A sampler (TPE, GP, random) proposes one candidate at a time. The first proposal is the
incumbent. Every later proposal, a challenger, runs the incumbent's blocks (a block: one
replicate, e.g. data.fold=0) one after another, and after each it is compared with the
incumbent on the blocks both ran:

- **behind** (its mean paired difference is >= 0; SMAC's first-instance rule after one block):
  it runs no more blocks while the search explores. With two or more blocks its paired test
  may decide: **level** when its (1 - 2 alpha) interval lies inside ±δ (TOST at alpha), else
  **worse** when the one-sided p <= alpha (H1: behind). Undecided, it is **parked** (its trial
  stays open for the confirmation) when it is behind by less than δ or has run one block only;
  else (two blocks or more, behind by δ or more) it is **undecided**.
- **ahead**: it runs the incumbent's next block; once it has run every one of them (and at
  least `min_blocks`: the incumbent's pace, pace()), it **takes over** when its mean paired
  difference over the incumbent's blocks is below 0 (SMAC's rule compares the mean cost on the
  instances both ran; no test). An incumbent that can run no more (stopped at a rung in a later
  block) keeps its blocks: a challenger ahead on them runs on alone up to its pace. A challenger
  ahead never leaves as level: a p better by a little more than δ could be called level after
  two blocks (a TOST on one degree of freedom) and the worse p kept.
- A run stopped inside a block at a rung (the margin rule, hydra_racing_sweeper/job.py) is out,
  untested.

So while the search *explores*, a level or worse proposal costs one block (less when a rung
stops it) and the budget goes on new proposals. Once it *confirms* (`confirm=True`: no room for
proposals is left, or the exploration share of the budget is spent; hydra_racing_sweeper/race/driver.py
decides), the incumbent runs every block, and each parked challenger behind by less than δ on
its mean runs on, block by block, until its test calls it level or worse, it takes over, or
the blocks run out (undecided); one behind by δ or more runs a second block, for a test (the
closest run first, so a budget cuts the far ones). Past two blocks, one behind by δ or more is
not confirmed: more blocks could only call it worse.

Everything here is a pure function of the proposals' values in proposal order, so a resumed
sweeper or a second one replays the same decisions; a proposal whose trial is finished runs no
more blocks.

The answer (`final`): the incumbent is the best; every other proposal is compared with it once
more, on the blocks both ran, and the one-sided p-values are Holm-adjusted over every proposal,
those with no test (one block, stopped at a rung) counted at p = 1, since the search chose
which to test from their values (a grid's family is every p, and so is the search's): level
(TOST inside ±δ), worse (Holm p <= alpha), else undecided; a proposal stopped at a rung is
`stopped`, which the answer reads as undecided (the margin rule tests nothing;
verdicts.outcome_answer). What the stops during the search control: each look is one test at alpha
against the incumbent of the moment (no correction over looks or proposals: a stop saves compute, the
answer's Holm carries the claim). What the answer controls: family-wise error of its worse
calls at alpha over every proposal's comparison with the final incumbent, given that
incumbent; the incumbent is picked on the same blocks (its lead is biased, as the race's
leader's is).

Example (two blocks for a takeover, alpha 0.05, δ 0.02): incumbent p=2 runs fold 0; p=4 runs
fold 0 and is 0.15 behind there: parked. p=1.5 is 0.012 ahead on fold 0 (δ/2 or more): both
run fold 1; ahead on the mean of folds 0 and 1, it takes over. Once the search confirms, p=1.5
runs its remaining folds, and p=4 its fold 1, where its test calls it worse.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from hydra_racing_sweeper import decision
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest, holm, tost_interval
from hydra_racing_sweeper.race.looks import paired_t_greater
from hydra_racing_sweeper.race.verdicts import (
    ANSWER_OF,
    FAILED,
    INCUMBENT,
    NOT_RUN,
    PARKED,
    RACING,
    STOPPED,
    UNDECIDED,
)


@dataclass(frozen=True)
class Proposal:
    key: Hashable  # the candidate (the trial's params, in the space's order)
    values: Mapping[int, float]  # block index -> value (lower is better), completed blocks
    stopped: bool = False  # a run of it was stopped at a rung: out (untested)
    live: bool = True  # can run more blocks (its trial is not finished)
    rung_delta: float | None = None  # stopped: how far behind the best run it was at the rung
    steps: int = 0  # training steps its runs took (a stopped run: up to its rung)
    run: int = 0  # the steps of its longest completed run (a whole run's length)
    failed: bool = False  # a run of it failed (its trial failed); not live without a block and
    # not failed: the search ended before it ran one (not run)


@dataclass(frozen=True)
class Judgement:
    outcome: str  # incumbent, racing, worse, level, undecided, stopped, failed
    n: int  # blocks compared (its completed blocks at the decision)
    against: int | None = None  # the incumbent it was judged against (proposal index)
    delta: float | None = None  # mean paired difference, proposal - incumbent
    p: float | None = None  # one-sided test, H1: behind
    low: float | None = None  # its (1 - 2 alpha) interval of delta
    high: float | None = None


@dataclass
class Search:
    incumbent: int | None = None
    judged: dict[int, Judgement] = field(default_factory=dict)
    needs: dict[int, int] = field(default_factory=dict)  # live proposal -> its next block


@dataclass(frozen=True)
class Rules:
    n_blocks: int
    # hydra.sweeper.race.min_replicates: in a race, the blocks every candidate runs before the
    # first look; in a racing search, the blocks a takeover needs (at least)
    min_blocks: int
    alpha: float
    equivalence: float | None = None
    test: ReplicateTest = PAIRED_T


def contiguous(values: Mapping[int, float]) -> list[float]:
    """The values of blocks 0, 1, ... up to the first block missing (blocks run in order)."""
    out = []
    while len(out) in values:
        out.append(values[len(out)])
    return out


def compare(mine: Sequence[float], theirs: Sequence[float], rules: Rules) -> Judgement:
    """One look: `mine` against `theirs` on their common leading blocks (>= 2)."""
    n = min(len(mine), len(theirs))
    d = [a - b for a, b in zip(mine[:n], theirs[:n], strict=True)]
    low, high = tost_interval(d, rules.alpha, rules.test)
    p = paired_t_greater(d, rules.test)
    return Judgement(verdict(low, high, p, rules, RACING), n, None, statistics.fmean(d), p, low,
                     high)


def verdict(low: float, high: float, p: float, rules: Rules, otherwise: str) -> str:
    """The comparison's outcome (hydra_racing_sweeper.decision, asked one way: behind or not) in the
    search's words: level, worse, else `otherwise` (racing at a look, undecided in the
    answer)."""
    said = decision.decide(p, rules.alpha, tost=(low, high), equivalence=rules.equivalence)
    return {**ANSWER_OF, decision.NOT_SHOWN: otherwise}[said.word]


def replay_search(proposals: Sequence[Proposal], rules: Rules, confirm: bool = False) -> Search:
    """The search so far. Proposals in order (a proposal's index is its place); a finished
    proposal that is not decided here ends as `failed` (a run of it failed), or `not run` when
    it has no block and none failed (the search ended before its first).
    `confirm`: the search no longer explores (see the module docstring)."""
    search = Search()
    for i, prop in enumerate(proposals):
        if search.incumbent is None:
            if contiguous(prop.values) or prop.live:
                search.incumbent = i
                search.judged[i] = Judgement(INCUMBENT, len(contiguous(prop.values)))
            else:  # stopped at a rung in its first block (out, as any stopped one), or failed
                search.judged[i] = Judgement(STOPPED if prop.stopped else _unrun(prop), 0)
            continue
        _challenge(search, proposals, i, rules, confirm)
    for _ in range(len(proposals)):  # racing against an incumbent that lost its place since
        stale = [i for i, j in search.judged.items()
                 if j.outcome in (RACING, PARKED) and j.against != search.incumbent]
        if not stale:
            break
        for i in stale:
            _challenge(search, proposals, i, rules, confirm)
    _needs(search, proposals, rules, confirm)
    return search


def _challenge(search: Search, proposals: Sequence[Proposal], i: int, rules: Rules,
               confirm: bool) -> None:
    """Judge proposal i against the incumbent on the blocks both ran; it may take over."""
    inc = search.incumbent
    mine, theirs = contiguous(proposals[i].values), contiguous(proposals[inc].values)
    n = min(len(mine), len(theirs))
    if proposals[i].stopped:
        search.judged[i] = Judgement(STOPPED, len(mine), inc)
        return
    if n == 0:
        search.judged[i] = Judgement(RACING if proposals[i].live else _unrun(proposals[i])
                                     if not mine else FAILED, 0, inc)
        return
    delta = statistics.fmean(a - b for a, b in zip(mine[:n], theirs[:n], strict=True))
    if delta < 0 and len(mine) >= pace(proposals[inc], rules):
        search.incumbent = i  # ahead on the mean over the incumbent's blocks: it takes over
        search.judged[i] = Judgement(INCUMBENT, len(mine))
        _challenge(search, proposals, inc, rules, confirm)  # the old one is now a challenger
        return
    look = compare(mine[:n], theirs[:n], rules) if n >= 2 else Judgement(RACING, n, None, delta)
    if delta >= 0 and look.outcome != RACING:  # behind, and its test decides: level or worse
        search.judged[i] = _against(look, inc)
        return
    close = rules.equivalence is not None and delta < rules.equivalence
    if proposals[i].live and len(mine) < rules.n_blocks and (delta < 0 or close or n < 2):
        # Ahead by δ/2 or more: on to a takeover. A smaller lead, or behind by less than δ:
        # most likely level (δ says such differences do not matter); on once it confirms. Far
        # behind on one block: on to a second once it confirms, for a test to call it worse.
        lead = delta < 0 and (rules.equivalence is None or delta <= -rules.equivalence / 2)
        outcome = RACING if lead or confirm else PARKED
        search.judged[i] = Judgement(outcome, len(mine), inc, delta)
        return
    search.judged[i] = _against(look, inc, UNDECIDED)


def _unrun(prop: Proposal) -> str:
    """A closed proposal that completed no block: failed (a run of it failed), else not run
    (the search ended before its first block: no further run fit in the budget)."""
    return FAILED if prop.failed else NOT_RUN


def _against(look: Judgement, inc: int, outcome: str | None = None) -> Judgement:
    return Judgement(outcome or look.outcome, look.n, inc, look.delta, look.p, look.low,
                     look.high)


def pace(incumbent: Proposal, rules: Rules) -> int:
    """The blocks a challenger ahead needs to take over: every block the incumbent ran, and at
    least min_blocks. One rule for every incumbent: a live one grows with its racers (_needs),
    so they meet it there; one that can run no more (stopped at a rung in a later block) keeps
    its blocks, and a challenger ahead on them runs on alone up to min_blocks."""
    return max(len(contiguous(incumbent.values)), rules.min_blocks)


def _needs(search: Search, proposals: Sequence[Proposal], rules: Rules, confirm: bool) -> None:
    """The next block of each live proposal still in play. A challenger runs the incumbent's
    blocks; one that has caught up with it and is still racing makes the incumbent run its
    next block too (it needs at least one block, and every block once the search confirms).
    A racing challenger runs up to the incumbent's pace: its blocks after this launch, or, for
    one that can run no more, pace()."""
    inc = search.incumbent
    if inc is None:
        return
    have = len(contiguous(proposals[inc].values))
    extend = have == 0 or confirm or any(
        search.judged[i].outcome == RACING and search.judged[i].n >= have for i in search.judged)
    # A challenger that leads (mean difference < 0) on fewer blocks than the incumbent ran
    # runs them before the incumbent runs another (issue 53: once confirming, the incumbent's
    # next block went first, and a budget that ended there left the worse p answered best and
    # the leader undecided).
    if any(j.outcome == RACING and j.delta is not None and j.delta < 0 and j.n < have
           and proposals[i].live for i, j in search.judged.items()):
        extend = False
    if proposals[inc].live and extend and have < rules.n_blocks:
        search.needs[inc] = have
    reach = have + (inc in search.needs) if proposals[inc].live else pace(proposals[inc], rules)
    for i, j in search.judged.items():
        if j.outcome == RACING and proposals[i].live and j.n < min(reach, rules.n_blocks):
            search.needs[i] = j.n


def final_judgements(search: Search, proposals: Sequence[Proposal], rules: Rules) -> dict[int, Judgement]:
    """The answer: every proposal against the final incumbent, Holm over every proposal."""
    inc = search.incumbent
    if inc is None:
        return {}
    best = contiguous(proposals[inc].values)
    out: dict[int, Judgement] = {inc: Judgement(INCUMBENT, len(best))}
    looks: dict[int, Judgement] = {}
    for i, prop in enumerate(proposals):
        mine = contiguous(prop.values)
        if i == inc:
            continue
        if prop.stopped:
            out[i] = Judgement(STOPPED, len(mine), inc)
        elif min(len(mine), len(best)) >= 2:
            looks[i] = compare(mine, best, rules)
        else:  # one block in common: its difference there, no test
            n = min(len(mine), len(best))
            delta = mine[0] - best[0] if n else None
            out[i] = Judgement(UNDECIDED if mine or prop.live else _unrun(prop), len(mine), inc,
                               delta)
    # Holm over every proposal compared with the incumbent, the untested ones at p = 1: the
    # search chose which to test from their values (screened on one block, stopped at a rung),
    # so the family is every proposal, as the grid's is every p.
    untested = len(out) - 1  # out: the incumbent and the proposals with no test
    adjusted = holm([*(j.p for j in looks.values()), *[1.0] * untested])[:len(looks)]
    for (i, j), q in zip(looks.items(), adjusted, strict=True):
        out[i] = Judgement(verdict(j.low, j.high, q, rules, UNDECIDED), j.n, inc, j.delta, q,
                           j.low, j.high)
    return dict(sorted(out.items()))


def adjusted_value(prop: Proposal, incumbent: Proposal) -> float | None:
    """What the sampler is told of a proposal: the incumbent's mean over its blocks plus the
    proposal's mean paired difference to it on the blocks both ran (so folds of unequal
    difficulty do not rank proposals); for one stopped in its first block, the incumbent's mean
    plus how far behind the best run it was at the rung. None: nothing to tell yet."""
    mine, theirs = contiguous(prop.values), contiguous(incumbent.values)
    if not theirs:
        return None
    base = statistics.fmean(theirs)
    n = min(len(mine), len(theirs))
    if n:
        return base + statistics.fmean(a - b for a, b in zip(mine[:n], theirs[:n], strict=True))
    if prop.rung_delta is not None and math.isfinite(prop.rung_delta):
        return base + prop.rung_delta
    return None
