"""The racing search (search=p_tpe's rules) through the real command line, on
tests/helpers/race_task.py's table: its answer, and a search killed mid-way and resumed by two
sweepers at once."""

from __future__ import annotations

import collections
import math
import subprocess
import sys

import optuna
import pytest
from hydra_racing_sweeper import readback

from tests.helpers.race import (
    SEARCH,
    TASK,
    answers,
    calls,
    check_table,
    sweep_plan,
    two_sweepers,
)
from tests.helpers.studies import Beats, age_heartbeats, study_of


@pytest.mark.slow
def test_a_search_answers_with_the_best_the_level_and_the_worse(cli):
    r = cli(TASK, *SEARCH)
    assert r.returncode == 0, r.stderr[-3000:]
    got = answers(cli.cwd)
    check_table(got)
    assert max(collections.Counter(calls(cli.cwd)).values()) == 1  # no (x, fold) ran twice
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("search: best "))
    best = next(c for c, a in got.items() if a == "best")
    assert line.startswith(f"search: best {best} (mean ") and "worse: x=3" in line
    status = subprocess.run([sys.executable, "-m", "qknorm.status", "sweep"], cwd=cli.cwd,
                            capture_output=True, text=True, timeout=120)
    assert line in status.stdout  # qknorm.status shows the same answer


@pytest.mark.slow
def test_a_killed_search_resumed_by_two_sweepers_runs_no_finished_fold_again(cli):
    killed = cli(TASK, *SEARCH, "kill_at='3,1'")  # dies as x=3 starts its second fold
    assert killed.returncode == 9, killed.stderr[-2000:]
    before = collections.Counter(calls(cli.cwd))
    assert before[(3, 0)] == 1 and (3, 1) not in before
    assert age_heartbeats(cli.cwd) >= 1  # the killed sweep's running trials: stale from now
    two_sweepers(cli, TASK, *SEARCH, "kill_at='3,1'")
    after = collections.Counter(calls(cli.cwd))
    assert after[(3, 0)] == 1  # x=3's fold 0 ran before the kill: its retry kept it
    assert all(n == 1 for key, n in after.items() if key in before)
    check_table(answers(cli.cwd))


def test_the_reports_minimiser_is_the_parabolas_lowest_point():
    """Proposals on a parabola in log p with its lowest point at p = 2 (plus a little noise):
    the fit puts p* at 2 and its range around it; the section names the best."""
    from qknorm.report import searchsection

    ps = [1.0, 1.3, 1.7, 2.2, 2.9, 3.8, 5.0]
    noise = [0.001, -0.002, 0.0015, -0.001, 0.002, -0.0015, 0.001]
    values = [1.5 + 0.2 * (math.log(p) - math.log(2)) ** 2 + e for p, e in zip(ps, noise)]
    best = min(range(len(ps)), key=values.__getitem__)
    rows = [{"params": {"norm.p": p}, "answer": "best" if i == best else "level",
             "stopped": False, "n": 3, "mean": v, "delta": None if i == best else v - values[best],
             "low": None, "high": None, "p_adjusted": None, "steps": 6000}
            for i, (p, v) in enumerate(zip(ps, values))]
    fit = searchsection.minimiser(rows)
    assert fit["p"] == pytest.approx(2.0, rel=0.03) and fit["points"] == 7
    assert fit["p_low"] < 2.0 < fit["p_high"] and fit["low"] < 1.5 < fit["high"]
    lines = searchsection.section(rows, {"equivalence": 0.02, "alpha": 0.05, "test": None}, "s")
    assert lines[2].startswith(f"search: best norm.p={ps[best]:.4g} (mean {values[best]:.4f}")
    # one best, with its range: every other proposal is level, so p from 1 to 5
    assert "; with those level with it, norm.p in [1, 5])" in lines[2]
    (fit_line,) = [ln for ln in lines if ln.startswith("Minimiser")]
    assert fit_line.endswith(f"the search's answer is norm.p={ps[best]:.4g}; with those level "
                             "with it, norm.p in [1, 5].")


