"""The replicate test (qknorm/multitest.py): the corrected resampled t over folds of one corpus,
the plain paired t over seeds, and the report, the race and the architecture comparison using
it. Values are computed here by hand from the formula (t = mean / sqrt(c · s²), k − 1 degrees
of freedom; c = 1/k + n_test/n_train, or 1/k), never read back from the code under test."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra_racing_sweeper import multitest, rundir
from hydra_racing_sweeper.race import looks
from scipy import stats as sps

from qknorm.errors import UserError
from qknorm.report import Options, load, stats, summarize
from tests.helpers import REPO
from tests.helpers.cli import REPORT
from tests.helpers.synthetic_runs import config, final, write_config, write_curve


def by_hand(d, factor, level=0.95):
    """(t, two-sided p, low, high) of mean(d) with variance factor c, from scipy.stats.t."""
    k, mean, sd = len(d), statistics.fmean(d), statistics.stdev(d)
    se = sd * math.sqrt(factor)
    t = mean / se
    half = sps.t.ppf(0.5 + level / 2, k - 1) * se
    return t, 2 * sps.t.sf(abs(t), k - 1), mean - half, mean + half


# -- the statistic --------------------------------------------------------------------------

def test_the_corrected_t_is_the_plain_t_with_the_variance_scaled_by_the_fold_layout():
    d = [0.010, 0.004, 0.012, 0.006, 0.008]  # the module docstring's example
    plain, corrected = multitest.PAIRED_T, multitest.for_folds(5)
    assert corrected.ratio == 0.25 and multitest.fold_ratio(10) == pytest.approx(1 / 9)
    assert plain.p_two_sided(d) == pytest.approx(sps.ttest_rel(d, [0.0] * 5).pvalue, rel=1e-12)
    assert plain.p_greater(d) == pytest.approx(
        sps.ttest_1samp(d, 0.0, alternative="greater").pvalue, rel=1e-12)
    t, p, low, high = by_hand(d, 1 / 5 + 1 / 4)
    assert (t, p) == pytest.approx((3.771236166, 0.0195835246), rel=1e-8)  # the docstring's
    assert corrected.p_two_sided(d) == pytest.approx(p, rel=1e-12)
    assert corrected.p_greater(d) == pytest.approx(p / 2, rel=1e-12)
    assert corrected.interval(d, 0.95) == pytest.approx((low, high), rel=1e-12)
    # 1.5 times as wide at 5 folds: sqrt((1/5 + 1/4) / (1/5))
    (pl, ph), (cl, ch) = plain.interval(d, 0.9), corrected.interval(d, 0.9)
    assert (ch - cl) / (ph - pl) == pytest.approx(1.5, rel=1e-12)
    assert multitest.tost_interval(d, 0.05, corrected) == (cl, ch)


def test_choose_reads_the_replicates_and_says_what_is_wrong_in_one_line():
    assert multitest.choose("auto", True, 5, "--test") == multitest.for_folds(5)
    assert multitest.choose("auto", False, 5, "--test") == multitest.PAIRED_T  # seeds
    assert multitest.choose("paired", True, 5, "--test") == multitest.PAIRED_T
    with pytest.raises(ValueError, match=r"^--test=corrected: the replicates are one data.fold"):
        multitest.choose("corrected", False, 5, "--test")
    with pytest.raises(ValueError, match=r"the fold layout \(data.n_folds\) is not known"):
        multitest.choose("auto", True, None, "--test")
    assert multitest.for_folds(5).label().startswith("corrected resampled t (Nadeau & Bengio "
                                                      "2003: variance × (1/k + 1/4)")


def test_a_race_look_uses_the_test_it_is_given():
    values = {"a": [1.0, 1.2, 0.9, 1.1], "b": [1.05, 1.22, 0.99, 1.16]}
    d = [b - a for a, b in zip(values["a"], values["b"])]
    test = multitest.for_folds(5)
    look = looks.look(values, 0.05, equivalence=0.2, test=test)
    t, p, low, high = by_hand(d, 1 / 4 + 1 / 4, level=0.9)
    assert look.tests["b"].p == pytest.approx(p / 2, rel=1e-12)  # one-sided
    assert (look.tests["b"].low, look.tests["b"].high) == pytest.approx((low, high), rel=1e-12)
    plain = looks.look(values, 0.05, equivalence=0.2)
    assert plain.tests["b"].p == pytest.approx(by_hand(d, 1 / 4)[1] / 2, rel=1e-12)
    assert plain.tests["b"].p < look.tests["b"].p  # the plain test is the bolder one


# -- the report on hand-made run dirs ---------------------------------------------------------

BASE = [1.50, 1.62, 1.41, 1.55, 1.47]  # p = 2 on folds 0..4 (of a 5-fold layout)
SHIFT = {4.0: [0.030, 0.012, 0.041, 0.022, 0.028],  # worse by ≈ 0.027, surely
         3.0: [0.006, -0.004, 0.011, 0.001, 0.003]}  # within ±0.02, surely


def make_runs(root: Path, folds=(0, 1, 2, 3, 4), seeds=(0,), n_folds=5, offsets=None) -> Path:
    """p = 2, 3, 4 on `folds` × `seeds`; seed s adds offsets[s] (default 0)."""
    job = 0
    for p in (2.0, 3.0, 4.0):
        for f in folds:
            for s in seeds:
                value = BASE[f] + (SHIFT[p][f] if p in SHIFT else 0.0) + (offsets or {}).get(s, 0)
                run = root / str(job)
                cfg = config(p, f, seed=s)
                cfg["data"]["n_folds"] = n_folds
                write_config(run, cfg)
                write_curve(run, value, 10.0, p)
                rundir.write_final(run, final("completed", value, 1.0, p, s, f))
                job += 1
    return root


def row(text: str, label: str, section: str = "## best_val_loss per p") -> list[str]:
    """The cells of p = label's row in the table under `section`."""
    lines = text[text.index(section):].splitlines()
    line = next(ln for ln in lines if ln.startswith(f"| {label} | "))
    return [c.strip() for c in line.strip("|").split("|")]


