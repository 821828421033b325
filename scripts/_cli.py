"""What every script in scripts/ shares: it runs from a checkout without installing qknorm, a user
mistake is one `error:` line and exit 2 (no traceback), and the report's options parse one way.

Scripts import this module first (`import _cli`): Python puts scripts/ on sys.path for them.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run from a checkout without install

from qknorm import rundir  # noqa: E402
from qknorm.errors import UserError, exit_with  # noqa: E402
from qknorm.report import (  # noqa: E402
    DEFAULT_METRIC,
    Options,
    parse_p,
    plots,  # noqa: E402
)
from qknorm.report.baseline import AUTO  # noqa: E402
from qknorm.report.computed import DEFAULT_EQUIVALENCE  # noqa: E402

FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


def run(main: Callable[[], int | None]) -> None:
    """Call main and exit with its code; a UserError is one line on stderr and exit 2."""
    try:
        code = main()
    except UserError as e:
        exit_with(e)
    sys.exit(code or 0)


def add_report_options(parser: argparse.ArgumentParser, figure: bool = False) -> None:
    """DIR, --metric, --baseline, --by, --equivalence, --logx (and --out for one figure)."""
    parser.add_argument("dir", type=Path, help="a sweep dir (outputs/sweeps/<name>/<stamp>), a "
                        "run dir, or outputs/ for every run")
    parser.add_argument("--metric", default=DEFAULT_METRIC,
                        help="results.csv column to analyse (default: best_val_loss)")
    parser.add_argument("--baseline", default=AUTO, help="p every other p is compared "
                        "with, paired by (seed, data.fold), as printed in the tables; 'none' for "
                        "no comparison (default: 2 if run, else the run p nearest 2 for a grid "
                        "and no comparison for a continuous search)")
    parser.add_argument("--by", nargs="*", default=[], metavar="KEY",
                        help="other swept keys to group by, e.g. optimizer.lr")
    parser.add_argument("--equivalence", type=float, default=DEFAULT_EQUIVALENCE,
                        metavar="DELTA", help="δ of the Δ table's verdict, in the metric's "
                        "units (nats for a loss): 'level within ±δ' where the paired 90%% "
                        "t-interval of Δ lies inside ±δ, i.e. TOST at 5%% (default: "
                        f"{DEFAULT_EQUIVALENCE:g})")
    parser.add_argument("--test", choices=["auto", "corrected", "paired"], default="auto",
                        help="the replicate test of every interval, p-value and verdict: "
                        "corrected (Nadeau & Bengio's resampled t: folds of one corpus share "
                        "training text), paired (the plain paired t: independent seeds), auto "
                        "(corrected where the runs span several folds, else paired; default)")
    parser.add_argument("--n-folds", type=int, default=None, metavar="K",
                        help="the fold layout's data.n_folds, for a results.csv written "
                        "before it had that column")
    parser.add_argument("--logx", action="store_true", help="log-scale the p axis")
    if figure:
        parser.add_argument("--out", type=Path, default=None,
                            help="output file; its suffix (.png, .pdf, .svg) picks the format")


def options_from(args: argparse.Namespace) -> Options:
    check_out(getattr(args, "out", None))  # before any work
    if not (math.isfinite(args.equivalence) and args.equivalence > 0):
        raise UserError(f"--equivalence {args.equivalence:g} must be a number > 0 (δ in the "
                        "metric's units, nats for a loss: Δ within ±δ counts as level), e.g. "
                        f"{DEFAULT_EQUIVALENCE:g}")
    if args.n_folds is not None and args.n_folds < 2:
        raise UserError(f"--n-folds {args.n_folds} must be >= 2 (the sweep's data.n_folds)")
    return Options(metric=args.metric, baseline=parse_p(args.baseline), by=list(args.by),
                   logx=args.logx, equivalence=args.equivalence, test=args.test,
                   n_folds=args.n_folds)


def check_out(out: Path | None) -> None:
    if out is not None and out.suffix.lower() not in FIGURE_SUFFIXES:
        raise UserError(f"--out {out}: unknown figure format {out.suffix!r}; end it in .png, "
                        ".pdf or .svg")


def save_figure(fig, out: Path) -> Path:
    check_out(out)
    data = plots.render(fig, out.suffix.lstrip(".").lower())
    plots.close(fig)
    out.parent.mkdir(parents=True, exist_ok=True)
    rundir.atomic_write_bytes(out, data)
    return out


def completed_by_fold(path: Path, metric: str
                      ) -> tuple[dict[float, dict[int, float]], int, int | None]:
    """A report's results.csv as p -> {fold: metric} over its completed runs (every p seen, {}
    for one with none), the number of folds seen and the fold layout (data.n_folds; None for a
    results.csv written before that column): what a replay of looks reads."""
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError as e:
        raise UserError(f"{path}: {e.strerror}; pass a results.csv written by scripts/report.py") from None
    if not rows or metric not in rows[0] or "norm.p" not in rows[0]:
        raise UserError(f"{path} has no norm.p and {metric} columns; pass a results.csv written "
                        "by scripts/report.py")
    values: dict[float, dict[int, float]] = {}
    folds, layouts = set(), {row.get("data.n_folds") for row in rows} - {None, ""}
    for row in rows:
        folds.add(int(row["data.fold"]))
        runs = values.setdefault(float(row["norm.p"]), {})  # a p whose runs all stopped, too
        if row["status"] == "completed":
            runs[int(row["data.fold"])] = float(row[metric])
    layout = int(float(layouts.pop())) if len(layouts) == 1 else None
    return dict(values), len(folds), layout


def replicate_test(option: str, folds_vary: bool, layout: int | None, given: int | None):
    """multitest.choose for a replay over a results.csv's folds: the layout it recorded, or
    --n-folds (a results.csv from before data.n_folds); a UserError in one line."""
    from qknorm import multitest

    try:
        return multitest.choose(option, folds_vary, given or layout, "--test")
    except ValueError as e:
        raise UserError(f"{e} with --n-folds K" if "not known" in str(e) else str(e)) from None


def add_test_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--test", choices=["auto", "corrected", "paired"], default="auto",
                        help="the replicate test of the looks (qknorm.multitest; auto: "
                        "corrected over folds, as the race and the report)")
    parser.add_argument("--n-folds", type=int, default=None, metavar="K",
                        help="data.n_folds, for a results.csv written before that column")
