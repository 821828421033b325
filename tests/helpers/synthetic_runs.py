"""Run dirs written by hand, in the format qknorm.train writes (docs/design.md, "The run dir").

The sweep of the results tests: p in {2, 4, inf} x data.fold in {0, 1, 2, 3}, seed 0, with
losses whose means and stds are easy to write down. p=4 fold 3 diverged (its best_val_loss of
0.5 would be the best of all if it were counted), p=inf fold 2 was killed (no final.json, a torn
last line in metrics.jsonl).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import yaml

from qknorm import rundir

BEST = {  # best_val_loss of each completed run, by p then fold
    2.0: {0: 1.0, 1: 1.2, 2: 1.4, 3: 1.6},  # mean 1.3, var 0.2/3
    4.0: {0: 0.8, 1: 1.1, 2: 1.4},  # mean 1.1, std 0.3 (fold 3 diverged)
    math.inf: {0: 1.5, 1: 1.5, 3: 1.8},  # mean 1.6, var 0.03 (fold 2 killed)
}
WALL = {2.0: [10.0, 12.0, 14.0, 16.0], 4.0: [20.0, 22.0, 24.0], math.inf: [30.0, 30.0, 33.0]}
DIVERGED = (4.0, 3)
KILLED = (math.inf, 2)
P_VALUES = [2.0, 4.0, math.inf]
FOLDS = [0, 1, 2, 3]


def config(p: float, fold: int, kind: str = "lp", seed: int = 0, lr: float = 1e-3,
           study: tuple[str, str, int] | None = None) -> dict:
    name, storage, trial = study or (None, None, None)
    return {
        "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.0,
                  "bias": False},
        "norm": {"kind": kind, "p": p, "gamma_init": "qknorm", "gamma_learnable": True,
                 "gamma_shape": "scalar", "p_learnable": False, "eps": 1e-6},
        "data": {"path": None, "n_folds": 10, "fold": fold},
        "optimizer": {"lr": lr, "warmup_iters": 5},
        "train": {"max_iters": 20, "eval_interval": 10},
        "optuna": {"study_name": name, "storage": storage, "trial": trial},
        "name": "synthetic", "seed": seed, "device": "cpu", "dtype": "float32", "threads": 1,
    }


def write_config(run_dir: Path, cfg: dict) -> None:
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    # PyYAML writes inf as .inf, as Hydra does
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (run_dir / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump([f"norm.p={cfg['norm']['p']}", f"data.fold={cfg['data']['fold']}"]))


# Attention diagnostics (issue 14), written only where a test asks for them (older run dirs
# have none): attn_entropy_frac goes linearly from DIAG_START to DIAG_END over steps 0..20,
# plus fold / 100; the other diagnostics follow from it. The one layer's values are the means.
DIAG_START = {2.0: 0.9, 4.0: 0.8, math.inf: 0.7}  # by p; a kind without p: 0.95
DIAG_END = {2.0: 0.6, 4.0: 0.5, math.inf: 0.3}  # ...: 0.5


def diagnostics(p: float, fold: int, step: int) -> dict:
    start, end = DIAG_START.get(p, 0.95), DIAG_END.get(p, 0.5)
    frac = start + (end - start) * step / 20 + fold / 100
    means = {"attn_entropy": 2.0 * frac, "attn_entropy_frac": frac, "attn_max_weight": 1 - frac,
             "logit_std": 1.0 + step / 10}
    gamma = {} if math.isnan(p) else {"gamma_l0": 10.0 + step / 100}  # none/rms have no γ
    return {**means, **{f"{k}_l0": v for k, v in means.items()}, **gamma}


def write_curve(run_dir: Path, best: float, gamma: float, p: float,
                fold: int | None = None) -> None:
    """Three evals ending at `best`; with a fold, the diagnostics of that (p, fold) too."""
    for step, val in ((0, best + 2.0), (10, best + 0.5), (20, best)):
        rundir.append_metrics(run_dir, {
            "step": step, "train_loss": val - 0.05, "val_loss": val, "lr": 1e-3,
            "elapsed_s": step / 10, "tokens_per_s": 1000.0, "gamma_mean": gamma + step / 100,
            "p_mean": p, **(diagnostics(p, fold, step) if fold is not None else {})})


def final(status: str, best: float, wall: float, p: float, seed: int, fold: int, **extra) -> dict:
    return {"status": status, "val_loss": best, "best_val_loss": best, "train_loss": best - 0.05,
            "steps": 20, "wall_time_s": wall, "tokens_per_s": 1000.0, "n_params": 14465,
            "p": p if not math.isnan(p) else None, "gamma": 10.0, "seed": seed, "fold": fold,
            "git_sha": "abc", "torch_version": "2.13.0+cpu", "device": "cpu", "dtype": "float32",
            "threads": 1, **extra}


def make_sweep(root: Path, with_diagnostics: bool = False) -> Path:
    """The 12 job dirs 0..11 (p-major, then fold, as Hydra numbers a grid); returns root.
    with_diagnostics: as runs log since issue 14 (metrics.jsonl and final.json)."""
    job = 0
    for p in P_VALUES:
        walls = iter(WALL[p])
        for fold in FOLDS:
            run = root / str(job)
            write_config(run, config(p, fold))
            diag_fold = fold if with_diagnostics else None
            last = diagnostics(p, fold, 20) if with_diagnostics else {}
            if (p, fold) == DIVERGED:
                write_curve(run, 0.5, 10.0, p, diag_fold)
                rundir.write_final(run, final("diverged", 0.5, 5.0, p, 0, fold, val_loss=math.nan,
                                              error="loss became nan at step 15",
                                              diverged_step=15, **last))
            elif (p, fold) == KILLED:
                write_curve(run, 1.7, 10.0, p, diag_fold)
                with open(run / rundir.METRICS_FILE, "a") as f:
                    f.write('{"step": 30, "train_loss": 1.6, "val_lo')  # killed mid-write
            else:
                write_curve(run, BEST[p][fold], 10.0, p, diag_fold)
                rundir.write_final(run, final("completed", BEST[p][fold], next(walls), p, 0, fold,
                                              **last))
            job += 1
    return root


def add_runs_without_p(root: Path, kind: str, losses: list[float], first_job: int,
                       with_diagnostics: bool = False) -> None:
    """Completed runs of a kind without p (none, rms): the config still says p=2, as Hydra's."""
    for i, loss in enumerate(losses):
        run = root / str(first_job + i)
        write_config(run, config(2.0, i, kind=kind))
        write_curve(run, loss, math.nan, math.nan, i if with_diagnostics else None)
        last = diagnostics(math.nan, i, 20) if with_diagnostics else {}
        rundir.write_final(run, final("completed", loss, 9.0, math.nan, 0, i, gamma=None, **last))


