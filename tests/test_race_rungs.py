"""Stopping runs that have lost, inside a fold of a race (issue 13, part 2): the rule on
synthetic rung values, the launch order, the checks, the job-side hook on a real SQLite study,
and the sweeper's side: the replay, the settings and the elimination table."""

from __future__ import annotations

import json
import math

import optuna
import pandas as pd
import pytest
from hydra_racing_sweeper import identity, readback, trial
from hydra_racing_sweeper.race import looks
from hydra_racing_sweeper.study import (
    RACE_CANDIDATE_ATTR,
    RACE_OUTCOME_ATTR,
    RACE_RUNG_ATTR,
    RACE_RUNS_ATTR,
    RACE_STOP_ATTR,
)

from qknorm.errors import RunPruned, UserError
from qknorm.report.summary import race_section
from tests.helpers.race import race_plan, refused
from tests.helpers.studies import BLOCK, attrs, frozen, job_hook, run, rung_study

# -- the rule ------------------------------------------------------------------------------------


def test_a_run_stops_only_when_above_the_best_other_by_more_than_the_margin():
    others = {"p=2": 2.20, "p=4": 2.26}
    stop = looks.stop_at_rung(2.30, others, margin=0.05)
    assert stop == looks.Stop("p=2", 2.20, pytest.approx(0.10))  # judged against the best
    assert looks.stop_at_rung(2.25, others, 0.05) is None  # Δ = 0.05: not more than the margin
    assert looks.stop_at_rung(2.2501, others, 0.05).delta == pytest.approx(0.0501)
    assert looks.stop_at_rung(2.10, others, 0.05) is None  # ahead of everyone
    assert looks.stop_at_rung(9.0, {}, 0.05) is None  # nobody reached the rung yet: go on
    assert looks.stop_at_rung(2.30, {"p=4": 2.26}, 0.05) is None  # only a close one is there


def test_runs_of_a_block_launch_best_first_and_the_baseline_first_before_any_result():
    assert looks.standing({}, ["p=1", "p=2", "p=4"], baseline="p=2") == ["p=2", "p=1", "p=4"]
    assert looks.standing({}, ["p=1", "p=2"]) == ["p=1", "p=2"]  # no baseline: grid order
    values = {"p=1": {0: 2.0, 1: 2.2}, "p=2": {0: 1.8, 1: 1.9}, "p=4": {0: 1.9, 1: 1.7, 2: 9.0}}
    # By mean over the blocks all three completed (0 and 1): p=4 1.80, p=2 1.85, p=1 2.10.
    assert looks.standing(values, ["p=1", "p=2", "p=4"], "p=2") == ["p=4", "p=2", "p=1"]
    values["p=3"] = {}  # a candidate with no result yet: no common block, baseline first
    assert looks.standing(values, ["p=1", "p=2", "p=3"], "p=2") == ["p=2", "p=1", "p=3"]


def test_completed_leaves_out_the_runs_stopped_at_a_rung():
    runs = {"f=0": {"value": 1.0, "steps": 20}, "f=1": {"value": None, "steps": 10,
                                                         "stopped_at": 10}}
    assert readback.completed(runs) == {"f=0": runs["f=0"]}


# -- the job-side hook, on a real study --------------------------------------------------------

@pytest.fixture
def study(tmp_path):
    return rung_study(tmp_path)


def hook(url: str, trial: int, margin: float | None, rungs=(250, 500), block=BLOCK):
    return job_hook(url, trial, block, rungs, margin)


def test_a_job_that_has_lost_at_a_rung_stops_there_and_says_why(study):
    on_eval = hook(study, 1, margin=0.05)
    on_eval(0, {"val_loss": 4.2})  # not a rung: nothing recorded
    on_eval(250, {"val_loss": 2.44})  # 0.04 behind p=2: goes on
    with pytest.raises(RunPruned) as e:
        on_eval(500, {"val_loss": 2.31})  # 0.11 behind p=2 on the same fold
    assert e.value.step == 500
    got = attrs(study, 1)
    assert got[RACE_RUNG_ATTR + BLOCK] == {"250": 2.44, "500": 2.31}
    assert got[RACE_STOP_ATTR + BLOCK] == {"step": 500, "value": 2.31, "best": "norm.p=2.0",
                                          "best_value": 2.20, "delta": pytest.approx(0.11)}
    assert "pruned_step" not in got  # only this block is marked, not the trial's other jobs
    # p=1's job now has two others at step 500: p=2 (2.20) is still the best of them.
    with pytest.raises(RunPruned):
        hook(study, 2, margin=0.05)(500, {"val_loss": 2.26})
    assert attrs(study, 2)[RACE_STOP_ATTR + BLOCK]["best"] == "norm.p=2.0"


