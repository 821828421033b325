"""qknorm.report.plots and the report's figures, checked through the Axes' data, not just the files."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from qknorm.report import Options, build_report, paxis, plots, results, stepplots, write_report
from tests.helpers.plots import run_dots
from tests.helpers.synthetic_runs import (
    BEST,
    SEARCH_P,
    add_runs_without_p,
    make_search,
    make_sweep,
    search_loss,
)

FIGURES = ["loss_vs_p", "curves", "time_vs_p", "gamma_vs_p", "delta_vs_p"]  # no diagnostics: no entropy_*


@pytest.fixture
def sweep(tmp_path):
    root = make_sweep(tmp_path / "sweep")
    add_runs_without_p(root, "none", [1.9, 2.1], first_job=12)
    return root


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
    assert ax.get_ylabel() == "best validation loss (nats/token)"


def test_logx_and_another_metric(sweep):
    runs = results.collect(sweep).runs
    (ax,) = plots.loss_vs_p(runs, metric="wall_time_s", baseline=None, logx=True).axes
    assert ax.get_xscale() == "log"
    assert sorted(run_dots(ax)[:, 1]) == sorted([10, 12, 14, 16, 20, 22, 24, 30, 30, 33])


def test_curves_one_mean_line_per_group(sweep):
    runs = results.collect(sweep).runs
    (ax,) = stepplots.curves(results.collect_curves(runs, sweep)).axes
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
    assert names == {"results.csv", "curves.csv", "summary.md"} | {
        f"report/{f}.{ext}" for f in FIGURES for ext in ("png", "pdf")}
    for path in written:
        data = path.read_bytes()
        assert len(data) > 1000 or path.suffix in (".csv", ".md")
        if path.suffix == ".png":
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
        if path.suffix == ".pdf":
            assert data[:5] == b"%PDF-"
    curves = pd.read_csv(sweep / "curves.csv")  # every eval of every run, by run_dir
    assert list(curves.columns) == ["run_dir", "step", "train_loss", "val_loss", "lr", "elapsed_s"]
    killed = curves[curves["run_dir"] == 10]  # the torn 4th line skipped, as in the figures
    assert killed["step"].tolist() == [0, 10, 20]
    assert killed["val_loss"].tolist() == pytest.approx([3.7, 2.2, 1.7])
    summary = (sweep / "summary.md").read_text()
    assert "| 20 | 4 < 2 < inf | 1.00 |" in summary  # the ranking table, from the curves
    assert not [p for p in sweep.rglob("*") if ".tmp" in p.name or p.name.count(".") > 1
                and p.suffix not in (".png", ".pdf", ".csv", ".md", ".json", ".jsonl", ".yaml")]


# ---------------------------------------------------------------------------------------------
# issue 12: a continuous search's figure, and --by on a grid

def collections(ax, gid):
    return [c for c in ax.collections if c.get_gid() == gid]


def test_continuous_search_figure_one_series_per_by_value(tmp_path):
    runs = results.collect(make_search(tmp_path)).runs
    (ax,) = plots.loss_vs_p(runs, baseline=None, by=["optimizer.lr"]).axes
    axis = plots.PAxis.of(runs["norm.p"], continuous=True)
    trials = collections(ax, plots.TRIAL_GID)
    assert [len(c.get_offsets()) for c in trials] == [6, 7]  # one point per trial, per lr
    for c, lr in zip(trials, SEARCH_P):
        expected = sorted((axis.x(p), search_loss(p, lr)) for p in SEARCH_P[lr])
        assert np.allclose(sorted(map(tuple, c.get_offsets())), expected)  # fold offsets cancel
    assert len(run_dots(ax)) == 26  # every run too, faintly
    stars = [c.get_offsets()[0] for c in collections(ax, plots.BEST_GID)]
    assert np.allclose(stars, [(1.7604252702890315, search_loss(1.7604252702890315, 1e-3)),
                               (1.4421307763, search_loss(1.4421307763, 3e-3))])
    fits = [ln for ln in ax.get_lines() if "quadratic fit" in ln.get_label()]
    assert [ln.get_label().split(":")[0] for ln in fits] == ["optimizer.lr=0.001",
                                                           "optimizer.lr=0.003"]
    for line, lr in zip(fits, SEARCH_P):  # the data is a parabola in log p: the fit is exact
        assert line.get_ydata() == pytest.approx([search_loss(p, lr) for p in line.get_xdata()])
        assert max(line.get_xdata()) == pytest.approx(max(p for p in SEARCH_P[lr]
                                                          if math.isfinite(p)))
    assert ax.get_xscale() == "log"
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["1", "2", "4", "8", "∞"]  # round ticks, inf at the right end
    assert ax.get_xticks()[-1] == pytest.approx(axis.x_inf) and axis.x_inf > 11.48


def test_nice_p_ticks_are_round_and_few():
    assert paxis.nice_p_ticks([1.2, 3.1]) == [1.25, 1.5, 1.75, 2.0, 2.5, 3.0]
    assert paxis.nice_p_ticks([1.0, 60.0]) == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    assert paxis.nice_p_ticks([1.0, 1000.0]) == [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0]
    assert paxis.nice_p_ticks([1.8, 1.84]) == [1.75, 1.875, 2.0]  # eighths: the finest level


def test_grid_figure_draws_one_mean_line_per_by_value(sweep):
    runs = results.collect(sweep).runs
    runs["optimizer.lr"] = np.where(runs["data.fold"] % 2 == 0, 1e-3, 3e-3)
    (ax,) = plots.loss_vs_p(runs, baseline=2.0, by=["optimizer.lr"]).axes
    labels = [c.get_label() for c in ax.containers]  # errorbars: mean ± interval per series
    assert labels == ["optimizer.lr=0.001: mean ± 95% interval (paired t)",
                      "optimizer.lr=0.003: mean ± 95% interval (paired t)"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "∞"]


def test_report_of_runs_without_p_draws_levels_and_says_why_no_delta(tmp_path):
    add_runs_without_p(tmp_path, "none", [1.9, 2.1], first_job=0)
    report = build_report(tmp_path, Options())  # p=2 by default, but no run has a p
    assert "No run has a p (norm=none or rms only), so there is no paired Δ table." in report.summary
    assert report.files["report/loss_vs_p.png"][:8] == b"\x89PNG\r\n\x1a\n"


def axes_texts(ax) -> list[str]:
    """The title and every legend entry of ax: what a reader is told is drawn."""
    handles = ax.get_legend_handles_labels()[1]
    legend = ax.figure.legends[0] if ax.figure.legends else ax.get_legend()
    return [ax.get_title(), *handles, *([t.get_text() for t in legend.get_texts()] if legend else [])]


def test_loss_vs_p_with_one_run_per_p_promises_no_interval_and_counts_n_per_p(sweep):
    runs = results.collect(sweep).runs
    one = runs[(runs["data.fold"] == 0) | runs["norm.p"].isna()]  # p = 2, 4, inf: one run each
    (ax,) = plots.loss_vs_p(one, baseline=2.0).axes
    texts = axes_texts(ax)
    assert ax.get_title() == ("best_val_loss vs p (n=1 per p)\n"
                              "each completed run a dot, no interval with one run per p")
    assert not [t for t in texts if "interval" in t and "no interval" not in t]
    assert not ax.containers  # no error bars
    assert len(run_dots(ax)) == 3
    # The whole sweep: 4, 3 and 3 runs per p, each with an interval.
    (ax,) = plots.loss_vs_p(runs, baseline=2.0).axes
    assert ax.get_title() == ("best_val_loss vs p (n=3–4 per p)\n"
                              "each completed run a dot, mean ± 95% interval\n(paired t)")
    assert [c.get_label() for c in ax.containers] == ["mean ± 95% interval (paired t)"]
    # p = 2 with two runs, 4 and inf with one: intervals only where p has 2+ runs.
    mixed = runs[(runs["data.fold"] == 0) | (runs["norm.p"] == 2.0) & (runs["data.fold"] == 1)]
    (ax,) = plots.loss_vs_p(mixed, baseline=2.0).axes
    assert ax.get_title() == ("best_val_loss vs p (n=1–2 per p)\neach completed run a dot, "
                              "mean ± 95% interval where p has 2+ runs\n(paired t)")
    assert [c.get_label() for c in ax.containers] == ["mean ± 95% interval (paired t)"]


# -- the first figure a new user sees: its title inside the figure ------------------------------

LONG_METRIC = "best_val_loss_of_a_final_json_field_with_a_name_as_long_as_this_one_is"


@pytest.mark.parametrize("case", ["one run per p", "n per p", "some p one run", "search",
                                  "long metric"])
def test_loss_vs_p_title_lies_inside_the_figure(sweep, tmp_path, case):
    """make sweep's loss_vs_p (one run per p) had a one-line title that ran off the figure's right
    edge. Its rendered extent, after the constrained layout, lies inside the figure."""
    runs = results.collect(make_search(tmp_path / "search") if case == "search" else sweep).runs
    metric = "best_val_loss"
    if case == "one run per p":
        runs = runs[(runs["data.fold"] == 0) | runs["norm.p"].isna()]
    elif case == "some p one run":
        runs = runs[(runs["data.fold"] == 0) | (runs["norm.p"] == 2.0) & (runs["data.fold"] == 1)]
    elif case == "long metric":
        runs, metric = runs.rename(columns={metric: LONG_METRIC}), LONG_METRIC
    fig = plots.loss_vs_p(runs, metric=metric, baseline=2.0)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    (ax,) = fig.axes
    title = ax.title.get_window_extent(renderer)
    assert title.width > 0 and fig.bbox.x0 <= title.x0 and title.x1 <= fig.bbox.x1
    assert fig.bbox.y0 <= title.y0 and title.y1 <= fig.bbox.y1
    plots.close(fig)


# -- issue 47: a timing by its median and range; the title names a fit only where one is drawn --

def test_time_vs_p_draws_every_run_and_the_median_per_p_without_a_t_band(sweep):
    runs = results.collect(sweep).runs
    fig = plots.time_vs_p(runs)
    wall, throughput = fig.axes
    axis = plots.PAxis.of(runs["norm.p"])
    # WALL by hand: p=2 10, 12, 14, 16; p=4 20, 22, 24; inf 30, 30, 33 (mean 31, median 30)
    (medians,) = [ln for ln in wall.get_lines() if ln.get_gid() == plots.MEDIAN_GID]
    assert list(medians.get_xdata()) == [2.0, 4.0, axis.x_inf]
    assert list(medians.get_ydata()) == [13.0, 22.0, 30.0]
    assert sorted(run_dots(wall)[:, 1]) == [10, 12, 14, 16, 20, 22, 24, 30, 30, 33]
    assert wall.get_title() == "wall time per run\neach run a dot, the median per p"
    none = next(ln for ln in wall.get_lines() if ln.get_label().startswith("norm=none"))
    assert none.get_ydata()[0] == 9.0 and "median" in none.get_label()
    for ax in (wall, throughput):  # no error bars, no band: only the dots are collections
        assert not ax.containers and not [t for t in axes_texts(ax) if "interval" in t]
        assert [c.get_gid() for c in ax.collections] == [plots.RUN_GID]
    (medians,) = [ln for ln in throughput.get_lines() if ln.get_gid() == plots.MEDIAN_GID]
    assert list(medians.get_ydata()) == [1000.0] * 3


@pytest.mark.parametrize("trials, fitted", [(5, False), (6, True)])
def test_continuous_search_title_names_the_fit_only_when_one_is_drawn(tmp_path, trials, fitted):
    runs = results.collect(make_search(tmp_path)).runs
    runs = runs[runs["trial"] < trials]  # all at lr 1e-3: 5 or 6 trials, each at its own p
    (ax,) = plots.loss_vs_p(runs, baseline=None).axes
    fits = [ln for ln in ax.get_lines() if "quadratic fit" in ln.get_label()]
    assert len(fits) == fitted
    assert ax.get_title() == f"best_val_loss vs p (n={2 * trials} runs)\n" + (
        "each trial a point, quadratic fit in log p ± 95%" if fitted else
        "each trial a point; too few trials for a fit")
