"""The learning-rate reading (issue 36) on hand-made run dirs: the LR sensitivity the report
prints equals Wortsman et al.'s formula applied by hand, a diverged run counted at ℓ₀; the max
stable lr, the paired differences and the figures."""

from __future__ import annotations

import math
import shutil
import statistics

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from qknorm.report import Options, build_report, lrplots, lrsens, plots, results, write_report
from qknorm.report.lrplots import DIVERGED_GID
from tests.helpers.config import compose_hydra_config
from tests.helpers.synthetic_runs import (
    LR_BEST_GAP,
    LR_DIVERGED,
    LR_FAILED,
    LR_FINAL,
    LR_GRID,
    LR_L0,
    LR_SEEDS,
    lr_fixtures,
    make_lr_sweep,
    make_search,
    make_sweep,
)

sweep, reading = lr_fixtures(make_lr_sweep)


def by_hand(group: str, seed: int, best: bool = False) -> float:
    """E over the grid of [min(ℓ(η), ℓ₀) − ℓ*], a diverged run at ℓ₀ (min(∞, ℓ₀))."""
    l0 = LR_L0[group][seed]
    losses = []
    for lr in LR_GRID:
        final = LR_FINAL[group][lr][seed]
        if (group, lr, seed) == LR_DIVERGED:
            final = math.inf
        elif best:
            final = 2.9 if final > l0 else final - LR_BEST_GAP
        losses.append(min(final, l0))
    return sum(losses) / len(losses) - min(losses)


def row(frame: pd.DataFrame, label: str) -> pd.Series:
    (i,) = [i for i, r in frame.iterrows() if lrsens.label(r, ["norm.kind", "norm.p"]) == label]
    return frame.loc[i]


def test_each_replicates_sensitivity_is_the_formula_applied_by_hand(reading):
    reps = reading.replicates
    for group in ("none", "p=2", "p=4"):
        for seed in LR_SEEDS:
            r = row(reps[reps["seed"] == seed], f"norm={group}" if group == "none" else group)
            if (group, LR_GRID[-1], seed) == LR_FAILED:  # misses lr 0.1: no sensitivity
                assert r["missing_lr"] == 1 and math.isnan(r["sensitivity"])
                continue
            assert r["sensitivity"] == pytest.approx(by_hand(group, seed), abs=1e-12)
            assert r["sensitivity_best"] == pytest.approx(by_hand(group, seed, best=True),
                                                          abs=1e-12)
    # the diverged run counts at its ℓ₀ (4.25), not at the 3.1 its final.json kept
    assert by_hand("none", 1) == pytest.approx((2.62 + 2.31 + 4.25) / 3 - 2.31)
    # a run that ended above ℓ₀ (4.5 > 4.2) counts at ℓ₀ too
    assert by_hand("none", 0) == pytest.approx((2.60 + 2.30 + 4.20) / 3 - 2.30)


def test_the_summary_prints_the_mean_and_interval_of_the_hand_values(sweep, tmp_path):
    root = tmp_path / "sweep"
    shutil.copytree(sweep, root)
    report = build_report(root, Options(formats=("png",)))
    section = report.summary.split("## Learning-rate sensitivity")[1].split("\n## ")[0]
    for group, seeds in (("none", LR_SEEDS), ("p=2", LR_SEEDS), ("p=4", [0, 1])):
        values = [by_hand(group, s) for s in seeds]
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        half = sps.t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values))
        name = f"norm={group}" if group == "none" else group
        line = next(ln for ln in section.splitlines() if ln.startswith(f"| {name} | "))
        assert f"| {mean:.4f} [{mean - half:.4f}, {mean + half:.4f}] |" in line
    # the per-replicate table: the one seed of p=4 without a sensitivity is "-"
    assert "| p=4 | 0.1333 | 0.1433 | - |" in section
    # held against its own results.csv and curves.csv, read back with pandas alone
    write_report(root, report)
    runs = pd.read_csv(root / "results.csv")
    curves = pd.read_csv(root / "curves.csv")
    l0 = curves[curves["step"] == 0].set_index("run_dir")["val_loss"]
    none = runs[runs["norm.kind"] == "none"].assign(l0=lambda d: d["run_dir"].map(l0))
    counted = np.where(none["status"] == "diverged", none["l0"],
                       np.minimum(none["val_loss"], none["l0"]))
    per_seed = pd.Series(counted, index=none.index).groupby(none["seed"]).agg(
        lambda v: v.mean() - v.min())
    assert per_seed.to_list() == pytest.approx([by_hand("none", s) for s in LR_SEEDS])


