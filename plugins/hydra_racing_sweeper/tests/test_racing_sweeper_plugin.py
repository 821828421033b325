"""`hydra/sweeper=racing` as a drop-in for Hydra's Optuna sweeper (its keys:
hydra_plugins/hydra_racing_sweeper/config.py).

The end-to-end cases of Hydra's own suite (plugins/hydra_optuna_sweeper/tests/
test_optuna_sweeper_plugin.py) run here on this plugin's example apps, written like Hydra's,
with the same parameters: the sphere with and without command-line params, the grid sampler
(10 and 1 trials), the multi-objective example with and without command-line params, the
custom search space, max_failure_rate 0.5 and 1.0. Each test's docstring names the case it
mirrors. Added: storage null under the basic launcher, the shapes a task may return (tuple,
list, dict, numpy scalar, the wrong number of values), the removed motpe sampler, the sampler
config group and the sweeper's defaults, and a race over seeds (example/noisy.py).

Expected values are computed here by hand from the apps' formulas and the searched grids, never
read from the sweeper's code. Every app runs as `python APP --multirun` in a tmp dir.
"""

from __future__ import annotations

import math
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

PLUGIN = Path(__file__).resolve().parents[1]
EXAMPLE = PLUGIN / "example"
TESTS = Path(__file__).resolve().parent
SPHERE = EXAMPLE / "sphere.py"
MULTI = EXAMPLE / "multi-objective.py"
CUSTOM = EXAMPLE / "custom-search-space-objective.py"
NOISY = EXAMPLE / "noisy.py"
SHAPES = TESTS / "apps" / "shapes.py"
RESULTS = "optimization_results.yaml"
FAILED_TASK = "RuntimeError: cfg.error is True"  # example/sphere.py's with error=true


# --- helpers -------------------------------------------------------------------------------


