"""A job's run dir as the sweeper reads it: final.json (how the job ended and its fields: a task
may write it, or the sweeper writes it from the task's return value) and the files Hydra writes
beside it (.hydra/config.yaml, hydra.yaml, overrides.yaml).

The one owner of the format: every writer and every reader of final.json and of Hydra's run
files is here. `atomic_writer` is the one way to write a file that someone may read while it is
written (final.json, the sweep's results).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from hydra_racing_sweeper.errors import UserError

FINAL_FILE = "final.json"
# Hydra's, in every run dir: what makes a directory a run dir.
HYDRA_DIR = ".hydra"
CONFIG_FILE = f"{HYDRA_DIR}/config.yaml"  # the composed config the run trained with
HYDRA_FILE = f"{HYDRA_DIR}/hydra.yaml"  # Hydra's own node: mode, sweeper settings
OVERRIDES_FILE = f"{HYDRA_DIR}/overrides.yaml"  # the job's command-line overrides

# final.json's `status`: how a run ended, and what that means (the report explains exclusions).
STATUS_MEANING = {
    "completed": "ran to its end",
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


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """{'norm': {'p': 2}} -> {'norm.p': 2}: the dotted names users type on the command line."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def unwritable(path: Path) -> str | None:
    """Why a folder could not be made at `path`, or written into, without making anything: the
    nearest part of it that exists must be a directory this process may write into. None when
    nothing stands in the way (what is checked before a run or sweep writes its first file, so
    that `hydra.run.dir=README.md/out` is one line, not a NotADirectoryError)."""
    given = Path(path)
    path = given.absolute()
    for at in (path, *path.parents):
        if not at.exists():
            continue
        # named as the user typed it: relative to the working directory when given so
        shown = at.relative_to(Path.cwd()) if not given.is_absolute() and at != Path.cwd() \
            and at.is_relative_to(Path.cwd()) else at
        if not at.is_dir():
            return f"{shown} is a file, not a folder"
        if not os.access(at, os.W_OK | os.X_OK):
            return f"{shown} is not writable"
        return None
    return None


def check_writable(key: str, path: Any) -> None:
    """UserError naming `key` (e.g. hydra.run.dir) when a folder cannot be made at `path`."""
    why = unwritable(Path(str(path)))
    if why is not None:
        raise UserError(f"{key}={path} cannot be written: {why}; give {key} a folder you can "
                        "write to")


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


def read_final(run_dir: Path) -> dict[str, Any] | None:
    """final.json, or None when the run has not written it. The one parser of final.json."""
    path = Path(run_dir) / FINAL_FILE
    return json.loads(path.read_text()) if path.exists() else None


def read_finished(run_dir: Path) -> dict[str, Any] | None:
    """final.json when it is there, readable and names a known status; None otherwise (running,
    killed, or a file that is not ours): never raises, for readers that list every run dir."""
    try:
        final = read_final(run_dir)
    except (OSError, ValueError):  # not ours to write half a file, but never crash on one
        return None
    return final if isinstance(final, dict) and final.get("status") in STATUSES else None


# -- Hydra's files, and finding run dirs ------------------------------------------------------

def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())  # YAML's .inf is float('inf'), as in OmegaConf
    except (OSError, yaml.YAMLError):
        return None  # Hydra is writing it, or it is not ours


def read_config(run_dir: Path) -> dict[str, Any] | None:
    """The composed config, flattened (norm.p, optuna.study_name, ...); None while Hydra has not
    finished writing it. The one parser of .hydra/config.yaml."""
    tree = _read_yaml(Path(run_dir) / CONFIG_FILE)
    return flatten(tree) if isinstance(tree, dict) else None


def read_hydra(run_dir: Path) -> dict[str, Any]:
    """The `hydra` node of .hydra/hydra.yaml (mode, sweeper, ...); {} when unreadable."""
    tree = _read_yaml(Path(run_dir) / HYDRA_FILE)
    node = tree.get("hydra") if isinstance(tree, dict) else None
    return node if isinstance(node, dict) else {}


def read_overrides(run_dir: Path) -> list[str]:
    """The job's overrides as Hydra recorded them (norm.p=4, data.fold=1, ...); [] when unreadable."""
    overrides = _read_yaml(Path(run_dir) / OVERRIDES_FILE)
    return [str(o) for o in overrides] if isinstance(overrides, list) else []


def find_run_dirs(root: Path) -> list[Path]:
    """Every directory under root (root included) that holds `.hydra/`, sorted naturally."""
    found = []
    # os.walk ignores directories that vanish mid-walk (temp files of a sweep that is writing).
    for dirpath, dirnames, _ in os.walk(root):
        if HYDRA_DIR in dirnames:
            found.append(Path(dirpath))
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "report"]
    return sorted(found, key=natural_key)


def natural_key(path: Path) -> list[tuple[int, int | str]]:
    # job dirs are 0, 1, ..., 10: sort them as numbers, not strings; a numbered and a named dir
    # side by side (0 and trial3_0) compare by kind first, numbers before names
    return [(0, int(part)) if part.isdigit() else (1, part) for part in path.parts]
