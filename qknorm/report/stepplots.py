"""Figures over training steps (the curves of metrics.jsonl): a metric's mean per p with its 95%
t-band, one colour per p, kinds without p dashed.
"""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from qknorm.config import P_KINDS
from qknorm.report.canvas import ENTROPY, OTHER_KIND_COLORS, metric_label, new_figure, series
from qknorm.report.paxis import format_p
from qknorm.report.stats import completed, t_interval


def p_colors(ps) -> dict[float, tuple]:
    """One colour per p, ordered (inf last), from a perceptually uniform map."""
    ordered = sorted({float(p) for p in ps if not math.isnan(p)})
    cmap = matplotlib.colormaps["viridis"]
    n = max(1, len(ordered) - 1)
    return {p: cmap(0.9 * i / n) for i, p in enumerate(ordered)}


def curve_groups(curves: pd.DataFrame):
    """(label, colour, style, frame) per group of completed runs: p groups, then no-p kinds."""
    done = completed(curves)
    lp = done[done["norm.kind"].isin(P_KINDS)]
    colors = p_colors(lp["norm.p"])
    for p, group in lp.groupby("norm.p", sort=True):
        yield f"p={format_p(p)}", colors[p], "-", group
    for kind, group in done[~done["norm.kind"].isin(P_KINDS)].groupby("norm.kind", sort=True):
        yield f"norm={kind}", OTHER_KIND_COLORS.get(kind, "0.5"), "--", group


def mean_band(ax: Axes, group: pd.DataFrame, y: str, label: str, color, ls: str
               ) -> tuple[np.ndarray, np.ndarray]:
    stats_rows = [(step, *t_interval(g[y].dropna())) for step, g in group.groupby("step")]
    steps = np.array([r[0] for r in stats_rows], dtype=float)
    n_runs = group["run_dir"].nunique()
    mean = np.array([r[2] for r in stats_rows])
    ax.plot(steps, mean, color=color, ls=ls, lw=1.6, label=f"{label} (n={n_runs})")
    low, high = np.array([r[4] for r in stats_rows]), np.array([r[5] for r in stats_rows])
    ok = ~np.isnan(low)
    if ok.any():
        ax.fill_between(steps[ok], low[ok], high[ok], color=color, alpha=0.15, lw=0)
    return steps, mean


def curves(curves_df: pd.DataFrame, y: str = "val_loss") -> Figure:
    """y (val loss by default) vs step: mean over completed runs per p, with a 95% t-band."""
    fig, (ax,) = new_figure()
    for label, color, ls, group in curve_groups(curves_df):
        steps, mean = mean_band(ax, group, y, label, color, ls)
        if y == "val_loss" and len(mean) and not np.isnan(mean).all():
            # Where each mean curve is lowest: a curve still falling at the end has its marker
            # there, one that overfits earlier (final and best val loss then disagree).
            i = int(np.nanargmin(mean))
            ax.plot(steps[i], mean[i], marker="v", ms=6, color=color, ls="none", gid="best")
    ax.set_xlabel("training step")
    ax.set_ylabel({"val_loss": "validation loss (nats/token)",
                   "train_loss": "training loss (nats/token)",
                   "gamma_mean": r"learned $\gamma$ (mean over layers)"}.get(y, metric_label(y)))
    ax.set_title(f"{y} during training: mean over completed runs ± 95% t-interval"
                 + (" (▼ lowest)" if y == "val_loss" else ""), fontsize=10)
    ax.grid(True, alpha=0.3, lw=0.6)
    if ax.lines:
        ax.legend(fontsize=8, frameon=False, ncols=2 if len(ax.lines) > 5 else 1)
    return fig


def entropy_curves(curves_df: pd.DataFrame, runs: pd.DataFrame | None = None,
                   by: list[str] | tuple[str, ...] = ()) -> Figure:
    """ENTROPY over training steps, mean ± 95% t-band per p, from the runs that logged it. With
    `by` keys (columns of `runs`), one panel per value on one y scale: one mean per p over, say,
    both gamma_init values would hide the difference the comparison is about."""
    logged = curves_df.dropna(subset=[ENTROPY])
    by = [k for k in by if k not in ("norm.p", "norm.kind")]
    if not by or runs is None:
        return curves(logged, y=ENTROPY)
    panels = series(logged.merge(runs[["run_dir", *by]], on="run_dir", how="left"), by)
    fig, axes = new_figure(len(panels), width=5.2)
    for ax, (name, _, group) in zip(axes, panels):
        if ax is not axes[0]:
            ax.sharey(axes[0])
        for label, color, ls, g in curve_groups(group):
            mean_band(ax, g, ENTROPY, label, color, ls)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("training step")
        ax.grid(True, alpha=0.3, lw=0.6)
    axes[0].set_ylabel(metric_label(ENTROPY))
    axes[0].legend(fontsize=8, frameon=False)
    fig.suptitle(f"{ENTROPY} during training: mean over completed runs ± 95% t-interval",
                 fontsize=10)
    return fig
