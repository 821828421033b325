"""Landscapes to replay a search on: recorded grids with effects we plant, noise kept.

A committed grid (grid_runs.load: p -> its runs in fold order) has one answer; a search replayed
on it is tested on that one landscape only. `plant` keeps a recorded grid's fold structure and
noise and replaces each p's mean by a planted one, at every step of the curves:

    value(p, f, s) = base(s) + Δ(p)·ramp(s) + fold_effect(f, s) + residual(p, f, s)

- base(s): the recorded grid's grand mean at step s (over every p and fold); base = its value at
  the end, the grid's grand mean value. The planted mean of p is base + Δ(p).
- fold_effect(f, s) + residual(p, f, s) = recorded(p, f, s) − m_p(s), m_p(s) the mean of p's
  recorded runs at step s: the recorded fold effect (mean over p of fold f minus the grand mean)
  and the run's interaction residual, both kept. So the paired difference of two p on a fold is the planted
  Δ difference plus the recorded residual difference: the paired noise the fold test sees is the
  recorded one.
- ramp(s) = (base(s0) − base(s)) / (base(s0) − base(end)): the share of the base curve's drop
  made by step s, s0 the first recorded step (0 at init, 1 at the end). Not a constant shift: at
  init every p has the same loss (the recorded p's means differ by ≤ 0.006 at step 0), and
  a constant shift would show the whole planted effect at the first rung. The ramp gives on the
  H200 grids 0.83-0.85 of it at step 500 and 0.91-0.93 at step 1000, the rungs of in-fold
  stopping. That is
  still generous to a small effect: on the qknorm grid p = 1.5 (0.012 behind p = 2) showed 0.04
  of its final gap at step 500 and 0.44 at step 1000, while the large gaps (p = 3, 4, ∞) showed
  more than their final gap there. Removing each p's recorded mean curve at every step (not only
  at the end) keeps the recorded landscape out of the early rungs: the qknorm grid's large early
  gaps are not carried into its landscapes.
- The recorded runs end at their best (best_val_loss is the curve's minimum, at the last step,
  on every run of both H200 grids), so a planted run's curve ends at its value. steps and core_s
  are the recorded run's: the planted grid costs what the recorded one did.

No randomness: the landscapes are a function of the recorded grids. `landscapes` names the
effects (δ = 0.02, the presets' equivalence margin): a spike (one p better by k·δ, k = 1, 1.5, 2,
at a low, a middle and the highest p), two near-equal basins far apart (δ/4 between them, the
rest 3δ behind), a slope of 2.7δ in 1/p (best at p = 1 or at p = ∞) and a flat grid. Each is written
with its planted Δ and its judge() answer, the yardstick a replay is scored against:

    python -m qknorm.research.landscapes --out docs/results/landscapes/landscapes.json

`load_landscapes(path)` reads them back as grid_runs.load gives a grid (float p, inf included;
int curve steps); `load_planted(path)` gives each one's planted Δ.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

from qknorm.errors import UserError
from qknorm.report import format_p
from qknorm.research import grid_runs

DELTA = 0.02  # the presets' equivalence margin (conf/search/p_tpe.yaml), in nats
SPIKES = (1.5, 3.0, math.inf)  # a low, a middle and the highest p of the H200 grids
SPIKE_K = (1.0, 1.5, 2.0)
BASINS = (1.5, 4.0)  # far apart, neither at an end of the grid's p
SOURCES = ("docs/results/paper_gpu/calibrated", "docs/results/paper_gpu/qknorm")

Grid = dict[float, list[dict]]


def _mean_curves(grid: Grid) -> dict[float, dict[int, float]]:
    """p -> its mean curve over folds (every run recorded at the same steps)."""
    steps = {tuple(sorted(r["curve"])) for runs in grid.values() for r in runs}
    if len(steps) != 1:
        raise UserError(f"the runs' curves have different steps ({len(steps)} sets); "
                        "planting needs every run recorded at the same steps")
    common = steps.pop()
    return {p: {s: statistics.fmean(r["curve"][s] for r in runs) for s in common}
            for p, runs in grid.items()}


def _ramp(base: dict[int, float]) -> dict[int, float]:
    """The share of the base curve's drop made by each step: 0 at the first, 1 at the last."""
    first, last = base[min(base)], base[max(base)]
    if not first > last:
        raise UserError(f"the grid's mean curve does not drop ({first} to {last}); the planted "
                        "effect ramps in with the drop")
    return {s: (first - v) / (first - last) for s, v in base.items()}


