"""Issue 14, the report side: Holm-adjusted p-values and Cohen's d_z on textbook numbers, the
attention-diagnostic columns of new and old run dirs, and the delta_vs_p and entropy figures."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from hydra_racing_sweeper.multitest import holm
from scipy import stats as sps

from qknorm import rundir
from qknorm.errors import UserError
from qknorm.report import (
    Options,
    build_report,
    check_columns,
    compute,
    deltaplot,
    figures,
    load,
    plots,
    results,
    stats,
    stepplots,
    summarize,
)
from tests.helpers.plots import run_dots
from tests.helpers.synthetic_runs import (
    BEST,
    DIAG_END,
    DIAG_START,
    add_runs_without_p,
    config,
    final,
    make_sweep,
    write_config,
)


@pytest.fixture
def new(tmp_path):
    """The results tests' sweep as runs log since issue 14, plus two norm=none runs."""
    root = make_sweep(tmp_path / "new", with_diagnostics=True)
    add_runs_without_p(root, "none", [1.9, 2.1], first_job=12, with_diagnostics=True)
    return root


@pytest.fixture
def old(tmp_path):
    return make_sweep(tmp_path / "old")


# ---------------------------------------------------------------------------------------------
# Holm and d_z

def test_holm_equals_the_textbook_step_down():
    # Wikipedia's (and Holm 1979's style) example: m = 4, sorted 0.005, 0.01, 0.03, 0.04 become
    # 4*0.005, 3*0.01, 2*0.03, then 1*0.04 raised to 0.06: no larger p gets a smaller value.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # capped at 1: 2*0.6 = 1.2 -> 1, and 0.7 is raised to that 1, not left at 0.7
    assert list(holm([0.6, 0.7])) == [1.0, 1.0]
    # NaN (no test) stays NaN and is not in the family: m = 2 here, not 3
    out = holm([0.02, math.nan, 0.04])
    assert out[0] == pytest.approx(0.04) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)
    assert len(holm([])) == 0


def test_cohens_dz_is_mean_over_sample_sd():
    # d = 1, 2, 3, 6: mean 3, squared deviations 4 + 1 + 0 + 9 = 14, sd = sqrt(14 / 3)
    assert stats.cohens_dz([1, 2, 3, 6]) == pytest.approx(3 / math.sqrt(14 / 3), abs=1e-12)
    test = stats.paired_test([2.0, 3.0, 4.0, 7.0], [1.0, 1.0, 1.0, 1.0])
    assert test.d_z == pytest.approx(3 / math.sqrt(14 / 3), abs=1e-12)
    assert math.isnan(stats.cohens_dz([0.5])) and math.isnan(stats.cohens_dz([0.2, 0.2]))


def test_paired_table_holm_and_dz_on_the_synthetic_sweep(tmp_path):
    runs = results.collect(make_sweep(tmp_path)).runs
    paired = stats.paired_vs_baseline(runs, "best_val_loss", 2.0).set_index("norm.p")
    # p=4 minus p=2 over folds 0, 1, 2: -0.2, -0.1, 0 (mean -0.1, sd 0.1); p=inf over folds
    # 0, 1, 3: 0.5, 0.3, 0.2 (mean 1/3, squared deviations 42/900, variance 7/300)
    dz = {4.0: -1.0, math.inf: (1 / 3) / math.sqrt(7 / 300)}
    t_p = {p: 2 * sps.t.sf(abs(d) * math.sqrt(3), 2) for p, d in dz.items()}  # t = d_z sqrt(n)
    low, high = sorted(t_p, key=t_p.get)
    for p, d in dz.items():
        assert paired.loc[p, "d_z"] == pytest.approx(d, abs=1e-12)
        assert paired.loc[p, "t_pvalue"] == pytest.approx(t_p[p], abs=1e-12)
    assert paired.loc[low, "holm_pvalue"] == pytest.approx(2 * t_p[low], abs=1e-12)
    assert paired.loc[high, "holm_pvalue"] == pytest.approx(max(2 * t_p[low], t_p[high]),
                                                             abs=1e-12)


def test_summary_has_holm_and_dz_columns_and_names_the_family(new):
    options = Options()
    text = summarize(load(new, options), options)
    assert ("| t p | Holm p | Wilcoxon p | d_z |" in text
            and "| lp | 4 | 3 | -0.1000 |" in text and "| -1.00 |" in text)
    # norm=none has no t-test (equal differences): left out of the family, said so
    assert ("Holm–Bonferroni step-down over the 2 comparison(s) against p=2 in this table (1 "
            "without a t-test left out)") in text


# ---------------------------------------------------------------------------------------------
# diagnostic columns

