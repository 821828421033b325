"""Figures from the runs DataFrame (qknorm.report.results): functions take DataFrames, return Figures.

No pyplot state: figures are `matplotlib.figure.Figure` objects, so this works headless (Agg)
and in parallel tests; scripts render them with `render` and write the bytes.

The p axis: finite p at their value (or log-scaled with `logx`), p = inf at the right end after
a gap, with its own tick. Kinds without p (norm=none, rms) have no x position, so they are drawn
as horizontal lines at their mean with a shaded 95% interval: a level every p can be read against.
"""

from __future__ import annotations

import functools
import io
import math
import warnings
from dataclasses import dataclass

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from qknorm.config import P_KINDS
from qknorm.report.results import LAYER_DIAGNOSTIC
from qknorm.report.stats import (
    MIN_FIT_POINTS,
    at_step0,
    completed,
    continuous_p,
    format_p,
    quadratic_fit,
    t_interval,
    trial_means,
)

LABELS = {  # axis labels with units; losses are mean cross-entropy per character
    "best_val_loss": "best validation loss (nats/char)",
    "val_loss": "final validation loss (nats/char)",
    "train_loss": "final training loss (nats/char)",
    "wall_time_s": "wall time per run (s)",
    "tokens_per_s": "training throughput (tokens/s)",
    "gamma": r"learned $\gamma$ at the end (mean over layers)",
    "p_final": "p at the end of training",
    "steps": "steps",
    "attn_entropy": "attention entropy (nats, mean over layers)",
    "attn_entropy_frac": "attention entropy / ln(t+1)",
    "attn_max_weight": "largest attention weight per row (mean over layers)",
    "logit_std": "std of the attention logits (mean over layers)",
}
# The entropy the figures show: as a fraction of its causal maximum ln(t+1), so rows that see
# 2 tokens and rows that see 256 weigh alike and 1 always means uniform attention.
ENTROPY = "attn_entropy_frac"
ALPHA = 0.05  # delta_vs_p fills the marker of a comparison whose Holm-adjusted p is below
HOLM_GID = "holm"  # delta_vs_p: the filled markers (Holm p < ALPHA); tests find them
P_LABEL = r"p of the $L_p$ norm on q and k (norm.p)"
RUN_GID = "runs"  # the scatter collections with one dot per run carry this gid (tests find them)
TRIAL_GID = "trials"  # continuous search: one point per trial (the mean of its runs)
BEST_GID = "best"  # continuous search: the best trial of each series
RUN_COLOR = "#4C72B0"
MEAN_COLOR = "#C44E52"
OTHER_KIND_COLORS = {"none": "#55A868", "rms": "#8172B2"}
SERIES_COLORS = ["#4C72B0", "#DD8452", "#C44E52", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974",
                 "#64B5CD"]  # one per --by value; none/rms keep their own green and purple


def metric_label(metric: str) -> str:
    return LABELS.get(metric, metric)


