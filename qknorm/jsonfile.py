"""A JSON file read or written whole, gzip-compressed where its name ends in .gz (the research
replays' per-seed outputs: a committed candidate's JSON is a tenth of its size so)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def read(path: Path) -> Any:
    """The file's JSON; OSError or ValueError as json and open raise them."""
    path = Path(path)
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    return json.loads(path.read_text())


def write(path: Path, data: Any, indent: int | None = 1) -> None:
    """`data` as JSON (indented, a newline at the end); gzip without a time stamp in its header,
    so the same data writes the same bytes."""
    path = Path(path)
    text = json.dumps(data, indent=indent, default=str) + "\n"
    if path.suffix == ".gz":
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                   filename="") as f:
            f.write(text.encode())
    else:
        path.write_text(text)
