"""One figure: wall time per run and training throughput (tokens/s) vs p.

    python scripts/plot_time_vs_p.py DIR [options]  (the same as: python scripts/plot.py time_vs_p DIR)
"""

import sys

import _cli
import plot

if __name__ == "__main__":
    _cli.run(lambda: plot.main(["time_vs_p", *sys.argv[1:]]))