def test_the_baseline_a_close_run_and_a_retry_record_their_rungs_and_go_on(study):
    hook(study, 1, margin=None)(500, {"val_loss": 3.0})  # the baseline: recorded, never judged
    hook(study, 2, margin=0.05)(500, {"val_loss": 2.24})  # 0.04 behind p=2: goes on
    assert attrs(study, 1)[RACE_RUNG_ATTR + BLOCK] == {"500": 3.0}
    assert attrs(study, 2)[RACE_RUNG_ATTR + BLOCK] == {"500": 2.24}
    # A killed sweeper's trial of p=1 and its retry: the retry is not judged against it.
    s = optuna.load_study(study_name="r", storage=study)
    for t in (0, 1):  # trial 0 and 1 are now p=1's earlier attempts
        s._storage.set_trial_user_attr(s.trials[t]._trial_id, RACE_CANDIDATE_ATTR, "norm.p=1.0")
    hook(study, 2, margin=0.05)(250, {"val_loss": 2.9})  # its only other at 250: its own 2.40
    assert not any(k.startswith(RACE_STOP_ATTR) for t in (1, 2) for k in attrs(study, t))


def test_a_run_that_reached_a_rung_first_is_judged_there_once_another_has(study):
    """Two jobs of a fold at once (a launcher with 2 slots): p=4 passes step 250 before p=2's
    run records it, so nothing is known there; at its next eval p=2's value at 250 is, and p=4
    is judged on both values at 250 (0.15 behind, margin 0.05): stopped, the rung recorded."""
    fold = "data.fold=2"
    on_eval = hook(study, 1, margin=0.05, block=fold)
    assert on_eval(250, {"val_loss": 2.55}) is None  # alone at 250: goes on
    s = optuna.load_study(study_name="r", storage=study)
    s._storage.set_trial_user_attr(s.trials[0]._trial_id, RACE_RUNG_ATTR + fold, {"250": 2.40})
    with pytest.raises(RunPruned) as e:
        on_eval(260, {"val_loss": 2.50})  # not a rung: judged late, on the values at 250
    assert e.value.step == 260
    assert attrs(study, 1)[RACE_STOP_ATTR + fold] == {
        "step": 250, "value": 2.55, "best": "norm.p=2.0", "best_value": 2.40,
        "delta": pytest.approx(0.15), "at": 260}
    # A close run judged late goes on, and is judged once: a later eval asks nothing more.
    other = "data.fold=3"
    close = hook(study, 2, margin=0.05, block=other)
    assert close(250, {"val_loss": 2.43}) is None  # alone at 250
    s._storage.set_trial_user_attr(s.trials[0]._trial_id, RACE_RUNG_ATTR + other, {"250": 2.40})
    assert close(260, {"val_loss": 2.42}) is None  # 0.03 behind at 250: goes on
    s._storage.set_trial_user_attr(s.trials[0]._trial_id, RACE_RUNG_ATTR + other, {"250": 2.0})
    assert close(270, {"val_loss": 2.41}) is None  # judged already: a later value changes nothing
    assert RACE_STOP_ATTR + other not in attrs(study, 2)


