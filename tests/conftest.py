"""Shared fixtures: every test runs on CPU, reads the corpus from QKNORM_DATA_DIR, writes to tmp."""

from __future__ import annotations

import os

import pytest

from tests.helpers import REPO
from tests.helpers.cli import run_cli
from tests.helpers.cluster import (  # noqa: F401
    postgres_url,
    pytest_configure,
    pytest_terminal_summary,
    slurm_conf,
)

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


@pytest.fixture
def cli(tmp_path):
    def _run(*args: str, **kw):
        return run_cli(list(args), tmp_path, **kw)

    _run.cwd = tmp_path
    return _run
