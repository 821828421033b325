"""What a job pays before its first step, measured in fresh processes: the phases inside one
(qknorm.bench.probe), the whole probe process seen from outside, and a real zero-step
`python -m qknorm.train`, each in wall and CPU seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from qknorm.bench.steps import spread
from qknorm.config import CONF_DIR


def _timed_run(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run cmd; (result, wall seconds, CPU seconds of the child: user + system)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {out.stderr.strip().splitlines()[-1:]}")
    return out, wall, cpu


def bench_overhead(model: str = "cpu", extra: list[str] = (), threads: int | None = None,
                   repeats: int = 3) -> dict[str, Any]:
    """What a job pays before its first step, in fresh processes (quartiles over `repeats`).

    Wall and CPU seconds for: each phase inside the process (imports, compose, data load, model
    and optimizer build -- the first torch.optim optimizer imports torch._dynamo); the same
    phases again in the same process (`warm_*`: the next job of a reused joblib worker); the
    whole probe process seen from outside (interpreter start included); and a real
    `python -m qknorm.train model=<model> train.max_iters=0 train.eval_iters=1` (adds Hydra's run
    dir and logging, one eval batch pair and final.json). On a loaded machine wall time is
    inflated by waiting for a core; CPU time is what the job itself costs.
    """
    import tempfile

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(CONF_DIR.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
    thread_args = [f"threads={threads}"] if threads else []
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    for _ in range(repeats):
        out, wall, cpu = _timed_run([sys.executable, "-m", "qknorm.bench.probe", model, *extra],
                                    env=env)
        phases = json.loads(out.stdout.strip().splitlines()[-1])
        for key, value in phases.items():
            add(key, value)
        for kind in ("wall", "cpu"):
            add(f"in_process_{kind}_s", sum(v for k, v in phases.items()
                                            if k.endswith(f"_{kind}_s") and not k.startswith("warm")))
            add(f"warm_job_{kind}_s", sum(v for k, v in phases.items()
                                          if k.endswith(f"_{kind}_s") and k.startswith("warm")))
        add("process_wall_s", wall)
        add("process_cpu_s", cpu)
        with tempfile.TemporaryDirectory() as tmp:
            _, wall, cpu = _timed_run(
                [sys.executable, "-m", "qknorm.train", f"model={model}", "train.max_iters=0",
                 "train.eval_iters=1", f"hydra.run.dir={tmp}/run", *thread_args, *extra],
                env=env, cwd=tmp)
        add("job_wall_s", wall)
        add("job_cpu_s", cpu)
    return {key: spread(values) for key, values in samples.items()}
