"""Final and best val loss side by side (issue 18): a synthetic sweep where they disagree.

p=2 overfits: its best eval is step 10, and its loss rises by the last eval (step 20). p=4 is
still improving at step 20. By best val loss p=2 wins; by final val loss p=4 wins.
"""

from __future__ import annotations

import pandas as pd
import pytest

from qknorm import rundir
from qknorm.report import build as report
from qknorm.report import readings
from tests.helpers.synthetic_runs import config, final, write_config

FOLDS = (0, 1, 2)
# val loss at steps 0, 10, 20 for fold f
CURVES = {2.0: lambda f: (3.0, 1.30 + 0.01 * f, 1.50 + 0.01 * f),
          4.0: lambda f: (3.0, 1.50 + 0.02 * f, 1.40 + 0.02 * f)}


def _sweep(root):
    job = 0
    for p, curve in CURVES.items():
        for f in FOLDS:
            run = root / str(job)
            write_config(run, config(p, f))
            losses = curve(f)
            for step, val in zip((0, 10, 20), losses):
                rundir.append_metrics(run, {"step": step, "train_loss": val, "val_loss": val,
                                            "lr": 1e-3, "elapsed_s": step, "tokens_per_s": 1.0,
                                            "gamma_mean": 10.0, "p_mean": p})
            rundir.write_final(run, final("completed", min(losses), 1.0, p, 0, f,
                                          val_loss=losses[-1]))
            job += 1
    return root


def test_best_step_and_both_readings_with_paired_deltas(tmp_path):
    built = report.build_report(_sweep(tmp_path))
    runs = built.runs.set_index(["norm.p", "data.fold"])
    assert runs.loc[(2.0, 1), "best_step"] == 10 and runs.loc[(4.0, 1), "best_step"] == 20
    csv = pd.read_csv(pd.io.common.BytesIO(built.files["results.csv"]))
    assert list(csv.columns).index("best_step") == list(csv.columns).index("best_val_loss") + 1

    summary = readings.readings_summary(built.runs).set_index("norm.p")
    assert summary.loc[2.0, "best_val_loss_mean"] == pytest.approx(1.31)
    assert summary.loc[2.0, "val_loss_mean"] == pytest.approx(1.51)
    assert summary.loc[4.0, "val_loss_mean"] == pytest.approx(1.42)
    assert (summary.loc[2.0, "best_at_end"], summary.loc[4.0, "best_at_end"]) == (0.0, 1.0)
    assert summary.loc[2.0, "best_step_median"] == 10

    text = built.summary
    assert "## Final and best val loss side by side" in text
    section = text.split("## Final and best val loss side by side")[1]
    row = next(line for line in section.splitlines() if line.startswith("| 4 | 3 |"))
    # Δ best = 0.10 + 0.01 f, Δ final = -0.10 + 0.01 f: means 0.11 and -0.09
    assert "| 0.1100 [" in row and "| -0.0900 [" in row and "| 100% |" in row


def test_the_summary_says_when_the_readings_order_p_differently(tmp_path):
    text = report.build_report(_sweep(tmp_path)).summary
    assert ("**The two readings order the groups differently** (Kendall τ = -1.00 between their "
            "means): lowest best val loss: norm.p=2; lowest final val loss: norm.p=4.") in text
    assert ("runs still improving at the end (norm.p=4: most had their best eval last) against "
            "runs past their best (norm.p=2 (best at step 10))") in text


def test_readings_that_agree_say_so(tmp_path):
    CURVES_SAVED = dict(CURVES)
    CURVES[4.0] = lambda f: (3.0, 1.60 + 0.02 * f, 1.55 + 0.02 * f)  # worse either way
    try:
        text = report.build_report(_sweep(tmp_path)).summary
    finally:
        CURVES.update(CURVES_SAVED)
    assert "Both readings order the groups alike." in text


def test_curves_mark_where_each_mean_val_loss_is_lowest(tmp_path):
    from qknorm.report import plots, results, stepplots

    root = _sweep(tmp_path)
    runs = results.collect(root).runs
    fig = stepplots.curves(results.collect_curves(runs, root))
    marks = sorted((line.get_xdata()[0], round(line.get_ydata()[0], 4))
                   for line in fig.axes[0].lines if line.get_gid() == "best")
    assert marks == [(10.0, 1.31), (20.0, 1.42)]  # p=2 at its best eval, p=4 at the end
    plots.close(fig)
