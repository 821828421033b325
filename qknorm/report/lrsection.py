"""summary.md's learning-rate section (issue 36): the tables of qknorm.report.lrsens, formatted,
and across widths (issue 46) a table by width and arm."""

from __future__ import annotations

import pandas as pd
from hydra_racing_sweeper.units import num

from qknorm.report.lrsens import (
    GRID,
    LR,
    READINGS,
    REPLICATE,
    WIDTH,
    LRSensitivity,
    label,
    width_view,
)
from qknorm.report.tables import markdown_table, pval

DEFINITION = (
    "LR sensitivity (Wortsman et al. 2023, arXiv 2309.14322) per replicate: the mean over the "
    "group's lr grid of min(ℓ(η), ℓ₀) − ℓ*, with ℓ(η) the final val loss at lr η (`best`: the "
    "best val loss), ℓ₀ the run's val loss at step 0 (before any training step) and ℓ* the "
    "lowest min(ℓ, ℓ₀) over the grid; a diverged run counts as ℓ₀. 0 is a flat curve, lower is "
    "more stable. Mean over replicates with the 95% interval of the test above. Max stable lr: "
    "the largest lr at which every replicate completed (none diverged or missing).")

# What the width table shows and why Holm runs within a width (issue 46: "Δ vs QKNorm with Holm
# at each width").
WIDTH_NOTE = (
    "By width ({width}{heads}), Wortsman et al.'s view: per width and arm the sensitivity "
    "(final) with its 95% interval over replicates, the best lr (the lowest mean of min(ℓ, ℓ₀) "
    "over replicates: does it move with width?), the max stable lr, and Δ sensitivity = arm − "
    "{ref} of the same width, paired by replicate, the {test}, two-sided. Holm family: the arms "
    "compared with {ref} at one width ({each}), not the whole table, because each width asks "
    "its own question (is this arm more or less sensitive than QKNorm at this size?), the one "
    "each point of Wortsman et al.'s figure answers; how that changes with width is read along "
    "the widths.")


def _interval(row: pd.Series, name: str) -> str:
    return _bracket(row[f"{name}_mean"], row[f"{name}_ci_low"], row[f"{name}_ci_high"])


def _bracket(mean: float, low: float, high: float) -> str:
    if pd.isna(low):  # one replicate: no interval
        return num(mean)
    return f"{num(mean)} [{num(low)}, {num(high)}]"


def _lr(x: float) -> str:
    return "-" if pd.isna(x) else f"{x:g}"


def section(lr: LRSensitivity) -> list[str]:
    """The section's lines: sensitivity per group, per replicate, Δ vs the reference and the
    loss at every lr."""
    final, best = READINGS["val_loss"], READINGS["best_val_loss"]
    rows = [[label(r, lr.keys), str(int(r[f"{final}_n"])), str(r["runs"]), str(r["diverged"]),
             f"{r['n_lr']}: {_lr(r['lr_min'])} … {_lr(r['lr_max'])}", _lr(r["max_stable_lr"]),
             _interval(r, final), _interval(r, best)] for _, r in lr.summary.iterrows()]
    out = ["## Learning-rate sensitivity", "", DEFINITION, "",
           markdown_table(["group", "replicates", "runs", "diverged", "lr grid", "max stable lr",
                           "sensitivity (final) [95%]", "sensitivity (best) [95%]"], rows), ""]
    out += _by_width(lr) + _per_replicate(lr) + _paired(lr) + _by_lr(lr)
    return out + [f"- {note}" for note in lr.notes] + ([""] if lr.notes else [])


def _per_replicate(lr: LRSensitivity) -> list[str]:
    reps = lr.replicates
    folds = reps["data.fold"].nunique() > 1
    names = {rep: f"seed {rep[0]}" + (f", fold {rep[1]}" if folds else "")
             for rep in sorted(set(map(tuple, reps[REPLICATE].to_numpy().tolist())))}
    rows = []
    for _, group in reps.groupby(lr.keys, dropna=False, sort=True):
        values = {tuple(r[REPLICATE]): r[READINGS["val_loss"]] for _, r in group.iterrows()}
        rows.append([label(group.iloc[0], lr.keys)] + [num(values.get(rep)) for rep in names])
    return ["Sensitivity (final) per replicate:", "",
            markdown_table(["group", *names.values()], rows), ""]