@pytest.mark.parametrize("env, message", [
    ({identity.RUNGS: "500;1000"}, "RACING_RUNGS='500;1000' is not whole numbers separated by "
                                   "commas"),
    ({identity.RUNGS: "0.5"}, "RACING_RUNGS='0.5' is not whole numbers separated by commas"),
    # a fraction is the sweeper's to resolve
    ({identity.RUNGS: "500", identity.MARGIN: "0.05,0.1"},
     "RACING_MARGIN='0.05,0.1' is not one number"),
    ({identity.TRIAL: "three"}, "RACING_TRIAL='three' is not one whole number"),
])
def test_a_bad_rung_variable_is_one_line_naming_it_and_the_fix(monkeypatch, env, message):
    """The rungs reach a job through its environment (hydra_racing_sweeper/identity.py): a job started
    by hand with a bad value gets one line from its first report, naming the variable."""
    for key, value in {identity.STUDY: "r", identity.STORAGE: "sqlite:///o.db",
                       identity.TRIAL: "0", identity.BLOCK: BLOCK, **env}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError) as e:
        trial.report(250, 2.4)  # what every eval of a job calls
    assert str(e.value) == (f"{message}, as the racing sweeper sets it on its jobs "
                            "(hydra.job.env_set): unset it")
    monkeypatch.setenv(identity.RUNGS, "500,1000")  # well formed: read as the sweeper wrote them
    monkeypatch.setenv(identity.TRIAL, "0")
    monkeypatch.delenv(identity.MARGIN, raising=False)
    assert identity.identity() == identity.Identity("r", "sqlite:///o.db", 0, BLOCK, (500, 1000))


def test_a_checkpoint_written_with_the_old_race_keys_still_loads():
    """Checkpoints from before issue 66 carry a race's rungs under optuna (the schema's key
    then); qknorm.sample rebuilds their model from today's schema."""
    from qknorm.config import Config
    from qknorm.sample import checkpoint_config

    saved = {"norm": {"kind": "lp", "p": 4.0}, "train": {"max_iters": 30},
             "optuna": {"study_name": "r", "storage": None, "trial": 3,
                        "race": {"block": BLOCK, "rungs": [10], "margin": 0.1, "margins": []}}}
    cfg = checkpoint_config(saved)
    assert isinstance(cfg, Config)
    assert (cfg.norm.kind, cfg.norm.p, cfg.train.max_iters) == ("lp", 4.0, 30)
    assert cfg.optuna.trial is None  # left out: which trial it was rebuilds nothing


# -- the sweeper's side: settings, replay, report ---------------------------------------------

@pytest.mark.parametrize("options, message", [
    ({"rungs": [1000, 500]}, "hydra.sweeper.race.rungs=[1000, 500] must be increasing, e.g. "
                             "[0.25, 0.5] (fractions of train.max_iters)"),
    ({"rungs": [0]}, "hydra.sweeper.race.rungs=[0] has 0: a rung is a fraction of "
                     "train.max_iters in (0, 1), e.g. 0.25, or a whole training step >= 1, "
                     "e.g. 500"),
    ({"rungs": [500], "margin": 0}, "hydra.sweeper.race.margin=0 must be a number > 0 (val "
                                    "loss units"),
])
def test_bad_rungs_or_margin_are_one_line_naming_the_value_and_the_fix(options, message):
    assert refused(**options).startswith(message)


def test_rungs_are_part_of_the_race_a_study_holds():
    from hydra_racing_sweeper import racing

    off, on = race_plan(), race_plan(rungs=[500, 1000], margin=0.05)
    assert (off.rungs, on.rungs, on.margin) == ((), (500, 1000), 0.05)
    assert (off.settings()["rungs"], off.settings()["margin"]) == (None, None)
    assert (on.settings()["rungs"], on.settings()["margin"]) == ([500, 1000], 0.05)
    study = optuna.create_study()
    study.set_user_attr("race", {k: v for k, v in off.settings().items()
                                 if k not in ("rungs", "margin")})  # raced before rungs existed
    racing.check_study(study, off, "s")  # the same race
    with pytest.raises(UserError, match=r"^study 's' was raced with rungs=None, not \[500, "
                                         r"1000\]; rerun with its settings"):
        racing.check_study(study, on, "s")


STOP = {"stopped_at": 10, "val_loss": 3.3, "best": "norm.p=2.0", "delta": 0.25}
F = [f"data.fold={f}" for f in range(3)]