def new_figure(ncols: int = 1, width: float = 6.4, height: float = 4.2) -> tuple[Figure, list]:
    fig = Figure(figsize=(width * ncols if ncols > 1 else width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def render(fig: Figure, fmt: str) -> bytes:
    """The figure as PNG or PDF bytes (scripts write them atomically)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=150, metadata={"CreationDate": None} if fmt == "pdf" else None)
    return buf.getvalue()


def close(fig: Figure) -> None:
    """Free a figure; Optuna's plots are made through pyplot, which keeps them until closed."""
    import matplotlib.pyplot as plt

    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# the p axis

@dataclass
class PAxis:
    """Where each p goes on x: finite p at p, inf at the right end after a gap."""

    finite: list[float]
    has_inf: bool
    logx: bool
    continuous: bool = False  # a search's p values: log axis, round ticks instead of one per p

    @classmethod
    def of(cls, ps, logx: bool = False, continuous: bool = False) -> PAxis:
        ps = [float(p) for p in ps if not math.isnan(p)]
        return cls(sorted({p for p in ps if math.isfinite(p)}), any(math.isinf(p) for p in ps),
                   logx or continuous, continuous)

    @property
    def x_inf(self) -> float:
        if not self.finite:
            return 1.0
        hi, lo = self.finite[-1], self.finite[0]
        if self.logx:
            return hi * max(1.6, (hi / lo) ** 0.2)
        return hi + max(1.0, 0.2 * (hi - lo))

    def x(self, p: float) -> float:
        return self.x_inf if math.isinf(p) else p

    def apply(self, ax: Axes) -> None:
        if self.logx:
            ax.set_xscale("log", base=2)
        finite = nice_p_ticks(self.finite) if self.continuous else self.finite
        ticks = finite + ([self.x_inf] if self.has_inf else [])
        labels = [format_p(p, 3) for p in finite] + (["∞"] if self.has_inf else [])
        if len(finite) > 12:  # many p values on a grid: let matplotlib thin them out
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        else:
            ax.set_xticks(ticks, labels)
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        if self.has_inf and self.finite:
            _break_mark(ax, self.finite[-1], self.x_inf, self.logx)
        ax.set_xlabel(P_LABEL)


def nice_p_ticks(ps: list[float], most: int = 8) -> list[float]:
    """Round p values for a log axis over the range of ps (10% wider): powers of 2, then halves, quarters
    and eighths between them, the coarsest level that gives at least 4 ticks (thinned to
    `most`). A range too narrow for any of them gets its two ends, to 3 digits."""
    if not ps:
        return []
    lo, hi = min(ps) / 1.1, max(ps) * 1.1  # a tick just outside the points still labels them
    ticks: list[float] = []
    for n_subs in (1, 2, 4, 8):
        octaves = range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)
        ticks = [2.0**k * (1 + i / n_subs) for k in octaves for i in range(n_subs)]
        ticks = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
        if len(ticks) >= 4:
            break
    if len(ticks) > most:
        ticks = ticks[:: math.ceil(len(ticks) / most)]
    if len(ticks) < 2:
        ticks = sorted({float(format_p(lo, 3)), float(format_p(hi, 3))})
    return ticks


def _break_mark(ax: Axes, last: float, x_inf: float, logx: bool) -> None:
    """A '//' on the x axis between the last finite p and inf: the axis is not continuous there."""
    mid = math.sqrt(last * x_inf) if logx else (last + x_inf) / 2
    ax.annotate("//", xy=(mid, 0), xycoords=("data", "axes fraction"), ha="center",
                va="center", fontsize=11, color="0.3", annotation_clip=False)


def _lp_runs(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    done = completed(df)
    return done[done["norm.kind"].isin(P_KINDS) & done["norm.p"].notna() & done[metric].notna()]


def _group_means(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    rows = []
    for p, group in runs.groupby("norm.p", sort=True):
        n, mean, _, low, high = t_interval(group[metric])
        rows.append({"p": p, "n": n, "mean": mean, "low": low, "high": high})
    return pd.DataFrame(rows, columns=["p", "n", "mean", "low", "high"]).astype(float)  # 0 rows too


def metric_vs_p(ax: Axes, df: pd.DataFrame, metric: str, logx: bool = False,
                baseline: float | None = None, title: str | None = None,
                by: list[str] | tuple[str, ...] = (), mark_best: bool = False) -> None:
    """Each completed run a dot, one series (colour) per value of the `by` keys; inf at the
    right; no-p kinds as lines. A grid's p get their mean with a 95% t-band; a continuous
    search's (qknorm.report.stats.continuous_p) get one point per trial, a fit in log p and, with
    mark_best (a loss: lower is better), a star on each series' best trial."""
    runs = _lp_runs(df, metric)
    continuous = continuous_p(df)
    axis = PAxis.of(df.loc[df["norm.kind"].isin(P_KINDS), "norm.p"].dropna(), logx, continuous)
    draw = _continuous_series if continuous else _grid_series
    few = []
    for name, color, group in _series(runs, by):
        if not draw(ax, axis, group, metric, name, color, mark_best):
            few.append(name)
    if few:  # a legend entry without a mark: the legend is placed off the data
        ax.plot([], [], " ", label=f"no fit: {'a series has' if len(few) == 1 else 'series have'}"
                f" < {MIN_FIT_POINTS} trials at ≥ 3 finite p")
    if baseline is not None:
        base = runs.loc[runs["norm.p"] == baseline, metric]
        if len(base):
            ax.axhline(float(base.mean()), color="0.35", ls="--", lw=1, zorder=2,
                       label=f"p={format_p(baseline)} mean (baseline)")
    _other_kinds(ax, df, metric)
    axis.apply(ax)
    ax.set_ylabel(metric_label(metric))
    ax.grid(True, alpha=0.3, lw=0.6)
    if title:
        ax.set_title(title, fontsize=10)


def _series(runs: pd.DataFrame, by) -> list[tuple[str, str | None, pd.DataFrame]]:
    """(name, colour, runs) per value of the `by` keys; one unnamed series without them."""
    by = [k for k in by if k not in ("norm.p",)]
    if not by:
        return [("", None, runs)]
    out = []
    for i, (values, group) in enumerate(runs.groupby(by, dropna=False, sort=True)):
        values = values if isinstance(values, tuple) else (values,)
        name = ", ".join(f"{k}={v}" for k, v in zip(by, values))
        out.append((name, SERIES_COLORS[i % len(SERIES_COLORS)], group))
    return out


def _grid_series(ax: Axes, axis: PAxis, runs: pd.DataFrame, metric: str, name: str,
                 color: str | None, mark_best: bool = False) -> bool:
    """The runs of one series on a grid: dots, mean ± 95% t-interval per p, a band between
    (the means show the best p; mark_best is for the continuous figure)."""
    prefix = f"{name}: " if name else ""
    xs = np.array([axis.x(p) for p in runs["norm.p"]], dtype=float)
    ax.scatter(xs, runs[metric].to_numpy(dtype=float), s=22, color=color or RUN_COLOR,
               alpha=0.65, edgecolors="none", zorder=5, gid=RUN_GID,
               label=f"{prefix}one run ({len(runs)} completed)")
    color = color or MEAN_COLOR
    means = _group_means(runs, metric)
    fin = means[np.isfinite(means["p"])]
    if len(means):  # mean and its interval at every p, inf included
        xm = np.array([axis.x(p) for p in means["p"]])
        yerr = np.vstack([means["mean"] - means["low"], means["high"] - means["mean"]])
        ax.errorbar(xm, means["mean"], yerr=np.nan_to_num(yerr), fmt="D", ms=7, mfc="none",
                    mew=1.4, color=color, capsize=4, lw=1.2, zorder=4,
                    label=f"{prefix}mean ± 95% t-interval")
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
                       color: str | None, mark_best: bool = False) -> bool:
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


def _other_kinds(ax: Axes, df: pd.DataFrame, metric: str) -> None:
    done = completed(df)
    others = done[~done["norm.kind"].isin(P_KINDS) & done[metric].notna()]
    for kind, group in others.groupby("norm.kind", sort=True):
        n, mean, _, low, high = t_interval(group[metric])
        color = OTHER_KIND_COLORS.get(kind, "0.5")
        ax.axhline(mean, color=color, lw=1.4, ls="-.", zorder=2,
                   label=f"norm={kind} mean (no p, n={n})")
        if not math.isnan(low):
            ax.axhspan(low, high, color=color, alpha=0.12, lw=0)


def loss_vs_p(df: pd.DataFrame, metric: str = "best_val_loss", baseline: float | None = 2.0,
              logx: bool = False, by: list[str] | tuple[str, ...] = ()) -> Figure:
    fig, (ax,) = new_figure()
    n = len(_lp_runs(df, metric))
    what = ("each trial a point, quadratic fit in log p ± 95%" if continuous_p(df)
            else "each completed run a dot, mean ± 95% t-interval")
    metric_vs_p(ax, df, metric, logx, baseline, title=f"{metric} vs p: {what} (n={n})", by=by,
                mark_best=True)
    if by:  # a legend entry per series and mark: below the axes, off the data
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2,
                   fontsize=7, frameon=False)
    else:
        ax.legend(fontsize=8, frameon=False)
    return fig


def time_vs_p(df: pd.DataFrame, logx: bool = False) -> Figure:
    fig, axes = new_figure(2, width=5.2)
    metric_vs_p(axes[0], df, "wall_time_s", logx, title="wall time per run")
    metric_vs_p(axes[1], df, "tokens_per_s", logx, title="training throughput")
    axes[0].legend(fontsize=8, frameon=False)
    return fig


# ---------------------------------------------------------------------------------------------
# curves over training steps

def p_colors(ps) -> dict[float, tuple]:
    """One colour per p, ordered (inf last), from a perceptually uniform map."""
    ordered = sorted({float(p) for p in ps if not math.isnan(p)})
    cmap = matplotlib.colormaps["viridis"]
    n = max(1, len(ordered) - 1)
    return {p: cmap(0.9 * i / n) for i, p in enumerate(ordered)}


def _curve_groups(curves: pd.DataFrame):
    """(label, colour, style, frame) per group of completed runs: p groups, then no-p kinds."""
    done = completed(curves)
    lp = done[done["norm.kind"].isin(P_KINDS)]
    colors = p_colors(lp["norm.p"])
    for p, group in lp.groupby("norm.p", sort=True):
        yield f"p={format_p(p)}", colors[p], "-", group
    for kind, group in done[~done["norm.kind"].isin(P_KINDS)].groupby("norm.kind", sort=True):
        yield f"norm={kind}", OTHER_KIND_COLORS.get(kind, "0.5"), "--", group


def _mean_band(ax: Axes, group: pd.DataFrame, y: str, label: str, color, ls: str
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
    for label, color, ls, group in _curve_groups(curves_df):
        steps, mean = _mean_band(ax, group, y, label, color, ls)
        if y == "val_loss" and len(mean) and not np.isnan(mean).all():
            # Where each mean curve is lowest: a curve still falling at the end has its marker
            # there, one that overfits earlier (final and best val loss then disagree).
            i = int(np.nanargmin(mean))
            ax.plot(steps[i], mean[i], marker="v", ms=6, color=color, ls="none", gid="best")
    ax.set_xlabel("training step")
    ax.set_ylabel({"val_loss": "validation loss (nats/char)",
                   "train_loss": "training loss (nats/char)",
                   "gamma_mean": r"learned $\gamma$ (mean over layers)"}.get(y, metric_label(y)))
    ax.set_title(f"{y} during training: mean over completed runs ± 95% t-interval"
                 + (" (▼ lowest)" if y == "val_loss" else ""), fontsize=10)
    ax.grid(True, alpha=0.3, lw=0.6)
    if ax.lines:
        ax.legend(fontsize=8, frameon=False, ncols=2 if len(ax.lines) > 5 else 1)
    return fig


# ---------------------------------------------------------------------------------------------
# paired differences and attention diagnostics (issue 14)

def delta_vs_p(paired: pd.DataFrame, metric: str, baseline: float, logx: bool = False,
               by: list[str] | tuple[str, ...] = (), continuous: bool = False) -> Figure:
    """Paired Δ (group − baseline) of metric per p, from stats.paired_vs_baseline: the mean Δ
    with its 95% t-interval, filled where the Holm-adjusted paired-t p < ALPHA, one series per
    --by value, a zero line; kinds without p are levels with their interval, as in loss_vs_p.
    The figure the comparisons are read from: each p's own spread over folds (loss_vs_p)
    hides differences that pairing resolves."""
    fig, (ax,) = new_figure()
    has_p = paired["norm.p"].notna()
    axis = PAxis.of([*paired.loc[has_p, "norm.p"], baseline], logx, continuous)
    series = _series(paired[has_p], by)
    for i, (name, color, group) in enumerate(series):
        _delta_series(ax, axis, group, baseline, name, color or MEAN_COLOR,
                      offset=i - (len(series) - 1) / 2)
    ax.axhline(0.0, color="0.35", ls="--", lw=1, zorder=2,
               label=f"Δ = 0 (baseline p={format_p(baseline)})")
    _delta_levels(ax, paired[~has_p])
    axis.apply(ax)
    ax.set_ylabel(f"Δ {metric} vs p={format_p(baseline)}")
    ax.set_title(f"Δ {metric} − baseline, paired by (seed, data.fold): mean ± 95% t-interval",
                 fontsize=10)
    ax.grid(True, alpha=0.3, lw=0.6)
    if by:
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2,
                   fontsize=7, frameon=False)
    else:
        ax.legend(fontsize=8, frameon=False)
    return fig


def _dodge(axis: PAxis, xs: np.ndarray, offset: float) -> np.ndarray:
    """Series side by side at the same p, so their intervals do not hide each other."""
    if axis.logx:
        return xs * 2.0 ** (0.04 * offset)
    width = (axis.x_inf - axis.finite[0]) if axis.finite else 1.0
    return xs + 0.012 * width * offset


def _delta_series(ax: Axes, axis: PAxis, group: pd.DataFrame, baseline: float, name: str,
                  color: str, offset: float) -> None:
    """One series: error bars, hollow circles, filled diamonds where Holm p < ALPHA, and a line
    through the baseline's Δ = 0 (dotted across the axis break to inf)."""
    prefix = f"{name}: " if name else ""
    group = group.sort_values("norm.p")
    xs = _dodge(axis, np.array([axis.x(p) for p in group["norm.p"]], dtype=float), offset)
    y = group["delta_mean"].to_numpy(dtype=float)
    yerr = np.vstack([y - group["delta_ci_low"], group["delta_ci_high"] - y])
    ax.errorbar(xs, y, yerr=np.nan_to_num(yerr), fmt="none", ecolor=color, capsize=4, lw=1.2,
                zorder=4)
    sig = (group["holm_pvalue"] < ALPHA).to_numpy()  # NaN (no test): not significant
    if (~sig).any():
        ax.scatter(xs[~sig], y[~sig], marker="o", s=40, facecolors="white", edgecolors=color,
                   linewidths=1.4, zorder=5, label=f"{prefix}mean Δ ± 95% t-interval")
    if sig.any():
        ax.scatter(xs[sig], y[sig], marker="D", s=44, color=color, edgecolors="black",
                   linewidths=0.6, zorder=6, gid=HOLM_GID,
                   label=f"{prefix}Holm p < {ALPHA:g}")
    line = pd.DataFrame({"p": [*group["norm.p"], baseline], "y": [*y, 0.0]}).sort_values("p")
    xl = _dodge(axis, np.array([axis.x(p) for p in line["p"]], dtype=float), offset)
    finite = np.isfinite(line["p"].to_numpy(dtype=float))
    ax.plot(xl[finite], line["y"][finite], color=color, lw=1.0, alpha=0.6, zorder=3)
    if finite.any() and not finite.all():  # sorted: inf is last; dotted across the break
        ax.plot(xl[-2:], line["y"].iloc[-2:], ls=":", color=color, lw=1.0, alpha=0.6, zorder=3)


def _delta_levels(ax: Axes, others: pd.DataFrame) -> None:
    """Kinds without p (norm=none, rms): their Δ as a level with its shaded interval."""
    for _, r in others.iterrows():
        kind = r.get("norm.kind", "?")
        color = OTHER_KIND_COLORS.get(kind, "0.5")
        ax.axhline(r["delta_mean"], color=color, lw=1.4, ls="-.", zorder=2,
                   label=f"norm={kind} Δ (no p, {int(r['n_pairs'])} pairs)")
        if pd.notna(r["delta_ci_low"]):
            ax.axhspan(r["delta_ci_low"], r["delta_ci_high"], color=color, alpha=0.12, lw=0)


def logged(df: pd.DataFrame, column: str) -> bool:
    """Whether any completed run has `column`: runs from before issue 14 have no diagnostics."""
    return column in df.columns and completed(df)[column].notna().any()


def entropy_vs_p(runs: pd.DataFrame, curves_df: pd.DataFrame, logx: bool = False,
                 by: list[str] | tuple[str, ...] = ()) -> Figure:
    """ENTROPY per p at step 0 (the untrained model, metrics.jsonl) and at the last eval
    (final.json), side by side on one y scale, each drawn as loss_vs_p draws a metric."""
    start = at_step0(runs, curves_df, [ENTROPY])[ENTROPY]
    frames = {"step 0 (untrained)": runs.assign(**{ENTROPY: start}),
              "last eval": runs}
    fig, axes = new_figure(2, width=5.2)
    axes[1].sharey(axes[0])
    for ax, (title, frame) in zip(axes, frames.items()):
        metric_vs_p(ax, frame, ENTROPY, logx, title=title, by=by)
    axes[1].set_ylabel("")  # one y scale, labelled once
    fig.suptitle("attention entropy / its causal maximum ln(t+1), mean over layers, heads and "
                 "rows t ≥ 1 (1 = uniform over the visible tokens)", fontsize=10)
    if by:
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2,
                   fontsize=7, frameon=False)
    else:
        axes[0].legend(fontsize=8, frameon=False)
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
    panels = _series(logged.merge(runs[["run_dir", *by]], on="run_dir", how="left"), by)
    fig, axes = new_figure(len(panels), width=5.2)
    for ax, (name, _, group) in zip(axes, panels):
        if ax is not axes[0]:
            ax.sharey(axes[0])
        for label, color, ls, g in _curve_groups(group):
            _mean_band(ax, g, ENTROPY, label, color, ls)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("training step")
        ax.grid(True, alpha=0.3, lw=0.6)
    axes[0].set_ylabel(metric_label(ENTROPY))
    axes[0].legend(fontsize=8, frameon=False)
    fig.suptitle(f"{ENTROPY} during training: mean over completed runs ± 95% t-interval",
                 fontsize=10)
    return fig


