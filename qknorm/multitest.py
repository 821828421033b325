"""The tests the report (qknorm.report.stats) and the sweeper's race (qknorm.sweep.racestats)
share: Holm's multiple-comparison correction and the TOST's equivalence interval, in plain Python
(scipy.special at most): the sweeper must not pay for importing scipy.stats or pandas (seconds at
every start)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def no_spread(d: Sequence[float]) -> bool:
    """Differences that are all equal up to rounding (rounding noise is not variance)."""
    return max(d) - min(d) <= 1e-12 * max(1.0, abs(statistics.fmean(d)))


def tost_interval(d: Sequence[float], alpha: float) -> tuple[float, float]:
    """The paired (1 - 2 alpha) Student-t interval of mean(d) (n >= 2 differences): it lies
    inside [-δ, +δ] exactly when both one-sided tests at alpha (H0: mean <= -δ, H0: mean >= δ)
    reject, i.e. the TOST's equivalence at alpha (Schuirmann 1987). Without spread it is the
    mean itself."""
    n, mean = len(d), statistics.fmean(d)
    if no_spread(d):
        return mean, mean
    from scipy.special import stdtrit  # Student t quantile; scipy.stats is slow to import

    half = float(stdtrit(n - 1, 1 - alpha)) * statistics.stdev(d) / math.sqrt(n)
    return mean - half, mean + half


def within(low: float | None, high: float | None, equivalence: float | None) -> bool:
    """The interval [low, high] lies inside [-δ, +δ] (closed: TOST p <= alpha); False without
    an interval (None or NaN) or without δ."""
    if equivalence is None or low is None or high is None or math.isnan(low) or math.isnan(high):
        return False
    return -equivalence <= low and high <= equivalence


def holm(pvalues: Iterable[float]) -> list[float]:
    """Holm–Bonferroni step-down adjusted p-values, in the input's order.

    Sorted ascending, the i-th smallest of m becomes (m - i + 1) p_(i), made non-decreasing
    (a larger p never gets a smaller adjusted p) and capped at 1. Rejecting where the adjusted
    p <= alpha controls the family-wise error rate at alpha under any dependence between the
    tests. NaN p-values (too few pairs: no test) stay NaN and are not counted in m: a
    comparison that was never tested cannot be a false rejection.
    """
    p = [float(x) for x in pvalues]
    tested = sorted((i for i, x in enumerate(p) if not math.isnan(x)), key=lambda i: p[i])
    adjusted, running = [math.nan] * len(p), 0.0
    for rank, i in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p[i]))
        adjusted[i] = running
    return adjusted
