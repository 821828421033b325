"""One figure: validation loss vs training step, mean ± 95% t-interval per p (completed runs).

    python scripts/plot_curves.py DIR [--metric val_loss|train_loss|gamma_mean] [--out F]
"""

from __future__ import annotations

from qknorm import plots, results
from qknorm.errors import UserError
from qknorm.report import arg_parser, load, options_from, run_cli, save_figure


def main() -> None:
    parser = arg_parser(__doc__, figure=True)
    parser.set_defaults(metric="val_loss", baseline="none")
    args = parser.parse_args()
    if args.metric not in results.CURVE_KEYS[1:]:
        raise UserError(f"--metric {args.metric} is not a metrics.jsonl column; use one of: "
                        f"{', '.join(results.CURVE_KEYS[1:])}")
    options = options_from(args)
    options.metric = "best_val_loss"  # the curve's column is checked above, not in results.csv
    collection = load(args.dir, options)
    curves = results.collect_curves(collection.runs, collection.root)
    fig = plots.curves(curves, y=args.metric)
    print(save_figure(fig, args.out or args.dir / "report" / "curves.png"))


if __name__ == "__main__":
    run_cli(main)
