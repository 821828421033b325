"""The files a run writes (docs/design.md, "The run dir"): metrics.jsonl, final.json, ckpt.pt.

Writers live here and nowhere else, so the run-dir format has one definition; qknorm.report.results
and the sweeper read what these write. `atomic_writer` is the project's one way to write a file
that someone may read while it is written (run files, reports, sweep results, the corpus).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
FINAL_FILE = "final.json"
CKPT_FILE = "ckpt.pt"

# final.json's `status`: how a run ended, and what that means (the report explains exclusions).
STATUS_MEANING = {
    "completed": "trained to train.max_iters",
    "diverged": "loss became non-finite",
    "pruned": "stopped early, by the Optuna pruner or at a race's rung",
    "failed": "raised an error",
}
STATUSES = tuple(STATUS_MEANING)
COMPLETED, DIVERGED, PRUNED, FAILED = STATUSES
# Never written: what readers call a run dir without final.json (killed, or still running).
INCOMPLETE = "incomplete"

# Files are created as open() would (0666 minus the umask), not mkstemp's private 0600.
_UMASK = os.umask(0)
os.umask(_UMASK)


def jsonable(value: Any) -> Any:
    """inf and nan are not JSON: write them, anywhere in a tree of dicts and lists, as the
    strings Python's float() reads back."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # 'inf', '-inf', 'nan'
    return value


@contextlib.contextmanager
def atomic_writer(path: Path, mode: str = "wb"):
    """A file to write `path` through: a temp file in the same directory, renamed over `path`
    when the block ends and deleted when it raises. Readers see the old file or the whole new
    one, never half of one, and a failed write leaves nothing behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_writer(path) as f:
        f.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def write_final(run_dir: Path, final: dict[str, Any]) -> None:
    assert final.get("status") in STATUSES, final.get("status")
    text = json.dumps(jsonable(final), indent=2) + "\n"
    atomic_write_text(run_dir / FINAL_FILE, text)


def append_metrics(run_dir: Path, row: dict[str, Any]) -> None:
    with open(run_dir / METRICS_FILE, "a") as f:
        f.write(json.dumps(jsonable(row)) + "\n")


def read_final(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / FINAL_FILE
    return json.loads(path.read_text()) if path.exists() else None


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


@functools.lru_cache(maxsize=1)
def git_sha() -> str | None:
    """The commit of the qknorm source tree, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