def test_max_stable_lr_runs_and_diverged_per_group(reading):
    summary = reading.summary
    assert row(summary, "p=2")["max_stable_lr"] == 0.1
    assert row(summary, "norm=none")["max_stable_lr"] == 0.01  # seed 1 diverged at 0.1
    assert row(summary, "p=4")["max_stable_lr"] == 0.01  # seed 2 failed at 0.1: not completed
    assert (row(summary, "norm=none")["runs"], row(summary, "norm=none")["diverged"]) == (9, 1)
    assert row(summary, "p=4")["runs"] == 8  # the failed run is not counted
    at = reading.by_lr
    top = at[(at["norm.kind"] == "none") & (at[lrsens.LR] == 0.1)].iloc[0]
    assert top["val_loss_mean"] == pytest.approx((4.20 + 4.25 + 3.00) / 3)
    assert top["attn_logit_max"] == pytest.approx((15.0 + 10.0 + 15.0) / 3)  # diverged: step 10


def test_paired_differences_vs_qknorm_are_paired_t_with_holm(reading):
    assert reading.reference == "p=2"
    paired = reading.paired
    p_values = {}
    for group, seeds in (("none", LR_SEEDS), ("p=4", [0, 1])):
        d = [by_hand(group, s) - by_hand("p=2", s) for s in seeds]
        r = row(paired, f"norm={group}" if group == "none" else group)
        assert r["n_pairs"] == len(seeds)
        assert r["delta_mean"] == pytest.approx(statistics.fmean(d), abs=1e-12)
        p_values[group] = sps.ttest_1samp(d, 0.0).pvalue
        assert r["t_pvalue"] == pytest.approx(p_values[group], rel=1e-9)
    low, high = sorted(p_values, key=p_values.get)
    r_low = row(paired, f"norm={low}" if low == "none" else low)
    r_high = row(paired, f"norm={high}" if high == "none" else high)
    assert r_low["holm_pvalue"] == pytest.approx(2 * p_values[low], rel=1e-9)
    assert r_high["holm_pvalue"] == pytest.approx(max(2 * p_values[low], p_values[high]),
                                                  rel=1e-9)


def test_reference_falls_back_to_none_and_is_absent_without_either(reading):
    points, keys = reading.points, ["norm.kind", "norm.p"]
    without_qknorm = points[points["norm.p"] != 2.0]  # none (p NaN) and p=4
    assert lrsens.reference_of(without_qknorm, keys)["norm.kind"] == "none"
    assert lrsens.reference_of(points[points["norm.p"] == 4.0], keys) is None


def test_no_reading_without_an_lr_grid(tmp_path):
    root = make_sweep(tmp_path / "p")
    runs = results.collect(root).runs
    assert lrsens.compute(runs, results.collect_curves(runs, root)) is None
    assert "## Learning-rate sensitivity" not in build_report(root, Options(formats=())).summary
    # a continuous search over p at two lr: every p ran at one lr, so there is no curve
    search = make_search(tmp_path / "search")
    runs = results.collect(search).runs
    assert lrsens.varies(runs) and lrsens.compute(runs, results.collect_curves(runs, search)) is None


def test_figures_mark_the_diverged_run_at_its_l0_and_draw_the_two_largest_lr(reading, sweep):
    fig = lrplots.lr_sensitivity(reading)
    final = fig.axes[0]
    (cross,) = [c for c in final.collections if c.get_gid() == DIVERGED_GID]
    assert cross.get_offsets().tolist() == [[0.1, LR_L0["none"][1]]]
    assert final.get_xscale() == "log"
    plots.close(fig)
    curves = results.collect_curves(results.collect(sweep).runs, sweep)
    fig = lrplots.attn_logit_curves(reading, curves)
    assert [ax.get_title() for ax in fig.axes] == ["lr = 0.1", "lr = 0.01"]
    (mark,) = [line for line in fig.axes[0].get_lines() if line.get_gid() == DIVERGED_GID]
    assert (mark.get_xdata()[0], mark.get_ydata()[0]) == (10, 10.0)  # its last eval, step 10
    plots.close(fig)
    assert lrplots.attn_logit_curves(reading, curves.drop(columns="attn_logit_max")) is None


