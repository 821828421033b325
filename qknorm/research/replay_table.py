"""A replay's JSON (qknorm.research.search_replay) as the markdown table docs/search_results.md
prints, so the numbers there are typed once, by the replay:

    python -m qknorm.research.replay_table docs/results/landscapes/search_replay.json
    python -m qknorm.research.replay_table OUT.json --continuous LANDSCAPES.json \
        [--before OUT_BEFORE.json]   (search_replay --continuous's: one row per landscape)

One row per (grid or landscape, search) at each budget (`--compact`: one row per landscape):
over seeds, how often its best p is not one the grid shows worse, is the grid's best, every p it
calls worse is worse on the grid, every p it calls level is within δ of the grid's best, and its
median steps and distinct p.

`--record ID` prints the same table with a claims placeholder, {{ID ROW FIELD}}, in place of
each number: the template of a block whose record (kind `replay` or `continuous`,
qknorm.claims.replays) recomputes the numbers from the committed JSON. `grid_rows` and
`continuous_rows` are those records' rows; the tables read them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from qknorm import jsonfile

# A header's verdict words in backticks: a claims block reads them as names, not claims.
COLUMNS = [("best_not_grid_worse", "best p not `worse` on the grid"),
           ("best_is_grid_best", "= grid's best"), ("worse_all_grid_worse", "`worse` calls right"),
           ("level_all_within_delta", "`level` calls within δ"),
           ("steps_median", "median steps"), ("distinct_p_median", "distinct p")]
ORDER = ["race_search_tpe", "race_search_gp", "race", "smac3", "tpe", "gp", "tpe_median_pruned"]
VERDICTS = ("worse_all_grid_worse", "level_all_within_delta")  # only a race's answer has them
CLAIMLESS = {"smac3", "tpe", "gp", "tpe_median_pruned"}  # give a best p, call nothing worse

Rows = dict[str, dict[str, object]]
Cell = Callable[[str, str, object], str]  # (row, field, value) -> the cell's text


def printed(row: str, field: str, value: object) -> str:
    """A value as the tables print it."""
    if field == "steps_median":
        return f"{value:,.0f}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def placeholders(record: str) -> Cell:
    """Cells naming the record's values: a claims block's template."""
    return lambda row, field, value: f"{{{{{record} {row} {field}}}}}"


def grid_rows(data: dict, budget: str) -> Rows:
    """A grid replay's record at `budget`: per grid or landscape (row NAME) its answer (best p,
    how many p it shows worse); per search (row NAME/SEARCH) its counts over seeds."""
    rows: Rows = {}
    for name, entry in _grids(data).items():
        if "best" in entry:
            rows[name] = {"best": float(entry["best"]), "n_worse": len(entry["worse"])}
        for search, scores in entry["searches"].items():
            score = scores.get(budget)
            if score and score.get("seeds"):
                rows[f"{name}/{search}"] = {k: score[k] for k in ("seeds", *dict(COLUMNS))}
    return rows


def _grids(data: dict) -> dict:
    """A replay JSON's grids by name: its landscapes, or the one grid it replayed."""
    return data["landscapes"] if "landscapes" in data else {"grid": data}


def _ordered(searches) -> list[str]:
    return sorted(searches, key=lambda s: ORDER.index(s) if s in ORDER else len(ORDER))


def table(data: dict, budget: str, cell: Cell = printed) -> str:
    rows = grid_rows(data, budget)
    lines = ["| grid | search | " + " | ".join(h for _, h in COLUMNS) + " |",
             "|" + "---|" * (len(COLUMNS) + 2)]
    for name, entry in _grids(data).items():
        for search in _ordered(entry["searches"]):
            key = f"{name}/{search}"
            if key not in rows:  # no seeds at this budget
                continue
            r = rows[key]
            seeds = cell(key, "seeds", r["seeds"])
            cells = ["no claim" if k in VERDICTS and search in CLAIMLESS
                     else cell(key, k, r[k]) if k in ("steps_median", "distinct_p_median")
                     else f"{cell(key, k, r[k])}/{seeds}" for k, _ in COLUMNS]
            lines.append("| " + " | ".join([name, search, *cells]) + " |")
    return "\n".join(lines)