def plant(grid: Grid, delta: dict[float, float]) -> Grid:
    """The recorded grid with p's mean replaced by base + delta[p] at every step (module doc).
    A grid without curves (curve None) gets its values planted and no curves."""
    if set(delta) != set(grid):
        raise UserError(f"planted p {sorted(delta)} are not the grid's p {sorted(grid)}")
    means = {p: statistics.fmean(r["value"] for r in runs) for p, runs in grid.items()}
    base = base_level(grid)
    curved = all(r["curve"] is not None for runs in grid.values() for r in runs)
    mean_curves = _mean_curves(grid) if curved else {}
    base_curve = ({s: statistics.fmean(c[s] for c in mean_curves.values())
                   for s in next(iter(mean_curves.values()))} if curved else {})
    ramp = _ramp(base_curve) if curved else {}

    def run(p: float, r: dict) -> dict:
        curve = ({s: v - mean_curves[p][s] + base_curve[s] + delta[p] * ramp[s]
                  for s, v in sorted(r["curve"].items())} if curved else None)
        return {"fold": r["fold"], "value": r["value"] - means[p] + base + delta[p],
                "steps": r["steps"], "core_s": r["core_s"], "curve": curve}

    return {p: [run(p, r) for r in runs] for p, runs in grid.items()}


def base_level(grid: Grid) -> float:
    """The level Δ is planted on: the recorded grid's grand mean value."""
    return statistics.fmean(r["value"] for runs in grid.values() for r in runs)


def _only(ps: list[float], best: dict[float, float], rest: float = 0.0) -> dict[float, float]:
    """Δ per p of the grid: `best`'s where given, else `rest`; UserError for a p not run."""
    missing = set(best) - set(ps)
    if missing:
        raise UserError(f"the grid has no p {sorted(missing)}; planting needs them")
    return {p: best.get(p, rest) for p in ps}


def landscapes(ps: list[float], delta: float = DELTA) -> dict[str, dict[float, float]]:
    """name -> planted Δ per p (0: the base level; lower is better) over the grid's p."""
    out = {f"spike_{format_p(p)}_{k:g}d": _only(ps, {p: -k * delta}) for p in SPIKES for k in SPIKE_K}
    out["two_basins"] = _only(ps, {BASINS[0]: 0.0, BASINS[1]: delta / 4}, rest=3 * delta)
    # Steady in 1/p: p = 1 best and p = ∞ 2.7δ behind, or the other way round. 2.7, not 3: no
    # grid p sits at exactly δ (3δ put p = 1.5 there, where a level call is a coin toss on the
    # last bit of a float; 2.7δ puts p = 1.5 at 0.9δ and p = 2 at 1.35δ).
    out["slope"] = {p: 2.7 * delta * (1 - 1 / p) for p in ps}
    out["slope_inf"] = {p: 2.7 * delta / p for p in ps}
    out["flat"] = _only(ps, {})
    return out


HELD_OUT_SPIKES = (1.0, 2.5, 4.0)  # none of them a spike of `landscapes`
HELD_OUT_K = (1.25, 1.75)
HELD_OUT_BASINS = (2.5, math.inf)


def held_out(ps: list[float], delta: float = DELTA) -> dict[str, dict[float, float]]:
    """Landscapes no setting was chosen on (`--set held_out`): spikes of 1.25δ and 1.75δ at
    p = 1, 2.5 and 4, two basins at p = 2.5 and ∞ (δ/4 apart, the rest 2.5δ behind), a bowl in
    1/p with its floor at p = 3 (3δ at p = 1, 0.75δ at ∞), and slopes of 2.2δ in 1/p to either
    end. A setting chosen on `landscapes` is tested here on other effects and positions."""
    out = {f"spike_{format_p(p)}_{k:g}d": _only(ps, {p: -k * delta})
           for p in HELD_OUT_SPIKES for k in HELD_OUT_K}
    out["two_basins_2.5_inf"] = _only(ps, {HELD_OUT_BASINS[0]: 0.0, HELD_OUT_BASINS[1]: delta / 4},
                                     rest=2.5 * delta)
    out["bowl_3"] = {p: 3 * delta * ((1 / p - 1 / 3) / (2 / 3)) ** 2 for p in ps}
    out["slope_2.2d"] = {p: 2.2 * delta * (1 - 1 / p) for p in ps}
    out["slope_inf_2.2d"] = {p: 2.2 * delta / p for p in ps}
    return out


SETS = {"tuning": landscapes, "held_out": held_out}


def _key(p: float) -> str:
    """p as results.csv writes norm.p ('1.5', '4.0', 'inf'): float(key) reads it back."""
    return str(float(p))