def delta_row(text: str, label: str) -> list[str]:
    return row(text, label, "## Δ best_val_loss")


def test_the_report_over_folds_prints_the_corrected_t_computed_by_hand(tmp_path):
    root = make_runs(tmp_path / "folds")
    options = Options()
    text = summarize(load(root, options), options)
    assert options.replicate_test == multitest.for_folds(5)
    assert ("Test: the corrected resampled t (Nadeau & Bengio 2003: variance × (1/k + 1/4), "
            "folds not independent), over folds (a replicate is a data.fold)") in text
    raw = {}
    for p, label in ((4.0, "4"), (3.0, "3")):
        t, two, low, high = by_hand(SHIFT[p], 1 / 5 + 1 / 4)
        _, _, low90, high90 = by_hand(SHIFT[p], 1 / 5 + 1 / 4, level=0.9)
        cells = delta_row(text, label)
        assert cells[2] == f"{statistics.fmean(SHIFT[p]):.4f}"
        assert cells[3] == f"[{low:.4f}, {high:.4f}]"
        assert float(cells[4]) == pytest.approx(two, rel=1e-2)
        assert cells[9] == f"[{low90:.4f}, {high90:.4f}]"
        raw[p] = two
    holm = sorted(raw.values())
    want = {p: max(2 * holm[0], raw[p]) if raw[p] == holm[1] else 2 * raw[p] for p in raw}
    for p, label in ((4.0, "4"), (3.0, "3")):
        assert float(delta_row(text, label)[5]) == pytest.approx(min(1.0, want[p]), rel=1e-2)
    # p = 4: Holm p < 0.05 and its 90% interval not inside ±0.02; p = 3's lies inside
    assert delta_row(text, "4")[10] == "worse" and delta_row(text, "3")[10] == "level within ±δ"
    # Per p: the mean over folds and its 95% corrected interval
    low, high = by_hand(BASE, 1 / 5 + 1 / 4)[2:]
    assert row(text, "2")[1:5] == ["5", f"{statistics.fmean(BASE):.4f}",
                                   f"{statistics.stdev(BASE):.4f}", f"[{low:.4f}, {high:.4f}]"]


