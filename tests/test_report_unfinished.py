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


def test_a_sweep_whose_every_finished_run_diverged_is_summarized_not_a_traceback(tmp_path):
    """Every final.json says diverged: no completed run to take a mean of. The summary says so
    and lists the runs (readings_summary once merged an empty object column with a float one)."""
    import math

    from qknorm import rundir
    from qknorm.report import build as report
    from tests.helpers.synthetic_runs import final

    for job, p in enumerate([2.0, 4.0]):
        run = tmp_path / str(job)
        write_config(run, config(p, 0))
        write_curve(run, 1.0, 10.0, p)
        rundir.write_final(run, final("diverged", math.nan, 3.0, p, 0, 0, val_loss=math.nan,
                                      error="loss became nan at step 5", diverged_step=5))
    built = report.build_report(tmp_path, report.Options(formats=("png",)))
    text = built.summary
    assert "no completed runs" in text
    assert text.count("loss became nan at step 5") == 2
