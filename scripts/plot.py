"""One figure of a sweep: `python scripts/plot.py KIND DIR [options]`.

    python scripts/plot.py loss_vs_p DIR [--metric best_val_loss] [--baseline P] [--by KEY] [--logx] [--out F]
    python scripts/plot.py curves DIR [--metric val_loss|train_loss|gamma_mean|attn_entropy|...] [--out F]
    python scripts/plot.py time_vs_p DIR [--logx] [--out F]
    python scripts/plot.py gamma_vs_p DIR [--logx] [--out F]

Without --out the figure goes to DIR/report/KIND.png.
"""

from __future__ import annotations

import argparse
import sys

import _cli

from qknorm.errors import UserError, run_main
from qknorm.report import check_logged, load, plots, results, stepplots

# kind -> (what it draws, option defaults that differ from the report's)
KINDS = {
    "loss_vs_p": ("a metric vs p, each completed run a dot, mean ± 95% t-interval, baseline line",
                  {}),
    "curves": ("validation loss vs training step, mean ± 95% t-interval per p (completed runs)",
               {"metric": "val_loss", "baseline": "none"}),
    "time_vs_p": ("wall time per run and training throughput (tokens/s) vs p",
                  {"baseline": "none"}),
    "gamma_vs_p": ("learned gamma vs p, and learned p (when norm.p_learnable) or gamma over "
                   "steps", {"baseline": "none"}),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kinds = top.add_subparsers(dest="kind", required=True, metavar="KIND")
    for kind, (what, defaults) in KINDS.items():
        sub = kinds.add_parser(kind, help=what.replace("%", "%%"),  # argparse %-formats help
                               description=f"One figure: {what}.")
        _cli.add_report_options(sub, figure=True)
        sub.set_defaults(**defaults)
    return top


def figure(kind: str, args: argparse.Namespace):
    """The figure of one kind; every option checked before anything is drawn."""
    if kind == "curves" and args.metric not in results.CURVE_KEYS[1:]:
        raise UserError(f"--metric {args.metric} is not a metrics.jsonl column; use one of: "
                        f"{', '.join(results.CURVE_KEYS[1:])}")
    options = _cli.options_from(args)
    if kind == "curves":
        options.metric = "best_val_loss"  # the curve's column is checked above, not in results.csv
    collection = load(args.dir, options)
    runs = collection.runs
    if kind == "curves":  # a diagnostic's curve needs runs that logged it (not older ones)
        check_logged(runs, args.metric, [k for k in results.CURVE_KEYS[1:]
                                         if not results.is_diagnostic(k)])
    if kind == "loss_vs_p":
        return plots.loss_vs_p(runs, options.metric, options.baseline, options.logx, options.by)
    if kind == "time_vs_p":
        return plots.time_vs_p(runs, options.logx)
    curves = results.collect_curves(runs, collection.root)
    if kind == "curves":
        return stepplots.curves(curves, y=args.metric)
    return plots.gamma_vs_p(runs, curves, options.logx)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    fig = figure(args.kind, args)
    print(_cli.save_figure(fig, args.out or args.dir / "report" / f"{args.kind}.png"))


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
