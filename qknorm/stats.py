"""Statistics over completed runs (scipy.stats): per-p intervals, paired deltas vs a baseline p.

Everything here takes the runs DataFrame of qknorm.results and keeps only `completed` runs:
diverged, pruned, failed and incomplete runs are counted by `excluded` and never averaged.
Groups are the values of norm.p (plus norm.kind when several kinds were run, plus any key the
user names); pairs are runs with the same (seed, data.fold), so a delta compares like with like.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from qknorm.config import P_KINDS
from qknorm.errors import UserError
from qknorm.rundir import COMPLETED, INCOMPLETE, STATUSES

CONFIDENCE = 0.95
PAIR_KEYS = ["seed", "data.fold"]


def completed(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == COMPLETED]


def excluded(df: pd.DataFrame) -> dict[str, int]:
    """{status: count} of the runs statistics leave out, in a fixed order."""
    counts = df.loc[df["status"] != COMPLETED, "status"].value_counts()
    return {s: int(counts[s]) for s in (*STATUSES, INCOMPLETE) if s in counts}


def group_keys(df: pd.DataFrame, by: list[str] | tuple[str, ...] = ()) -> list[str]:
    kinds = ["norm.kind"] if df["norm.kind"].nunique(dropna=False) > 1 else []
    return kinds + ["norm.p"] + [k for k in by if k not in ("norm.p", "norm.kind")]


def t_interval(values) -> tuple[int, float, float, float, float]:
    """(n, mean, std, low, high): sample std (ddof=1) and the 95% Student-t interval of the mean.

    std and the interval are NaN for n < 2: one run says nothing about spread.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return 0, math.nan, math.nan, math.nan, math.nan
    mean = float(x.mean())
    if n < 2:
        return 1, mean, math.nan, math.nan, math.nan
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * std / math.sqrt(n)
    return n, mean, std, mean - half, mean + half


def group_summary(df: pd.DataFrame, metrics: list[str], by: list[str] | tuple[str, ...] = ()
                  ) -> pd.DataFrame:
    """One row per group of completed runs: n, then mean, std, ci_low, ci_high per metric."""
    done = completed(df)
    keys = group_keys(df, by)
    rows = []
    for values, group in done.groupby(keys, dropna=False, sort=True):
        row = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
        for metric in metrics:
            n, mean, std, low, high = t_interval(group[metric].dropna())
            row["n"] = len(group)
            row.update({f"{metric}_mean": mean, f"{metric}_std": std,
                        f"{metric}_ci_low": low, f"{metric}_ci_high": high})
        rows.append(row)
    columns = keys + ["n"] + [f"{m}_{s}" for m in metrics for s in ("mean", "std", "ci_low",
                                                                     "ci_high")]
    return pd.DataFrame(rows, columns=columns)


