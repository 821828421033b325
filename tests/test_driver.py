"""The racing engine's driver (hydra_racing_sweeper.race.driver) on hand-made tables: the steps it asks for,
its budget, what the sampler is told, the answer with Holm, and the order of retried proposals;
then one test that the live search and the replay make the same runs and the same answer on
the same values. Expected numbers come from scipy and hand computation."""

from __future__ import annotations

import logging
import math

import optuna
import pytest
from hydra_racing_sweeper import raceplan, readback
from hydra_racing_sweeper.multitest import PAIRED_T
from hydra_racing_sweeper.race import INCUMBENT, PARKED, RACING, Proposal, Rules, driver, looks
from hydra_racing_sweeper.search_schedule import propose
from hydra_racing_sweeper.space import Param, SearchSpace
from hydra_racing_sweeper.study import RACE_RUNS_ATTR, RETRIED_ATTR
from optuna.distributions import FloatDistribution
from scipy import stats

from qknorm.errors import UserError
from qknorm.research import race_sims

RULES = Rules(n_blocks=4, min_blocks=2, alpha=0.05, equivalence=0.02, test=PAIRED_T)


def done(key, values, **kw):
    """A proposal whose trial is told: blocks 0.. with `values`, 1000 steps a run."""
    return Proposal(key, dict(enumerate(values)), live=False, steps=1000 * len(values),
                    run=1000 if values else 0, **kw)


def test_holm_turns_two_worse_calls_into_undecided():
    inc = done("a", [1.0, 1.2, 1.1])
    d1, d2 = [0.02, 0.05, 0.07], [0.03, 0.05, 0.075]
    props = [inc, done("b", [x + y for x, y in zip(inc.values.values(), d1)]),
             done("c", [x + y for x, y in zip(inc.values.values(), d2)])]
    raw = [stats.ttest_1samp(d, 0.0, alternative="greater").pvalue for d in (d1, d2)]
    assert max(raw) < 0.05  # each alone is worse at alpha 0.05 ...
    lo, hi = sorted(raw)
    holm = [2 * lo, max(2 * lo, hi)]  # Holm's step-down by hand
    assert min(holm) > 0.05  # ... but not after Holm over the two comparisons with the best
    _, answer = driver.search_answer(props, RULES)
    assert answer[0].outcome == INCUMBENT
    assert [answer[1].outcome, answer[2].outcome] == ["undecided", "undecided"]
    assert sorted([answer[1].p, answer[2].p]) == pytest.approx(sorted(holm))


def test_proposals_never_tested_still_count_in_holms_family():
    """The search chose which proposals to test from their values, so the family is every
    proposal: one screened out on a block, or stopped at a rung, counts at p = 1."""
    inc = done("a", [1.0, 1.2, 1.1])
    d = [0.03, 0.05, 0.075]
    tested = done("b", [x + y for x, y in zip(inc.values.values(), d)])
    raw = stats.ttest_1samp(d, 0.0, alternative="greater").pvalue
    assert raw < 0.05 < 2 * raw and raw < 0.05 < 3 * raw
    _, alone = driver.search_answer([inc, tested], RULES)
    assert alone[1].outcome == "worse" and alone[1].p == pytest.approx(raw)
    screened = done("c", [1.05])  # one block: no test
    stopped = Proposal("d", {}, stopped=True, live=False, steps=500)
    _, answer = driver.search_answer([inc, tested, screened], RULES)
    assert answer[1].outcome == "undecided" and answer[1].p == pytest.approx(2 * raw)
    _, answer = driver.search_answer([inc, tested, screened, stopped], RULES)
    assert answer[1].outcome == "undecided" and answer[1].p == pytest.approx(3 * raw)
    assert answer[2].outcome == "undecided" and answer[3].outcome == "stopped"


