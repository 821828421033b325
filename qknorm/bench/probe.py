"""What a job pays before its first step, phase by phase, measured inside a fresh process.

`python -m qknorm.bench.probe MODEL [overrides]` prints one JSON line: wall and CPU seconds of
importing torch and the command line, composing the config, loading the data, building the model
and optimizer, then the last three again in the same process (`warm_*`: the next job of a reused
joblib worker). qknorm.bench.overhead.bench_overhead runs it. Nothing heavy is imported at the
top: the first phase is what it measures.
"""

from __future__ import annotations

import json
import sys
import time

PHASES = ("import", "compose", "data", "model", "warm_compose", "warm_data", "warm_model")


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def probe(model: str, overrides: list[str]) -> dict[str, float]:
    marks = [_now()]
    import torch  # noqa: F401

    from qknorm import cli  # noqa: F401  what `python -m qknorm.train` imports

    marks.append(_now())
    from qknorm.bench.steps import compose
    from qknorm.data import load_splits
    from qknorm.model import GPT

    # The second pass is the next job of a reused worker (joblib's loky workers persist).
    for _ in range(2):
        cfg = compose(model, overrides)
        marks.append(_now())
        splits = load_splits(cfg.data, cfg.model.block_size)
        marks.append(_now())
        gpt = GPT(cfg.model, cfg.norm, len(splits.tokenizer))
        gpt.configure_optimizer(1e-3, 0.1, (0.9, 0.99), "cpu")  # imports torch._dynamo once
        marks.append(_now())
    out = {}
    for i, name in enumerate(PHASES):
        out[f"{name}_wall_s"] = marks[i + 1][0] - marks[i][0]
        out[f"{name}_cpu_s"] = marks[i + 1][1] - marks[i][1]
    return out


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1], sys.argv[2:])))
