"""The learning-rate reading's figures (qknorm.report.lrsens): the loss against lr per group
(Wortsman et al.'s figure, log x) and the largest attention logit over training of the runs at
the two largest lr, where a norm that fails shows why."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from qknorm.report.canvas import OTHER_KIND_COLORS, RUN_GID, SERIES_COLORS, metric_label, new_figure
from qknorm.report.lrsens import LR, READINGS, LRSensitivity, label
from qknorm.rundir import DIVERGED

DIVERGED_GID = "diverged"  # the × marks of diverged runs, drawn at ℓ₀ (tests find them)


def group_colors(lr: LRSensitivity) -> dict[str, str]:
    """One colour per group label: none and rms keep the report's green and purple."""
    colors, others = {}, iter(SERIES_COLORS * 4)
    for _, row in lr.summary.iterrows():
        name = label(row, lr.keys)
        colors[name] = OTHER_KIND_COLORS.get(row["norm.kind"]) or next(others)
    return colors


def _groups(frame: pd.DataFrame, lr: LRSensitivity):
    for _, group in frame.groupby(lr.keys, dropna=False, sort=True):
        yield label(group.iloc[0], lr.keys), group


def lr_sensitivity(lr: LRSensitivity) -> Figure:
    """Final and best val loss against lr (log x), a panel each: per group the mean over
    replicates of min(ℓ, ℓ₀) joined by a line, the replicates' range shaded, every run a dot
    (a diverged one an × at ℓ₀), and ℓ₀ dashed. The legend gives each group's sensitivity."""
    fig, axes = new_figure(2, width=5.6, height=4.4)
    colors = group_colors(lr)
    sens = {label(r, lr.keys): r for _, r in lr.summary.iterrows()}
    for ax, reading in zip(axes, READINGS):
        name = READINGS[reading]
        for group_label, group in _groups(lr.points, lr):
            color = colors[group_label]
            at = group.groupby(LR)[reading].agg(["mean", "min", "max"]).sort_index()
            r = sens[group_label]
            ax.plot(at.index, at["mean"], "-o", ms=3, color=color, lw=1.6,
                    label=f"{group_label}: {r[f'{name}_mean']:.3f} "
                          f"[{r[f'{name}_ci_low']:.3f}, {r[f'{name}_ci_high']:.3f}]")
            ax.fill_between(at.index, at["min"], at["max"], color=color, alpha=0.15, lw=0)
            done = group[group["status"] != DIVERGED]
            ax.scatter(done[LR], done[reading], s=12, color=color, alpha=0.6,
                       edgecolors="none", gid=RUN_GID)
            bad = group[group["status"] == DIVERGED]
            if len(bad):
                ax.scatter(bad[LR], bad["l0"], s=40, marker="x", color=color, gid=DIVERGED_GID)
        ax.axhline(float(lr.points["l0"].mean()), color="0.4", ls="--", lw=1,
                   label="ℓ₀ (step 0, mean)")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate (log)")
        ax.set_ylabel(metric_label(reading))
        ax.set_title(f"{reading}: mean over replicates, range shaded; legend: sensitivity "
                     "[95%]", fontsize=9)
        ax.grid(True, alpha=0.3, lw=0.6)
        ax.legend(fontsize=7, frameon=False)
    fig.suptitle(f"LR sensitivity (Wortsman et al. 2023), min(ℓ, ℓ₀) per run, × diverged at "
                 f"ℓ₀; interval: {lr.test.short()}", fontsize=10)
    return fig


LOGIT = "attn_logit_max"


def top_lrs(lr: LRSensitivity, n: int = 2) -> list[float]:
    """The n largest lr of the grid: where the norms that fail fail."""
    return sorted(lr.points[LR].unique())[-n:][::-1]


def attn_logit_curves(lr: LRSensitivity, curves: pd.DataFrame) -> Figure | None:
    """The largest attention logit (max over layers) over training steps, a panel per lr of
    the two largest, a line per run coloured by group, a diverged run's last eval an ×. None
    when no run logged it (runs before issue 36, or a report rebuilt from results.csv)."""
    logged = curves.dropna(subset=[LOGIT]) if LOGIT in curves.columns else curves.iloc[:0]
    runs = lr.points[lr.points["run_dir"].isin(set(logged["run_dir"]))]
    if not len(runs):
        return None
    colors = group_colors(lr)
    lrs = top_lrs(lr)
    fig, axes = new_figure(len(lrs), width=5.2)
    for ax, value in zip(axes, lrs):
        if ax is not axes[0]:
            ax.sharey(axes[0])
        for group_label, group in _groups(runs[runs[LR] == value], lr):
            for i, run in enumerate(group.itertuples(index=False)):
                curve = logged[logged["run_dir"] == run.run_dir].sort_values("step")
                ax.plot(curve["step"], curve[LOGIT], color=colors[group_label], lw=1.2,
                        alpha=0.8, label=group_label if i == 0 else None)
                if run.status == DIVERGED and len(curve):
                    ax.plot(curve["step"].iloc[-1], curve[LOGIT].iloc[-1], "x", ms=8,
                            color=colors[group_label], gid=DIVERGED_GID)
        ax.set_yscale("log")
        ax.set_title(f"lr = {value:g}", fontsize=10)
        ax.set_xlabel("training step")
        ax.grid(True, alpha=0.3, lw=0.6)
    axes[0].set_ylabel(metric_label(LOGIT))
    axes[0].legend(fontsize=8, frameon=False)
    fig.suptitle("largest attention logit during training, one line per run (× diverged after "
                 "its last eval)", fontsize=10)
    return fig