def test_the_initial_design_is_proposed_first_in_order_then_the_sampler():
    dist = {"1/norm.p": optuna.distributions.FloatDistribution(0.0, 1.0)}
    space = SearchSpace((Param("1/norm.p", "norm.p", dist["1/norm.p"], None),), ())
    initial = [space.params_of({"norm.p": math.inf}), space.params_of({"norm.p": 1.0})]
    assert initial == [{"1/norm.p": 0.0}, {"1/norm.p": 1.0}]
    make = lambda n: optuna.samplers.RandomSampler(seed=n)  # noqa: E731
    assert propose(make, [], dist, initial) == {"1/norm.p": 0.0}
    assert propose(make, [({"1/norm.p": 0.0}, 1.5)], dist, initial) == {"1/norm.p": 1.0}
    # a resumed search that already ran the second point runs the first, not it again
    assert propose(make, [({"1/norm.p": 1.0}, 1.5)], dist, initial) == {"1/norm.p": 0.0}
    told = [({"1/norm.p": 0.0}, 1.5), ({"1/norm.p": 1.0}, None)]  # None: still running
    after = propose(make, told, dist, initial)
    assert after == propose(make, told, dist) and 0.0 < after["1/norm.p"] < 1.0
    with pytest.raises(ValueError, match=r"norm.p=0.5 is outside 1/norm.p's range \[0.0, 1.0\]"):
        space.params_of({"norm.p": 0.5})


class _Fixed(optuna.samplers.BaseSampler):
    """Proposes `x` for 1/p, whatever it is told."""

    def __init__(self, x: float):
        self.x = x

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, dist):
        return self.x


def test_a_proposal_a_rounding_from_an_earlier_one_is_a_repeat_not_a_new_point():
    """Issue 70: the GP proposed x = 0.9999999999999998 after the initial design's 1.0, and the
    search ran it as a new point (p = 1.0000000000000002 beside p = 1). It is a repeat: the
    sampler is asked again (a new seed, `make(n)` for the next n), and only repeats leave
    nothing to propose; a point 1e-6 away is a new one."""
    dist = {"1/norm.p": optuna.distributions.FloatDistribution(0.0, 1.0)}
    told = [({"1/norm.p": 0.0}, 1.5), ({"1/norm.p": 1.0}, 1.2)]
    first = len(told) * 16  # propose's n for its first ask (attempts=16)
    xs = {first: 0.9999999999999998}  # then 0.5
    assert propose(lambda n: _Fixed(xs.get(n, 0.5)), told, dist) == {"1/norm.p": 0.5}
    assert propose(lambda n: _Fixed(0.9999999999999998), told, dist) is None
    assert propose(lambda n: _Fixed(1.0 - 1e-6), told, dist) == {"1/norm.p": 1.0 - 1e-6}


def test_an_initial_point_the_space_cannot_propose_is_dropped_with_one_line(caplog):
    """search=p_tpe's initial [inf, 1.0] under norm.p=interval(1, 8): p = inf is outside, so
    the search starts from p = 1, and one log line says so (as a rung that does not fit)."""
    dist = FloatDistribution(1.0, 8.0)
    space = SearchSpace((Param("norm.p", "norm.p", dist, None),), ())
    with caplog.at_level(logging.WARNING):
        got = raceplan._initial([math.inf, 1.0, 2.0, 1.0], space, "tpe")
    assert got == ({"norm.p": 1.0}, {"norm.p": 2.0})  # in order, the repeat once
    assert caplog.messages == ["hydra.sweeper.race.initial=[inf, 1.0, 2.0, 1.0]: norm.p=inf "
                               "is outside norm.p's range [1.0, 8.0]: dropped"]
    with pytest.raises(UserError, match="a race runs every point of its grid"):
        raceplan._initial([2.0], space, None)


def test_an_incumbent_stopped_at_a_rung_gives_way_instead_of_hanging_the_search():
    """Seen live (paper_cpu, p_tpe): the incumbent p = 1 ran fold 0, then was stopped at a rung
    in fold 1, so it could never reach min_replicates 2; the challenger ahead on both folds
    could not take over and every step asked for nothing. Now it takes over; and one ahead
    on fold 0 only runs fold 1 for its takeover."""
    inc = Proposal("p1", {0: 2.06}, stopped=True, live=False, steps=2500, run=2000)
    ahead = Proposal("p1.6", {0: 1.85, 1: 1.82}, steps=4000, run=2000)
    one = Proposal("p1.9", {0: 1.86}, steps=2000, run=2000)
    step = driver.search_turn([inc, ahead, one], RULES, 26667, 0.8, 2, 20)
    assert step.search.incumbent == 1 and step.search.judged[0].outcome == "stopped"
    assert step.search.judged[2].outcome == PARKED  # 0.01 behind the new incumbent on fold 0
    assert step.propose and not step.over  # so the search goes on proposing
    step = driver.search_turn([inc, one], RULES, 26667, 0.8, 1, 20)  # one slot: no proposal
    assert step.search.incumbent == 0 and step.runs == [(1, 1)]  # fold 1, for a takeover
    two = Proposal("p1.9", {0: 1.86, 1: 1.90}, steps=4000, run=2000)
    assert driver.search_turn([inc, two], RULES, 26667, 0.8, 2, 20).search.incumbent == 1


