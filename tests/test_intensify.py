"""The racing search's rules (hydra_racing_sweeper.race.intensify) on tables with a known answer: each look,
the takeover, the extension of an open pair, in-fold stops, the answer and what the sampler is
told. Values are losses (lower is better); blocks are folds in order."""

from __future__ import annotations

import statistics

import pytest
from hydra_racing_sweeper.multitest import PAIRED_T
from hydra_racing_sweeper.race import INCUMBENT, PARKED, RACING, Proposal, Rules, intensify
from scipy import stats

from tests.helpers.holm import holm_by_hand

RULES = Rules(n_blocks=4, min_blocks=2, alpha=0.05, equivalence=0.02, test=PAIRED_T)


def props(*rows, stopped=(), done=(), failed=()):
    """Proposals from value lists (None: not run); `stopped`/`done`/`failed`: indices not live
    (`failed`: a run of it failed)."""
    return [Proposal(i, {b: v for b, v in enumerate(r) if v is not None}, i in stopped,
                     i not in stopped and i not in done and i not in failed,
                     failed=i in failed) for i, r in enumerate(rows)]


def test_a_challenger_clearly_behind_is_worse_at_its_first_look():
    ps = props([1.0, 1.2], [1.15, 1.36])
    s = intensify.replay_search(ps, RULES)
    j = s.judged[1]
    d = [0.15, 0.16]
    t = statistics.fmean(d) / (statistics.stdev(d) / 2 ** 0.5)
    assert (s.incumbent, j.outcome, j.n, j.against) == (0, "worse", 2, 0)
    assert j.delta == pytest.approx(0.155) and j.p == pytest.approx(stats.t.sf(t, 1))
    assert 1 not in s.needs  # out: runs nothing more


def test_a_challenger_better_on_every_block_of_the_incumbent_takes_its_place():
    ps = props([1.0, 1.2, None], [0.9, 1.15, None])
    s = intensify.replay_search(ps, RULES)
    assert s.incumbent == 1 and s.judged[1].outcome == INCUMBENT
    # The old incumbent is now a challenger: 0.075 behind on two blocks, not shown worse
    # (paired t, 1 df), and behind by more than δ = 0.02: undecided, no more blocks for it.
    assert s.judged[0].outcome == "undecided" and s.judged[0].against == 1
    assert s.needs == {}


def test_behind_on_its_first_block_a_challenger_leaves_while_the_search_explores():
    # SMAC's first-instance rule: 0.01 or 0.3 behind on fold 0: parked, no more blocks while
    # the search explores; the incumbent runs no second block for them.
    s = intensify.replay_search(props([1.0], [1.01], [1.3]), RULES)
    assert [s.judged[i].outcome for i in (1, 2)] == [PARKED, PARKED]
    assert s.judged[1].delta == pytest.approx(0.01) and s.needs == {}
    # Confirming: both run fold 1 beside the incumbent, the closer first in launch order.
    s = intensify.replay_search(props([1.0], [1.01], [1.3]), RULES, confirm=True)
    assert s.needs == {0: 1, 1: 1, 2: 1}
    # Past two blocks and δ or more behind, not shown worse: undecided, not confirmed further.
    s = intensify.replay_search(props([1.0, 1.2], [1.03, 1.25]), RULES, confirm=True)
    assert s.judged[1].outcome == "undecided" and 1 not in s.needs


def test_a_lead_of_half_delta_runs_on_a_smaller_one_is_parked():
    # δ/2 = 0.01: 0.012 ahead on fold 0 makes both run fold 1; 0.005 ahead is most likely level.
    s = intensify.replay_search(props([1.0], [0.988], [0.995]), RULES)
    assert s.judged[1].outcome == RACING and s.judged[2].outcome == PARKED
    assert s.needs == {0: 1, 1: 1}


def test_once_it_confirms_the_incumbent_runs_every_block_and_the_close_ones_run_on():
    ps = props([1.0, 1.2], [1.03, 1.19], [1.0, 1.25])
    s = intensify.replay_search(ps, RULES, confirm=True)
    # 0.01 behind on average with spread: neither worse nor level after 2 blocks, within δ:
    # it runs on beside the incumbent. 0.025 behind: past δ, undecided, not confirmed.
    assert s.judged[1].outcome == RACING and s.judged[2].outcome == "undecided"
    assert s.needs == {0: 2, 1: 2}
    ps = props([1.0, 1.2, 1.1, 1.0], [1.03, 1.19, 1.12, 0.99])
    s = intensify.replay_search(ps, RULES, confirm=True)
    assert s.judged[1].outcome == "undecided" and s.judged[1].n == 4 and s.needs == {}