def test_diagnostics_are_collected_from_final_json(new):
    runs = results.collect(new).runs
    assert results.layer_columns(runs.to_dict("records")) == [
        "attn_entropy_l0", "attn_entropy_frac_l0", "attn_max_weight_l0", "logit_std_l0",
        "gamma_l0"]
    done = stats.completed(runs)
    for _, row in done.iterrows():
        frac = DIAG_END.get(row["norm.p"], 0.5) + row["data.fold"] / 100  # none: 0.5
        assert row["attn_entropy_frac"] == pytest.approx(frac, abs=1e-12)
        assert row["attn_entropy_frac_l0"] == pytest.approx(frac, abs=1e-12)
        assert row["attn_entropy"] == pytest.approx(2 * frac, abs=1e-12)
        assert row["logit_std"] == pytest.approx(3.0)
    lp = done["norm.kind"] == "lp"
    assert list(done.loc[lp, "gamma_l0"]) == pytest.approx([10.2] * 10)
    assert done.loc[~lp, "gamma_l0"].isna().all()  # norm=none has no γ
    assert results.layer_columns([{"gamma_l10": 1, "gamma_l2": 1, "logit_std_l1": 1, "p_l1_h10": 1,
                                   "p_l1_h2": 1, "p_l0_h3": 1}]) == [
        "logit_std_l1", "gamma_l2", "gamma_l10", "p_l0_h3", "p_l1_h2", "p_l1_h10"]  # as numbers


def test_old_run_dirs_report_with_empty_diagnostic_columns(old, new):
    runs = results.collect(old).runs
    assert runs[results.DIAGNOSTICS].isna().all().all()
    assert not [c for c in runs.columns if results.LAYER_DIAGNOSTIC.match(c)]
    # old and new runs under one root: old rows NaN, new rows their values
    mixed = results.collect(old.parent).runs
    old_rows = mixed["run_dir"].str.startswith("old/")
    assert mixed.loc[old_rows, "attn_entropy_frac"].isna().all()
    assert mixed.loc[~old_rows & (mixed["status"] == "completed"), "attn_entropy_frac"].notna().all()


@pytest.mark.parametrize("metric, words", [
    ("attn_entropy", ["--metric attn_entropy: no run logged it",
                      "predate attention diagnostics", "rerun them", "best_val_loss"]),
    ("logit_std_l0", ["--metric logit_std_l0: no run logged it"]),
])
def test_unlogged_diagnostic_metric_names_it_and_the_fix(old, metric, words):
    with pytest.raises(UserError) as e:
        check_columns(results.collect(old).runs, metric, [])
    assert all(w in str(e.value) for w in words) and "attn_entropy_frac," not in str(e.value)


def test_diagnostic_of_a_layer_not_run_lists_the_logged_ones(new):
    with pytest.raises(UserError, match=r"--metric gamma_l3: no run logged it \(gamma_l<i>: "
                       r"only norms with a γ\); pick a diagnostic they logged: attn_entropy,"):
        check_columns(results.collect(new).runs, "gamma_l3", [])
    with pytest.raises(UserError, match=r"--metric p_l0_h1: no run logged it \(p_l<i>_h<h>: "
                       r"only with norm.p_learnable\)"):
        check_columns(results.collect(new).runs, "p_l0_h1", [])
    check_columns(results.collect(new).runs, "attn_entropy_l0", [])  # logged: accepted


def test_curves_and_results_keep_the_largest_attention_logit_per_layer_and_head(tmp_path):
    """Runs of 2 and 3 heads (a width ladder at a fixed head dim): curves.csv has attn_logit_max
    and each layer's and head's at every eval, a layer before its heads, NaN where a run has no
    such head; results.csv the last eval's, read from final.json."""
    for job, n_head in ((0, 2), (1, 3)):
        run = tmp_path / str(job)
        write_config(run, config(2.0, job))
        for step in (0, 10):
            heads = {f"attn_logit_max_l0_h{h}": 10.0 * (h + 1) + step + job for h in range(n_head)}
            top = max(heads.values())
            row = {"step": step, "train_loss": 3.0, "val_loss": 3.0 - step / 10, "lr": 1e-3,
                   "elapsed_s": 1.0, "attn_logit_max": top, "attn_logit_max_l0": top, **heads}
            rundir.append_metrics(run, row)
        rundir.write_final(run, final("completed", 2.0, 1.0, 2.0, 0, job, **heads,
                                      attn_logit_max=top, attn_logit_max_l0=top))
    report = build_report(tmp_path, Options(formats=()))
    curves = pd.read_csv(io.BytesIO(report.files["curves.csv"]), dtype={"run_dir": str})
    assert list(curves.columns) == [
        "run_dir", "step", "train_loss", "val_loss", "lr", "elapsed_s", "attn_logit_max",
        "attn_logit_max_l0", "attn_logit_max_l0_h0", "attn_logit_max_l0_h1", "attn_logit_max_l0_h2"]
    by_eval = curves.set_index(["run_dir", "step"])
    assert by_eval.loc[("0", 10), ["attn_logit_max", "attn_logit_max_l0_h0", "attn_logit_max_l0_h1"]
                       ].tolist() == [30.0, 20.0, 30.0]
    assert math.isnan(by_eval.loc[("0", 10), "attn_logit_max_l0_h2"])  # 2 heads: no head 2
    assert by_eval.loc[("1", 0), ["attn_logit_max_l0_h0", "attn_logit_max_l0_h1",
                                  "attn_logit_max_l0_h2"]].tolist() == [11.0, 21.0, 31.0]
    runs = report.runs.set_index("run_dir")
    assert runs.loc["1", ["attn_logit_max_l0_h0", "attn_logit_max_l0_h2"]].tolist() == [21.0, 41.0]
    rebuilt = tmp_path / "rebuilt"  # the committed form: results.csv and curves.csv alone
    rebuilt.mkdir()
    for name in ("results.csv", "curves.csv"):
        (rebuilt / name).write_bytes(report.files[name])
    assert build_report(rebuilt, Options(formats=())).files["curves.csv"] == report.files["curves.csv"]


