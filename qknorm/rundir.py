"""qknorm's run dir (docs/design.md, "The run dir"): final.json and Hydra's files as the sweeper
defines them (hydra_racing_sweeper.rundir, re-exported here for qknorm's readers), and what
qknorm.train writes besides: metrics.jsonl, ckpt.pt, the commit.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from hydra_racing_sweeper.rundir import (  # noqa: F401 (re-exported: the run dir is one format)
    COMPLETED,
    CONFIG_FILE,
    DIVERGED,
    FAILED,
    FINAL_FILE,
    HYDRA_DIR,
    HYDRA_FILE,
    INCOMPLETE,
    OVERRIDES_FILE,
    PRUNED,
    STATUS_MEANING,
    STATUSES,
    atomic_write_bytes,
    atomic_write_text,
    atomic_writer,
    check_writable,
    find_run_dirs,
    jsonable,
    natural_key,
    read_config,
    read_final,
    read_finished,
    read_hydra,
    read_overrides,
    unwritable,
    write_final,
)

from qknorm.errors import UserError

METRICS_FILE = "metrics.jsonl"
CKPT_FILE = "ckpt.pt"
# What tells replicates of one configuration apart (besides a sweep's hydra.sweeper.replicates).
REPLICATE_KEYS = ("seed", "data.fold")


def append_metrics(run_dir: Path, row: dict[str, Any]) -> None:
    with open(run_dir / METRICS_FILE, "a") as f:
        f.write(json.dumps(jsonable(row)) + "\n")


def run_dirs_under(root: Path) -> list[Path]:
    """find_run_dirs, or a UserError when root is not a directory or holds no run."""
    if not root.is_dir():
        raise UserError(f"{root} is not a directory; pass a sweep dir (outputs/sweeps/<name>/"
                        "<stamp>), a run dir, or outputs/")
    run_dirs = find_run_dirs(root)
    if not run_dirs:
        raise UserError(f"no runs under {root} (no directory with a .hydra/ inside); pass a sweep "
                        "dir (outputs/sweeps/<name>/<stamp>), a run dir, or outputs/")
    return run_dirs


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl; a torn last line (run killed mid-write) is skipped."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def save_checkpoint(run_dir: Path, state: dict[str, Any]) -> None:
    import torch  # here, not at the top: readers of run dirs (reports, sweeper) never pay for it

    with atomic_writer(run_dir / CKPT_FILE) as f:
        torch.save(state, f)


def load_checkpoint(run_dir: Path, map_location: str = "cpu") -> dict[str, Any]:
    import torch

    # weights_only: a checkpoint is data, never code to run.
    return torch.load(Path(run_dir) / CKPT_FILE, map_location=map_location, weights_only=True)


# Names the commit of a source tree copied without its .git (a rented GPU host gets the files
# alone); whoever copies a clean checkout sets it. A checkout's own `git rev-parse` goes first.
GIT_SHA_ENV = "QKNORM_GIT_SHA"


@functools.lru_cache(maxsize=1)
def git_sha() -> str | None:
    """The commit of the qknorm source tree; outside a git checkout, $QKNORM_GIT_SHA; else None."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        out = None
    sha = out.stdout.strip() if out is not None and out.returncode == 0 else ""
    return sha or os.environ.get(GIT_SHA_ENV) or None
