"""One figure: wall time per run and training throughput (tokens/s) vs p.

    python scripts/plot_time_vs_p.py DIR [--logx] [--out F]
"""

from __future__ import annotations

from qknorm import plots
from qknorm.report import arg_parser, load, options_from, run_cli, save_figure


def main() -> None:
    parser = arg_parser(__doc__, figure=True)
    parser.set_defaults(baseline="none")
    args = parser.parse_args()
    runs = load(args.dir, options_from(args)).runs
    print(save_figure(plots.time_vs_p(runs, args.logx),
                      args.out or args.dir / "report" / "time_vs_p.png"))


if __name__ == "__main__":
    run_cli(main)