def test_a_report_rebuilt_from_results_csv_gives_the_same_sensitivity(sweep, tmp_path):
    root = tmp_path / "sweep"
    shutil.copytree(sweep, root)
    report = build_report(root, Options(formats=("png",)))
    rebuilt = tmp_path / "rebuilt"
    rebuilt.mkdir()
    for name in ("results.csv", "curves.csv"):
        (rebuilt / name).write_bytes(report.files[name])
    again = build_report(rebuilt, Options(formats=("png",)))
    section = report.summary.split("## Learning-rate sensitivity")[1].split("\n## ")[0]
    assert section == again.summary.split("## Learning-rate sensitivity")[1].split("\n## ")[0]
    assert "report/lr_sensitivity.png" in again.files
    # curves.csv keeps the largest attention logit of every eval (issue 46): the figure is
    # drawn again from it, and the column holds what the runs' metrics.jsonl logged
    assert "report/attn_logit_curves.png" in again.files
    index = ["run_dir", "step"]
    logged = results.collect_curves(results.collect(root).runs, root).set_index(index)
    kept = pd.read_csv(rebuilt / "curves.csv", dtype={"run_dir": str}).set_index(index)
    assert kept["attn_logit_max"].notna().sum() == logged["attn_logit_max"].notna().sum() > 0
    pd.testing.assert_series_equal(kept["attn_logit_max"],
                                   logged.loc[kept.index, "attn_logit_max"])
    # from results.csv alone there is no ℓ₀: no reading, and the rest of the report is drawn
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "results.csv").write_bytes(report.files["results.csv"])
    bare = build_report(alone, Options(formats=("png",)))
    assert "## Learning-rate sensitivity" not in bare.summary
    assert "report/lr_sensitivity.png" not in bare.files and "report/loss_vs_p.png" in bare.files


# ---------------------------------------------------------------------------------------------
# the preset, and a sweep in which a run diverges

def test_preset_is_a_log_lr_grid_by_norm_over_seeds_through_our_sweeper():
    cfg = compose_hydra_config("search=lr_sensitivity", "norm.gamma_init=calibrated")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("RacingSweeper") and sweeper.sampler.name == "grid"
    lrs = [float(x) for x in sweeper.params["optimizer.lr"][len("choice("):-1].split(",")]
    assert len(lrs) >= 7 and math.log10(max(lrs) / min(lrs)) >= 2.5
    assert np.allclose(np.diff(np.log10(lrs)), 0.5, atol=0.03)  # half decades: 1, 3, 10
    assert sweeper.params["norm"] == "choice(none, rms, lp)"
    assert sweeper.params["norm.p"] == "choice(2.0, 4.0)"  # lp at 2 is QKNorm (norm=l2)
    assert dict(sweeper.replicates) == {"seed": [0, 1, 2]}
    grid = len(lrs) * 3 * 2
    assert sweeper.n_trials is None and sweeper.n_jobs >= grid  # the grid in one batch
    assert sweeper.max_failure_rate == 1.0  # diverged runs never stop the study
    assert (cfg.name, sweeper.study_name) == ("lr_sensitivity_calibrated",) * 2
    assert (cfg.optimizer.warmup_iters, cfg.optimizer.min_lr, cfg.train.max_iters) == (20, 0.0, 400)
    assert (cfg.threads, cfg.data.fold, cfg.hydra.launcher.n_jobs) == (1, 9, 2)


def _choices(param: str) -> list[str]:
    return [x.strip() for x in param[len("choice("):-1].split(",")]


