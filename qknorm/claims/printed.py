"""How a number printed on a page agrees with the value recomputed from the runs: to the digits
it was printed with (0.0073 agrees with 0.00734, not with 0.00736), and how a page quotes a
record with fewer digits (+0.033 for +0.0331)."""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_EVEN, Decimal

# A printed number: sign, digits with thousands commas, decimals, an exponent; or inf.
NUMBER = re.compile(r"^(?P<sign>[+\-−]?)(?P<digits>\d[\d,]*)(?:\.(?P<dec>\d+))?(?:e(?P<exp>[+-]?\d+))?$")
MISSING = "-"  # a cell with no value (a group with no test), as the report prints it


def is_number(text: str) -> bool:
    return bool(NUMBER.match(text)) or text in ("inf", "-inf")


def value(text: str) -> float:
    """The float a printed number stands for (commas and a Unicode minus allowed)."""
    return float(text.replace(",", "").replace("−", "-"))


def agrees(printed: str, computed: object) -> bool:
    """Whether `computed` printed with `printed`'s digits reads the same: its decimals for a
    fixed-point number, its mantissa's for a number with an exponent. Words (a verdict) agree
    when equal; "-" agrees with a missing value (None or NaN)."""
    if printed == MISSING:
        return computed is None or (isinstance(computed, float) and math.isnan(computed))
    if isinstance(computed, str) or computed is None:
        return printed == computed
    x = float(computed)
    m = NUMBER.match(printed)
    if m is None:
        return printed in ("inf", "-inf") and x == value(printed)
    if math.isnan(x) or math.isinf(x):
        return False
    decimals = len(m["dec"] or "")
    shown = f"{x:.{decimals}e}" if m["exp"] is not None else f"{x:.{decimals}f}"
    return float(shown) == value(printed)


def quote(printed: str, decimals: int) -> str:
    """`printed` rounded to `decimals` (half to even, as Python's format rounds), its sign kept:
    what a page writes when it quotes a record with fewer digits."""
    m = NUMBER.match(printed)
    if m is None or m["exp"] is not None:
        return printed
    q = Decimal(printed.replace(",", "").replace("−", "-")).quantize(
        Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_EVEN)
    text = f"{abs(q):,.{decimals}f}" if "," in printed else f"{abs(q):.{decimals}f}"
    sign = "-" if q < 0 or (q == 0 and m["sign"] in "-−" and m["sign"]) else (
        "+" if m["sign"] == "+" else "")
    return sign + text


def full(computed: object, like: str = "") -> str:
    """A computed value in a message: enough digits to see where it differs, signed as the
    printed value `like` is."""
    if isinstance(computed, float):
        return f"{computed:{'+' if like.startswith('+') else ''}.6g}"
    return str(computed)
