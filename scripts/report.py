"""Report of a sweep: `python scripts/report.py DIR` writes DIR/results.csv, DIR/curves.csv,
DIR/summary.md and DIR/report/*.{png,pdf}, then prints the summary. DIR is a sweep dir or
outputs/ for every run."""

from __future__ import annotations

import argparse

import _cli

from qknorm.errors import run_main
from qknorm.report import build_report, write_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    _cli.add_report_options(parser)
    parser.add_argument("--quiet", action="store_true", help="do not print the summary")
    args = parser.parse_args()
    report = build_report(args.dir, _cli.options_from(args))  # validates everything before writing
    written = write_report(args.dir, report)
    if not args.quiet:
        print(report.summary)
    print(f"wrote {len(written)} files: {args.dir / 'results.csv'}, {args.dir / 'summary.md'}, "
          f"{args.dir / 'report'}/")


if __name__ == "__main__":
    run_main(main)
