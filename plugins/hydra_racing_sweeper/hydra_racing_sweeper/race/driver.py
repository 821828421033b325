"""The racing engine: what a race or a racing search does next, as pure functions of what its
runs recorded. One driver for every caller: the live schedules
(hydra_racing_sweeper/race_schedule.py, hydra_racing_sweeper/search_schedule.py) read
the ledger from the study and launch what a turn asks for; the replays
(qknorm/research/race_sims.py) read it from recorded grids; the tests from tables.

A turn (RaceTurn, SearchTurn: one move of the driver, not a training step) answers, from
the ledger alone: the runs to launch now (candidate or proposal, block),
in launch order; for a search, whether to make a new proposal first; and whether it is over.
Nothing here reads a study, launches a run or asks a sampler: the caller does, then records
what it got and asks for the next turn (Optuna's pruners are the pattern: a rule answers from
the values, the loop acts).

The budget (budget_steps), one rule for the race and the search: no run launches that would
take the runs past it. It is spent by whole runs (a run stopped at a rung: to its rung); a run's
length is the longest completed run's steps so far (fits), and before any run has completed,
when its length is not known, a launch holds one run, to learn it. A turn launches the runs
that fit, in its launch order (a search: the incumbent's first, _first; a race: best first),
and the search or race is over once none fits (a race ends where it stands, its last look
made). So either ends within its budget, except a first run longer than the whole budget.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from hydra_racing_sweeper import decision
from hydra_racing_sweeper.race import intensify, looks, verdicts
from hydra_racing_sweeper.race.intensify import Proposal, Rules, Search


def spent(props: Sequence[Proposal]) -> int:
    """Training steps the proposals' runs took (a run stopped at a rung: to its rung)."""
    return sum(p.steps for p in props)


def fits(props: Sequence[Proposal], budget: int | None) -> int | None:
    """How many more whole runs of the search fit in `budget` steps (runs_fit)."""
    return runs_fit(spent(props), max((p.run for p in props), default=0), budget)