def sweep(tmp_path: Path, app: Path, *args: str, ok: bool = True,
          timeout: float = 300) -> subprocess.CompletedProcess:
    """`python APP --multirun ARGS hydra.sweep.dir=TMP/sweep` in tmp_path (options such as
    --config-dir first in ARGS: argparse takes no option after the overrides)."""
    cmd = [sys.executable, str(app), "--multirun", *args,
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert r.returncode == 0, f"{r.stdout[-3000:]}\n---\n{r.stderr[-3000:]}"
    return r


def results(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "sweep" / RESULTS
    assert path.is_file(), f"no {RESULTS} in the sweep dir"
    out = OmegaConf.to_container(OmegaConf.load(path))
    assert out["name"] == "racing"
    return out


def jobs(tmp_path: Path) -> list[dict[str, Any]]:
    """The config each job ran (its .hydra/config.yaml), one per job dir of the sweep."""
    return [OmegaConf.to_container(OmegaConf.load(d / "config.yaml"))
            for d in sorted((tmp_path / "sweep").rglob(".hydra"))]


def sphere(x: float, y: float) -> float:
    return x * x + y * y


def binh_korn(x: float, y: float) -> list[float]:
    return [4 * x * x + 4 * y * y, (x - 5) ** 2 + (y - 5) ** 2]


def dominates(a: list[float], b: list[float]) -> bool:
    """a is no worse than b in every objective and better in one (all minimised)."""
    return all(u <= v for u, v in zip(a, b)) and any(u < v for u, v in zip(a, b))


def pareto(points: dict[Any, list[float]]) -> set:
    """The keys of `points` whose values no other point dominates."""
    return {k for k, v in points.items() if not any(dominates(w, v) for w in points.values())}


def on_grid(value: float, step: float, low: float, high: float) -> bool:
    return low <= value <= high and math.isclose((value - low) / step,
                                                 round((value - low) / step), abs_tol=1e-9)


# --- discovery and config surface (no sweep) ---------------------------------------------


def test_discovery() -> None:
    """Mirrors test_discovery: Hydra finds the sweeper class among its Sweeper plugins."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    found = [f"{c.__module__}.{c.__name__}" for c in Plugins.instance().discover(Sweeper)]
    assert any(n.startswith("hydra_plugins.hydra_racing_sweeper.") for n in found), found


def compose_hydra(*overrides: str) -> Any:
    """hydra.sweeper as the sweeper's schema, its defaults list and these overrides compose it
    (tests/apps/conf/shapes.yaml selects racing and the grid sampler)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(TESTS / "apps" / "conf"), version_base="1.3"):
        cfg = compose("shapes", overrides=list(overrides), return_hydra_config=True)
    return cfg.hydra.sweeper


# Hydra's sampler group: each config's target and keyword arguments with their defaults.
HYDRA_SAMPLERS: dict[str, tuple[str, dict[str, Any]]] = {
    "tpe": ("optuna.samplers.TPESampler", {
        "seed": None, "consider_prior": None, "prior_weight": None, "consider_magic_clip": None,
        "consider_endpoints": None, "n_startup_trials": 10, "n_ei_candidates": 24,
        "multivariate": False, "warn_independent_sampling": None}),
    "random": ("optuna.samplers.RandomSampler", {"seed": None}),
    "cmaes": ("optuna.samplers.CmaEsSampler", {
        "seed": None, "x0": None, "sigma0": None, "independent_sampler": None,
        "warn_independent_sampling": True, "consider_pruned_trials": False,
        "restart_strategy": None, "inc_popsize": 2, "use_separable_cma": False,
        "source_trials": None}),
    "nsgaii": ("optuna.samplers.NSGAIISampler", {
        "seed": None, "population_size": 50, "mutation_prob": None, "crossover_prob": 0.9,
        "swapping_prob": 0.5, "constraints_func": None}),
    "gp": ("optuna.samplers.GPSampler", {
        "seed": None, "independent_sampler": None, "n_startup_trials": 10,
        "deterministic_objective": False, "constraints_func": None,
        "warn_independent_sampling": True}),
    "qmc": ("optuna.samplers.QMCSampler", {
        "seed": None, "qmc_type": "sobol", "scramble": False, "independent_sampler": None,
        "warn_asynchronous_seeding": True, "warn_independent_sampling": True}),
    "grid": ("optuna.samplers.GridSampler", {"_partial_": True}),
}


@pytest.mark.parametrize("name", sorted(HYDRA_SAMPLERS))
def test_sampler_group(name: str) -> None:
    """Hydra's `hydra/sweeper/sampler` group: `hydra/sweeper/sampler=NAME` selects a config with
    Hydra's _target_ and every keyword argument at Hydra's default (ours may add keys)."""
    target, kwargs = HYDRA_SAMPLERS[name]
    sampler = compose_hydra(f"hydra/sweeper/sampler={name}").sampler
    assert sampler["_target_"] == target
    for key, value in kwargs.items():
        assert key in sampler, f"hydra/sweeper/sampler={name} lacks {key}"
        assert sampler[key] == value, (name, key, sampler[key], value)


def test_sampler_seed_override() -> None:
    """`hydra/sweeper/sampler=tpe hydra.sweeper.sampler.seed=123`, as Hydra's suite types it."""
    sampler = compose_hydra("hydra/sweeper/sampler=tpe", "hydra.sweeper.sampler.seed=123").sampler
    assert sampler["_target_"] == "optuna.samplers.TPESampler" and sampler["seed"] == 123


def test_sweeper_defaults() -> None:
    """OptunaSweeperConf's keys and defaults, which a config written for Hydra's sweeper may
    leave out: the racing sweeper's are the same. Its default sampler is TPE (Hydra's tpe node,
    or our spec form {name: tpe, seed: null}: config.py, the sampler group)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(TESTS / "conf"), version_base="1.3"):
        cfg = compose("plain", return_hydra_config=True)  # selects racing, sets none of it
    s = OmegaConf.to_container(cfg.hydra.sweeper)
    assert s["_target_"].startswith("hydra_plugins.hydra_racing_sweeper.")
    assert s["direction"] == "minimize"
    assert s["storage"] is None
    assert s["study_name"] is None
    assert s["n_trials"] == 20
    assert s["n_jobs"] == 2
    assert s["max_failure_rate"] == 0.0
    assert s["custom_search_space"] is None
    assert s["params"] in (None, {})
    assert s["sampler"].get("seed") is None
    assert (s["sampler"].get("_target_") == "optuna.samplers.TPESampler"
            or s["sampler"].get("name") == "tpe"), s["sampler"]


# --- the grammar and the sampler node, in memory ------------------------------------------

@pytest.mark.parametrize("text, low, high, step, kind, grid", [
    # range excludes its stop (Hydra's grammar): 0..4 whole numbers, ordered
    ("range(0, 5)", 0, 4, 1, "IntDistribution", (0, 1, 2, 3, 4)),
    # the test_grid case: -1.0, 0.0
    ("range(-1.0, 1.0, step=1)", -1.0, 0.0, 1.0, "FloatDistribution", (-1.0, 0.0)),
    # a descending range is the same points in an ordered distribution
    ("range(3, 0, -1)", 1, 3, 1, "IntDistribution", (3, 2, 1)),
])
def test_range_is_an_ordered_distribution(text, low, high, step, kind, grid) -> None:
    from hydra_racing_sweeper.space import parse_param

    p = parse_param("x", text)
    d = p.distribution
    assert type(d).__name__ == kind and (d.low, d.high, d.step) == (low, high, step)
    assert p.grid == grid


def test_shuffle_range_and_int_interval() -> None:
    """shuffle(range(0, 3)) has no order left: categorical {0, 1, 2}; int(interval(1, 4)) is
    the whole numbers 1..4 (both ends in)."""
    from hydra_racing_sweeper.space import parse_param

    shuffled = parse_param("x", "shuffle(range(0, 3))").distribution
    assert type(shuffled).__name__ == "CategoricalDistribution"
    assert sorted(shuffled.choices) == [0, 1, 2]
    whole = parse_param("x", "int(interval(1, 4))").distribution
    assert type(whole).__name__ == "IntDistribution" and (whole.low, whole.high) == (1, 4)


def test_deprecated_search_space_as_params() -> None:
    """hydra-optuna-sweeper 1.2's search_space, written in the sweep grammar: an int with step 2
    up to 10 inclusive is range(0, 12, 2) (0, 2, ..., 10); a log float tag(log, ...)."""
    from hydra_racing_sweeper.space import search_space_params

    assert search_space_params({
        "a": {"type": "int", "low": 0, "high": 10, "step": 2},
        "b": {"type": "float", "low": 0.001, "high": 1.0, "log": True},
        "c": {"type": "categorical", "choices": ["x", 2]},
        "d": {"type": "int", "low": 1, "high": 3},
    }) == {"a": "range(0, 12, 2)", "b": "tag(log, interval(0.001, 1.0))", "c": "choice(x, 2)",
           "d": "int(interval(1, 3))"}


def test_sampler_node_forms() -> None:
    """Hydra's node {_target_, kwargs} is our spec {name, kwargs} less the None-valued ones
    (Optuna's defaults) and the instantiate keys; the spec form passes as it is; motpe, an
    unknown target, and a name that disagrees with the target are refused."""
    from hydra_racing_sweeper.errors import UserError
    from hydra_racing_sweeper.specs import sampler_spec

    assert sampler_spec({"_target_": "optuna.samplers.CmaEsSampler", "seed": 3, "x0": None,
                         "inc_popsize": 2}) == {"name": "cmaes", "seed": 3, "inc_popsize": 2}
    assert sampler_spec({"_target_": "optuna.samplers.GridSampler", "_partial_": True,
                         "seed": None}) == {"name": "grid", "seed": None}
    assert sampler_spec({"name": "gp", "seed": 0}) == {"name": "gp", "seed": 0}
    for bad, words in [({"_target_": "hydra_racing_sweeper.specs.motpe_removed"}, "removed"),
                       ({"_target_": "optuna.samplers.MOTPESampler"}, "removed"),
                       ({"_target_": "my.Sampler"}, "my.Sampler"),
                       ({"name": "gp", "_target_": "optuna.samplers.TPESampler"}, "name=gp")]:
        with pytest.raises(UserError, match=words):
            sampler_spec(bad)


def test_returned_values() -> None:
    """A scalar, a sequence (one per direction) or a dict, as the jobs' fields."""
    import numpy as np
    from hydra_racing_sweeper.launcher import returned_fields

    assert returned_fields(np.float32(0.5), ["value"], named=False) == ({"value": 0.5}, "")
    assert returned_fields(np.array([1.0, 2.0]), ["value_0", "value_1"], named=False) == (
        {"value_0": 1.0, "value_1": 2.0}, "")
    assert returned_fields({"a": 1.0, "b": 2.0}, ["value"], named=False)[1].startswith(
        "the task returned a dict of ['a', 'b']; set hydra.sweeper.objectives")
    assert returned_fields("0.5", ["value"], named=False)[1].startswith("the task returned str")


# --- Hydra's end-to-end cases ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("with_commandline", [True, False])
def test_sphere_example(with_commandline: bool, tmp_path: Path) -> None:
    """Mirrors test_optuna_example[with_commandline]: the sphere, TPE seeded 123, 20 trials one
    at a time, a SQLite storage and study name given, z deleted (~z); with the command line,
    x=choice(0, 1, 2) and y=0 fixed (so y is no param of the study)."""
    import optuna

    storage = f"sqlite:///{tmp_path / 'test.db'}"
    args = ["hydra.job.chdir=True", "hydra.sweeper.n_trials=20", "hydra.sweeper.n_jobs=1",
            f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=test-sphere",
            "hydra/sweeper/sampler=tpe", "hydra.sweeper.sampler.seed=123", "~z"]
    if with_commandline:
        args += ["x=choice(0, 1, 2)", "y=0"]
    sweep(tmp_path, SPHERE, *args)
    out = results(tmp_path)
    best, value = out["best_params"], out["best_value"]

    ran = jobs(tmp_path)
    assert len(ran) == 20
    assert all("z" not in job for job in ran)  # ~z reached every job
    # the best is the lowest x^2 + y^2 the jobs ran, and it is the best params' own value
    assert value == min(sphere(j["x"], j["y"]) for j in ran)
    if with_commandline:
        assert set(best) == {"x"} and best["x"] in (0, 1, 2)
        assert all(j["y"] == 0 for j in ran)
        assert value == best["x"] ** 2
    else:
        assert set(best) == {"x", "y"}
        assert on_grid(best["x"], 0.5, -5.5, 5.5) and best["y"] in (-5, 0, 5)
        assert value == sphere(best["x"], best["y"])
    # Hydra's bar for TPE on this problem (its 95th percentile over 1000 seeds)
    assert value <= 2.27

    # the study is in the storage given, under the name given, its params named as overridden
    study = optuna.load_study(study_name="test-sphere", storage=storage)
    assert len(study.trials) == 20
    assert study.best_value == value
    assert study.best_trial.params == best


@pytest.mark.slow
@pytest.mark.parametrize("n_trials", [10, 1])
def test_grid_sampler(n_trials: int, tmp_path: Path) -> None:
    """Mirrors test_example_with_grid_sampler[num_trials]: the sphere with tests/conf/test_grid
    (x in {-1, 1}, y = range(-1.0, 1.0, step=1) = {-1.0, 0.0}, z in {foo, bar}: 8 points).
    n_trials is cut to the grid's size: 10 runs all 8 points, whose best x^2 + y^2 is 1
    (|x| = 1, y = 0); 1 runs one point."""
    sweep(tmp_path, SPHERE, f"--config-dir={TESTS / 'conf'}", "--config-name=test_grid",
          "hydra.job.chdir=False", f"hydra.sweeper.n_trials={n_trials}",
          "hydra.sweeper.n_jobs=1", f"hydra.sweeper.storage=sqlite:///{tmp_path / 'test.db'}",
          "hydra.sweeper.study_name=test-grid")
    out = results(tmp_path)
    best, value = out["best_params"], out["best_value"]
    ran = jobs(tmp_path)
    assert best["x"] in (-1, 1) and best["y"] in (-1.0, 0.0) and best["z"] in ("foo", "bar")
    assert value == sphere(best["x"], best["y"])
    if n_trials == 10:
        assert len(ran) == 8
        points = {(j["x"], j["y"], j["z"]) for j in ran}
        assert points == {(x, y, z) for x in (-1, 1) for y in (-1.0, 0.0) for z in ("foo", "bar")}
        assert value == 1.0 and abs(best["x"]) == 1 and best["y"] == 0
    else:
        assert len(ran) == 1


@pytest.mark.slow
@pytest.mark.parametrize("with_commandline", [True, False])
def test_multi_objective_example(with_commandline: bool, tmp_path: Path) -> None:
    """Mirrors test_optuna_multi_objective_example[with_commandline]: Binh-Korn, two
    directions, the random sampler seeded 123, 20 trials; with the command line x=range(0, 5)
    and y=range(0, 3) (whole numbers), else the config's steps of 0.5. The solutions are
    exactly the Pareto front of the points the jobs ran, each with its two values."""
    args = ["hydra.job.chdir=True", "hydra.sweeper.n_trials=20", "hydra.sweeper.n_jobs=1",
            "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=123"]
    if with_commandline:
        args += ["x=range(0, 5)", "y=range(0, 3)"]
    sweep(tmp_path, MULTI, *args)
    out = results(tmp_path)
    solutions = out["solutions"]
    assert solutions, "an empty front"
    step = 1 if with_commandline else 0.5
    for s in solutions:
        x, y = s["params"]["x"], s["params"]["y"]
        assert on_grid(x, step, 0, 5) and on_grid(y, step, 0, 3)
        assert len(s["values"]) == 2
        assert all(math.isclose(v, w) for v, w in zip(s["values"], binh_korn(x, y)))
    for a in solutions:
        for b in solutions:
            assert not dominates(a["values"], b["values"])

    ran = jobs(tmp_path)
    assert len(ran) == 20
    points = {(j["x"], j["y"]): binh_korn(j["x"], j["y"]) for j in ran}
    assert {(s["params"]["x"], s["params"]["y"]) for s in solutions} == pareto(points)


@pytest.mark.slow
def test_custom_search_space_example(tmp_path: Path) -> None:
    """Mirrors test_optuna_custom_search_space_example: custom_search_space draws z within
    max_z_difference_from_x=0.3 of x, and +w (a key the config lacks) in [0, 1]; random
    sampler seeded 123, 20 trials. best_params holds the params as named (+w with its +)."""
    sweep(tmp_path, CUSTOM, "hydra.job.chdir=True", "hydra.sweeper.n_trials=20",
          "hydra.sweeper.n_jobs=1", "hydra/sweeper/sampler=random",
          "hydra.sweeper.sampler.seed=123", "max_z_difference_from_x=0.3")
    out = results(tmp_path)
    best, value = out["best_params"], out["best_value"]
    assert set(best) == {"x", "y", "z", "+w"}
    assert abs(best["x"] - best["z"]) <= 0.3 + 1e-12
    assert 0 <= best["+w"] <= 1
    assert math.isclose(value, best["+w"] ** 2 + best["x"] ** 2 + best["y"] ** 2 + best["z"] ** 2)

    ran = jobs(tmp_path)
    assert len(ran) == 20
    for j in ran:
        assert abs(j["x"] - j["z"]) <= 0.3 + 1e-12 and 0 <= j["w"] <= 1
        assert j["max_z_difference_from_x"] == 0.3
    assert math.isclose(value, min(j["w"] ** 2 + j["x"] ** 2 + j["y"] ** 2 + j["z"] ** 2
                                   for j in ran))


@pytest.mark.slow
@pytest.mark.parametrize("max_failure_rate", [0.5, 1.0])
def test_failure_rate(max_failure_rate: float, tmp_path: Path) -> None:
    """Mirrors test_failure_rate[max_failure_rate]: every job raises (error=true), 20 trials two
    at a time, random sampler seeded 123. Under 0.5 the sweep stops early and fails, and its
    stderr names the task's exception; under 1.0 no number of failures stops it: all 20 run and
    the task's exception is not on stderr."""
    r = sweep(tmp_path, SPHERE, "hydra.job.chdir=True", "hydra.sweeper.n_trials=20",
              "hydra.sweeper.n_jobs=2", "hydra/sweeper/sampler=random",
              "hydra.sweeper.sampler.seed=123",
              f"hydra.sweeper.max_failure_rate={max_failure_rate}", "error=true", ok=False)
    ran = jobs(tmp_path)
    if max_failure_rate < 1.0:
        assert r.returncode != 0
        assert FAILED_TASK in r.stderr, r.stderr[-3000:]
        assert 2 <= len(ran) < 20
    else:
        assert FAILED_TASK not in r.stderr, r.stderr[-3000:]
        assert len(ran) == 20


@pytest.mark.slow
def test_motpe_removed(tmp_path: Path) -> None:
    """Mirrors test_example_with_removed_motpe: hydra/sweeper/sampler=motpe (tests/conf/
    test_motpe) is refused, naming motpe and that it was removed; no job runs."""
    r = sweep(tmp_path, MULTI, f"--config-dir={TESTS / 'conf'}", "--config-name=test_motpe",
              "hydra.job.chdir=True", "hydra.sweeper.n_trials=20", "hydra.sweeper.n_jobs=1",
              ok=False)
    assert r.returncode != 0
    assert "motpe" in r.stderr and "removed" in r.stderr, r.stderr[-3000:]
    assert jobs(tmp_path) == []


@pytest.mark.slow
def test_custom_search_space_overlapping_a_fixed_value(tmp_path: Path) -> None:
    """z=3 fixed on the command line while extend_space suggests z: refused in one line (Hydra:
    "Overlapping fixed parameters and search space parameters") at the first trial's ask, after
    Optuna's own line about the study, and no job run."""
    r = sweep(tmp_path, CUSTOM, "z=3", "hydra.sweeper.n_trials=2", ok=False)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1:] == [
        "error: hydra.sweeper.custom_search_space suggests z, which hydra.sweeper.params or the "
        "command line fixes too; drop one"]
    assert jobs(tmp_path) == []


@pytest.mark.slow
def test_custom_search_space_study_resumes(tmp_path: Path) -> None:
    """A stored study of the custom search space tops up on a rerun: z's range moves with each
    trial's x, so only the params' own distributions are compared with the study's (3, then 5
    trials in all: 2 more jobs)."""
    import optuna

    storage = f"sqlite:///{tmp_path / 'cs.db'}"
    for n in (3, 5):
        sweep(tmp_path, CUSTOM, f"hydra.sweeper.n_trials={n}", f"hydra.sweeper.storage={storage}",
              "hydra.sweeper.n_jobs=1")
    study = optuna.load_study(study_name="custom-search-space", storage=storage)
    assert len(study.trials) == 5
    assert all(set(t.params) == {"x", "y", "z", "+w"} for t in study.trials)


# --- beyond Hydra's suite --------------------------------------------------------------------


@pytest.mark.slow
def test_storage_null_basic_launcher(tmp_path: Path) -> None:
    """storage: null (the example's own) under the basic launcher: the study lives in memory,
    no database or journal file is written anywhere, and the results file is."""
    sweep(tmp_path, SPHERE, "hydra/launcher=basic", "hydra.sweeper.storage=null",
          "hydra.sweeper.n_trials=6", "hydra.sweeper.n_jobs=2", "hydra/sweeper/sampler=random",
          "hydra.sweeper.sampler.seed=0")
    out = results(tmp_path)
    assert out["best_value"] == sphere(out["best_params"]["x"], out["best_params"]["y"])
    assert len(jobs(tmp_path)) == 6
    stores = [p for pattern in ("*.db", "*.sqlite*", "*.journal", "optuna*.log")
              for p in tmp_path.rglob(pattern)]
    assert stores == [], stores


@pytest.mark.slow
def test_storage_null_joblib_launcher(tmp_path: Path) -> None:
    """storage: null under the joblib launcher (jobs in other processes, which memory cannot
    reach): a SQLite file in the sweep dir, said in the log, named in the results file, holding
    the study's 4 trials."""
    import optuna

    r = sweep(tmp_path, SPHERE, "hydra/launcher=joblib", "hydra.sweeper.n_trials=4",
              "hydra.sweeper.n_jobs=2", "hydra/sweeper/sampler=random",
              "hydra.sweeper.sampler.seed=0")
    url = f"sqlite:///{(tmp_path / 'sweep' / 'optuna.db').resolve()}"
    assert f"storage: null -> {url}" in r.stdout
    assert results(tmp_path)["storage"] == url
    assert len(optuna.load_study(study_name="sphere", storage=url).trials) == 4


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tuple", "list"])
def test_sequence_return(kind: str, tmp_path: Path) -> None:
    """A task returning a tuple or a list: one value per direction, in order. x in {0..3} gives
    (x^2, (x-2)^2) = (0,4), (1,1), (4,0), (9,1): the front is x in {0, 1, 2} (3 is dominated
    by 2); the grid is 4 points, so 4 trials."""
    sweep(tmp_path, SHAPES, f"kind={kind}", "hydra.sweeper.direction=[minimize,minimize]")
    out = results(tmp_path)
    front = {s["params"]["x"]: s["values"] for s in out["solutions"]}
    assert front == {0: [0.0, 4.0], 1: [1.0, 1.0], 2: [4.0, 0.0]}
    assert len(jobs(tmp_path)) == 4


@pytest.mark.slow
def test_wrong_number_of_values(tmp_path: Path) -> None:
    """Three values for two directions fail the trial (Hydra: "The number of the values and the
    number of the objectives are mismatched"); with Hydra's max_failure_rate 0.0 the sweep stops
    and fails, saying how many values came for how many directions."""
    r = sweep(tmp_path, SHAPES, "kind=tuple", "n_values=3",
              "hydra.sweeper.direction=[minimize,minimize]", "hydra.sweeper.max_failure_rate=0.0",
              ok=False)
    assert r.returncode != 0
    assert "returned 3 values for 2 directions" in r.stdout + r.stderr, r.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["float", "numpy"])
