"""Rungs with their own margins (hydra.sweeper.race.rungs=[500,1000] margin=[0.1,0.05]): the
settings, the checks, the keys a job gets, and the job judging each rung with its own margin."""

from __future__ import annotations

import optuna
import pytest
from hydra_racing_sweeper import identity, racing, trial
from hydra_racing_sweeper.study import RACE_STOP_ATTR

from qknorm.errors import RunPruned, UserError
from tests.helpers.race import race_plan, refused
from tests.helpers.studies import BLOCK, attrs, job_hook, rung_study


@pytest.fixture
def study(tmp_path):
    return rung_study(tmp_path)


def test_a_margin_list_gives_each_rung_its_margin_and_a_number_keeps_the_one_margin():
    spec = race_plan(rungs=[500, 1000], margin=[0.1, 0.05])
    assert (spec.rungs, spec.margins) == ((500, 1000), (0.1, 0.05))
    assert (spec.margin_at(500), spec.margin_at(1000)) == (0.1, 0.05)
    assert spec.settings()["rungs"] == [500, 1000] and spec.settings()["margin"] == [0.1, 0.05]
    assert spec.rung_words() == "500 (margin 0.1), 1000 (margin 0.05)"
    # The baseline (p=2) records only; the others get each rung's margin.
    assert spec.judging((1.0,)) == {"rungs": (500, 1000), "margin": None,
                                    "margins": (0.1, 0.05)}
    assert spec.judging((2.0,)) == {"rungs": (500, 1000), "margin": None, "margins": ()}
    listed = race_plan(rungs=[500, 1000], margin=0.05)
    assert listed.margins == () and listed.judging((1.0,)) == {
        "rungs": (500, 1000), "margin": 0.05, "margins": ()}  # as before margins existed
    # Equal margins are the one margin: the same race as the number, in the study too.
    same = race_plan(rungs=[500, 1000], margin=[0.05, 0.05])
    assert (same.margins, same.margin) == ((), 0.05) and same.settings() == listed.settings()


def test_a_study_raced_with_the_one_margin_refuses_per_rung_margins():
    listed, each = race_plan(rungs=[500, 1000]), race_plan(rungs=[500, 1000], margin=[0.1, 0.05])
    study = optuna.create_study()
    racing.record_settings(study, listed)
    racing.check_study(study, race_plan(rungs=[500, 1000], margin=[0.05, 0.05]), "s")  # the same
    with pytest.raises(UserError, match=r"^study 's' was raced with margin=0.05, not \[0.1, "
                                         r"0.05\]; rerun with its settings"):
        racing.check_study(study, each, "s")


@pytest.mark.parametrize("options, message", [
    ({"rungs": [500, 1000], "margin": [0.1, -0.05]},
     "hydra.sweeper.race.margin=[0.1, -0.05] must be a number > 0 (val loss units: how far "
     "behind the best run of a fold a run may be at a rung), e.g. 0.05, or one such number per "
     "rung, e.g. [0.1, 0.04]"),
    ({"rungs": [500], "margin": [0.0]}, "hydra.sweeper.race.margin=[0.0] must be a number > 0"),
    ({"rungs": [500], "margin": ["big"]}, "hydra.sweeper.race.margin=['big']: Value 'big' of "
                                          "type 'str' could not be converted to Float"),
    ({"rungs": [0.5], "margin": [0.1, 0.04]},
     "hydra.sweeper.race.margin=[0.1, 0.04] gives 2 margin(s) for the 1 rung(s) of "
     "hydra.sweeper.race.rungs=[0.5]; give one per rung, or one number for every rung, e.g. "
     "hydra.sweeper.race.margin=0.05"),
    # The form before rungs were fractions: the two lists that say the same
    ({"rungs": {500: 0.1, 1000: 0.05}},
     "hydra.sweeper.race.rungs={500: 0.1, 1000: 0.05}: rungs are a list and their margins "
     "another, not a mapping; write hydra.sweeper.race.rungs=[500,1000] "
     "hydra.sweeper.race.margin=[0.1,0.05]"),
])
def test_bad_margins_are_one_line_naming_the_value_and_the_fix(options, message):
    assert refused(**options).startswith(message)


def hook(url: str, trial: int, margins: list[float]):
    return job_hook(url, trial, BLOCK, (250, 500), None, margins)


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


def test_per_rung_margins_that_do_not_match_the_rungs_are_one_line(monkeypatch):
    """A job zips its rungs with its margins (job.judge): set by hand with one margin short, the
    variables are refused, naming both, at the job's first report instead of a ValueError."""
    for key, value in {identity.STUDY: "r", identity.STORAGE: "sqlite:///o.db",
                       identity.TRIAL: "0", identity.BLOCK: BLOCK, identity.RUNGS: "500,1000",
                       identity.MARGINS: "0.1,0.05"}.items():
        monkeypatch.setenv(key, value)
    assert identity.identity().margins == (0.1, 0.05)  # one per rung: as the sweeper wrote them
    monkeypatch.setenv(identity.MARGINS, "0.1")
    with pytest.raises(ValueError) as e:
        trial.report(250, 2.4)
    assert str(e.value) == (
        "RACING_MARGINS='0.1' gives 1 margin(s) for the 2 rung(s) of RACING_RUNGS='500,1000', "
        "which the racing sweeper never sets (one per rung): unset them")
    monkeypatch.setenv(identity.MARGINS, "0.1,big")
    with pytest.raises(ValueError, match=r"^RACING_MARGINS='0.1,big' is not numbers separated "
                                         r"by commas, as the racing sweeper sets it"):
        trial.report(250, 2.4)


@pytest.mark.slow
def test_rungs_and_margins_on_the_command_line_are_checked_against_the_runs(cli):
    """The plan resolves the rungs against the jobs' train.max_iters and eval_interval
    (hydra_racing_sweeper/plan.py) before any study or job; a step typed as one must be an eval step.
    A mapping (the form before fractions) cannot merge into the preset's list: the error says
    what to write instead of Hydra's words."""
    base = ["-m", "qknorm.train", "search=p_race", "experiment=smoke",
            "train.max_iters=20", "train.eval_interval=10", "norm.p=choice(1,2,inf)",
            "++hydra.sweeper.replicates={data.fold:[0,1]}", "hydra.sweeper.race.min_replicates=2",
            "hydra/job_logging=disabled"]
    r = cli(*base, "hydra.sweeper.race.rungs=[5,10]")  # the preset's margins, one per rung
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: hydra.sweeper.race.rungs=[5, 10] has 5, not an eval step (a multiple of "
        "train.eval_interval=10); use e.g. 10"]
    r = cli(*base, "hydra.sweeper.race.rungs=[0.5]", "hydra.sweeper.race.margin=[-0.1]")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: hydra.sweeper.race.margin=[-0.1] must be a number > 0 (val loss units: how far "
        "behind the best run of a fold a run may be at a rung), e.g. 0.05, or one such number "
        "per rung, e.g. [0.1, 0.04]"]
    r = cli(*base, "hydra.sweeper.race.rungs={10:0.1}")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: hydra.sweeper.race.rungs={10:0.1}: a race's rungs are a list and its margin a "
        "number or a list, one per rung, e.g. hydra.sweeper.race.rungs=[0.25,0.5] "
        "hydra.sweeper.race.margin=[0.1,0.04] (or margin=0.05 at every rung); docs/race.md"]
    assert not (cli.cwd / "outputs").exists()
