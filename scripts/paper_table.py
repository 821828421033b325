"""The paper-vs-here table: `python scripts/paper_table.py LABEL=DIR [LABEL=DIR ...]`.

Each DIR holds a results.csv written by scripts/report.py; prints a markdown table with the seed
paper's validation loss per p next to each sweep's mean, 95% t-interval and paired Δ vs p=2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qknorm.errors import UserError, run_main
from qknorm.report import paper, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", metavar="LABEL=DIR")
    args = parser.parse_args()
    sweeps = {}
    for item in args.sweeps:
        label, sep, folder = item.partition("=")
        path = Path(folder) / results.RESULTS_CSV
        if not sep or not label:
            raise UserError(f"{item!r} is not LABEL=DIR; write e.g. qknorm=docs/results/paper_cpu/qknorm")
        if not path.is_file():
            raise UserError(f"{path} does not exist; run `python scripts/report.py {folder}` first")
        sweeps[label] = results.read_csv(path)
    print(paper.to_markdown(paper.comparison(sweeps), list(sweeps)))


if __name__ == "__main__":
    run_main(main)