def test_width_preset_is_a_ladder_of_widths_by_arm_by_lr_on_equal_tokens():
    """Issue 46's protocol: >= 3 widths spanning >= 4x at model=cpu's depth and head dim, the
    five arms, >= 6 lr in half decades up to 3.0 (where no QK-norm fails at 256 wide), 3 seeds,
    the same tokens per run at every width; clipping in the study's name, so the run without it
    is another study."""
    cfg = compose_hydra_config("search=lr_width")
    sweeper = cfg.hydra.sweeper
    widths = {}
    for model in _choices(sweeper.params["model"]):
        c = compose_hydra_config("search=lr_width", f"model={model}")
        widths[model] = (c.model.n_layer, c.model.n_embd, c.model.n_embd // c.model.n_head,
                         c.train.max_iters * c.train.batch_size * c.model.block_size)
    assert sorted(w[1] for w in widths.values()) == [64, 128, 256]
    assert {(w[0], w[2], w[3]) for w in widths.values()} == {(4, 32, 200 * 12 * 64)}
    assert _choices(sweeper.params["arm"]) == ["none", "qknorm", "lp4_calibrated", "softcap",
                                                "z_loss"]
    lrs = [float(x) for x in _choices(sweeper.params["optimizer.lr"])]
    assert len(lrs) >= 6 and max(lrs) == 3.0
    assert np.allclose(np.diff(np.log10(lrs)), 0.5, atol=0.03)
    assert dict(sweeper.replicates) == {"seed": [0, 1, 2]}
    assert sweeper.n_trials is None and sweeper.n_jobs == 3 * 5 * len(lrs)  # one batch
    assert sweeper.max_failure_rate == 1.0 and cfg.hydra.launcher.n_jobs == 2
    assert (cfg.optimizer.warmup_iters, cfg.optimizer.min_lr, cfg.optimizer.grad_clip) == (
        10, 0.0, 1.0)  # 5% warmup, as lr_sensitivity's
    assert (cfg.name, sweeper.study_name) == ("lr_width_clip1.0",) * 2
    assert compose_hydra_config("search=lr_width", "optimizer.grad_clip=0").name == "lr_width_clip0.0"


@pytest.mark.slow
def test_a_sweep_with_a_diverging_run_finishes_and_reports_it(cli):
    """lr 1e6 diverges at once: its trial fails, the sweep goes on to its end, and the report
    lists the run (status diverged) and counts it in the sensitivity at ℓ₀."""
    r = cli("-m", "qknorm.train", "search=lr_sensitivity", "experiment=smoke",
            "train.max_iters=10", "train.eval_interval=5", "train.eval_iters=1",
            "optimizer.lr=choice(0.001,1000000.0)", "norm=choice(none,lp)", "norm.p=choice(2.0)",
            "seed=0")
    assert r.returncode == 0, r.stderr[-3000:]
    sweep = cli.cwd / "outputs" / "sweeps" / "lr_sensitivity_qknorm"
    report = build_report(sweep, Options(formats=()))
    runs = report.runs.set_index(["norm.kind", lrsens.LR])
    assert sorted(runs.index) == [("lp", 0.001), ("lp", 1e6), ("none", 0.001), ("none", 1e6)]
    assert set(runs.loc[[("lp", 1e6), ("none", 1e6)], "status"]) == {"diverged"}
    assert (runs.loc[[("lp", 0.001), ("none", 0.001)], "status"] == "completed").all()
    assert (runs.loc[[("lp", 1e6), ("none", 1e6)], "diverged_step"] >= 0).all()
    section = report.summary.split("## Learning-rate sensitivity")[1].split("\n## ")[0]
    assert "| p=2 | 1 | 2 | 1 | 2: 0.001 … 1e+06 | 0.001 |" in section
    excluded = report.summary.split("## Excluded runs")[1]
    assert excluded.count("| diverged |") == 2


def test_two_gamma_init_studies_under_one_root_keep_norm_none_one_curve(sweep, tmp_path):
    """none never reads norm.gamma_init: its runs in the calibrated study are the qknorm
    study's again (completed ones folded by duplicate_of, the diverged one here), one group."""
    import yaml

    shutil.copytree(sweep, tmp_path / "qknorm")
    shutil.copytree(sweep, tmp_path / "calibrated")
    for path in (tmp_path / "calibrated").glob("*/.hydra/config.yaml"):
        cfg = yaml.safe_load(path.read_text())
        cfg["norm"]["gamma_init"] = "calibrated"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    runs = results.collect(tmp_path).runs
    reading = lrsens.compute(runs, results.collect_curves(runs, tmp_path))
    labels = [lrsens.label(r, reading.keys) for _, r in reading.summary.iterrows()]
    assert labels == ["p=2 norm.gamma_init=calibrated", "p=2 norm.gamma_init=qknorm",
                      "p=4 norm.gamma_init=calibrated", "p=4 norm.gamma_init=qknorm", "norm=none"]
    none = reading.summary.iloc[-1]
    assert (none["runs"], none["diverged"]) == (9, 1)
    assert none["sensitivity_mean"] == pytest.approx(
        statistics.fmean(by_hand("none", s) for s in LR_SEEDS), abs=1e-12)
    assert "1 run(s) repeat another run's group, lr and replicate" in reading.notes[0]
