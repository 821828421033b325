"""Two readings of one run, its best val loss and its val loss at the last step: per group
side by side, and whether they order the groups alike."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest
from scipy import stats

from qknorm.report.stats import completed, group_keys, group_summary

READINGS = ("best_val_loss", "val_loss")


def readings_summary(df: pd.DataFrame, by: list[str] | tuple[str, ...] = (),
                     test: ReplicateTest = PAIRED_T) -> pd.DataFrame:
    """Per group of completed runs: both readings' n, mean, std and 95% t-interval, the median
    step of the best eval (`best_step`, qknorm.report.results.add_best_step) and the fraction of runs
    whose best eval was their last (`best_at_end`: still improving when training stopped)."""
    summary = group_summary(df, list(READINGS), by, test)
    done = completed(df)
    if done.empty:  # every run diverged or failed: no group, and no key dtype to merge on
        return summary.assign(best_step_median=pd.Series(dtype=float),
                              best_at_end=pd.Series(dtype=float))
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
