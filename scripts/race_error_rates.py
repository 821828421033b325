"""How often the race (racestats.replay) drops a candidate that is no worse than the others.

`python scripts/race_error_rates.py [--races 4000]` simulates races among k level candidates
(every mean equal; each block adds an effect shared by all candidates and independent normal
noise per run), 5 blocks, the first look after 3, alpha 0.05, no baseline, and prints for each k
the share of races in which the first look dropped any candidate, the whole race dropped any,
and a given candidate (the first) was dropped. Every drop here is a wrong one.
"""

from __future__ import annotations

import argparse

import numpy as np

from qknorm.sweep import racestats as race

BLOCKS, FIRST_LOOK, ALPHA = 5, 3, 0.05


def rates(k: int, races: int, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    first = anywhere = given = 0
    for _ in range(races):
        runs = rng.normal(size=(k, BLOCKS)) + rng.normal(scale=3.0, size=BLOCKS)
        r = race.replay(list(range(k)), {c: dict(enumerate(runs[c])) for c in range(k)}, set(),
                        BLOCKS, FIRST_LOOK, ALPHA)
        first += bool(r.looks[0].dropped)
        anywhere += bool(r.dropped())
        given += 0 in r.dropped()
    return {"first look, any": first / races, "race, any": anywhere / races,
            "race, a given one": given / races}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=4000)
    args = parser.parse_args()
    print(f"level candidates, {BLOCKS} blocks, first look after {FIRST_LOOK}, alpha {ALPHA}, "
          f"{args.races} races each: share with a wrong drop")
    print("| k | first look, any | race, any | race, a given one |\n|---|---|---|---|")
    for k in (2, 4, 8):
        r = rates(k, args.races)
        print(f"| {k} | " + " | ".join(f"{v:.3f}" for v in r.values()) + " |")


if __name__ == "__main__":
    main()