# ---------------------------------------------------------------------------------------------
# figures

def report_figures(root, options: Options) -> dict:
    """The figures the report draws, as build_report makes them (unrendered: cheaper)."""
    collection = load(root, options)
    curves = results.collect_curves(collection.runs, collection.root)
    return figures(collection, options, curves, compute(collection, options, curves).paired)


def names(figs: dict) -> set[str]:
    for fig in figs.values():
        plots.close(fig)
    return set(figs)


BASE = {"loss_vs_p", "curves", "time_vs_p", "gamma_vs_p"}


def test_delta_and_entropy_figures_exist_exactly_when_they_should(old, new):
    assert names(report_figures(old, Options())) == BASE | {"delta_vs_p"}  # no diagnostics
    assert names(report_figures(old, Options(baseline=None))) == BASE  # no baseline: no Δ
    figs = report_figures(new, Options())
    # rendered once here (layout runs at draw time); delta_vs_p is rendered by test_plots
    assert plots.render(figs["entropy_vs_p"], "png")[:8] == b"\x89PNG\r\n\x1a\n"
    assert names(figs) == BASE | {"delta_vs_p", "entropy_vs_p", "entropy_curves"}


def test_delta_vs_p_draws_each_delta_and_fills_those_holm_keeps():
    paired = pd.DataFrame({
        "norm.p": [1.0, 4.0, math.inf], "n_pairs": [3, 3, 3], "delta_mean": [0.05, 0.01, 0.2],
        "delta_ci_low": [0.03, -0.02, 0.1], "delta_ci_high": [0.07, 0.04, 0.3],
        "holm_pvalue": [0.01, 0.5, math.nan]})
    (ax,) = deltaplot.delta_vs_p(paired, "best_val_loss", 2.0).axes
    axis = plots.PAxis.of([1.0, 2.0, 4.0, math.inf])
    filled = [c for c in ax.collections if c.get_gid() == deltaplot.HOLM_GID]
    assert len(filled) == 1 and filled[0].get_offsets().tolist() == [[1.0, 0.05]]
    hollow = [c for c in ax.collections if c.get_label().endswith("mean Δ ± 95% t-interval")]
    assert hollow[0].get_offsets().tolist() == [[4.0, 0.01], [axis.x(math.inf), 0.2]]
    zero = next(line for line in ax.get_lines() if line.get_label().startswith("Δ = 0"))
    assert list(zero.get_ydata()) == [0.0, 0.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "∞"]


def test_entropy_vs_p_shows_step_0_and_the_last_eval(new):
    runs = results.collect(new).runs
    fig = plots.entropy_vs_p(runs, results.collect_curves(runs, new))
    start, end = (sorted(map(tuple, run_dots(ax))) for ax in fig.axes)
    axis = plots.PAxis.of(runs["norm.p"].dropna())
    for dots, level in ((start, DIAG_START), (end, DIAG_END)):
        expected = sorted((axis.x(p), level[p] + f / 100) for p, folds in BEST.items()
                          for f in folds)
        assert np.allclose(dots, expected)
    curves = stepplots.entropy_curves(results.collect_curves(runs, new)).axes[0]
    p2 = next(line for line in curves.get_lines() if line.get_label() == "p=2 (n=4)")
    assert p2.get_ydata() == pytest.approx([0.915, 0.765, 0.615])  # folds 0..3 add 0.015


