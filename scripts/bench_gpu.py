"""GPU benchmark: aggregate tokens/s against jobs at once and compile on/off, p=2 vs 4 vs inf.

    python scripts/bench_gpu.py --out docs/bench_gpu.json
    python scripts/bench_gpu.py --configs 4:on,6:on,8:on --out outputs/bench_gpu.json

Needs a CUDA GPU. A config JOBS:on|off launches JOBS single runs of the paper model at once
(compiled or not; norm.p cycles through --ps); a one-job config runs once per p, one after the
other, which gives the p ratios. See qknorm/bench/gpu.py for what each number means. The JSON is
rewritten after every config, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from qknorm.bench import gpu as gpu_bench
from qknorm.errors import UserError, run_main


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="1:off,1:on,4:off,4:on,6:on,8:on",
                    help="comma-separated JOBS:on|off (compile)")
    ap.add_argument("--ps", default="2,4,inf", help="norm.p values, comma-separated")
    ap.add_argument("--steps", type=int, default=800, help="training steps per job")
    ap.add_argument("--interval", type=int, default=200,
                    help="eval interval; steady tokens/s counts the steps after the first one")
    ap.add_argument("--out", default="outputs/bench_gpu.json", help="JSON file to write")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every job")
    args = ap.parse_args(argv)
    if not 0 < args.interval < args.steps:
        ap.error(f"--interval={args.interval} must be in (0, --steps={args.steps}): the steady "
                 "window is the steps after the first interval")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    configs = gpu_bench.parse_configs(args.configs)
    ps = args.ps.split(",")
    import torch

    if not torch.cuda.is_available():
        raise UserError("no CUDA device: the GPU benchmark needs one (the CPU one is "
                        "scripts/bench.py)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"command": "python scripts/bench_gpu.py " + shlex.join(argv),
              "gpu": torch.cuda.get_device_name(), "torch_version": torch.__version__,
              "matmul_bf16_tflops": gpu_bench.matmul_tflops(), "configs": []}
    with tempfile.TemporaryDirectory(prefix="qknorm-bench-gpu-") as work:
        for config in configs:
            for p_list in ([[p] for p in ps] if config.jobs == 1 else [ps]):
                row = gpu_bench.run_config(config, p_list, args.steps, args.interval,
                                           Path(work), args.overrides)
                if config.jobs == 1:
                    row["name"] += f"-p{p_list[0]}"
                row["mfu"] = gpu_bench.mfu(row["aggregate_tokens_per_s"],
                                           row["per_job"][0]["flops_per_token"],
                                           result["matmul_bf16_tflops"])
                result["configs"].append(row)
                gpu_bench.write(result, out)
                print(f"{row['name']:22s} {row['aggregate_tokens_per_s']:>12,.0f} tok/s "
                      f"(sum of jobs' steady {row['sum_of_steady_tokens_per_s']:,.0f})  "
                      f"overlap {row['overlap']:.2f}  of matmul peak {row['mfu']:.3f}", flush=True)
    print(f"matmul bf16: {result['matmul_bf16_tflops']:.0f} TFLOP/s; wrote {out}")
    return 0


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
