"""The MLflow store a tracker.uri names: the lock exports to it take turns on, where a SQLite
store's artifacts go, and whether it opens at all (checked before any training)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from qknorm.errors import UserError, first_line


def lock_path(uri: str) -> Path | None:
    """The file exports to this store lock (SQLite and file stores), None for a server."""
    if uri.startswith("sqlite:"):
        database = uri.split(":///", 1)[1] if ":///" in uri else ""
        return Path(database + ".lock") if database and database != ":memory:" else None
    if "://" not in uri or uri.startswith("file:"):
        path = Path(uri.removeprefix("file://"))
        return path / ".qknorm-export.lock"
    return None


def artifact_root(uri: str) -> Path | None:
    """Where artifacts go for a SQLite store: beside the database, not in the working dir."""
    lock = lock_path(uri)
    if lock is None or not uri.startswith("sqlite:"):
        return None
    return lock.parent.resolve() / "mlflow-artifacts"


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    path = lock_path(uri)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, and when a process dies
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def quiet_mlflow() -> None:
    """No telemetry (offline: nothing leaves the machine), no INFO lines on creating tables."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow  # noqa: F401  (it sets its loggers' levels when imported: set ours after)

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def check_store(uri: str) -> None:
    """Open the store as the export will, before any training: a store that cannot be opened
    (an unknown scheme, an unreachable server, a path that cannot be written) is one UserError
    line now, not a failed export after hours of runs. A server gets one try of 10 s."""
    quiet_mlflow()
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES",
                                            "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ.update(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="10")
    try:
        from mlflow import MlflowClient

        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as e:
        raise UserError(f"tracker.uri={uri} cannot be opened as an MLflow store "
                        f"({_reason(uri, e)}); use e.g. sqlite:///outputs/mlflow.db, a local "
                        "directory, or a running server's http(s):// URL") from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _reason(uri: str, e: Exception) -> str:
    """MLflow's reason, short: its messages run to hundreds of characters."""
    text = first_line(e)
    if "unsupported URI" in text:
        return f"unsupported scheme {uri.split(':', 1)[0]!r}"
    return re.split(r"(?<=[.;])\s", text, maxsplit=1)[0][:200]
