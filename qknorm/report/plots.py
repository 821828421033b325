"""Figures from the runs DataFrame (qknorm.report.results), each a pyplot-free Figure: a metric
against p (metric_vs_p on one Axes; loss_vs_p, time_vs_p, gamma_vs_p, entropy_vs_p, learned_p)
drawn here, and `render` to bytes; a timing (time_vs_p) by its median and range, not a mean
(timing_vs_p). Kinds without p (norm=none, rms) have no x position, so they are drawn as
horizontal lines at their mean with a shaded 95% interval (a timing: median, min–max shaded): a
level every p can be read against. Nothing is re-exported: the figures over steps (stepplots), the paired Δ
(deltaplot), the learning-rate reading's (lrplots) and Optuna's plots (studyplots) are modules of
their own, which the report (build.figures), scripts/ and tests import whole (`from qknorm.report
import stepplots`); p's axis and ticks are paxis's.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from qknorm.config import P_KINDS
from qknorm.report import timing
from qknorm.report.baseline import continuous_p
from qknorm.report.canvas import (
    BEST_GID,
    ENTROPY,
    MEAN_COLOR,
    MEDIAN_GID,
    OTHER_KIND_COLORS,
    RUN_COLOR,
    RUN_GID,
    TRIAL_GID,
    legend,
    metric_label,
    new_figure,
    series,
    set_title,
)
from qknorm.report.paxis import PAxis, format_p
from qknorm.report.results import LAYER_DIAGNOSTIC
from qknorm.report.stats import (
    MIN_FIT_POINTS,
    at_step0,
    completed,
    quadratic_fit,
    replicates,
    t_interval,
    trial_means,
)
from qknorm.report.stepplots import curve_groups, mean_band


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as PNG or PDF bytes (scripts write them atomically)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=150, metadata={"CreationDate": None} if fmt == "pdf" else None)
    return buf.getvalue()


def close(fig: Figure) -> None:
    """Free a figure; Optuna's plots are made through pyplot, which keeps them until closed."""
    import matplotlib.pyplot as plt

    plt.close(fig)


