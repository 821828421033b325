"""What the report costs: the statistics and the whole report of a results dir, per replicate
test, interleaved in one process (`scripts/bench.py --report DIR`).

The corrected resampled t (hydra_racing_sweeper.multitest) must not make the report slower than the plain
paired t it replaced. Both tests are timed on the same collection, alternating round by round
(paired, corrected, paired, ...) after a warm-up, so other load falls on both alike; the ratio is
taken per round before its median. Two lines per test: `statistics` (compute and summary.md, in
memory) and `report` (build_report: the results read back, every figure rendered).
"""

from __future__ import annotations

import time
from pathlib import Path

from hydra_racing_sweeper.multitest import CORRECTED, PAIRED

from qknorm.bench.steps import spread

TESTS = (PAIRED, CORRECTED)


def _time_statistics(root: Path, test: str, n_folds: int | None) -> float:
    from qknorm.report import Options, compute, load, summarize

    options = Options(test=test, n_folds=n_folds)
    collection = load(root, options)
    start = time.perf_counter()
    summarize(collection, options, None, compute(collection, options))
    return time.perf_counter() - start


def _time_report(root: Path, test: str, n_folds: int | None) -> float:
    from qknorm.report import Options, build_report

    options = Options(test=test, n_folds=n_folds, formats=("png",))
    start = time.perf_counter()
    build_report(root, options)
    return time.perf_counter() - start


def bench_report(root: Path, n_folds: int | None = None, rounds: int = 5,
                 warmup: int = 1) -> dict:
    """Median seconds per test of `statistics` and `report` on the results under root, and the
    corrected / paired ratio of each (per round, then the median)."""
    out = {"dir": str(root), "rounds": rounds}
    for name, timer in (("statistics", _time_statistics), ("report", _time_report)):
        for _ in range(warmup):
            for test in TESTS:
                timer(root, test, n_folds)
        times: dict[str, list[float]] = {test: [] for test in TESTS}
        for _ in range(rounds):
            for test in TESTS:
                times[test].append(timer(root, test, n_folds))
        out[name] = {f"{test}_s": spread(times[test]) for test in TESTS}
        out[name]["corrected / paired"] = spread(
            [c / p for c, p in zip(times[CORRECTED], times[PAIRED], strict=True)])
    return out
