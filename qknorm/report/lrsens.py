"""Learning-rate sensitivity (Wortsman et al. 2023, arXiv 2309.14322, issue 36): how much loss a
norm gives up across a grid of learning rates, the field's small-scale measure of training
stability. Numbers only; summary.md's section is lrsection, the figures lrplots.

For one group (a norm, and any other key that sets runs apart) and one replicate (a seed, on
its data.fold), over the lr grid η_1..η_m the group ran:

    sensitivity = mean over η of [min(ℓ(η), ℓ₀) − ℓ*],   ℓ* = min over η of min(ℓ(η), ℓ₀)

ℓ(η) is the run's final val loss (Wortsman's reading; the best val loss gives a second one),
ℓ₀ the run's val loss at step 0 (the eval before the first training step, from its curve: the
same for every lr of a seed, the init does not depend on lr), and a diverged run counts as ℓ₀
(min(∞, ℓ₀)): it is a result here, not a fault. A replicate that misses an lr of its group's
grid (a failed, pruned or unfinished run) has no sensitivity: the mean would be over another
grid; a group that ran one lr is left out. The group's sensitivity is the mean over its
replicates with the report's 95% interval (seeds on one split: the paired t, hydra_racing_sweeper.multitest).
The max stable lr is the largest lr at which every replicate of the group completed (none
diverged, none missing); the best lr the one with the lowest mean over the group's runs of
min(ℓ, ℓ₀). Each group is compared with the reference, QKNorm (norm=l2, or lp at p = 2; without
it norm=none; qknorm.report.arms), paired by replicate and within the same setting (the group
keys that are not the arm: the width in a width ladder): Δ sensitivity with its interval and t
p, Holm-adjusted within each setting (over the table when there is one).

Across widths (issue 46), `width_view` puts the numbers of each (width, arm) on one row.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest, holm

from qknorm.effective import UNUSED_KEYS
from qknorm.report import arms, results, stats
from qknorm.report.paxis import format_p
from qknorm.rundir import COMPLETED, DIVERGED, REPLICATE_KEYS

LR = "optimizer.lr"
REPLICATE = list(REPLICATE_KEYS)
READINGS = {"val_loss": "sensitivity", "best_val_loss": "sensitivity_best"}  # ℓ -> its column
HEAD = re.compile(r"^attn_logit_max_l(\d+)_h(\d+)$")  # a head's largest logit (issue 46)
COUNTED = (COMPLETED, DIVERGED)


@dataclass
class LRSensitivity:
    """The reading of a sweep over optimizer.lr: every table summary.md and the figures show."""

    keys: list[str]  # the group columns
    points: pd.DataFrame  # one row per counted run: keys, lr, replicate, status, l0, the ℓ read
    replicates: pd.DataFrame  # one row per (group, replicate): its sensitivities, missing lr
    summary: pd.DataFrame  # one row per group: runs, diverged, max stable lr, sensitivity ± CI
    by_lr: pd.DataFrame  # one row per (group, lr): runs, diverged, mean ℓ read, largest logit
    paired: pd.DataFrame  # Δ sensitivity vs the reference, paired by replicate
    reference: str | None  # the reference group's label (p=2, norm=l2, norm=none), or None
    test: ReplicateTest = PAIRED_T
    family: list[str] = field(default_factory=list)  # Holm runs within each value of these
    notes: list[str] = field(default_factory=list)


def varies(runs: pd.DataFrame) -> bool:
    """The runs span several learning rates: the reading applies."""
    return LR in runs.columns and runs[LR].nunique() > 1


def group_keys(runs: pd.DataFrame, by: list[str] | tuple[str, ...] = ()) -> list[str]:
    """norm.kind and norm.p (always: the reading is per norm), the report's --by keys and every
    other swept key, less the lr itself and the sweep's folder name: runs that differ in any of
    them are not one curve."""
    keys = ["norm.kind", "norm.p"]
    keys += [k for k in stats.group_keys(runs, by) if k not in keys and k != LR]
    return keys + [k for k in results.swept_keys(runs)
                   if k not in keys and k != LR and k not in results.LABEL_KEYS]


def label(row, keys: list[str]) -> str:
    """A group as the tables name it: p=4 (an lp norm), norm=l2, norm=none, plus its other keys."""
    kind, p = row["norm.kind"], row["norm.p"]
    head = f"p={format_p(p)}" if kind == "lp" and not pd.isna(p) else f"norm={kind}"
    return " ".join([head, *(f"{k}={row[k]}" for k in keys
                             if k not in ("norm.kind", "norm.p") and not pd.isna(row[k]))])


def compute(runs: pd.DataFrame, curves: pd.DataFrame, by: list[str] | tuple[str, ...] = (),
            test: ReplicateTest = PAIRED_T) -> LRSensitivity | None:
    """The reading of `runs` (results.collect's, with their curves); None unless some group
    ran several lr (a search whose every p ran at one lr has no curve to read)."""
    if not varies(runs):
        return None
    keys = group_keys(runs, by)
    notes: list[str] = []
    points = counted_runs(runs, curves, keys, notes)
    points = points[points["l0"].notna()]  # no eval at step 0 (no curves.csv): nothing to read
    points = points[points.groupby(keys, dropna=False)[LR].transform("nunique") > 1]
    if not len(points):
        return None
    reps = replicate_sensitivity(points, keys, notes)
    reference = reference_of(points, keys)
    # Holm's family: the settings the read groups span (a width whose runs are all at one lr
    # so far is not read, and does not split the table)
    family = [k for k in arms.setting_keys(keys) if points[k].nunique(dropna=False) > 1]
    return LRSensitivity(
        keys=keys, points=points, replicates=reps,
        summary=group_summary(points, reps, keys, test), by_lr=by_lr(points, keys),
        paired=paired_vs_reference(reps, keys, reference, test),
        reference=label(reference, []) if reference is not None else None, test=test,
        family=family, notes=notes)


def counted_runs(runs: pd.DataFrame, curves: pd.DataFrame, keys: list[str],
                 notes: list[str]) -> pd.DataFrame:
    """The runs that count (completed or diverged, a repeat once), each with ℓ₀ (`l0`) and the
    value of each reading: min(ℓ, ℓ₀), or ℓ₀ for a diverged run."""
    counted = runs[runs["status"].isin(COUNTED)].copy()
    if "duplicate_of" in counted.columns:
        counted = counted[counted["duplicate_of"].isna()]
    for kind, unused in UNUSED_KEYS.items():  # norm=none in two γ-init studies is one curve
        counted.loc[counted["norm.kind"] == kind, [k for k in keys if k in unused]] = math.nan
    # A diverged run has no duplicate_of (only completed runs get one): a retried trial's
    # diverged run, or a kind's run under a key it does not read, is the same deterministic
    # run again, so one per (group, lr, replicate).
    place = [*keys, LR, *REPLICATE]
    again = counted.duplicated(place)
    if again.any():
        notes.append(f"{int(again.sum())} run(s) repeat another run's group, lr and replicate "
                     "(a retried trial's, or one under a key its norm does not read): counted "
                     "once")
    counted = counted[~again]
    l0 = stats.at_step0(counted, curves, ["val_loss"])["val_loss"].to_numpy(dtype=float)
    if np.isnan(l0).any():
        notes.append(f"{int(np.isnan(l0).sum())} run(s) without an eval at step 0 (no ℓ₀): "
                     "their replicate has no sensitivity")
    heads = [c for c in results.logit_layer_columns(counted.columns) if HEAD.match(c)]
    frame = counted[[*keys, LR, *REPLICATE, "status", "run_dir", "attn_logit_max", *heads]].copy()
    frame["l0"] = l0
    diverged = (counted["status"] == DIVERGED).to_numpy()
    for reading in READINGS:
        value = np.minimum(counted[reading].to_numpy(dtype=float), l0)
        frame[reading] = np.where(diverged, l0, value)
    return frame.reset_index(drop=True)


def _groups(frame: pd.DataFrame, keys: list[str]):
    for values, group in frame.groupby(keys, dropna=False, sort=True):
        yield dict(zip(keys, values if isinstance(values, tuple) else (values,))), group


def replicate_sensitivity(points: pd.DataFrame, keys: list[str], notes: list[str]
                          ) -> pd.DataFrame:
    """One row per (group, replicate): the lr it misses of its group's grid, ℓ* and the
    sensitivity of each reading (NaN where an lr or ℓ₀ is missing)."""
    rows, short = [], 0
    for row, group in _groups(points, keys):
        grid = set(group[LR])
        for rep, runs in group.groupby(REPLICATE, sort=True):
            missing = len(grid - set(runs[LR]))
            short += missing > 0
            out = {**row, **dict(zip(REPLICATE, rep)), "n_lr": runs[LR].nunique(),
                   "missing_lr": missing}
            for reading, name in READINGS.items():
                values = runs[reading].to_numpy(dtype=float)
                out[f"l_star_{reading}"] = values.min()
                out[name] = (values.mean() - values.min()) if not missing else math.nan
            rows.append(out)
    if short:
        notes.append(f"{short} replicate(s) miss an lr of their group's grid (a run failed, was "
                     "pruned or has not finished): no sensitivity for them")
    columns = [*keys, *REPLICATE, "n_lr", "missing_lr",
               *(f"l_star_{r}" for r in READINGS), *READINGS.values()]
    return pd.DataFrame(rows, columns=columns)


def max_stable_lr(group: pd.DataFrame) -> float:
    """The largest lr at which every replicate of the group completed (NaN: at none)."""
    everyone = set(map(tuple, group[REPLICATE].to_numpy().tolist()))
    stable = [lr for lr, at in group.groupby(LR)
              if (at["status"] == COMPLETED).all()
              and set(map(tuple, at[REPLICATE].to_numpy().tolist())) == everyone]
    return max(stable) if stable else math.nan


def best_lr(group: pd.DataFrame) -> float:
    """The lr with the lowest mean over the group's runs of min(ℓ, ℓ₀) (the final val loss as
    the sensitivity reads it, a diverged run at ℓ₀): the smaller lr on a tie."""
    return float(group.groupby(LR)["val_loss"].mean().idxmin())


def group_summary(points: pd.DataFrame, reps: pd.DataFrame, keys: list[str],
                  test: ReplicateTest) -> pd.DataFrame:
    """Per group: runs, diverged, the grid, the max stable lr, the best lr and each reading's
    sensitivity, mean, std and 95% interval over its replicates under `test`."""
    rows = []
    for row, group in _groups(points, keys):
        out = {**row, "runs": len(group), "diverged": int((group["status"] == DIVERGED).sum()),
               "n_lr": group[LR].nunique(), "lr_min": group[LR].min(), "lr_max": group[LR].max(),
               "max_stable_lr": max_stable_lr(group), "best_lr": best_lr(group)}
        mine = reps[_nan_match(reps, row)]
        for name in READINGS.values():
            n, mean, std, low, high = stats.t_interval(stats.replicates(mine, name, test)[0],
                                                       test)
            out.update({f"{name}_n": n, f"{name}_mean": mean, f"{name}_std": std,
                        f"{name}_ci_low": low, f"{name}_ci_high": high})
        rows.append(out)
    return pd.DataFrame(rows)


def _nan_match(frame: pd.DataFrame, row: dict) -> pd.Series:
    """Rows of `frame` equal to `row` on its keys, NaN matching NaN (norm.p of norm=none)."""
    match = pd.Series(True, index=frame.index)
    for key, value in row.items():
        match &= frame[key].isna() if pd.isna(value) else frame[key] == value
    return match


def by_lr(points: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group and lr: runs, diverged, each reading's mean and sd over its runs (the values
    the sensitivity averages), and the largest attention logit at the end, mean over runs."""
    rows = []
    for row, group in _groups(points, keys):
        for lr, at in group.groupby(LR, sort=True):
            out = {**row, LR: lr, "runs": len(at),
                   "diverged": int((at["status"] == DIVERGED).sum()),
                   "attn_logit_max": at["attn_logit_max"].mean()}
            for reading in READINGS:
                out[f"{reading}_mean"] = at[reading].mean()
                out[f"{reading}_std"] = at[reading].std(ddof=1) if len(at) > 1 else math.nan
            rows.append(out)
    return pd.DataFrame(rows)


