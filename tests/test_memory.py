"""A run whose T x T tensors cannot fit is refused before anything is built (qknorm/memory.py),
and a run stopped by Ctrl-C is one console line, exit 130, recorded as interrupted."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import time

import pytest
import torch

from qknorm import rundir
from qknorm.config import Config, ModelConfig, TrainConfig
from qknorm.errors import UserError
from qknorm.memory import check_fits
from tests.helpers.cli import FAST

CPU = torch.device("cpu")
GB = 10**9


def _smoke(block_size: int, **train) -> Config:
    """experiment=smoke's shape (conf/model/tiny.yaml, conf/experiment/smoke.yaml) at block_size."""
    return Config(model=ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=block_size),
                  train=TrainConfig(batch_size=8, **train))


def test_the_diagnostics_of_a_long_block_are_refused_with_their_size_and_the_key_that_drops_them():
    # by hand: one (B, nh, T, T) float32 tensor = 8 * 2 * 20000^2 * 4 B = 25.6 GB (the size the
    # allocator asked in the issue); 6 of them plus the mask 20000^2 * 4 B = 1.6 GB: 155.2 GB
    with pytest.raises(UserError) as e:
        check_fits(_smoke(20000, diag_batches=4), CPU, compiled=False, available=21 * GB)
    line = str(e.value)
    assert line.startswith("model.block_size=20000 does not fit: the attention diagnostics")
    assert "155.2 GB" in line and "21.0 GB available" in line
    assert "train.diag_batches=0" in line
    # without the diagnostics the mask alone (1.6 GB) fits; with 1.5 GB it does not
    check_fits(_smoke(20000, diag_batches=0), CPU, compiled=False, available=21 * GB)
    with pytest.raises(UserError, match=r"causal masks need about 1\.6 GB"):
        check_fits(_smoke(20000, diag_batches=0), CPU, compiled=False, available=15 * GB // 10)


def test_a_block_whose_masks_cannot_fit_is_refused_before_the_model_is_built():
    # 100000^2 * 4 B = 40 GB per layer: what model.py's torch.full asked for in the issue
    with pytest.raises(UserError) as e:
        check_fits(_smoke(100000, diag_batches=0), CPU, compiled=False, available=21 * GB)
    assert "causal masks need about 40.0 GB" in str(e.value)
    assert str(e.value).endswith("lower model.block_size")


def test_a_model_too_wide_or_too_deep_is_refused_by_its_weights():
    # by hand, 4 float32 copies (weight, gradient, AdamW's two moments) of 12 n_embd^2 a layer:
    # width, model.n_embd=1000000 model.n_head=1 on model=cpu's 4 layers: 12 * 4 * 10^12 * 16 B
    wide = Config(model=ModelConfig(n_layer=4, n_head=1, n_embd=1_000_000, block_size=64))
    with pytest.raises(UserError) as e:
        check_fits(wide, CPU, compiled=False, available=21 * GB)
    assert str(e.value) == (
        "model.n_embd=1000000 model.n_layer=4 does not fit: the model's weights need about "
        "768000.0 GB (at least 12 x model.n_layer x model.n_embd^2 float32, each with its "
        "gradient and AdamW's two moments) and this cpu has 21.0 GB available; lower "
        "model.n_embd or model.n_layer")
    # depth, model.n_layer=100000 at width 128: 12 * 10^5 * 128^2 * 16 B = 314.6 GB
    deep = Config(model=ModelConfig(n_layer=100_000, n_head=4, n_embd=128, block_size=64))
    with pytest.raises(UserError, match=r"weights need about 314\.6 GB"):
        check_fits(deep, CPU, compiled=False, available=21 * GB)
    # train.max_iters=0 evaluates only: the weights alone, 12 * 10^5 * 128^2 * 4 B = 78.6 GB
    deep.train.max_iters = 0
    with pytest.raises(UserError, match=r"weights need about 78\.6 GB \(at least 12 x model"
                                        r"\.n_layer x model\.n_embd\^2 float32\) and"):
        check_fits(deep, CPU, compiled=False, available=21 * GB)
    check_fits(deep, CPU, compiled=False, available=80 * GB)


def test_the_explicit_path_counts_its_attention_matrices():
    # 2 * 1 layer * 8 * 2 * 4000^2 * 4 B = 2.048 GB, plus the mask 0.064 GB: 2.112 GB
    config = _smoke(4000, diag_batches=0)
    check_fits(config, CPU, compiled=False, available=2 * GB)  # SDPA: the mask alone
    config.model.attn_softcap = 50.0  # a softcap takes the explicit path
    with pytest.raises(UserError, match=r"explicit attention path need about 2\.1 GB"):
        check_fits(config, CPU, compiled=False, available=2 * GB)
    config.model.attn_softcap = None  # so does model.attention=auto under torch.compile on CPU
    with pytest.raises(UserError, match="explicit attention path"):
        check_fits(config, CPU, compiled=True, available=2 * GB)


def test_a_small_model_fits_this_machine():
    check_fits(_smoke(64, diag_batches=4), CPU, compiled=False)  # reads /proc/meminfo


def test_an_interrupted_run_records_failed_with_the_interruption(tmp_path):
    from qknorm.bench.steps import compose
    from qknorm.train import INTERRUPTED, train

    def ctrl_c(step, row):
        if step == 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(compose("tiny", ["experiment=smoke", "threads=1", "train.max_iters=20"]),
              tmp_path, ctrl_c)
    final = rundir.read_final(tmp_path)
    assert (final["status"], final["error"], final["steps"]) == ("failed", INTERRUPTED, 10)


def test_ctrl_c_before_the_first_timed_interval_still_records_the_run(tmp_path, monkeypatch):
    """Ctrl-C at step 3, before any eval timed an interval: final.json was not written (tokens
    over 0 s of training time raised ZeroDivisionError over the interrupt)."""
    import qknorm.train as train_module
    from qknorm.bench.steps import compose

    steps, real_step = [], train_module.train_step

    def step_then_ctrl_c(run, x, y):
        if len(steps) == 3:
            raise KeyboardInterrupt
        steps.append(1)
        return real_step(run, x, y)

    monkeypatch.setattr(train_module, "train_step", step_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(compose("tiny", ["experiment=smoke", "threads=1"]), tmp_path)
    final = rundir.read_final(tmp_path)
    assert (final["status"], final["error"], final["steps"]) == ("failed", "interrupted (Ctrl-C)", 3)
    assert math.isnan(float(final["tokens_per_s"]))  # no interval was timed


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    run_dir = tmp_path / "run"
    # SIGINT's default disposition in the child, whatever this process's (a background shell
    # ignores it, and Python then installs no KeyboardInterrupt handler)
    proc = subprocess.Popen(
        [sys.executable, "-m", "qknorm.train", *FAST, "train.max_iters=100000",
         f"hydra.run.dir={run_dir}"], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not rundir.read_metrics(run_dir):  # training has started
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert err.strip().splitlines() == [err.strip()] and err.startswith("interrupted: "), err
    assert "Traceback" not in out + err
    assert rundir.read_final(run_dir)["error"] == "interrupted (Ctrl-C)"