# ---------------------------------------------------------------------------------------------
# A continuous search (issue 12): sampled p values that no grid would list, two learning rates,
# every trial trained on folds 8 and 9. Loss is a parabola in log p per lr, plus a fold offset.

SEARCH_P = {1e-3: [1.0948461190338146, 1.2719834109, 1.7604252702890315, 2.6079596259224207,
                   3.5017715337, 6.2338112299],
            3e-3: [1.1904531255, 1.4421307763, 1.835255759775752, 2.2852587421703228,
                   4.1299613517, 11.477195425941396, math.inf]}
SEARCH_FOLDS = {8: -0.01, 9: 0.01}


def search_loss(p: float, lr: float) -> float:
    """The trial mean: lowest at p = 1.5 for lr 3e-3, at p = 2 for lr 1e-3; inf as at p = 16."""
    u = math.log(min(p, 16.0))
    return (3.36 if lr == 3e-3 else 3.74) + 0.05 * (u - math.log(1.5 if lr == 3e-3 else 2.0)) ** 2


def make_search(root: Path) -> Path:
    """Job dirs trial<N>_<fold>, as the Optuna sweeper names them (trial numbers, no storage)."""
    number = 0
    for lr, ps in SEARCH_P.items():
        for p in ps:
            for fold, offset in SEARCH_FOLDS.items():
                run = root / f"trial{number}_{fold}"
                cfg = config(p, fold, lr=lr, study=("p_tpe", "sqlite:///absent.db", number))
                write_config(run, cfg)
                loss = search_loss(p, lr) + offset
                write_curve(run, loss, 10.0, p)
                rundir.write_final(run, final("completed", loss, 1.0, p, 0, fold))
            number += 1
    return root


def add_repeats(root: Path, kind: str, ps: list[float], folds: list[int], loss: float) -> None:
    """Runs of a kind without p, once per p as a plain grid launched them before issue 12:
    every p after the first repeats the same run (same effective config, seed and fold)."""
    for p in ps:
        for fold in folds:
            run = root / f"{kind}_{p:g}_{fold}"
            write_config(run, config(p, fold, kind=kind))
            write_curve(run, loss + fold / 100, math.nan, math.nan)
            rundir.write_final(run, final("completed", loss + fold / 100, 9.0, math.nan, 0,
                                          fold, gamma=None))


