"""The racing search's budget: a challenger that leads on fewer blocks than the incumbent ran
runs them before the incumbent runs another (intensify._needs; issue 53). Hand-made ledgers,
their expected steps worked out by hand in the comments, not by the engine."""

from __future__ import annotations

import pytest
from hydra_racing_sweeper.multitest import PAIRED_T
from hydra_racing_sweeper.race import INCUMBENT, RACING, Proposal, Rules, driver, intensify

RULES = Rules(n_blocks=5, min_blocks=2, alpha=0.05, equivalence=0.02, test=PAIRED_T)


def ledger(challenger: dict[int, float]) -> list[Proposal]:
    """Incumbent p=1 on folds 0, 1 (1.00, 1.02), a challenger p=2 on its first folds; each
    run 100 steps."""
    return [Proposal(1.0, {0: 1.00, 1: 1.02}, steps=200, run=100),
            Proposal(2.0, challenger, steps=100 * len(challenger), run=100)]


def test_a_leader_with_fewer_blocks_runs_before_the_incumbents_next():
    """Confirming (the incumbent runs every block): p=2 leads by 0.015 on fold 0 (< 0, and
    <= -δ/2: racing), one block behind the incumbent's two. It runs fold 1; the incumbent's
    fold 2 waits. With room for one run only (a budget of 300 + 100), that run is p=2's."""
    props = ledger({0: 0.985})
    search = intensify.replay_search(props, RULES, confirm=True)
    assert search.judged[1].outcome == RACING
    assert search.judged[1].delta == pytest.approx(0.985 - 1.00)
    assert search.needs == {1: 1}
    step = driver.search_turn(props, RULES, budget=400, explore=0.8, slots=2, room=0)
    assert step.runs == [(1, 1)] and not step.over


def test_the_leader_that_catches_up_takes_over_before_the_budget_ends():
    """p=2 then runs fold 1 at 1.00: its mean difference over folds 0, 1 is
    ((0.985 - 1.00) + (1.00 - 1.02)) / 2 = -0.0175 < 0 on both blocks the incumbent ran
    (min_blocks 2): it is the incumbent, and the answer's best."""
    props = ledger({0: 0.985, 1: 1.00})
    search, answer = driver.search_answer(props, RULES)
    assert search.incumbent == 1 and answer[1].outcome == INCUMBENT


def test_a_challenger_behind_does_not_hold_the_incumbent_back():
    """p=2 behind by 0.005 on fold 0 (>= 0): confirming, it runs fold 1 and the incumbent its
    fold 2, the incumbent first (driver's launch order)."""
    props = ledger({0: 1.005})
    search = intensify.replay_search(props, RULES, confirm=True)
    assert search.needs == {0: 2, 1: 1}
    step = driver.search_turn(props, RULES, budget=400, explore=0.8, slots=2, room=0)
    assert step.runs == [(0, 2)]  # one run fits: the incumbent's
