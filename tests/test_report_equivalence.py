"""The report's third answer: each Δ vs the baseline is worse / better (Holm), level within ±δ
(TOST: the paired 90% t-interval inside ±δ) or undecided, on the synthetic sweep of
tests/helpers/synthetic_runs.py, whose differences are known."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats as sps

from qknorm.report import Options, load, results, stats, summarize
from tests.helpers.synthetic_runs import make_sweep

# p=4 minus p=2 over folds 0, 1, 2: -0.2, -0.1, 0 (mean -0.1, sd 0.1); p=inf over folds 0, 1,
# 3: 0.5, 0.3, 0.2 (mean 1/3, sd sqrt(7/300)); 3 pairs each (test_report_diagnostics).
T95 = float(sps.t.ppf(0.95, 2))  # the 90% interval's quantile
HALF = {4.0: T95 * 0.1 / math.sqrt(3), math.inf: T95 * math.sqrt(7 / 300) / math.sqrt(3)}
MEAN = {4.0: -0.1, math.inf: 1 / 3}
# The report over folds 0..3 of the 10-fold layout tests with the corrected resampled t: its
# variance factor is 1/3 + 1/9 (3 pairs, n_test/n_train = 1/9) where the plain t's is 1/3.
CORRECTED = {p: h * math.sqrt((1 / 3 + 1 / 9) / (1 / 3)) for p, h in HALF.items()}


@pytest.fixture
def runs(tmp_path):
    return results.collect(make_sweep(tmp_path / "sweep")).runs


def test_the_90_percent_interval_and_the_verdict_at_each_delta(runs):
    assert HALF[4.0] == pytest.approx(0.168585446, abs=1e-9)
    for delta, want in ((0.02, {4.0: "undecided", math.inf: "undecided"}),
                        (0.27, {4.0: "level within ±δ", math.inf: "undecided"}),
                        (0.6, {4.0: "level within ±δ", math.inf: "level within ±δ"})):
        paired = stats.paired_vs_baseline(runs, "best_val_loss", 2.0, equivalence=delta)
        paired = paired.set_index("norm.p")
        for p in (4.0, math.inf):
            assert paired.loc[p, "tost_low"] == pytest.approx(MEAN[p] - HALF[p], abs=1e-12)
            assert paired.loc[p, "tost_high"] == pytest.approx(MEAN[p] + HALF[p], abs=1e-12)
        # Holm p: 0.127 and 0.225 (neither < 0.05), so only the interval can decide
        assert (paired["holm_pvalue"] > 0.05).all()
        assert paired["verdict"].to_dict() == want
    # p=4's interval [-0.2686, 0.0686]: inside ±0.27, not inside ±0.268
    assert stats.paired_vs_baseline(runs, "best_val_loss", 2.0, equivalence=0.268).set_index(
        "norm.p").loc[4.0, "verdict"] == "undecided"
    # Without δ the table is as before: no interval, no verdict.
    assert "verdict" not in stats.paired_vs_baseline(runs, "best_val_loss", 2.0).columns


def test_level_within_delta_comes_before_a_holm_significant_difference():
    base = [1.0, 1.1, 1.2, 1.3]
    shift = {2.0: [0.0] * 4, 4.0: [0.010, 0.011, 0.009, 0.010],  # worse by 0.01, surely
             3.0: [0.030, 0.031, 0.029, 0.030],  # worse by 0.03, surely: outside ±0.02
             1.0: [-0.5, -0.51, -0.49, -0.5], 8.0: [0.05, -0.04, 0.01, -0.02]}
    df = pd.DataFrame([{"norm.kind": "lp", "norm.p": p, "seed": 0, "data.fold": f,
                        "status": "completed", "best_val_loss": b + s[f]}
                       for p, s in shift.items() for f, b in enumerate(base)])
    paired = stats.paired_vs_baseline(df, "best_val_loss", 2.0, equivalence=0.02)
    paired = paired.set_index("norm.p")
    assert paired.loc[4.0, "holm_pvalue"] < 0.05 and paired.loc[4.0, "tost_high"] < 0.02
    assert paired.loc[3.0, "holm_pvalue"] < 0.05 and paired.loc[3.0, "tost_low"] > 0.02
    assert paired["verdict"].to_dict() == {1.0: "better", 3.0: "worse", 4.0: "level within ±δ",
                                           8.0: "undecided"}
    assert stats.verdict(math.nan, 0.0, math.nan, math.nan, 0.02) == "undecided"  # 1 pair
    assert stats.verdict(0.5, 0.0, -0.02, 0.02, 0.02) == "level within ±δ"  # bounds: inside


def test_the_summary_gives_the_verdict_column_and_states_delta(tmp_path):
    root = make_sweep(tmp_path / "sweep")
    options = Options()
    text = summarize(load(root, options), options)
    assert options.equivalence == 0.02
    low, high = MEAN[4.0] - CORRECTED[4.0], MEAN[4.0] + CORRECTED[4.0]
    assert (low, high) == pytest.approx((-0.294666, 0.094666), abs=1e-6)
    assert ("| 90% t-interval of Δ | verdict |" in text
            and f"| [{low:.4f}, {high:.4f}] | undecided |" in text)
    assert ("`level within ±δ` where the 90% t-interval of Δ (the test above) lies inside ±δ, "
            "δ = 0.02 (`--equivalence`, default 0.02 nats; the metric's units): TOST, two "
            "one-sided t-tests at 5% each") in text
    wide = Options(equivalence=0.3)
    text = summarize(load(root, wide), wide)
    assert "| [-0.2947, 0.0947] | level within ±δ |" in text and "δ = 0.3 (" in text
    # The plain paired t's interval [-0.2686, 0.0686] on the same runs, under --test paired
    plain = Options(equivalence=0.27, test="paired")
    assert "| [-0.2686, 0.0686] | level within ±δ |" in summarize(load(root, plain), plain)


@pytest.mark.slow
def test_report_cli_takes_equivalence_and_refuses_a_bad_one(cli, tmp_path):
    from tests.helpers.cli import REPORT as report

    root = make_sweep(tmp_path / "sweep")
    r = cli(report, str(root), "--equivalence", "0.3", "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| [-0.2947, 0.0947] | level within ±δ |" in (root / "summary.md").read_text()
    for bad in ("0", "-0.1", "inf"):
        r = cli(report, str(root), f"--equivalence={bad}")
        assert r.returncode == 2
        assert r.stderr.strip().splitlines() == [
            f"error: --equivalence {float(bad):g} must be a number > 0 (δ in the metric's "
            "units, nats for a loss: Δ within ±δ counts as level), e.g. 0.02"]
