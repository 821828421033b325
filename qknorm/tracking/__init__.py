"""Trackers: where a run's numbers go besides its run dir (docs/trackers.md).

`tracker=tensorboard` writes event files from inside the training loop (qknorm.tracking.tensorboard);
`tracker=mlflow` exports finished run dirs after the fact (qknorm.tracking.mlflow). Either way the
run dir stays the record and the tracker mirrors it. Whether a tracker's library is installed
is missing_package's question (config asks it at validation, before any job starts).

The face: `RunTracker` and `open_run` (what the training loop uses); `mlflow` (its command,
`python -m qknorm.tracking.mlflow`, and `ExportCallback`, which conf/tracker/mlflow.yaml names)
and `tensorboard`. `runs` (run dirs placed in a tracker's tree) and `store` (the MLflow store a tracker.uri
names) are the wing's own.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from qknorm.config import Config

__all__ = ["RunTracker", "missing_package", "mlflow", "open_run", "tensorboard"]

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


# The trackers' libraries (qknorm/tracking/), looked for without importing them: a config naming
# one that is missing fails at validation, before any job starts.
EXTRA = "tracking"  # pyproject.toml's optional-dependencies group holding both libraries
INSTALL = f"pip install -e '.[{EXTRA}]'"
# tracker kind -> (the module it imports, the distribution that provides it)
PACKAGES = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow-skinny")}


def missing_package(kind: str) -> str | None:
    """One line naming what to install when `tracker=kind` cannot work here; None when it can."""
    if kind not in PACKAGES:
        return None
    module, dist = PACKAGES[kind]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, a broken stub
        found = False
    if found:
        return None
    return (f"tracker={kind} needs the {dist} package, which is not installed; run {INSTALL} "
            f"(the {EXTRA!r} extra), or use tracker=none")
