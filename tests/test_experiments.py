"""The paper presets: their protocol values, and a few real steps of each on the tiny model."""

from __future__ import annotations

import math

import pytest

from qknorm import rundir
from tests.helpers.config import compose_config, compose_hydra_config

P_GRID = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, math.inf]


def test_paper_preset_is_nanogpt_gpu_recipe_with_10_folds():
    cfg = compose_config("experiment=paper")
    assert (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.block_size) == (6, 6, 384, 256)
    assert (cfg.train.max_iters, cfg.train.batch_size, cfg.data.n_folds) == (5000, 64, 10)
    assert (cfg.optimizer.lr, cfg.optimizer.min_lr, cfg.optimizer.beta2) == (1e-3, 1e-4, 0.99)


def test_paper_cpu_preset_is_cpu_recipe_with_5_folds():
    cfg = compose_config("experiment=paper_cpu")
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.model.block_size) == (4, 128, 64)
    assert (cfg.data.n_folds, cfg.threads, cfg.name) == (10, 1, "paper_cpu_qknorm")
    assert compose_config("experiment=paper_cpu", "norm.gamma_init=calibrated").name == "paper_cpu_calibrated"


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["paper", "paper_cpu"])
def test_preset_runs_a_few_steps_on_the_tiny_model(cli, preset):
    # The command-line sweep (2 p x 1 fold) replaces the preset's 8 p x n_folds grid.
    r = cli("-m", "qknorm.train", f"experiment={preset}", "model=tiny", "norm.p=2,inf", "data.fold=0",
            "train.max_iters=3", "train.eval_interval=3", "train.eval_iters=1", "train.batch_size=2",
            "threads=1")
    assert r.returncode == 0, r.stderr
    # Through the qknorm_optuna sweeper: one dir per study, one job dir per trial and fold.
    finals = [rundir.read_final(d) for d in sorted((cli.cwd / "outputs" / "sweeps").glob("*/trial[0-9]*"))]
    assert [(f["status"], f["steps"], f["fold"]) for f in finals] == [("completed", 3, 0)] * 2
    assert sorted(float(f["p"]) for f in finals) == [2.0, math.inf]
    assert finals[0]["n_params"] < 20_000  # the tiny model, not the preset's


@pytest.mark.parametrize("preset, folds", [("paper", 10), ("paper_cpu", 10)])
def test_paper_presets_run_the_grid_through_our_sweeper(preset, folds):
    """The paper's p values plus inf on our sweeper's grid sampler, every p on every fold (fold
    replicates), in one study per gamma_init whose sweep dir a rerun resumes into."""
    hydra_cfg = compose_hydra_config(f"experiment={preset}", "norm.gamma_init=calibrated").hydra
    sweeper = hydra_cfg.sweeper
    assert sweeper._target_.endswith("RacingSweeper")
    assert sweeper.sampler.name == "grid" and sweeper.n_trials is None
    from hydra_racing_sweeper.space import parse_param
    assert list(parse_param("norm.p", sweeper.params["norm.p"]).grid) == P_GRID
    assert list(sweeper.replicates["data.fold"]) == list(range(folds))
    assert sweeper.study_name == f"{preset}_calibrated"
    assert hydra_cfg.sweep.dir == f"outputs/sweeps/{preset}_calibrated"  # no time stamp


def test_paper_preset_packs_jobs_on_one_gpu():
    launcher = compose_hydra_config("experiment=paper").hydra.launcher
    assert launcher._target_.endswith("JoblibLauncher") and launcher.n_jobs == 8
    assert compose_config("experiment=paper").compile == "auto"  # compiled on CUDA