def test_a_lead_inside_delta_on_every_block_of_the_incumbent_takes_over():
    # 0.004 ahead on both blocks with no spread: its interval [-0.004, -0.004] lies inside ±δ,
    # but it takes over, and the old incumbent is level with it. (A challenger ahead on fewer
    # blocks than the incumbent is never level: test_race_rules.)
    s = intensify.replay_search(props([1.0, 1.2, None], [0.996, 1.196]), RULES)
    assert s.incumbent == 1 and s.judged[0].outcome == "level"


def test_a_challenger_never_runs_a_block_the_incumbent_has_not():
    # The incumbent is on its first block: a challenger leading by δ/2 runs what the incumbent
    # has, and the block it is on beside it (one launch), never one ahead.
    assert intensify.replay_search(props([1.0], []), RULES).needs == {1: 0}
    assert intensify.replay_search(props([1.0], [0.98]), RULES).needs == {0: 1, 1: 1}
    assert intensify.replay_search(props([1.0, 1.1], []), RULES).needs == {1: 0}
    assert intensify.replay_search(props([]), RULES).needs == {0: 0}


def test_level_within_delta_comes_before_worse():
    # Behind by 0.005 on every block (no spread): surely behind, and surely by less than δ.
    ps = props([1.0, 1.2], [1.005, 1.205])
    j = intensify.replay_search(ps, RULES).judged[1]
    assert j.outcome == "level" and j.low == pytest.approx(0.005) == j.high


def test_a_run_stopped_at_a_rung_is_out():
    ps = props([1.0, 1.2, 1.1], [1.3], [1.002, 1.21, 1.104], stopped=(1,))
    s = intensify.replay_search(ps, RULES)
    assert s.judged[1].outcome == "stopped"
    final = intensify.final_judgements(s, ps, RULES)
    assert final[1].outcome == "stopped" and final[0].outcome == INCUMBENT


def test_the_answer_adjusts_the_comparisons_with_the_best_by_holm():
    ps = props([1.0, 1.2, 1.1, 1.0], [1.03, 1.25, 1.16, 1.04], [1.04, 1.19, 1.15, 1.01],
               done=(1, 2))
    s = intensify.replay_search(ps, RULES)
    final = intensify.final_judgements(s, ps, RULES)
    best = list(ps[0].values.values())
    raw = {i: stats.ttest_rel(list(ps[i].values.values()), best, alternative="greater").pvalue
           for i in (1, 2)}  # scipy's paired t, Holm by hand
    assert [final[1].p, final[2].p] == pytest.approx([holm_by_hand(raw)[i] for i in (1, 2)])
    assert final[0].outcome == INCUMBENT


def test_the_sampler_is_told_values_on_the_incumbents_folds():
    inc = Proposal(0, {0: 1.0, 1: 1.4, 2: 1.1})
    late = Proposal(1, {0: 1.05})  # one block: 0.05 behind there
    assert intensify.adjusted_value(late, inc) == pytest.approx(statistics.fmean(
        [1.0, 1.4, 1.1]) + 0.05)
    stopped = Proposal(2, {}, stopped=True, live=False, rung_delta=0.3)
    assert intensify.adjusted_value(stopped, inc) == pytest.approx(
        statistics.fmean([1.0, 1.4, 1.1]) + 0.3)
    assert intensify.adjusted_value(Proposal(3, {}), inc) is None


def test_a_failed_first_proposal_hands_the_incumbent_to_the_next():
    ps = props([], [1.0, 1.1], failed=(0,))
    s = intensify.replay_search(ps, RULES)
    assert s.incumbent == 1 and s.judged[0].outcome == "failed"
    # Closed with no block and no failure (the search ended before it ran): not run.
    s = intensify.replay_search(props([], [1.0, 1.1], done=(0,)), RULES)
    assert s.incumbent == 1 and s.judged[0].outcome == "not run"


def test_a_first_proposal_stopped_at_a_rung_is_stopped_not_failed():
    # Launched beside the second proposal, its run was stopped at a rung of fold 0 (seen live).
    ps = props([], [1.0], stopped=(0,))
    s = intensify.replay_search(ps, RULES)
    assert s.incumbent == 1 and s.judged[0].outcome == "stopped"