def best(summary: pd.DataFrame, metric: str, by: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """The group with the lowest mean metric (one per combination of the `by` keys)."""
    ranked = summary.dropna(subset=[f"{metric}_mean"]).sort_values(f"{metric}_mean", kind="stable")
    by = [k for k in by if k in summary.columns and k not in ("norm.p", "norm.kind")]
    return ranked.groupby(by, dropna=False).head(1) if by else ranked.head(1)


def check_baseline(df: pd.DataFrame, baseline: float) -> None:
    """UserError unless some Lp run used norm.p == baseline."""
    ps = df.loc[df["norm.kind"].isin(P_KINDS), "norm.p"].dropna().unique()
    if not any(p == baseline for p in ps):
        run = ", ".join(format_p(p) for p in sorted(ps)) or "none"
        raise UserError(f"--baseline {format_p(baseline)}: no run used norm.p={format_p(baseline)} "
                        f"(p values run: {run}); pass --baseline with one of those")


@dataclass
class PairedTest:
    n: int
    mean: float
    ci_low: float
    ci_high: float
    t_pvalue: float
    wilcoxon_pvalue: float
    note: str


def paired_test(x, base) -> PairedTest:
    """Delta x - base over pairs: mean, 95% t-interval, paired-t and Wilcoxon p-values.

    Too few pairs is said in `note`, never an exception: 1 pair gives no test; with k non-zero
    differences the smallest two-sided Wilcoxon p-value is 2/2^k, so k < 6 cannot reach 0.05.
    """
    x, base = np.asarray(x, dtype=float), np.asarray(base, dtype=float)
    d = x - base
    n, mean, _, low, high = t_interval(d)
    t_p = w_p = math.nan
    notes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero variance: scipy warns and returns nan, said below
        if n < 2:
            notes.append(f"{n} pair(s): too few for a test")
        else:
            if np.ptp(d) <= 1e-12 * max(1.0, abs(mean)):  # rounding noise is not variance
                notes.append("all differences equal: no t-test")
            else:
                t_p = float(stats.ttest_rel(x, base).pvalue)
            nonzero = int(np.count_nonzero(d))
            if nonzero == 0:
                notes.append("all differences are zero: no Wilcoxon test")
            else:
                w_p = float(stats.wilcoxon(x, base).pvalue)
                if 2.0 / 2**nonzero > 1 - CONFIDENCE:
                    notes.append(f"{nonzero} non-zero pairs: Wilcoxon cannot go below "
                                 f"p={2.0 / 2**nonzero:.3g}")
    return PairedTest(n, mean, low, high, t_p, w_p, "; ".join(notes))


def _pair_table(group: pd.DataFrame, metric: str) -> tuple[pd.Series, int]:
    """metric indexed by (seed, data.fold); runs that share a pair key are averaged (counted)."""
    rows = group.dropna(subset=[metric])
    dupes = int(rows.duplicated(PAIR_KEYS).sum())
    return rows.groupby(PAIR_KEYS)[metric].mean(), dupes


def paired_vs_baseline(df: pd.DataFrame, metric: str, baseline: float,
                       by: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """Delta (group - baseline p) of metric per group, paired by (seed, data.fold)."""
    done = completed(df)
    keys = group_keys(df, by)
    extra = [k for k in keys if k not in ("norm.kind", "norm.p")]
    is_base = done["norm.kind"].isin(P_KINDS) & (done["norm.p"] == baseline)
    rows = []
    for values, group in done.groupby(keys, dropna=False, sort=True):
        row = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
        if group.index.isin(done.index[is_base]).all():
            continue  # the baseline itself
        base = done[is_base]
        for k in extra:  # compare within the same value of every other named key
            base = base[base[k] == row[k]]
        x, dx = _pair_table(group, metric)
        b, db = _pair_table(base, metric)
        common = x.index.intersection(b.index)
        test = paired_test(x[common].to_numpy(), b[common].to_numpy())
        notes = [test.note] if test.note else []
        if dx or db:
            notes.append(f"{dx + db} run(s) share a (seed, data.fold) with another: averaged")
        row.update({"n_pairs": test.n, "delta_mean": test.mean, "delta_ci_low": test.ci_low,
                    "delta_ci_high": test.ci_high, "t_pvalue": test.t_pvalue,
                    "wilcoxon_pvalue": test.wilcoxon_pvalue, "note": "; ".join(notes)})
        rows.append(row)
    columns = keys + ["n_pairs", "delta_mean", "delta_ci_low", "delta_ci_high", "t_pvalue",
                      "wilcoxon_pvalue", "note"]
    return pd.DataFrame(rows, columns=columns)


def ranking_by_step(curves: pd.DataFrame, metric: str = "val_loss") -> pd.DataFrame:
    """Does the ranking of p settle? One row per eval step that every p reached: the p values
    ordered by their mean metric over completed runs (best first), and Kendall's tau between
    that step's means and the last step's (1: the final order already).

    `curves` is qknorm.results.collect_curves's frame. Runs without p (none, rms) are left out.
    """
    done = curves[(curves["status"] == COMPLETED) & curves["norm.kind"].isin(P_KINDS)]
    means = done.groupby(["step", "norm.p"])[metric].mean().unstack("norm.p").dropna()
    if means.shape[0] == 0 or means.shape[1] < 2:
        return pd.DataFrame(columns=["step", "order", "kendall_tau"])
    last = means.iloc[-1].to_numpy()
    rows = []
    for step, row in means.iterrows():
        order = " < ".join(format_p(p) for p in row.sort_values(kind="stable").index)
        tau = stats.kendalltau(row.to_numpy(), last).statistic
        rows.append({"step": int(step), "order": order, "kendall_tau": float(tau)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# two readings of one run: its best val loss, and its val loss at the last step

READINGS = ("best_val_loss", "val_loss")


def readings_summary(df: pd.DataFrame, by: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """Per group of completed runs: both readings' n, mean, std and 95% t-interval, the median
    step of the best eval (`best_step`, qknorm.results.add_best_step) and the fraction of runs
    whose best eval was their last (`best_at_end`: still improving when training stopped)."""
    summary = group_summary(df, list(READINGS), by)
    done = completed(df)
    keys = group_keys(df, by)
    ends = done.assign(best_at_end=(done["best_step"] >= done["steps"]).astype(float))
    extra = ends.groupby(keys, dropna=False, sort=True).agg(
        best_step_median=("best_step", "median"), best_at_end=("best_at_end", "mean"))
    return summary.merge(extra.reset_index(), on=keys, how="left")


@dataclass(frozen=True)
class Disagreement:
    """How the two readings order the groups, when they do not order them alike."""

    kendall_tau: float  # between the groups' mean best and mean final val loss
    best_by_best: int  # row of readings_summary with the lowest mean best_val_loss
    best_by_final: int  # ... and with the lowest mean val_loss
    improving: list[int]  # rows whose runs mostly had their best eval last
    past_best: list[int]  # rows whose runs mostly peaked before the end


def readings_disagree(summary: pd.DataFrame) -> Disagreement | None:
    """None when both readings give the same order of groups (or there is nothing to order)."""
    if len(summary) < 2:
        return None
    best, final = summary["best_val_loss_mean"], summary["val_loss_mean"]
    tau = float(stats.kendalltau(best.to_numpy(), final.to_numpy()).statistic)
    if (best.rank(method="min") == final.rank(method="min")).all():
        return None
    improving = summary.index[summary["best_at_end"] >= 0.5]
    return Disagreement(tau, int(best.idxmin()), int(final.idxmin()), list(improving),
                        [i for i in summary.index if i not in improving])


def format_p(p: float) -> str:
    """2.0 -> '2', 2.5 -> '2.5', inf -> 'inf', NaN -> '-' (a kind without p)."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    if math.isinf(p):
        return "inf"
    return f"{p:g}"
