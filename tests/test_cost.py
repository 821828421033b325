"""A sweep's plan before it starts (hydra_racing_sweeper/cost.py; its time from qknorm/sweep/hook.py): the
work at most, counted by hand, the time from a measured pace, and the dry run that stops before the study
is opened."""

from __future__ import annotations

import math

import pytest
import torch
from hydra_racing_sweeper import cost


def test_the_work_is_trials_x_blocks_runs_of_max_iters_steps_with_their_evals():
    w = cost.work(24, 5, 2000, 250)
    # evals at steps 0, 250, ..., 2000: 9 a run
    assert (w.runs, w.steps, w.evals, w.capped) == (120, 240_000, 1080, False)
    # 25 steps, an eval every 10: at 0, 10, 20 and the end (25): 4
    assert cost.work(2, 3, 25, 10).evals == 24
    capped = cost.work(24, 5, 2000, 250, budget_steps=26_667)
    # the budget caps the steps, and the evals in proportion: 1080 x 26667 / 240000 = 120.0015
    assert (capped.steps, capped.evals, capped.capped) == (26_667, 121, True)
    assert cost.work(24, 5, 2000, 250, budget_steps=10**9).steps == 240_000  # no cap
    assert cost.work(4, 2, None, None).steps is None  # not qknorm.train's jobs


def test_the_line_adds_setups_steps_and_evals_at_the_measured_pace():
    pace = cost.Pace(0.5, 0.07, 1.5, "cpu, 2 threads")
    # 120 x 0.5 + 240000 x 0.07 + 1080 x 1.5 = 60 + 16800 + 1620 = 18480 s = 5 h 08 m
    assert cost.line(cost.work(24, 5, 2000, 250), pace) == (
        "plan: at most 120 runs (24 trials x 5 replicates), 240,000 training steps and 1,080 "
        "evals; about 5h08m one run at a time: 0.5 s a run's setup, 0.07 s a step and 1.5 s an "
        "eval, measured here (cpu, 2 threads)")
    # 60 + 26667 x 0.07 + 121 x 1.5 = 60 + 1866.7 + 181.5 = 2108.2 s
    assert cost.line(cost.work(24, 5, 2000, 250, 26_667), pace).startswith(
        "plan: at most 120 runs (24 trials x 5 replicates), 26,667 training steps "
        "(budget_steps) and 121 evals; about 35m08s")
    assert cost.line(cost.work(3, 1, None, None), None) == (
        "plan: at most 3 runs (3 trials x 1 replicate); steps and a time once a job has "
        "reported them (hydra_racing_sweeper.trial)")


def test_measure_times_the_jobs_step_on_its_threads_and_restores_the_callers():
    from qknorm.bench.steps import compose

    before = torch.get_num_threads()
    from qknorm.sweep.hook import measure

    pace = measure(compose("tiny", ["threads=1", "train.eval_iters=3"]))
    assert torch.get_num_threads() == before
    assert pace.where == "cpu, 1 thread"
    assert all(0 < x < 60 and math.isfinite(x) for x in (pace.setup_s, pace.step_s, pace.eval_s))


@pytest.mark.slow
def test_a_dry_run_logs_the_plan_and_writes_nothing(cli):
    r = cli("-m", "qknorm.train", "search=p_tpe", "experiment=smoke",
            "hydra.sweeper.dry_run=true")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout + r.stderr
    # 24 proposals x 5 folds of smoke's 30 steps, evals at 0, 10, 20, 30
    assert ("plan: at most 120 runs (24 trials x 5 replicates), 3,600 training steps and 480 "
            "evals; about ") in out
    assert "dry run (hydra.sweeper.dry_run=true): nothing was asked, run or written" in out
    assert sorted(p.name for p in cli.cwd.iterdir()) == []  # no outputs/, no study, no run dir