def test_a_budget_fits_whole_runs_only():
    two = [done("a", [1.0]), done("b", [1.1])]  # 2000 steps spent, a run is 1000
    assert driver.fits(two, None) is None
    assert driver.fits(two, 3999) == 1 and driver.fits(two, 4000) == 2
    assert driver.fits(two, 2999) == 0 and driver.fits(two, 2000) == 0
    assert driver.fits([Proposal("a", {}, steps=300)], 1000) is None  # no run known yet
    # Over once no run fits, whatever is still racing.
    step = driver.search_turn([done("a", [1.0]), Proposal("b", {0: 0.95}, steps=1000,
                                                          run=1000)],
                              RULES, 2999, 1.0, 1, 10)
    assert step.over and step.runs == []
    live = [Proposal("a", {0: 1.0}, steps=1000, run=1000),
            Proposal("b", {0: 0.95}, steps=1000, run=1000)]
    step = driver.search_turn(live, RULES, 3000, 1.0, 1, 10)
    assert not step.over and step.runs == [(0, 1)]  # of the two the lead asks for, one fits


def test_a_step_proposes_while_a_slot_is_free_and_then_runs_the_incumbent_first():
    inc = Proposal("a", {0: 1.0}, live=True, steps=1000, run=1000)
    step = driver.search_turn([inc], RULES, None, 0.8, 1, 5)
    assert step.propose and step.runs == []  # no challenger races: make one
    lead = Proposal("b", {0: 0.97}, steps=1000, run=1000)  # 0.03 ahead: >= δ/2, runs on
    step = driver.search_turn([inc, lead], RULES, None, 0.8, 1, 5)
    assert not step.propose and step.runs == [(0, 1), (1, 1)]  # the incumbent's first
    # Two slots: a launch holds the two runs already, so it launches them; three: a free slot,
    # but one challenger races, so no second proposal (one at a time: no twins).
    assert not driver.search_turn([inc, lead], RULES, None, 0.8, 2, 5).propose
    assert not driver.search_turn([inc, lead], RULES, None, 0.8, 3, 5).propose
    # No room left: it confirms, and ends once nothing is needed.
    step = driver.search_turn([done("a", [1.0, 1.1, 1.0, 1.2]), done("b", [1.3])], RULES,
                              None, 0.8, 1, 0)
    assert step.over and not step.exploring


def test_a_search_with_two_slots_proposes_again_only_once_its_last_proposal_has_run():
    """Issue 70's twins: at n_jobs 2 a proposal made beside another from the same data. A new
    proposal with no block yet is racing: the turn launches its first block (the incumbent has
    run that fold) and asks for no other proposal, a slot free or not; once it has lost (behind
    at its first block), the next one is asked."""
    inc = Proposal("a", {0: 1.0, 1: 1.0}, live=True, steps=2000, run=1000)
    new = Proposal("b", {}, steps=0, run=1000)
    step = driver.search_turn([inc, new], RULES, None, 0.8, 2, 5)
    assert not step.propose and step.runs == [(1, 0)]
    lost = Proposal("b", {0: 1.5}, live=False, steps=1000, run=1000)  # 0.5 behind: out
    assert driver.search_turn([inc, lost], RULES, None, 0.8, 2, 5).propose


