"""The job-side API in memory (qknorm/sweep/trial.py, identity.py, job.py; issue 68): how a
job's identity travels through Hydra to its environment, what trial.report answers (after a
stop, at a rung judged late, on a value or a step it does not take), and what the launcher
reads back of a job that reported. Studies are SQLite files in tmp_path; Hydra composes the
overrides as it does for a job (compose, then env_set applied by hydra.core.utils.env_override,
the context manager run_job uses)."""

from __future__ import annotations

import contextlib
import os
import random

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import env_override

from qknorm.sweep import identity
from qknorm.sweep.identity import Identity

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
     "QKNORM_TRIAL='three' is not one whole number"),
    ({identity.TRIAL: "3,4", identity.STUDY: "s", identity.STORAGE: "sqlite:///o.db"},
     "QKNORM_TRIAL='3,4' is not one whole number"),
    ({identity.TRIAL: "3", identity.STORAGE: "sqlite:///o.db"},
     "QKNORM_TRIAL='3' is set without QKNORM_STUDY; "),
    ({identity.TRIAL: "3"}, "is set without QKNORM_STUDY and QKNORM_STORAGE; "),
    ({identity.TRIAL: "3", identity.STUDY: "s", identity.STORAGE: "x", identity.RUNGS: "5,x"},
     "QKNORM_RUNGS='5,x' is not whole numbers separated by commas"),
    ({identity.TRIAL: "3", identity.STUDY: "s", identity.STORAGE: "x", identity.RUNGS: "5",
      identity.MARGIN: "big"}, "QKNORM_MARGIN='big' is not one number"),
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