# ---------------------------------------------------------------------------------------------
# A sweep over the learning rate (issue 36): norms none, p=2 and p=4 x lr 1e-3, 1e-2, 1e-1 x
# seeds 0, 1, 2 on fold 9. Each run's curve starts at its ℓ₀ (step 0) and ends at its final
# val loss; none at lr 0.1 seed 0 ends above ℓ₀ (counted at ℓ₀), seed 1 diverged (counted at
# ℓ₀ though its final.json keeps its last finite loss), and p=4 at lr 0.1 seed 2 failed (no
# final val loss: that replicate misses an lr, its sensitivity is left out).

LR_GRID = [1e-3, 1e-2, 1e-1]
LR_SEEDS = [0, 1, 2]
LR_GROUPS = {"none": ("none", math.nan), "p=2": ("lp", 2.0), "p=4": ("lp", 4.0)}
LR_L0 = {"none": [4.20, 4.25, 4.30], "p=2": [4.10, 4.15, 4.20], "p=4": [4.00, 4.05, 4.10]}
LR_FINAL = {  # group -> lr -> final val loss per seed; None: diverged or failed (below)
    "none": {1e-3: [2.60, 2.62, 2.64], 1e-2: [2.30, 2.31, 2.35], 1e-1: [4.50, None, 3.00]},
    "p=2": {1e-3: [2.50, 2.52, 2.50], 1e-2: [2.20, 2.25, 2.21], 1e-1: [2.40, 2.45, 2.50]},
    "p=4": {1e-3: [2.70, 2.70, 2.72], 1e-2: [2.40, 2.41, 2.42], 1e-1: [2.50, 2.55, None]},
}
LR_BEST_GAP = 0.1  # best_val_loss = final - 0.1 (none at 0.1 seed 0: best 2.9, then it rose)
LR_DIVERGED = ("none", 1e-1, 1)
LR_FAILED = ("p=4", 1e-1, 2)


def lr_logit(group: str, lr: float, step: int) -> float:
    """The largest attention logit at an eval: grows with lr and step, fastest without a norm."""
    return 5.0 + (100.0 if group == "none" else 10.0) * lr * step / 20


def make_lr_sweep(root: Path) -> Path:
    """27 job dirs, group-major then lr then seed; returns root."""
    job = 0
    for group, (kind, p) in LR_GROUPS.items():
        for lr in LR_GRID:
            for seed in LR_SEEDS:
                run = root / str(job)
                write_config(run, config(2.0 if math.isnan(p) else p, 9, kind=kind, seed=seed,
                                         lr=lr))
                l0, last = LR_L0[group][seed], LR_FINAL[group][lr][seed]
                end = 20 if last is not None else 10
                for step in range(0, end + 1, 10):
                    val = l0 if step == 0 else (last if step == 20 else 3.1)
                    rundir.append_metrics(run, {
                        "step": step, "train_loss": val, "val_loss": val, "lr": lr,
                        "elapsed_s": step / 10, "tokens_per_s": 1000.0, "gamma_mean": None,
                        "p_mean": None, "attn_logit_max": lr_logit(group, lr, step)})
                logit = {"attn_logit_max": lr_logit(group, lr, end)}
                if (group, lr, seed) == LR_DIVERGED:
                    rundir.write_final(run, final("diverged", 3.1, 5.0, p, seed, 9, val_loss=3.1,
                                                  best_val_loss=3.0, diverged_step=15,
                                                  error="loss became nan at step 15", **logit))
                elif (group, lr, seed) == LR_FAILED:
                    rundir.write_final(run, final("failed", 3.1, 5.0, p, seed, 9, val_loss=3.1,
                                                  error="RuntimeError: disk full", **logit))
                else:
                    best = 2.9 if last > l0 else last - LR_BEST_GAP
                    rundir.write_final(run, final("completed", best, 9.0, p, seed, 9,
                                                  val_loss=last, **logit))
                job += 1
    return root


def lr_reading(sweep: Path):
    """The learning-rate reading of a sweep dir, as the report makes it: its runs with their
    curves through qknorm.report.lrsens."""
    from qknorm.report import lrsens, results

    runs = results.collect(sweep).runs
    return lrsens.compute(runs, results.collect_curves(runs, sweep))


def lr_fixtures(make: Callable[[Path], Path]) -> tuple:
    """A test module's module-scoped `sweep` (made once by `make` in a temporary dir) and its
    `reading` (lr_reading): `sweep, reading = lr_fixtures(make_lr_sweep)` at module level."""
    import pytest

    @pytest.fixture(scope="module")
    def sweep(tmp_path_factory):
        return make(tmp_path_factory.mktemp("lr"))

    @pytest.fixture(scope="module")
    def reading(sweep):
        return lr_reading(sweep)

    return sweep, reading
