"""The racing search's rules on hand-made ledgers that reach each one (issue 53): δ other than
0.02 and more than two blocks, an incumbent with more folds than a challenger that leads, an
incumbent that can run no more for min_replicates 2, 3 and 4, δ off, a maximizing search, a
launch cut by the budget, and the documented defaults and bounds of hydra.sweeper.race. The
expected answers come from scipy (the paired t, its interval) and Holm by hand, never from
hydra_racing_sweeper.multitest; a search is stepped as the sweeper's loop steps it (drive)."""

from __future__ import annotations

import dataclasses
import math
import re
import statistics

import pytest
from hydra_racing_sweeper import readback
from hydra_racing_sweeper.race import (
    FAILED,
    INCUMBENT,
    LEVEL,
    NOT_RUN,
    PARKED,
    RACING,
    STOPPED,
    WORSE,
    Proposal,
    RaceConf,
    Rules,
    driver,
    intensify,
)
from scipy import stats

from tests.helpers import REPO
from tests.helpers.holm import holm_by_hand
from tests.helpers.race import refused

RUN = 100  # steps a whole run takes; a run stopped at a rung takes half


def drive(table: dict, rules: Rules, stops=(), budget=None, slots=1, explore=0.8):
    """The racing search stepped as the sweeper's loop steps it: a proposal is the next key of
    `table` (key -> its value per block), a launch runs the step's runs from the table, a run
    in `stops` ((key, block)) is stopped at its rung, and a proposal the step is done with is
    told (runs no more). Returns the proposals, the launches (lists of (key, block)) and the
    answer (driver.search_answer)."""
    keys, props, launches = list(table), [], []
    for _ in range(200):
        step = driver.search_turn(props, rules, budget, explore, slots, len(keys) - len(props))
        props = [dataclasses.replace(p, live=False) if i in driver.closed(step) else p
                 for i, p in enumerate(props)]
        if step.over:
            break
        if step.propose:
            props.append(Proposal(keys[len(props)], {}))
            continue
        assert step.runs, "a step that neither proposes nor launches nor ends: the search hangs"
        launches.append([(props[i].key, b) for i, b in step.runs])
        for i, b in step.runs:
            p = props[i]
            if (p.key, b) in stops:
                props[i] = dataclasses.replace(p, stopped=True, live=False, rung_delta=0.2,
                                               steps=p.steps + RUN // 2)
            else:
                props[i] = dataclasses.replace(p, values={**p.values, b: table[p.key][b]},
                                               steps=p.steps + RUN, run=RUN)
    return props, launches, driver.search_answer(props, rules)[1]


def outcomes(props, answer) -> dict:
    return {props[i].key: j.outcome for i, j in answer.items()}


@pytest.mark.parametrize("min_replicates", [2, 3, 4])
def test_an_incumbent_that_can_run_no_more_gives_way_to_a_challenger_that_leads(min_replicates):
    """The first proposal a runs fold 0; b leads it there by 0.03 (>= δ/2), so both run fold
    1, where a is stopped at a rung: a can run no more. b runs on alone and takes over once it
    has min_replicates folds (a's pace: max(its 1 fold, min_replicates)), whatever
    min_replicates is; only then is c proposed (one slot: none while b races), against b.
    (The stopped-incumbent rule held for min_replicates <= a's folds + 1 only: at 3, b ran 2
    folds and a was answered best.)"""
    rules = Rules(n_blocks=5, min_blocks=min_replicates, alpha=0.05, equivalence=0.02)
    table = {"a": [1.00, 1.20, 1.10, 1.00, 1.10], "b": [0.97, 1.15, 1.08, 0.96, 1.07],
             "c": [1.30, 1.50, 1.40, 1.30, 1.40]}
    props, launches, answer = drive(table, rules, stops={("a", 1)})
    alone = [[("b", k)] for k in range(2, min_replicates)]
    # c is the last proposal: the search confirms, so b runs its next fold beside c's first
    assert launches[:4 + len(alone)] == [[("a", 0)], [("b", 0)], [("a", 1), ("b", 1)], *alone,
                                         [("b", max(2, min_replicates)), ("c", 0)]]
    assert outcomes(props, answer) == {"a": STOPPED, "b": INCUMBENT, "c": WORSE}
    assert answer[2].against == 1 and sorted(props[1].values) == [0, 1, 2, 3, 4]


def test_behind_a_stopped_incumbent_a_challenger_runs_to_its_pace_and_no_further():
    """a is stopped in fold 1 (its only other proposal b launched beside it, the search
    confirming: no proposal left); b is 0.005 behind on fold 0, the one fold both ran: it runs
    up to a's pace (min_replicates 2) and stops there, no takeover (it does not lead), the
    search ends with a best and b undecided (one fold in common: no test)."""
    rules = Rules(n_blocks=4, min_blocks=2, alpha=0.05, equivalence=0.02)
    table = {"a": [1.0, 1.2, 1.1, 1.0], "b": [1.005, 1.1, 1.0, 0.9]}
    props, launches, answer = drive(table, rules, stops={("a", 1)})
    assert launches == [[("a", 0)], [("a", 1), ("b", 0)], [("b", 1)]]
    assert outcomes(props, answer) == {"a": INCUMBENT, "b": "undecided"}
    assert answer[1].delta == pytest.approx(0.005) and answer[1].p is None


def test_a_tie_keeps_the_incumbent():
    """SMAC keeps its incumbent on a tie: a challenger whose mean paired difference over the
    incumbent's blocks is exactly 0 does not take over; it is level (interval [0, 0])."""
    rules = Rules(n_blocks=4, min_blocks=2, alpha=0.05, equivalence=0.02)
    ps = [Proposal("a", {0: 1.0, 1: 1.25}), Proposal("b", {0: 1.0, 1: 1.25})]
    s = intensify.replay_search(ps, rules)
    assert s.incumbent == 0 and s.judged[1].outcome == LEVEL and s.judged[1].delta == 0


def paired(mine, theirs, alpha):
    """scipy's paired t: the one-sided p (H1: mine behind) and the (1 - 2 alpha) interval."""
    d = [a - b for a, b in zip(mine, theirs)]
    p = stats.ttest_rel(mine, theirs, alternative="greater").pvalue
    se = statistics.stdev(d) / math.sqrt(len(d))
    low, high = stats.t.interval(1 - 2 * alpha, len(d) - 1, loc=statistics.fmean(d), scale=se)
    return p, low, high


@pytest.mark.parametrize(("delta", "alpha", "word"), [
    (0.05, 0.05, LEVEL),   # interval [0.0031, 0.0369] inside ±0.05: level first
    (0.02, 0.05, WORSE),   # not inside ±0.02; one-sided p 0.037 <= 0.05: worse
    (None, 0.05, WORSE),   # δ off: only the test
    (0.02, 0.01, "undecided"),  # p 0.037 > 0.01, interval [-0.012, 0.052] not inside ±0.02
])
def test_three_folds_behind_is_level_worse_or_undecided_by_delta_and_alpha(delta, alpha, word):
    """Three folds each (min_replicates 3, five folds), the challenger 0.01, 0.03, 0.02 behind:
    confirming, its look (and the answer, one comparison: Holm changes nothing) is level,
    worse or undecided as scipy's test and interval say at this δ and alpha."""
    rules = Rules(n_blocks=5, min_blocks=3, alpha=alpha, equivalence=delta)
    inc, ch = [1.0, 1.1, 1.2], [1.01, 1.13, 1.22]
    ps = [Proposal("i", dict(enumerate(inc)), live=False),
          Proposal("c", dict(enumerate(ch)), live=False)]
    p, low, high = paired(ch, inc, alpha)
    inside = delta is not None and -delta <= low and high <= delta
    assert word == (LEVEL if inside else WORSE if p <= alpha else "undecided")  # the hand rule
    s = intensify.replay_search(ps, rules, confirm=True)
    final = intensify.final_judgements(s, ps, rules)
    for j in (s.judged[1], final[1]):
        assert (j.outcome, j.n, j.against) == (word, 3, 0)
        assert j.delta == pytest.approx(0.02) and j.p == pytest.approx(p)
        assert (j.low, j.high) == pytest.approx((low, high))


def test_a_challenger_that_leads_on_fewer_folds_runs_the_incumbents_folds_before_it_takes_over():
    """The incumbent has four folds; b leads by 0.03 on two: it runs fold 2, not the
    incumbent's fold 4 (no takeover on fewer folds than the incumbent ran); with four it
    takes over. One 0.004 ahead with no spread (its interval inside ±δ) is ahead, so never
    level: parked while the search explores, racing once it confirms."""
    rules = Rules(n_blocks=5, min_blocks=2, alpha=0.05, equivalence=0.02)
    inc = Proposal("a", {0: 1.0, 1: 1.1, 2: 1.2, 3: 1.0})
    lead = Proposal("b", {0: 0.97, 1: 1.07})
    s = intensify.replay_search([inc, lead], rules)
    assert s.incumbent == 0 and s.judged[1].outcome == RACING and s.needs == {1: 2}
    four = Proposal("b", {0: 0.97, 1: 1.07, 2: 1.17, 3: 0.97})
    assert intensify.replay_search([inc, four], rules).incumbent == 1
    close = Proposal("c", {0: 0.996, 1: 1.096})
    for confirm, word in ((False, PARKED), (True, RACING)):
        j = intensify.replay_search([inc, close], rules, confirm=confirm).judged[1]
        assert (j.outcome, j.n) == (word, 2) and j.delta == pytest.approx(-0.004)


def test_a_search_with_delta_off_runs_on_any_lead_and_calls_nothing_level():
    """equivalence None: a lead of 0.001 on fold 0 runs on (no δ/2 to screen with), takes over
    on two folds; a challenger 0.004 behind on every fold is worse (no level before it), with
    Holm over every proposal by hand: the one untested (one fold) counts at p = 1."""
    rules = Rules(n_blocks=3, min_blocks=2, alpha=0.05, equivalence=None)
    table = {"a": [1.000, 1.100, 1.200], "b": [0.999, 1.098, 1.197],
             "c": [1.003, 1.101, 1.205], "d": [1.5, 1.6, 1.7]}
    props, launches, answer = drive(table, rules)
    assert launches[:3] == [[("a", 0)], [("b", 0)], [("a", 1), ("b", 1)]]
    got = outcomes(props, answer)
    assert got == {"a": "undecided", "b": INCUMBENT, "c": "undecided", "d": WORSE}
    b = table["b"]
    raw = {k: paired(table[k][:2], b[:2], 0.05)[0] for k in "acd"}  # two folds each
    assert raw["c"] <= 0.05  # c alone would be worse: Holm over the three keeps it undecided
    holm = holm_by_hand(raw)
    assert [answer[i].p for i in (0, 2, 3)] == pytest.approx([holm[k] for k in "acd"])
    assert holm["c"] > 0.05 >= holm["d"]
    # c's interval lies inside ±0.02: with δ = 0.02 the same runs call it level.
    judged = intensify.final_judgements(intensify.replay_search(props, dataclasses.replace(
        rules, equivalence=0.02), confirm=True), props, dataclasses.replace(rules,
                                                                            equivalence=0.02))
    assert judged[2].outcome == LEVEL


def test_a_maximizing_search_answers_the_highest_mean_best():
    """direction maximize: the study's race settings have sign -1, the ledger negates every
    value (readback.ledger), so the rules still lower sign * value: b (0.7, 0.8) takes over
    from a (0.5, 0.6), a is worse, and its Δ reads in the rules' units (+0.2: behind)."""
    import optuna
    from hydra_racing_sweeper.study import RACE_RUNS_ATTR

    settings = {"blocks": ["fold=0", "fold=1"], "min_replicates": 2, "alpha": 0.05,
                "equivalence": 0.02, "search": "tpe", "sign": -1.0}
    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for x, values in ((0.1, (0.5, 0.6)), (0.2, (0.7, 0.81))):
        study.add_trial(optuna.trial.create_trial(
            params={"x": x}, distributions=dist, state=optuna.trial.TrialState.PRUNED,
            user_attrs={RACE_RUNS_ATTR: {f"fold={f}": {"value": v, "steps": RUN}
                                         for f, v in enumerate(values)}}))
    rows = {r["params"]["x"]: r for r in readback.answer_rows(study.trials, settings)}
    assert rows[0.2]["answer"] == "best" and rows[0.1]["answer"] == WORSE
    assert rows[0.1]["delta"] == pytest.approx(0.205)
    p, _, _ = paired([-0.5, -0.6], [-0.7, -0.81], 0.05)
    assert rows[0.1]["p_adjusted"] == pytest.approx(p)


def test_a_launch_cut_by_the_budget_keeps_the_runs_in_launch_order():
    """Two slots: the incumbent has two folds, b leads it on fold 0 (racing, needs fold 1), and
    a new proposal c needs fold 0. 400 of 500 steps spent, 100 a run: one run fits, the first
    in launch order (the incumbent's, then new proposals, then the challengers closest to it:
    driver._first): c's fold 0. With 600, both; with 400 spent of 400, none: over."""
    rules = Rules(n_blocks=4, min_blocks=2, alpha=0.05, equivalence=0.02)
    props = [Proposal("a", {0: 1.0, 1: 1.1}, steps=300, run=RUN),  # 400 spent in all
             Proposal("b", {0: 0.97}, steps=100, run=RUN), Proposal("c", {})]
    step = driver.search_turn(props, rules, 500, 1.0, 2, 5)
    assert step.runs == [(2, 0)] and not step.over
    assert driver.search_turn(props, rules, 600, 1.0, 2, 5).runs == [(2, 0), (1, 1)]
    assert driver.search_turn(props, rules, 400, 1.0, 2, 5).over
    # Spent to the step by runs stopped at a rung (no whole run known): none fits, not "unknown".
    assert driver.fits([Proposal("s", {}, stopped=True, live=False, steps=400)], 400) == 0


@pytest.mark.parametrize(("budget", "runs"), [(10, 1), (45, 1), (250, 2), (299, 2), (300, 3)])
def test_a_search_with_two_slots_never_launches_past_its_budget(budget, runs):
    """search=p_tpe's n_jobs 2 with a budget: a launch held a new proposal's first fold beside
    the incumbent's before any run had completed, when a run's length is unknown, so
    `budget_steps=10` (or 45) of 30-step runs spent 60. Now a launch holds one run until a run's
    length is known, then whole runs that fit: budget // 100 runs, and one (the first, to learn
    its length) when not even one fits."""
    rules = Rules(n_blocks=5, min_blocks=2, alpha=0.05, equivalence=0.02)
    table = {k: [1.0 + 0.1 * i + 0.01 * f for f in range(5)] for i, k in enumerate("abcdef")}
    props, launches, _ = drive(table, rules, budget=budget, slots=2)
    assert sum(len(x) for x in launches) == runs
    assert driver.spent(props) == RUN * runs
    assert driver.spent(props) <= max(budget, RUN)



def test_a_proposal_the_budget_never_ran_is_not_run_not_failed():
    """search=p_tpe's n_jobs 2 with budget_steps=10 (issue 68): the incumbent a runs fold 0
    alone (a run's length unknown), b is proposed beside it, and then no further run fits. b
    never ran: its answer is `not run`, and `failed` is left for a proposal whose run failed
    (the answer said `failed: norm.p=1`)."""
    rules = Rules(n_blocks=5, min_blocks=1, alpha=0.05, equivalence=0.02)
    table = {k: [1.0 + 0.1 * i + 0.01 * f for f in range(5)] for i, k in enumerate("abc")}
    props, launches, answer = drive(table, rules, budget=10, slots=2, explore=0.7)
    assert launches == [[("a", 0)]] and [p.key for p in props] == ["a", "b"]
    assert outcomes(props, answer) == {"a": INCUMBENT, "b": NOT_RUN}
    assert driver.fits(props, 10) == 0  # what ended it
    # A closed proposal whose run failed, with no block: failed.
    failed = [props[0], dataclasses.replace(props[1], failed=True)]
    assert outcomes(failed, driver.search_answer(failed, rules)[1])["b"] == FAILED


def test_the_answer_line_says_the_budget_ended_the_search_and_what_it_never_ran():
    """The console's last line of that search, from its study: the unrun proposal named `not
    run (budget spent)`, and the budget named as what ended the search; a failed proposal is
    still `failed`. Without a budget, or with room for a run, nothing is said of it."""
    import optuna
    from hydra_racing_sweeper.study import RACE_RUNS_ATTR, STATUS_ATTR

    settings = {"blocks": ["fold=0", "fold=1"], "min_replicates": 1, "alpha": 0.05,
                "equivalence": 0.02, "search": "gp", "sign": 1.0, "budget_steps": 10}
    dist = {"x": optuna.distributions.FloatDistribution(0, 8)}
    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(
        params={"x": 8.0}, distributions=dist, value=3.79,
        user_attrs={RACE_RUNS_ATTR: {"fold=0": {"value": 3.79, "steps": 30}}}))
    study.add_trial(optuna.trial.create_trial(params={"x": 1.0}, distributions=dist,
                                              state=optuna.trial.TrialState.PRUNED))
    study.add_trial(optuna.trial.create_trial(params={"x": 2.0}, distributions=dist,
                                              state=optuna.trial.TrialState.FAIL,
                                              user_attrs={STATUS_ATTR: "failed"}))
    rows = readback.answer_rows(study.trials, settings)
    assert [r["answer"] for r in rows] == ["best", NOT_RUN, FAILED]
    line = readback.answer_lines(rows, settings)[0]
    assert line == ("search: best x=8 (mean 3.7900 over 1 replicates; no proposal level "
                    "with it); not run (budget spent): x=1; failed: x=2; 3 proposals, 30 "
                    "training steps; its budget of 10 training steps ended the search: no "
                    "further run fits")
    for room in ({**settings, "budget_steps": None}, {**settings, "budget_steps": 60}):
        line = readback.answer_lines(readback.answer_rows(study.trials, room), room)[0]
        assert "budget" not in line and "; not run: x=1;" in line

