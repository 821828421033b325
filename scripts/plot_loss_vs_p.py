"""One figure: a metric vs p, each completed run a dot, mean ± 95% t-interval, baseline line.

    python scripts/plot_loss_vs_p.py DIR [options]  (the same as: python scripts/plot.py loss_vs_p DIR)
"""

import sys

import _cli
import plot

if __name__ == "__main__":
    _cli.run(lambda: plot.main(["loss_vs_p", *sys.argv[1:]]))
