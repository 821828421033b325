"""Rungs with their own margins (hydra.sweeper.race.rungs={500: 0.1, 1000: 0.05}): the settings,
the checks, the keys a job gets, and the job judging each rung with its own margin."""

from __future__ import annotations

import optuna
import pytest

from qknorm.config import Config, OptunaTrialConfig, RaceRungsConfig, validate
from qknorm.errors import RunPruned, UserError
from qknorm.sweep import eval_hook
from qknorm.sweep import race as _race
from qknorm.sweep.study import RACE_STOP_ATTR
from tests.test_race_rungs import BLOCK, attrs, race_plan, race_study


@pytest.fixture
def study(tmp_path):
    return race_study(tmp_path)


def test_a_mapping_gives_each_rung_its_margin_and_a_list_keeps_the_one_margin():
    spec = race_plan(rungs={1000: 0.05, 500: 0.1})  # a mapping's order does not matter
    assert (spec.rungs, spec.margins) == ((500, 1000), (0.1, 0.05))
    assert (spec.margin_at(500), spec.margin_at(1000)) == (0.1, 0.05)
    assert spec.settings()["rungs"] == [500, 1000] and spec.settings()["margin"] == [0.1, 0.05]
    assert spec.rung_words() == "500 (margin 0.1), 1000 (margin 0.05)"
    # The baseline (p=2) records only; the others get each rung's margin.
    assert spec.job_keys((1.0,), BLOCK) == [
        "optuna.race.block='data.fold=0'", "optuna.race.rungs=[500,1000]",
        "optuna.race.margin=null", "optuna.race.margins=[0.1,0.05]"]
    assert spec.job_keys((2.0,), BLOCK) == [
        "optuna.race.block='data.fold=0'", "optuna.race.rungs=[500,1000]",
        "optuna.race.margin=null"]
    listed = race_plan(rungs=[500, 1000], margin=0.05)
    assert listed.margins == () and listed.job_keys((1.0,), BLOCK) == [
        "optuna.race.block='data.fold=0'", "optuna.race.rungs=[500,1000]",
        "optuna.race.margin=0.05"]  # as before margins existed
    # Equal margins are the one margin: the same race as the list, in the study too.
    same = race_plan(rungs={500: 0.05, 1000: 0.05})
    assert (same.margins, same.margin) == ((), 0.05) and same.settings() == listed.settings()


def test_a_study_raced_with_the_one_margin_refuses_per_rung_margins():
    listed, mapped = race_plan(rungs=[500, 1000]), race_plan(rungs={500: 0.1, 1000: 0.05})
    study = optuna.create_study()
    _race.record_settings(study, listed)
    _race.check_study(study, race_plan(rungs={500: 0.05, 1000: 0.05}), "s")  # the same race
    with pytest.raises(UserError, match=r"^study 's' was raced with margin=0.05, not \[0.1, "
                                         r"0.05\]; rerun with its settings"):
        _race.check_study(study, mapped, "s")


@pytest.mark.parametrize("rungs, message", [
    ({0: 0.1}, "hydra.sweeper.race.rungs={0: 0.1} must be positive and increasing, e.g. "
               "[500, 1000]"),
    ({500: 0.1, 1000: -0.05}, "hydra.sweeper.race.rungs={500: 0.1, 1000: -0.05} has margin "
                              "-0.05 at step 1000: each rung's margin must be a number > 0 "
                              "(val loss units"),
    ({500: 0}, "hydra.sweeper.race.rungs={500: 0.0} has margin 0 at step 500"),
    ({500: "big"}, "hydra.sweeper.race.rungs={500: 'big'}: Value 'big' of type 'str' could not "
                   "be converted to Float"),
    ({"late": 0.1}, "hydra.sweeper.race.rungs={'late': 0.1}: Key late (str) is incompatible "
                    "with (int)"),
])
def test_a_bad_rung_mapping_is_one_line_naming_the_value_and_the_fix(rungs, message):
    with pytest.raises(UserError) as e:
        race_plan(rungs=rungs)
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value) and e.value.exit_code == 2


def hook(url: str, trial: int, margins: list[float]):
    cfg = OptunaTrialConfig(study_name="r", storage=url, trial=trial,
                            race=RaceRungsConfig(block=BLOCK, rungs=[250, 500], margin=None,
                                                 margins=margins))
    return eval_hook(cfg)


def test_a_job_judges_each_rung_with_its_own_margin(study):
    # p=2 recorded 2.40 at step 250 and 2.20 at 500 on this fold (the fixture).
    on_eval = hook(study, 1, [0.1, 0.05])
    on_eval(250, {"val_loss": 2.46})  # 0.06 behind, margin 0.1 there: goes on
    with pytest.raises(RunPruned):
        on_eval(500, {"val_loss": 2.31})  # 0.11 behind, margin 0.05 there: stops
    assert attrs(study, 1)[RACE_STOP_ATTR + BLOCK]["step"] == 500
    with pytest.raises(RunPruned):
        hook(study, 2, [0.05, 0.2])(250, {"val_loss": 2.46})  # 0.06 > 0.05 at step 250
    assert attrs(study, 2)[RACE_STOP_ATTR + BLOCK]["step"] == 250


def test_per_rung_margins_are_checked_in_the_job_config():
    cfg = Config()
    cfg.optuna = OptunaTrialConfig(study_name="r", storage="x", trial=0, race=RaceRungsConfig(
        block=BLOCK, rungs=[500, 1000], margin=None, margins=[0.1, 0.05]))
    validate(cfg)
    cfg.optuna.race.margins = [0.1]
    with pytest.raises(UserError, match=r"^optuna.race.margins=\[0.1\] must give one margin per "
                                         r"rung \(optuna.race.rungs=\[500, 1000\]\)"):
        validate(cfg)
    cfg.optuna.race.margins = [0.1, -1.0]
    with pytest.raises(UserError, match=r"^optuna.race.margins=\[0.1, -1.0\] must be numbers "
                                         "> 0"):
        validate(cfg)


@pytest.mark.slow
def test_a_rung_mapping_on_the_command_line_is_checked_against_the_runs(cli):
    """Hydra parses {10: 0.1} with int keys; the plan checks each step against the jobs'
    train.max_iters and eval_interval (qknorm/sweep/plan.py) before any study or job. Over the
    preset's list Hydra cannot merge a mapping: the key is deleted (~) and added (+)."""
    base = ["-m", "qknorm.train", "search=p_race", "experiment=smoke",
            "train.max_iters=20", "train.eval_interval=10", "norm.p=choice(1,2,inf)",
            "++hydra.sweeper.replicates={data.fold:[0,1]}", "hydra.sweeper.race.min_replicates=2",
            "hydra/job_logging=disabled"]
    # Composed with each candidate's job keys (optuna.race.margins=[0.1,0.05] included).
    r = cli(*base, "~hydra.sweeper.race.rungs", "+hydra.sweeper.race.rungs={10:0.1,20:0.05}")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: hydra.sweeper.race.rungs=[10, 20] has 20, not below train.max_iters=20: a rung "
        "stops a run before its end; use steps below 20"]
    r = cli(*base, "~hydra.sweeper.race.rungs", "+hydra.sweeper.race.rungs={10:-0.1}")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: hydra.sweeper.race.rungs={10: -0.1} has margin -0.1 at step 10: each rung's "
        "margin must be a number > 0 (val loss units: how far behind the best run of a fold a "
        "run may be there), e.g. {500: 0.1, 1000: 0.05}"]
    assert not (cli.cwd / "outputs").exists()