# -- hydra.sweeper.race's documented defaults and bounds --------------------------------------

def documented_defaults() -> dict:
    """docs/race.md's table of hydra.sweeper.race.*: key -> its default as written there."""
    lines = (REPO / "docs" / "race.md").read_text().splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith("| `hydra.sweeper.race.*`")))
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        keys, default = line.split("|")[1:3]
        names = [k.strip(" `") for k in keys.split(",")]
        values = [v.strip(" `") for v in default.split("(")[0].split(",")]
        out.update(zip(names, values, strict=True))
    return out


def test_the_race_keys_defaults_are_the_documented_ones():
    written = documented_defaults()
    assert set(written) == {f.name for f in dataclasses.fields(RaceConf)}
    conf = RaceConf()
    as_yaml = {None: "null"}
    for key, value in written.items():
        got = getattr(conf, key)
        assert as_yaml.get(got, str(got)) == value, key


@pytest.mark.parametrize(("key", "bad", "good", "words"), [
    ("min_replicates", 1, 2, "must be >= 2"),
    ("alpha", 0.0, 0.999, "must be in (0, 1)"),
    ("alpha", 1.0, 1e-9, "must be in (0, 1)"),
    ("equivalence", 0.0, 1e-9, "must be a number > 0"),
    ("budget_steps", 0, 1, "must be a whole number of training steps >= 1"),
])
def test_the_race_keys_bounds_are_the_documented_ones(key, bad, good, words):
    """docs/race.md: min_replicates >= 2 (a paired t needs two pairs), alpha in (0, 1), δ > 0,
    budget_steps >= 1; each bound refused one step outside and taken at its edge."""
    assert words in refused(**{key: bad})
    from tests.helpers.race import race_plan
    assert race_plan(**{key: good}) is not None


