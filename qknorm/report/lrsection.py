"""summary.md's learning-rate section (issue 36): the tables of qknorm.report.lrsens, formatted."""

from __future__ import annotations

import pandas as pd

from qknorm.report.lrsens import LR, READINGS, REPLICATE, LRSensitivity, label
from qknorm.report.tables import markdown_table, num, pval

DEFINITION = (
    "LR sensitivity (Wortsman et al. 2023, arXiv 2309.14322) per replicate: the mean over the "
    "group's lr grid of min(ℓ(η), ℓ₀) − ℓ*, with ℓ(η) the final val loss at lr η (`best`: the "
    "best val loss), ℓ₀ the run's val loss at step 0 (before any training step) and ℓ* the "
    "lowest min(ℓ, ℓ₀) over the grid; a diverged run counts as ℓ₀. 0 is a flat curve, lower is "
    "more stable. Mean over replicates with the 95% interval of the test above. Max stable lr: "
    "the largest lr at which every replicate completed (none diverged or missing).")


def _interval(row: pd.Series, name: str) -> str:
    if pd.isna(row[f"{name}_ci_low"]):  # one replicate: no interval
        return num(row[f"{name}_mean"])
    return (f"{num(row[f'{name}_mean'])} [{num(row[f'{name}_ci_low'])}, "
            f"{num(row[f'{name}_ci_high'])}]")


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
    out += _per_replicate(lr) + _paired(lr) + _by_lr(lr)
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
            f"the {lr.test.short()}, two-sided; Holm p over the table's comparisons.", "",
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
