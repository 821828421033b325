"""How often the race (race.looks.replay_race) answers wrongly, and how long it runs, over folds that
are correlated as K-fold cross-validation makes them: the plain paired t and the corrected
resampled t (hydra_racing_sweeper.multitest.for_folds) side by side.

`python -m qknorm.research.race_level_error_rates [--races 1500] [--out race_level_error_rates.json]`
simulates races of k = 2, 4, 8 candidates over K = 5 and 10 blocks (folds), the first look
after 3, alpha 0.05, no baseline. Candidate c's run on fold b is

    mean_c + a block effect shared by every candidate (sd 3: pairing removes it)
           + u_c, the candidate's own component, the same on every fold (sd sqrt(ρ/2))
           + independent noise (sd sqrt((1 − ρ)/2)),

so the paired difference of two candidates has sd σ = 1 on a fold and correlation ρ between
folds (u_c − u_c' is shared by all of them). ρ = 0: independent folds; ρ = 1/K: the correlation
Nadeau & Bengio's correction assumes for K-fold (n_test/(n_test + n_train)); under this model
the corrected t is exact for one pair. δ is given as δ/σ. Two worlds:

  level: every candidate's mean is 0. Any "worse" (a drop) is wrong; "level" is right.
  gap:   candidate 0 is behind the others by exactly δ. Calling it "level" is wrong.

The truth is the means. With ρ > 0, u_c is a candidate's luck with the text its folds' training
sets share: no number of folds averages it out, but another corpus (new training sets) draws it
anew, so it is not the candidate's merit (Nadeau & Bengio's target is the mean over training
sets). A level candidate dropped because its u_c put it behind on every fold is a false "worse".

Per cell (K, ρ, test, k, δ, world) it reports the share of races with any wrong "worse" at the
first look and in the whole race (level world), candidate 0's answer (worse / level / undecided
/ best; race.looks.look_answer: a survivor that is not the last look's leader is undecided), and mean
blocks run per candidate (of K). δ off (level world only) is the drop-only race. A fixed seed
per cell, the same for both tests (they see the same draws): the same command gives the same
numbers. JSON out.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time

import numpy as np
from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest, for_folds
from hydra_racing_sweeper.race import looks, verdicts

from qknorm.errors import run_main

FOLDS, FIRST_LOOK, ALPHA = (5, 10), 3, 0.05
KS, DELTAS = (2, 4, 8), (0.5, 1.0, 2.0)


def draw(rng: np.random.Generator, means: np.ndarray, blocks: int, rho: float,
         races: int) -> np.ndarray:
    """runs[race, candidate, block] of the model above: paired differences with sd 1 and
    correlation rho between blocks."""
    k = len(means)
    return (means[None, :, None]
            + rng.normal(scale=3.0, size=(races, 1, blocks))
            + rng.normal(scale=np.sqrt(rho / 2), size=(races, k, 1))
            + rng.normal(scale=np.sqrt((1 - rho) / 2), size=(races, k, blocks)))


def simulate(k: int, blocks: int, rho: float, test: ReplicateTest, delta: float | None,
             gap: float, races: int, seed: int | list[int]) -> dict[str, float]:
    """`races` races of k candidates over `blocks` folds with correlation rho, candidate 0
    behind by `gap` (in σ), equivalence δ (None: off), under `test`."""
    means = np.zeros(k)
    means[0] = gap
    runs = draw(np.random.default_rng(seed), means, blocks, rho, races)
    counts = {"first look any worse": 0, "any worse": 0, verdicts.WORSE: 0, verdicts.LEVEL: 0,
              verdicts.UNDECIDED: 0, verdicts.BEST: 0}
    blocks_run = 0
    for one in runs.tolist():  # Python floats: statistics is slow on numpy scalars
        r = looks.replay_race(list(range(k)), {c: dict(enumerate(one[c])) for c in range(k)}, set(),
                         blocks, FIRST_LOOK, ALPHA, equivalence=delta, test=test)
        dropped, level, last = r.dropped(), r.level(), r.looks[-1]
        counts["first look any worse"] += bool(r.looks[0].dropped)
        counts["any worse"] += bool(dropped)
        if 0 in dropped:
            answer = verdicts.WORSE
        elif 0 in level:
            answer = verdicts.LEVEL
        else:
            answer = verdicts.BEST if last.leader == 0 else verdicts.UNDECIDED
        counts[answer] += 1
        blocks_run += sum((dropped.get(c) or level.get(c) or last).n for c in range(k))
    return {**{key: n / races for key, n in counts.items()},
            "mean blocks run": blocks_run / (races * k)}


def cells(races: int) -> list[dict]:
    rows = []
    for K in FOLDS:
        for i, rho in enumerate((0.0, 1 / K)):
            for k in KS:
                for j, d in enumerate((None, *DELTAS)):
                    for world, gap in (("level", 0.0), ("gap", d)):
                        if gap is None:  # δ off: the gap world has no δ to be behind by
                            continue
                        seed = [K, i, k, j, world == "gap"]
                        for test in (PAIRED_T, for_folds(K)):
                            rows.append({"folds": K, "rho": rho, "test": test.name, "k": k,
                                         "delta/sigma": d, "world": world,
                                         **simulate(k, K, rho, test, d, gap, races, seed)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=1500)
    parser.add_argument("--out", default=None, help="write the rates as JSON here")
    args = parser.parse_args()
    start = time.process_time()
    rows = cells(args.races)
    seconds = time.process_time() - start
    print(f"{args.races} races per row, first look after {FIRST_LOOK}, alpha {ALPHA}; σ = sd of "
          f"a paired difference; given = candidate 0; {seconds:.0f} CPU seconds")
    print("| K | ρ | test | k | δ/σ | world | first look any worse | any worse | given: worse "
          "| given: level | given: undecided | given: best | blocks run |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lv = r["world"] == "level"
        d = "off" if r["delta/sigma"] is None else f"{r['delta/sigma']:g}"
        print(f"| {r['folds']} | {r['rho']:.2f} | {r['test']} | {r['k']} | {d} | {r['world']} | "
              + " | ".join(f"{r[key]:.3f}" if lv or key not in ("any worse",
                                                                  "first look any worse")
                           else "-" for key in ("first look any worse", "any worse", verdicts.WORSE,
                                                verdicts.LEVEL, verdicts.UNDECIDED, verdicts.BEST))
              + f" | {r['mean blocks run']:.2f} |")
    if args.out:
        command = "python -m qknorm.research.race_level_error_rates " + shlex.join(sys.argv[1:])
        with open(args.out, "w") as f:
            json.dump({"command": command, "races": args.races, "first_look": FIRST_LOOK,
                       "alpha": ALPHA, "cpu_seconds": round(seconds), "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    run_main(main)
