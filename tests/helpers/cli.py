"""The real command line, as the CLI tests drive it: run `python ARGS` in a tmp dir, kill a
training run mid-way, and the check of a user error (exit 2, one stderr line, no traceback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from qknorm import rundir
from tests.helpers import REPO

REPORT = str(REPO / "scripts" / "report.py")
# Seconds per job: the smoke model, one thread, 20 steps, an eval every 10.
FAST = ["experiment=smoke", "threads=1", "train.max_iters=20", "train.eval_interval=10"]


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict | None = None):
    """Run `python <args>` in cwd (a tmp dir): the real command line, not an import."""
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def ok(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stderr[-3000:]


def assert_one_line_error(r, *needles: str, code: int = 2) -> str:
    """A user error as qknorm.errors prints it: exit `code`, one stderr line "error: ..." holding
    every needle, no traceback on either stream. Returns the line."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in r.stderr + r.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def kill_after_evals(cwd: Path, args: list[str], run_dir: str, n_evals: int) -> None:
    """Start `python -m qknorm.train ARGS hydra.run.dir=RUN_DIR` in cwd, wait until n_evals eval
    rows were written, then kill -9 it: a run killed mid-way, for the resume tests. With
    train.save_checkpoint the checkpoint of eval k is written before row k+1, so the kill
    leaves one of eval n_evals - 1 or later."""
    proc = subprocess.Popen([sys.executable, "-m", "qknorm.train", *args, f"hydra.run.dir={run_dir}"],
                            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while len(rundir.read_metrics(cwd / run_dir)) < n_evals:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, f"no {n_evals} evals within 240 s"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