def _paired(lr: LRSensitivity) -> list[str]:
    if lr.reference is None:
        return ["No reference group (norm=l2, lp at p = 2, or none) was run: no paired "
                "differences.", ""]
    rows = [[label(r, lr.keys), str(int(r["n_pairs"])), num(r["delta_mean"]),
             f"[{num(r['delta_ci_low'])}, {num(r['delta_ci_high'])}]", pval(r["t_pvalue"]),
             pval(r["holm_pvalue"]), "-" if pd.isna(r["d_z"]) else f"{r['d_z']:.2f}",
             r["note"] or ""] for _, r in lr.paired.iterrows()]
    return [f"Δ sensitivity (final) vs {lr.reference} (group − reference), paired by replicate: "
            f"the {lr.test.short()}, two-sided; {_family(lr)}", "",
            markdown_table(["group", "pairs", "mean Δ", "95% interval of Δ", "t p", "Holm p",
                            "d_z", "note"], rows) if rows else "no other group", ""]


def _by_lr(lr: LRSensitivity) -> list[str]:
    def spread(r: pd.Series, reading: str) -> str:
        sd = r[f"{reading}_std"]
        return num(r[f"{reading}_mean"]) + ("" if pd.isna(sd) else f" ± {num(sd)}")

    rows = [[label(r, lr.keys), _lr(r[LR]), str(r["runs"]), str(r["diverged"]),
             spread(r, "val_loss"), spread(r, "best_val_loss"), num(r["attn_logit_max"])]
            for _, r in lr.by_lr.iterrows()]
    return ["The loss at each lr, mean ± sd over replicates of min(ℓ, ℓ₀) (a diverged run at "
            "ℓ₀), and the largest attention logit at the last eval (mean over runs):", "",
            markdown_table(["group", "lr", "runs", "diverged", "final val loss",
                            "best val loss", "largest attention logit"], rows), ""]


def _family(lr: LRSensitivity) -> str:
    """Which comparisons one Holm adjustment spans: each setting's (the width table says why)."""
    if not lr.family:
        return "Holm p over the table's comparisons."
    return (f"Holm p within each value of {', '.join(lr.family)}: the comparisons with the "
            "reference of that value" + (" (the width table says why)." if WIDTH in lr.family
                                         else "."))


def _by_width(lr: LRSensitivity) -> list[str]:
    """Wortsman et al.'s view: per width and arm the sensitivity, the best and the max stable
    lr (does the best lr move with width) and Δ vs the reference arm of the same width."""
    view = width_view(lr)
    if view is None:
        return []
    ref = view.loc[view["reference"], "arm"]
    ref = ref.iloc[0] if len(ref) else "the reference"
    heads = "heads" in view.columns
    rows = []
    for _, r in view.iterrows():
        delta = (["reference", "", ""] if r["reference"] else
                 [_bracket(r["delta_mean"], r["delta_ci_low"], r["delta_ci_high"]),
                  pval(r["t_pvalue"]), pval(r["holm_pvalue"])])
        rows.append([str(r["width"]) + (f" ({r['heads']})" if heads else ""), r["series"],
                     str(int(r["n"])), _bracket(r["mean"], r["ci_low"], r["ci_high"]),
                     _lr(r["best_lr"]), _lr(r["max_stable_lr"]), *delta])
    per_width = (~view["reference"]).groupby(view["width"]).sum()
    each = (f"{int(per_width.iloc[0])} at each width" if per_width.nunique() == 1
            else "their number at each width: " + ", ".join(
                f"{int(n)} at {w}" for w, n in per_width.items()))
    return [WIDTH_NOTE.format(width=WIDTH, heads="; heads in brackets" if heads else "",
                              ref=ref, test=lr.test.short(), each=each), "",
            markdown_table(["width" + (" (heads)" if heads else ""), "arm", "replicates",
                            "sensitivity (final) [95%]", "best lr", "max stable lr",
                            f"Δ vs {ref} [95%]", "t p", "Holm p"], rows), "",
            *_grids(view)]


def _grids(view) -> list[str]:
    """A warning where the groups ran different lr grids (a study still running, or a width
    or arm short of some lr): each sensitivity is over its own group's grid."""
    grids = view[GRID].drop_duplicates()
    if len(grids) < 2:
        return []
    return [f"The groups ran {len(grids)} different lr grids ({int(grids['n_lr'].min())} to "
            f"{int(grids['n_lr'].max())} lr; the lr grid column above): a sensitivity is over "
            "its own group's grid, so sensitivities, and Δ, of different grids do not compare "
            "(a study still running?).", ""]
