"""Stopping runs that have lost, inside a fold of a race (issue 13, part 2): the rule on
synthetic rung values, the launch order, the checks, the job-side hook on a real SQLite study,
and the sweeper's side: the replay, the settings and the elimination table."""

from __future__ import annotations

import optuna
import pytest

from qknorm import pruning, race
from qknorm.config import OptunaTrialConfig, RaceRungsConfig, rungs_problem
from qknorm.errors import RunPruned

# -- the rule ------------------------------------------------------------------------------------


def test_a_run_stops_only_when_above_the_best_other_by_more_than_the_margin():
    others = {"p=2": 2.20, "p=4": 2.26}
    stop = race.stop_at_rung(2.30, others, margin=0.05)
    assert stop == race.Stop("p=2", 2.20, pytest.approx(0.10))  # judged against the best
    assert race.stop_at_rung(2.25, others, 0.05) is None  # Δ = 0.05: not more than the margin
    assert race.stop_at_rung(2.2501, others, 0.05).delta == pytest.approx(0.0501)
    assert race.stop_at_rung(2.10, others, 0.05) is None  # ahead of everyone
    assert race.stop_at_rung(9.0, {}, 0.05) is None  # nobody reached the rung yet: go on
    assert race.stop_at_rung(2.30, {"p=4": 2.26}, 0.05) is None  # only a close one is there


def test_runs_of_a_block_launch_best_first_and_the_baseline_first_before_any_result():
    assert race.standing({}, ["p=1", "p=2", "p=4"], baseline="p=2") == ["p=2", "p=1", "p=4"]
    assert race.standing({}, ["p=1", "p=2"]) == ["p=1", "p=2"]  # no baseline: grid order
    values = {"p=1": {0: 2.0, 1: 2.2}, "p=2": {0: 1.8, 1: 1.9}, "p=4": {0: 1.9, 1: 1.7, 2: 9.0}}
    # By mean over the blocks all three completed (0 and 1): p=4 1.80, p=2 1.85, p=1 2.10.
    assert race.standing(values, ["p=1", "p=2", "p=4"], "p=2") == ["p=4", "p=2", "p=1"]
    values["p=3"] = {}  # a candidate with no result yet: no common block, baseline first
    assert race.standing(values, ["p=1", "p=2", "p=3"], "p=2") == ["p=2", "p=1", "p=3"]


def test_completed_leaves_out_the_runs_stopped_at_a_rung():
    runs = {"f=0": {"value": 1.0, "steps": 20}, "f=1": {"value": None, "steps": 10,
                                                         "stopped_at": 10}}
    assert race.completed(runs) == {"f=0": runs["f=0"]}


@pytest.mark.parametrize("rungs, message", [
    ([500, 1000], None),
    ([], None),
    ("500", "must be a list of training steps, e.g. [500, 1000], or null for none"),
    ([500.0], "must be a list of training steps"),
    ([True], "must be a list of training steps"),
    ([0, 500], "must be positive and increasing, e.g. [500, 1000]"),
    ([1000, 500], "must be positive and increasing"),
    ([500, 500], "must be positive and increasing"),
    ([500, 2000], "has 2000, not below train.max_iters=2000: a rung stops a run before its end; "
                  "use steps below 2000"),
    ([600], "has 600, not an eval step (a multiple of train.eval_interval=250); use e.g. 500"),
])
def test_rungs_are_increasing_eval_steps_before_the_end(rungs, message):
    got = rungs_problem(rungs, max_iters=2000, eval_interval=250)
    assert got == message if message is None else got.startswith(message)


# -- the job-side hook, on a real study --------------------------------------------------------

BLOCK = "data.fold=0"


