"""What every script in scripts/ shares: it runs from a checkout without installing qknorm, a user
mistake is one `error:` line and exit 2 (no traceback), and the report's options parse one way.

Scripts import this module first (`import _cli`): Python puts scripts/ on sys.path for them.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run from a checkout without install

from hydra_racing_sweeper.multitest import AUTO as AUTO_TEST  # noqa: E402
from hydra_racing_sweeper.multitest import TESTS  # noqa: E402

from qknorm import rundir  # noqa: E402
from qknorm.errors import UserError  # noqa: E402
from qknorm.report import (  # noqa: E402
    AUTO,
    DEFAULT_EQUIVALENCE,
    DEFAULT_METRIC,
    Options,
    parse_p,
    plots,
)

FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


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
    parser.add_argument("--test", choices=[AUTO_TEST, *TESTS], default="auto",
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


def add_test_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--test", choices=[AUTO_TEST, *TESTS], default="auto",
                        help="the replicate test (hydra_racing_sweeper.multitest; auto: corrected where "
                        "the runs span several folds, else paired, as the race and the report)")
    parser.add_argument("--n-folds", type=int, default=None, metavar="K",
                        help="data.n_folds, for a results.csv written before that column")
