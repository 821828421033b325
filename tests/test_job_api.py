"""The job-side API in memory (hydra_racing_sweeper/trial.py, identity.py, job.py; issue 68): how a
job's identity travels through Hydra to its environment, what trial.report answers (after a
stop, at a rung judged late, on a value or a step it does not take), and what the launcher
reads back of a job that reported. Studies are SQLite files in tmp_path; Hydra composes the
overrides as it does for a job (compose, then env_set applied by hydra.core.utils.env_override,
the context manager run_job uses)."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import warnings

import optuna
import pytest
from hydra import compose, initialize_config_dir
from hydra.conf import HydraConf
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus, env_override
from hydra_racing_sweeper import identity, trial
from hydra_racing_sweeper.identity import Identity
from hydra_racing_sweeper.launcher import job_result
from omegaconf import OmegaConf

from tests.helpers.studies import BLOCK, median_pruned_trial, rung_study

# -- the identity, from the sweeper's overrides to the job's environment ----------------------


def composed_env(tmp_path, overrides: list[str]) -> dict:
    """hydra.job.env_set as a job of these overrides gets it: composed by Hydra (its override
    parser, then OmegaConf), as a launcher composes a job's config."""
    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    (conf / "config.yaml").write_text("{}\n")
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    return cfg.hydra.job.env_set


@contextlib.contextmanager
def job_environment(tmp_path, ident: Identity):
    """The environment a job launched with env_overrides(ident) runs in."""
    env_set = composed_env(tmp_path, identity.env_overrides(ident))
    with env_override(env_set):
        yield


# Strings whose backslashes, quotes and `${` each reader unescapes its own way: Hydra's override
# parser (a backslash before a quote, the closing one included), OmegaConf (before `${`).
ODD = ["a\\b", "sqlite:///C:\\runs\\o.db", "end\\", "end\\\\", "\\'", "it's", "a\\'b", "'",
       "\\", "", 'say "x"', "x${y}", "a\\${b}", "${", "${a}${b}", "a b=c,d", "é\tü\n", "1", "null"]


@pytest.mark.parametrize("text", ODD)
def test_a_study_name_and_storage_reach_the_job_as_written(tmp_path, monkeypatch, text):
    """Through Hydra's override parser and env_set, into os.environ: unchanged. (identity's
    quoting doubled every backslash, while Hydra unescapes one only before a quote: a study
    `a\\b` reached the job as `a\\\\b`, and trial.report could not find its trial.)"""
    for name in identity.ENV:
        monkeypatch.delenv(name, raising=False)
    ident = Identity(text or "s", f"sqlite:///{text}/o.db", 7, text, (5, 10), None, (0.5, 0.25))
    with job_environment(tmp_path, ident):
        assert identity.identity() == ident
    if "${" not in text:  # OmegaConf unescapes the rest after the parser: not at this stage
        parsed = OverridesParser.create().parse_overrides(identity.env_overrides(ident))
        assert parsed[0].value() == ident.study_name  # the parser's own reading


def test_any_string_reaches_the_job_as_written(tmp_path):
    """2,000 strings drawn from the characters the two readers treat specially, in one compose
    (each its own env_set key)."""
    rng = random.Random(68)
    alphabet = "\\'\"${}ab =,:/\n]["
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
             for _ in range(2000)]
    overrides = [f"++hydra.job.env_set.K{i}={identity._quoted(t)}" for i, t in enumerate(texts)]
    env_set = composed_env(tmp_path, overrides)
    with env_override(env_set):
        got = [os.environ[f"K{i}"] for i in range(len(texts))]
    assert [t for t, g in zip(texts, got) if t != g] == []


