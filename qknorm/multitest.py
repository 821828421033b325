"""Multiple-comparison correction, in plain Python: the report (qknorm.report.stats) and the sweeper's
race (qknorm.sweep.racestats) share it, and the sweeper must not pay for importing scipy.stats or pandas
(seconds at every start)."""

from __future__ import annotations

import math
from collections.abc import Iterable


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
