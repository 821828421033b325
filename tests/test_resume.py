"""A killed single run resumes from its checkpoint and ends bitwise where an uninterrupted one does.

Also: resuming needs a checkpoint, and a checkpoint is data (torch.load weights_only=True):
one that carries a pickled object is refused, its code never runs.
"""

from __future__ import annotations

import os
import pickle
import re

import pytest
import torch

from qknorm import rundir
from tests.helpers.cli import kill_after_evals

# 10 evals of a smoke model, a checkpoint at each: a kill after the third eval lands mid-run.
RUN = ["experiment=smoke", "threads=1", "train.max_iters=200", "train.eval_interval=20",
       "train.save_checkpoint=true"]


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_val_loss_bitwise(cli):
    ref = cli("-m", "qknorm.train", *RUN, "hydra.run.dir=ref")
    assert ref.returncode == 0, ref.stderr

    kill_after_evals(cli.cwd, RUN, "killed", n_evals=3)
    assert rundir.read_final(cli.cwd / "killed") is None  # really killed mid-run
    ckpt_step = rundir.load_checkpoint(cli.cwd / "killed")["step"]
    assert 20 <= ckpt_step < 200

    r = cli("-m", "qknorm.train", *RUN, "hydra.run.dir=killed", "train.resume=true")
    assert r.returncode == 0, r.stderr
    log = (cli.cwd / "killed" / "train.log").read_text()
    assert "resumed from" in log
    # It resumed at the checkpoint's step and trained only the rest: the resumed process logs
    # the evals after that step and none before (a restart from 0 would log step 0 again).
    resumed = log.split("resumed from")[-1]
    assert resumed.split("\n", 1)[0].endswith(f" at step {ckpt_step}")
    evals = [int(m) for m in re.findall(r"step (\d+): train", resumed)]
    assert evals == list(range(ckpt_step + 20, 201, 20))

    want, got = rundir.read_metrics(cli.cwd / "ref"), rundir.read_metrics(cli.cwd / "killed")
    assert [row["step"] for row in got] == list(range(0, 201, 20))  # no duplicated eval rows
    for key in ("val_loss", "train_loss", "lr", "gamma_mean"):
        assert [row[key] for row in got] == [row[key] for row in want], key  # bitwise
    final_ref, final = rundir.read_final(cli.cwd / "ref"), rundir.read_final(cli.cwd / "killed")
    assert final["status"] == "completed" and final["steps"] == 200
    for key in ("val_loss", "best_val_loss", "train_loss", "gamma", "p"):
        assert final[key] == final_ref[key], key
    # progress carried over: tokens_per_s counts every token, not only those after the resume
    assert final["tokens_per_s"] > 0 and final["wall_time_s"] > 0


@pytest.mark.slow
def test_resume_without_checkpoint_is_one_line(cli):
    r = cli("-m", "qknorm.train", "experiment=smoke", "threads=1", "hydra.run.dir=fresh",
            "train.resume=true")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: train.resume=true but there is no checkpoint at ")
    assert str(cli.cwd / "fresh" / "ckpt.pt") in line
    assert "hydra.run.dir=<dir>" in line and "Traceback" not in r.stderr
    assert rundir.read_final(cli.cwd / "fresh") is None


@pytest.mark.slow
def test_resume_with_a_changed_config_is_refused(cli):
    run = ["experiment=smoke", "threads=1", "train.max_iters=10", "train.save_checkpoint=true",
           "hydra.run.dir=run"]
    assert cli("-m", "qknorm.train", *run).returncode == 0
    r = cli("-m", "qknorm.train", *run, "train.resume=true", "norm.p=4")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "norm.p=2.0->4.0" in line and "resume with the interrupted run's overrides" in line


class Payload:
    """Unpickling this runs code: exactly what weights_only=True must refuse."""

    def __reduce__(self):
        return os.system, ("touch pwned",)


@pytest.fixture
def evil_run_dir(tmp_path):
    run_dir = tmp_path / "evil"
    run_dir.mkdir()
    torch.save({"model": {}, "step": 0, "payload": Payload()}, run_dir / rundir.CKPT_FILE)
    return run_dir


def test_checkpoint_with_a_pickled_object_is_refused(evil_run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        rundir.load_checkpoint(evil_run_dir)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.slow
def test_resume_from_a_pickled_object_is_one_line(cli, evil_run_dir):
    r = cli("-m", "qknorm.train", "experiment=smoke", "threads=1", f"hydra.run.dir={evil_run_dir}",
            "train.resume=true")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "was not loaded: torch.load(weights_only=True) refused it" in line
    assert "delete it and train from scratch" in line
    assert not (cli.cwd / "pwned").exists() and not (evil_run_dir.parent / "pwned").exists()
    assert rundir.read_final(evil_run_dir) is None