@pytest.mark.parametrize(("env", "words"), [
    ({identity.TRIAL: "three", identity.STUDY: "s", identity.STORAGE: "sqlite:///o.db"},
     "RACING_TRIAL='three' is not one whole number"),
    ({identity.TRIAL: "3,4", identity.STUDY: "s", identity.STORAGE: "sqlite:///o.db"},
     "RACING_TRIAL='3,4' is not one whole number"),
    ({identity.TRIAL: "3", identity.STORAGE: "sqlite:///o.db"},
     "RACING_TRIAL='3' is set without RACING_STUDY; "),
    ({identity.TRIAL: "3"}, "is set without RACING_STUDY and RACING_STORAGE; "),
    ({identity.TRIAL: "3", identity.STUDY: "s", identity.STORAGE: "x", identity.RUNGS: "5,x"},
     "RACING_RUNGS='5,x' is not whole numbers separated by commas"),
    ({identity.TRIAL: "3", identity.STUDY: "s", identity.STORAGE: "x", identity.RUNGS: "5",
      identity.MARGIN: "big"}, "RACING_MARGIN='big' is not one number"),
])
def test_an_odd_identity_variable_is_one_line_naming_it(monkeypatch, env, words):
    """Only someone setting them by hand gets these: one line, the variable and its value, and
    the fix (unset them)."""
    for name in identity.ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as e:
        identity.identity()
    assert words in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).endswith(": unset it") or str(e.value).endswith(": unset them")


@pytest.mark.parametrize("trial", [None, ""])
def test_an_unset_or_empty_trial_is_outside_a_sweep(monkeypatch, trial):
    """Hydra's env_set gives an empty string for an empty value: no trial, so no sweep, even
    with a study and storage set (a parent sweep's leftovers)."""
    for name in identity.ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(identity.STUDY, "s")
    monkeypatch.setenv(identity.STORAGE, "sqlite:///o.db")
    if trial is not None:
        monkeypatch.setenv(identity.TRIAL, trial)
    assert identity.identity() is None


# -- what trial.report answers -------------------------------------------------------------------


def in_a_job(monkeypatch, ident: Identity) -> None:
    """This process as the job of `ident` (the variables env_set gives it)."""
    for name in identity.ENV:
        monkeypatch.delenv(name, raising=False)
    for override in identity.env_overrides(ident):
        o = OverridesParser.create().parse_overrides([override])[0]
        monkeypatch.setenv(o.key_or_group.removeprefix("hydra.job.env_set."), o.value())


def new_trial(url: str, name: str = "s") -> int:
    """A study with one running trial (no pruner attr: NopPruner, every value stored)."""
    study = optuna.create_study(study_name=name, storage=url)
    return study.ask().number


def stored(url: str, name: str = "s") -> dict[int, float]:
    return optuna.load_study(study_name=name, storage=url).trials[0].intermediate_values


def test_a_study_whose_name_and_path_hold_backslashes_gets_its_reports(tmp_path, monkeypatch):
    """The whole way: env_overrides, Hydra's composing, env_set, identity, the storage opened
    and the trial found (with backslashes doubled on the way, it was not)."""
    folder = tmp_path / "runs\\o"
    folder.mkdir()
    url, name = f"sqlite:///{folder / 'o.db'}", "a\\b 'c' ${x}"
    n = new_trial(url, name)
    for env in identity.ENV:
        monkeypatch.delenv(env, raising=False)
    with job_environment(tmp_path, Identity(name, url, n)):
        assert trial.report(0, 1.5) is False
    assert stored(url, name) == {0: 1.5}


