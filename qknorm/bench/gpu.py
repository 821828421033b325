"""GPU throughput: aggregate training tokens/s of several jobs sharing one GPU.

One small model leaves most of a large GPU idle, so a sweep runs several jobs on it at once
(hydra/launcher=gpu). What a user needs to choose that count is the aggregate speed of real jobs:
each config here launches `jobs` single runs of `python -m qknorm.train` at once, with the host's
cores divided among them as the gpu launcher does, and sums their steady tokens/s
(final.json's `steady_tokens_per_s`: the steps after the first eval interval, so warm-up and
torch.compile's compilation are left out). Because the jobs compile and start at slightly
different times, each config also reports how much of the jobs' steady windows overlapped.

`scripts/bench_gpu.py` is the command line; everything here returns plain dicts.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qknorm import rundir
from qknorm.errors import UserError

# The paper protocol's model and batch (conf/experiment/paper.yaml), as single runs.
PAPER_RUN = ("model=paper", "dtype=bfloat16", "device=cuda", "train.batch_size=64",
             "optimizer.warmup_iters=100", "data.n_folds=10", "data.fold=0")


@dataclass(frozen=True)
class JobsConfig:
    jobs: int
    compile: bool

    @property
    def name(self) -> str:
        return f"{self.jobs}x-{'compiled' if self.compile else 'eager'}"


def parse_configs(text: str) -> list[JobsConfig]:
    """'1:on,4:off' -> [JobsConfig(1, True), JobsConfig(4, False)]."""
    configs = []
    for item in text.split(","):
        jobs, _, mode = item.partition(":")
        if not jobs.isdigit() or int(jobs) < 1 or mode not in ("on", "off"):
            raise UserError(f"--configs item {item!r} is not JOBS:on|off (compile); "
                            "e.g. --configs 1:off,4:on")
        configs.append(JobsConfig(int(jobs), mode == "on"))
    return configs


def matmul_tflops(n: int = 8192, reps: int = 10) -> float:
    """bf16 n x n x n matrix product rate on random data: the ceiling we compare against."""
    import torch

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (start.elapsed_time(end) / 1e3) / 1e12


def flops_per_token(run_dir: Path) -> float:
    """Training FLOPs per token of a run, nanoGPT's (PaLM's) estimate: 6N + 12 L d T, with N the
    parameters less the position embedding (final.json's n_params)."""
    config, final = rundir.read_config(run_dir), rundir.read_final(run_dir)
    return 6 * final["n_params"] + 12 * math.prod(
        config[f"model.{k}"] for k in ("n_layer", "n_embd", "block_size"))


def with_extra(overrides: list[str], extra: list[str]) -> list[str]:
    """`overrides` with `extra` in the place of those that set the same key or group (the
    command line refuses a group given twice, e.g. model=paper then model=tiny)."""
    keys = {e.split("=", 1)[0].lstrip("+") for e in extra}
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+") not in keys] + list(extra)


def run_config(config: JobsConfig, ps: list[str], steps: int, interval: int, work: Path,
               extra: list[str]) -> dict[str, Any]:
    """Launch config.jobs runs at once (norm.p cycling through ps); their steady tokens/s."""
    threads = max(1, (os.cpu_count() or 1) // config.jobs)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    procs = []
    for i in range(config.jobs):
        run_dir = work / f"{config.name}-p{'_'.join(ps)}" / f"job{i}"
        ours = [*PAPER_RUN, f"norm.p={ps[i % len(ps)]}",
                f"compile={str(config.compile).lower()}", f"threads={threads}",
                f"train.max_iters={steps}", f"train.eval_interval={interval}",
                "train.eval_iters=5", f"hydra.run.dir={run_dir}"]
        cmd = [sys.executable, "-m", "qknorm.train", *with_extra(ours, extra)]
        procs.append((run_dir, subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.PIPE, text=True)))
    jobs = []
    for run_dir, proc in procs:
        _, err = proc.communicate()
        ended = time.time()
        final = rundir.read_final(run_dir) or {}
        if proc.returncode != 0 or final.get("status") != "completed":
            raise UserError(f"{config.name}: job {run_dir} failed: "
                            f"{(err or '').strip().splitlines()[-1:]}")
        rows = rundir.read_metrics(run_dir)[1:]  # from the end of the first interval on
        # Each eval's wall-clock time, counted back from the job's exit (elapsed_s is relative
        # to the job's own start).
        last = float(rows[-1]["elapsed_s"])
        clock = [(ended - (last - float(r["elapsed_s"])), int(r["step"])) for r in rows]
        jobs.append({**{k: float(final[k]) for k in  # inf / nan are strings in final.json
                        ("p", "steady_tokens_per_s", "tokens_per_s", "wall_time_s")},
                     "flops_per_token": flops_per_token(run_dir),
                     "tokens_per_step": _tokens_per_step(run_dir), "clock": clock})
    clocks = [j.pop("clock") for j in jobs]
    return {"name": config.name, "jobs": config.jobs, "compile": config.compile,
            "threads_per_job": threads,
            "sum_of_steady_tokens_per_s": sum(j["steady_tokens_per_s"] for j in jobs),
            "aggregate_tokens_per_s": common_window_rate(clocks, jobs[0]["tokens_per_step"]),
            "overlap": overlap(clocks), "per_job": jobs}


def _tokens_per_step(run_dir: Path) -> int:
    config = rundir.read_config(run_dir)
    return config["train.batch_size"] * config["model.block_size"]


def _window(clocks: list[list[tuple[float, int]]]) -> tuple[float, float]:
    return max(c[0][0] for c in clocks), min(c[-1][0] for c in clocks)


def overlap(clocks: list[list[tuple[float, int]]]) -> float:
    """The time every job was in its steady window, as a fraction of the longest window."""
    start, end = _window(clocks)
    return max(0.0, end - start) / max(c[-1][0] - c[0][0] for c in clocks)


def common_window_rate(clocks: list[list[tuple[float, int]]], tokens_per_step: int) -> float:
    """Tokens/s of all jobs together while every one of them was past its warm-up: the steps
    each job took inside the common window (linear between its evals), summed, over its length.
    Unlike a sum of per-job rates, a job that ran alone while others compiled adds nothing."""
    start, end = _window(clocks)
    if end <= start:
        return math.nan
    steps = sum(_step_at(c, end) - _step_at(c, start) for c in clocks)
    return steps * tokens_per_step / (end - start)


def _step_at(clock: list[tuple[float, int]], t: float) -> float:
    """The job's step at wall-clock time t, linear between its evals."""
    times, steps = [c[0] for c in clock], [c[1] for c in clock]
    return float(np.interp(t, times, steps))


def write(result: dict[str, Any], out: Path) -> None:
    rundir.atomic_write_text(out, json.dumps(rundir.jsonable(result), indent=1) + "\n")


def mfu(aggregate: float, per_token: float, peak_tflops: float) -> float:
    return aggregate * per_token / (peak_tflops * 1e12) if peak_tflops else math.nan
