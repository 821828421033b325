"""qknorm.report.results and .stats on synthetic run dirs with known numbers
(tests/helpers/synthetic_runs.py)."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from qknorm import rundir
from qknorm.effective import effective_config, effective_key, flatten
from qknorm.errors import UserError
from qknorm.report import Options, baseline, load, paxis, results, stats, summarize
from tests.helpers.synthetic_runs import (
    BEST,
    DIVERGED,
    FOLDS,
    KILLED,
    P_VALUES,
    SEARCH_P,
    WALL,
    add_repeats,
    config,
    final,
    make_search,
    make_sweep,
    search_loss,
    write_config,
)

# Student t 0.975 quantiles: df=2 in closed form, (2a-1)/sqrt(2a(1-a)) at a=0.975; df=3 from a table
T975 = {2: 0.95 / math.sqrt(2 * 0.975 * 0.025), 3: 3.182446305284}
# scipy's t quantiles differ by up to ~2e-10 between releases (1.10 to 1.16 vs 1.17), so
# interval bounds are checked to 1e-9: far tighter than a wrong formula (z for t, n for n-1).
T_TOL = 1e-9


@pytest.fixture
def sweep(tmp_path):
    return make_sweep(tmp_path / "sweep")


def test_one_row_per_run_with_its_status(sweep):
    runs = results.collect(sweep).runs
    assert list(runs.columns) == (results.ALWAYS + results.FINAL_FIELDS + results.DIAGNOSTICS
                                  + results.TAIL)
    assert list(runs["run_dir"]) == [str(i) for i in range(12)]  # 10 after 9, not after 1
    expected = [("completed" if (p, f) not in (DIVERGED, KILLED) else
                 "diverged" if (p, f) == DIVERGED else "incomplete", p, f)
                for p in P_VALUES for f in FOLDS]
    assert list(zip(runs["status"], runs["norm.p"], runs["data.fold"])) == expected
    killed = runs.iloc[10]
    assert killed["status"] == "incomplete" and math.isnan(killed["best_val_loss"])
    diverged = runs.iloc[7]
    assert diverged["diverged_step"] == 15 and math.isnan(diverged["val_loss"])
    assert diverged["error"] == "loss became nan at step 15"
    assert runs["trial"].isna().all() and runs["trial_state"].isna().all()


def test_results_csv_round_trip_keeps_inf_and_statuses(sweep):
    runs = results.collect(sweep).runs
    back = pd.read_csv(pd.io.common.StringIO(runs.to_csv(index=False)))
    assert list(back["norm.p"]) == [p for p in P_VALUES for _ in FOLDS]  # "inf" reads as inf
    assert list(back["status"]) == list(runs["status"])
    assert back.loc[back["status"] == "completed", "best_val_loss"].tolist() == [
        BEST[p][f] for p in P_VALUES for f in FOLDS if f in BEST[p]]


def test_varying_config_keys_become_columns_constant_ones_do_not(tmp_path):
    for i, lr in enumerate([1e-3, 3e-3]):
        run = tmp_path / str(i)
        write_config(run, config(2.0, 0, lr=lr))
        rundir.write_final(run, {"status": "completed", "best_val_loss": 1.0})
    runs = results.collect(tmp_path).runs
    assert list(runs.columns[:5]) == ["optimizer.lr", "norm.kind", "norm.p", "seed", "data.fold"]
    assert list(runs["optimizer.lr"]) == [1e-3, 3e-3]
    assert results.swept_keys(runs) == ["optimizer.lr"]


def test_kinds_without_p_have_nan_p(tmp_path):
    write_config(tmp_path / "0", config(2.0, 0, kind="none"))
    write_config(tmp_path / "1", config(2.0, 0, kind="l2"))
    runs = results.collect(tmp_path).runs
    assert math.isnan(runs["norm.p"].iloc[0]) and runs["norm.p"].iloc[1] == 2.0


def test_per_p_mean_std_and_interval_equal_hand_computed(sweep):
    runs = results.collect(sweep).runs
    table = stats.group_summary(runs, ["best_val_loss", "wall_time_s"]).set_index("norm.p")
    assert list(table.index) == P_VALUES
    assert list(table["n"]) == [4, 3, 3]  # diverged and killed runs not counted
    hand = {  # (mean, std, half-width of the 95% interval) written down from BEST and WALL
        2.0: (1.3, math.sqrt(0.2 / 3), T975[3] * math.sqrt(0.2 / 3) / 2),
        4.0: (1.1, 0.3, T975[2] * 0.3 / math.sqrt(3)),
        math.inf: (1.6, math.sqrt(0.03), T975[2] * math.sqrt(0.03) / math.sqrt(3)),
    }
    for p, (mean, std, half) in hand.items():
        row = table.loc[p]
        assert row["best_val_loss_mean"] == pytest.approx(mean, abs=1e-12)
        assert row["best_val_loss_std"] == pytest.approx(std, abs=1e-12)
        assert row["best_val_loss_ci_low"] == pytest.approx(mean - half, abs=T_TOL)
        assert row["best_val_loss_ci_high"] == pytest.approx(mean + half, abs=T_TOL)
    # wall time of p=2: 10, 12, 14, 16 -> mean 13, variance 20/3
    assert table.loc[2.0, "wall_time_s_mean"] == pytest.approx(13.0)
    assert table.loc[2.0, "wall_time_s_std"] == pytest.approx(math.sqrt(20 / 3))
    assert table.loc[4.0, "wall_time_s_mean"] == pytest.approx(np.mean(WALL[4.0]))


def test_paired_delta_and_p_values_equal_scipy_on_the_same_numbers(sweep):
    runs = results.collect(sweep).runs
    paired = stats.paired_vs_baseline(runs, "best_val_loss", 2.0).set_index("norm.p")
    assert list(paired.index) == [4.0, math.inf]  # the baseline is not compared with itself
    for p, folds in ((4.0, [0, 1, 2]), (math.inf, [0, 1, 3])):  # folds both completed
        x = [BEST[p][f] for f in folds]
        base = [BEST[2.0][f] for f in folds]
        d = np.subtract(x, base)
        half = T975[2] * d.std(ddof=1) / math.sqrt(3)
        row = paired.loc[p]
        assert row["n_pairs"] == 3
        assert row["delta_mean"] == pytest.approx(d.mean(), abs=1e-12)
        assert row["delta_ci_low"] == pytest.approx(d.mean() - half, abs=T_TOL)
        assert row["delta_ci_high"] == pytest.approx(d.mean() + half, abs=T_TOL)
        assert row["t_pvalue"] == pytest.approx(sps.ttest_rel(x, base).pvalue, abs=1e-12)
        assert row["wilcoxon_pvalue"] == pytest.approx(sps.wilcoxon(x, base).pvalue, abs=1e-12)
    # p=4 deltas are -0.2, -0.1, 0 (zero dropped): 2 non-zero pairs cannot go below p=0.5
    assert paired.loc[4.0, "delta_mean"] == pytest.approx(-0.1)
    assert "Wilcoxon cannot go below p=0.5" in paired.loc[4.0, "note"]


def test_too_few_pairs_is_said_not_raised():
    one = stats.paired_test([1.0], [2.0])
    assert one.n == 1 and one.mean == -1.0 and math.isnan(one.t_pvalue)
    assert math.isnan(one.wilcoxon_pvalue) and "too few" in one.note
    zeros = stats.paired_test([1.0, 2.0], [1.0, 2.0])
    assert math.isnan(zeros.wilcoxon_pvalue) and "all differences are zero" in zeros.note
    assert math.isnan(stats.t_interval([3.0])[2])  # one run: no std, no interval


def test_best_p_and_excluded_counts(sweep):
    runs = results.collect(sweep).runs
    assert stats.excluded(runs) == {"diverged": 1, "incomplete": 1}
    best = stats.best(stats.group_summary(runs, ["best_val_loss"]), "best_val_loss")
    assert best["norm.p"].tolist() == [4.0]  # not the diverged run's 0.5
    assert best["best_val_loss_mean"].iloc[0] == pytest.approx(1.1)


def test_unknown_baseline_names_the_p_values_run(sweep):
    runs = results.collect(sweep).runs
    with pytest.raises(UserError, match=r"--baseline 3: no run used norm.p=3 .*2, 4, inf"):
        baseline.check_baseline(runs, 3.0)
    baseline.check_baseline(runs, math.inf)


def test_no_runs_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no runs under"):
        results.collect(tmp_path)


def test_curves_skip_the_torn_line(sweep):
    runs = results.collect(sweep).runs
    curves = results.collect_curves(runs, sweep)
    assert len(curves) == 12 * 3  # the killed run's torn 4th line is skipped
    killed = curves[curves["run_dir"] == "10"]
    assert killed["step"].tolist() == [0, 10, 20] and set(killed["status"]) == {"incomplete"}


def test_ranking_by_step_orders_p_by_mean_and_compares_with_the_last_eval():
    means = {0: {2.0: 4.0, 4.0: 3.9, math.inf: 4.1},   # 4 < 2 < inf, the final order: tau 1
             10: {2.0: 2.0, 4.0: 2.2, math.inf: 2.1},  # 2 < inf < 4: 1 of 3 pairs agree
             20: {2.0: 1.5, 4.0: 1.4, math.inf: 1.6}}
    rows = []
    for step, by_p in means.items():
        for p, mean in by_p.items():
            for i, offset in enumerate((-0.1, 0.1)):  # two runs per p around the mean
                rows.append({"run_dir": f"{p}-{i}", "step": step, "val_loss": mean + offset,
                             "norm.kind": "lp", "norm.p": p, "status": "completed"})
        rows.append({"run_dir": "div", "step": step, "val_loss": 0.0, "norm.kind": "lp",
                     "norm.p": 4.0, "status": "diverged"})  # never counted
        rows.append({"run_dir": "rms", "step": step, "val_loss": 0.0, "norm.kind": "rms",
                     "norm.p": math.nan, "status": "completed"})  # no p: left out
    rows.append({"run_dir": "2.0-0", "step": 30, "val_loss": 1.0, "norm.kind": "lp",
                 "norm.p": 2.0, "status": "completed"})  # a step only p=2 reached: dropped
    ranking = stats.ranking_by_step(pd.DataFrame(rows))
    assert ranking["step"].tolist() == [0, 10, 20]
    assert ranking["order"].tolist() == ["4 < 2 < inf", "2 < inf < 4", "4 < 2 < inf"]
    assert ranking["kendall_tau"].tolist() == pytest.approx([1.0, -1 / 3, 1.0])


def test_ranking_by_step_needs_two_p_values(sweep):
    curves = results.collect_curves(results.collect(sweep).runs, sweep)
    one_p = curves[curves["norm.p"] == 2.0]
    assert stats.ranking_by_step(one_p).empty
    # the synthetic sweep's curves keep one order at every step (offsets are equal across p)
    ranking = stats.ranking_by_step(curves)
    assert ranking["order"].tolist() == ["4 < 2 < inf"] * 3
    assert ranking["kendall_tau"].tolist() == [1.0, 1.0, 1.0]


# ---------------------------------------------------------------------------------------------
# issue 12: the baseline of a search, and repeated runs counted once

def test_baseline_as_printed_names_the_run_p(tmp_path):
    runs = results.collect(make_search(tmp_path)).runs
    exact = 1.835255759775752
    assert baseline.check_baseline(runs, 1.83526) == exact  # as the tables print it
    assert baseline.check_baseline(runs, exact) == exact
    assert baseline.check_baseline(runs, math.inf) == math.inf
    with pytest.raises(UserError) as e:
        baseline.check_baseline(runs, 1.8353)  # 5 digits: not how any p prints
    listed = str(e.value).split("accepted as written: ")[1].split(")")[0].split(", ")
    assert listed[:3] == ["1.09485", "1.19045", "1.27198"] and listed[-1] == "inf"
    assert len(listed) == 13  # every p run, each accepted as written:
    assert sorted(baseline.check_baseline(runs, float(text)) for text in listed) == baseline.run_ps(runs)


def test_p_labels_add_digits_only_where_two_p_would_print_alike():
    assert paxis.p_labels([2.0, 2.0000001, math.inf]) == {2.0: "2", 2.0000001: "2.0000001",
                                                          math.inf: "inf"}
    assert paxis.p_labels([1.835255759775752, 4.0]) == {1.835255759775752: "1.83526", 4.0: "4"}


def test_default_baseline_when_p2_was_not_run(tmp_path, sweep):
    runs = results.collect(sweep).runs
    assert baseline.resolve_baseline(runs, baseline.AUTO) == (2.0, "")
    grid = runs[runs["norm.p"] != 2.0]  # p in {4, inf}: a grid, the nearest p to 2 is 4
    p, note = baseline.resolve_baseline(grid, baseline.AUTO)
    assert p == 4.0 and note.startswith("p=2 was not run, so the baseline is the run p "
                                        "nearest to 2, p=4;")
    search = results.collect(make_search(tmp_path / "search")).runs
    assert baseline.continuous_p(search) and not baseline.continuous_p(runs)
    p, note = baseline.resolve_baseline(search, baseline.AUTO)
    assert p is None and "continuous search" in note and "no paired Δ table" in note
    none_only = runs.assign(**{"norm.kind": "none", "norm.p": math.nan})
    assert baseline.resolve_baseline(none_only, baseline.AUTO)[0] is None
    assert baseline.resolve_baseline(runs, None) == (None, "")


def test_quadratic_fit_equals_the_textbook_least_squares_band():
    x = np.log([1.1, 1.3, 1.7, 2.2, 3.0, 4.5, 7.0, 12.0])
    y = np.array([3.40, 3.37, 3.35, 3.36, 3.38, 3.41, 3.40, 3.47])
    grid = np.linspace(x.min(), x.max(), 7)
    mean, low, high = stats.quadratic_fit(x, y, grid)
    X = np.column_stack([np.ones_like(x), x, x**2])  # raw x, normal equations: another route
    beta = np.linalg.inv(X.T @ X) @ X.T @ y
    s2 = np.sum((y - X @ beta) ** 2) / (len(x) - 3)
    G = np.column_stack([np.ones_like(grid), grid, grid**2])
    se = np.sqrt(s2 * np.einsum("ij,jk,ik->i", G, np.linalg.inv(X.T @ X), G))
    t = sps.t.ppf(0.975, len(x) - 3)
    assert mean == pytest.approx(G @ beta, abs=1e-10)
    assert high - mean == pytest.approx(t * se, abs=1e-10)
    assert mean - low == pytest.approx(t * se, abs=1e-10)
    exact = stats.quadratic_fit(x, 1 + 2 * x - x**2, grid)  # no noise: the curve, zero width
    assert exact[0] == pytest.approx(1 + 2 * grid - grid**2, abs=1e-12)
    assert exact[2] - exact[1] == pytest.approx(np.zeros_like(grid), abs=1e-9)
    assert stats.quadratic_fit(x[:5], y[:5], grid) is None  # fewer than MIN_FIT_POINTS
    assert stats.quadratic_fit(np.r_[x[:2], x[:2], x[:2]], y[:6], grid) is None  # 2 distinct x


def test_effective_config_drops_the_keys_a_norm_kind_does_not_use():
    flat = flatten(config(4.0, 8, kind="none", study=("s", "sqlite:///x", 3)))
    assert "norm.p" not in effective_config(flat) and "norm.gamma_init" not in effective_config(flat)
    assert "optuna.trial" not in effective_config(flat) and "data.fold" in effective_config(flat)
    assert effective_key(flat) == effective_key(flatten(config(2.0, 8, kind="none")))
    assert effective_key(flatten(config(2.0, 8, kind="rms"))) == effective_key(
        flatten(config(4.0, 8, kind="rms")))
    assert effective_key(flatten(config(2.0, 8))) != effective_key(flatten(config(4.0, 8)))
    assert effective_key(flatten(config(2.0, 8, kind="none"))) != effective_key(
        flatten(config(2.0, 9, kind="none")))  # another fold is another run


def test_effective_config_keeps_the_data_keys_only_where_they_change_the_run():
    flat = flatten(config(2.0, 8))
    with_data = {**flat, "data.corpus": "shakespeare", "data.tokenizer": "char", "data.vocab_size": 512}
    # a run from before issue 37 (no data.corpus, tokenizer, vocab_size) is the same run
    assert effective_key(with_data) == effective_key(flat)
    assert effective_key({**with_data, "data.vocab_size": 1024}) == effective_key(flat)  # char
    assert effective_key({**with_data, "data.tokenizer": "byte", "data.vocab_size": 1024}) == \
        effective_key({**with_data, "data.tokenizer": "byte"})  # byte reads no vocab_size either
    bpe = {**with_data, "data.tokenizer": "bpe"}
    assert effective_key(bpe) != effective_key(flat)
    assert effective_key({**bpe, "data.vocab_size": 1024}) != effective_key(bpe)
    assert effective_key({**with_data, "data.corpus": "kjv"}) != effective_key(flat)


def test_effective_config_keeps_the_logit_controls_only_where_they_are_on():
    flat = flatten(config(2.0, 8))
    # a run from before issue 46 (no softcap, QK-Clip or z-loss keys) is the same run as one with both off
    unset = {**flat, "model.attn_softcap": None, "model.qk_clip": None, "train.z_loss": 0.0}
    assert effective_key(unset) == effective_key(flat)
    assert effective_key({**unset, "model.attn_softcap": 50.0}) != effective_key(flat)
    assert effective_key({**unset, "model.qk_clip": 100.0}) != effective_key(flat)
    assert effective_key({**unset, "train.z_loss": 1e-4}) != effective_key(flat)


def test_runs_that_repeat_an_effective_config_count_once(tmp_path):
    add_repeats(tmp_path, "none", [2.0, 4.0], [8, 9], loss=1.9)  # 4 dirs, 2 distinct runs
    add_repeats(tmp_path, "rms", [2.0, 4.0, 1.5], [8], loss=1.7)  # 3 dirs, 1 distinct run
    for fold in (8, 9):
        for p in (2.0, 4.0):
            run = tmp_path / f"lp_{p:g}_{fold}"
            write_config(run, config(p, fold))
            rundir.write_final(run, {"status": "completed", "best_val_loss": p / 2 + fold / 100})
    runs = results.collect(tmp_path).runs
    repeats = runs.dropna(subset=["duplicate_of"]).set_index("run_dir")["duplicate_of"]
    assert repeats.to_dict() == {"none_4_8": "none_2_8", "none_4_9": "none_2_9",
                                 "rms_2_8": "rms_1.5_8", "rms_4_8": "rms_1.5_8"}
    table = stats.group_summary(runs, ["best_val_loss"])
    assert list(zip(table["norm.kind"], table["norm.p"].fillna(0), table["n"])) == [
        ("lp", 2.0, 2), ("lp", 4.0, 2), ("none", 0, 2), ("rms", 0, 1)]
    none = table[table["norm.kind"] == "none"].iloc[0]
    assert none["best_val_loss_mean"] == pytest.approx(1.9 + 0.085)  # folds 8, 9 once each
    assert results.duplicates(runs).to_dict() == {"norm=none": 2, "norm=rms": 2}
    assert len(results.collect_curves(runs, tmp_path).groupby("run_dir")) == 3  # none x2, rms


def test_fit_minimum_finds_the_parabolas_vertex_and_the_summary_reports_it(tmp_path):
    runs = results.collect(make_search(tmp_path)).runs
    for lr, vertex in ((1e-3, 2.0), (3e-3, 1.5)):
        trials = stats.trial_means(runs[runs["optimizer.lr"] == lr], "best_val_loss")
        assert len(trials) == len(SEARCH_P[lr])  # one row per trial, inf included
        low = stats.fit_minimum(trials["p"], trials["mean"])
        assert low["p"] == pytest.approx(vertex, rel=0.01)  # the grid's spacing in p
        assert low["mean"] == pytest.approx(search_loss(vertex, lr), abs=1e-6)
        assert low["high"] - low["low"] == pytest.approx(0, abs=1e-9) and low["edge"] == ""
    falling = stats.fit_minimum([1.5, 2, 3, 4, 6, 8], [6, 5, 4, 3, 2, 1])  # still falling
    assert falling["edge"] == "largest" and falling["p"] == pytest.approx(8)
    options = Options(by=["optimizer.lr"])
    text = summarize(load(tmp_path, options), options)
    assert "| 0.001 | 6 | 2 | 3.7400 | [3.7400, 3.7400] |  |" in text
    assert "| 0.003 | 7 | 1.5 | 3.3600 | [3.3600, 3.3600] |  |" in text


# ---------------------------------------------------------------------------------------------
# issue 47: a timing by its median and range; the fit promised only where one was drawn

def test_wall_time_table_gives_median_and_range_where_a_t_interval_goes_below_zero(tmp_path):
    walls = {2.0: [10.0, 100.0], 4.0: [20.0, 30.0, 70.0]}  # p=4: median 30, mean 40
    for p, times in walls.items():
        for fold, wall in enumerate(times):
            run = tmp_path / f"{p:g}_{fold}"
            write_config(run, config(p, fold))
            rundir.write_final(run, final("completed", 1.0 + fold / 10, wall, p, 0, fold))
    # What the corrected t (10 folds: n_test/n_train = 1/9) would print for p=2: below zero.
    c = 1 / 2 + 1 / 9
    assert 55 - sps.t.ppf(0.975, 1) * np.std([10, 100], ddof=1) * math.sqrt(c) < 0
    options = Options()
    text = summarize(load(tmp_path, options), options)
    assert "## wall_time_s per p\n\n" + "\n".join([
        "| norm.p | n | median | min | max |", "|---|---|---|---|---|",
        "| 2 | 2 | 55.00 | 10.00 | 100.00 |", "| 4 | 3 | 30.00 | 20.00 | 70.00 |"]) + "\n" in text
    assert text.count("## wall_time_s per p") == 1  # and no t-interval of it anywhere
    # the loss table keeps its mean and t-interval
    assert "## best_val_loss per p\n\n| norm.p | n | mean | std | 95% t-interval |" in text


@pytest.mark.parametrize("trials, fitted", [(5, False), (6, True)])
def test_summary_promises_the_quadratic_fit_only_where_one_is_drawn(tmp_path, trials, fitted):
    root = make_search(tmp_path)
    for run in root.iterdir():  # keep trials 0..trials-1: all at lr 1e-3, at 5 or 6 distinct p
        if int(run.name.removeprefix("trial").split("_")[0]) >= trials:
            shutil.rmtree(run)
    options = Options()
    text = summarize(load(root, options), options)
    said = text.split("\n\n")[3]
    assert said.startswith("The p values come from a continuous search: loss_vs_p draws each")
    assert ("quadratic fit in log p and its 95% band" in said) == fitted
    assert ("too few trials for a quadratic fit (it needs 6 at 3 or more finite p)" in said) == (
        not fitted)
    assert "fit shows" not in text  # the baseline's note promises no fit either
