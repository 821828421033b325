"""How a number is written where a table or a line shows it: `num`, the one formatter (the
report's tables, the race's and the search's console lines, the paper's table, the architecture
comparison). Plain Python: the status line, which must stay light, writes with it too."""

from __future__ import annotations

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
