"""Which sampler seed a sweeper asks with, given the study's other trials; the ask path's give-up
when another sweeper took the last slot (study.surplus). In-process, on real Optuna studies."""

from __future__ import annotations

import csv
import logging
from types import SimpleNamespace

import optuna
import pytest
import yaml
from hydra_racing_sweeper import specs
from hydra_racing_sweeper import study as study_record
from hydra_racing_sweeper.space import parse_space
from hydra_racing_sweeper.sweep import OptunaSweep, shared_seed
from optuna.trial import TrialState

from qknorm.errors import UserError
from tests.helpers import REPO
from tests.helpers.studies import Beats

GRID = {"name": "grid", "seed": 0}
TPE = {"name": "tpe", "seed": 0, "n_startup_trials": 6}
SPACE = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}


def plan(spec: dict, n_trials: int) -> SimpleNamespace:
    space = SimpleNamespace(grid=None, distributions=SPACE, values=dict)
    return SimpleNamespace(sampler_spec=spec, space=space, pruner_spec={"name": "none"},
                           n_trials=n_trials)


def ask(study: optuna.Study, spec: dict, n_trials: int, n: int = 1) -> list[optuna.Trial]:
    return OptunaSweep.__new__(OptunaSweep)._ask(study, plan(spec, n_trials), n, Beats())


def test_a_grid_study_refuses_a_sweeper_with_another_seed():
    study = optuna.create_study(sampler=optuna.samplers.GridSampler({"x": [0.0, 1.0]}, seed=0))
    trial = study.ask()
    trial.set_user_attr(study_record.SAMPLER_SEED_ATTR, 0)
    study.tell(trial, 1.0)
    assert shared_seed(study, GRID, "g") == GRID  # the same seed: a rerun, or a second sweeper
    with pytest.raises(UserError) as e:
        shared_seed(study, {"name": "grid", "seed": 1}, "g")
    assert str(e.value) == (
        "hydra.sweeper.sampler.seed=1: the grid trials of study 'g' were asked with seed 0; "
        "sweepers on one grid study share its seed (Optuna orders the grid by it): rerun with "
        "hydra.sweeper.sampler.seed=0")


def test_a_tpe_sweeper_whose_seed_another_running_sweeper_has_takes_the_next_free_one(caplog):
    study = optuna.create_study()
    ask(study, TPE, n_trials=10)  # finished: a rerun with the same seed keeps it
    study.tell(study.trials[0].number, 1.0)
    assert study.trials[0].user_attrs[study_record.SAMPLER_SEED_ATTR] == 0
    assert shared_seed(study, TPE, "t") == TPE
    running = [ask(study, {**TPE, "seed": s}, n_trials=10)[0] for s in (0, 1)]  # live sweepers
    assert [t.user_attrs[study_record.SAMPLER_SEED_ATTR] for t in running] == [0, 1]
    with caplog.at_level(logging.WARNING):
        assert shared_seed(study, TPE, "t") == {**TPE, "seed": 2}
    assert [r.getMessage() for r in caplog.records if r.name == "hydra_racing_sweeper.sweep"] == [
        "hydra.sweeper.sampler.seed=0 is in use by another sweeper running trials of study t "
        "(two sweepers with one seed propose the same points): this one uses seed 2"]
    assert shared_seed(study, {**TPE, "seed": 5}, "t") == {**TPE, "seed": 5}
    assert shared_seed(study, {**TPE, "seed": None}, "t") == {**TPE, "seed": None}


def test_ask_gives_up_a_trial_when_another_sweeper_took_the_last_slot_in_between(caplog):
    """Two sweepers both saw room for the last of n_trials=3; the other asked first (a lower
    trial number). This one's ask gives its trial up before any job: surplus, FAIL, not counted."""
    study = optuna.create_study()
    for t in ask(study, TPE, n_trials=3, n=2):
        t.set_user_attr(study_record.STATUS_ATTR, "completed")
        study.tell(t, 1.0)
    theirs = study.ask(SPACE)  # the other sweeper's trial, running
    with caplog.at_level(logging.INFO):
        assert ask(study, TPE, n_trials=3) == []
    mine = study.trials[-1]
    assert mine.number == theirs.number + 1
    assert mine.state == TrialState.FAIL and mine.user_attrs[study_record.STATUS_ATTR] == study_record.SURPLUS
    assert study_record.Tally.of(study) == study_record.Tally(finished=2, running=1, failed=0)
    assert f"trial {mine.number} not run: another sweeper filled the study's n_trials=3" \
        in caplog.messages
    (kept,) = ask(study, TPE, n_trials=5)  # room again: asked and kept
    assert kept.number == mine.number + 1


