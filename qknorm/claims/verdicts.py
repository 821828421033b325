"""The words a page's comparisons are written in, from their tests by one rule (issue 56), so a
sentence says no more than its numbers. The test is one-sided: "A is more X than B" (a loss's
"worse") is H1: A − B > 0 (docs/report.md, "One test per question").

  asked one way   (the race, the search, the grid's yardstick: behind the leader or the best)
                  its one-sided p, Holm over the comparisons
  asked both ways (a table against a reference, a contrast: more or less) each comparison's two
                  one-sided hypotheses by Bonferroni, 2 × the smaller p (the two-sided p), Holm
                  over the comparisons of its family: the report's Holm p
  the call        hydra_racing_sweeper.decision's outcome of those p, the (1 − 2α) interval and δ (level
                  first, then shown one way or the other, else not shown; marginal where the
                  deciding interval's edge is within δ/10 of its line: the 95% interval's
                  edge nearest 0 for a difference or none), in the pages' words: more, less,
                  level, not shown

`every`, `never`, `none` are not words of this rule: a page writes the count over the runs
counted ("0 of 24 runs diverged"), which the record prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hydra_racing_sweeper import decision
from hydra_racing_sweeper.multitest import ReplicateTest, holm, no_spread

MORE, LESS, LEVEL, NOT_SHOWN = "more", "less", decision.LEVEL, decision.NOT_SHOWN
# A comparison's outcome (hydra_racing_sweeper.decision) in a results page's words: "A is more X than B".
WORDS_OF = {decision.WORSE: MORE, decision.BETTER: LESS, decision.LEVEL: LEVEL,
            decision.NOT_SHOWN: NOT_SHOWN}
WORDS = tuple(WORDS_OF.values())


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
    """The comparison's words from its adjusted (two-sided) p and the way its Δ points:
    hydra_racing_sweeper.decision's outcome asked both ways, with its 95% interval [low, high] for a
    difference's strength and its (1 − 2α) interval for the TOST."""
    said = decision.decide(**decision.both_ways(adjusted, delta), alpha=alpha,
                           tost=(tost_low, tost_high), equivalence=equivalence,
                           interval=(low, high))
    return said.worded(WORDS_OF)
