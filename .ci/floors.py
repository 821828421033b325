"""Print pip constraints that pin every direct dependency at the floor pyproject.toml gives it.

CI installs qknorm with them into a separate venv and runs smoke tests there, so a floor that is
false (the code calls an API newer than it) fails CI instead of a user's install. torch is the
exception: only the local CPU build can be installed here, so `--torch VERSION` pins that one;
pyproject.toml says next to torch's floor which torch API sets it.

    python3 .ci/floors.py --torch 2.13.0 > floors.txt
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
EXTRAS = ("sweep", "dev")  # optional groups installed with the floors; the others need services
REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)")


def floors(project: dict, extras: tuple[str, ...] = EXTRAS) -> dict[str, str]:
    """name -> floor version of every requirement of `dependencies` and the given extras."""
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    out = {}
    for requirement in requirements:
        name, _, spec = REQUIREMENT.match(requirement).groups()
        lows = re.findall(r">=\s*([^,\s]+)", spec)
        if len(lows) != 1:
            sys.exit(f"error: pyproject.toml: {requirement!r} has no floor; write it as "
                     f"'{name}>=X' with X the oldest version the code works with")
        out[name.lower()] = lows[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", required=True, help="the torch version to pin instead of its floor")
    args = parser.parse_args()
    pins = floors(tomllib.loads(PYPROJECT.read_text())["project"])
    pins["torch"] = args.torch
    for name, version in sorted(pins.items()):
        print(f"{name}=={version}")


if __name__ == "__main__":
    main()
