"""Shared fixtures: every test runs on CPU, reads the corpus from QKNORM_DATA_DIR, writes to tmp."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qknorm import rundir
from tests.cluster import (  # noqa: F401
    postgres_url,
    pytest_configure,
    pytest_terminal_summary,
    slurm_conf,
)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

if not os.environ.get("QKNORM_DATA_DIR") and (SHARED_DATA / "tinyshakespeare").exists():
    os.environ["QKNORM_DATA_DIR"] = str(SHARED_DATA)
os.environ.setdefault("MPLBACKEND", "Agg")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs 2 workers on 2 cores: one torch thread each (inherited by the CLI runs
    # they start). With 2 threads a worker's ops wait at every barrier for a core the other
    # worker holds: test_overfits_one_batch[lp4] took 40 s that way against 1.2 s on one thread.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """BPE tokenizers the tests train (and the CLI runs they start) go to a tmp dir, not
    ~/.cache/qknorm: $QKNORM_CACHE_DIR, qknorm/tokenizer.py."""
    os.environ["QKNORM_CACHE_DIR"] = str(tmp_path_factory.mktemp("qknorm-cache"))


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict | None = None):
    """Run `python <args>` in cwd (a tmp dir): the real command line, not an import."""
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


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


@pytest.fixture
def cli(tmp_path):
    def _run(*args: str, **kw):
        return run_cli(list(args), tmp_path, **kw)

    _run.cwd = tmp_path
    return _run
