"""Install torch into the running Python's environment (`make install` runs it in .venv) and say
in one line which torch came from where.

The CPU wheel index is used when it answers within 3 seconds; otherwise pip's default sources
(the package index, or wheels on local disk) are. Passing an unreachable index to pip costs
minutes: it retries it five times for each package. Standard library only: it runs before
anything else is installed.

    python scripts/install_torch.py torch==2.13.0 --index https://download.pytorch.org/whl/cpu
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from importlib import metadata
from pathlib import Path

PROBE_S = 3.0


def reachable(url: str, timeout: float = PROBE_S) -> bool:
    """Whether url answers within timeout seconds, name lookup included (urlopen's own
    timeout does not bound the lookup, so the probe runs in a thread we stop waiting for)."""
    answered = []

    def probe() -> None:
        try:
            with urllib.request.urlopen(url, timeout=timeout):
                answered.append(True)
        except urllib.error.HTTPError:  # an error page is an answer: the host is there
            answered.append(True)
        except (OSError, ValueError):
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answered)


def pip_install(spec: str, index: str, dry_run: bool) -> dict | None:
    """Run pip; the report's entry for torch, or None when pip installed no torch (there
    already)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--report", str(report), spec]
        if index:
            cmd += ["--extra-index-url", index]
        if dry_run:  # resolve and report the wheel it would install, install nothing
            cmd += ["--dry-run", "--ignore-installed", "--no-deps"]
        subprocess.run(cmd, check=True)
        installs = json.loads(report.read_text())["install"]
    return next((i for i in installs if i["metadata"]["name"].lower() == "torch"), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="what to install, e.g. torch==2.13.0")
    parser.add_argument("--index", default="", help="extra wheel index to use when it answers")
    parser.add_argument("--dry-run", action="store_true",
                        help="only say which torch would be installed from where")
    args = parser.parse_args()
    index, note = args.index, ""
    if index and not reachable(index):
        note = f" ({index} unreachable within {PROBE_S:g} s; pip's default sources used)"
        index = ""
    try:
        torch = pip_install(args.spec, index, args.dry_run)
    except subprocess.CalledProcessError as e:
        sys.exit(f"error: pip could not install {args.spec}{note} (exit {e.returncode}); "
                 "see pip's message above")
    if torch is None:
        print(f"torch {metadata.version('torch')}: already installed in {sys.prefix}")
        return
    url = urllib.parse.unquote(torch["download_info"]["url"])
    verb = "would be installed" if args.dry_run else "installed"
    print(f"torch {torch['metadata']['version']} {verb} from {url}{note}")


if __name__ == "__main__":
    main()
