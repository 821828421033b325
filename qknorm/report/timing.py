"""Timings (wall time per run, tokens/s), summarised by the median and range of their runs.

A timing is positive and skewed (a run that shared its cores takes twice as long), and with two
or three replicates a t-interval of its mean goes below zero; the replicate test's correction is
for folds whose training sets overlap, which shapes a loss, not a second. So the report quotes a
timing as the benchmarks do (docs/performance.md): the median, with the min and max, of the runs.
summary.md's time table and the time_vs_p figure both take it from here.
"""

from __future__ import annotations

import pandas as pd

from qknorm.report.stats import completed, group_keys

TIMING = ("median", "min", "max")  # a timing's columns: <metric>_median, _min, _max


def by_group(runs: pd.DataFrame, metrics: list[str], keys: list[str]) -> pd.DataFrame:
    """One row per value of `keys` among `runs`: n (runs), then per metric the median, min and
    max over its runs (NaN values left out)."""
    columns = keys + ["n"] + [f"{m}_{s}" for m in metrics for s in TIMING]
    if not len(runs):
        return pd.DataFrame(columns=columns)
    grouped = runs.groupby(keys, dropna=False, sort=True)
    table = grouped[metrics].agg(list(TIMING))
    table.columns = [f"{m}_{s}" for m, s in table.columns]
    table.insert(0, "n", grouped.size())
    return table.reset_index()[columns]


def timing_summary(df: pd.DataFrame, metrics: list[str], by: list[str] | tuple[str, ...] = ()
                   ) -> pd.DataFrame:
    """stats.group_summary's groups of completed runs, each metric a timing: n, median, min, max."""
    return by_group(completed(df), metrics, group_keys(df, by))