# -- the same command proposes the same points, under every Optuna pyproject allows ---------------

ANGPT_LR = REPO / "docs" / "results" / "angpt_cpu" / "lr_search"


def test_the_committed_tpe_search_is_proposed_again_point_for_point():
    """search=angpt_lr's 20 trials (docs/results/angpt_cpu/lr_search, run on Optuna 5.0), asked
    again through the sweeper's ask path with the preset's sampler and told what they were told:
    every lr comes back. Optuna 4.9's defaults (no constant liar) gave 4 of the 20 another lr,
    and multivariate TPE under 4.9 11; the pins (specs.PINNED) hold both releases to these."""
    preset = yaml.safe_load((REPO / "conf" / "search" / "angpt_lr.yaml").read_text())
    sweeper = preset["hydra"]["sweeper"]
    spec, _ = specs.resolve("sampler", sweeper["sampler"], specs.SAMPLERS, set())
    space, _ = parse_space(sweeper["params"], [])
    with (ANGPT_LR / "trials.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == sweeper["n_trials"] == 20
    study = optuna.create_study(direction="minimize")
    proposed = []
    for start in range(0, len(rows), sweeper["n_jobs"]):  # a batch of n_jobs, then its tells
        batch = OptunaSweep.__new__(OptunaSweep)._ask(
            study, SimpleNamespace(sampler_spec=spec, space=space, pruner_spec={"name": "none"},
                                   n_trials=len(rows)), sweeper["n_jobs"], Beats())
        sampler = study.sampler
        assert (sampler._multivariate, sampler._constant_liar) == (False, True)
        for trial, row in zip(batch, rows[start:]):
            proposed.append(trial.params["optimizer.lr"])
            if row["state"] == "PRUNED":
                trial.report(3.0, 500)  # TPE ranks a pruned trial below every complete one
                study.tell(trial, state=TrialState.PRUNED)
            else:
                study.tell(trial, float(row["best_val_loss"]))
    assert proposed == pytest.approx([float(r["optimizer.lr"]) for r in rows], rel=1e-12)


def test_a_sweeper_that_waits_for_another_says_so_once(caplog, monkeypatch):
    """A second sweeper whose schedule has nothing to launch or ask (the first runs what the
    look needs) idled without a word (issue 54): one line when it starts waiting, not per poll."""
    study = optuna.create_study(study_name="s")
    study.ask()  # the other sweeper's running trial

    class Waits:  # a schedule with nothing to do for three polls, then done
        polls = 0

        def settle(self, study):
            self.polls += 1
            return self.polls > 3

        def next_jobs(self, study):
            return []

        def wants(self, study):
            return 0

    sweep = OptunaSweep.__new__(OptunaSweep)
    sweep.settings = SimpleNamespace(study_name="s", heartbeat_interval=1, max_failure_rate=1.0)
    monkeypatch.setattr("hydra_racing_sweeper.sweep.time.sleep", lambda s: None)
    with caplog.at_level(logging.INFO, logger="hydra_racing_sweeper.sweep"):
        plan = SimpleNamespace(n_trials=4, job=object())  # job: qknorm.train's (its plan is timed)
        assert sweep._run(study, plan, Waits(), None, Beats()) is None
    assert [r.getMessage() for r in caplog.records if r.name == "hydra_racing_sweeper.sweep"] == [
        "waiting: another sweeper of study s runs what comes next "
        "(1 trial(s) running); this one goes on when they end"]


def test_the_count_line_says_which_fail_trials_are_no_failures():
    """After resumes optuna-dashboard showed 44 FAIL trials while the sweeper said '0 failed'
    (issue 54): a killed sweeper's trials are failed and retried. The line counts them apart."""
    from hydra_racing_sweeper.sweep import finished_line

    study = optuna.create_study(study_name="s")
    killed = [study.ask({"x": SPACE["x"]}) for _ in range(2)]  # a killed sweeper's two trials
    for trial in killed:  # failed as stale, their params retried
        study.tell(trial, state=TrialState.FAIL)
        study_record.retry(study, study.trials[trial.number])
    for _ in killed:  # the retries run and complete
        trial = study.ask()
        trial.set_user_attr(study_record.STATUS_ATTR, "completed")
        study.tell(trial, 1.0)
    assert finished_line(study, "s", 4) == (
        "study s: 2/4 trials finished (0 failed); 2 more in state FAIL (optuna-dashboard) are no "
        "failures: a killed sweeper's trials, whose params ran again, or asks beyond n_trials "
        "(docs/sweeper.md)")