def test_the_exploration_share_of_the_budget_ends_the_proposals():
    inc = Proposal("a", {0: 1.0}, steps=1000, run=1000)
    parked = Proposal("b", {0: 1.01}, steps=1000, run=1000)
    assert driver.search_turn([inc, parked], RULES, 10_000, 0.3, 1, 5).exploring  # 2000 < 3000
    step = driver.search_turn([inc, parked], RULES, 10_000, 0.2, 1, 5)  # 2000 >= 2000
    assert not step.exploring and not step.propose
    assert step.search.judged[1].outcome == RACING and step.runs == [(0, 1), (1, 1)]
    assert driver.search_turn([inc, parked], RULES, 10_000, 0.3, 1, 5).search.judged[
        1].outcome == PARKED


def test_a_proposal_stopped_at_a_rung_is_told_to_the_sampler_from_the_study():
    """The live search reads the ledger from the study: a trial whose first run stopped at a
    rung 0.3 behind the best run there is told the incumbent's mean + 0.3."""
    study = optuna.create_study()
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    settings = {"blocks": ["fold=0", "fold=1"], "min_replicates": 2, "alpha": 0.05,
                "equivalence": 0.02, "search": "tpe"}
    runs = [{"fold=0": {"value": 1.0, "steps": 100}, "fold=1": {"value": 1.4, "steps": 100}},
            {"fold=0": {"value": None, "steps": 50, "stopped_at": 50, "delta": 0.3}}]
    for x, r in zip((0.1, 0.2), runs):
        study.add_trial(optuna.trial.create_trial(
            params={"x": x}, distributions=dist, state=optuna.trial.TrialState.PRUNED,
            user_attrs={RACE_RUNS_ATTR: r}))
    _, props = readback.ledger(study.trials, settings)
    assert props[1].stopped and props[1].rung_delta == 0.3 and props[1].steps == 50
    search = driver.search_turn(props, readback.rules(settings), None, 1.0, 1, 0).search
    assert driver.told(props, search) == pytest.approx([1.2, 1.5])  # mean(1.0, 1.4) + 0.3


def test_a_retry_takes_its_originals_place_in_the_proposal_order():
    study = optuna.create_study()
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    state = optuna.trial.TrialState
    for x, s, sys_attrs in ((0.1, state.FAIL, {}), (0.2, state.PRUNED, {}),
                            (0.1, state.RUNNING, {RETRIED_ATTR: 0})):
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=dist, state=s,
                                                  system_attrs=sys_attrs))
    # Trial 2 retries trial 0 (a killed sweeper's): it is the first proposal, not the last.
    assert [t.number for t in readback.proposals(study.trials)] == [2, 1]


def test_a_race_runs_a_block_a_launch_best_first_with_rungs():
    values = {1: {0: 1.2, 1: 1.0}, 2: {0: 1.0, 1: 0.9}, 3: {0: 1.1}}
    ledger = driver.RaceLedger([1, 2, 3], values, {1, 2, 3})
    rules = Rules(n_blocks=4, min_blocks=3, alpha=0.05)
    step = driver.race_turn(ledger, rules, None, None, rungs=True)
    # The look needs blocks 0-2; block 1 first (3 lacks it), then block 2 next launch. Best
    # first by the mean over blocks every one ran (block 0): 2 (1.0), 3 (1.1), 1 (1.2).
    assert step.runs == [(3, 1)]
    ledger = driver.RaceLedger([1, 2, 3], {**values, 3: {0: 1.1, 1: 1.0}}, {1, 2, 3})
    assert driver.race_turn(ledger, rules, None, None, rungs=True).runs == [(2, 2), (3, 2),
                                                                              (1, 2)]
    assert driver.race_turn(ledger, rules, None, None, rungs=False).runs == [(2, 2), (3, 2),
                                                                               (1, 2)]


