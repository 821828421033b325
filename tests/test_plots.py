"""qknorm.plots and the report's figures, checked through the Axes' data, not just the files."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qknorm import plots, results
from qknorm.report import Options, build_report, write_report

from .synthetic_runs import BEST, add_runs_without_p, make_sweep

FIGURES = ["loss_vs_p", "curves", "time_vs_p", "gamma_vs_p"]


@pytest.fixture
def sweep(tmp_path):
    root = make_sweep(tmp_path / "sweep")
    add_runs_without_p(root, "none", [1.9, 2.1], first_job=12)
    return root


def run_dots(ax) -> np.ndarray:
    """(x, y) of every per-run dot on ax."""
    sets = [c.get_offsets() for c in ax.collections if c.get_gid() == plots.RUN_GID]
    return np.concatenate(sets) if sets else np.empty((0, 2))


def test_loss_vs_p_has_one_dot_per_completed_lp_run(sweep):
    runs = results.collect(sweep).runs
    fig = plots.loss_vs_p(runs, baseline=2.0)
    (ax,) = fig.axes
    dots = run_dots(ax)
    axis = plots.PAxis.of(runs["norm.p"])
    expected = sorted((axis.x(p), loss) for p, folds in BEST.items() for loss in folds.values())
    assert len(dots) == 10  # 12 Lp runs - 1 diverged - 1 killed; norm=none is a line, not dots
    assert np.allclose(sorted(map(tuple, dots)), expected)
    assert axis.x_inf > 4.0  # inf sits right of the largest finite p, with its own tick
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "∞"]
    labels = [line.get_label() for line in ax.get_lines()]
    assert "p=2 mean (baseline)" in labels and "norm=none mean (no p, n=2)" in labels
    none_line = next(ln for ln in ax.get_lines() if ln.get_label().startswith("norm=none"))
    assert none_line.get_ydata()[0] == pytest.approx(2.0)  # mean of 1.9 and 2.1
    assert ax.get_ylabel() == "best validation loss (nats/char)"


def test_logx_and_another_metric(sweep):
    runs = results.collect(sweep).runs
    (ax,) = plots.loss_vs_p(runs, metric="wall_time_s", baseline=None, logx=True).axes
    assert ax.get_xscale() == "log"
    assert sorted(run_dots(ax)[:, 1]) == sorted([10, 12, 14, 16, 20, 22, 24, 30, 30, 33])


def test_curves_one_mean_line_per_group(sweep):
    runs = results.collect(sweep).runs
    (ax,) = plots.curves(results.collect_curves(runs, sweep)).axes
    means = [line for line in ax.get_lines() if line.get_gid() != "best"]  # ▼ marks: test_readings
    assert [line.get_label() for line in means] == ["p=2 (n=4)", "p=4 (n=3)", "p=inf (n=3)",
                                                     "norm=none (n=2)"]
    p2 = means[0]
    assert list(p2.get_xdata()) == [0, 10, 20]
    assert p2.get_ydata() == pytest.approx([1.3 + 2.0, 1.3 + 0.5, 1.3])


def test_gamma_vs_p_shows_learned_p_when_p_moved(sweep):
    runs = results.collect(sweep).runs
    runs.loc[runs["norm.p"] == 4.0, "p_final"] = 3.5  # as if norm.p_learnable were on
    fig = plots.gamma_vs_p(runs, results.collect_curves(runs, sweep))
    assert len(run_dots(fig.axes[1])) == 10
    assert sorted(set(run_dots(fig.axes[1])[:, 1])) == [2.0, 3.5, math.inf]
    assert fig.axes[1].get_title() == "learned p vs initial p"


def test_report_writes_every_figure_non_empty(sweep):
    report = build_report(sweep, Options())
    written = write_report(sweep, report)
    names = {p.relative_to(sweep).as_posix() for p in written}
    assert names == {"results.csv", "summary.md"} | {
        f"report/{f}.{ext}" for f in FIGURES for ext in ("png", "pdf")}
    for path in written:
        data = path.read_bytes()
        assert len(data) > 1000 or path.suffix in (".csv", ".md")
        if path.suffix == ".png":
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
        if path.suffix == ".pdf":
            assert data[:5] == b"%PDF-"
    summary = (sweep / "summary.md").read_text()
    assert "| 20 | 4 < 2 < inf | 1.00 |" in summary  # the ranking table, from the curves
    assert not [p for p in sweep.rglob("*") if ".tmp" in p.name or p.name.count(".") > 1
                and p.suffix not in (".png", ".pdf", ".csv", ".md", ".json", ".jsonl", ".yaml")]
