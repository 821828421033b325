"""A race's section rebuilt from its committed results.csv, curves.csv and race.json
(qknorm/report/racerebuild.py) against the section the live sweeper wrote from its study (the
committed summaries at 4a620d8 and a9a1e7d, before they were rebuilt: `git show
e2e8b7f:docs/results/<race>/summary.md`): every look's numbers the same; a stop answered as the
code answers it now (undecided, not the old `worse`)."""

from __future__ import annotations

import pytest

from qknorm.report import racerebuild, results
from tests.helpers import REPO

RACES = REPO / "docs" / "results"


def rebuilt(race: str) -> dict[str, dict]:
    root = RACES / race
    runs = results.read_csv(root / results.RESULTS_CSV, ("norm.p", "status"), "")
    curves = results.read_curves(root / results.CURVES_CSV_NAME)
    (settings,) = racerebuild.read_settings(root).values()
    return {r["candidate"]: r for r in racerebuild.elimination(runs, curves, settings).rows}


def test_the_calibrated_race_rebuilt_is_the_race_the_sweeper_ran():
    rows = rebuilt("paper_cpu/calibrated_race")
    # The live race's table: p = 3.0 level after 3 folds, Δ +0.0035, one-sided p 0.0053, Holm
    # 0.0371; p = 2.0 (the baseline) survived 4 folds, Δ +0.0028, p 0.173, Holm 0.345.
    three, two = rows["norm.p=3.0"], rows["norm.p=2.0"]
    assert (three["outcome"], three["n"], three["answer"]) == ("level", 3, "level")
    assert (three["delta"], three["p"], three["p_adjusted"]) == pytest.approx(
        (0.0035, 0.0053, 0.0371), abs=5e-5)
    assert (two["outcome"], two["n"], two["leader"]) == ("survived", 4, "norm.p=4.0")
    assert (two["delta"], two["p"], two["p_adjusted"]) == pytest.approx(
        (0.0028, 0.173, 0.345), abs=5e-4)
    assert rows["norm.p=4.0"]["answer"] == "best"


def test_a_stop_is_undecided_and_keeps_where_it_stopped():
    rows = rebuilt("paper_cpu/qknorm_race")
    # The live race: p = 2.5 stopped in data.fold=0 at step 1000, 0.0491 behind p = 2.0's run
    # there; the sweeper then called it `worse`, the margin rule tests nothing: undecided.
    stop = rows["norm.p=2.5"]
    assert (stop["outcome"], stop["after"], stop["step"], stop["leader"]) == (
        "stopped", "data.fold=0", 1000, "norm.p=2.0")
    assert stop["delta"] == pytest.approx(0.0491, abs=5e-5)
    assert stop["answer"] == "undecided"
    level = rows["norm.p=1.5"]  # level after 4 folds under the paired t the race ran
    assert (level["outcome"], level["delta"], level["p"]) == ("level", pytest.approx(
        0.0120, abs=5e-5), pytest.approx(0.0189, abs=5e-5))


def test_a_stops_best_at_the_rung_is_the_best_of_all_its_replicates_runs_there():
    """p = 1.0 stopped at step 500 of fold 0: the live race judged it against p = 2.0 (+0.1596),
    the only run there before it; a rebuild cannot know the order and takes every run of the
    fold at that step, so p = 1.5 (+0.1682), a larger gap, never a smaller one."""
    one = rebuilt("paper_cpu/qknorm_race")["norm.p=1.0"]
    assert (one["leader"], one["step"]) == ("norm.p=1.5", 500)
    assert one["delta"] == pytest.approx(0.1682, abs=5e-5) and one["delta"] > 0.1596
