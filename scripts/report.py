"""Report of a sweep: `python scripts/report.py DIR` writes DIR/results.csv, DIR/summary.md and
DIR/report/*.{png,pdf}, then prints the summary. DIR is a sweep dir or outputs/ for every run."""

from __future__ import annotations

from qknorm.report import arg_parser, build_report, options_from, run_cli, write_report


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--quiet", action="store_true", help="do not print the summary")
    args = parser.parse_args()
    report = build_report(args.dir, options_from(args))  # validates everything before writing
    written = write_report(args.dir, report)
    if not args.quiet:
        print(report.summary)
    print(f"wrote {len(written)} files: {args.dir / 'results.csv'}, {args.dir / 'summary.md'}, "
          f"{args.dir / 'report'}/")


if __name__ == "__main__":
    run_cli(main)