def test_scalar_return(kind: str, tmp_path: Path) -> None:
    """A float, or anything float() takes (a numpy scalar): (x - 1)^2 over x in {0..3} is
    lowest, 0, at x = 1."""
    sweep(tmp_path, SHAPES, f"kind={kind}")
    out = results(tmp_path)
    assert out["best_params"] == {"x": 1} and out["best_value"] == 0.0


@pytest.mark.slow
def test_dict_return_single_key(tmp_path: Path) -> None:
    """A dict of one number, objectives not set: that number is the objective. {loss: (x-1)^2}
    is lowest, 0, at x = 1."""
    sweep(tmp_path, SHAPES, "kind=dict", "single_key=true")
    out = results(tmp_path)
    assert out["best_params"] == {"x": 1} and out["best_value"] == 0.0


@pytest.mark.slow
def test_dict_return_named_objectives(tmp_path: Path) -> None:
    """A dict read by name: objectives [loss, size], both minimised. x in {0..3} gives
    (loss, size) = (1,0), (0,1), (1,2), (4,3): the front is x in {0, 1} (2 is dominated by 0,
    3 by every other); values come in the objectives' order."""
    sweep(tmp_path, SHAPES, "kind=dict", "hydra.sweeper.direction=[minimize,minimize]",
          "++hydra.sweeper.objectives=[loss,size]")
    out = results(tmp_path)
    front = {s["params"]["x"]: s["values"] for s in out["solutions"]}
    assert front == {0: [1.0, 0.0], 1: [0.0, 1.0]}


