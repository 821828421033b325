"""Two architectures on the same folds (docs/angpt.md, "The comparison"): each arm's best and
final val loss, the steps each run takes to reach the reference arm's best loss on its fold (the
anGPT paper's "faster convergence"), anGPT − GPT per p and the interaction (does p's Δ against
the reference p differ between the architectures), every one paired by fold with its 95%
interval under the replicate test (hydra_racing_sweeper.multitest: over folds the corrected resampled t). An
arm is one (model.arch, norm.p); its runs are the sweep's folds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest
from hydra_racing_sweeper.units import num

from qknorm.errors import UserError
from qknorm.report import stats
from qknorm.report.paxis import format_p

ARCH = "model.arch"
STEPS_TO_REF = "steps_to_ref"  # the first eval step at or below the reference's best, per fold
LOSSES = {"best_val_loss": "best val loss", "val_loss": "final val loss"}


@dataclass(frozen=True)
class Arm:
    arch: str
    p: float

    def __str__(self) -> str:
        return f"{self.arch}, p = {format_p(self.p)}"


def parse_arm(text: str) -> Arm:
    """'gpt:2' -> Arm('gpt', 2.0); UserError naming the value otherwise."""
    arch, _, p = text.partition(":")
    try:
        return Arm(arch, float(p))
    except ValueError:
        raise UserError(f"--reference {text!r} must be ARCH:P, e.g. gpt:2") from None


def steps_to_reach(curve: pd.DataFrame, target: float) -> float:
    """The first eval step whose val loss is at or below target; NaN when none is. Read at the
    evals only (paper_cpu: every 250 steps), so a step count is rounded up to the next eval."""
    hit = curve.loc[curve["val_loss"] <= target, "step"]
    return float(hit.min()) if len(hit) else math.nan


def per_fold(runs: pd.DataFrame, curves: pd.DataFrame, reference: Arm) -> pd.DataFrame:
    """One row per completed run: arch, p, fold, both losses, tokens/s and steps_to_ref (the
    reference arm's best val loss on the same fold is the target; its own run reaches it at its
    best step)."""
    missing = [k for k in (ARCH, "norm.p", "data.fold") if k not in runs.columns]
    if missing:
        raise UserError(f"the runs have no {', '.join(missing)} column: compare sweeps whose runs "
                        "differ in model.arch, with norm.p and data.fold (docs/angpt.md)")
    done = stats.completed(runs)
    rows = done[[ARCH, "norm.p", "data.fold", "run_dir", *LOSSES, "tokens_per_s"]].copy()
    rows["data.fold"] = rows["data.fold"].astype(int)
    ref = rows[(rows[ARCH] == reference.arch) & (rows["norm.p"] == reference.p)]
    if ref.empty:
        arms = sorted({str(Arm(a, p)) for a, p in zip(rows[ARCH], rows["norm.p"])})
        raise UserError(f"--reference {reference.arch}:{format_p(reference.p)} has no completed "
                        f"runs; the arms are {', '.join(arms)}")
    curve_of = dict(tuple(curves.dropna(subset=["val_loss"]).groupby("run_dir")))
    target = {fold: curve_of[d]["val_loss"].min() for fold, d in zip(ref["data.fold"], ref["run_dir"])}
    rows[STEPS_TO_REF] = [
        steps_to_reach(curve_of[d], target[f]) if f in target and d in curve_of else math.nan
        for d, f in zip(rows["run_dir"], rows["data.fold"])]
    return rows.reset_index(drop=True)


def read_folds(path) -> pd.DataFrame:
    """per_fold's table as a comparison.csv recorded it (a comparison rebuilt without its run
    dirs, whose curves steps_to_ref was read from)."""
    folds = pd.read_csv(path, dtype={"run_dir": str})
    missing = [k for k in (ARCH, "norm.p", "data.fold", *LOSSES, STEPS_TO_REF) if k not in folds]
    if missing:
        raise UserError(f"{path} has no {', '.join(missing)} column(s); pass a comparison.csv "
                        "written by scripts/arch_report.py")
    return folds


def arms(folds: pd.DataFrame, test: ReplicateTest = PAIRED_T) -> pd.DataFrame:
    """Per arm: n, each loss's mean and 95% interval, steps to the reference's best (mean over
    the folds that reached it, and how many did), the median tokens/s of its runs."""
    out = []
    for (arch, p), g in folds.groupby([ARCH, "norm.p"], sort=True):
        row = {ARCH: arch, "norm.p": p, "n": len(g)}
        for metric in LOSSES:
            _, mean, _, low, high = stats.t_interval(g[metric], test)
            row.update({f"{metric}_mean": mean, f"{metric}_ci_low": low, f"{metric}_ci_high": high})
        reached = g[STEPS_TO_REF].dropna()
        row.update({f"{STEPS_TO_REF}_mean": reached.mean() if len(reached) else math.nan,
                    "reached": len(reached), "tokens_per_s": float(g["tokens_per_s"].median())})
        out.append(row)
    return pd.DataFrame(out)


def _wide(folds: pd.DataFrame, metric: str) -> pd.DataFrame:
    """metric indexed by fold, one column per (arch, p)."""
    return folds.pivot_table(index="data.fold", columns=[ARCH, "norm.p"], values=metric,
                             aggfunc="mean", dropna=False)  # an arm that never reached: NaN


def _row(label: dict, metric: str, d: pd.Series, test: ReplicateTest) -> dict:
    d = d.dropna()
    n, mean, _, low, high = stats.t_interval(d, test)
    # d is already paired by fold: its paired test against zeros is the t-test of mean(d) = 0
    t_p = stats.paired_test(d.to_numpy(), np.zeros(len(d)), test).t_pvalue if n >= 2 else math.nan
    return {**label, "metric": metric, "n": n, "delta": mean, "ci_low": low, "ci_high": high,
            "t_pvalue": t_p}


def between_archs(folds: pd.DataFrame, arch: str, base_arch: str,
                  test: ReplicateTest = PAIRED_T) -> pd.DataFrame:
    """Per p both architectures ran: arch − base_arch, paired by fold, for both losses and the
    steps to the reference's best (folds where both reached it)."""
    rows = []
    for metric in [*LOSSES, STEPS_TO_REF]:
        wide = _wide(folds, metric)
        for p in sorted({p for a, p in wide.columns if a == arch}):
            if (base_arch, p) in wide.columns:
                rows.append(_row({"norm.p": p}, metric, wide[(arch, p)] - wide[(base_arch, p)],
                                 test))
    return pd.DataFrame(rows)