def test_the_replay_counts_a_candidate_stopped_at_a_rung_out():
    from hydra_racing_sweeper import race_schedule
    from hydra_racing_sweeper.space import parse_space

    spec = race_plan(rungs=[10], margin=0.05)
    space, _ = parse_space({"norm.p": "choice(1.0,2.0,inf)"}, [])
    stopped = frozen(math.inf, {F[0]: run(None, steps=10, core_s=1.0, **STOP)})
    trials = [frozen(1.0, {F[0]: run(2.0)}), frozen(2.0, {F[0]: run(1.9)}), stopped]
    r = race_schedule.state(trials, spec, space)
    # p=inf is out (not live, lacks fold 0): the race waits only for p=1 and p=2's fold 1.
    assert r.alive == [(1.0,), (2.0,)] and r.gone == {(math.inf,): 2} and r.need == 2
    assert readback.stopped_block(stopped.user_attrs) == F[0]
    assert readback.block_values(stopped.user_attrs, spec.blocks, spec.sign) == {}
    # fold 1 launches p=2 first: it led fold 0
    assert race_schedule.turn(trials, spec, space).runs == [((2.0,), 1), ((1.0,), 1)]
    assert race_schedule.stop_attr(spec, stopped, F[0], 1) == {
        "outcome": "stopped", "n": 1, "after": F[0], "step": 10, "leader": "norm.p=2.0",
        "delta": 0.25, "p": None, "p_adjusted": None}
    trials[0] = frozen(1.0, {F[0]: run(2.0), F[1]: run(2.1)})
    trials[1] = frozen(2.0, {F[0]: run(1.9), F[1]: run(1.95)})
    look = race_schedule.state(trials, spec, space).looks[0]
    assert look.n == 2 and set(look.tests) == {(1.0,)}  # p=inf not tested: it is out


def test_the_race_ends_when_every_other_candidate_was_stopped():
    """p=2 (the baseline) would otherwise run folds 1 and 2 alone, paired with nobody."""
    values = {"p=2": {0: 1.9}, "p=4": {}, "p=inf": {}}  # both stopped in fold 0
    r = looks.replay_race(["p=2", "p=4", "p=inf"], values, {"p=2"}, n_blocks=3, min_blocks=2,
                     alpha=0.05, baseline="p=2")
    assert r.over and r.alive == ["p=2"] and not r.looks
    assert r.gone == {"p=4": 2, "p=inf": 2}


def test_the_elimination_table_shows_where_a_candidate_stopped_and_counts_its_steps():
    from optuna.trial import TrialState

    settings = {"min_replicates": 2, "alpha": 0.05, "baseline": "norm.p=2.0", "blocks": F,
                "candidates": ["norm.p=1.0", "norm.p=2.0", "norm.p=inf"], "rungs": [10],
                "margin": 0.05}
    survived = {"outcome": "survived", "n": 3, "after": F[2], "leader": "norm.p=2.0",
                "delta": 0.1, "p": 0.2, "p_adjusted": 0.2}
    trials = {
        "norm.p=1.0": frozen(1.0, {F[0]: run(2.0), F[1]: run(2.1), F[2]: run(2.2)},
                             TrialState.COMPLETE, survived),
        "norm.p=2.0": frozen(2.0, {F[0]: run(1.9), F[1]: run(2.0), F[2]: run(2.1)},
                             TrialState.COMPLETE, {**survived, "delta": None, "p": None,
                                                   "p_adjusted": None}),
        # p=inf finished fold 0, then lost at step 10 of fold 1
        "norm.p=inf": frozen(math.inf, {F[0]: run(2.5, core_s=6.0),
                                        F[1]: run(None, steps=10, core_s=1.0, **STOP)},
                             TrialState.PRUNED, {"outcome": "stopped", "n": 2, "after": F[1],
                                                 "step": 10, "leader": "norm.p=2.0",
                                                 "delta": 0.25, "p": None, "p_adjusted": None}),
    }
    e = readback.elimination_of(settings, trials)
    assert e.spent == {"runs": 8, "stopped": 1, "steps": 220, "core_s": 25.0}
    # Every candidate's mean completed run x 3 folds: 90 steps each; core_s 9 + 9 + 18.
    assert e.grid == {"runs": 9, "steps": 270.0, "core_s": 36.0}
    lines = race_section(e, "r")
    assert ("| norm.p=inf | stopped | 2 | data.fold=1 at step 10 | norm.p=2.0 | +0.2500 | - | - "
            "| 2.5000 |") in lines
    assert "| norm.p=1.0 | survived | 3 | - | norm.p=2.0 | +0.1000 | 0.2 | 0.2 | 2.1000 |" in lines
    assert ("Verdict: dropped as worse than the leader at a look (one-sided paired t, Holm): "
            "none; stopped at a rung, more than the margin behind the best run of its replicate "
            "(a rule, not a test): norm.p=inf; in the race at its end: norm.p=1.0, norm.p=2.0 "
            "(lowest mean: norm.p=2.0).") in lines
    # A race over folds records its test (issue 34); the section names it
    folds = readback.elimination_of({**settings, "test": "corrected", "ratio": 0.25}, trials)
    assert any("(one-sided corrected t, n_test/n_train = 1/4, Holm): none;" in ln
               for ln in race_section(folds, "r"))
    assert any(ln.startswith("Compute: 8 of the full grid's 9 runs (89%; 1 of them stopped at a "
                             "rung, counted with their partial steps), 220 of ≈270 training "
                             "steps (81%), 25 of ≈36 core-seconds (69%;") for ln in lines)
    assert readback.summary_line(e) == (
        "race: 0 of 3 candidates dropped, 1 stopped inside a replicate (norm.p=inf: "
        "data.fold=1 at step 10, Δ +0.2500), 2 left (norm.p=1.0, norm.p=2.0); ran 8 (1 stopped "
        "early) of 9 runs (89% of the grid), 25 core-seconds (69% of the grid's estimate), 220 "
        "training steps (81%)")
    del trials["norm.p=inf"].user_attrs[RACE_RUNS_ATTR][F[0]]  # stopped in its first fold
    assert readback.elimination_of(settings, trials).grid["steps"] == 270.0  # others' mean run: 30