def build(sources: dict[str, Grid], delta: float = DELTA,
          which: str = "tuning") -> dict[str, dict]:
    """'source/landscape' -> {source, base, planted, judge, grid} for every source grid, for
    the landscapes of SETS[which]."""
    out = {}
    for source, grid in sources.items():
        for name, planted in SETS[which](sorted(grid), delta).items():
            planted_grid = plant(grid, planted)
            out[f"{source}/{name}"] = {"base": base_level(grid), "planted": planted,
                                       "judge": grid_runs.judge(planted_grid, equivalence=delta),
                                       "grid": planted_grid}
    return out


def _encode(entry: dict, source_dir: str) -> dict:
    """JSON-safe: p as results.csv keys (inf too, so the file is strict JSON), steps as str."""
    answer = entry["judge"]
    return {"source": source_dir, "base": entry["base"],
            "planted": {_key(p): d for p, d in entry["planted"].items()},
            "judge": {"best": _key(answer.best),
                      "delta": {_key(p): d for p, d in sorted(answer.delta.items())},
                      "worse": [_key(p) for p in sorted(answer.worse)]},
            "grid": {_key(p): [r | {"curve": None if r["curve"] is None else
                                    {str(s): v for s, v in r["curve"].items()}} for r in runs]
                     for p, runs in entry["grid"].items()}}


def dumps(built: dict[str, dict], source_dirs: dict[str, str], command: str) -> str:
    """The JSON: a header and one landscape a line (compact, and diffs name the landscape)."""
    head = json.dumps({"about": __doc__.splitlines()[0], "command": command, "delta": DELTA,
                       "sources": source_dirs}, allow_nan=False)
    lines = [f"{json.dumps(name)}:" + json.dumps(_encode(e, source_dirs[name.split('/')[0]]),
                                                  separators=(",", ":"), allow_nan=False)
             for name, e in built.items()]
    return head[:-1] + ',"landscapes":{\n' + ",\n".join(lines) + "\n}}\n"


def _grid(encoded: dict) -> Grid:
    return {float(p): [r | {"curve": None if r["curve"] is None else
                             {int(s): v for s, v in r["curve"].items()}} for r in runs]
            for p, runs in encoded.items()}


def load_landscapes(path: Path) -> dict[str, Grid]:
    """name -> its grid, as grid_runs.load gives one (float p, int curve steps)."""
    return {name: _grid(e["grid"]) for name, e in _read(path).items()}


def load_planted(path: Path) -> dict[str, dict[float, float]]:
    """name -> its planted Δ per p (0: the base level)."""
    return {name: {float(p): d for p, d in e["planted"].items()}
            for name, e in _read(path).items()}


def _read(path: Path) -> dict[str, dict]:
    try:
        return json.loads(Path(path).read_text())["landscapes"]
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"{path}: {e}; pass a JSON written by "
                        "python -m qknorm.research.landscapes") from None


def summary(built: dict[str, dict]) -> list[str]:
    """One line a landscape: the planted best and what the grid shows (best, worse)."""
    lines = []
    for name, e in built.items():
        planted = min(e["planted"].values())
        planted_best = [format_p(p) for p, d in e["planted"].items() if d == planted]
        answer = e["judge"]
        worse = ",".join(format_p(p) for p in sorted(answer.worse)) or "-"
        level = ",".join(format_p(p) for p in sorted(set(e["grid"]) - answer.worse))
        lines.append(f"{name:34s} planted best {'/'.join(planted_best):8s} grid best "
                     f"{format_p(answer.best):4s} not shown worse {level:24s} worse {worse}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="append", metavar="DIR",
                        help="a report folder with results.csv and curves.csv, named by its "
                             f"folder (repeatable; default: {' '.join(SOURCES)})")
    parser.add_argument("--set", choices=sorted(SETS), default="tuning",
                        help="tuning: the landscapes the search's settings were chosen on; "
                             "held_out: others, to test them on (default: tuning)")
    parser.add_argument("--out", type=Path, help="JSON out (default: only the summary)")
    args = parser.parse_args()
    dirs = {Path(d).name: d for d in args.grid or SOURCES}
    sources = {name: grid_runs.load(Path(d) / "results.csv", Path(d) / "curves.csv")
               for name, d in dirs.items()}
    built = build(sources, which=args.set)
    print("\n".join(summary(built)))
    if args.out:
        command = "python -m qknorm.research.landscapes " + shlex.join(sys.argv[1:])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(dumps(built, dirs, command))


if __name__ == "__main__":
    from qknorm.errors import run_main

    run_main(main)