def reference_of(points: pd.DataFrame, keys: list[str]) -> dict | None:
    """The arm every other is compared with: QKNorm (norm=l2, else lp at p = 2, with QKNorm's γ
    init and no other control), else norm=none without a control; None when neither was run.
    Its values of the arm's keys (arms.is_arm_key): the setting keys are matched per group
    (paired_vs_reference), so each width has its own reference."""
    names = arms.arm_names(points)
    kinds = points["norm.kind"]
    for chosen in ((names == arms.REFERENCE) & (kinds == "l2"), names == arms.REFERENCE,
                   names == arms.FALLBACK):
        if chosen.any():
            first = points[chosen].iloc[0]
            return {k: first[k] for k in keys if arms.is_arm_key(k)}
    return None


def paired_vs_reference(reps: pd.DataFrame, keys: list[str], reference: dict | None,
                        test: ReplicateTest) -> pd.DataFrame:
    """Δ sensitivity (group − reference) per group, paired by replicate (stats.replicates under
    `test`), against the reference of the same setting (arms.setting_keys: the same width);
    Holm over the t p of each setting's comparisons (the whole table when there is one)."""
    columns = [*keys, "n_pairs", "delta_mean", "delta_ci_low", "delta_ci_high", "t_pvalue",
               "holm_pvalue", "d_z", "note"]
    if reference is None:
        return pd.DataFrame(columns=columns)
    name = READINGS["val_loss"]
    is_ref = _nan_match(reps, reference)
    setting = arms.setting_keys(keys)
    rows = []
    for row, group in _groups(reps, keys):
        if all(_same(row[k], v) for k, v in reference.items()):
            continue
        base = reps[is_ref & _nan_match(reps, {k: row[k] for k in setting})]
        x = stats.replicates(group, name, test)[0]
        b = stats.replicates(base, name, test)[0]
        common = x.index.intersection(b.index)
        result = stats.paired_test(x[common].to_numpy(), b[common].to_numpy(), test)
        rows.append({**row, "n_pairs": result.n, "delta_mean": result.mean,
                     "delta_ci_low": result.ci_low, "delta_ci_high": result.ci_high,
                     "t_pvalue": result.t_pvalue, "d_z": result.d_z,
                     "note": "; ".join(n for n in result.note.split("; ")  # no Wilcoxon here
                                       if n and "Wilcoxon" not in n)})
    table = pd.DataFrame(rows, columns=columns)
    table["holm_pvalue"] = holm_within(table, setting)
    return table