# -- the measurement on recorded curves (qknorm.research.rung_error_rates) ---------------------------

def test_the_measurement_replays_the_rule_run_by_run_and_scores_its_stops():
    from qknorm.research import rung_error_rates as m

    curves = {2.0: (2.20, 2.00, 1.85), 1.0: (2.24, 2.10, 1.95), 4.0: (2.30, 2.02, 1.86),
              math.inf: (2.50, 2.30, 2.10)}  # val loss at 500, 1000; best_val_loss
    fold = {p: {"curve": {500: a, 1000: b}, "final": f, "steps": 2000}
            for p, (a, b, f) in curves.items()}
    order = m.launch_orders({0: fold}, baseline=2.0)[0]
    assert order == [2.0, 1.0, 4.0, math.inf]  # the baseline first, then grid order
    # p=1: 0.04 behind p=2 at 500 (goes on), 0.10 at 1000 (stops); p=4 and inf: at 500.
    stops = m.judge_fold(fold, order, [500, 1000], 0.05, baseline=2.0)
    assert stops == {1.0: 1000, 4.0: 500, math.inf: 500}
    score = m.score({0: fold}, {0: stops}, 0.05)
    assert {k: v for k, v in score.items() if k != "stops"} == {
        "runs": 4, "stopped": 3, "steps": 8000, "steps_saved": 4000, "stopped_winner": 0,
        "stopped_within_margin": 1}  # p=4 ended 0.01 behind the winner, p=2
    # Successive halving, eta 2: the best 2 of 4 at 500, the best 1 of those at 1000.
    assert m.halving_fold(fold, [500, 1000], eta=2) == {4.0: 500, math.inf: 500, 1.0: 1000}
    assert m.gaps({0: fold}, "winner") == {500: 0.0, 1000: 0.0}
    assert m.gaps({0: fold}, "any") == {500: pytest.approx(0.30), 1000: pytest.approx(0.30)}
    # The race's view, stepped by the sweeper's driver: on fold 0 as above (p=4 and inf stop at
    # 500, p=1 at 1000: 2000 + 500 + 500 + 1000 steps); then p=2 is the one left, and a race of
    # one is over, as the sweeper ends it: fold 1 runs nothing.
    view = m.race_view({0: fold, 1: fold}, [500, 1000], 0.05, baseline=2.0)
    assert view == {"runs": 4, "steps": 4000, "grid_runs": 8, "grid_steps": 16000,
                    "out": [1.0, 4.0, math.inf]}


# -- one real race through the command line, on the smoke model ---------------------------------

TINY = ["-m", "qknorm.train", "search=p_race", "experiment=smoke", "threads=1",
        "train.max_iters=20", "train.eval_interval=10", "norm.p=choice(1,2,inf)",
        "++hydra.sweeper.replicates={data.fold:[0,1]}", "hydra.sweeper.race.min_replicates=2",
        "hydra.sweeper.n_jobs=3", "hydra.sweeper.race.margin=0.001", "hydra/job_logging=disabled"]


