"""Racing a search's proposals against an incumbent: SMAC's intensification, judged with the
race's paired statistics (qknorm.multitest).

A sampler (TPE, GP, random) proposes one candidate at a time. The first proposal is the
incumbent and runs the first `min_blocks` blocks (a block: one replicate, e.g. data.fold=0).
Every later proposal, a challenger, runs the blocks the incumbent has run, one after another,
and is judged against the incumbent on the blocks both ran, after each block from `min_blocks`
on (a *look*):

- **worse**: the one-sided paired test of its differences (H1: the challenger is behind) has
  p <= alpha; it stops.
- **level**: with δ (`equivalence`), the paired (1 - 2 alpha) interval of its difference lies
  inside ±δ (TOST at alpha, before the worse rule, as in the race); it stops.
- **takes over**: it has run every block the incumbent has and its mean over them is lower:
  it is the incumbent from then on (SMAC's rule: better on the instances both ran; no test).
- **open**: none of these once it has run all of the incumbent's blocks: both run the next
  block (the incumbent's folds grow as challengers keep up with it), up to the last block,
  where it leaves as undecided. One behind by δ or more on its mean leaves undecided at once
  (more blocks could only call it worse: a budget is better spent on new proposals).

A run stopped inside a block at a rung (the race's margin rule, qknorm/sweep/job.py) is out as
worse. Everything here is a pure function of the proposals' values in proposal order, so a
resumed sweeper or a second one replays the same decisions (qknorm/sweep/race_search.py); a
proposal whose trial is finished runs no more blocks.

The answer (`final`): the incumbent is the best; every other proposal is compared with it once
more, on the blocks both ran, and the one-sided p-values are Holm-adjusted over those
comparisons: level (TOST inside ±δ), worse (Holm p <= alpha, or stopped at a rung), else
undecided. What the stops during the search control: each look is one test at alpha against
the incumbent of the moment (no correction over looks or proposals: a stop saves compute, the
answer's Holm carries the claim). What the answer controls: family-wise error of its worse
calls at alpha over the comparisons with the final incumbent, given that incumbent; the
incumbent is picked on the same blocks (its lead is biased, as the race's leader's is).

Example (two blocks to start, alpha 0.05, δ 0.02): incumbent p=2 runs folds 0, 1; p=4 runs
folds 0, 1 and is 0.15 behind on both with little spread: worse after fold 1. p=1.5 is 0.01
ahead on fold 0 and 0.03 behind on fold 1: neither shown worse nor level, behind by less than
δ on its mean, so open at the incumbent's two folds: both run fold 2, and so on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from qknorm.multitest import PAIRED_T, ReplicateTest, holm, tost_interval, within
from qknorm.sweep.racestats import LEVEL, STOPPED, UNDECIDED, WORSE, paired_t_greater

INCUMBENT, RACING, FAILED = "incumbent", "racing", "failed"


@dataclass(frozen=True)
class Proposal:
    key: Hashable  # the candidate (the trial's params, in the space's order)
    values: Mapping[int, float]  # block index -> value (lower is better), completed blocks
    stopped: bool = False  # a run of it was stopped at a rung: out, worse
    live: bool = True  # can run more blocks (its trial is not finished)


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
    """Level when the interval lies inside ±δ (first, as in the race), else worse when the
    one-sided p <= alpha, else `otherwise` (racing at a look, undecided in the answer)."""
    return (LEVEL if within(low, high, rules.equivalence)
            else WORSE if p <= rules.alpha else otherwise)


def replay(proposals: Sequence[Proposal], rules: Rules) -> Search:
    """The search so far. Proposals in order (a proposal's index is its place); a finished
    proposal that is not decided here ends as `failed` (its runs stopped for another reason)."""
    search = Search()
    for i, prop in enumerate(proposals):
        if search.incumbent is None:
            if contiguous(prop.values) or prop.live:
                search.incumbent = i
                search.judged[i] = Judgement(INCUMBENT, len(contiguous(prop.values)))
            else:
                search.judged[i] = Judgement(FAILED, 0)
            continue
        _challenge(search, proposals, i, rules)
    for _ in range(len(proposals)):  # racing against an incumbent that lost its place since
        stale = [i for i, j in search.judged.items()
                 if j.outcome == RACING and j.against != search.incumbent]
        if not stale:
            break
        for i in stale:
            _challenge(search, proposals, i, rules)
    _needs(search, proposals, rules)
    return search


def _challenge(search: Search, proposals: Sequence[Proposal], i: int, rules: Rules) -> None:
    """Judge proposal i against the incumbent, look by look; it may take over."""
    inc = search.incumbent
    mine, theirs = contiguous(proposals[i].values), contiguous(proposals[inc].values)
    if proposals[i].stopped:
        search.judged[i] = Judgement(STOPPED, len(mine), inc)
        return
    for n in range(rules.min_blocks, min(len(mine), len(theirs)) + 1):
        look = compare(mine[:n], theirs[:n], rules)
        if look.outcome != RACING:
            search.judged[i] = _against(look, inc)
            return
    if len(mine) >= len(theirs) >= rules.min_blocks and (
            statistics.fmean(mine[:len(theirs)]) < statistics.fmean(theirs)):
        search.incumbent = i  # better on every block the incumbent ran: it takes over
        search.judged[i] = Judgement(INCUMBENT, len(mine))
        _challenge(search, proposals, inc, rules)  # the old incumbent is now a challenger
        return
    behind = (len(mine) >= len(theirs) >= 2 and rules.equivalence is not None
              and statistics.fmean(mine[:len(theirs)]) - statistics.fmean(theirs)
              >= rules.equivalence)
    if len(mine) >= rules.n_blocks or behind:
        last = compare(mine, theirs, rules) if len(theirs) >= 2 else None
        search.judged[i] = (_against(last, inc, UNDECIDED) if last
                            else Judgement(UNDECIDED, len(mine), inc))
        return
    outcome = RACING if proposals[i].live else UNDECIDED if mine else FAILED
    search.judged[i] = Judgement(outcome, len(mine), inc)


def _against(look: Judgement, inc: int, outcome: str | None = None) -> Judgement:
    return Judgement(outcome or look.outcome, look.n, inc, look.delta, look.p, look.low,
                     look.high)


def _needs(search: Search, proposals: Sequence[Proposal], rules: Rules) -> None:
    """The next block of each live proposal still in play. A challenger runs the incumbent's
    blocks; one level with every block of it and still open makes both run one more."""
    inc = search.incumbent
    if inc is None:
        return
    have = len(contiguous(proposals[inc].values))
    extend = have < rules.min_blocks or any(
        search.judged[i].outcome == RACING and search.judged[i].n >= have for i in search.judged)
    if proposals[inc].live and extend and have < rules.n_blocks:
        search.needs[inc] = have
    for i, j in search.judged.items():
        if j.outcome == RACING and proposals[i].live and j.n < rules.n_blocks:
            if j.n < have or (j.n == have and inc in search.needs):
                search.needs[i] = j.n


def final(search: Search, proposals: Sequence[Proposal], rules: Rules) -> dict[int, Judgement]:
    """The answer: every proposal against the final incumbent, Holm over the comparisons."""
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
        else:
            out[i] = Judgement(UNDECIDED if mine or prop.live else FAILED, len(mine), inc)
    adjusted = holm([j.p for j in looks.values()])
    for (i, j), q in zip(looks.items(), adjusted, strict=True):
        out[i] = Judgement(verdict(j.low, j.high, q, rules, UNDECIDED), j.n, inc, j.delta, q,
                           j.low, j.high)
    return dict(sorted(out.items()))


def adjusted_value(prop: Proposal, incumbent: Proposal, rung_delta: float | None = None
                   ) -> float | None:
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
    if rung_delta is not None and math.isfinite(rung_delta):
        return base + rung_delta
    return None
