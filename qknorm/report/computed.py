"""What a report computes, and from which options: every number summary.md and the figures
show, computed once (qknorm.report.stats) before any formatting."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from hydra_racing_sweeper.multitest import AUTO as AUTO_TEST
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest

from qknorm.report import lrsens, readings, results, stats, timing
from qknorm.report.baseline import AUTO, continuous_p

DEFAULT_METRIC = "best_val_loss"
TIME_METRIC = "wall_time_s"
DEFAULT_EQUIVALENCE = 0.02


@dataclass
class Options:
    metric: str = DEFAULT_METRIC
    baseline: float | str | None = AUTO  # a p, "auto" (2, or see resolve_baseline), None
    baseline_note: str = ""  # set by load(): what "auto" did when p = 2 was not run
    by: list[str] = field(default_factory=list)
    logx: bool = False
    formats: tuple[str, ...] = ("png", "pdf")
    # δ of the Δ table's verdict (the metric's units, nats for a loss): "level within ±δ" where
    # the 90% t-interval of Δ (the replicate test's) lies inside ±δ (TOST at 5%).
    equivalence: float = DEFAULT_EQUIVALENCE
    # The replicate test (hydra_racing_sweeper.multitest): auto (corrected over folds, paired over seeds),
    # corrected or paired; n_folds: the fold layout when results.csv lacks data.n_folds.
    test: str = AUTO_TEST
    n_folds: int | None = None
    replicate_test: ReplicateTest = PAIRED_T  # set by load(): the test every number uses


@dataclass
class Statistics:
    """Every number summary.md shows, each computed once (qknorm.report.stats), before any formatting."""

    keys: list[str]  # the group columns: norm.p, plus norm.kind and --by keys when they vary
    excluded: dict[str, int]  # status -> runs left out of statistics
    folded: pd.Series  # label (norm=none, p=2) -> completed runs counted once (results.duplicates)
    per_metric: dict[str, pd.DataFrame]  # the chosen metric -> its group_summary
    # TIME_METRIC by its median and range (timing.timing_summary); None when it is the metric
    timing: pd.DataFrame | None
    best: pd.DataFrame
    paired: pd.DataFrame | None  # None without a baseline
    # final and best val loss side by side: None for runs collected without their curves
    readings: pd.DataFrame | None
    readings_paired: dict[str, pd.DataFrame]  # reading -> paired Δ vs the baseline
    disagreement: readings.Disagreement | None
    ranking: pd.DataFrame | None  # None without curves, or with --by
    fits: pd.DataFrame | None  # a continuous search: stats.fit_minima per --by series; else None
    attention: pd.DataFrame | None = None  # stats.attention_summary: empty without diagnostics
    # the learning-rate reading (lrsens.compute): a sweep over optimizer.lr with its curves
    lr: lrsens.LRSensitivity | None = None
    test: ReplicateTest = PAIRED_T  # what made every interval, p-value and verdict


def compute(collection: results.Collection, options: Options,
            curves: pd.DataFrame | None = None) -> Statistics:
    runs, metric, by, test = collection.runs, options.metric, options.by, options.replicate_test
    per_metric = {metric: stats.group_summary(runs, [metric], by, test)}
    both = readings.readings_summary(runs, by, test) if "best_step" in runs else None
    compared = [metric, *(readings.READINGS if both is not None else ())]
    paired = ({m: stats.paired_vs_baseline(runs, m, options.baseline, by, options.equivalence,
                                           test)
               for m in dict.fromkeys(compared)} if options.baseline is not None else {})
    return Statistics(
        keys=stats.group_keys(runs, by), excluded=stats.excluded(runs),
        folded=results.duplicates(runs), per_metric=per_metric,
        timing=timing.timing_summary(runs, [TIME_METRIC], by) if metric != TIME_METRIC else None,
        best=stats.best(per_metric[metric], metric, by), paired=paired.get(metric),
        ranking=stats.ranking_by_step(curves) if curves is not None and not by else None,
        readings=both, readings_paired={m: paired[m] for m in readings.READINGS if m in paired},
        disagreement=readings.readings_disagree(both) if both is not None else None,
        fits=stats.fit_minima(runs, metric, by) if continuous_p(runs) else None,
        attention=stats.attention_summary(runs, curves, by, test) if curves is not None
        else None,
        lr=lrsens.compute(runs, curves, by, test) if curves is not None else None,
        test=test,
    )
