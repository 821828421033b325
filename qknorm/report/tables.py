"""How summary.md writes a p-value and a table: one home for every section's cells (summary,
lrsection); a number is hydra_racing_sweeper.units.num."""

from __future__ import annotations

from hydra_racing_sweeper.units import num


def pval(x: float) -> str:
    return num(x, ".3g")


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