def test_after_a_stop_report_says_stop_at_every_call_and_reports_nothing(tmp_path, monkeypatch):
    """A race's job stopped at its rung (0.11 behind p=2's 2.20 at step 500, margin 0.05): that
    report and every later one answer True, and no value after the stop is stored."""
    url = rung_study(tmp_path)
    in_a_job(monkeypatch, Identity("r", url, 1, BLOCK, (250, 500), 0.05))
    assert [trial.report(s, v) for s, v in ((250, 2.44), (500, 2.31), (600, 2.0), (700, 1.0))] \
        == [False, True, True, True]
    assert optuna.load_study(study_name="r", storage=url).trials[1].intermediate_values == {
        250: 2.44, 500: 2.31}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_value_is_not_reported_and_answers_go_on(tmp_path, monkeypatch, bad):
    url = f"sqlite:///{tmp_path / 'o.db'}"
    in_a_job(monkeypatch, Identity("s", url, new_trial(url)))
    assert [trial.report(0, 2.0), trial.report(1, bad), trial.report(2, 1.0)] == [False] * 3
    assert stored(url) == {0: 2.0, 2: 1.0}


def test_a_step_that_goes_back_or_repeats_is_ignored_with_one_warning(tmp_path, monkeypatch,
                                                                       caplog):
    """Steps 5, 3 (back), 5 (again), 6: 3 and the second 5 are not reported, one warning names
    the first of them, and the steps stay the furthest reached (issue 67: a step that went
    back was taken, and final.json recorded steps: 0)."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    in_a_job(monkeypatch, Identity("s", url, new_trial(url)))
    with caplog.at_level(logging.WARNING, logger="hydra_racing_sweeper.job"):
        said = [trial.report(s, v) for s, v in ((5, 1.0), (3, 0.9), (5, 0.8), (6, 0.7))]
    assert said == [False] * 4
    assert stored(url) == {5: 1.0, 6: 0.7}
    warned = [r.getMessage() for r in caplog.records if r.name == "hydra_racing_sweeper.job"]
    assert len(warned) == 1 and warned[0].startswith(
        "trial.report(step=3) after step 5 is ignored")


@pytest.mark.parametrize(("step", "value", "error", "words"), [
    (True, 1.0, TypeError, "trial.report(step=True): the step must be a whole number >= 0"),
    (2.5, 1.0, TypeError, "trial.report(step=2.5): the step must be a whole number >= 0"),
    ("3", 1.0, TypeError, "trial.report(step='3'): the step must be a whole number >= 0"),
    (None, 1.0, TypeError, "trial.report(step=None): the step must be a whole number >= 0"),
    (-1, 1.0, ValueError, "trial.report(step=-1): the step must be >= 0"),
    (1, "low", TypeError, "trial.report(value='low'): the value must be a number"),
    (1, None, TypeError, "trial.report(value=None): the value must be a number"),
])
@pytest.mark.parametrize("in_sweep", [False, True])
def test_a_step_or_value_report_cannot_take_is_one_line_in_a_sweep_or_not(
        tmp_path, monkeypatch, step, value, error, words, in_sweep):
    for name in identity.ENV:
        monkeypatch.delenv(name, raising=False)
    if in_sweep:
        url = f"sqlite:///{tmp_path / 'o.db'}"
        in_a_job(monkeypatch, Identity("s", url, new_trial(url)))
    with pytest.raises(error) as e:
        trial.report(step, value)
    assert str(e.value).startswith(words) and "\n" not in str(e.value)


def test_an_integer_type_step_and_a_number_like_value_are_taken(tmp_path, monkeypatch):
    """What Optuna takes: numpy's integers as steps (operator.index), a value float() reads."""
    import numpy as np

    url = f"sqlite:///{tmp_path / 'o.db'}"
    in_a_job(monkeypatch, Identity("s", url, new_trial(url)))
    assert trial.report(np.int64(0), np.float32(0.5)) is False
    assert trial.report(1, "0.25") is False
    assert stored(url) == {0: 0.5, 1: 0.25}


# -- what the launcher reads back of a job that reported -----------------------------------------


def job_return(run_dir, value, status=JobStatus.COMPLETED) -> JobReturn:
    ret = JobReturn(hydra_cfg=OmegaConf.create({"hydra": {"runtime": {
        "output_dir": str(run_dir)}}}), status=status)
    ret.return_value = value
    return ret


