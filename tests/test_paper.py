"""The paper-vs-here table (qknorm.report.paper, scripts/paper_table.py) on the synthetic sweep."""

from __future__ import annotations

import math
import statistics

import pandas as pd
import pytest
from scipy import stats as sps

from qknorm.report import paper, results
from tests.helpers import REPO
from tests.helpers.synthetic_runs import make_sweep


@pytest.fixture
def results_dir(tmp_path):
    sweep = make_sweep(tmp_path / "sweep")
    results.collect(sweep).runs.to_csv(sweep / "results.csv", index=False)
    return sweep


def test_comparison_puts_paper_and_sweep_side_by_side(results_dir):
    runs = pd.read_csv(results_dir / "results.csv")  # as the script reads it: "inf" parses as inf
    table = paper.comparison({"here": runs}).set_index("norm.p")
    assert list(table.index) == [2.0, 2.5, 3.0, 3.5, 4.0, math.inf]
    assert table.loc[4.0, "paper"] == 1.357461
    assert table.loc[4.0, "paper_delta"] == pytest.approx(1.357461 - 1.40506)
    assert math.isnan(table.loc[math.inf, "paper"])  # the paper has no p=inf
    assert table["here:n"].tolist()[::4] == [4, 3]  # p=2 (4 folds), p=4 (fold 3 diverged)
    assert table.loc[2.0, "here:best_val_loss_mean"] == pytest.approx(1.3)
    assert table.loc[2.0, "here:delta_mean"] == 0.0
    # paired by fold: p=4 - p=2 over folds 0,1,2 = -0.2, -0.1, 0.0; inf over 0,1,3 = .5, .3, .2
    assert table.loc[4.0, "here:delta_mean"] == pytest.approx(-0.1)
    assert table.loc[math.inf, "here:delta_mean"] == pytest.approx(1 / 3)
    # folds 0..3 of a 10-fold layout: the corrected t, variance × (1/3 + 1/9); 0.02 is no δ here
    d = [-0.2, -0.1, 0.0]
    half = sps.t.ppf(0.975, 2) * statistics.stdev(d) * math.sqrt(1 / 3 + 1 / 9)
    assert table.loc[4.0, "here:delta_ci_low"] == pytest.approx(-0.1 - half)
    assert table.loc[4.0, "here:verdict"] == "undecided"
    assert math.isnan(table.loc[3.0, "here:best_val_loss_mean"])  # p=3 was not run


@pytest.mark.slow
def test_paper_table_cli_prints_markdown_and_rejects_bad_input(cli, results_dir):
    r = cli(str(REPO / "scripts" / "paper_table.py"), f"a={results_dir}")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("| p | paper | paper Δ | a: mean [95% CI] (n)")
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| 2", "| 2.5", "| 3", "| 3.5", "| 4",
                                                          "| inf"]
    assert lines[3] == "| 2.5 | 1.3735 | -0.0316 | - [-, -] (-) | - [-, -] | - | - |"  # not run
    row4 = next(line for line in lines if line.startswith("| 4 |"))
    assert row4.startswith("| 4 | 1.3575 | -0.0476 | 1.1000 [")
    assert "| -0.1000 [" in row4
    r = cli(str(REPO / "scripts" / "paper_table.py"), f"a={results_dir / 'nope'}")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: {results_dir / 'nope' / 'results.csv'} does not exist; run "
        f"`python scripts/report.py {results_dir / 'nope'}` first"]
