"""One figure: validation loss vs training step, mean ± 95% t-interval per p (completed runs).

    python scripts/plot_curves.py DIR [options]  (the same as: python scripts/plot.py curves DIR)
"""

import sys

import _cli
import plot

if __name__ == "__main__":
    _cli.run(lambda: plot.main(["curves", *sys.argv[1:]]))
