"""Edges of the race's and the search's rules, through their public functions (looks.look,
looks.replay_race, looks.stop_at_rung, driver.search_answer), with expected values from scipy and by hand
(issue 68): equal values at a rung, δ = inf, min_replicates equal to the number of folds,
differences with no spread, rounding noise of 1e-16, a stopped proposal not yet told."""

from __future__ import annotations

import math

import pytest
from hydra_racing_sweeper.race import INCUMBENT, STOPPED, UNDECIDED, Proposal, Rules, driver, looks
from scipy import stats


def test_a_run_level_with_the_best_at_a_rung_plus_the_margin_goes_on():
    """Stop only when above the best by more than the margin: 2.5 against 2.25 with margin
    0.25 is exactly the margin (0.25 - representable sums): goes on; a hair more stops."""
    assert looks.stop_at_rung(2.5, {"b": 2.25}, 0.25) is None
    stop = looks.stop_at_rung(2.5 + 1e-9, {"b": 2.25, "c": 2.4}, 0.25)
    assert stop is not None and stop.best == "b" and stop.delta == pytest.approx(0.25 + 1e-9)
    assert looks.stop_at_rung(2.25, {"b": 2.25}, 0.0) is None  # equal rungs: not behind


def test_delta_inf_calls_every_tested_candidate_level_and_drops_none():
    """δ = inf: every finite interval lies inside ±δ, so the first look takes every other
    candidate out level (level before a drop), however far behind, and the race is decided."""
    values = {"a": [1.0, 1.1, 1.2], "b": [2.0, 2.3, 2.1], "c": [1.05, 1.12, 1.27]}
    lk = looks.look(values, 0.05, equivalence=math.inf)
    assert lk.leader == "a" and set(lk.level) == {"b", "c"} and lk.dropped == ()
    assert lk.decided


def test_min_replicates_equal_to_the_folds_looks_once_at_the_end():
    """min_replicates = n_blocks = 3: nothing is looked at before the third fold; then one look,
    its p the one-sided paired t of scipy, Holm over the two others (by hand)."""
    a, b, c = [1.0, 1.1, 1.2], [1.3, 1.45, 1.5], [1.01, 1.2, 1.19]
    partial = {"a": {0: a[0], 1: a[1]}, "b": {0: b[0], 1: b[1]}, "c": {0: c[0], 1: c[1]}}
    early = looks.replay_race(["a", "b", "c"], partial, {"a", "b", "c"}, 3, 3, 0.05)
    assert early.looks == [] and early.need == 3
    full = {k: dict(enumerate(v)) for k, v in (("a", a), ("b", b), ("c", c))}
    race = looks.replay_race(["a", "b", "c"], full, {"a", "b", "c"}, 3, 3, 0.05)
    assert len(race.looks) == 1 and race.over and race.looks[0].n == 3
    p = {k: stats.ttest_rel(v, a, alternative="greater").pvalue for k, v in (("b", b), ("c", c))}
    lo, hi = sorted(p, key=p.get)
    holm = {lo: min(1.0, 2 * p[lo]), hi: min(1.0, max(2 * p[lo], p[hi]))}
    tests = race.looks[0].tests
    assert {k: tests[k].p_adjusted for k in "bc"} == pytest.approx(holm)
    assert race.looks[0].dropped == tuple(k for k in "bc" if holm[k] <= 0.05)


def test_differences_with_no_spread_are_a_sure_sign_or_a_tie():
    """Every fold 0.1 behind: the t is infinite, p = 0, dropped; every fold equal: p = 1, never
    dropped; level with δ when the constant difference is inside ±δ (its interval is the mean
    itself)."""
    lk = looks.look({"a": [1.0, 1.2, 1.1], "b": [1.1, 1.3, 1.2], "c": [1.0, 1.2, 1.1]}, 0.05)
    assert lk.tests["b"].p == 0.0 and "b" in lk.dropped
    assert lk.tests["c"].p == 1.0 and "c" not in lk.dropped
    lk = looks.look({"a": [1.0, 1.2], "b": [1.01, 1.21]}, 0.05, equivalence=0.02)
    assert lk.tests["b"].low == pytest.approx(0.01) and lk.tests["b"].high == pytest.approx(0.01)
    assert lk.level == ("b",)


def test_rounding_noise_of_1e_16_is_not_a_difference():
    """b's values are a's plus noise at the last bit (1e-16): no spread worth a test, and a
    mean difference that is rounding, not a lead: p = 1, not dropped."""
    a = [1.0, 1.1, 1.2]
    b = [x + e for x, e in zip(a, (1e-16, 2.2e-16, -1e-16))]
    lk = looks.look({"a": a, "b": b}, 0.05)
    assert lk.tests.get("b", lk.tests.get("a")).p == 1.0 and lk.dropped == ()


def test_a_stopped_proposal_not_yet_told_is_stopped_and_undecided_in_the_answer():
    """A challenger stopped at a rung in its first fold whose trial the sweeper has not told
    yet (live False from the ledger as soon as its run is stopped): replayed stopped, answered
    stopped (undecided: the margin rule tests nothing); the incumbent is best."""
    rules = Rules(n_blocks=3, min_blocks=1, alpha=0.05, equivalence=0.02)
    props = [Proposal("a", {0: 1.0}, steps=100, run=100),
             Proposal("b", {}, stopped=True, live=False, rung_delta=0.3, steps=50)]
    search, answer = driver.search_answer(props, rules)
    assert search.judged[1].outcome == STOPPED and answer[1].outcome == STOPPED
    assert answer[0].outcome == INCUMBENT
    from hydra_racing_sweeper.race import verdicts
    assert verdicts.outcome_answer(answer[1].outcome) == UNDECIDED