def test_entropy_curves_by_a_key_draw_one_panel_per_value(new):
    runs = results.collect(new).runs
    runs["norm.gamma_init"] = np.where(runs["data.fold"] < 2, "qknorm", "calibrated")
    fig = stepplots.entropy_curves(results.collect_curves(runs, new), runs, by=["norm.gamma_init"])
    assert [ax.get_title() for ax in fig.axes] == ["norm.gamma_init=calibrated",
                                                   "norm.gamma_init=qknorm"]
    p2 = next(line for line in fig.axes[0].get_lines() if line.get_label() == "p=2 (n=2)")
    assert p2.get_ydata() == pytest.approx([0.925, 0.775, 0.625])  # folds 2, 3 add 0.025


# ---------------------------------------------------------------------------------------------
# the attention table and the learned-p figure

def test_attention_summary_means_step_0_and_the_end_per_p(new):
    collection = results.collect(new)
    curves = results.collect_curves(collection.runs, new)
    table = stats.attention_summary(collection.runs, curves).set_index("norm.p")
    # synthetic_runs.diagnostics: frac = start/end by p + fold/100; p=2 has folds 0-3 completed
    # (mean fold/100 = 0.015), p=4 folds 0-2 (fold 3 diverged: 0.01)
    assert table.loc[2.0, "n"] == 4 and table.loc[4.0, "n"] == 3
    assert table.loc[2.0, "attn_entropy_frac_step0_mean"] == pytest.approx(DIAG_START[2.0] + 0.015)
    assert table.loc[2.0, "attn_entropy_frac_mean"] == pytest.approx(DIAG_END[2.0] + 0.015)
    assert table.loc[4.0, "attn_max_weight_mean"] == pytest.approx(1 - DIAG_END[4.0] - 0.01)
    assert table.loc[4.0, "logit_std_step0_mean"] == 1.0 and table.loc[4.0, "logit_std_mean"] == 3.0
    assert table.loc[2.0, "gamma_mean"] == 10.0
    options = Options()
    summary = summarize(load(new, options), options, curves)
    section = summary.split("## Attention at step 0 and at the end")[1].split("##")[0]
    assert f"| 2 | 4 | {DIAG_START[2.0] + 0.015:.4f} ± " in section


def test_attention_table_keeps_the_report_groups_when_only_some_runs_logged(tmp_path):
    """norm=none runs from before the diagnostics beside Lp runs that logged them: the table
    is grouped as the report is (norm.kind varies) and leaves the unlogged group out."""
    root = make_sweep(tmp_path, with_diagnostics=True)
    add_runs_without_p(root, "none", [1.9, 2.1], first_job=12)
    options = Options()
    collection = load(root, options)
    curves = results.collect_curves(collection.runs, root)
    table = stats.attention_summary(collection.runs, curves)
    assert list(table["norm.kind"]) == ["lp"] * 3
    section = summarize(collection, options, curves).split("## Attention at step 0")[1]
    assert "| lp | 2 | 4 |" in section and "| none |" not in section.split("##")[0]


def test_attention_summary_is_empty_for_runs_without_diagnostics(old):
    collection = results.collect(old)
    curves = results.collect_curves(collection.runs, old)
    assert stats.attention_summary(collection.runs, curves).empty
    options = Options()
    assert "## Attention at step 0" not in summarize(load(old, options), options, curves)


def test_learned_p_figure_averages_each_layer_and_head_over_runs():
    runs = pd.DataFrame({
        "status": "completed", "norm.kind": "lp", "norm.p": [2.0, 2.0, 4.0],
        "p_l0_h0": [2.5, 3.5, 4.0], "p_l0_h1": [2.0, 2.0, 5.0],
        "p_l1_h0": [1.5, 2.5, 4.5], "p_l1_h1": [2.0, 4.0, 6.0]})
    assert plots.learned_p_columns(runs) == {(0, 0): "p_l0_h0", (0, 1): "p_l0_h1",
                                             (1, 0): "p_l1_h0", (1, 1): "p_l1_h1"}
    fig = plots.learned_p(runs)
    start2, start4 = (ax.images[0].get_array() for ax in fig.axes[:2])
    np.testing.assert_allclose(start2, [[3.0, 2.0], [2.0, 3.0]])
    np.testing.assert_allclose(start4, [[4.0, 5.0], [4.5, 6.0]])
    assert [ax.get_title() for ax in fig.axes[:2]] == ["start p = 2 (2 runs)", "start p = 4 (1 runs)"]
    plots.close(fig)
    assert plots.learned_p_columns(runs.drop(columns=["p_l0_h0", "p_l0_h1", "p_l1_h0",
                                                      "p_l1_h1"])) == {}
