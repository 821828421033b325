"""Pruner and sampler specs chosen by name: which options reach Optuna, which are dropped.

In-process and fast; tests/test_sweeper.py runs the same switch through the real command line.
"""

from __future__ import annotations

import optuna
import pytest
from hydra_racing_sweeper import specs as specs
from hydra_racing_sweeper.plan import given_keys

from qknorm.errors import UserError
from tests.helpers import REPO

MEDIAN = {"name": "median", "n_startup_trials": 4, "n_warmup_steps": 500}  # search=p_tpe's
TPE = {"name": "tpe", "seed": 0, "n_startup_trials": 6}


def test_pruner_named_on_the_command_line_drops_the_presets_options():
    spec, dropped = specs.resolve("pruner", {**MEDIAN, "name": "none"}, specs.PRUNERS, {"name"})
    assert spec == {"name": "none"}
    assert dropped == {"n_startup_trials": 4, "n_warmup_steps": 500}
    assert type(specs.build_pruner(spec)) is optuna.pruners.NopPruner


def test_options_the_new_pruner_takes_are_kept():
    given = {"name", "percentile"}
    spec, dropped = specs.resolve("pruner", {**MEDIAN, "name": "percentile", "percentile": 25.0},
                                  specs.PRUNERS, given)
    assert spec == {"name": "percentile", "n_startup_trials": 4, "n_warmup_steps": 500,
                    "percentile": 25.0} and dropped == {}
    pruner = specs.build_pruner(spec)
    assert type(pruner) is optuna.pruners.PercentilePruner
    assert (pruner._percentile, pruner._n_startup_trials, pruner._n_warmup_steps) == (25.0, 4, 500)


def test_sampler_named_on_the_command_line_keeps_seed_and_drops_tpe_options():
    spec, dropped = specs.resolve("sampler", {**TPE, "name": "random"}, specs.SAMPLERS, {"name"})
    assert spec == {"name": "random", "seed": 0} and dropped == {"n_startup_trials": 6}
    assert type(specs.build_sampler(spec, None)) is optuna.samplers.RandomSampler
    spec, dropped = specs.resolve("sampler", {**TPE, "name": "gp"}, specs.SAMPLERS, {"name"})
    assert spec == {**TPE, "name": "gp"} and dropped == {}  # GPSampler takes both
    assert type(specs.build_sampler(spec, None)) is optuna.samplers.GPSampler


@pytest.mark.parametrize("spec, given, message", [
    ({**MEDIAN, "name": "none"}, {"name", "n_warmup_steps"},  # given: never dropped
     "hydra.sweeper.pruner.n_warmup_steps=500 is not an option of Optuna's NopPruner (pruner "
     "none), which takes no options; fix its spelling or remove it with "
     "~hydra.sweeper.pruner.n_warmup_steps"),
    ({**MEDIAN, "n_warmup_step": 5}, {"n_warmup_step"},  # a typo, name unchanged
     "hydra.sweeper.pruner.n_warmup_step=5 is not an option of Optuna's MedianPruner (pruner "
     "median), which takes n_startup_trials, n_warmup_steps, interval_steps, n_min_trials;"),
    ({**MEDIAN, "name": "hyperband"}, set(),  # name changed in a config file: not guessed at
     "hydra.sweeper.pruner.n_startup_trials=4 is not an option of Optuna's HyperbandPruner"),
    ({**MEDIAN, "name": "percentile"}, {"name"},
     "hydra.sweeper.pruner.name=percentile needs percentile (Optuna's PercentilePruner has no "
     "default); add +hydra.sweeper.pruner.percentile=VALUE"),
], ids=["given", "typo", "file", "required"])
def test_options_that_cannot_be_dropped_are_one_error(spec, given, message):
    with pytest.raises(UserError) as e:
        specs.resolve("pruner", spec, specs.PRUNERS, given)
    assert message in str(e.value)


def test_grid_sampler_takes_seed_and_is_named_as_optunas():
    spec, dropped = specs.resolve("sampler", {**TPE, "name": "grid"}, specs.SAMPLERS, {"name"})
    assert spec == {"name": "grid", "seed": 0} and dropped == {"n_startup_trials": 6}
    assert specs.optuna_name(specs.SAMPLERS["grid"]) == "GridSampler"


def test_given_keys_are_read_from_the_hydra_overrides():
    overrides = ["hydra.sweeper.pruner.name=none", "+hydra.sweeper.pruner.percentile=25",
                 "~hydra.sweeper.pruner.n_warmup_steps", "hydra.sweeper.n_trials=3",
                 "hydra.sweeper.sampler={name: random, seed: 1}", "hydra.sweeper.prunerx.a=1"]
    assert given_keys(overrides, "pruner") == {"name", "percentile", "n_warmup_steps"}
    assert given_keys(overrides, "sampler") == {"name", "seed"}


def _propose(study: optuna.Study, spec: dict, n: int, reseed: bool) -> None:
    """n trials asked by a new sweeper process: a fresh sampler, as _sweep._ask builds it."""
    study.sampler = specs.build_sampler(spec, None)
    for _ in range(n):
        if reseed:
            study.sampler = specs.build_sampler(specs.reseeded(spec, len(study.trials)), None)
        trial = study.ask({"p": optuna.distributions.FloatDistribution(1.0, 8.0)})
        study.tell(trial, 0.0)


