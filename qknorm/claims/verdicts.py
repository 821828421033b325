"""The words a page's comparisons are written in, from their tests by one rule (issue 56), so a
sentence says no more than its numbers. The test is one-sided: "A is more X than B" (a loss's
"worse") is H1: A − B > 0 (docs/report.md, "One test per question").

  asked one way   (the race, the search, the grid's yardstick: behind the leader or the best)
                  its one-sided p, Holm over the comparisons
  asked both ways (a table against a reference, a contrast: more or less) each comparison's two
                  one-sided hypotheses by Bonferroni, 2 × the smaller p (the two-sided p), Holm
                  over the comparisons of its family: the report's Holm p
  more, less      the adjusted p <= α, the way Δ points
  level           the (1 − 2α) interval of A − B lies inside ±δ (TOST at α); checked first, as
                  stats.verdict and the race check it
  not shown       neither
  (marginal)      an edge of the interval that decides lies within δ/10 of its line: for level
                  the 90% interval's outer edge against ±δ (strength.of_level), for a difference
                  or none the 95% interval's edge nearest 0 against 0

`every`, `never`, `none` are not words of this rule: a page writes the count over the runs
counted ("0 of 24 runs diverged"), which the record prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from qknorm.claims import strength
from qknorm.multitest import ReplicateTest, holm, no_spread, within
from qknorm.sweep.race import LEVEL

MORE, LESS, NOT_SHOWN = "more", "less", "not shown"
WORDS = (MORE, LESS, LEVEL, NOT_SHOWN)


def one_sided(d: Sequence[float], test: ReplicateTest) -> tuple[float, float]:
    """(p of H1: mean(d) > 0, p of H1: mean(d) < 0) under `test`; NaN without a test (fewer
    than 2 differences or no spread)."""
    d = [float(x) for x in d]
    if len(d) < 2 or no_spread(d):
        return math.nan, math.nan
    return test.p_greater(d), test.p_greater([-x for x in d])


def holm_both_ways(ps: Sequence[tuple[float, float]]) -> list[float]:
    """Each comparison asked both ways: (p more, p less) -> 2 × the smaller (Bonferroni over its
    two one-sided hypotheses, the two-sided p of a symmetric t), Holm over the comparisons."""
    return holm([min(1.0, 2 * min(more, less)) for more, less in ps])


def call(adjusted: float, delta: float, low: float, high: float, tost_low: float,
         tost_high: float, equivalence: float, alpha: float) -> str:
    """The comparison's words from its adjusted p and the way its Δ points: more, less, level
    or not shown, with ` (marginal)` where the interval that decides has an edge within δ/10
    of its line."""
    if within(tost_low, tost_high, equivalence):
        how = strength.of_level(tost_low, tost_high, equivalence)
        return strength.worded(LEVEL, how)
    shown = not math.isnan(adjusted) and adjusted <= alpha
    word = (MORE if delta > 0 else LESS) if shown else NOT_SHOWN
    if math.isnan(low) or math.isnan(high):
        return word
    near = min(abs(low), abs(high)) < strength.SHARE * equivalence  # the edge nearest 0
    return strength.worded(word, strength.MARGINAL if near else strength.CLEAR)