@pytest.fixture
def study(tmp_path):
    """A race's study (its storage URL): p=2 ran fold 0 to the end, its rung values recorded;
    p=4's and p=1's trials are running. Another fold's values must never count."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    s = optuna.create_study(study_name="r", storage=url)
    trials = [s.ask() for _ in range(3)]
    for t, label in zip(trials, ("norm.p=2.0", "norm.p=4.0", "norm.p=1.0"), strict=True):
        t.set_user_attr(race.CANDIDATE_ATTR, label)
    trials[0].set_user_attr(race.RUNG_ATTR + BLOCK, {"250": 2.40, "500": 2.20})
    trials[0].set_user_attr(race.RUNG_ATTR + "data.fold=1", {"250": 1.00, "500": 1.00})
    return url


def hook(url: str, trial: int, margin: float | None, rungs=(250, 500)):
    cfg = OptunaTrialConfig(study_name="r", storage=url, trial=trial,
                            race=RaceRungsConfig(block=BLOCK, rungs=list(rungs), margin=margin))
    return pruning.eval_hook(cfg)


def attrs(url: str, trial: int) -> dict:
    return optuna.load_study(study_name="r", storage=url).trials[trial].user_attrs


def test_a_job_that_has_lost_at_a_rung_stops_there_and_says_why(study):
    on_eval = hook(study, 1, margin=0.05)
    on_eval(0, {"val_loss": 4.2})  # not a rung: nothing recorded
    on_eval(250, {"val_loss": 2.44})  # 0.04 behind p=2: goes on
    with pytest.raises(RunPruned) as e:
        on_eval(500, {"val_loss": 2.31})  # 0.11 behind p=2 on the same fold
    assert e.value.step == 500
    got = attrs(study, 1)
    assert got[race.RUNG_ATTR + BLOCK] == {"250": 2.44, "500": 2.31}
    assert got[race.STOP_ATTR + BLOCK] == {"step": 500, "value": 2.31, "best": "norm.p=2.0",
                                          "best_value": 2.20, "delta": pytest.approx(0.11)}
    assert "pruned_step" not in got  # only this block is marked, not the trial's other jobs
    # p=1's job now has two others at step 500: p=2 (2.20) is still the best of them.
    with pytest.raises(RunPruned):
        hook(study, 2, margin=0.05)(500, {"val_loss": 2.26})
    assert attrs(study, 2)[race.STOP_ATTR + BLOCK]["best"] == "norm.p=2.0"


def test_the_baseline_a_close_run_and_a_retry_record_their_rungs_and_go_on(study):
    hook(study, 1, margin=None)(500, {"val_loss": 3.0})  # the baseline: recorded, never judged
    hook(study, 2, margin=0.05)(500, {"val_loss": 2.24})  # 0.04 behind p=2: goes on
    assert attrs(study, 1)[race.RUNG_ATTR + BLOCK] == {"500": 3.0}
    assert attrs(study, 2)[race.RUNG_ATTR + BLOCK] == {"500": 2.24}
    # A killed sweeper's trial of p=1 and its retry: the retry is not judged against it.
    s = optuna.load_study(study_name="r", storage=study)
    for t in (0, 1):  # trial 0 and 1 are now p=1's earlier attempts
        s._storage.set_trial_user_attr(s.trials[t]._trial_id, race.CANDIDATE_ATTR, "norm.p=1.0")
    hook(study, 2, margin=0.05)(500, {"val_loss": 2.31})  # its only others are its own runs
    assert not any(k.startswith(race.STOP_ATTR) for t in (1, 2) for k in attrs(study, t))


def test_race_keys_are_checked_in_the_job_config():
    from qknorm.config import Config, validate
    from qknorm.errors import UserError

    cfg = Config()
    cfg.optuna = OptunaTrialConfig(study_name="r", storage="x", trial=0,
                                   race=RaceRungsConfig(block=BLOCK, rungs=[500, 1000],
                                                        margin=0.05))
    validate(cfg)
    cfg.optuna.race.rungs = [300]
    with pytest.raises(UserError, match=r"^optuna.race.rungs=\[300\] has 300, not an eval step"):
        validate(cfg)
    cfg.optuna.race.rungs, cfg.optuna.race.margin = [500], -0.1
    with pytest.raises(UserError, match=r"^optuna.race.margin=-0.1 must be a number > 0"):
        validate(cfg)
    cfg.optuna.trial, cfg.optuna.race.margin = None, 0.05
    with pytest.raises(UserError, match="are set by the qknorm_optuna sweeper"):
        validate(cfg)