def gamma_vs_p(df: pd.DataFrame, curves_df: pd.DataFrame, logx: bool = False) -> Figure:
    """Left: learned gamma at the end vs p. Right: learned p vs initial p when p was learned,
    else gamma during training per p (how the softmax temperature moved)."""
    fig, axes = new_figure(2, width=5.2)
    metric_vs_p(axes[0], df, "gamma", logx, title=r"learned $\gamma$ at the end")
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
        for label, color, ls, group in _curve_groups(curves_df):
            if group["gamma_mean"].notna().any():
                _mean_band(ax, group, "gamma_mean", label, color, ls)
        ax.set_xlabel("training step")
        ax.set_ylabel(r"learned $\gamma$ (mean over layers)")
        ax.set_title(r"$\gamma$ during training (p fixed)", fontsize=10)
        if ax.lines:
            ax.legend(fontsize=8, frameon=False)
    ax.grid(True, alpha=0.3, lw=0.6)
    return fig


# ---------------------------------------------------------------------------------------------
# Optuna studies

def optuna_figures(study) -> tuple[dict[str, Figure], list[str]]:
    """History, param importances and slice plots of a study; notes for those it cannot draw."""
    import optuna
    from optuna.visualization import matplotlib as ovm

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kw = {}
    if len(study.directions) > 1:  # multi-objective: plot the first objective
        kw = {"target": lambda t: t.values[0], "target_name": "objective 0"}
    done = [t for t in study.get_trials(deepcopy=False)
            if t.state == optuna.trial.TrialState.COMPLETE]
    figures, notes = {}, []
    # PED-ANOVA, Optuna 5's default, named so that Optuna 4.9 (whose default, fANOVA, needs
    # scikit-learn) draws the same importances.
    importances = functools.partial(ovm.plot_param_importances,
                                    evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    plotters = {"history": ovm.plot_optimization_history, "importances": importances,
                "slice": ovm.plot_slice}
    for name, plot in plotters.items():
        if name == "importances" and len(done) < 2:
            notes.append(f"study {study.study_name!r}: no importances plot ({len(done)} completed "
                         "trial(s); it needs at least 2)")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna marks these plots experimental
                axes = plot(study, **kw)
        except Exception as e:  # e.g. one distinct param value: importances are undefined
            notes.append(f"study {study.study_name!r}: no {name} plot ({type(e).__name__}: {e})")
            continue
        ax = np.ravel(axes)[0]
        figures[name] = ax.figure
    return figures, notes


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
