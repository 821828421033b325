"""The one comparison every answer of the sweeper (and of its apps' reports) gives: is a difference
shown worse, shown better, level within ±δ, or not shown either way, and how strong is that call?
Decided here once; the race's looks and answer, the search's intensification and answer, the
report's Δ table and figure, the claims' words, the grids' yardstick and the rung error rates render
this outcome in their own words (race: dropped / worse / undecided; report: worse / better / level
within ±δ / undecided; claims: more / less / level / not shown). No other module compares a p with α
or an interval with δ.

The rule (docs/report.md, "One rule for every verdict"), for a difference Δ = A − B of the
objective (a loss: Δ > 0 is A worse):

  level      the (1 − 2α) interval of Δ lies inside [−δ, +δ] (closed): the TOST at α
             (Schuirmann 1987), each one-sided test rejecting "|Δ| >= δ" at α. Checked first.
  worse      else the adjusted p of H1: Δ > 0 is <= α
  better     else the adjusted p of H1: Δ < 0 is <= α (only where the question is asked both
             ways: a race and a search ask one way, behind or not)
  not shown  else

Why level first: a difference that is both shown and surely inside ±δ is one the user, by
naming δ, called negligible; calling it "worse" on one page and "level" on another is what this
module exists to prevent (a race had dropped p = 3 for a Δ of 0.0035 where the grid had 0.0002).
Its own outcome ("worse, within δ") would be truer to the test but is a fifth word every
audience must render, for a case the user has said does not matter.

Strength (issue 45): a call whose deciding interval ends within a tenth of δ of the line it had
to clear is `marginal`. Level: the TOST interval's edge farthest from 0 against ±δ. Worse,
better or not shown: the difference interval's edge nearest 0 against 0 (a shown call barely
clear of 0, a not-shown one barely short of it). No interval (or no δ): no strength.

What the adjusted p is belongs to the caller: Holm over the race's look, over the search's
proposals, over a report's table (multitest.holm). This module decides; it does not test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LEVEL, WORSE, BETTER, NOT_SHOWN = "level", "worse", "better", "not shown"
OUTCOMES = (LEVEL, WORSE, BETTER, NOT_SHOWN)
MARGINAL, CLEAR = "marginal", "clear"
SHARE = 0.1  # an edge within a tenth of δ of its line: marginal


def _missing(x: float | None) -> bool:
    return x is None or math.isnan(x)


def shown(p_adjusted: float | None, alpha: float) -> bool:
    """The adjusted p rejects at α (closed: p <= α, as multitest.holm's rejection rule); no p
    (None or NaN: no test) never does."""
    return not _missing(p_adjusted) and p_adjusted <= alpha


def level(low: float | None, high: float | None, equivalence: float | None) -> bool:
    """[low, high] lies inside [−δ, +δ] (closed: the TOST's p <= α for the (1 − 2α) interval);
    False without an interval (None or NaN) or without δ."""
    if _missing(equivalence) or _missing(low) or _missing(high):
        return False
    return -equivalence <= low and high <= equivalence


def room(low: float, high: float, equivalence: float) -> float:
    """How far inside ±δ an interval's outer edge lies (negative: outside)."""
    return equivalence - max(abs(low), abs(high))


@dataclass(frozen=True)
class Outcome:
    """One comparison's answer: `word` one of OUTCOMES, `strength` MARGINAL, CLEAR or "" (no
    interval or no δ to judge it by)."""

    word: str
    strength: str = ""

    def worded(self, words: dict[str, str] | None = None) -> str:
        """The call in an audience's words (`words` maps OUTCOMES to them), with " (marginal)"
        where it is: "worse (marginal)"."""
        text = (words or {}).get(self.word, self.word)
        return f"{text} ({MARGINAL})" if self.strength == MARGINAL else text


def strength(word: str, low: float | None, high: float | None,
             equivalence: float | None) -> str:
    """A call's strength from the interval that decides it (see the module's docstring)."""
    if _missing(low) or _missing(high) or _missing(equivalence):
        return ""
    if word == LEVEL:
        return MARGINAL if room(low, high, equivalence) < SHARE * equivalence else CLEAR
    straddles = low <= 0 <= high
    edge = 0.0 if straddles and word != NOT_SHOWN else min(abs(low), abs(high))
    return MARGINAL if edge < SHARE * equivalence else CLEAR


def decide(p_worse: float | None, alpha: float, *, p_better: float | None = None,
           tost: tuple[float | None, float | None] | None = None,
           equivalence: float | None = None,
           interval: tuple[float | None, float | None] | None = None) -> Outcome:
    """The outcome of Δ = A − B (lower is better). `p_worse`, `p_better`: the adjusted p of
    H1: Δ > 0 and of H1: Δ < 0 (None: not asked, or no test); `tost`: Δ's (1 − 2α) interval;
    `equivalence`: δ (None: no level call); `interval`: the interval whose edge nearest 0
    gives a difference's strength (None: the TOST's)."""
    low, high = tost or (None, None)
    if level(low, high, equivalence):
        return Outcome(LEVEL, strength(LEVEL, low, high, equivalence))
    word = (WORSE if shown(p_worse, alpha) else BETTER if shown(p_better, alpha)
            else NOT_SHOWN)
    return Outcome(word, strength(word, *(interval or (low, high)), equivalence))


def both_ways(p_adjusted: float | None, delta: float | None) -> dict[str, float | None]:
    """A question asked both ways with one adjusted two-sided p (2 × the smaller one-sided p,
    Holm over a table): the p counts for the way Δ points. decide(**both_ways(p, Δ), ...)"""
    if _missing(delta) or delta == 0:
        return {"p_worse": None, "p_better": None}
    return {"p_worse": p_adjusted, "p_better": None} if delta > 0 else {
        "p_worse": None, "p_better": p_adjusted}
