"""The progress line of a run whose log is not a terminal (qknorm/ticker.py): its numbers on a
fixed clock, computed by hand, and a real run's train.log."""

from __future__ import annotations

import pytest

from qknorm.ticker import Ticker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_interval_with_pace_and_eta_over_the_steps_so_far():
    clock, lines = Clock(), []
    ticker = Ticker(0, 2000, 768, 30.0, lines.append, clock)  # 12 x 64 tokens a step
    clock.now += 29.9
    assert not ticker.due()
    clock.now += 0.1
    assert ticker.due()
    ticker.tick(120, 2.34567)
    # 30 s for 120 steps: 0.25 s a step, 768 / 0.25 = 3072 tok/s, 1880 steps left x 0.25 = 470 s
    assert lines == ["step 120/2000 (6%): loss 2.3457, 3,072 tok/s, elapsed 30s, ETA 7m50s"]
    assert not ticker.due()  # the interval restarts at the line
    clock.now += 30.0
    ticker.tick(200, 2.0)  # 60 s for 200 steps: 0.3 s a step, 1800 x 0.3 = 540 s
    assert lines[1] == "step 200/2000 (10%): loss 2.0000, 2,560 tok/s, elapsed 1m00s, ETA 9m00s"


def test_a_resumed_run_paces_from_its_resumption_and_zero_means_off():
    clock, lines = Clock(), []
    ticker = Ticker(1500, 2000, 100, 10.0, lines.append, clock)
    clock.now += 50.0
    ticker.tick(1600, 1.5)  # 100 steps in 50 s: 0.5 s a step; 400 left: 200 s
    assert lines == ["step 1600/2000 (80%): loss 1.5000, 200 tok/s, elapsed 50s, ETA 3m20s"]
    off = Ticker(0, 10, 1, 0.0, lines.append, clock)
    clock.now += 1e6
    assert not off.due()


@pytest.mark.slow
def test_a_run_whose_log_is_a_file_writes_progress_lines_to_train_log(cli):
    r = cli("-m", "qknorm.train", "experiment=smoke", "tracker.progress_s=1e-9",
            "hydra.run.dir=run")
    assert r.returncode == 0, r.stderr[-2000:]
    log = (cli.cwd / "run" / "train.log").read_text()
    steps = [int(ln.split("step ")[1].split("/")[0]) for ln in log.splitlines()
             if "/30 (" in ln]
    assert steps == list(range(1, 31))  # smoke's 30 steps, a line each at a tiny interval
    quiet = cli("-m", "qknorm.train", "experiment=smoke", "tracker.progress_s=0",
                "hydra.run.dir=quiet")
    assert quiet.returncode == 0 and "/30 (" not in (cli.cwd / "quiet" / "train.log").read_text()

