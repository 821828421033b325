"""The learning-rate reading's figures (qknorm.report.lrsens): the loss against lr per group
(Wortsman et al.'s figure, log x) and the largest attention logit over training of the runs at
the two largest lr, where a norm that fails shows why. Across widths (issue 46): the
sensitivity, best and max stable lr against width per arm, and the largest logit per head."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from qknorm.report import arms, lrsens
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


# ---------------------------------------------------------------------------------------------
# Across width (issue 46)

BEST_LR_GID = "best_lr"  # the best lr per width, a line per arm (tests find it)
MAX_STABLE_GID = "max_stable_lr"
HEADS_GID = "heads"  # the points of the per-head figure, a collection per width (completed runs)
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def series_colors(view: pd.DataFrame) -> dict[str, str]:
    """One colour per series of the width view, in its order (the reference first): none and
    rms keep the report's green and purple."""
    colors, others = {}, iter(SERIES_COLORS * 4)
    for name, arm in dict(zip(view["series"], view["arm"])).items():
        colors[name] = OTHER_KIND_COLORS.get(arm) or next(others)
    return colors


def _width_axis(ax, view: pd.DataFrame) -> None:
    """log2 x with a tick at each width (its heads under it)."""
    widths = view.drop_duplicates("width").sort_values("width")
    ax.set_xscale("log", base=2)
    ax.set_xticks(widths["width"].tolist())
    ax.set_xticklabels([f"{w}\n({h} heads)" if "heads" in widths else str(w)
                        for w, h in zip(widths["width"], widths.get("heads", widths["width"]))])
    ax.minorticks_off()
    ax.set_xlabel(f"width ({lrsens.WIDTH}, log)")
    ax.grid(True, alpha=0.3, lw=0.6)


def lr_width(lr: LRSensitivity) -> Figure | None:
    """Wortsman et al.'s figure: LR sensitivity (final) against width (log x), a line per arm
    with its 95% interval over replicates as error bars; beside it the best lr (filled, solid)
    and the max stable lr (open, dotted) against width, log-log: does the best lr move with
    width. None unless the groups span several widths."""
    view = lrsens.width_view(lr)
    if view is None:
        return None
    fig, (sens, lrs) = new_figure(2, width=5.6, height=4.4)
    colors = series_colors(view)
    for i, (name, rows) in enumerate(view.groupby("series", sort=False)):
        rows = rows.sort_values("width")
        color, marker = colors[name], MARKERS[i % len(MARKERS)]
        err = [rows["mean"] - rows["ci_low"], rows["ci_high"] - rows["mean"]]
        sens.errorbar(rows["width"], rows["mean"], yerr=err, color=color, marker=marker, ms=5,
                      lw=1.6, capsize=3, label=name)
        lrs.plot(rows["width"], rows["best_lr"], "-", marker=marker, ms=6, color=color,
                 label=f"{name}: best", gid=BEST_LR_GID)
        lrs.plot(rows["width"], rows["max_stable_lr"], ":", marker=marker, ms=8, color=color,
                 mfc="none", label=f"{name}: max stable", gid=MAX_STABLE_GID)
    for ax in (sens, lrs):
        _width_axis(ax, view)
    sens.set_ylabel("LR sensitivity (final val loss)")
    sens.set_title(f"mean over replicates, 95% interval ({lr.test.short()})", fontsize=9)
    sens.legend(fontsize=7, frameon=False)
    grid = sorted(lr.points[LR].unique())
    lrs.set_yscale("log")
    lrs.set_yticks(grid)
    lrs.set_yticklabels([f"{x:g}" for x in grid])
    lrs.minorticks_off()
    lrs.set_ylabel("learning rate (log)")
    lrs.set_title("best lr (lowest mean min(ℓ, ℓ₀)) and max stable lr", fontsize=9)
    # the arms' colours and markers are the left panel's: this legend says only the two styles
    lrs.legend(handles=[Line2D([], [], color="0.3", marker="o", label="best lr"),
                        Line2D([], [], color="0.3", marker="o", mfc="none", ls=":",
                               label="max stable lr")], fontsize=7, frameon=False)
    fig.suptitle("LR sensitivity against width (Wortsman et al. 2023), per arm", fontsize=10)
    return fig


