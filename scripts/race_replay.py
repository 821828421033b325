"""Replay a race's looks on recorded runs: `python scripts/race_replay.py RESULTS_CSV` reads a
report's results.csv (a grid's, or a race's own), takes each p's completed runs by fold, and
replays the race's looks over them with hydra_racing_sweeper.race.looks.replay_race, the sweeper's own rule:
which p each look drops, which leave level, and where the race would end. A p that lacks a fold
a look needs (stopped at a rung, or never run) leaves there without a test. No run is trained:
it answers "what would this race have said, with these settings, on these runs?"."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import _cli
from hydra_racing_sweeper.race import LEVEL, STAYS, driver, looks

from qknorm.errors import run_main
from qknorm.report import format_p
from qknorm.research.recorded_folds import completed_by_fold, replicate_test
from qknorm.research.search_replay import preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", type=Path, help="a report's results.csv")
    parser.add_argument("--metric", default="best_val_loss")
    race = preset("p_race")["race"]  # the defaults are search=p_race's
    parser.add_argument("--min-replicates", type=int, default=race["min_replicates"])
    parser.add_argument("--alpha", type=float, default=race["alpha"])
    parser.add_argument("--baseline", type=float, default=race["baseline"],
                        help="a p, or nan for none")
    parser.add_argument("--equivalence", type=float, default=race["equivalence"],
                        help="δ; nan for off")
    _cli.add_test_options(parser)
    args = parser.parse_args()
    values, n_folds, layout = completed_by_fold(args.results, args.metric)
    test = replicate_test(args.test, n_folds > 1, layout, args.n_folds)
    print(f"test: {test.label()}")
    candidates = sorted(values)
    baseline = None if math.isnan(args.baseline) else args.baseline
    delta = None if math.isnan(args.equivalence) else args.equivalence
    r = looks.replay_race(candidates, values, set(), n_folds, args.min_replicates, args.alpha,
                     baseline, equivalence=delta, test=test)
    for c, n in sorted(r.gone.items(), key=lambda x: x[1]):
        print(f"p = {format_p(c)}: left before the look at {n} folds (a fold missing: stopped "
              "or not run)")
    for lk in r.looks:
        print(f"look at {lk.n} folds: leader p = {format_p(lk.leader)}")
        for c, t in lk.tests.items():
            what = driver.look_verdict(lk, c, baseline, delta)
            if what == LEVEL and c == baseline:  # never taken out: it stays in the race
                what = f"{STAYS} (the baseline; {LEVEL})"
            interval = (f", 90% [{t.low:+.4f}, {t.high:+.4f}]" if t.low is not None else "")
            print(f"  p = {format_p(c)}: Δ {t.delta:+.4f}, one-sided p {t.p:.3g}, Holm "
                  f"{t.p_adjusted:.3g}{interval}: {what}")
    print(f"over after {r.looks[-1].n if r.looks else 0} folds; in the race at its end: "
          f"{', '.join('p = ' + format_p(c) for c in r.alive)}")


if __name__ == "__main__":
    run_main(main)