@pytest.mark.slow
def test_noisy_example_race(tmp_path: Path) -> None:
    """example/noisy.py as configured: four lr raced over six seeds, in memory (storage null,
    basic launcher), the jobs reporting with hydra_racing_sweeper.trial.report. The race runs
    fewer than the 24 runs of the full grid; lr=0.001 (floor 4, about 4 above every other lr)
    runs at most the first look's 3 seeds; the best is lr=0.1 or 0.12 (floors 0 and 0.0063),
    its value the mean over the seeds it ran of floor + 1/sqrt(20) + the seed's luck (the
    runs' own noise has sd 0.01)."""
    sweep(tmp_path, NOISY)
    out = results(tmp_path)
    ran = jobs(tmp_path)
    assert len(ran) < 24
    assert len([j for j in ran if j["lr"] == 0.001]) <= 3
    lr = out["best_params"]["lr"]
    assert lr in (0.1, 0.12)
    seeds = sorted(j["seed"] for j in ran if j["lr"] == lr)
    assert len(seeds) == len(set(seeds)) >= 3
    floor = (math.log10(lr) + 1) ** 2
    expected = statistics.fmean(floor + 1 / math.sqrt(20) + random.Random(s).gauss(0, 0.3)
                                for s in seeds)
    assert abs(out["best_value"] - expected) < 0.02


