"""Figures from the runs DataFrame (qknorm.results): functions take DataFrames, return Figures.

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
from qknorm.stats import completed, format_p, t_interval

LABELS = {  # axis labels with units; losses are mean cross-entropy per character
    "best_val_loss": "best validation loss (nats/char)",
    "val_loss": "final validation loss (nats/char)",
    "train_loss": "final training loss (nats/char)",
    "wall_time_s": "wall time per run (s)",
    "tokens_per_s": "training throughput (tokens/s)",
    "gamma": r"learned $\gamma$ at the end (mean over layers)",
    "p_final": "p at the end of training",
    "steps": "steps",
}
P_LABEL = r"p of the $L_p$ norm on q and k (norm.p)"
RUN_GID = "runs"  # the scatter collections with one dot per run carry this gid (tests find them)
RUN_COLOR = "#4C72B0"
MEAN_COLOR = "#C44E52"
OTHER_KIND_COLORS = {"none": "#55A868", "rms": "#8172B2"}


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

    @classmethod
    def of(cls, ps, logx: bool = False) -> PAxis:
        ps = [float(p) for p in ps if not math.isnan(p)]
        return cls(sorted({p for p in ps if math.isfinite(p)}), any(math.isinf(p) for p in ps), logx)

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
        ticks = self.finite + ([self.x_inf] if self.has_inf else [])
        labels = [format_p(p) for p in self.finite] + (["∞"] if self.has_inf else [])
        if len(self.finite) > 12:  # many p values (a TPE search): let matplotlib thin them out
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        else:
            ax.set_xticks(ticks, labels)
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        if self.has_inf and self.finite:
            _break_mark(ax, self.finite[-1], self.x_inf, self.logx)
        ax.set_xlabel(P_LABEL)


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
    return pd.DataFrame(rows, columns=["p", "n", "mean", "low", "high"])


def metric_vs_p(ax: Axes, df: pd.DataFrame, metric: str, logx: bool = False,
                baseline: float | None = None, title: str | None = None) -> None:
    """Each completed run a dot; mean with a 95% t-band; inf at the right; no-p kinds as lines."""
    runs = _lp_runs(df, metric)
    axis = PAxis.of(df.loc[df["norm.kind"].isin(P_KINDS), "norm.p"].dropna(), logx)
    xs = np.array([axis.x(p) for p in runs["norm.p"]], dtype=float)
    ax.scatter(xs, runs[metric].to_numpy(dtype=float), s=22, color=RUN_COLOR, alpha=0.65,
               edgecolors="none", zorder=5, gid=RUN_GID, label=f"one run ({len(runs)} completed)")

    means = _group_means(runs, metric)
    fin = means[np.isfinite(means["p"])]
    if len(means):  # mean and its interval at every p, inf included
        xm = np.array([axis.x(p) for p in means["p"]])
        yerr = np.vstack([means["mean"] - means["low"], means["high"] - means["mean"]])
        ax.errorbar(xm, means["mean"], yerr=np.nan_to_num(yerr), fmt="D", ms=7, mfc="none",
                    mew=1.4, color=MEAN_COLOR, capsize=4, lw=1.2, zorder=4,
                    label="mean ± 95% t-interval")
    if len(fin) > 1:
        ax.plot(fin["p"], fin["mean"], color=MEAN_COLOR, lw=1.6, zorder=4)
        band = fin.dropna(subset=["low"])
        if len(band) > 1:
            ax.fill_between(band["p"], band["low"], band["high"], color=MEAN_COLOR, alpha=0.15,
                            lw=0)
    inf = means[np.isinf(means["p"])]
    if len(inf):
        mean = float(inf["mean"].iloc[0])
        if len(fin):  # dotted: the axis is broken between the last finite p and inf
            ax.plot([fin["p"].iloc[-1], axis.x_inf], [fin["mean"].iloc[-1], mean], ls=":",
                    color=MEAN_COLOR, lw=1.2, zorder=4)

    if baseline is not None:
        base = means[means["p"] == baseline]
        if len(base):
            ax.axhline(float(base["mean"].iloc[0]), color="0.35", ls="--", lw=1, zorder=2,
                       label=f"p={format_p(baseline)} mean (baseline)")
    _other_kinds(ax, df, metric)
    axis.apply(ax)
    ax.set_ylabel(metric_label(metric))
    ax.grid(True, alpha=0.3, lw=0.6)
    if title:
        ax.set_title(title, fontsize=10)


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
              logx: bool = False) -> Figure:
    fig, (ax,) = new_figure()
    n = len(_lp_runs(df, metric))
    metric_vs_p(ax, df, metric, logx, baseline,
                title=f"{metric} vs p: each completed run a dot, mean ± 95% t-interval (n={n})")
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
                   "gamma_mean": r"learned $\gamma$ (mean over layers)"}.get(y, y))
    ax.set_title(f"{y} during training: mean over completed runs ± 95% t-interval"
                 + (" (▼ lowest)" if y == "val_loss" else ""), fontsize=10)
    ax.grid(True, alpha=0.3, lw=0.6)
    if ax.lines:
        ax.legend(fontsize=8, frameon=False, ncols=2 if len(ax.lines) > 5 else 1)
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
