"""What every figure of the report shares: its canvas (`new_figure`, a pyplot-free Figure, so
figures draw headless and in parallel tests), the axis labels, the colours, the gids tests find
marks by, the split of runs into --by series and where the legend goes.
"""

from __future__ import annotations

import textwrap

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

LABELS = {  # axis labels with units; losses are mean cross-entropy per token (a character
    # at data.tokenizer=char), bpc/bpb the same per character / byte of text (docs/data.md)
    "best_val_loss": "best validation loss (nats/token)",
    "val_loss": "final validation loss (nats/token)",
    "train_loss": "final training loss (nats/token)",
    "best_val_bpc": "best validation loss (bits/char)",
    "val_bpc": "final validation loss (bits/char)",
    "best_val_bpb": "best validation loss (bits/byte)",
    "val_bpb": "final validation loss (bits/byte)",
    "wall_time_s": "wall time per run (s)",
    "tokens_per_s": "training throughput (tokens/s)",
    "gamma": r"learned $\gamma$ at the end (mean over layers)",
    "p_final": "p at the end of training",
    "steps": "steps",
    "attn_entropy": "attention entropy (nats, mean over layers)",
    "attn_entropy_frac": "attention entropy / ln(t+1)",
    "attn_max_weight": "largest attention weight per row (mean over layers)",
    "logit_std": "std of the attention logits (mean over layers)",
    "attn_logit_max": "largest |attention logit| (max over layers)",
    "out_logit_mean": "mean output logit",
    "out_logit_max": "largest |output logit|",
    "out_z": "output log Z (logsumexp, mean over positions)",
}
# The entropy the figures show: as a fraction of its causal maximum ln(t+1), so rows that see
# 2 tokens and rows that see 256 weigh alike and 1 always means uniform attention.
ENTROPY = "attn_entropy_frac"
RUN_GID = "runs"  # the scatter collections with one dot per run carry this gid (tests find them)
TRIAL_GID = "trials"  # continuous search: one point per trial (the mean of its runs)
BEST_GID = "best"  # continuous search: the best trial of each series
MEDIAN_GID = "medians"  # a timing (time_vs_p): the median of each p's runs
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


# A character's mean width in DejaVu Sans (matplotlib's default), as a fraction of the font size,
# rounded up so that a line of wide characters fits too.
CHAR_EM = 0.62


def set_title(ax: Axes, title: str, fontsize: float = 10) -> None:
    """ax's title, each line broken at spaces to the width of its column of the figure: a long
    title (loss_vs_p's says what the marks are) ran off the figure's right edge."""
    columns = ax.get_subplotspec().get_gridspec().ncols if ax.get_subplotspec() else 1
    width_pt = ax.figure.get_figwidth() * 72 / columns
    chars = max(20, int(width_pt / (CHAR_EM * fontsize)))
    ax.set_title("\n".join(textwrap.fill(line, chars) for line in title.split("\n")),
                 fontsize=fontsize)


def series(runs: pd.DataFrame, by) -> list[tuple[str, str | None, pd.DataFrame]]:
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


def legend(fig: Figure, ax: Axes, by) -> None:
    """ax's legend: inside the axes, or with --by series (an entry per series and mark) below
    them, off the data."""
    if by:
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2,
                   fontsize=7, frameon=False)
    else:
        ax.legend(fontsize=8, frameon=False)