def interaction(folds: pd.DataFrame, arch: str, base_arch: str, p: float,
                base_p: float, test: ReplicateTest = PAIRED_T) -> pd.DataFrame:
    """Per fold (arch: p − base_p) − (base_arch: p − base_p), for both losses: whether p's
    effect differs between the architectures (0 inside the interval: no difference shown)."""
    rows = []
    for metric in LOSSES:
        wide = _wide(folds, metric)
        cells = [(arch, p), (arch, base_p), (base_arch, p), (base_arch, base_p)]
        if all(c in wide.columns for c in cells):
            a, a0, b, b0 = (wide[c] for c in cells)
            rows.append(_row({}, metric, (a - a0) - (b - b0), test))
    return pd.DataFrame(rows)


NONE = "–"  # the comparison's cell where there is no number


def _ci(low: float, high: float, digits: int = 4) -> str:
    return f"[{num(low, f'.{digits}f', NONE)}, {num(high, f'.{digits}f', NONE)}]"


def markdown(folds: pd.DataFrame, reference: Arm, arch: str, p: float,
             bench: dict | None = None, test: ReplicateTest = PAIRED_T) -> str:
    """The comparison's summary: arms, arch − reference arch per p, the interaction, the bench."""
    base_arch, base_p = reference.arch, reference.p
    lines = [f"# {arch} against {base_arch}, paired by fold", "",
             f"Reference arm: {reference} (its best val loss on each fold is the target of "
             f"`steps to ref`, read at the evals). Test: the {test.label()}, over folds; "
             "intervals 95%, p-values two-sided, uncorrected.", "",
             "| arch | p | n | best val loss [95% CI] | final val loss [95% CI] | steps to ref "
             "(reached) | tokens/s (median) |", "|---|---|---|---|---|---|---|"]
    for _, r in arms(folds, test).iterrows():
        steps = (f"{r[f'{STEPS_TO_REF}_mean']:.0f} ({r['reached']} of {r['n']})" if r["reached"]
                 else f"– (0 of {r['n']})")
        losses = " | ".join(f"{num(r[f'{m}_mean'], '.4f', NONE)} {_ci(r[f'{m}_ci_low'], r[f'{m}_ci_high'])}"
                            for m in LOSSES)
        lines.append(f"| {r[ARCH]} | {format_p(r['norm.p'])} | {r['n']} | {losses} | {steps} | "
                     f"{r['tokens_per_s']:.0f} |")
    names = {**LOSSES, STEPS_TO_REF: "steps to ref"}
    lines += ["", f"## {arch} − {base_arch}, per p (paired by fold)", "",
              "| p | metric | n | Δ | 95% CI | t p |", "|---|---|---|---|---|---|"]
    for _, r in between_archs(folds, arch, base_arch, test).iterrows():
        digits = 0 if r["metric"] == STEPS_TO_REF else 4
        lines.append(f"| {format_p(r['norm.p'])} | {names[r['metric']]} | {r['n']} | "
                     f"{num(r['delta'], f'+.{digits}f', NONE)} | {_ci(r['ci_low'], r['ci_high'], digits)} | "
                     f"{num(r['t_pvalue'], '.3f', NONE)} |")
    lines += ["", f"## Interaction: ({arch}: p = {format_p(p)} − p = {format_p(base_p)}) − "
              f"({base_arch}: p = {format_p(p)} − p = {format_p(base_p)})", "",
              "| metric | n | Δ of Δ | 95% CI | t p |", "|---|---|---|---|---|"]
    for _, r in interaction(folds, arch, base_arch, p, base_p, test).iterrows():
        lines.append(f"| {names[r['metric']]} | {r['n']} | {num(r['delta'], '+.4f', NONE)} | "
                     f"{_ci(r['ci_low'], r['ci_high'])} | {num(r['t_pvalue'], '.3f', NONE)} |")
    if bench:
        lines += ["", "## Step time, interleaved in one process (scripts/bench.py)", "",
                  f"`{bench.get('command', '')}`", "",
                  "| ratio of step times | median | IQR | rounds |", "|---|---|---|---|"]
        for name, r in bench.get("ratios", {}).items():
            lines.append(f"| {name} | {r['median']:.3f} | {r['q1']:.3f}–{r['q3']:.3f} | {r['n']} |")
    return "\n".join(lines) + "\n"
