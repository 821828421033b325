"""Speed benchmark: step time and tokens/s per variant (interleaved), the norm alone, job overhead.

    python scripts/bench.py --model cpu --threads 2 --out docs/bench_cpu.json
    python scripts/bench.py --model cpu --compile --norms none,l2,lp_p4 --out docs/bench_compile.json
    python scripts/bench.py --model cpu --threads 1 --norms none,l2,lp_p4,lp_pinf --dtypes float32 \
        --compile --no-micro --no-eval --no-overhead --out docs/bench_step_cpu.json   # issue 13
    python scripts/bench.py --model cpu --threads 1 --arch gpt,angpt --norms l2,lp_p4 \
        --dtypes float32 --no-micro --no-eval --no-overhead --out docs/bench_angpt_cpu.json
    python scripts/bench.py --report docs/results/paper_cpu/qknorm docs/results/paper_cpu/calibrated \
        --out docs/bench_report_cpu.json    # the report per replicate test (issue 34)

Writes one JSON file (see qknorm/bench/steps.py and overhead.py for what each number means) and
prints a short table.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

import _cli

from qknorm import rundir
from qknorm.bench import overhead
from qknorm.bench import steps as bench
from qknorm.errors import run_main


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cpu", help="model config group: tiny | cpu | paper")
    ap.add_argument("--norms", default=",".join(bench.NORMS),
                    help=f"comma-separated, from: {', '.join(bench.NORMS)}")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32,bfloat16")
    ap.add_argument("--compile", action="store_true",
                    help="also time torch.compile'd variants (about a minute of compiling each)")
    ap.add_argument("--attention", default="auto",
                    help="comma-separated model.attention settings: auto,sdpa,explicit")
    ap.add_argument("--arch", default="gpt",
                    help="comma-separated model.arch settings: gpt,angpt (ratio angpt / gpt per round)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--warmup", type=int, default=10, help="steps per variant before timing")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds over all variants")
    ap.add_argument("--steps", type=int, default=5, help="steps per variant per round")
    ap.add_argument("--micro-reps", type=int, default=50, help="norm calls per variant per round")
    ap.add_argument("--micro-ps", default=",".join(str(p) for p in bench.MICRO_PS),
                    help="comma-separated p values for the norm micro-benchmark (inf allowed)")
    ap.add_argument("--no-micro", action="store_true", help="skip the norm micro-benchmark")
    ap.add_argument("--no-overhead", action="store_true", help="skip the per-job overhead probe")
    ap.add_argument("--no-eval", action="store_true",
                    help="skip timing an eval against its attention diagnostics")
    ap.add_argument("--overhead-repeats", type=int, default=3)
    ap.add_argument("--report", nargs="+", type=Path, metavar="DIR", default=None,
                    help="time only the report of each results DIR, paired vs corrected test "
                    "(qknorm/bench/report.py)")
    ap.add_argument("--out", default="outputs/bench.json", help="JSON file to write")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. train.batch_size=24")
    args = ap.parse_args(argv)
    try:
        args.micro_ps = [float(p) for p in args.micro_ps.split(",")]
    except ValueError:
        ap.error(f"--micro-ps={args.micro_ps!r} must be comma-separated numbers (or inf)")
    if any(not p >= 1 for p in args.micro_ps):
        ap.error(f"--micro-ps={args.micro_ps} must all be >= 1 (or inf)")
    for key in ("warmup", "rounds", "steps", "micro_reps", "overhead_repeats"):
        if getattr(args, key) < 1:
            ap.error(f"--{key.replace('_', '-')}={getattr(args, key)} must be >= 1")
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads={args.threads} must be >= 1")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    import torch

    if args.report:
        return bench_reports(args, argv)
    variant_list = bench.variants(args.norms.split(","), args.dtypes.split(","),
                                  [False, True] if args.compile else [False],
                                  args.attention.split(","), args.arch.split(","))
    result = {"command": "python scripts/bench.py " + shlex.join(argv),
              "environment": bench.environment(torch.get_num_threads())}
    steps = bench.bench_steps(variant_list, args.model, args.overrides, warmup=args.warmup,
                              rounds=args.rounds, steps=args.steps)
    result.update(steps)
    if not args.no_micro:
        c = steps["config"]
        shape = (c["batch_size"], c["n_head"], c["block_size"], c["n_embd"] // c["n_head"])
        result["norm_micro"] = {"shape": list(shape),
                                "rows": bench.bench_norm(shape, args.micro_ps, rounds=args.rounds,
                                                         reps=args.micro_reps)}
    if not args.no_eval:
        result["eval"] = bench.bench_eval(args.model, args.overrides, variant_list[0].norm,
                                          rounds=args.rounds)
    if not args.no_overhead:
        result["overhead"] = overhead.bench_overhead(args.model, args.overrides, args.threads,
                                                     repeats=args.overhead_repeats)
    result["environment"]["load_avg_1m_end"] = os.getloadavg()[0]

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rundir.atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    _print_table(result)
    print(f"wrote {out}")
    return 0


def bench_reports(args: argparse.Namespace, argv: list[str]) -> int:
    from qknorm.bench.report import bench_report

    for d in args.report:
        if not d.is_dir():
            raise _cli.UserError(f"--report {d}: no such results dir; pass a report's DIR")
    import torch

    result = {"command": "python scripts/bench.py " + shlex.join(argv),
              "environment": bench.environment(torch.get_num_threads()),
              "report": [bench_report(d, rounds=args.rounds) for d in args.report]}
    result["environment"]["load_avg_1m_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rundir.atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    for r in result["report"]:
        for part in ("statistics", "report"):
            t = r[part]
            print(f"{r['dir']} {part}: paired {t['paired_s']['median']:.3f} s, corrected "
                  f"{t['corrected_s']['median']:.3f} s, corrected / paired "
                  f"{t['corrected / paired']['median']:.3f} (IQR "
                  f"{t['corrected / paired']['q1']:.3f}-{t['corrected / paired']['q3']:.3f})")
    print(f"wrote {out}")
    return 0


def _print_table(result: dict) -> None:
    print(f"{'variant':32s} {'ms/step':>9s} {'IQR':>7s} {'CPU ms':>8s} {'tokens/s':>9s}")
    for row in result["variants"]:
        s, c, t = row["step_ms"], row["cpu_step_ms"], row["tokens_per_s"]
        print(f"{row['name']:32s} {s['median']:9.1f} {s['iqr']:7.1f} {c['median']:8.1f} "
              f"{t['median']:9.0f}")
    print("step-time ratios, wall (CPU):")
    for name, r in result["ratios"].items():
        print(f"  {name:60s} {r['median']:.3f}  (IQR {r['q1']:.3f}-{r['q3']:.3f})  "
              f"({result['ratios_cpu'][name]['median']:.3f})")
    if result["speedup"]:
        print(f"speed-up over {result['reference']}, wall (CPU):")
        for name, r in result["speedup"].items():
            print(f"  {name:60s} {r['median']:.3f}  (IQR {r['q1']:.3f}-{r['q3']:.3f})  "
                  f"({result['speedup_cpu'][name]['median']:.3f})")
    if "eval" in result:
        e = result["eval"]
        print(f"eval ({e['eval_iters']} batches x train, val) {e['eval_ms']['median']:.1f} ms; "
              f"attention diagnostics ({e['diag_batches']} batches) "
              f"{e['diagnostics_ms']['median']:.1f} ms = {e['diagnostics / eval']['median']:.3f} "
              "of the eval")
    if "overhead" in result:
        o = result["overhead"]
        print("per-job overhead (median s, wall / CPU): "
              + ", ".join(f"{k} {o[k + '_wall_s']['median']:.2f} / {o[k + '_cpu_s']['median']:.2f}"
                          for k in ("import", "compose", "data", "model", "in_process", "process",
                                    "job", "warm_job")))


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