def holm_within(table: pd.DataFrame, family: list[str]) -> pd.Series:
    """Holm-adjusted t p within each value of the `family` keys (one family without them)."""
    adjusted = pd.Series(math.nan, index=table.index, dtype=float)
    if not len(table):
        return adjusted
    for _, rows in (table.groupby(family, dropna=False) if family else [(None, table)]):
        adjusted[rows.index] = holm(rows["t_pvalue"])
    return adjusted


def _same(a, b) -> bool:
    return (pd.isna(a) and pd.isna(b)) or a == b


# ---------------------------------------------------------------------------------------------
# Across width (issue 46): Wortsman et al. found the effect in how sensitivity grows with width.

WIDTH = "model.n_embd"
HEADS = "model.n_head"  # the ladder keeps the head dim: its head count goes with the width
GRID = ["n_lr", "lr_min", "lr_max"]  # a group's lr grid, as group_summary gives it


def has_widths(lr: LRSensitivity) -> bool:
    """The groups read span several widths: the width view applies (a width whose runs are
    all at one lr so far has no group)."""
    return WIDTH in lr.family


def width_view(lr: LRSensitivity) -> pd.DataFrame | None:
    """One row per group, by width then arm (the reference first): `width`, `arm` (its name,
    arms.arm_names), `series` (the arm and any setting key besides the width: what one line of
    the figure joins), the replicates, the sensitivity (final) with its interval, the best and
    max stable lr, its lr grid (GRID), and Δ vs the reference of its width with t and Holm p
    (NaN on the reference's row). None unless the groups span several widths."""
    if not has_widths(lr):
        return None
    summary = lr.summary.reset_index(drop=True)
    name = READINGS["val_loss"]
    frame = pd.DataFrame({
        "width": summary[WIDTH].astype(int), "arm": arms.arm_names(summary),
        "series": series_names(summary, lr.keys), "n": summary[f"{name}_n"],
        **{c: summary[f"{name}_{c}"] for c in ("mean", "ci_low", "ci_high")},
        "best_lr": summary["best_lr"], "max_stable_lr": summary["max_stable_lr"],
        **{c: summary[c] for c in GRID}})
    if HEADS in lr.keys:
        frame.insert(1, "heads", summary[HEADS].astype(int))
    delta = ["delta_mean", "delta_ci_low", "delta_ci_high", "t_pvalue", "holm_pvalue", "n_pairs"]
    frame[delta] = math.nan
    frame["reference"] = lr.reference is not None  # paired_vs_reference skips the reference
    for i, row in summary.iterrows():
        match = lr.paired[_nan_match(lr.paired, {k: row[k] for k in lr.keys})]
        if len(match):
            frame.loc[i, delta] = match.iloc[0][delta].to_numpy(dtype=float)
            frame.loc[i, "reference"] = False
    order = frame.assign(other=~frame["reference"]).sort_values(["width", "other", "series"])
    return order.drop(columns="other").reset_index(drop=True)


def series_names(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Per row (a group, a run) its arm, plus each setting key other than the width and its
    heads (a second study's optimizer.grad_clip under one root): what one line of the width
    figure joins across widths, and one panel of the per-head figure holds."""
    others = [k for k in arms.setting_keys(keys) if k not in (WIDTH, HEADS)]
    names = arms.arm_names(frame)
    return pd.Series([" ".join([n, *(f"{k}={r[k]}" for k in others)])
                      for n, (_, r) in zip(names, frame.iterrows())], index=frame.index)