@pytest.fixture
def hydra_job(tmp_path):
    """HydraConfig set as inside a job whose output dir is tmp_path/job (where the job side
    writes REPORTED_FILE); cleared after."""
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    cfg = OmegaConf.create({"hydra": OmegaConf.structured(HydraConf)})
    cfg.hydra.runtime.output_dir = str(run_dir)
    HydraConfig.instance().set_config(cfg)
    yield run_dir
    HydraConfig.instance().cfg = None


def test_a_stopped_jobs_report_reads_back_pruned_with_its_steps(tmp_path, monkeypatch, hydra_job):
    """The job side writes its last step, its seconds and the step it stopped at; the
    launcher reads them for a task with no final.json: status pruned at that step, its steps,
    and a final.json written so a resume reads it back."""
    url = rung_study(tmp_path)
    in_a_job(monkeypatch, Identity("r", url, 1, BLOCK, (250, 500), 0.05))
    assert [trial.report(s, v) for s, v in ((0, 4.0), (250, 2.44), (500, 2.31))] == [
        False, False, True]
    written = json.loads((hydra_job / identity.REPORTED_FILE).read_text())
    assert (written["step"], written["stopped"]) == (500, 500) and written["seconds"] >= 0
    got = job_result(job_return(hydra_job, 2.31), ["loss"])
    assert (got.status, got.error, got.fields["steps"], got.fields["loss"]) == (
        "pruned", "stopped at step 500", 500, 2.31)
    assert json.loads((hydra_job / "final.json").read_text())["status"] == "pruned"


@pytest.mark.parametrize(("reported", "status", "steps"), [
    ('{"step": 7, "seconds": 1.5, "stopped": null}', "completed", 7),
    (None, "completed", None),  # reported nothing: the value alone
    ("{not json", "completed", None),  # cut short while written: as if nothing
])
def test_a_completed_jobs_report_reads_back_its_steps(tmp_path, reported, status, steps):
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    if reported is not None:
        (run_dir / identity.REPORTED_FILE).write_text(reported)
    got = job_result(job_return(run_dir, 0.5), ["loss"])
    assert (got.status, got.error, got.fields["steps"], got.fields["loss"]) == (
        status, "", steps, 0.5)
    assert got.fields["wall_time_s"] == (1.5 if steps == 7 else None)


def test_a_failed_job_reads_back_failed_whatever_it_reported(tmp_path):
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    (run_dir / identity.REPORTED_FILE).write_text('{"step": 3, "seconds": 1, "stopped": 3}')
    got = job_result(job_return(run_dir, RuntimeError("boom"), JobStatus.FAILED), ["loss"])
    assert (got.status, got.error) == ("failed", "RuntimeError: boom")
    assert not (run_dir / "final.json").exists()


