"""The figure the paired comparisons are read from: Δ of a metric against the baseline p, per p
(stats.paired_vs_baseline's table, drawn as computed: one place makes the numbers), one series
per --by value. With the table's verdicts (an equivalence δ) the ±δ band is drawn and each p is
marked worse / better / level within ±δ / undecided, with its 90% interval (the TOST's) over its
95% one; without, Holm-significant marks are filled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hydra_racing_sweeper import decision
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from qknorm.report.canvas import MEAN_COLOR, OTHER_KIND_COLORS, legend, new_figure, series
from qknorm.report.paxis import PAxis, format_p
from qknorm.report.stats import ALPHA, BETTER, LEVEL_WITHIN, UNDECIDED, WORSE, pairing

HOLM_GID = "holm"  # delta_vs_p: the filled markers (shown at Holm p <= ALPHA); tests find them
# With verdicts: each verdict's markers (gid = the verdict's first word; tests find them).
VERDICT_STYLE = {WORSE: ("^", "tab:red"), BETTER: ("v", "tab:green"),
                 LEVEL_WITHIN: ("s", "0.45"), UNDECIDED: ("o", None)}
BAND_GID = "equivalence"  # the ±δ band


def verdict_gid(verdict: str) -> str:
    return verdict.split()[0]


def delta_vs_p(paired: pd.DataFrame, metric: str, baseline: float, logx: bool = False,
               by: list[str] | tuple[str, ...] = (), continuous: bool = False,
               equivalence: float | None = None, test: ReplicateTest = PAIRED_T) -> Figure:
    """Paired Δ (group − baseline) of metric per p, from stats.paired_vs_baseline: the mean Δ
    with its 95% interval under `test` (the table's), one series per --by value, a zero line;
    kinds without p are levels with their interval, as in loss_vs_p. With the table's
    `verdict` column and `equivalence` (δ): the ±δ band, the 90% interval as a thick bar and a
    marker per verdict; else filled where the Holm-adjusted p is shown (decision.shown at the
    table's ALPHA). The figure the
    comparisons are read from: each p's own spread over folds (loss_vs_p) hides differences
    that pairing resolves."""
    fig, (ax,) = new_figure()
    has_p = paired["norm.p"].notna()
    verdicts = "verdict" in paired.columns and equivalence is not None
    axis = PAxis.of([*paired.loc[has_p, "norm.p"], baseline], logx, continuous)
    if verdicts:
        ax.axhspan(-equivalence, equivalence, color="0.6", alpha=0.15, lw=0, zorder=1,
                   gid=BAND_GID, label=f"±δ = {equivalence:g}: level where the 90% interval "
                   "lies inside")
    groups = series(paired[has_p], by)
    for i, (name, color, group) in enumerate(groups):
        _delta_series(ax, axis, group, baseline, name, color or MEAN_COLOR,
                      offset=i - (len(groups) - 1) / 2, verdicts=verdicts)
    ax.axhline(0.0, color="0.35", ls="--", lw=1, zorder=2,
               label=f"Δ = 0 (baseline p={format_p(baseline)})")
    _delta_levels(ax, paired[~has_p])
    axis.apply(ax)
    ax.set_ylabel(f"Δ {metric} vs p={format_p(baseline)}")
    ax.set_title(f"Δ {metric} − baseline, paired by {pairing(test)}: mean ± 95% interval\n"
                 f"({test.short()})", fontsize=10)
    ax.grid(True, alpha=0.3, lw=0.6)
    legend(fig, ax, by)
    return fig


def _dodge(axis: PAxis, xs: np.ndarray, offset: float) -> np.ndarray:
    """Series side by side at the same p, so their intervals do not hide each other."""
    if axis.logx:
        return xs * 2.0 ** (0.04 * offset)
    width = (axis.x_inf - axis.finite[0]) if axis.finite else 1.0
    return xs + 0.012 * width * offset


def _delta_series(ax: Axes, axis: PAxis, group: pd.DataFrame, baseline: float, name: str,
                  color: str, offset: float, verdicts: bool = False) -> None:
    """One series: error bars, then markers by verdict (`_verdict_marks`) or, without
    verdicts, hollow circles and filled diamonds where Holm p <= ALPHA; and a line through the
    baseline's Δ = 0 (dotted across the axis break to inf)."""
    prefix = f"{name}: " if name else ""
    group = group.sort_values("norm.p")
    xs = _dodge(axis, np.array([axis.x(p) for p in group["norm.p"]], dtype=float), offset)
    y = group["delta_mean"].to_numpy(dtype=float)
    yerr = np.vstack([y - group["delta_ci_low"], group["delta_ci_high"] - y])
    ax.errorbar(xs, y, yerr=np.nan_to_num(yerr), fmt="none", ecolor=color, capsize=4, lw=1.2,
                zorder=4)
    if verdicts:
        _verdict_marks(ax, group, xs, y, prefix, color)
    else:
        _holm_marks(ax, group, xs, y, prefix, color)
    line = pd.DataFrame({"p": [*group["norm.p"], baseline], "y": [*y, 0.0]}).sort_values("p")
    xl = _dodge(axis, np.array([axis.x(p) for p in line["p"]], dtype=float), offset)
    finite = np.isfinite(line["p"].to_numpy(dtype=float))
    ax.plot(xl[finite], line["y"][finite], color=color, lw=1.0, alpha=0.6, zorder=3)
    if finite.any() and not finite.all():  # sorted: inf is last; dotted across the break
        ax.plot(xl[-2:], line["y"].iloc[-2:], ls=":", color=color, lw=1.0, alpha=0.6, zorder=3)


def _verdict_marks(ax: Axes, group: pd.DataFrame, xs: np.ndarray, y: np.ndarray, prefix: str,
                   color: str) -> None:
    """The 90% interval (the TOST's) as a thick bar, and one marker per verdict."""
    ax.vlines(xs, group["tost_low"], group["tost_high"], color=color, lw=4, alpha=0.35,
              zorder=4)
    for verdict, (marker, fill) in VERDICT_STYLE.items():
        at = (group["verdict"] == verdict).to_numpy()
        if at.any():
            ax.scatter(xs[at], y[at], marker=marker, s=52, facecolors=fill or "white",
                       edgecolors=color if fill is None else "black", linewidths=1.2,
                       zorder=6, gid=verdict_gid(verdict), label=f"{prefix}{verdict}")


def _holm_marks(ax: Axes, group: pd.DataFrame, xs: np.ndarray, y: np.ndarray, prefix: str,
                color: str) -> None:
    sig = np.array([decision.shown(p, ALPHA) for p in group["holm_pvalue"]], dtype=bool)
    if (~sig).any():
        ax.scatter(xs[~sig], y[~sig], marker="o", s=40, facecolors="white", edgecolors=color,
                   linewidths=1.4, zorder=5, label=f"{prefix}mean Δ ± 95% t-interval")
    if sig.any():
        ax.scatter(xs[sig], y[sig], marker="D", s=44, color=color, edgecolors="black",
                   linewidths=0.6, zorder=6, gid=HOLM_GID,
                   label=f"{prefix}Holm p ≤ {ALPHA:g}")


def _delta_levels(ax: Axes, others: pd.DataFrame) -> None:
    """Kinds without p (norm=none, rms): their Δ as a level with its shaded interval."""
    for _, r in others.iterrows():
        kind = r.get("norm.kind", "?")
        color = OTHER_KIND_COLORS.get(kind, "0.5")
        ax.axhline(r["delta_mean"], color=color, lw=1.4, ls="-.", zorder=2,
                   label=f"norm={kind} Δ (no p, {int(r['n_pairs'])} pairs)")
        if pd.notna(r["delta_ci_low"]):
            ax.axhspan(r["delta_ci_low"], r["delta_ci_high"], color=color, alpha=0.12, lw=0)
