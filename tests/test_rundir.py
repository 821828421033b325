"""qknorm.rundir's one file writer (a reader sees the old file or the whole new one, and a
failed write leaves nothing behind) and the commit a run records."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from qknorm import rundir


def test_atomic_writer_replaces_the_whole_file_or_nothing(tmp_path):
    path = tmp_path / "trials.csv"
    rundir.atomic_write_text(path, "old\n")
    with pytest.raises(RuntimeError, match="disk full"):
        with rundir.atomic_writer(path, "w") as f:
            f.write("half a fi")
            raise RuntimeError("disk full")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["trials.csv"]  # no temp file left behind
    rundir.atomic_write_bytes(path, b"new\n")
    assert path.read_bytes() == b"new\n" and os.listdir(tmp_path) == ["trials.csv"]


def test_atomic_writer_makes_files_as_open_does(tmp_path):
    rundir.atomic_write_text(tmp_path / "atomic", "x")
    (tmp_path / "plain").write_text("x")  # mkstemp alone would make 0600
    modes = {stat.S_IMODE(os.stat(tmp_path / name).st_mode) for name in ("atomic", "plain")}
    assert len(modes) == 1


def test_jsonable_writes_non_finite_floats_as_strings_anywhere_in_a_tree():
    tree = {"p": float("inf"), "rows": [{"loss": float("nan")}, (1.5, -float("inf"))], "n": 3}
    assert rundir.jsonable(tree) == {"p": "inf", "rows": [{"loss": "nan"}, [1.5, "-inf"]], "n": 3}


def test_run_dirs_sort_numbered_before_named_and_numbers_as_numbers(tmp_path):
    from qknorm.rundir import find_run_dirs
    for name in ("10", "trial3_0", "2", "trial3_1"):  # a grid's jobs beside a study's
        (tmp_path / "sweep" / name / ".hydra").mkdir(parents=True)
    assert [d.name for d in find_run_dirs(tmp_path)] == ["2", "10", "trial3_0", "trial3_1"]


def test_git_sha_is_the_checkouts_and_the_env_only_outside_one(monkeypatch):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(rundir.__file__).parent,
                          capture_output=True, text=True).stdout.strip()
    monkeypatch.setenv(rundir.GIT_SHA_ENV, "f" * 40)
    rundir.git_sha.cache_clear()
    assert rundir.git_sha() == (head or "f" * 40)  # a checkout's HEAD wins over the variable

    def no_checkout(*args, **kwargs):  # what git answers in a tree copied without .git
        return subprocess.CompletedProcess(args, 128, stdout="", stderr="fatal: not a git repo")

    monkeypatch.setattr(rundir.subprocess, "run", no_checkout)
    rundir.git_sha.cache_clear()
    assert rundir.git_sha() == "f" * 40
    monkeypatch.delenv(rundir.GIT_SHA_ENV)
    rundir.git_sha.cache_clear()
    assert rundir.git_sha() is None
    rundir.git_sha.cache_clear()


def test_a_folder_under_a_file_or_a_read_only_folder_cannot_be_written(tmp_path, monkeypatch):
    """rundir.unwritable names the nearest existing part of the path, and makes nothing."""
    (tmp_path / "README.md").write_text("x")
    (tmp_path / "ro").mkdir()
    monkeypatch.chdir(tmp_path)
    assert rundir.unwritable(Path("README.md/out")) == "README.md is a file, not a folder"
    assert rundir.unwritable(Path("README.md")) == "README.md is a file, not a folder"
    assert rundir.unwritable(Path("new/deeper")) is None  # made when the run starts
    assert rundir.unwritable(tmp_path / "ro" / "x") is None
    # read-only for this process (os.access: a test as root is refused nothing by chmod)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != tmp_path / "ro"
                        and real_access(p, mode))
    assert rundir.unwritable(Path("ro/x/y")) == "ro is not writable"
    assert rundir.unwritable(tmp_path / "ro") == f"{tmp_path / 'ro'} is not writable"
    with pytest.raises(rundir.UserError) as e:
        rundir.check_writable("hydra.run.dir", "ro/run")
    assert str(e.value) == ("hydra.run.dir=ro/run cannot be written: ro is not writable; give "
                            "hydra.run.dir a folder you can write to")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "ro"]


def test_a_study_file_in_a_read_only_folder_is_refused_without_opening_it(tmp_path, monkeypatch):
    """The storage's folder, checked as opening it would find it (specs.check_storage_folder,
    which the plan runs: a dry run refuses it too), without making the folder or the file."""
    from hydra_racing_sweeper import specs

    (tmp_path / "ro").mkdir()
    monkeypatch.chdir(tmp_path)
    specs.check_storage_folder("sqlite:///ro/optuna.db")
    specs.check_storage_folder("sqlite:///ro/new/optuna.db")  # outputs/ is made when missing
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != tmp_path / "ro"
                        and real_access(p, mode))
    for url in ("sqlite:///ro/optuna.db", "journal:///ro/new/optuna.log"):
        with pytest.raises(rundir.UserError) as e:
            specs.check_storage_folder(url)
        assert str(e.value) == (f"hydra.sweeper.storage={url!r} cannot be written: ro is not "
                                "writable; give hydra.sweeper.storage a file in a folder you "
                                "can write to")
    with pytest.raises(rundir.UserError, match="directory no/such does not exist; create it"):
        specs.check_storage_folder("sqlite:///no/such/dir/optuna.db")
    assert [p.name for p in tmp_path.iterdir()] == ["ro"] and not list((tmp_path / "ro").iterdir())