# --- beside Hydra's own plugin ----------------------------------------------------------------

BESIDE = TESTS / "beside"  # a stand-in for hydra-optuna-sweeper (needs optuna < 3): its configs


def beside(tmp_path: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    """`python example/sphere.py ARGS` with the stand-in's hydra_plugins on the path too."""
    import os

    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(BESIDE), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(SPHERE), *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    if ok:
        assert r.returncode == 0, f"{r.stdout[-3000:]}\n---\n{r.stderr[-3000:]}"
    return r


@pytest.mark.slow
def test_beside_hydras_plugin_configs(tmp_path: Path) -> None:
    """Both plugins installed: Hydra's node wins the sampler names both register (ours is
    registered only where a name is free), the example's own keys still merge into it, and each
    sweeper keeps its own schema: optuna's n_jobs 2 and sampler from its group, racing's
    custom_search_space (a key Hydra's stand-in lacks)."""
    ours = OmegaConf.create(beside(tmp_path, "--cfg", "hydra", "-p", "hydra.sweeper").stdout)
    assert ours.sampler.n_startup_trials == 7 and ours.sampler.seed == 123  # the stand-in's
    assert ours._target_.startswith("hydra_plugins.hydra_racing_sweeper.")
    assert "custom_search_space" in ours
    # tests/conf/plain.yaml sets no sweeper key, which the stand-in's schema may lack
    theirs = OmegaConf.create(beside(tmp_path, f"--config-dir={TESTS / 'conf'}",
                                     "--config-name=plain", "hydra/sweeper=optuna", "--cfg",
                                     "hydra", "-p", "hydra.sweeper").stdout)
    assert theirs._target_ == "hydra_plugins.fake_optuna_sweeper.NotRun"
    assert theirs.sampler._target_ == "optuna.samplers.TPESampler"
    assert "custom_search_space" not in theirs


@pytest.mark.slow
def test_beside_hydras_plugin_sweeps(tmp_path: Path) -> None:
    """The sphere swept by racing with Hydra's tpe node (the example's, seeded 123): 4 trials,
    the best the lowest x^2 + y^2 of the jobs."""
    beside(tmp_path, "--multirun",
           "hydra.sweeper.n_trials=4", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    out = results(tmp_path)
    ran = jobs(tmp_path)
    assert len(ran) == 4
    assert out["best_value"] == min(sphere(j["x"], j["y"]) for j in ran)
