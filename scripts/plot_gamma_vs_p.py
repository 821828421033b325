"""One figure: learned gamma vs p, and learned p (when norm.p_learnable) or gamma over steps.

    python scripts/plot_gamma_vs_p.py DIR [options]  (the same as: python scripts/plot.py gamma_vs_p DIR)
"""

import sys

import _cli
import plot

if __name__ == "__main__":
    _cli.run(lambda: plot.main(["gamma_vs_p", *sys.argv[1:]]))
