"""Every kind of record and what computes it: kind -> function(record, runs) -> rows -> fields
-> value (a float, an int or a word), the values the record's printed ones are held against."""

from __future__ import annotations

from collections.abc import Callable

from qknorm.claims import grids, races, replays, studies
from qknorm.claims.inputs import Rows, Runs, row_key, setting
from qknorm.claims.records import Record
from qknorm.errors import UserError
from qknorm.report import paper


def paper_losses(record: Record, runs: Runs) -> Rows:
    """The seed paper's validation loss per p and its Δ vs p = 2, and the seconds of its runs
    (qknorm.report.paper): the numbers the pages set ours beside, quoted from the one place
    the report keeps them."""
    base = paper.VAL_LOSS[2.0]
    rows: Rows = {row_key(p): {"loss": v, "delta": v - base} for p, v in paper.VAL_LOSS.items()}
    low, high = paper.RUN_S  # and its runs' time: 10 folds × 8 p one after another
    rows["run"] = {"min_s": low, "max_s": high, "grid_h": 80 * (low + high) / 2 / 3600}
    return rows


def agreement(record: Record, runs: Runs) -> Rows:
    """Two records' calls row by row (two deltas records: a grid on two devices): per row
    both calls; row all: the rows both have, how many calls agree, and the rows where they
    differ ("-" for none), so a page says "every call holds" only as a count."""
    a, b = (runs.book.records.get(str(setting(record, side))) for side in ("a", "b"))
    if a is None or b is None:
        raise UserError(f"record {record.id}: a and b must name records (a: ID, b: ID)")
    ca, cb = compute(a, runs), compute(b, runs)
    both = [r for r in ca if r in cb and "call" in ca[r] and "call" in cb[r]]
    rows: Rows = {r: {"a": ca[r]["call"], "b": cb[r]["call"]} for r in both}
    differ = [r for r in both if ca[r]["call"] != cb[r]["call"]]
    rows["all"] = {"compared": len(both), "agree": len(both) - len(differ),
                   "differ": ", ".join(differ) or "-"}
    return rows


KINDS: dict[str, Callable[[Record, Runs], Rows]] = {
    "means": grids.means, "deltas": grids.deltas, "paired": grids.paired,
    "spread": grids.spread, "steps": grids.steps, "yardstick": grids.yardstick,
    "runs": grids.each_run, "best": grids.best, "heads": grids.heads,
    "paper": paper_losses, "race": races.race, "rungs": races.rungs, "room": races.room,
    "ranking": races.ranking, "search": races.search, "agreement": agreement,
    "lr": studies.lr, "arch": studies.arch, "bench": studies.bench,
    "replay": replays.grid, "continuous": replays.continuous, "candidate": replays.candidate,
    "error_rates": replays.error_rates, "power": replays.power,
}


def compute(record: Record, runs: Runs) -> Rows:
    """The record's rows as its runs give them today."""
    if record.kind not in KINDS:
        raise UserError(f"record {record.id} ({record.file}): kind {record.kind!r} is not one "
                        f"of {', '.join(KINDS)}")
    return KINDS[record.kind](record, runs)
