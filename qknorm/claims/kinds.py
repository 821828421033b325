"""Every kind of record and what computes it: kind -> function(record, runs) -> rows -> fields
-> value (a float, an int or a word), the values the record's printed ones are held against."""

from __future__ import annotations

from collections.abc import Callable

from qknorm.claims import grids, races, studies
from qknorm.claims.inputs import Rows, Runs, row_key
from qknorm.claims.records import Record
from qknorm.errors import UserError
from qknorm.report import paper


def paper_losses(record: Record, runs: Runs) -> Rows:
    """The seed paper's validation loss per p and its Δ vs p = 2 (qknorm.report.paper): the
    numbers the pages set ours beside, quoted from the one place the report keeps them."""
    base = paper.VAL_LOSS[2.0]
    return {row_key(p): {"loss": v, "delta": v - base} for p, v in paper.VAL_LOSS.items()}


KINDS: dict[str, Callable[[Record, Runs], Rows]] = {
    "means": grids.means, "deltas": grids.deltas, "paired": grids.paired,
    "spread": grids.spread, "steps": grids.steps, "yardstick": grids.yardstick,
    "runs": grids.each_run,
    "paper": paper_losses, "race": races.race, "rungs": races.rungs, "ranking": races.ranking,
    "search": races.search,
    "lr": studies.lr, "arch": studies.arch, "bench": studies.bench,
}


def compute(record: Record, runs: Runs) -> Rows:
    """The record's rows as its runs give them today."""
    if record.kind not in KINDS:
        raise UserError(f"record {record.id} ({record.file}): kind {record.kind!r} is not one "
                        f"of {', '.join(KINDS)}")
    return KINDS[record.kind](record, runs)
