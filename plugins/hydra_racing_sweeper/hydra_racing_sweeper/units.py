"""How a number or a time is written where a line or a table shows it: `num`, the one number
formatter (the race's and the search's console lines, the status; an app's report may use it
too), and `duration`. Plain Python: the status line, which must stay light, writes with them."""

from __future__ import annotations

import math
from typing import Any


def num(x: Any, spec: str | None = None, missing: str = "-") -> str:
    """x in format `spec` (".4f", "+.4f", ".3g"); with none, by size: 4 decimals below 10 (losses),
    2 below 1000, none above (seconds, tokens/s). `missing` where there is no number: None, NaN,
    pandas' NA."""
    if _missing(x):
        return missing
    if spec is None:
        spec = ".4f" if abs(x) < 10 else ".2f" if abs(x) < 1000 else ".0f"
    return format(x, spec)


def _missing(x: Any) -> bool:
    if x is None:
        return True
    try:
        return bool(x != x)  # NaN (and NaT) differ from themselves
    except TypeError:  # pandas' NA: comparing it gives NA, whose truth is ambiguous
        return True


def duration(seconds: float) -> str:
    """45s, 12m30s, 2h05m, 3d04h: two units, enough for an ETA."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def finite(x: Any) -> bool:
    """x is a number to count: an int or a float, finite, not a bool (a record's steps, its
    wall time and threads)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