def head_columns(points: pd.DataFrame) -> list[tuple[str, int, int]]:
    """(column, layer, head) of every per-head logit some run logged."""
    return [(c, int(m.group(1)), int(m.group(2))) for c in points.columns
            if (m := lrsens.HEAD.match(c)) and points[c].notna().any()]


def attn_logit_heads(lr: LRSensitivity, at_lr: float | None = None) -> Figure | None:
    """The largest attention logit of every head at the last eval, at one lr (by default the
    grid's largest, where the arms fail): a panel per arm, layers along x, each width a slot
    of the layer (light to dark: narrow to wide), each head of each run a point (heads of
    different seeds are not the same head, so they are never averaged), a diverged run's
    heads ×. log y, shared. None when no run logged per-head logits (runs before issue 46)."""
    columns = head_columns(lr.points)
    if not columns:
        return None
    at_lr = max(lr.points[LR]) if at_lr is None else at_lr
    points = lr.points[lr.points[LR] == at_lr]
    series = lrsens.series_names(points, lr.keys)
    widths = sorted(points[lrsens.WIDTH].unique()) if lrsens.WIDTH in points else [None]
    shades = _shades(len(widths))
    panels = sorted(set(series), key=lambda n: (n.split(" ")[0] != arms.REFERENCE, n))
    fig, axes = new_figure(len(panels), width=3.4, height=4.2)
    slot = 0.7 / len(widths)
    for ax, name in zip(axes, panels):
        if ax is not axes[0]:
            ax.sharey(axes[0])
        mine = points[series == name]
        for i, width in enumerate(widths):
            runs = mine if width is None else mine[mine[lrsens.WIDTH] == width]
            center = (i - (len(widths) - 1) / 2) * slot
            for diverged, gid in ((False, HEADS_GID), (True, DIVERGED_GID)):
                chosen = runs[(runs["status"] == DIVERGED) == diverged]
                x, y = _head_points(chosen, columns, center, slot)
                if len(y):  # a label with _ stays out of the legend, tests still read it
                    ax.scatter(x, y, s=24 if diverged else 14, marker="x" if diverged else "o",
                               color=shades[i], alpha=0.8, gid=gid,
                               label=("_" if diverged else "") + width_label(width))
        layers = sorted({layer for _, layer, _ in columns})
        ax.set_xticks(layers)
        ax.set_xticklabels([f"layer {layer}" for layer in layers])
        ax.set_yscale("log")
        ax.set_title(name, fontsize=10)
        ax.grid(True, alpha=0.3, lw=0.6, axis="y")
    axes[0].set_ylabel("largest attention logit of a head (last eval)")
    if len(widths) > 1:  # every width, though the first panel may lack one
        axes[0].legend(handles=[Line2D([], [], ls="", marker="o", color=shade,
                                       label=width_label(w)) for w, shade in zip(widths, shades)],
                       fontsize=7, frameon=False)
    fig.suptitle(f"largest attention logit per layer and head at lr = {at_lr:g}: each point a "
                 "head of one run (seeds together), × a diverged run's last eval", fontsize=10)
    return fig


def width_label(width) -> str:
    return "one width" if width is None else f"{width:g} wide"


def _head_points(runs: pd.DataFrame, columns, center: float, slot: float):
    """x (layer + the width's slot + the head's place in it) and y of every logged head."""
    x, y = [], []
    heads = max(h for _, _, h in columns) + 1
    for column, layer, head in columns:
        values = runs[column].dropna()
        place = (head / max(heads - 1, 1) - 0.5) * slot * 0.8
        x += [layer + center + place] * len(values)
        y += values.tolist()
    return x, y


def _shades(n: int) -> list:
    """n blues from light to dark: narrow to wide."""
    from matplotlib import colormaps

    return [colormaps["Blues"](0.45 + 0.5 * i / max(n - 1, 1)) for i in range(n)]
