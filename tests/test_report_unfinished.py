"""scripts/report.py on a dir where no run has finished (no final.json anywhere): a sweep's
first runs still going, or the leftovers of runs that stopped on an input error. One line, exit
2, nothing written (docs/report.md), not a pandas traceback."""

from __future__ import annotations

import pytest

from tests.helpers.cli import REPORT, assert_one_line_error
from tests.helpers.synthetic_runs import config, write_config, write_curve


@pytest.mark.slow
def test_a_dir_with_no_finished_run_is_one_line_and_writes_nothing(cli):
    sweep = cli.cwd / "sweep"
    for job, p in enumerate([2.0, 4.0]):  # two runs still going: evals logged, no final.json
        write_config(sweep / str(job), config(p, 0))
        write_curve(sweep / str(job), 1.0, 10.0, p)
    write_config(sweep / "2", config(2.0, 1))  # refused before training: its config only
    before = sorted(sweep.rglob("*"))
    assert_one_line_error(cli(REPORT, "sweep"), "no run under sweep has finished",
                      "3 run dirs", "no final.json")
    assert sorted(sweep.rglob("*")) == before
