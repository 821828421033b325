"""The GPU benchmark's bookkeeping, run on CPU with the tiny model (CI has no GPU; the real
benchmark is `python scripts/bench_gpu.py` on a CUDA host)."""

from __future__ import annotations

import json
import math

import pytest

from qknorm.bench import gpu as gpu_bench
from qknorm.errors import UserError

CPU_TINY = ["device=cpu", "dtype=float32", "model=tiny", "train.batch_size=2", "compile=false"]


def test_configs_parse_and_bad_ones_name_the_item():
    assert gpu_bench.parse_configs("1:off,6:on") == [gpu_bench.JobsConfig(1, False),
                                                     gpu_bench.JobsConfig(6, True)]
    with pytest.raises(UserError, match="'4:maybe' is not JOBS:on|off"):
        gpu_bench.parse_configs("1:on,4:maybe")


def test_aggregate_counts_only_the_time_every_job_was_past_warm_up():
    # (wall-clock time, step) at each eval: job a steps 10/s from t=0, job b 20/s from t=2
    a = [(0.0, 100), (10.0, 200)]
    b = [(2.0, 100), (10.0, 260)]
    assert gpu_bench.overlap([a, b]) == 0.8  # common window 2..10 of the longest, 0..10
    # in 2..10: a takes 80 steps, b 160; 4 tokens a step
    assert gpu_bench.common_window_rate([a, b], 4) == (80 + 160) * 4 / 8
    assert gpu_bench.overlap([[(0.0, 1), (4.0, 2)], [(5.0, 1), (9.0, 2)]]) == 0.0


@pytest.mark.slow
def test_extra_overrides_take_the_place_of_the_runs_own_keys_and_groups():
    """The command line refuses a group given twice: an extra model=tiny replaces model=paper."""
    assert gpu_bench.with_extra(["model=paper", "dtype=bfloat16", "norm.p=2"],
                                ["model=tiny", "++dtype=float32"]) == [
        "norm.p=2", "model=tiny", "++dtype=float32"]


def test_two_jobs_at_once_sum_their_steady_throughput(tmp_path):
    row = gpu_bench.run_config(gpu_bench.JobsConfig(2, False), ["2", "inf"], steps=20, interval=5,
                               work=tmp_path, extra=CPU_TINY)
    assert [j["p"] for j in row["per_job"]] == [2.0, math.inf]
    assert row["sum_of_steady_tokens_per_s"] == sum(j["steady_tokens_per_s"] for j in row["per_job"])
    # a common window exists only when the jobs' steady phases overlapped (on a loaded CI
    # machine two 20-step CPU jobs may not); common_window_rate's numbers are tested above
    assert (row["aggregate_tokens_per_s"] > 0) == (row["overlap"] > 0)
    assert 0.0 <= row["overlap"] <= 1.0
    # tiny model: 1 layer, 32 wide, block 32 (conf/model/tiny.yaml)
    n_params = row["per_job"][0]["flops_per_token"] - 12 * 1 * 32 * 32
    assert n_params % 6 == 0 and 10_000 < n_params / 6 < 20_000
    gpu_bench.write({"configs": [row]}, tmp_path / "bench.json")
    assert json.loads((tmp_path / "bench.json").read_text())["configs"][0]["per_job"][1]["p"] == "inf"