def test_the_report_over_seeds_on_one_split_prints_the_plain_paired_t(tmp_path):
    # five seeds on fold 4 alone: the values of "folds" become seeds (same numbers)
    root = tmp_path / "seeds"
    job = 0
    for p in (2.0, 3.0, 4.0):
        for s in range(5):
            value = BASE[s] + (SHIFT[p][s] if p in SHIFT else 0.0)
            run = root / str(job)
            write_config(run, config(p, 4, seed=s))
            write_curve(run, value, 10.0, p)
            rundir.write_final(run, final("completed", value, 1.0, p, s, 4))
            job += 1
    options = Options()
    text = summarize(load(root, options), options)
    assert options.replicate_test == multitest.PAIRED_T
    assert "Test: the paired t (replicates independent: a replicate is a (seed, data.fold) pair)" in text
    base = np.array(BASE)
    want = sps.ttest_rel(base + SHIFT[4.0], base).pvalue  # scipy's own paired t
    assert float(delta_row(text, "4")[4]) == pytest.approx(want, rel=1e-2)
    _, _, low, high = by_hand(SHIFT[4.0], 1 / 5)
    assert delta_row(text, "4")[3] == f"[{low:.4f}, {high:.4f}]"


def test_folds_by_seeds_average_the_seeds_of_a_fold_first(tmp_path):
    # seed 1 adds 0.1 to every run: the fold means shift, the differences do not
    root = make_runs(tmp_path / "both", seeds=(0, 1), offsets={1: 0.1})
    options = Options()
    text = summarize(load(root, options), options)
    assert "a replicate is a data.fold, its seeds averaged first" in text
    _, _, low, high = by_hand(SHIFT[4.0], 1 / 5 + 1 / 4)
    cells = delta_row(text, "4")
    assert cells[1] == "5" and cells[3] == f"[{low:.4f}, {high:.4f}]"  # 5 folds, not 10 runs
    assert "10 run(s) share a data.fold with another: averaged" in cells[8]  # 5 + 5


@pytest.mark.slow
def test_the_cli_takes_test_and_rebuilds_from_results_csv_alone(cli, tmp_path):
    root = make_runs(tmp_path / "sweep")
    r = cli(REPORT, str(root), "--quiet")
    assert r.returncode == 0, r.stderr
    first = (root / "summary.md").read_text()
    written = pd.read_csv(root / "results.csv")
    assert (written["data.n_folds"] == 5).all()
    # a collaborator gets results.csv alone: the report rebuilds the same tables from it
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "results.csv").write_text((root / "results.csv").read_text())
    r = cli(REPORT, str(shared), "--quiet")
    assert r.returncode == 0, r.stderr
    again = (shared / "summary.md").read_text()
    for label in ("3", "4"):
        assert delta_row(again, label) == delta_row(first, label)
    assert row(again, "2") == row(first, "2")
    assert "rebuilt from results.csv" in again
    # a results.csv from before data.n_folds: one line naming the fix, nothing written
    old = tmp_path / "old"
    old.mkdir()
    written.drop(columns="data.n_folds").to_csv(old / "results.csv", index=False)
    r = cli(REPORT, str(old))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: --test=auto: the fold layout (data.n_folds) is not known; pass it (the sweep's "
        "data.n_folds) with --n-folds K (results.csv predates its data.n_folds column)"]
    assert not (old / "summary.md").exists()
    r = cli(REPORT, str(old), "--n-folds", "5", "--quiet")
    assert r.returncode == 0, r.stderr
    assert delta_row((old / "summary.md").read_text(), "4") == delta_row(first, "4")
    # --test paired on the same folds: the plain t, said so
    r = cli(REPORT, str(root), "--test", "paired")
    assert r.returncode == 0 and "Test: the paired t" in r.stdout
    _, _, low, high = by_hand(SHIFT[4.0], 1 / 5)
    assert delta_row(r.stdout, "4")[3] == f"[{low:.4f}, {high:.4f}]"