@pytest.mark.slow
def test_a_race_stops_a_run_that_has_lost_at_its_rung_and_counts_its_steps(cli):
    """Fold 0 runs p=2 (the baseline) first, then p=1, then p=inf, each judged at step 10
    against those before it; p=inf, behind, stops there and runs no fold 1."""
    from pathlib import Path

    from qknorm import rundir

    r = cli(*TINY, "hydra.sweeper.race.rungs=[10]")  # as typed: a list replaces the list
    assert r.returncode == 0, r.stderr[-3000:]
    study = optuna.load_study(study_name="smoke_race",
                              storage=f"sqlite:///{cli.cwd}/outputs/optuna.db")
    # Folds of the 10-fold layout: the looks use the corrected t, n_test/n_train = 1/9
    assert study.user_attrs["race"]["test"] == "corrected"
    assert study.user_attrs["race"]["ratio"] == pytest.approx(1 / 9)
    by = {t.user_attrs[RACE_CANDIDATE_ATTR]: t for t in study.get_trials()}
    at10 = {(p, fold): next(row["val_loss"] for row in rundir.read_metrics(Path(d))
                            if row["step"] == 10)
            for p in ("1", "2", "inf")
            for fold, d in by[f"norm.p={p}"].user_attrs["job_dirs"].items()}
    f0 = "data.fold=0"
    assert at10["1", f0] - at10["2", f0] <= 0.001  # so p=1 went on (the data's precondition)
    best = min(("1", "2"), key=lambda p: at10[p, f0])
    delta = at10["inf", f0] - at10[best, f0]
    assert delta > 0.001
    lost = by["norm.p=inf"]
    assert lost.state == optuna.trial.TrialState.PRUNED
    assert lost.user_attrs[RACE_OUTCOME_ATTR] == {
        "outcome": "stopped", "n": 1, "after": f0, "step": 10, "leader": f"norm.p={best}",
        "delta": pytest.approx(delta, abs=1e-12), "p": None, "p_adjusted": None}
    assert list(lost.user_attrs[RACE_RUNS_ATTR]) == [f0]  # out: it ran no second fold
    assert lost.user_attrs[RACE_RUNS_ATTR][f0]["stopped_at"] == 10
    final = rundir.read_final(Path(lost.user_attrs["job_dirs"][f0]))
    assert (final["status"], final["steps"]) == ("pruned", 10)
    for p in ("1", "2"):  # both ran both folds to the end, their rungs recorded per fold
        t = by[f"norm.p={p}"]
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.user_attrs[RACE_RUNG_ATTR + "data.fold=1"] == {"10": at10[p, "data.fold=1"]}
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("race: "))
    assert (f"1 stopped inside a replicate (norm.p=inf: data.fold=0 at step 10, Δ {delta:+.4f}), "
            "2 left (norm.p=1, norm.p=2); ran 5 (1 stopped early) of 6 runs (83% of the grid)"
            ) in line
    assert line.endswith(", 90 training steps (75%)")

    mixed = cli(*TINY, "++hydra.sweeper.replicates={data.fold:[0,1],seed:[0,1]}",
                "hydra.sweeper.study_name=mixed")
    assert mixed.returncode == 2
    assert mixed.stderr.strip().splitlines() == [
        "error: hydra.sweeper.race.test=auto: the race's replicates vary data.fold and seed; race "
        "over data.fold alone (the corrected test over folds), or set race.test=paired to treat "
        "every combination as independent"]
    bad = cli(*TINY, "hydra.sweeper.race.rungs=[15]", "hydra.sweeper.study_name=bad")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: hydra.sweeper.race.rungs=[15] has 15, not an eval step (a multiple of "
        "train.eval_interval=10); use e.g. 10"]
    assert "bad" not in optuna.get_all_study_names(f"sqlite:///{cli.cwd}/outputs/optuna.db")



