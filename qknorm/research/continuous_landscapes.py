"""Smooth landscapes over 1/p for `search_replay --continuous` (qknorm.research.continuous's
file format), one file per committed noise (qknorm, calibrated: a replay of each can run at once):

    python -m qknorm.research.continuous_landscapes --out docs/results/landscapes/continuous
      (writes continuous_qknorm.json and continuous_calibrated.json there)

x = 1/p on 201 points from 0 (p = inf) to 1 (p = 1); f in nats above the floor (lower is
better), curvature A = 1 nat per unit of x² (f = A (x − x0)²: within δ = 0.02 of the floor for
|x − x0| ≤ 0.14, within δ/2 for ≤ 0.1):
- bowl_X: one bowl, floor at x0 = X: at the ends (x0 = 0, p = inf; x0 = 1, p = 1), near one
  (0.847, p ≈ 1.18: p = 1 is 0.0234 behind, just outside δ) and between grid points (0.42,
  p ≈ 2.38 between 2 and 3; 0.29, p ≈ 3.45 between 3 and 4).
- two_basins: floors at x = 0.2 and 0.78, the second δ/4 higher; f the lower of the two bowls.
- slope: f = 2.7δ·x (p = inf best) and slope_1: 2.7δ·(1 − x) (p = 1 best), no curvature.
- plateau: f = A·max(0, |x − 0.55| − 0.15)²: level within 0.15 of 0.55.
- flat: f = 0 (every p is best).
No randomness: the file is a function of these lines.

`--needles` writes continuous_needles.json instead: bowls of curvature A = 1, 4, 16, 64 and 256
at x0 = 0.42 (within δ over a width 2·sqrt(δ/A) of x: 0.28, 0.14, 0.071, 0.035, 0.018), under
the calibrated noise (small beside δ, so the width, not the noise, is what is measured): where a
search's best p stops being within δ is the narrowest floor its budget can sample.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

DELTA = 0.02  # the presets' equivalence margin (conf/search/p_tpe.yaml)
A = 1.0  # nats per unit of x²
X = [round(i / 200, 4) for i in range(201)]
BOWLS = (0.0, 0.29, 0.42, 0.847, 1.0)


def bowl(x0: float, a: float = A) -> list[float]:
    """f = a (x − x0)²: the floor at x0, within δ for |x − x0| <= sqrt(δ/a)."""
    return [a * (x - x0) ** 2 for x in X]


def basins(x1: float, x2: float, second: float) -> list[float]:
    """The lower of two bowls of curvature A at x1 and x2, the second `second` nats up."""
    return [min(A * (x - x1) ** 2, A * (x - x2) ** 2 + second) for x in X]


def shapes() -> dict[str, list[float]]:
    out = {f"bowl_{x0:g}": bowl(x0) for x0 in BOWLS}
    out["two_basins"] = basins(0.2, 0.78, DELTA / 4)
    out["slope"] = [2.7 * DELTA * x for x in X]
    out["slope_1"] = [2.7 * DELTA * (1 - x) for x in X]
    out["plateau"] = [A * max(0.0, abs(x - 0.55) - 0.15) ** 2 for x in X]
    out["flat"] = [0.0 for _ in X]
    return out


NOISES = ("qknorm", "calibrated")


def build(noise: str, made: Callable[[], dict[str, list[float]]] = shapes) -> dict:
    return {"delta": DELTA,
            "landscapes": [{"name": f"{noise}/{name}", "noise": noise, "x": X,
                            "f": [round(v, 8) for v in f]} for name, f in made().items()]}


NEEDLES = (1.0, 4.0, 16.0, 64.0, 256.0)


def needles() -> dict:
    return {"delta": DELTA,
            "landscapes": [{"name": f"calibrated/needle_A{a:g}", "noise": "calibrated", "x": X,
                            "f": [round(v, 8) for v in bowl(0.42, a)]} for a in NEEDLES]}


def held_out() -> dict[str, list[float]]:
    out = {f"bowl_{x0:g}": bowl(x0) for x0 in (0.1, 0.6, 0.7)}
    out |= {f"bowl_{x0:g}_a{a:g}": bowl(x0, a) for x0, a in ((0.55, 0.25), (0.35, 0.5),
                                                               (0.9, 2.0), (0.15, 4.0))}
    out["two_basins_even"] = basins(0.15, 0.65, 0.0)
    out["two_basins_deep"] = basins(0.3, 0.9, -DELTA / 2)
    out["two_basins_shallow"] = basins(0.1, 0.6, 1.5 * DELTA)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True,
                    help="a folder: continuous_NOISE.json for each noise is written there")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--needles", action="store_true",
                      help="write continuous_needles.json (narrowing bowls) instead")
    what.add_argument("--held-out", action="store_true",
                      help="write continuous_heldout_NOISE.json (landscapes no setting was "
                           "chosen on) instead")
    args = ap.parse_args(argv)
    command = ("python -m qknorm.research.continuous_landscapes "
               + shlex.join(argv if argv is not None else sys.argv[1:]))
    args.out.mkdir(parents=True, exist_ok=True)
    files = ({"needles": needles()} if args.needles
             else {f"heldout_{n}": build(n, held_out) for n in NOISES} if args.held_out
             else {n: build(n) for n in NOISES})
    for name, data in files.items():
        # one landscape a line: diffs name the landscape
        lines = [json.dumps(e, separators=(",", ":")) for e in data["landscapes"]]
        (args.out / f"continuous_{name}.json").write_text(
            f'{{"delta": {DELTA}, "command": {json.dumps(command)},\n'
            ' "landscapes": [\n' + ",\n".join(lines) + "\n]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
