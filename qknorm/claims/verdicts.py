"""The words a page's comparisons are written in, from their tests by one rule (issue 56), so a
sentence says no more than its numbers:

  more, less    A is more (less) X than B: its one-sided t-test (H1: A − B > 0, or < 0) has a
                Holm-adjusted p <= α, Holm over every one-sided hypothesis the family asks (a
                comparison asked both ways is two hypotheses). "Worse" is this `more` of a loss:
                the race's, the search's and the grid yardstick's rule (docs/report.md).
  level         the (1 − 2α) interval of A − B lies inside ±δ (TOST at α); checked first, as
                stats.verdict and the race check it
  not shown     neither
  (marginal)    added where an edge of the interval that decides lies within δ/10 of its line:
                for level the 90% interval's outer edge against ±δ (strength.of_level), for a
                difference or none the 95% interval's inner edge against 0

`every`, `never`, `none` are not words of this rule: a page writes the count over the runs
counted ("0 of 24 runs diverged"), which the record prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from qknorm.claims import strength
from qknorm.multitest import ReplicateTest, holm, no_spread, within

MORE, LESS, LEVEL, NOT_SHOWN = "more", "less", "level", "not shown"
WORDS = (MORE, LESS, LEVEL, NOT_SHOWN)


def one_sided(d: Sequence[float], test: ReplicateTest) -> tuple[float, float]:
    """(p of H1: mean(d) > 0, p of H1: mean(d) < 0) under `test`; NaN without a test (fewer
    than 2 differences or no spread)."""
    d = [float(x) for x in d]
    if len(d) < 2 or no_spread(d):
        return math.nan, math.nan
    return test.p_greater(d), test.p_greater([-x for x in d])


def holm_both_ways(ps: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Holm over the family's 2m one-sided hypotheses (each comparison asked both ways):
    (adjusted p of more, adjusted p of less) per comparison."""
    flat = holm([p for pair in ps for p in pair])
    return [(flat[2 * i], flat[2 * i + 1]) for i in range(len(ps))]


def call(more_p: float, less_p: float, low: float, high: float, tost_low: float,
         tost_high: float, equivalence: float, alpha: float) -> str:
    """The comparison's words: more, less, level or not shown, with ` (marginal)` where the
    interval that decides has an edge within δ/10 of its line."""
    if within(tost_low, tost_high, equivalence):
        how = strength.of_level(tost_low, tost_high, equivalence)
        return strength.worded(LEVEL, how)
    word = (MORE if not math.isnan(more_p) and more_p <= alpha else
            LESS if not math.isnan(less_p) and less_p <= alpha else NOT_SHOWN)
    if math.isnan(low) or math.isnan(high):
        return word
    near = min(abs(low), abs(high)) < strength.SHARE * equivalence  # the edge nearest 0
    return strength.worded(word, strength.MARGINAL if near else strength.CLEAR)
