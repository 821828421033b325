"""A replay's JSON (qknorm.research.search_replay) as the markdown table docs/search.md prints,
so the numbers there are typed once, by the replay:

    python -m qknorm.research.replay_table docs/results/landscapes/search_replay.json
    python -m qknorm.research.replay_table OUT.json --continuous LANDSCAPES.json \
        [--before OUT_BEFORE.json]   (search_replay --continuous's: one row per landscape)

One row per (grid or landscape, search) at each budget (`--compact`: one row per landscape):
over seeds, how often its best p is not one the grid shows worse, is the grid's best, every p it
calls worse is worse on the grid, every p it calls level is within δ of the grid's best, and its
median steps and distinct p.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

COLUMNS = [("best_not_grid_worse", "best p not grid-worse"), ("best_is_grid_best", "= grid's best"),
           ("worse_all_grid_worse", "worse calls right"), ("level_all_within_delta",
                                                           "level calls within δ"),
           ("steps_median", "median steps"), ("distinct_p_median", "distinct p")]
ORDER = ["race_search_tpe", "race_search_gp", "race", "smac3", "tpe", "gp", "tpe_median_pruned"]
VERDICTS = ("worse_all_grid_worse", "level_all_within_delta")  # only a race's answer has them
CLAIMLESS = {"smac3", "tpe", "gp", "tpe_median_pruned"}  # give a best p, call nothing worse


def rows(name: str, searches: dict, budget: str) -> list[list[str]]:
    out = []
    for search in sorted(searches, key=lambda s: ORDER.index(s) if s in ORDER else len(ORDER)):
        score = searches[search].get(budget)
        if not score or not score.get("seeds"):
            continue
        n = score["seeds"]
        cells = ["no claim" if k in VERDICTS and search in CLAIMLESS
                 else f"{score[k]}/{n}" if k not in ("steps_median", "distinct_p_median")
                 else f"{score[k]:,.0f}" if k == "steps_median" else f"{score[k]:g}"
                 for k, _ in COLUMNS]
        out.append([name, search, *cells])
    return out


def table(data: dict, budget: str) -> str:
    grids = data["landscapes"] if "landscapes" in data else {"grid": data}
    lines = ["| grid | search | " + " | ".join(h for _, h in COLUMNS) + " |",
             "|" + "---|" * (len(COLUMNS) + 2)]
    for name, entry in grids.items():
        lines += ["| " + " | ".join(r) + " |" for r in rows(name, entry["searches"], budget)]
    return "\n".join(lines)


def compact(data: dict, budget: str) -> str:
    """One row per landscape: the grid's answer, each search's "best p not grid-worse" (seeds
    of seeds), then for each racing search and the race how often its worse and level calls
    are all right."""
    searches = [s for s in ORDER if any(s in e["searches"] for e in data["landscapes"].values())]
    engines = [s for s in searches if s == "race" or s.startswith("race_search_")]
    lines = ["| landscape | grid: best, worse | " + " | ".join(searches) + " | "
             + " | ".join(f"{s}: worse calls right, level calls within δ" for s in engines) + " |",
             "|" + "---|" * (len(searches) + len(engines) + 2)]
    for name, e in data["landscapes"].items():
        cell = {s: e["searches"].get(s, {}).get(budget) or {} for s in searches}
        best = [f"{c['best_not_grid_worse']}/{c['seeds']}" if c.get("seeds") else "-"
                for c in cell.values()]
        calls = [f"{c['worse_all_grid_worse']}/{c['seeds']}, "
                 f"{c['level_all_within_delta']}/{c['seeds']}" if c else "-"
                 for c in (cell[s] for s in engines)]
        lines.append(f"| {name} | {e['best']:g}, {len(e['worse'])} p | " + " | ".join(best + calls)
                     + " |")
    return "\n".join(lines)


def continuous(data: dict, landscapes_file: Path, before: dict | None = None) -> str:
    """search_replay --continuous's OUT.json as one row per landscape: for each method, over
    seeds, its best p within δ and within δ/2 of min f; the racing search's worse calls true
    and level calls within δ (qknorm.research.continuous.counts); `before`: another OUT.json's
    racing (the rules before a change) in a first column."""
    from qknorm.research import continuous as c

    delta, shapes = c.read(landscapes_file)
    methods = [("racing before", before)] if before else []
    methods += [(m, data) for m in ("racing", "tpe", "smac3")]
    head = [f"{m}: best within δ, δ/2" for m, _ in methods]
    calls = [m for m, _ in methods if m.startswith("racing")]
    lines = ["| landscape | " + " | ".join(head) + " | "
             + " | ".join(f"{m}: worse true, level within δ" for m in calls) + " |",
             "|" + "---|" * (1 + len(head) + len(calls))]
    for shape in shapes:
        runs = {m: d["landscapes"].get(shape.name, {}).get("racing" if m.startswith("racing")
                                                           else m) for m, d in methods}
        got = {m: c.counts(shape, delta, r) for m, r in runs.items() if r}
        cells = [f"{g['best_within_delta']}, {g['best_within_half']}" if (g := got.get(m))
                 else "-" for m, _ in methods]
        cells += [f"{g['worse_true']}, {g['level_within_delta']}" if (g := got.get(m)) else "-"
                  for m in calls]
        lines.append(f"| {shape.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", type=Path, nargs="+")
    ap.add_argument("--budget", default="26667", help="the budget's column (default 26667)")
    ap.add_argument("--compact", action="store_true",
                    help="landscapes: one row each, every search's best-p column side by side")
    ap.add_argument("--continuous", type=Path, default=None,
                    help="the JSON is search_replay --continuous's OUT.json over this "
                         "landscapes file: one row per landscape")
    ap.add_argument("--before", type=Path, default=None,
                    help="with --continuous: an OUT.json whose racing column goes first")
    args = ap.parse_args(argv)
    if args.continuous is not None:
        before = json.loads(args.before.read_text()) if args.before else None
        for path in args.json:
            print(continuous(json.loads(path.read_text()), args.continuous, before))
        return 0
    for path in args.json:
        data = json.loads(path.read_text())
        print(compact(data, args.budget) if args.compact else table(data, args.budget))
    return 0


if __name__ == "__main__":
    sys.exit(main())
