"""One figure: learned gamma vs p, and learned p (when norm.p_learnable) or gamma over steps.

    python scripts/plot_gamma_vs_p.py DIR [--logx] [--out F]
"""

from __future__ import annotations

from qknorm import plots, results
from qknorm.report import arg_parser, load, options_from, run_cli, save_figure


def main() -> None:
    parser = arg_parser(__doc__, figure=True)
    parser.set_defaults(baseline="none")
    args = parser.parse_args()
    collection = load(args.dir, options_from(args))
    curves = results.collect_curves(collection.runs, collection.root)
    print(save_figure(plots.gamma_vs_p(collection.runs, curves, args.logx),
                      args.out or args.dir / "report" / "gamma_vs_p.png"))


if __name__ == "__main__":
    run_cli(main)
