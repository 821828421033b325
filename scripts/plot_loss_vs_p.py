"""One figure: a metric vs p, each completed run a dot, mean ± 95% t-interval, baseline line.

    python scripts/plot_loss_vs_p.py DIR [--metric best_val_loss] [--baseline 2] [--logx] [--out F]
"""

from __future__ import annotations

from qknorm import plots
from qknorm.report import arg_parser, load, options_from, run_cli, save_figure


def main() -> None:
    args = arg_parser(__doc__, figure=True).parse_args()
    options = options_from(args)
    runs = load(args.dir, options).runs
    fig = plots.loss_vs_p(runs, options.metric, options.baseline, options.logx)
    print(save_figure(fig, args.out or args.dir / "report" / "loss_vs_p.png"))


if __name__ == "__main__":
    run_cli(main)