def test_a_searchs_min_replicates_is_at_least_1_a_races_2():
    """docs/search.md: in a search min_replicates is the folds a takeover needs, >= 1 (the
    preset's 1: a lead on the incumbent's one fold takes over); in a race its first look is a
    paired t, >= 2 (test_the_race_keys_bounds_are_the_documented_ones)."""
    from qknorm.errors import UserError
    from tests.helpers.race import plan

    def search(minimum):
        return plan({"min_replicates": minimum},
                    params={"norm.p": "interval(1.0, 8.0)"}, sampler="tpe", n_trials=4)

    with pytest.raises(UserError, match=re.escape("min_replicates=0 must be >= 1 in a search")):
        search(0)
    assert search(1).min_replicates == 1
    with pytest.raises(UserError, match=re.escape("min_replicates=1 must be >= 2 in a race")):
        plan({"min_replicates": 1})


@pytest.mark.parametrize(("bad", "good"), [(0.0, 1.0), (1.01, 1e-6)])
def test_explore_is_a_share_in_0_1(bad, good):
    """docs/search.md: explore is the share of budget_steps spent on new proposals, in (0, 1]."""
    from tests.helpers.race import plan

    def search(explore):
        return plan({"min_replicates": 2, "explore": explore},
                    params={"norm.p": "interval(1.0, 8.0)"}, sampler="tpe", n_trials=4)

    from qknorm.errors import UserError
    with pytest.raises(UserError, match=re.escape(f"explore={bad:g} must be in (0, 1]")):
        search(bad)
    assert search(good).explore == good
