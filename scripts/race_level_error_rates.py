"""How often a race with equivalence (racestats.replay, equivalence=δ) answers wrongly, and how
long it runs.

`python scripts/race_level_error_rates.py [--races 2000] [--out race_level_error_rates.json]`
simulates races of k candidates over 5 blocks, the first look after 3, alpha 0.05, no baseline.
Each run is its candidate's mean + a block effect shared by every candidate (sd 3: pairing
removes it) + independent Gaussian noise of sd σ/√2, so a paired difference has sd σ = 1; δ is
given as δ/σ. Two worlds, `--races` races each, for k = 2, 4, 8 and δ/σ = 0.5, 1, 2:

  level: every candidate's mean is 0. Any "worse" (a drop) is wrong; "level" is right.
  gap:   candidate 0 is behind the others by exactly δ (the others at 0). Calling it "level" is
         wrong (the TOST's null is true on its bound); "worse" is right.

For each it reports the share of races with a wrong "worse" (level world: any candidate
dropped), the shares of a given candidate (the first) answered worse / level / undecided /
best (racestats.answer: a survivor that is not the last look's leader is undecided), and the
race's length: mean blocks run per candidate (the grid runs 5). A row with δ off is today's race
for comparison. A fixed seed per cell: the same command gives the same numbers. JSON out.
"""

from __future__ import annotations

import argparse
import json
import time

import _cli  # noqa: F401  (puts the checkout on sys.path)
import numpy as np

from qknorm.sweep import racestats as race

BLOCKS, FIRST_LOOK, ALPHA = 5, 3, 0.05
KS, DELTAS = (2, 4, 8), (0.5, 1.0, 2.0)


def simulate(k: int, delta: float | None, gap: float, races: int, seed: int) -> dict[str, float]:
    """`races` races of k candidates, candidate 0 behind by `gap` (in σ), equivalence δ."""
    rng = np.random.default_rng(seed)
    means = np.zeros(k)
    means[0] = gap
    counts = {"any worse": 0, race.WORSE: 0, race.LEVEL: 0, race.UNDECIDED: 0, race.BEST: 0}
    blocks_run = 0
    for _ in range(races):
        runs = (means[:, None] + rng.normal(scale=np.sqrt(0.5), size=(k, BLOCKS))
                + rng.normal(scale=3.0, size=BLOCKS))
        r = race.replay(list(range(k)), {c: dict(enumerate(runs[c])) for c in range(k)}, set(),
                        BLOCKS, FIRST_LOOK, ALPHA, equivalence=delta)
        dropped, level, last = r.dropped(), r.level(), r.looks[-1]
        counts["any worse"] += bool(dropped)
        if 0 in dropped:
            answer = race.WORSE
        elif 0 in level:
            answer = race.LEVEL
        else:
            answer = race.BEST if last.leader == 0 else race.UNDECIDED
        counts[answer] += 1
        blocks_run += sum((dropped.get(c) or level.get(c) or last).n for c in range(k))
    return {**{key: n / races for key, n in counts.items()},
            "mean blocks run": blocks_run / (races * k)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=2000)
    parser.add_argument("--out", default=None, help="write the rates as JSON here")
    args = parser.parse_args()
    start = time.process_time()
    rows = []
    for i, k in enumerate(KS):
        for j, d in enumerate((None, *DELTAS)):
            for world, gap in (("level", 0.0), ("gap", d)):
                if gap is None:  # δ off: the gap world has no δ to be behind by
                    continue
                seed = 1000 * i + 10 * j + (world == "gap")
                rows.append({"k": k, "delta/sigma": d, "world": world,
                             **simulate(k, d, gap, args.races, seed)})
    print(f"{args.races} races per row, {BLOCKS} blocks, first look after {FIRST_LOOK}, alpha "
          f"{ALPHA}; σ = sd of a paired difference; a given candidate = candidate 0 (the one "
          f"behind by δ in the gap world); {time.process_time() - start:.0f} CPU seconds")
    print("| k | δ/σ | world | any wrong worse | given: worse | given: level | given: undecided "
          "| given: best | mean blocks run (of 5) |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        any_worse = f"{r['any worse']:.3f}" if r["world"] == "level" else "-"
        d = "off" if r["delta/sigma"] is None else f"{r['delta/sigma']:g}"
        print(f"| {r['k']} | {d} | {r['world']} | {any_worse} | " + " | ".join(
            f"{r[key]:.3f}" for key in (race.WORSE, race.LEVEL, race.UNDECIDED, race.BEST))
            + f" | {r['mean blocks run']:.2f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"races": args.races, "blocks": BLOCKS, "first_look": FIRST_LOOK,
                       "alpha": ALPHA, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    _cli.run(main)
