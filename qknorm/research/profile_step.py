"""Where a training step's time goes: torch.profiler over steps of each variant, as markdown.

    python -m qknorm.research.profile_step --model cpu --threads 1 --norms none,l2,lp_p4,lp_pinf \\
        --dtypes float32,bfloat16 --out docs/profile_step_cpu.md

Each variant is built as scripts/bench.py builds it (qknorm.train.setup, the real step); after a
warm-up, --steps steps run under the profiler. Every op's self CPU time goes to one category (the
first that fits, walking up from the op to the step): the optimizer, gradient clipping, the Lp
norm's forward or backward, attention (the SDPA kernels, or bmm/softmax of the explicit path),
the linear layers' matmuls, casts and copies, GELU, LayerNorm, or other. The shares are of the
profiled step; the profiler adds a little time per op, so ms/step reads a little high.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections import Counter
from pathlib import Path

from qknorm import rundir
from qknorm.bench import steps as bench
from qknorm.errors import run_main
from qknorm.pace import time_steps

# Ancestors (record_function scopes / autograd nodes) that claim every op below them.
SCOPES = (("Optimizer.", "optimizer"), ("clip_grad_norm_", "clip"),
          ("_LpNormalizeBackward", "norm backward"), ("_LpNormalize", "norm forward"))
# Ops by name, for ops no scope claimed.
OPS = {
    "matmul (linear layers)": ("aten::mm", "aten::addmm"),
    "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu",
                  "aten::_scaled_dot_product_flash_attention_for_cpu_backward", "aten::bmm",
                  "aten::baddbmm", "aten::_softmax", "aten::_softmax_backward_data"),
    "casts and copies": ("aten::copy_", "aten::_to_copy"),
    "GELU": ("aten::gelu", "aten::gelu_backward"),
    "LayerNorm": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
}
CATEGORIES = (*OPS, "norm forward", "norm backward", "optimizer", "clip", "other")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cpu", help="model config group: tiny | cpu | paper")
    ap.add_argument("--norms", default="none,l2,lp_p4,lp_pinf",
                    help=f"comma-separated, from: {', '.join(bench.NORMS)}")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32,bfloat16")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (paper_cpu runs 1)")
    ap.add_argument("--warmup", type=int, default=5, help="steps per variant before profiling")
    ap.add_argument("--steps", type=int, default=10, help="profiled steps per variant")
    ap.add_argument("--top", type=int, default=8, help="top ops (self time) per variant to list")
    ap.add_argument("--out", default="outputs/profile_step.md", help="markdown file to write")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. model.attention=sdpa")
    args = ap.parse_args(argv)
    for key in ("threads", "warmup", "steps", "top"):
        if getattr(args, key) < 1:
            ap.error(f"--{key}={getattr(args, key)} must be >= 1")
    return args


def category(event) -> str:
    """The category of one op's self time: the nearest claiming scope above it, else its name."""
    node = event
    while node is not None:
        for prefix, name in SCOPES:
            if node.name.startswith(prefix):
                return name
        node = node.cpu_parent
    return next((cat for cat, names in OPS.items() if event.name in names), "other")


def profile_variant(variant: bench.Variant, model: str, overrides: list[str], warmup: int,
                    steps: int) -> tuple[float, Counter, Counter]:
    """(profiled ms per step, self ms per step by category, self ms per step by op)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    run = bench.build_run(variant, model, overrides, {})
    time_steps(run, warmup)
    clip = torch.nn.utils.clip_grad_norm_

    def labelled_clip(*args, **kw):  # clipping has no profiler scope of its own
        with record_function("clip_grad_norm_"):
            return clip(*args, **kw)

    torch.nn.utils.clip_grad_norm_ = labelled_clip
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            time_steps(run, steps)
    finally:
        torch.nn.utils.clip_grad_norm_ = clip
    by_cat, by_op = Counter(), Counter()
    for e in prof.events():
        ms = e.self_cpu_time_total / 1e3 / steps
        by_cat[category(e)] += ms
        by_op[e.name] += ms
    return sum(by_cat.values()), by_cat, by_op


def markdown(command: str, env: dict, results: dict[str, tuple[float, Counter, Counter]],
             top: int) -> str:
    names = list(results)
    head = "| | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names) + "\n"
    lines = [f"# Where the training step's time goes ({env['cpu_capability']}, "
             f"{env['threads']} thread(s), torch {env['torch_version']})", "",
             "```sh", command, "```", "",
             f"Load average at the start: {env['load_avg_1m']:.2f} on {env['cpu_count']} cores "
             "(the shares, not the milliseconds, are the figures to read on a loaded host).", "",
             "Share of the profiled step (self CPU time by category):", "", head.rstrip("\n")]
    lines.append("| ms/step (profiled) | " + " | ".join(f"{results[n][0]:.1f}" for n in names) + " |")
    for cat in CATEGORIES:
        lines.append(f"| {cat} | " + " | ".join(
            f"{100 * results[n][1][cat] / results[n][0]:.1f}%" for n in names) + " |")
    ops = []
    for n in names:
        ops += [op for op, _ in results[n][2].most_common(top) if op not in ops]
    lines += ["", f"Top {top} ops by self CPU time per variant (share of the step):", "",
              head.rstrip("\n")]
    for op in ops:
        lines.append(f"| `{op}` | " + " | ".join(
            f"{100 * results[n][2][op] / results[n][0]:.1f}%" for n in names) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    variant_list = bench.variants(args.norms.split(","), args.dtypes.split(","), [False])
    env = bench.environment(torch.get_num_threads())
    results = {}
    for v in variant_list:
        results[v.name] = profile_variant(v, args.model, args.overrides, args.warmup, args.steps)
        print(f"{v.name}: {results[v.name][0]:.1f} ms/step profiled", flush=True)
    text = markdown("python -m qknorm.research.profile_step " + shlex.join(argv), env, results, args.top)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rundir.atomic_write_text(out, text)
    print(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
