"""Session fixtures for the cluster tests: a throwaway PostgreSQL server and a one-node SLURM
cluster from tests/local_cluster.sh, stopped however the session ends; and a summary of
trial counts per scenario, printed at the end of the run whatever pytest's capture mode."""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "tests" / "local_cluster.sh"
START_TIMEOUT_S = 180
# One line per scenario ("name: COMPLETE=6 FAIL=1 ..."), appended to a file in this directory:
# under pytest-xdist the scenarios run in a worker and the summary prints in the controller,
# which set the variable before starting the workers (they inherit it).
SUMMARY_DIR_ENV = "QKNORM_CLUSTER_SUMMARY_DIR"


def pytest_configure(config) -> None:
    os.environ.setdefault(SUMMARY_DIR_ENV, tempfile.mkdtemp(prefix="qknorm-cluster-summary-"))


def report_states(scenario: str, states: dict[str, int]) -> None:
    """Record a scenario's trial counts per state for the end-of-run summary."""
    line = f"{scenario}: " + " ".join(f"{k}={v}" for k, v in sorted(states.items()))
    with open(Path(os.environ[SUMMARY_DIR_ENV]) / "summary.txt", "a") as f:
        f.write(line + "\n")


def pytest_terminal_summary(terminalreporter) -> None:
    path = Path(os.environ.get(SUMMARY_DIR_ENV, "")) / "summary.txt"
    if path.is_file():
        terminalreporter.section("cluster scenarios: trials per state")
        for line in path.read_text().splitlines():
            terminalreporter.write_line(line)


def _start(what: str) -> tuple[dict[str, str], dict[str, str]]:
    """Start `what` in a fresh dir under /tmp (the postgres user must reach it); returns the
    script's env (with QKNORM_CLUSTER_DIR) and the variables it printed."""
    # /tmp, not pytest's tmp_path: that one is private to root and the server runs as postgres.
    env = {**os.environ, "QKNORM_CLUSTER_DIR": tempfile.mkdtemp(prefix="qknorm-cluster-")}
    r = subprocess.run(["bash", str(SCRIPT), "start", what], env=env, capture_output=True,
                       text=True, timeout=START_TIMEOUT_S)
    if r.returncode != 0:
        _stop(env)
        pytest.fail(f"tests/local_cluster.sh start {what} failed: {r.stderr.strip()[-2000:]}")
    exported = dict(line.removeprefix("export ").split("=", 1)
                    for line in r.stdout.splitlines() if line.startswith("export "))
    return env, exported


def _stop(env: dict[str, str]) -> None:
    subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True,
                   timeout=START_TIMEOUT_S)


def _have_postgres() -> bool:
    return bool(shutil.which("initdb") or glob.glob("/usr/lib/postgresql/*/bin/initdb"))


def _serve(what: str, variable: str, missing: str | None) -> Iterator[str]:
    """Start a service for the session, yield the variable it exported, stop it however the
    session ends; skip with the one-line reason when the machine cannot run it."""
    if missing:
        pytest.skip(missing)
    env, exported = _start(what)
    try:
        yield exported[variable]
    finally:
        _stop(env)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    missing = ("no PostgreSQL server on this machine (initdb not found)" if not _have_postgres()
               else "psycopg is not installed: pip install -e '.[postgres]'"
               if importlib.util.find_spec("psycopg") is None else None)
    yield from _serve("postgres", "QKNORM_PG_URL", missing)


@pytest.fixture(scope="session")
def slurm_conf() -> Iterator[str]:
    missing = ("no SLURM on this machine (slurmctld not found; apt-get install slurm-wlm munge)"
               if not shutil.which("slurmctld")
               else "no SLURM accounting on this machine (slurmdbd or mariadbd not found; apt-get "
                    "install slurmdbd mariadb-server)"
               if not (shutil.which("slurmdbd") and shutil.which("mariadbd"))
               else "hydra-submitit-launcher is not installed: pip install -e '.[slurm]'"
               if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None
               else None)
    yield from _serve("slurm", "SLURM_CONF", missing)