def runs_fit(steps: int, run: int, budget: int | None) -> int | None:
    """How many more whole runs of `run` steps fit in `budget` once `steps` are spent (None:
    no budget, or no run completed yet to tell a run's length while some budget is left: a
    launch then holds one run)."""
    if budget is None:
        return None
    left = budget - steps
    if left <= 0:
        return 0
    return int(left // run) if run else None


def _within(runs: list, n_fit: int | None, budget: int | None) -> list:
    """The runs of a launch that the budget lets launch (the module's rule): all without a
    budget, one while a run's length is unknown, else as many as fit."""
    if budget is None:
        return runs
    return runs[:1] if n_fit is None else runs[:n_fit]


@dataclass(frozen=True)
class SearchTurn:
    search: Search  # the decisions so far
    runs: list[tuple[int, int]]  # (proposal index, block) to launch now, in launch order
    propose: bool  # make one new proposal first (its first block joins the next launch)
    over: bool
    exploring: bool


def exploring(props: Sequence[Proposal], budget: int | None, explore: float, room: int,
              exhausted: bool, n_fit: int | None) -> bool:
    """The search still makes new proposals: it has room for one, its sampler proposes new
    ones, a run still fits (`n_fit`, fits()), and (with a budget) less than the `explore`
    share of it is spent."""
    return (room > 0 and not exhausted and n_fit != 0
            and (budget is None or spent(props) < explore * budget))


def search_turn(props: Sequence[Proposal], rules: Rules, budget: int | None, explore: float,
                slots: int, room: int, exhausted: bool = False) -> SearchTurn:
    """The racing search's next turn. `slots`: runs a launch may hold (n_jobs); `room`:
    proposals it may still make (n_trials less those made); `exhausted`: its sampler proposed
    only repeats. A new proposal is made when no challenger races and the launch has a free
    slot for its first block; blocks run the incumbent's first.

    One proposal at a time, whatever `slots`: a sampler asked for two at once is asked twice
    from the same data, and a GP proposes the same point twice (issue 70). The slots hold runs
    only: the incumbent's block beside the challenger's when both need one, else one run (a
    parallel launcher's second worker idles). Measured on the continuous replays before it was
    adopted (docs/search_results.md, "No twins")."""
    n_fit = fits(props, budget)
    going = exploring(props, budget, explore, room, exhausted, n_fit)
    search = intensify.replay_search(props, rules, confirm=not going)
    racing = any(j.outcome == verdicts.RACING for j in search.judged.values())
    runs = [(i, search.needs[i]) for i in sorted(search.needs, key=lambda i: _first(search, i))]
    if n_fit == 0:
        return SearchTurn(search, [], False, True, False)
    if going and not racing and len(runs) < slots:
        return SearchTurn(search, [], True, False, going)
    runs = _within(runs, n_fit, budget)
    return SearchTurn(search, runs, False, not search.needs and not going, going)


OUT = (verdicts.WORSE, verdicts.LEVEL, verdicts.UNDECIDED, verdicts.STOPPED,
       verdicts.FAILED, verdicts.NOT_RUN)  # decided: its trial is told and runs no more


def closed(step: SearchTurn) -> set[int]:
    """The proposals a turn is done with: decided, or every one once the search is over (the
    incumbent is told COMPLETE, the others PRUNED; intensify.final_judgements answers for them)."""
    return {i for i, j in step.search.judged.items() if step.over or j.outcome in OUT}


def _first(search: Search, i: int) -> tuple:
    """Launch order: the incumbent, then new proposals, then challengers closest to it (a
    budget that cuts a launch cuts the least promising)."""
    delta = search.judged[i].delta if i in search.judged else None
    return (i != search.incumbent, -float("inf") if delta is None else delta, i)


def search_answer(props: Sequence[Proposal], rules: Rules) -> tuple[Search, dict[int, intensify.Judgement]]:
    """The search replayed as it ends (confirming) and its answer (intensify.final_judgements): what the
    sweeper prints, qknorm.status shows and the replays score."""
    search = intensify.replay_search(props, rules, confirm=True)
    return search, intensify.final_judgements(search, props, rules)


def told(props: Sequence[Proposal], search: Search) -> list[float | None]:
    """What the sampler is told of each proposal (intensify.adjusted_value against the
    incumbent of the moment; None: nothing yet)."""
    if search.incumbent is None:
        return [None] * len(props)
    inc = props[search.incumbent]
    return [intensify.adjusted_value(p, inc) for p in props]


# ---------------------------------------------------------------------------------------------
# The race: every candidate of a grid, a look at a time (hydra_racing_sweeper/race/looks.py's rules).

@dataclass(frozen=True)
class RaceLedger:
    candidates: Sequence[Hashable]  # in grid order
    values: Mapping[Hashable, Mapping[int, float]]  # candidate -> block -> value (completed)
    live: set[Hashable]  # can still run blocks (not stopped at a rung, not failed)
    steps: int = 0  # training steps its runs took
    run: int = 0  # the steps of the longest completed run (a whole run's length; 0: none yet)


@dataclass(frozen=True)
class RaceTurn:
    race: looks.Race
    runs: list[tuple[Hashable, int]]  # (candidate, block) to launch now, in launch order


def race_turn(ledger: RaceLedger, rules: Rules, baseline: Hashable | None,
              budget: int | None, rungs: bool) -> RaceTurn:
    """The race's next turn: the looks so far, and the blocks the next look needs, block by
    block, best candidate first within a block (looks.standing), so that a run is judged
    at its rungs against the leader's. With rungs, one block a launch: a candidate stopped
    there runs no other. The budget (the module's rule): the runs that fit, best first; once
    none fits, the race ends where it stands (looks.replay_race's budget_spent)."""
    n_fit = runs_fit(ledger.steps, ledger.run, budget)
    race = looks.replay_race(ledger.candidates, ledger.values, ledger.live, rules.n_blocks,
                        rules.min_blocks, rules.alpha, baseline, n_fit == 0, rules.equivalence,
                        rules.test)
    if race.over:
        return RaceTurn(race, [])
    order = looks.standing(ledger.values, race.alive, baseline)
    runs = [(c, b) for b in range(race.need) for c in order
            if c in ledger.live and b not in ledger.values.get(c, {})]
    if rungs and runs:
        runs = [(c, b) for c, b in runs if b == runs[0][1]]
    return RaceTurn(race, _within(runs, n_fit, budget))


@dataclass(frozen=True)
class RaceVerdict:
    outcome: str  # dropped, level, survived, stopped, failed
    look: looks.Look | None  # the look that decided it (else the last one)
    test: looks.Test | None  # its test at that look (None: the leader, or no look)
    answer: str  # best, level, worse, undecided, or the outcome (looks.look_answer)


def race_verdict(race: looks.Race, c: Hashable, rules: Rules, stopped: bool = False,
                 failed: bool = False) -> RaceVerdict:
    """What the race says of candidate c (its trial's record, the replay's score). Δ and the
    interval are candidate - leader in the values' units (lower is better)."""
    dropped, level = race.dropped(), race.level()
    outcome = (verdicts.FAILED if failed else verdicts.STOPPED if stopped
               else verdicts.DROPPED if c in dropped else verdicts.LEVEL if c in level
               else verdicts.SURVIVED)
    lk = (dropped.get(c) or level.get(c)
          or (race.looks[-1] if race.looks and not failed else None))
    test = lk.tests.get(c) if lk is not None else None
    low, high = (None, None) if test is None else (test.low, test.high)
    word = looks.look_answer(outcome, None if lk is None else lk.leader, c,
                        None if test is None else test.p_adjusted, low, high, rules.alpha,
                        rules.equivalence, alone=len(race.alive) == 1)
    return RaceVerdict(outcome, lk, test, word)


def look_verdict(look: looks.Look, c: Hashable, baseline: Hashable | None,
                 equivalence: float | None) -> str:
    """What a look did with candidate c: DROPPED (significantly worse than its leader, Holm),
    LEVEL (taken out level with it within ±δ; the baseline, which never leaves, is level when
    its interval lies inside ±δ, and stays), else STAYS. The claims' record of a race's looks
    and scripts/race_replay.py say it; the race's own outcome is race_verdict's."""
    if c in look.dropped:
        return verdicts.DROPPED
    if c in look.level or (c == baseline and c in look.tests
                           and decision.level(look.tests[c].low, look.tests[c].high,
                                              equivalence)):
        return verdicts.LEVEL
    return verdicts.STAYS
