"""What a sweep will cost, said before it starts: its runs and training steps at most, and a time
from a step and an eval measured on this host with the first job's config.

The sweeper logs the line at launch and, with `hydra.sweeper.dry_run=true`, stops there: nothing
asked, launched or written. Every kind of sweep runs at most n_trials x its replicate blocks
(a race: its candidates x blocks; a search: its proposals x blocks); a race's drops, a rung's
stops and a pruner only cut that, and a race's `budget_steps` caps the steps. So the line is an
upper bound of the work, and an estimate of its time:

  plan: at most 8 runs (8 trials x 1 replicate), 240 training steps and 32 evals; about 1m04s
  one run at a time: 4.54 s a run's setup, 0.113 s a step and 0.00641 s an eval, measured here
  (cpu, 2 threads)

(search=p_grid experiment=smoke on this project's 2-core host under load; its 8 trials then ran
in 62 s: docs/sweeper.md.)

A task whose hook gives no run length (TaskHook.length) has no steps to count by, nor a step to time
before it runs: its line says the runs, and once one of its jobs has completed and reported
its steps and seconds through hydra_racing_sweeper.trial (reported_pace), the sweeper logs the line
again with the steps and the time at that job's pace (an earlier sweep's job, on a resume):

  plan: at most 8 runs (4 trials x 2 replicates), 800 training steps (100 a run); about 1.6s
  one run at a time: 0.002 s a step, as trial 0's job reported it

The time counts each run's setup (its data, model and eval batches), its training steps and its
evals; not the rest of a job's start-up (a process and its imports, where the launcher starts
one) nor waiting for a launcher. It is one run at a time on this host: runs in parallel (n_jobs)
share its cores, and a SLURM node is another machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hydra_racing_sweeper.units import duration


@dataclass(frozen=True)
class Work:
    """A sweep's work at most: runs, and (where the hook gives a run's length) steps and evals."""

    trials: int
    blocks: int
    steps: int | None = None
    evals: int | None = None
    capped: bool = False  # the steps are the race's budget_steps

    @property
    def runs(self) -> int:
        return self.trials * self.blocks


@dataclass(frozen=True)
class Pace:
    """Seconds a run's setup (data, model, batches), a training step and an eval (train and
    val losses) took here, and where."""

    setup_s: float
    step_s: float
    eval_s: float
    where: str
    reported: int | None = None  # the trial whose job reported its steps and seconds


def reported_pace(trials: list) -> tuple[int, Pace] | None:
    """(steps a run, its pace) from the first trial with a completed job whose final.json has
    steps and seconds (for a task without a run length from its hook, what it reported through
    hydra_racing_sweeper.trial: launcher.job_result writes them), or None. The seconds run from the
    job's first report, so a task's own setup is left out."""
    from hydra_racing_sweeper import rundir
    from hydra_racing_sweeper.study import JOB_DIRS_ATTR

    for t in trials:  # a race's trials run a block at a time: their job dirs, not their jobs
        for run_dir in t.user_attrs.get(JOB_DIRS_ATTR, {}).values():
            try:
                final = rundir.read_final(run_dir) or {}
            except (OSError, ValueError):
                continue
            steps, seconds = final.get("steps"), final.get("wall_time_s")
            if final.get("status") == "completed" and steps and seconds:
                return int(steps), Pace(0.0, float(seconds) / int(steps), 0.0, "", t.number)
    return None


def work(trials: int, blocks: int, max_iters: int | None, eval_interval: int | None,
         budget_steps: int | None = None) -> Work:
    """n_trials x blocks runs of max_iters steps each, evals at step 0, every eval_interval
    and at the end (a training loop's evals); a budget caps the steps (and the evals with them)."""
    runs = trials * blocks
    if max_iters is not None and eval_interval is None:  # steps a job reported: no evals
        steps = runs * max_iters
        if budget_steps is not None and budget_steps < steps:
            return Work(trials, blocks, budget_steps, capped=True)
        return Work(trials, blocks, steps)
    if max_iters is None or eval_interval is None:
        return Work(trials, blocks)
    per_run = max_iters // eval_interval + 1 + (max_iters % eval_interval != 0)
    steps, evals = runs * max_iters, runs * per_run
    if budget_steps is not None and budget_steps < steps:
        evals = math.ceil(evals * budget_steps / steps)
        return Work(trials, blocks, budget_steps, evals, capped=True)
    return Work(trials, blocks, steps, evals)


def line(w: Work, pace: Pace | None, grid: bool = False) -> str:
    """The plan's line (the module doc's example); `grid`: a basic sweeper's jobs, not trials."""
    head = (f"plan: {w.runs:,} jobs" if grid else
            f"plan: at most {w.runs:,} runs ({w.trials} trials x {w.blocks} replicate"
            + ("s)" if w.blocks != 1 else ")"))
    if w.steps is None:
        return head + ("; steps and a time once a job has reported them (hydra_racing_sweeper.trial)"
                       if pace is None else "")
    if w.evals is None:  # steps a job reported (reported_pace)
        per_run = "" if w.capped else f" ({w.steps // w.runs:,} a run)"
        head += f", {w.steps:,} training steps{' (budget_steps)' if w.capped else per_run}"
    else:
        head += (f", {w.steps:,} training steps{' (budget_steps)' if w.capped else ''} and "
                 f"{w.evals:,} evals")
    if pace is None:
        return head
    if pace.reported is not None:
        return (f"{head}; about {duration(w.steps * pace.step_s)} one run at a time: "
                f"{pace.step_s:.3g} s a step, as trial {pace.reported}'s job reported it")
    seconds = w.runs * pace.setup_s + w.steps * pace.step_s + w.evals * pace.eval_s
    return (f"{head}; about {duration(seconds)} one run at a time: {pace.setup_s:.3g} s a "
            f"run's setup, {pace.step_s:.3g} s a step and {pace.eval_s:.3g} s an eval, "
            f"measured here ({pace.where})")
