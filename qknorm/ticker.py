"""A training run's progress as a log line, for logs that are not a terminal.

On a terminal the run draws tqdm's bar. Redirected (a job's train.log, a SLURM .out, `nohup`)
tqdm stays silent, and the log would show nothing between two evals: on this machine's CPU an
eval interval of model=cpu is minutes. So, as Lightning and Hugging Face's Trainer print a line
per logging interval, the run logs one every `tracker.progress_s` seconds of wall time:

  step 143/200 (72%): loss 3.3766, 3,656 tok/s, elapsed 30s, ETA 12s   (a search=lr_width job)

Seconds rather than steps, so one setting suits a CPU run at 10 steps/s and a GPU run at 500.
The loss is the step's training loss (the only host sync this adds, once a line); tokens/s and
the ETA are over the steps since the run (or its resumption) started, evals included, so the
ETA is what the rest of the run will take at the pace so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hydra_racing_sweeper.units import duration


def line(step: int, total: int, loss: float, tokens_per_s: float, elapsed: float,
         eta: float) -> str:
    return (f"step {step}/{total} ({100 * step / total:.0f}%): loss {loss:.4f}, "
            f"{tokens_per_s:,.0f} tok/s, elapsed {duration(elapsed)}, ETA {duration(eta)}")


class Ticker:
    """Logs `line` at most every `every_s` seconds; off when every_s <= 0 (or on a terminal,
    where the caller passes 0: the bar shows the same). `clock` is for tests."""

    def __init__(self, first_step: int, total: int, tokens_per_step: int, every_s: float,
                 emit: Callable[[str], None], clock: Callable[[], float] = time.perf_counter):
        self.first_step, self.total, self.tokens_per_step = first_step, total, tokens_per_step
        self.every_s, self.emit, self.clock = every_s, emit, clock
        self.start = self.last = clock()

    def due(self) -> bool:
        """Whether a line is due now (the caller then syncs the loss and calls tick)."""
        return self.every_s > 0 and self.clock() - self.last >= self.every_s

    def tick(self, step: int, loss: float) -> None:
        """`step` steps are done, the last one's loss `loss`."""
        now = self.clock()
        self.last = now
        done, elapsed = step - self.first_step, now - self.start
        if done <= 0 or elapsed <= 0:
            return
        per_step = elapsed / done
        self.emit(line(step, self.total, loss, self.tokens_per_step / per_step, elapsed,
                       per_step * (self.total - step)))