@pytest.mark.slow
def test_the_live_search_and_the_replay_make_the_same_runs_and_answer(cli, monkeypatch):
    """tests/helpers/race_task.py's table, searched through the CLI (its initial design first),
    then replayed by race_sims on the same table with the live search's proposals in the live
    order: the same (x, fold) runs in the same order, and the same answer."""
    from tests.helpers.race import SEARCH, TASK, answers, calls, replay_runs
    from tests.helpers.race_task import FOLD, MEAN, NOISE
    from tests.helpers.studies import study_of

    r = cli(TASK, *SEARCH, "++hydra.sweeper.race.initial=[5,1]")
    assert r.returncode == 0, r.stderr[-3000:]
    live_runs = calls(cli.cwd)
    study = study_of(cli.cwd, "s")
    settings = study.user_attrs["race"]
    order = [t.params["x"] for t in readback.proposals(study.get_trials())]
    assert order[:2] == [5, 1] and settings["initial"] == [{"x": 5}, {"x": 1}]  # then TPE's
    grid = {x: [{"fold": f, "value": MEAN[x] + FOLD[f] + NOISE[x][f], "steps": 100,
                 "core_s": 4.0, "curve": None} for f in range(4)] for x in MEAN}
    ran = replay_runs(monkeypatch)
    script = iter(order)
    def scripted(*args, **kwargs):  # the live proposals in their order, then none left
        x = next(script, None)
        return None if x is None else {"norm.p": x}

    monkeypatch.setattr(race_sims, "propose", scripted)
    out = race_sims.race_search(grid, "random", 0, None, readback.rules(settings), {},
                                explore=settings["explore"], max_proposals=len(order))
    assert ran == live_runs
    live = answers(cli.cwd)
    assert out["best_p"] == next(int(c[2:]) for c, a in live.items() if a == "best")
    assert out["worse"] == sorted(int(c[2:]) for c, a in live.items() if a == "worse")
    assert out["level"] == sorted(int(c[2:]) for c, a in live.items() if a == "level")
    assert out["steps"] == 100 * len(live_runs)


def test_the_answer_gives_a_one_block_proposal_its_difference_untested():
    _, answer = driver.search_answer([done("a", [1.0, 1.2]), done("b", [1.03])], RULES)
    assert answer[1].outcome == "undecided" and answer[1].delta == pytest.approx(0.03)
    assert answer[1].p is None and answer[1].low is None


def test_confirming_a_cut_launch_keeps_the_incumbent_and_the_closest_challenger():
    inc = Proposal("a", {0: 1.0}, steps=1000, run=1000)
    far, close = (Proposal(k, {0: v}, steps=1000, run=1000) for k, v in (("b", 1.015),
                                                                         ("c", 1.005)))
    # 3000 spent of 5000: two runs fit; no room for proposals, so it confirms: the incumbent's
    # fold 1, then c (0.005 behind) before b (0.015 behind).
    step = driver.search_turn([inc, far, close], RULES, 5000, 0.8, 1, 0)
    assert not step.exploring and step.runs == [(0, 1), (2, 1)]


@pytest.mark.parametrize("values, needles", [
    (["abc"], ["hydra.sweeper.race.initial=[2.0, abc]: could not convert string to float: 'abc'",
               "give values of the searched keys (norm.p), e.g. hydra.sweeper.race.initial=[1.0]"]),
    ([{"norm.q": 2.0}], ["does not give each searched key (norm.p) once"]),
])
def test_an_initial_point_that_is_no_value_of_the_searched_key_is_refused(values, needles):
    """race.initial=[abc] was dropped with a log line, as if it were a value outside the range
    (issue 54): a value of the wrong type is a mistake to name, not a point to skip."""
    space = SearchSpace((Param("norm.p", "norm.p", FloatDistribution(1.0, 8.0), None),), ())
    with pytest.raises(UserError) as e:
        raceplan._initial([2.0, *values], space, "tpe")
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


def test_a_looks_verdict_drops_takes_out_level_or_keeps_and_the_baseline_stays_level():
    """A look by the race's own rule (looks.look): b is 1.0 behind the leader a on every fold
    and drops; base is 0.001 behind with a tight interval and c 0.5 behind on a wide one. With
    δ 0.01 base's interval lies inside ±δ: the baseline never leaves, so it is level and stays
    in the race (alive); c is neither (interval wider than δ, not significant on 3 noisy folds)."""
    values = {"a": [1.0, 2.0, 3.0], "b": [2.0, 3.0, 4.0], "base": [1.001, 2.0011, 3.0009],
              "c": [1.1, 3.2, 3.2]}
    lk = looks.look(values, 0.05, baseline="base", equivalence=0.01)
    assert lk.leader == "a" and lk.dropped == ("b",) and "base" not in lk.level
    assert {c: driver.look_verdict(lk, c, "base", 0.01) for c in ("b", "base", "c")} == {
        "b": "dropped", "base": "level", "c": "stays"}