def test_the_delta_figure_draws_the_band_and_each_verdict(tmp_path):
    from qknorm.report import compute, deltaplot, plots, results

    root = make_runs(tmp_path / "sweep")
    options = Options()
    collection = load(root, options)
    paired = compute(collection, options, results.collect_curves(collection.runs, root)).paired
    fig = deltaplot.delta_vs_p(paired, "best_val_loss", 2.0, equivalence=0.02,
                           test=options.replicate_test)
    (ax,) = fig.axes
    band = next(p for p in ax.patches if p.get_gid() == "equivalence")
    assert (band.get_y(), band.get_y() + band.get_height()) == pytest.approx((-0.02, 0.02))
    marks = {c.get_gid(): c.get_offsets().tolist() for c in ax.collections
             if c.get_gid() in ("worse", "level", "better", "undecided")}
    mean = {p: statistics.fmean(SHIFT[p]) for p in SHIFT}
    assert marks == {"worse": [[4.0, pytest.approx(mean[4.0])]],
                     "level": [[3.0, pytest.approx(mean[3.0])]]}
    assert "corrected t, n_test/n_train = 1/4" in ax.get_title()
    plots.close(fig)


def test_arch_comparison_uses_the_corrected_t_over_folds():
    from qknorm.report import archcompare

    folds = pd.DataFrame([{"model.arch": a, "norm.p": 2.0, "data.fold": f, "run_dir": f"{a}{f}",
                           "best_val_loss": BASE[f] + (SHIFT[4.0][f] if a == "angpt" else 0),
                           "val_loss": 0.0, "tokens_per_s": 1.0, "steps_to_ref": math.nan}
                          for a in ("gpt", "angpt") for f in range(5)])
    table = archcompare.between_archs(folds, "angpt", "gpt", multitest.for_folds(5))
    best = table[table["metric"] == "best_val_loss"].iloc[0]
    _, p, low, high = by_hand(SHIFT[4.0], 1 / 5 + 1 / 4)
    assert (best["ci_low"], best["ci_high"], best["t_pvalue"]) == pytest.approx((low, high, p))


def test_replicate_test_refuses_mixed_layouts_in_one_line(tmp_path):
    runs = pd.DataFrame({"status": ["completed"] * 4, "data.fold": [0, 1, 0, 1],
                         "data.n_folds": [5, 5, 10, 10], "seed": [0] * 4})
    with pytest.raises(UserError, match=r"^the runs use several fold layouts \(data.n_folds = "
                                         r"5, 10\); report one layout at a time"):
        stats.replicate_test(runs)
    assert stats.replicate_test(runs, "paired") == multitest.PAIRED_T  # as the line offers


@pytest.mark.slow
def test_race_replay_prints_the_verdicts_the_report_prints(tmp_path):
    """One look at all 5 folds with the baseline leading: the race's 90% interval of each p's
    Δ to the leader is the report's TOST interval vs p = 2, and both say the same word."""
    root = make_runs(tmp_path / "sweep")
    subprocess.run([sys.executable, REPORT, str(root), "--quiet"], check=True,
                   capture_output=True)
    text = (root / "summary.md").read_text()
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "race_replay.py"),
                        str(root / "results.csv"), "--min-replicates", "5"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("test: corrected resampled t")
    for label, word in (("4", "dropped"), ("3", "level")):
        interval = delta_row(text, label)[9]
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"  p = {label}:"))
        assert f"90% {interval.replace('[0', '[+0').replace(', 0', ', +0')}" in line
        assert line.endswith(word)
