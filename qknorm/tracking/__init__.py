"""Trackers: where a run's numbers go besides its run dir (docs/trackers.md).

`tracker=tensorboard` writes event files from inside the training loop (qknorm.tracking.tensorboard);
`tracker=mlflow` exports finished run dirs after the fact (qknorm.tracking.mlflow). Either way the
run dir stays the record and the tracker mirrors it. Whether a tracker's library is installed
is qknorm.config.missing_package's question (asked at validation, before any job starts).

The face: `RunTracker` and `open_run` (what the training loop uses); `mlflow` (its command,
`python -m qknorm.tracking.mlflow`, and `ExportCallback`, which conf/tracker/mlflow.yaml names)
and `tensorboard`. `runs` (run dirs placed in a tracker's tree) and `store` (the MLflow store a tracker.uri
names) are the wing's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from qknorm.config import Config

__all__ = ["RunTracker", "mlflow", "open_run", "tensorboard"]

class RunTracker(Protocol):
    """What the training loop calls: `log` after each metrics.jsonl row, `close` after final.json."""

    def log(self, row: dict[str, Any]) -> None: ...

    def close(self, final: dict[str, Any]) -> None: ...


def open_run(cfg: Config, out_dir: Path) -> RunTracker | None:
    """The tracker a training run writes to as it goes, or None (tracker=none, or mlflow, whose
    export runs in the launching process once the jobs are done)."""
    if cfg.tracker.kind == "tensorboard":
        from qknorm.tracking.tensorboard import TensorBoardRun

        return TensorBoardRun(cfg, out_dir)
    return None