@pytest.mark.parametrize(("steps", "ignored"), [((5, 3, 5, 6), 3), ((5, 5, 3, 6), 5)])
def test_the_first_step_not_after_the_last_is_the_one_warned_of(tmp_path, monkeypatch, caplog,
                                                                steps, ignored):
    """A repeat is ignored with the warning as a step that goes back is: whichever comes first
    is named, once."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    in_a_job(monkeypatch, Identity("s", url, new_trial(url)))
    with caplog.at_level(logging.WARNING, logger="hydra_racing_sweeper.job"):
        assert [trial.report(s, 1.0 - s / 10) for s in steps] == [False] * 4
    warned = [r.getMessage() for r in caplog.records if r.name == "hydra_racing_sweeper.job"]
    assert len(warned) == 1 and warned[0].startswith(f"trial.report(step={ignored}) after step 5")
    assert sorted(stored(url)) == [5, 6]


def test_a_replicate_pruned_stops_its_siblings_at_their_next_report(tmp_path, monkeypatch):
    """Two replicate jobs of one trial under Optuna's MedianPruner (two earlier trials at 1.0):
    seed=0's job reports 3.0 at step 2 and is pruned there; seed=1's job, at its next report,
    is told stop too, whatever its value, and the trial keeps one value per step (the first
    job's)."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    study, t = median_pruned_trial(url, 4)
    in_a_job(monkeypatch, Identity("m", url, t.number, "seed=0"))
    assert [trial.report(s, 3.0) for s in range(3)] == [False, False, True]
    in_a_job(monkeypatch, Identity("m", url, t.number, "seed=1"))
    assert trial.report(0, 0.5) is True  # a sibling was pruned: the trial is
    stored = optuna.load_study(study_name="m", storage=url).trials[t.number]
    assert stored.intermediate_values == {0: 3.0, 1: 3.0, 2: 3.0}
    assert stored.user_attrs["pruned_step"] == 2


def test_replicates_reporting_one_step_tell_the_trial_once_and_optuna_warns_of_nothing(
        tmp_path, monkeypatch, caplog):
    """Two replicate jobs of one trial (no pruner) report steps 0 and 1: the first to reach a
    step gives its value, the other's is skipped before Optuna sees it (Optuna would log "The
    reported value is ignored" at each one, which users read as an error)."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    n = new_trial(url)
    with warnings.catch_warnings(record=True) as said, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        for block, value in (("seed=0", 2.0), ("seed=1", 1.0)):
            in_a_job(monkeypatch, Identity("s", url, n, block))
            assert [trial.report(s, value) for s in (0, 1)] == [False, False]
    assert stored(url) == {0: 2.0, 1: 2.0}
    assert [str(w.message) for w in said if "already reported" in str(w.message)] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_multi_objective_trial_is_reported_to_without_pruning(tmp_path, monkeypatch):
    """Optuna neither stores intermediate values nor prunes a multi-objective study (its
    should_prune raises): report answers False and stores nothing."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    study = optuna.create_study(study_name="mo", storage=url, directions=["minimize"] * 2)
    in_a_job(monkeypatch, Identity("mo", url, study.ask().number))
    assert [trial.report(s, 1.0) for s in (0, 1)] == [False, False]
    assert optuna.load_study(study_name="mo", storage=url).trials[0].intermediate_values == {}


def test_a_trial_finished_elsewhere_is_reported_to_no_more_with_one_warning(tmp_path,
                                                                            monkeypatch, caplog):
    """The sweeper that launched the job is gone and its trial was closed: the job runs on,
    report answers False and tries no more writes (one warning, not one per report)."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    n = new_trial(url)
    in_a_job(monkeypatch, Identity("s", url, n))
    assert trial.report(0, 1.0) is False
    study = optuna.load_study(study_name="s", storage=url)
    study.tell(n, state=optuna.trial.TrialState.FAIL)
    with caplog.at_level(logging.WARNING, logger="hydra_racing_sweeper.job"):
        assert [trial.report(s, 1.0) for s in (1, 2, 3)] == [False] * 3
    assert [r.getMessage() for r in caplog.records if r.name == "hydra_racing_sweeper.job"] == [
        f"trial {n} is already finished; not reporting any more"]


def test_a_candidates_rung_value_is_the_lowest_of_its_trials():
    """A killed sweeper's trial and its retry ran the same run: the other candidates are judged
    against the lower of the two, and a job's own candidate is never among the others."""
    from hydra_racing_sweeper.job import rung_values
    from hydra_racing_sweeper.study import RACE_CANDIDATE_ATTR, RACE_RUNG_ATTR

    def t(label, value):
        return optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING, user_attrs={
            RACE_CANDIDATE_ATTR: label, RACE_RUNG_ATTR + BLOCK: {"250": value}})

    trials = [t("p=2", 2.3), t("p=2", 2.4), t("p=4", 2.6), t("p=1", 2.0)]
    assert rung_values(trials, BLOCK, 250, "p=1") == {"p=2": 2.3, "p=4": 2.6}
