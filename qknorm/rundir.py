"""The files a run writes (DESIGN.md section 5): metrics.jsonl, final.json, ckpt.pt.

Writers live here and nowhere else, so the run-dir format has one definition; qknorm.results
reads what these write.
"""

from __future__ import annotations

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

STATUSES = ("completed", "diverged", "pruned", "failed")


def _jsonable(value: Any) -> Any:
    """inf and nan are not JSON: write them as the strings Python's float() reads back."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # 'inf', '-inf', 'nan'
    return value


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same directory, then rename: readers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_final(run_dir: Path, final: dict[str, Any]) -> None:
    assert final.get("status") in STATUSES, final.get("status")
    text = json.dumps({k: _jsonable(v) for k, v in final.items()}, indent=2) + "\n"
    atomic_write_bytes(run_dir / FINAL_FILE, text.encode())


def append_metrics(run_dir: Path, row: dict[str, Any]) -> None:
    with open(run_dir / METRICS_FILE, "a") as f:
        f.write(json.dumps({k: _jsonable(v) for k, v in row.items()}) + "\n")


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

    path = run_dir / CKPT_FILE
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


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
