"""A verdict's strength in words (issue 45): a call whose interval ends within a tenth of δ of
the line it had to clear is `marginal`, and the page says so.

The line depends on the call. Level within ±δ: the 90% interval must lie inside ±δ, so its edge
farthest from 0 is held against δ. Worse or better (a grid's Holm-tested call, or a race's
drop): the interval must exclude 0, so its edge nearest 0 is held against 0. A race's calls
are made after repeated looks, none corrected over the looks (docs/race.md): their nominal
level is not their error rate, which a marginal call makes matter most. Undecided is no call.
"""

from __future__ import annotations

import math

MARGINAL, CLEAR = "marginal", "clear"
SHARE = 0.1  # within a tenth of δ of the line: marginal


def room(low: float, high: float, equivalence: float) -> float:
    """How far inside ±δ an interval's outer edge lies (negative: outside)."""
    return equivalence - max(abs(low), abs(high))


def of_level(low: float, high: float, equivalence: float) -> str:
    """A level call's strength: how far inside ±δ its 90% interval's outer edge lies."""
    return MARGINAL if room(low, high, equivalence) < SHARE * equivalence else CLEAR


def of_difference(low: float, high: float, equivalence: float) -> str:
    """A worse (or better) call's strength: how far from 0 its interval's inner edge lies."""
    edge = min(abs(low), abs(high)) if low * high > 0 else 0.0
    return MARGINAL if edge < SHARE * equivalence else CLEAR


def of_call(call: str, low: float | None, high: float | None, equivalence: float,
            level_words: tuple[str, ...], difference_words: tuple[str, ...]) -> str:
    """`marginal` or `clear` for a level or a difference call with its interval; "" for any
    other call (undecided, still racing) or without an interval."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return ""
    if call in level_words:
        return of_level(low, high, equivalence)
    if call in difference_words:
        return of_difference(low, high, equivalence)
    return ""


def worded(call: str, how: str) -> str:
    """The call as a page prints it: `worse`, or `worse (marginal)` where it is."""
    return f"{call} ({MARGINAL})" if how == MARGINAL else call