def test_the_answers_range_spans_the_best_and_the_level_proposals_only():
    """1/p params read back as p (0: p = ∞); worse, undecided and stopped proposals are not in
    the range: the search told them apart, or said nothing of them."""
    def row(inv, word):
        return {"number": 0, "params": {"1/norm.p": inv}, "answer": word, "stopped": False}

    rows = [row(0.5, "best"), row(0.4, "level"), row(0.625, "level"), row(0.1, "worse"),
            row(0.9, "undecided"), row(0.0, "stopped")]
    assert readback.level_range(rows) == {"1/norm.p": (1.6, 2.5)}  # 1/0.625, 1/0.4
    assert readback.range_words(rows) == "; with those level with it, norm.p in [1.6, 2.5]"
    rows[2]["answer"] = "level"
    rows.append(row(0.0, "level"))  # p = ∞ level with it: the range is open to the right
    assert readback.level_range(rows)["1/norm.p"] == (1.6, math.inf)
    assert readback.level_range([row(0.5, "level")]) == {}  # no best yet: no range
    assert readback.range_words([row(0.5, "best"), row(1.0, "worse")]) == \
        "; no proposal level with it"


@pytest.mark.slow
def test_a_search_ends_within_its_budget_even_with_proposals_still_racing(cli):
    """100 steps a run, budget 550: five whole runs fit, a launch is cut to what fits, and the
    search ends there with its open proposals answered (none is left racing, nothing hangs)."""
    r = cli(TASK, *SEARCH, "hydra.sweeper.n_jobs=2", "++hydra.sweeper.race.budget_steps=550",
            timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(calls(cli.cwd)) == 5  # 500 steps: a sixth run would take it to 600
    got = answers(cli.cwd)
    assert "racing" not in got.values() and list(got.values()).count("best") == 1
    study = study_of(cli.cwd, "s")
    assert all(t.state.is_finished() for t in study.trials)


def tpe_search_in_memory():
    """A TPE search over norm.p in [1, 16] on two folds, its study in memory: the space, the
    blocks, the study and its schedule (one sweeper), for driving admit and settle by hand."""
    from hydra_racing_sweeper.race import RaceSpec
    from hydra_racing_sweeper.search_schedule import RaceSearchSchedule
    from hydra_racing_sweeper.space import parse_space

    space, _ = parse_space({"norm.p": "interval(1.0, 16.0)"}, [])
    blocks = ("data.fold=0", "data.fold=1")
    spec = RaceSpec(min_replicates=2, alpha=0.05, baseline=None, candidates=(), labels={},
                    blocks=blocks, sign=1.0, rungs=(), margin=0.0, equivalence=0.02,
                    search="tpe")
    plan = sweep_plan(space, 2, [[b] for b in blocks], spec)
    study = optuna.create_study()
    RaceSearchSchedule.prepare_study(plan, study, study.study_name)
    schedule = RaceSearchSchedule(plan, None, ["best_val_loss"], 1, Beats())
    return space, blocks, study, schedule


def test_the_search_logs_each_proposal_as_its_answer_names_it(caplog):
    """A TPE proposal's p (4.872838681541604) reads in the trial's log lines as the answer
    line names it, to 4 significant digits: norm.p=4.873, not the float's 16 digits."""
    from hydra_racing_sweeper.study import RACE_RUNS_ATTR

    space, blocks, study, schedule = tpe_search_in_memory()
    # The incumbent p=2 (1.0, 1.1) and p=4.87, behind by 0.30 and 0.31: worse (paired t on
    # one degree of freedom, t = 0.305 / 0.005 = 61, one-sided p 0.005).
    for p, values in ((2.0, (1.0, 1.1)), (4.872838681541604, (1.30, 1.41))):
        study.enqueue_trial({"norm.p": p})
        trial = study.ask(space.distributions)
        schedule.admit(study, [trial])
        trial.set_user_attr(RACE_RUNS_ATTR, {b: {"value": v, "steps": 100}
                                             for b, v in zip(blocks, values)})
    with caplog.at_level("INFO"):
        assert schedule.settle(study)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("trial ")]
    assert said == [
        "trial 0 [norm.p=2] COMPLETE: best_val_loss=1.05 (mean of 2)",
        "trial 0 [norm.p=2]: the incumbent after 2 replicates",
        "trial 1 [norm.p=4.873]: worse against the incumbent of the moment after 2 replicates: "
        "Δ +0.305, interval [+0.2734, +0.3366], one-sided p 0.00522; its answer comes at the "
        "end, tested against the final best with Holm over every proposal (it may read "
        "undecided)"]
    assert readback.search_lines(study) == [  # the same names as the answer
        "search: best norm.p=2 (mean 1.0500 over 2 replicates; no proposal level with it); "
        "worse: norm.p=4.873; "
        "2 proposals, 400 training steps"]


