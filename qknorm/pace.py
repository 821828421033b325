"""How fast a run trains: `time_steps` runs a built run's real training step (qknorm.train's
train_step, at the mid-schedule LR) and times it. One timer for the step benchmarks
(qknorm/bench/steps.py) and the sweep plan's cost line (hydra_racing_sweeper/cost.py), which sits
below the bench: so it stands here, beside the run it times."""

from __future__ import annotations

import time

from qknorm.train import Run, lr_at, train_step


def time_steps(run: Run, n: int) -> tuple[float, float]:
    """Run n training steps at the mid-schedule LR; (wall, CPU) seconds per step (one sync, at
    the end). CPU time is this process's, all its threads: on one thread it is the step's own
    work, which waiting for a core on a shared host does not inflate."""
    t = run.cfg.train
    lr = lr_at(t.max_iters // 2, run.cfg.optimizer, t.max_iters)
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(n):
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        x, y = (b.to(run.device, non_blocking=True)
                for b in run.splits.train.sample(t.batch_size, run.batch_rng))
        loss = train_step(run, x, y)
    loss.item()  # wait for the device once, after the n steps
    return (time.perf_counter() - start) / n, (time.process_time() - cpu_start) / n
