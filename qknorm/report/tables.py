"""How summary.md writes a number, a p-value and a table: one home for every section's cells
(summary, lrsection)."""

from __future__ import annotations

import math

import pandas as pd


def num(x: float) -> str:
    """4 decimals for losses, fewer for seconds and tokens/s."""
    if x is None or pd.isna(x):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.4f}" if abs(x) < 10 else f"{x:.2f}" if abs(x) < 1000 else f"{x:.0f}"


def pval(x: float) -> str:
    return "-" if x is None or pd.isna(x) else f"{x:.3g}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
