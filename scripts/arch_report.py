"""Two architectures on the same folds: `python scripts/arch_report.py DIR` reads every run under
DIR (e.g. a GPT sweep and an anGPT sweep side by side), writes DIR/comparison.md (each arm, the
paired Δ of --arch against the reference's arch per p, the interaction of p with the
architecture, and --bench's step-time ratios) and DIR/comparison.csv (one row per run), then
prints the summary. docs/angpt.md, "The comparison"."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _cli

from qknorm import rundir
from qknorm.errors import UserError, run_main
from qknorm.report import archcompare, results, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dir", type=Path, help="a folder with both architectures' runs")
    parser.add_argument("--reference", default="gpt:2", type=archcompare.parse_arm,
                        help="ARCH:P, the arm others are held against (default gpt:2)")
    parser.add_argument("--arch", default="angpt", help="the architecture compared (default angpt)")
    parser.add_argument("--p", default=4.0, type=float,
                        help="the p whose Δ against the reference p is compared across "
                             "architectures (default 4)")
    parser.add_argument("--bench", type=Path, help="a scripts/bench.py JSON with --arch ratios")
    _cli.add_test_options(parser)
    args = parser.parse_args()
    bench = None
    if args.bench is not None:
        try:
            bench = json.loads(args.bench.read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"--bench {args.bench}: {e}; pass a JSON written by "
                            "scripts/bench.py --arch gpt,angpt") from None
    collection = results.collect(args.dir)
    runs = collection.runs
    test = stats.replicate_test(runs, args.test, args.n_folds)
    saved = args.dir / "comparison.csv"
    if not rundir.find_run_dirs(args.dir) and saved.is_file():
        folds = archcompare.read_folds(saved)  # rebuilt: its per-fold table as written
    else:
        curves = results.collect_curves(runs, args.dir)
        folds = archcompare.per_fold(runs, curves, args.reference)
    summary = archcompare.markdown(folds, args.reference, args.arch, args.p, bench, test)
    rundir.atomic_write_text(args.dir / "comparison.md", summary)  # both checked before either
    rundir.atomic_write_text(args.dir / "comparison.csv", folds.to_csv(index=False))
    print(summary)
    print(f"wrote {args.dir / 'comparison.md'}, {args.dir / 'comparison.csv'}")


if __name__ == "__main__":
    run_main(main)
