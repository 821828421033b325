"""Real command-line runs in temporary directories."""

from __future__ import annotations

import json
import math

import pytest

from qknorm import rundir
from tests.helpers import REPO

# The smoke model has 1 layer of 2 heads (conf/model/tiny.yaml) and an Lp norm, so one gamma
DIAGNOSTICS = {f"{name}{layer}" for name in ("attn_entropy", "attn_entropy_frac", "attn_max_weight",
                                             "logit_std", "attn_logit_max")
               for layer in ("", "_l0")} | {"gamma_l0", "out_logit_mean", "out_logit_max", "out_z",
                                            "attn_logit_max_l0_h0", "attn_logit_max_l0_h1"}


@pytest.mark.slow
def test_smoke_run_writes_metrics_and_final(cli):
    r = cli("-m", "qknorm.train", "experiment=smoke")
    assert r.returncode == 0, r.stderr
    (run_dir,) = (cli.cwd / "outputs" / "runs").iterdir()
    final = rundir.read_final(run_dir)
    assert final["status"] == "completed"
    assert final["steps"] == 30
    assert math.isfinite(final["val_loss"]) and final["val_loss"] < math.log(65)
    rows = rundir.read_metrics(run_dir)
    assert [row["step"] for row in rows] == [0, 10, 20, 30]
    assert final["best_val_loss"] == min(row["val_loss"] for row in rows)
    assert set(json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])) == {
        "step", "train_loss", "val_loss", "val_bpc", "val_bpb", "lr", "elapsed_s", "tokens_per_s",
        "steady_tokens_per_s", "gamma_mean", "p_mean", *DIAGNOSTICS}
    # Tiny Shakespeare is ASCII at the character level: a token is a character is a byte
    assert final["best_val_bpc"] == final["best_val_bpb"] == final["best_val_loss"] / math.log(2)
    assert rows[-1]["val_bpc"] == rows[-1]["val_loss"] / math.log(2) == final["val_bpc"]
    assert {k: final[k] for k in DIAGNOSTICS} == {k: rows[-1][k] for k in DIAGNOSTICS}
    # steady throughput leaves the first eval interval (warm-up, compilation) out: NaN until the
    # second interval is done
    assert [math.isnan(float(row["steady_tokens_per_s"])) for row in rows] == [True, True, False, False]
    assert final["steady_tokens_per_s"] == rows[-1]["steady_tokens_per_s"] > 0
    assert final["compiled"] is False  # compile=auto on CPU


def test_steady_throughput_leaves_the_first_interval_out():
    from qknorm.train import Progress
    progress = Progress()
    for seconds, steady in ((5.0, False), (2.0, True), (2.0, True)):  # 100 tokens each
        progress.tokens += 100
        progress.add_interval(seconds, 100, steady)
    assert progress.tokens_per_s == 300 / 9.0
    assert progress.steady_tokens_per_s == 200 / 4.0


@pytest.mark.slow
def test_grid_multirun_writes_one_job_dir_per_p(cli):
    r = cli("-m", "qknorm.train", "-m", "norm.p=2,4", "experiment=smoke")
    assert r.returncode == 0, r.stderr
    (sweep,) = (cli.cwd / "outputs" / "sweeps" / "smoke").iterdir()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [j.name for j in jobs] == ["0", "1"]
    assert [rundir.read_final(j)["p"] for j in jobs] == [2.0, 4.0]


@pytest.mark.slow
def test_sample_from_a_checkpointed_run(cli):
    r = cli("-m", "qknorm.train", "experiment=smoke", "train.save_checkpoint=true", "threads=1",
            "hydra.run.dir=outputs/runs/ckpt")
    assert r.returncode == 0, r.stderr
    script = str(REPO / "scripts" / "sample.py")
    r = cli(script, "outputs/runs/ckpt", "--start", "ROMEO:", "--tokens", "40", "--seed", "3")
    assert r.returncode == 0, r.stderr
    text = r.stdout.rstrip("\n")
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 40
    again = cli(script, "outputs/runs/ckpt", "--start", "ROMEO:", "--tokens", "40", "--seed", "3")
    assert again.stdout == r.stdout  # seeded: the same text twice


@pytest.mark.slow
def test_sample_without_checkpoint_is_one_clear_line(cli):
    (cli.cwd / "empty").mkdir()
    r = cli(str(REPO / "scripts" / "sample.py"), "empty")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: no ckpt.pt in empty; train with train.save_checkpoint=true"]


def test_preflight_checks_a_sweep_at_one_of_its_values_not_the_presets():
    """experiment=paper_cpu sets data.fold=9; under data.n_folds=5 every job gets a fold of
    0..4, so the checked job must too (a 5-fold grid of the preset was refused before)."""
    from qknorm.cli import preflight
    from qknorm.errors import UserError

    preflight(["experiment=paper_cpu", "data.n_folds=5", "data.fold=0,1,2,3,4"])
    with pytest.raises(UserError, match=r"data.fold=7 is out of range"):
        preflight(["experiment=paper_cpu", "data.n_folds=5", "data.fold=7,1"])
    # A preset's replicates count too: p_tpe's start at fold 0, p_tpe_plain's at fold 8.
    preflight(["search=p_tpe", "data.n_folds=5"])
    with pytest.raises(UserError, match=r"data.fold=8 is out of range for data.n_folds=5"):
        preflight(["search=p_tpe_plain", "data.n_folds=5"])


@pytest.mark.slow
def test_help_is_the_commands_own(cli):
    """--help was Hydra's generic 'train is powered by Hydra' (issue 54): it is qknorm.train's
    usage, examples and config groups (conf/config.yaml's hydra.help.template)."""
    r = cli("-m", "qknorm.train", "--help")
    assert r.returncode == 0, r.stderr
    assert "powered by Hydra" not in r.stdout
    assert r.stdout.startswith("python -m qknorm.train [KEY=VALUE ...]")
    assert "python -m qknorm.train search=p_tpe hydra.sweeper.dry_run=true" in r.stdout
    assert "norm: l2, lp, none, rms" in r.stdout  # Hydra fills in the groups