@pytest.mark.parametrize("reseed", [False, True])
def test_a_resumed_seeded_sampler_does_not_replay_its_start_up_points(reseed):
    study = optuna.create_study()
    _propose(study, TPE, 3, reseed)
    _propose(study, TPE, 3, reseed)  # the same command again, topping up during start-up
    points = [t.params["p"] for t in study.trials]
    # Plain seeding replays the first process's three random points; reseeding by the number
    # of trials already in the study proposes new ones.
    assert (points[3:] == points[:3]) is not reseed
    assert len(set(points)) == (6 if reseed else 3)


def test_reseeded_is_deterministic_and_leaves_grid_qmc_and_unseeded_samplers_alone():
    assert specs.reseeded(TPE, 5) == specs.reseeded(TPE, 5)
    seeds = {specs.reseeded(TPE, n)["seed"] for n in range(100)}
    assert len(seeds) == 100
    assert specs.reseeded({**TPE, "seed": 1}, 5)["seed"] != specs.reseeded(TPE, 5)["seed"]
    assert specs.reseeded({**TPE, "seed": 0}, 5) == {**TPE, "seed": specs.reseeded(TPE, 5)["seed"]}
    for spec in ({"name": "grid", "seed": 0}, {"name": "qmc", "seed": 0},
                 {"name": "tpe", "seed": None}, {"name": "random"}):
        assert specs.reseeded(spec, 5) is None


# -- one param per config key (issue 35: a fixed value on the command line fixes it) --------------

def test_the_command_line_replaces_every_param_that_sets_its_key():
    from hydra_racing_sweeper.space import parse_space

    preset = {"1/norm.p": "interval(0.0, 1.0)", "optimizer.lr": "choice(0.001,0.003)"}
    space, plain = parse_space(preset, ["norm.p=3"])  # search=p_tpe norm.p=3
    assert [p.name for p in space.params] == ["optimizer.lr"] and plain == ["norm.p=3"]
    space, plain = parse_space(preset, ["norm.p=interval(1,8)"])  # one dimension, not two
    assert [p.name for p in space.params] == ["optimizer.lr", "norm.p"] and plain == []
    assert space.values({"optimizer.lr": 0.001, "norm.p": 4.0}) == {"optimizer.lr": 0.001,
                                                                     "norm.p": 4.0}


def test_two_params_on_one_key_are_one_line_naming_both():
    from hydra_racing_sweeper.space import parse_space

    with pytest.raises(UserError, match=r"^hydra.sweeper.params.norm.p and "
                                         r"hydra.sweeper.params.1/norm.p both set norm.p; keep "
                                         r"one of them$"):
        parse_space({"norm.p": "choice(1.0,2.0)", "1/norm.p": "interval(0,1)"}, [])
    # null removes a param: search=p_tpe's `norm.p: null` over experiment=paper_cpu's grid
    space, _ = parse_space({"norm.p": None, "1/norm.p": "interval(0,1)"}, [])
    assert [p.name for p in space.params] == ["1/norm.p"] and space.fixed == ()


def test_tpe_gets_the_pinned_settings_not_the_installed_optunas_defaults():
    """Optuna 4.9's TPE defaults are multivariate=False, constant_liar=False; 5.0's None
    (multivariate for one objective) and True. Every TPE the sweeper builds gets specs.PINNED's,
    whichever is installed; a spec's own value wins."""
    sampler = specs.build_sampler(TPE, None)
    assert (sampler._multivariate, sampler._constant_liar, sampler._n_startup_trials) == (
        False, True, 6)
    own = specs.build_sampler({**TPE, "multivariate": True, "constant_liar": False}, None)
    assert (own._multivariate, own._constant_liar) == (True, False)


@pytest.mark.slow
def test_two_sweepers_popping_one_sqlite_study_at_once_never_take_the_same_trial(tmp_path):
    """Two processes ask one SQLite study for its 80 enqueued trials at the same instant. With
    Python's sqlite3 beginning a transaction only at the first write, both read a trial as
    WAITING and both set it RUNNING (tried here without serialize_writers: 5 of 80 taken twice);
    with it, every trial goes to exactly one of them."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="s", storage=specs.open_storage(url))
    for x in range(80):
        study.enqueue_trial({"x": x})
    script = Path(__file__).parent / "helpers" / "pop_trials.py"
    start = str(time.time() + 3)  # both processes are up and spinning by then
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, str(script), url, start, "40"], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    got = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(map(int, got[0] + got[1])) == list(range(80))  # each once, none left


def _sweeper(*overrides: str):
    from hydra import compose, initialize_config_dir

    from qknorm.config import register_configs

    register_configs()  # conf/config.yaml's schema (qknorm_schema)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True).hydra.sweeper


def test_qknorm_optuna_keeps_qknorms_defaults():
    """hydra/sweeper=racing took Hydra's defaults; qknorm_optuna keeps qknorm's (its schema's
    subclass), and a preset's spec-form sampler merges into the group's default entry."""
    s = _sweeper("hydra/sweeper=qknorm_optuna")
    assert (s.study_name, s.storage, s.n_jobs, s.max_failure_rate) == (
        "qknorm", "sqlite:///outputs/optuna.db", 1, 0.25)
    assert list(s.objectives) == ["best_val_loss"] and dict(s.sampler) == {"name": "tpe",
                                                                            "seed": None}
    assert s.task_hook == "qknorm.sweep.hook.QknormTask"
    grid = _sweeper("search=p_grid")
    assert dict(grid.sampler) == {"name": "grid", "seed": 0}  # conf/search/p_grid.yaml's
    assert grid.storage == "sqlite:///outputs/optuna.db" and grid.study_name == "p_grid"
