"""The seed paper's numbers (arXiv 2602.05006, Lp-QKNorm in nanoGPT on Tiny Shakespeare) and the
table that sets sweeps of ours next to them (docs/results/README.md).

The paper reports one validation loss per p (10-fold cross-validation, no spread given) and
runs of 360-363 s each on its GPU; it gives no number for p < 2 or p = inf.
"""

from __future__ import annotations

import math

import pandas as pd
from hydra_racing_sweeper.units import num

from qknorm.report import paxis, stats
from qknorm.report.tables import markdown_table, pval

VAL_LOSS = {2.0: 1.40506, 2.5: 1.373479, 3.0: 1.364543, 3.5: 1.361630, 4.0: 1.357461}
RUN_S = (360, 363)  # the paper's seconds a run on its GPU, shortest and longest
METRIC = "best_val_loss"
EQUIVALENCE = 0.02  # the report's default δ


def comparison(sweeps: dict[str, pd.DataFrame], baseline: float = 2.0) -> pd.DataFrame:
    """One row per p: the paper's loss and Δ vs p=2, then per sweep (label -> results.csv frame)
    the mean best_val_loss with its 95% interval and the Δ vs p=2 paired by replicate with its
    interval, Holm p and verdict at δ = 0.02, all under the report's replicate test
    (stats.replicate_test: the corrected t over folds)."""
    ps = sorted({p for runs in sweeps.values() for p in stats.completed(runs)["norm.p"].dropna()}
                | set(VAL_LOSS))
    table = pd.DataFrame({"norm.p": ps})
    table["paper"] = [VAL_LOSS.get(p, math.nan) for p in ps]
    table["paper_delta"] = table["paper"] - VAL_LOSS[baseline]
    for label, runs in sweeps.items():
        test = stats.replicate_test(runs)
        summary = stats.group_summary(runs, [METRIC], test=test)[
            ["norm.p", "n", f"{METRIC}_mean", f"{METRIC}_ci_low", f"{METRIC}_ci_high"]]
        paired = stats.paired_vs_baseline(runs, METRIC, baseline, equivalence=EQUIVALENCE,
                                          test=test)[
            ["norm.p", "delta_mean", "delta_ci_low", "delta_ci_high", "holm_pvalue", "verdict"]]
        both = summary.merge(paired, on="norm.p", how="left")
        both.loc[both["norm.p"] == baseline, "delta_mean"] = 0.0
        both = both.rename(columns={c: f"{label}:{c}" for c in both.columns if c != "norm.p"})
        table = table.merge(both, on="norm.p", how="left")
    return table


def to_markdown(table: pd.DataFrame, labels: list[str]) -> str:
    """The comparison as a markdown table: losses to 4 decimals, intervals in brackets."""
    header = ["p", "paper", "paper Δ"]
    for label in labels:
        header += [f"{label}: mean [95% CI] (n)", f"{label}: Δ vs p=2 [95% CI]", "Holm p",
                   "verdict"]
    rows = []
    for _, r in table.iterrows():
        cells = [paxis.format_p(r["norm.p"]), num(r["paper"], ".4f"), num(r["paper_delta"], "+.4f")]
        for label in labels:
            c = {k.split(":", 1)[1]: v for k, v in r.items() if k.startswith(f"{label}:")}
            n = "-" if pd.isna(c["n"]) else str(int(c["n"]))
            cells.append(f"{num(c[f'{METRIC}_mean'], '.4f')} [{num(c[f'{METRIC}_ci_low'], '.4f')}, "
                         f"{num(c[f'{METRIC}_ci_high'], '.4f')}] ({n})")
            cells.append(f"{num(c['delta_mean'], '+.4f')} [{num(c['delta_ci_low'], '+.4f')}, "
                         f"{num(c['delta_ci_high'], '+.4f')}]")
            cells.append(pval(c["holm_pvalue"]))
            cells.append("-" if pd.isna(c["verdict"]) else c["verdict"])
        rows.append(cells)
    return markdown_table(header, rows)