@pytest.mark.slow
def test_room_reads_curves_csv_and_the_grid_says_which_p_are_worse(tmp_path):
    """qknorm.research.rung_error_rates --room: per eval step the largest gap of a run of a p the grid
    does not call worse, the smallest of a worse p's run, and the runs a rung's margin stops."""
    import subprocess
    import sys


    grid, curves = tmp_path / "grid", tmp_path / "race"
    grid.mkdir(), curves.mkdir()
    # The grid: p = 4 behind p = 2 by 0.10 ± 0.01 on 3 folds (worse), p = 1 by ±0.001 (not).
    best = {2.0: [1.80, 1.90, 2.00], 1.0: [1.801, 1.899, 2.001], 4.0: [1.91, 1.99, 2.11]}
    # Judged by the corrected t of its 3-fold layout (variance × (1/3 + 1/2)): p = 4's one-sided
    # p is 0.0051, Holm over two 0.010.
    grid_runs = pd.DataFrame([{"norm.p": p, "seed": 0, "data.fold": f, "data.n_folds": 3,
                               "status": "completed", "best_val_loss": v, "run_dir": f"{p}_{f}"}
                              for p, vs in best.items() for f, v in enumerate(vs)])
    grid_runs.to_csv(grid / "results.csv", index=False)
    # The race's curves, fold 0: p = 4 stopped at step 1000; fold 1: p = 1 and p = 2 only.
    at = {("a", 2.0, 0): {500: 2.00, 1000: 1.90}, ("b", 1.0, 0): {500: 2.03, 1000: 1.91},
          ("c", 4.0, 0): {500: 2.05, 1000: 1.96}, ("d", 2.0, 1): {500: 2.10, 1000: 2.00},
          ("e", 1.0, 1): {500: 2.09, 1000: 2.02}}
    pd.DataFrame([{"run_dir": d, "norm.p": p, "seed": 0, "data.fold": f, "status": "completed"}
                  for d, p, f in at]).to_csv(curves / "results.csv", index=False)
    pd.DataFrame([{"run_dir": d, "step": s, "train_loss": v, "val_loss": v, "lr": 1e-3,
                   "elapsed_s": 1.0} for (d, _, _), c in at.items() for s, v in c.items()]
                 ).to_csv(curves / "curves.csv", index=False)
    out = tmp_path / "room.json"
    script = [sys.executable, "-m", "qknorm.research.rung_error_rates"]
    r = subprocess.run([*script, "--room", str(curves), str(grid), "--rungs", "500:0.04,1000:0.05",
                        "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (room,) = json.loads(out.read_text())
    assert room["worse_on_grid"] == [4.0]
    steps = room["steps"]
    # p = 1 is 0.03 behind p = 2 at 500 in fold 0 (fold 1: ahead), 0.02 at 1000 (fold 1).
    assert steps["500"]["not_worse_largest"] == {"gap": pytest.approx(0.03), "p": 1.0, "fold": 0,
                                                 "runs": 2}
    assert steps["1000"]["not_worse_largest"]["gap"] == pytest.approx(0.02)
    assert steps["1000"]["not_worse_largest"]["fold"] == 1
    assert steps["500"]["worse_smallest"] == {"gap": pytest.approx(0.05), "p": 4.0, "fold": 0,
                                              "runs": 1}
    assert steps["1000"]["worse_smallest"]["gap"] == pytest.approx(0.06)
    # 0.04 at 500 stops p = 4 there (0.05 behind) and no p = 1 run (0.03 at most).
    assert room["stops"] == [{"p": 4.0, "fold": 0, "rung": 500, "gap": pytest.approx(0.05),
                              "worse_on_grid": True}]
    assert "| 500 | 0.030 (p = 1, fold 0; 2) | 0.050 (p = 4, fold 0; 1) |" in r.stdout

    def refused(*extra):  # one line, exit 2
        r = subprocess.run([*script, "--room", str(curves), str(grid), *extra],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2
        return r.stderr.strip().splitlines()

    assert refused("--rungs", "500-0.04") == [
        "error: --rungs '500-0.04': write step:margin pairs, e.g. 500:0.1,1000:0.04"]
    assert refused("--baseline", "3") == [
        f"error: --baseline 3 has no completed run in {grid / 'results.csv'}; use one of its p: "
        "1, 2, 4"]
    grid_runs.drop(columns="data.n_folds").to_csv(grid / "results.csv", index=False)
    assert refused() == [  # a grid from before data.n_folds: the layout is asked for
        "error: --test=auto: the fold layout (data.n_folds) is not known; pass it (the sweep's "
        "data.n_folds) with --n-folds K"]
    (curves / "curves.csv").unlink()  # a report from before curves.csv
    assert refused() == [
        f"error: {curves / 'curves.csv'} does not exist; pass a report dir written by "
        "scripts/report.py (curves.csv since the report wrote it: rerun the report on the run dirs)"]
