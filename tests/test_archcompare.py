"""The architecture comparison (qknorm/report/archcompare.py, scripts/arch_report.py) on run dirs
written by hand: every number below follows from the curves in `CURVES`."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from qknorm import rundir
from qknorm.report import archcompare, results
from tests.helpers import REPO
from tests.helpers.synthetic_runs import config, final, write_config

FOLDS = (0, 1, 2)


def curve(arch: str, p: float, f: int) -> list[float]:
    """Val loss at steps 0, 10, 20 of one run (the last is its best and its final)."""
    return {("gpt", 2.0): [3.0, 2.0, 1.5 + 0.1 * f],  # the reference: its best at step 20
            ("gpt", 4.0): [3.0, 2.1, 1.6 + 0.1 * f],  # never reaches the reference's best
            ("angpt", 2.0): [2.5, 1.45 + 0.1 * f, 1.4 + 0.1 * f],  # below it at step 10
            ("angpt", 4.0): [2.5, 1.5 + 0.1 * f, 1.3 + 0.1 * f + 0.01 * f * f],  # at it: 10
            }[(arch, p)]


def make_runs(root: Path) -> Path:
    for arch in ("gpt", "angpt"):
        for p in (2.0, 4.0):
            for f in FOLDS:
                run = root / arch / f"p{p:g}_{f}"
                cfg = config(p, f)
                cfg["model"]["arch"] = arch
                write_config(run, cfg)
                values = curve(arch, p, f)
                for step, val in zip((0, 10, 20), values, strict=True):
                    rundir.append_metrics(run, {"step": step, "val_loss": val})
                rundir.write_final(run, final("completed", values[-1], 10.0, p, 0, f,
                                              tokens_per_s=1000.0 if arch == "gpt" else 700.0))
    return root


@pytest.fixture
def folds(tmp_path):
    root = make_runs(tmp_path)
    c = results.collect(root)
    return archcompare.per_fold(c.runs, results.collect_curves(c.runs, root),
                                archcompare.Arm("gpt", 2.0))


def test_steps_to_the_reference_best_are_read_from_each_runs_curve(folds):
    steps = folds.set_index(["model.arch", "norm.p", "data.fold"])["steps_to_ref"]
    for f in FOLDS:
        assert steps[("gpt", 2.0, f)] == 20  # the reference reaches its own best at its best step
        assert math.isnan(steps[("gpt", 4.0, f)])
        assert steps[("angpt", 2.0, f)] == 10 and steps[("angpt", 4.0, f)] == 10  # <=: at it counts


def test_arms_and_the_paired_differences_between_architectures(folds):
    arms = archcompare.arms(folds).set_index(["model.arch", "norm.p"])
    assert arms.loc[("gpt", 2.0), "best_val_loss_mean"] == pytest.approx(1.6)
    assert arms.loc[("gpt", 4.0), "reached"] == 0 and arms.loc[("angpt", 4.0), "reached"] == 3
    assert arms.loc[("angpt", 2.0), "tokens_per_s"] == 700.0
    d = archcompare.between_archs(folds, "angpt", "gpt").set_index(["norm.p", "metric"])
    assert d.loc[(2.0, "best_val_loss"), "delta"] == pytest.approx(-0.1)
    assert d.loc[(4.0, "best_val_loss"), "delta"] == pytest.approx((-0.3 - 0.29 - 0.26) / 3)
    assert d.loc[(2.0, "steps_to_ref"), "delta"] == -10 and d.loc[(2.0, "steps_to_ref"), "n"] == 3
    assert d.loc[(4.0, "steps_to_ref"), "n"] == 0  # GPT p = 4 never reached it: no pair


def test_the_interaction_is_the_difference_of_p_effects_with_its_t_interval(folds):
    (best, final_row) = archcompare.interaction(folds, "angpt", "gpt", 4.0, 2.0).to_dict("records")
    # per fold (A4 - A2) - (G4 - G2) = (-0.1 + 0.01 f^2) - 0.1: -0.20, -0.19, -0.16
    assert best["metric"] == "best_val_loss" and best["n"] == 3
    assert best["delta"] == pytest.approx(-0.55 / 3)
    sd = math.sqrt(((-0.2 + 0.55 / 3) ** 2 + (-0.19 + 0.55 / 3) ** 2 + (-0.16 + 0.55 / 3) ** 2) / 2)
    half = 4.302653 * sd / math.sqrt(3)  # t(0.975, 2 df)
    assert best["ci_low"] == pytest.approx(-0.55 / 3 - half, rel=1e-6)
    assert best["ci_high"] == pytest.approx(-0.55 / 3 + half, rel=1e-6)
    assert final_row["delta"] == pytest.approx(best["delta"])  # final = best in these curves


@pytest.mark.slow
def test_the_script_writes_the_summary_and_a_bad_reference_is_one_line(tmp_path):
    root = make_runs(tmp_path)
    script = [sys.executable, str(REPO / "scripts" / "arch_report.py"), str(root)]
    ok = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    summary = (root / "comparison.md").read_text()
    assert "| angpt | 4 | 3 | 1.4167 [" in summary and "| 10 (3 of 3) | 700 |" in summary
    assert "| 2 | steps to ref | 3 | -10 |" in summary and "| 4 | steps to ref | 0 | – |" in summary
    rows = (root / "comparison.csv").read_text().splitlines()
    assert len(rows) == 1 + 12
    bad = subprocess.run([*script, "--reference", "gpt:8"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: --reference gpt:8 has no completed runs; the arms are angpt, p = 2, angpt, p = 4, "
        "gpt, p = 2, gpt, p = 4"]