def test_a_proposal_another_sweeper_made_a_rounding_apart_is_given_up_before_it_runs(caplog):
    """Two sweepers propose at once: the later of p = 2 and p = 2.0000000000000004 (a float
    rounding apart, as search_schedule.propose takes a repeat) is surplus and runs nothing; a
    point 1e-6 away is a new one and is taken."""
    from hydra_racing_sweeper.study import STATUS_ATTR
    from optuna.trial import TrialState

    space, blocks, study, schedule = tpe_search_in_memory()
    for p in (2.0, 2.0000000000000004, 2.000001):
        study.enqueue_trial({"norm.p": p})
        with caplog.at_level("INFO"):
            schedule.admit(study, [study.ask(space.distributions)])
    states = [(t.state, t.user_attrs.get(STATUS_ATTR)) for t in study.trials]
    assert states == [(TrialState.RUNNING, None), (TrialState.FAIL, "surplus"),
                      (TrialState.RUNNING, None)]
    assert sorted(schedule.mine) == [0, 2]
    assert "trial 1 not run: another sweeper proposed norm.p=2 first" in caplog.text


def test_the_answer_names_every_proposal_it_counts():
    """'4 proposals' named 3: a failed proposal, and one with no params, dropped out of the
    words (issue 54). Rows as readback.answer_rows gives them, by hand."""
    def row(number, params, word, steps=10):
        return {"number": number, "params": params, "answer": word, "stopped": False,
                "n": 1, "mean": 1.5, "steps": steps}

    rows = [row(0, {"1/norm.p": 0.5}, "best"), row(1, {"1/norm.p": 1.0}, "worse"),
            row(2, {"1/norm.p": 0.25}, "failed"), row(3, {}, "failed", steps=0)]
    (line,) = readback.answer_lines(rows, {"equivalence": 0.02})
    assert line == ("search: best norm.p=2 (mean 1.5000 over 1 replicates; no proposal level "
                    "with it); worse: norm.p=1; "
                    "failed: norm.p=4, trial 3; 4 proposals, 30 training steps")


def test_mid_search_the_report_counts_the_points_it_could_fit():
    """Mid-search it said 'needs 6 proposals that completed a replicate' while 22 had (issue 54):
    a proposal still racing has no Δ, so no point; the line counts what the fit had."""
    from qknorm.report import searchsection

    def row(p, word, delta):
        return {"params": {"norm.p": p}, "answer": word, "stopped": False, "n": 1, "mean": 1.5,
                "delta": delta, "low": None, "high": None, "p_adjusted": None, "steps": 100}

    rows = [row(2.0, "best", None), row(4.0, "worse", 0.1), row(float("inf"), "worse", 0.2),
            *(row(1.0 + i / 10, "racing", None) for i in range(19))]  # racing: no Δ yet
    lines = searchsection.section(rows, {"equivalence": 0.02, "alpha": 0.05, "test": None}, "s")
    assert ("Minimiser: no quadratic fit: 2 of the 22 proposals have a fold-adjusted value at a "
            "finite p, at 2 distinct p (the best, and those judged against it; one still racing "
            "has none yet); it needs 6 at 3 or more distinct p.") in lines