def _lp_runs(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    done = completed(df)
    return done[done["norm.kind"].isin(P_KINDS) & done["norm.p"].notna() & done[metric].notna()]


def _group_means(runs: pd.DataFrame, metric: str, test: ReplicateTest) -> pd.DataFrame:
    """Per p: the mean and 95% interval the report's tables print (stats.replicates and
    stats.t_interval under `test`: one place makes both)."""
    rows = []
    for p, group in runs.groupby("norm.p", sort=True):
        n, mean, _, low, high = t_interval(replicates(group, metric, test)[0], test)
        rows.append({"p": p, "n": n, "mean": mean, "low": low, "high": high})
    return pd.DataFrame(rows, columns=["p", "n", "mean", "low", "high"]).astype(float)  # 0 rows too


def metric_vs_p(ax: Axes, df: pd.DataFrame, metric: str, logx: bool = False,
                baseline: float | None = None, title: str | None = None,
                by: list[str] | tuple[str, ...] = (), mark_best: bool = False,
                test: ReplicateTest = PAIRED_T) -> int:
    """Each completed run a dot, one series (colour) per value of the `by` keys; inf at the
    right; no-p kinds as lines. A grid's p get their mean with a 95% t-band; a continuous
    search's (qknorm.report.baseline.continuous_p) get one point per trial, a fit in log p and, with
    mark_best (a loss: lower is better), a star on each series' best trial. Returns how many
    series got a fit (0 on a grid), so a title says only what was drawn."""
    runs = _lp_runs(df, metric)
    continuous = continuous_p(df)
    axis = PAxis.of(df.loc[df["norm.kind"].isin(P_KINDS), "norm.p"].dropna(), logx, continuous)
    draw = _continuous_series if continuous else _grid_series
    few, drawn = [], series(runs, by)
    for name, color, group in drawn:
        if not draw(ax, axis, group, metric, name, color, mark_best, test):
            few.append(name)
    if few:  # a legend entry without a mark: the legend is placed off the data
        ax.plot([], [], " ", label=f"no fit: {'a series has' if len(few) == 1 else 'series have'}"
                f" < {MIN_FIT_POINTS} trials at ≥ 3 finite p")
    if baseline is not None:
        base = runs.loc[runs["norm.p"] == baseline, metric]
        if len(base):
            ax.axhline(float(base.mean()), color="0.35", ls="--", lw=1, zorder=2,
                       label=f"p={format_p(baseline)} mean (baseline)")
    _other_kinds(ax, df, metric, test)
    axis.apply(ax)
    ax.set_ylabel(metric_label(metric))
    ax.grid(True, alpha=0.3, lw=0.6)
    if title:
        set_title(ax, title)
    return len(drawn) - len(few) if continuous else 0


def _grid_series(ax: Axes, axis: PAxis, runs: pd.DataFrame, metric: str, name: str,
                 color: str | None, mark_best: bool = False,
                 test: ReplicateTest = PAIRED_T) -> bool:
    """The runs of one series on a grid: dots, mean ± 95% t-interval per p, a band between
    (the means show the best p; mark_best is for the continuous figure)."""
    prefix = f"{name}: " if name else ""
    xs = np.array([axis.x(p) for p in runs["norm.p"]], dtype=float)
    ax.scatter(xs, runs[metric].to_numpy(dtype=float), s=22, color=color or RUN_COLOR,
               alpha=0.65, edgecolors="none", zorder=5, gid=RUN_GID,
               label=f"{prefix}one run ({len(runs)} completed)")
    color = color or MEAN_COLOR
    means = _group_means(runs, metric, test)
    fin = means[np.isfinite(means["p"])]
    if (means["n"] > 1).any():  # mean and its interval at every p, inf included
        xm = np.array([axis.x(p) for p in means["p"]])
        yerr = np.vstack([means["mean"] - means["low"], means["high"] - means["mean"]])
        # With one run at every p there is no interval to draw (nor to name in the legend);
        # the title says at which p there is one (loss_vs_p).
        ax.errorbar(xm, means["mean"], yerr=np.nan_to_num(yerr), fmt="D", ms=7, mfc="none",
                    mew=1.4, color=color, capsize=4, lw=1.2, zorder=4,
                    label=f"{prefix}mean ± 95% interval ({test.short()})")
    if len(fin) > 1:
        ax.plot(fin["p"], fin["mean"], color=color, lw=1.6, zorder=4)
        band = fin.dropna(subset=["low"])
        if len(band) > 1:
            ax.fill_between(band["p"], band["low"], band["high"], color=color, alpha=0.15,
                            lw=0)
    inf = means[np.isinf(means["p"])]
    if len(inf) and len(fin):  # dotted: the axis is broken between the last finite p and inf
        ax.plot([fin["p"].iloc[-1], axis.x_inf], [fin["mean"].iloc[-1], inf["mean"].iloc[0]],
                ls=":", color=color, lw=1.2, zorder=4)
    return True


def _continuous_series(ax: Axes, axis: PAxis, runs: pd.DataFrame, metric: str, name: str,
                       color: str | None, mark_best: bool = False,
                       test: ReplicateTest = PAIRED_T) -> bool:
    """One series of a continuous search: runs as faint dots, each trial a point (a line spans
    its runs), the quadratic fit in log p with its 95% band, the best trial a star. False when
    there were too few trials for the fit."""
    prefix, color = f"{name}: " if name else "", color or RUN_COLOR
    ax.scatter([axis.x(p) for p in runs["norm.p"]], runs[metric].to_numpy(dtype=float), s=8,
               color=color, alpha=0.35, edgecolors="none", zorder=4, gid=RUN_GID)
    trials = trial_means(runs, metric)
    if not len(trials):
        return True
    xt = [axis.x(p) for p in trials["p"]]
    ax.vlines(xt, trials["min"], trials["max"], color=color, lw=0.8, alpha=0.5, zorder=4)
    ax.scatter(xt, trials["mean"], s=34, color=color, edgecolors="white", linewidths=0.6,
               zorder=6, gid=TRIAL_GID, label=f"{prefix}{len(trials)} trials (each the mean "
               "of its runs)")
    fin = trials[np.isfinite(trials["p"])]
    fitted = False
    if len(fin):
        grid = np.geomspace(fin["p"].min(), fin["p"].max(), 200)
        fit = quadratic_fit(np.log(fin["p"]), fin["mean"], np.log(grid))
        if fit is not None:
            mean, low, high = fit
            ax.plot(grid, mean, color=color, lw=1.6, zorder=5,
                    label=f"{prefix}quadratic fit in log p ± 95%")
            ax.fill_between(grid, low, high, color=color, alpha=0.15, lw=0, zorder=3)
            fitted = True
    if not mark_best:
        return fitted
    best = trials.loc[trials["mean"].idxmin()]
    ax.scatter([axis.x(best["p"])], [best["mean"]], marker="*", s=190, color=color,
               edgecolors="black", linewidths=0.7, zorder=7, gid=BEST_GID,
               label=f"{prefix}best p={format_p(best['p'], 4)} ({best['mean']:.4f})")
    return fitted


def _other_kinds(ax: Axes, df: pd.DataFrame, metric: str, test: ReplicateTest) -> None:
    done = completed(df)
    others = done[~done["norm.kind"].isin(P_KINDS) & done[metric].notna()]
    for kind, group in others.groupby("norm.kind", sort=True):
        n, mean, _, low, high = t_interval(replicates(group, metric, test)[0], test)
        color = OTHER_KIND_COLORS.get(kind, "0.5")
        ax.axhline(mean, color=color, lw=1.4, ls="-.", zorder=2,
                   label=f"norm={kind} mean (no p, n={n})")
        if not math.isnan(low):
            ax.axhspan(low, high, color=color, alpha=0.12, lw=0)


def loss_vs_p(df: pd.DataFrame, metric: str = "best_val_loss", baseline: float | None = 2.0,
              logx: bool = False, by: list[str] | tuple[str, ...] = (),
              test: ReplicateTest = PAIRED_T) -> Figure:
    fig, (ax,) = new_figure()
    runs = _lp_runs(df, metric)
    fitted = metric_vs_p(ax, df, metric, logx, baseline, by=by, mark_best=True, test=test)
    if continuous_p(df):
        n, what = f"n={len(runs)} runs", ("each trial a point, quadratic fit in log p ± 95%"
                                          if fitted else
                                          "each trial a point; too few trials for a fit")
    else:  # n per p, as the intervals are per p; a p with one run has none
        per_p = runs.groupby("norm.p").size()
        low, high = (int(per_p.min()), int(per_p.max())) if len(per_p) else (0, 0)
        n = f"n={low} per p" if low == high else f"n={low}–{high} per p"
        what = ("each completed run a dot, no interval with one run per p" if high <= 1 else
                "each completed run a dot, mean ± 95% interval" if low > 1 else
                "each completed run a dot, mean ± 95% interval where p has 2+ runs")
    intervals = not continuous_p(df) and len(runs) and runs.groupby("norm.p").size().max() > 1
    set_title(ax, f"{metric} vs p ({n})\n{what}" + (f"\n({test.short()})" if intervals else ""))
    legend(fig, ax, by)
    return fig


def time_vs_p(df: pd.DataFrame, logx: bool = False) -> Figure:
    """Wall time and throughput per run against p, each a timing (qknorm.report.timing)."""
    fig, axes = new_figure(2, width=5.2)
    timing_vs_p(axes[0], df, "wall_time_s", logx, title="wall time per run")
    timing_vs_p(axes[1], df, "tokens_per_s", logx, title="training throughput")
    axes[0].legend(fontsize=8, frameon=False)
    return fig


def timing_vs_p(ax: Axes, df: pd.DataFrame, metric: str, logx: bool = False,
                title: str = "") -> None:
    """A timing against p by its median and range (qknorm.report.timing says why, no t-band):
    each completed run a dot, the median of each p's runs a marker on a line (dotted across the
    break to inf); a kind without p a line at its median over its runs' min–max, shaded."""
    runs = _lp_runs(df, metric)
    axis = PAxis.of(df.loc[df["norm.kind"].isin(P_KINDS), "norm.p"].dropna(), logx,
                    continuous_p(df))
    ax.scatter([axis.x(p) for p in runs["norm.p"]], runs[metric].to_numpy(dtype=float), s=22,
               color=RUN_COLOR, alpha=0.65, edgecolors="none", zorder=5, gid=RUN_GID,
               label=f"one run ({len(runs)} completed)")
    medians = timing.by_group(runs, [metric], ["norm.p"])
    ps, ys = medians["norm.p"].astype(float), medians[f"{metric}_median"].astype(float)
    ax.plot([axis.x(p) for p in ps], ys, "D", ms=7, mfc="none", mew=1.4, color=MEAN_COLOR,
            zorder=6, gid=MEDIAN_GID, label="median of each p's runs")
    fin = np.isfinite(ps)
    ax.plot(ps[fin], ys[fin], color=MEAN_COLOR, lw=1.6, zorder=4)
    if fin.any() and not fin.all():  # dotted: the axis is broken between the last finite p and inf
        ax.plot([ps[fin].iloc[-1], axis.x_inf], [ys[fin].iloc[-1], ys[~fin].iloc[0]], ls=":",
                color=MEAN_COLOR, lw=1.2, zorder=4)
    done = completed(df)
    others = done[~done["norm.kind"].isin(P_KINDS) & done[metric].notna()]
    for _, r in timing.by_group(others, [metric], ["norm.kind"]).iterrows():
        color = OTHER_KIND_COLORS.get(r["norm.kind"], "0.5")
        ax.axhline(r[f"{metric}_median"], color=color, lw=1.4, ls="-.", zorder=2,
                   label=f"norm={r['norm.kind']} median, min–max shaded (no p, n={int(r['n'])})")
        ax.axhspan(r[f"{metric}_min"], r[f"{metric}_max"], color=color, alpha=0.12, lw=0)
    axis.apply(ax)
    ax.set_ylabel(metric_label(metric))
    ax.grid(True, alpha=0.3, lw=0.6)
    set_title(ax, f"{title}\neach run a dot, the median per p")


def logged(df: pd.DataFrame, column: str) -> bool:
    """Whether any completed run has `column`: runs from before issue 14 have no diagnostics."""
    return column in df.columns and completed(df)[column].notna().any()


def entropy_vs_p(runs: pd.DataFrame, curves_df: pd.DataFrame, logx: bool = False,
                 by: list[str] | tuple[str, ...] = (), test: ReplicateTest = PAIRED_T) -> Figure:
    """ENTROPY per p at step 0 (the untrained model, metrics.jsonl) and at the last eval
    (final.json), side by side on one y scale, each drawn as loss_vs_p draws a metric."""
    start = at_step0(runs, curves_df, [ENTROPY])[ENTROPY]
    frames = {"step 0 (untrained)": runs.assign(**{ENTROPY: start}),
              "last eval": runs}
    fig, axes = new_figure(2, width=5.2)
    axes[1].sharey(axes[0])
    for ax, (title, frame) in zip(axes, frames.items()):
        metric_vs_p(ax, frame, ENTROPY, logx, title=title, by=by, test=test)
    axes[1].set_ylabel("")  # one y scale, labelled once
    fig.suptitle("attention entropy / its causal maximum ln(t+1), mean over layers, heads and "
                 "rows t ≥ 1 (1 = uniform over the visible tokens)", fontsize=10)
    legend(fig, axes[0], by)
    return fig


def gamma_vs_p(df: pd.DataFrame, curves_df: pd.DataFrame, logx: bool = False,
               test: ReplicateTest = PAIRED_T) -> Figure:
    """Left: learned gamma at the end vs p. Right: learned p vs initial p when p was learned,
    else gamma during training per p (how the softmax temperature moved)."""
    fig, axes = new_figure(2, width=5.2)
    metric_vs_p(axes[0], df, "gamma", logx, title=r"learned $\gamma$ at the end", test=test)
    axes[0].legend(fontsize=8, frameon=False)
    runs = _lp_runs(df, "p_final")
    learned = runs[(runs["p_final"] - runs["norm.p"]).abs() > 1e-6]
    ax = axes[1]
    if len(learned):
        axis = PAxis.of(runs["norm.p"], logx)
        xs = [axis.x(p) for p in runs["norm.p"]]
        ax.scatter(xs, runs["p_final"], s=22, color=RUN_COLOR, alpha=0.7, edgecolors="none",
                   gid=RUN_GID, label="one run")
        fin = sorted(p for p in axis.finite)
        ax.plot(fin, fin, color="0.4", ls="--", lw=1, label="p unchanged")
        axis.apply(ax)
        ax.set_ylabel("learned p at the end (mean over heads)")
        ax.set_title("learned p vs initial p", fontsize=10)
        ax.legend(fontsize=8, frameon=False)
    else:
        for label, color, ls, group in curve_groups(curves_df):
            if group["gamma_mean"].notna().any():
                mean_band(ax, group, "gamma_mean", label, color, ls)
        ax.set_xlabel("training step")
        ax.set_ylabel(r"learned $\gamma$ (mean over layers)")
        ax.set_title(r"$\gamma$ during training (p fixed)", fontsize=10)
        if ax.lines:
            ax.legend(fontsize=8, frameon=False)
    ax.grid(True, alpha=0.3, lw=0.6)
    return fig


def learned_p_columns(runs: pd.DataFrame) -> dict[tuple[int, int], str]:
    """(layer, head) -> column of the learned p there (norm.p_learnable runs log p_l<i>_h<h>)."""
    found, done = {}, completed(runs)
    for column in runs.columns:
        match = LAYER_DIAGNOSTIC.match(column)
        if match and match.group(1) == "p" and done[column].notna().any():
            found[int(match.group(2)), int(match.group(3))] = column
    return found


def learned_p(runs: pd.DataFrame) -> Figure:
    """Where a learned p went: one heatmap per starting p (norm.p), layers down and heads
    across, each cell the final p averaged over that start's completed runs (folds), written
    in the cell with its sd."""
    columns = learned_p_columns(runs)
    n_layer, n_head = (max(k[i] for k in columns) + 1 for i in (0, 1))
    done = completed(runs).dropna(subset=list(columns.values()))
    starts = sorted(done["norm.p"].unique())
    fig, axes = new_figure(len(starts), width=1.0 + 0.9 * n_head, height=1.2 + 0.8 * n_layer)
    values = [done[done["norm.p"] == p][list(columns.values())] for p in starts]
    low = min(v.mean().min() for v in values)
    high = max(v.mean().max() for v in values)
    for ax, p, v in zip(axes, starts, values):
        mean, sd = np.full((n_layer, n_head), np.nan), np.full((n_layer, n_head), np.nan)
        for (layer, head), column in columns.items():
            mean[layer, head], sd[layer, head] = v[column].mean(), v[column].std()
        image = ax.imshow(mean, cmap="viridis", vmin=low, vmax=high, aspect="auto")
        for (layer, head), m in np.ndenumerate(mean):
            ax.text(head, layer, f"{m:.2f}\n±{sd[layer, head]:.2f}" if len(v) > 1 else f"{m:.2f}",
                    ha="center", va="center", fontsize=7, color="white" if m < (low + high) / 2
                    else "black")
        ax.set_title(f"start p = {format_p(p)} ({len(v)} runs)", fontsize=10)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(n_head))
        ax.set_yticks(range(n_layer))
    fig.colorbar(image, ax=axes, label="learned p at the end (mean over runs)")
    return fig
