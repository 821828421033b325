"""Installing: the torch index probe of `make install` (scripts/install_torch.py) and the
dependency floors CI installs (.ci/floors.py).

The probe tests are hermetic: pip reads no config file and sees only indexes served from a tmp
dir on 127.0.0.1, holding a fake torch wheel (metadata only; pip --dry-run never unpacks it).
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "install_torch.py"
UNREACHABLE = "http://127.0.0.1:9/"  # the discard port: nothing listens, refused at once


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_wheel(folder: Path, version: str) -> None:
    """A wheel pip can resolve: metadata only."""
    project = folder / "torch"
    project.mkdir(parents=True)
    info = f"torch-{version}.dist-info"
    with zipfile.ZipFile(project / f"torch-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


@pytest.fixture
def indexes(tmp_path):
    """http://127.0.0.1:PORT/: pypi/ with torch 0.0.1 and cpu/ with torch 0.0.1+cpu."""
    fake_wheel(tmp_path / "pypi", "0.0.1")
    fake_wheel(tmp_path / "cpu", "0.0.1+cpu")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def install_torch(index: str, root: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": root + "pypi/",
           "PIP_FIND_LINKS": "", "PIP_RETRIES": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    start = time.monotonic()
    r = subprocess.run([sys.executable, str(SCRIPT), "torch==0.0.1", "--index", index,
                        "--dry-run"], capture_output=True, text=True, env=env, timeout=120)
    return r, time.monotonic() - start


def test_unreachable_index_is_skipped_within_seconds_and_said(indexes):
    r, seconds = install_torch(UNREACHABLE, indexes)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"torch 0.0.1 would be installed from {indexes}pypi/torch/torch-0.0.1-py3-none-any.whl "
        f"({UNREACHABLE} unreachable within 3 s; pip's default sources used)"]
    assert seconds < 30  # pip retrying the index 5 times took minutes


def test_reachable_index_is_used(indexes):
    r, _ = install_torch(indexes + "cpu/", indexes)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"torch 0.0.1+cpu would be installed from {indexes}cpu/torch/"
        "torch-0.0.1+cpu-py3-none-any.whl"]


def test_probe_gives_up_on_a_host_that_never_answers(indexes):
    reachable = load(SCRIPT).reachable
    with socket.socket() as silent:  # accepts connections (backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        start = time.monotonic()
        assert not reachable(f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout=0.5)
        assert time.monotonic() - start < 2
    assert not reachable(UNREACHABLE, timeout=0.5)
    assert reachable(indexes + "cpu/", timeout=3)


def test_make_install_probes_the_index_instead_of_handing_it_to_pip(tmp_path):
    r = subprocess.run(["make", "-n", "install", f"VENV={tmp_path}/venv",
                        f"TORCH_INDEX={UNREACHABLE}"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (f'{tmp_path}/venv/bin/python scripts/install_torch.py "torch==2.13.0" '
            f'--index "{UNREACHABLE}"') in r.stdout.splitlines()
    assert "--extra-index-url" not in r.stdout


def test_floors_pin_every_direct_dependency_at_its_floor():
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    floors = load(REPO / ".ci" / "floors.py")
    r = subprocess.run([sys.executable, str(REPO / ".ci" / "floors.py"), "--torch", "2.13.0"],
                       capture_output=True, text=True, check=True)
    pins = dict(line.split("==") for line in r.stdout.splitlines())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    plugin = tomllib.loads(floors.PLUGIN.read_text())["project"]  # the racing sweeper's own
    assert floors.EXTRAS == ("sweep", "dev")  # the sweeps and the tests: all CI runs
    names = [floors.REQUIREMENT.match(req).group(1).lower() for req in project["dependencies"]
             + [r for extra in floors.EXTRAS for r in project["optional-dependencies"][extra]]
             + plugin["dependencies"]]
    assert sorted(pins) == sorted(set(names))
    assert pins["scipy"] == floors.floors(plugin, extras=())["scipy"]
    assert pins["torch"] == "2.13.0"  # the local build, not torch's floor
    assert pins["optuna"] == "4.9"  # RetryHeartbeatStaleTrialCallback is new in 4.9
    assert pins["hydra-core"] == "1.3"  # the sweep extra's floors are pinned too
    assert pins["transformers"] == "4.51"  # Qwen3 (tests/test_nn_hosts.py) is new in 4.51
    assert floors.floors({"dependencies": ["a>=1.2,<2", "b[x] >= 3 ; python_version>'3'"]},
                         extras=()) == {"a": "1.2", "b": "3"}
    with pytest.raises(SystemExit, match="'c<2' has no floor; write it as 'c>=X'"):
        floors.floors({"dependencies": ["c<2"]}, extras=())
    # A package both pyproject.tomls name gets the higher floor: the oldest both allow.
    assert floors.merged({"a": "1.9", "b": "2.0"}, {"a": "1.10", "c": "3"}) == {
        "a": "1.10", "b": "2.0", "c": "3"}


def test_the_layer_needs_torch_alone_and_make_install_adds_every_extra_the_tests_use(tmp_path):
    """`pip install qknorm` is the layer (qknorm.nn); the sweeps come with the `sweep` extra,
    which `make install`, CI's floors and each cluster extra bring along."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == ["torch>=2.4"]
    extras = project["optional-dependencies"]
    assert sorted(extras) == ["bpe", "dashboard", "dev", "kjv", "postgres", "replay", "slurm",
                              "sweep", "tracking"]
    assert [name for name in ("slurm", "postgres", "dashboard", "tracking")
            if "qknorm[sweep]" not in extras[name]] == []
    r = subprocess.run(["make", "-n", "install", f"VENV={tmp_path}/venv"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [line.split("#")[0].strip() for line in r.stdout.splitlines() if " -e " in line] == [
        f'{tmp_path}/venv/bin/pip install --quiet -e plugins/hydra_racing_sweeper',  # first
        f'{tmp_path}/venv/bin/pip install --quiet -e '
        '".[sweep,dev,postgres,slurm,tracking,dashboard,kjv,bpe,replay]"']
    assert '-e ./plugins/hydra_racing_sweeper \\\n    -e ".[sweep,dev]"' in (
        REPO / ".ci" / "floors.sh").read_text()
    # CI installs the racing sweeper alone too, as a user does: not editable, no qknorm.
    assert "bash .ci/plugin.sh" in (REPO / ".ci" / "run").read_text()
    assert '"${pip[@]}" install "$PLUGIN"\n' in (REPO / ".ci" / "plugin.sh").read_text()


def test_make_report_takes_the_newest_sweep_by_time_not_by_name(tmp_path):
    """`make report` (the README: "the newest sweep") read an older p_tpe sweep after a newer
    p_grid one: its default SWEEP sorted folders by name, preset first."""
    sweeps = tmp_path / "outputs" / "sweeps"
    for i, folder in enumerate(["p_tpe/2026-11-28_10-00-00", "p_grid/2026-11-28_09-00-00",
                                "p_grid/2026-11-28_08-00-00"]):
        (sweeps / folder).mkdir(parents=True)
        os.utime(sweeps / folder, (1_000_000 + i * 60,) * 2)  # written in this order
    shown = subprocess.run(["make", "-s", "-f", str(REPO / "Makefile"), "--eval",
                            "show-sweep: ; @echo $(SWEEP)", "show-sweep"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert shown.stdout.strip() == "outputs/sweeps/p_grid/2026-11-28_08-00-00", shown.stderr
