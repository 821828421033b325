"""How p is written and placed, the one home of both: `format_p` spells a p for humans (tables,
legends, titles, errors), `p_labels` spells a set of p distinctly, and `PAxis` puts p on a
figure's x axis: finite p at their value (or log-scaled), p = inf at the right end after a gap
marked `//`, with its own tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # matplotlib loads with the first axis drawn: the tables need only format_p
    from matplotlib.axes import Axes

P_LABEL = r"p of the $L_p$ norm on q and k (norm.p)"


def format_p(p: float, digits: int = 6) -> str:
    """2.0 -> '2', 2.5 -> '2.5', inf -> 'inf', NaN -> '-' (a kind without p); `digits`
    significant digits."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    if math.isinf(p):
        return "inf"
    return f"{p:.{digits}g}"


def label_digits(ps) -> int:
    """Significant digits that print every p distinctly: 6, more where two would print alike."""
    ps = set(ps)
    return next((d for d in range(6, 17) if len({format_p(p, d) for p in ps}) == len(ps)), 17)


def p_labels(ps) -> dict[float, str]:
    """Each p as the report's tables and errors print it."""
    digits = label_digits(ps)
    return {p: format_p(p, digits) for p in sorted(set(ps))}


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
        from matplotlib.ticker import NullLocator

        if self.logx:
            ax.set_xscale("log", base=2)
        finite = nice_p_ticks(self.finite) if self.continuous else self.finite
        ticks = finite + ([self.x_inf] if self.has_inf else [])
        labels = [format_p(p, 3) for p in finite] + (["∞"] if self.has_inf else [])
        if len(finite) > 12:  # many p values on a grid: let matplotlib thin them out
            ax.xaxis.set_minor_locator(NullLocator())
        else:
            ax.set_xticks(ticks, labels)
            ax.xaxis.set_minor_locator(NullLocator())
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