def compact(data: dict, budget: str, cell: Cell = printed) -> str:
    """One row per landscape: the grid's answer, each search's "best p not grid-worse" (seeds
    of seeds), then for each racing search and the race how often its worse and level calls
    are all right."""
    rows = grid_rows(data, budget)
    searches = [s for s in ORDER if any(s in e["searches"] for e in data["landscapes"].values())]
    engines = [s for s in searches if s == "race" or s.startswith("race_search_")]
    lines = ["| landscape | grid: best, `worse` | " + " | ".join(searches) + " | "
             + " | ".join(f"{s}: `worse` calls right, `level` calls within δ" for s in engines)
             + " |",
             "|" + "---|" * (len(searches) + len(engines) + 2)]

    def counted(key: str, field: str) -> str:
        return f"{cell(key, field, rows[key][field])}/{cell(key, 'seeds', rows[key]['seeds'])}"

    for name in data["landscapes"]:
        keys = {s: f"{name}/{s}" for s in searches}
        best = [counted(k, "best_not_grid_worse") if k in rows else "-" for k in keys.values()]
        calls = [f"{counted(keys[s], 'worse_all_grid_worse')}, "
                 f"{counted(keys[s], 'level_all_within_delta')}" if keys[s] in rows else "-"
                 for s in engines]
        answer = (f"{cell(name, 'best', rows[name]['best'])}, "
                  f"{cell(name, 'n_worse', rows[name]['n_worse'])} p")
        lines.append(f"| {name} | {answer} | " + " | ".join(best + calls) + " |")
    return "\n".join(lines)


def continuous_rows(data: dict, landscapes_file: Path) -> Rows:
    """search_replay --continuous's OUT.json as a record: per landscape and method (row
    LANDSCAPE/METHOD) its counts over seeds (qknorm.research.continuous.counts)."""
    from qknorm.research import continuous as c

    delta, shapes = c.read(landscapes_file)
    return {f"{shape.name}/{m}": c.counts(shape, delta, entries)
            for shape in shapes for m, entries in data["landscapes"].get(shape.name, {}).items()}


def continuous(data: dict, landscapes_file: Path, before: dict | None = None,
               cell: Cell = printed, before_cell: Cell = printed, header: bool = True) -> str:
    """search_replay --continuous's OUT.json as one row per landscape: for each method, over
    seeds, its best p within δ and within δ/2 of min f; the racing search's worse calls true
    and level calls within δ; `before`: another OUT.json's racing (the rules before a change)
    in a first column. `header=False`: the rows alone, to follow another file's table."""
    from qknorm.research import continuous as c

    shapes = c.read(landscapes_file)[1]
    columns = ([("racing before", "racing", continuous_rows(before, landscapes_file), before_cell)]
               if before else [])
    columns += [(m, m, continuous_rows(data, landscapes_file), cell) for m in c.METHODS]
    calls = [col for col in columns if col[1] == "racing"]
    head = ["| landscape | "
            + " | ".join(f"{label}: best within δ, δ/2" for label, *_ in columns) + " | "
            + " | ".join(f"{label}: `worse` true, `level` within δ" for label, *_ in calls)
            + " |", "|" + "---|" * (1 + len(columns) + len(calls))]
    lines = head if header else []

    def pair(col: tuple, name: str, fields: tuple[str, str]) -> str:
        _, method, rows, put = col
        key = f"{name}/{method}"
        return (", ".join(put(key, f, rows[key][f]) for f in fields) if key in rows else "-")

    for shape in shapes:
        cells = [pair(col, shape.name, ("best_within_delta", "best_within_half"))
                 for col in columns]
        cells += [pair(col, shape.name, ("worse_true", "level_within_delta")) for col in calls]
        lines.append(f"| {shape.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", type=Path, nargs="+")
    ap.add_argument("--budget", default="26667", help="the budget's column (default 26667)")
    ap.add_argument("--compact", action="store_true",
                    help="landscapes: one row each, every search's best-p column side by side")
    ap.add_argument("--continuous", type=Path, nargs="+", default=None,
                    help="each JSON is search_replay --continuous's OUT.json over the landscapes "
                         "file in the same place here: one table, a row per landscape")
    ap.add_argument("--before", type=Path, nargs="+", default=None,
                    help="with --continuous: an OUT.json per JSON whose racing column goes first")
    ap.add_argument("--record", default=None, metavar="ID",
                    help="placeholders {{ID ROW FIELD}} for the numbers (a claims template; "
                         "several --continuous files: ID_0, ID_1, ...; --before: ID_before)")
    args = ap.parse_args(argv)
    cell = placeholders(args.record) if args.record else printed
    if args.continuous is not None:
        befores = args.before or [None] * len(args.json)
        if not len(args.json) == len(args.continuous) == len(befores):
            ap.error("--continuous (and --before) name one file per JSON, in the same order")
        for i, (path, lands, before) in enumerate(zip(args.json, args.continuous, befores)):
            record = f"{args.record}_{i}" if args.record and len(args.json) > 1 else args.record
            print(continuous(jsonfile.read(path), lands,
                             jsonfile.read(before) if before else None,
                             placeholders(record) if record else printed,
                             placeholders(f"{record}_before") if record else printed,
                             header=i == 0))
        return 0
    for path in args.json:
        data = jsonfile.read(path)
        print(compact(data, args.budget, cell) if args.compact
              else table(data, args.budget, cell))
    return 0


if __name__ == "__main__":
    sys.exit(main())
