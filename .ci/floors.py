"""Print pip constraints that pin every direct dependency at the floor pyproject.toml gives it.

CI installs qknorm with them into a separate venv and runs smoke tests there, so a floor that is
false (the code calls an API newer than it) fails CI instead of a user's install. The racing
sweeper's own dependencies (plugins/hydra_racing_sweeper/pyproject.toml, which qknorm installs
first) are pinned at their floors too: where both name a package, the higher floor, the oldest
version both allow. torch is the
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

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
EXTRAS = ("sweep", "dev")  # optional groups installed with the floors; the others need services
PLUGIN = ROOT / "plugins" / "hydra_racing_sweeper" / "pyproject.toml"  # its dependencies alone
REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)")


def floors(project: dict, extras: tuple[str, ...] = EXTRAS,
           where: str = "pyproject.toml") -> dict[str, str]:
    """name -> floor version of every requirement of `dependencies` and the given extras."""
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    out = {}
    for requirement in requirements:
        name, _, spec = REQUIREMENT.match(requirement).groups()
        lows = re.findall(r">=\s*([^,\s]+)", spec)
        if len(lows) != 1:
            sys.exit(f"error: {where}: {requirement!r} has no floor; write it as "
                     f"'{name}>=X' with X the oldest version the code works with")
        out[name.lower()] = lows[0]
    return out


def release(version: str) -> tuple[int, ...]:
    """'1.23.2' -> (1, 23, 2): floors are plain releases, compared number by number."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


def merged(*tables: dict[str, str]) -> dict[str, str]:
    """The floors of several pyproject.tomls in one: a package named twice gets the higher."""
    out: dict[str, str] = {}
    for table in tables:
        for name, version in table.items():
            if name not in out or release(version) > release(out[name]):
                out[name] = version
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", required=True, help="the torch version to pin instead of its floor")
    args = parser.parse_args()
    pins = merged(floors(tomllib.loads(PYPROJECT.read_text())["project"]),
                  floors(tomllib.loads(PLUGIN.read_text())["project"], extras=(),
                         where=str(PLUGIN.relative_to(ROOT))))
    pins["torch"] = args.torch
    for name, version in sorted(pins.items()):
        print(f"{name}=={version}")


if __name__ == "__main__":
    main()
