"""The learning-rate reading across width (issue 46, items 4 and 5) on hand-made run dirs: a
2-width x 3-arm x 3-lr x 3-seed sweep whose sensitivities, best lr, max stable lr, Δ vs the
QKNorm of the same width and Holm p within each width are computed here by hand and scipy; the
arm names read back from the keys; the width table of summary.md; the figures' drawn data."""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as sps

from qknorm import rundir
from qknorm.report import Options, build_report, lrplots, lrsens, plots, results
from qknorm.report.arms import arm_name, arm_names
from tests.helpers.holm import holm_by_hand
from tests.helpers.synthetic_runs import lr_fixtures

# ---------------------------------------------------------------------------------------------
# The sweep: model.n_embd 64 (2 heads) and 128 (4 heads), 2 layers, head dim 32; the arms
# qknorm (the reference), lp4_calibrated (a norm.* key apart) and softcap (norm=none and a
# model.* key apart); lr 0.01, 0.1, 1.0; seeds 0, 1, 2 on fold 9. At 128, softcap's seed 1
# diverged at lr 1.0 (counted at ℓ₀) and lp4's seed 2 failed there (its replicate has no
# sensitivity); at 64, softcap's seed 0 ended above ℓ₀ at lr 1.0 (counted at ℓ₀, completed).

HEADS = {64: 2, 128: 4}
N_LAYER = 2
LRS = [0.01, 0.1, 1.0]
SEEDS = [0, 1, 2]
ARMS = {  # arm -> (norm.kind, norm.p, norm.gamma_init, model.attn_softcap), as Hydra composes
    "qknorm": ("l2", 2.0, "qknorm", None),
    "lp4_calibrated": ("lp", 4.0, "calibrated", None),
    "softcap": ("none", 2.0, "qknorm", 50.0),  # norm=none keeps the schema's p and γ init
}
FINAL = {  # (width, arm) -> lr -> final val loss per seed; None: diverged or failed
    (64, "qknorm"): {0.01: [2.60, 2.62, 2.61], 0.1: [2.30, 2.33, 2.31], 1.0: [2.50, 2.56, 2.52]},
    (64, "lp4_calibrated"): {0.01: [2.55, 2.58, 2.56], 0.1: [2.28, 2.30, 2.27],
                             1.0: [2.40, 2.41, 2.45]},
    (64, "softcap"): {0.01: [2.50, 2.49, 2.52], 0.1: [2.35, 2.38, 2.34], 1.0: [4.50, 3.40, 3.10]},
    (128, "qknorm"): {0.01: [2.45, 2.47, 2.46], 0.1: [2.20, 2.22, 2.19], 1.0: [2.60, 2.66, 2.61]},
    (128, "lp4_calibrated"): {0.01: [2.40, 2.43, 2.41], 0.1: [2.18, 2.21, 2.17],
                              1.0: [2.35, 2.37, None]},
    (128, "softcap"): {0.01: [2.30, 2.31, 2.33], 0.1: [2.40, 2.45, 2.42], 1.0: [3.90, None, 3.80]},
}
DIVERGED = (128, "softcap", 1.0, 1)
FAILED = (128, "lp4_calibrated", 1.0, 2)


def l0(width: int, seed: int) -> float:
    return 4.20 + seed / 50 + (0.01 if width == 128 else 0.0)


def head_logit(width: int, arm: str, lr: float, seed: int, layer: int, head: int) -> float:
    """The largest attention logit of one head at the last eval."""
    base = {"qknorm": 3.0, "lp4_calibrated": 4.0, "softcap": 8.0}[arm]
    return base + width / 64 + 10 * lr * (layer + 1) + head + seed / 10


def config(width: int, arm: str, lr: float, seed: int) -> dict:
    kind, p, gamma, softcap = ARMS[arm]
    return {
        "model": {"n_layer": N_LAYER, "n_head": HEADS[width], "n_embd": width, "block_size": 32,
                  "dropout": 0.0, "bias": False, "attn_softcap": softcap, "qk_clip": None},
        "norm": {"kind": kind, "p": p, "gamma_init": gamma, "gamma_learnable": True,
                 "gamma_shape": "scalar", "p_learnable": False, "eps": 1e-6},
        "data": {"path": None, "n_folds": 10, "fold": 9},
        "optimizer": {"lr": lr, "warmup_iters": 5},
        "train": {"max_iters": 20, "eval_interval": 10, "z_loss": 0.0},
        "optuna": {"study_name": None, "storage": None, "trial": None},
        "name": "lr_width", "seed": seed, "device": "cpu", "dtype": "float32", "threads": 1,
    }


def logits(width: int, arm: str, lr: float, seed: int) -> dict:
    """final.json's attention-logit readings: per head, per layer (its heads' max), overall."""
    heads = {(i, h): head_logit(width, arm, lr, seed, i, h)
             for i in range(N_LAYER) for h in range(HEADS[width])}
    out = {f"attn_logit_max_l{i}_h{h}": v for (i, h), v in heads.items()}
    out.update({f"attn_logit_max_l{i}": max(v for (j, _), v in heads.items() if j == i)
                for i in range(N_LAYER)})
    return {"attn_logit_max": max(heads.values()), **out}


def make_width_sweep(root: Path) -> Path:
    """54 job dirs; each curve starts at ℓ₀ (step 0) and ends at its final val loss."""
    job = 0
    for (width, arm), by_lr in FINAL.items():
        for lr, finals in by_lr.items():
            for seed, last in zip(SEEDS, finals):
                run = root / str(job)
                cfg = config(width, arm, lr, seed)
                (run / ".hydra").mkdir(parents=True)
                (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
                steps = (0, 10, 20) if last is not None else (0, 10)
                for step in steps:
                    val = l0(width, seed) if step == 0 else (last if step == 20 else 3.1)
                    rundir.append_metrics(run, {"step": step, "train_loss": val, "val_loss": val,
                                                "lr": lr, "elapsed_s": step / 10})
                status = {DIVERGED: "diverged", FAILED: "failed"}.get((width, arm, lr, seed),
                                                                       "completed")
                final = 3.1 if last is None else last
                rundir.write_final(run, {
                    "status": status, "val_loss": final, "best_val_loss": min(final, 3.0),
                    "train_loss": final, "steps": steps[-1], "wall_time_s": 1.0,
                    "tokens_per_s": 1000.0, "n_params": 1000, "p": None, "gamma": None,
                    "seed": seed, "fold": 9, "git_sha": "abc", "torch_version": "2",
                    "device": "cpu", "dtype": "float32", "threads": 1,
                    **logits(width, arm, lr, seed)})
                job += 1
    return root


# ---------------------------------------------------------------------------------------------
# By hand

def counted(width: int, arm: str, lr: float, seed: int) -> float | None:
    """min(ℓ, ℓ₀), a diverged run at ℓ₀; None for the failed run (not counted)."""
    if (width, arm, lr, seed) == FAILED:
        return None
    if (width, arm, lr, seed) == DIVERGED:
        return l0(width, seed)
    return min(FINAL[(width, arm)][lr][seed], l0(width, seed))


def sensitivity(width: int, arm: str, seed: int) -> float | None:
    values = [counted(width, arm, lr, seed) for lr in LRS]
    if None in values:
        return None
    return sum(values) / len(values) - min(values)


def seeds_of(width: int, arm: str) -> list[int]:
    return [s for s in SEEDS if sensitivity(width, arm, s) is not None]


# ---------------------------------------------------------------------------------------------

sweep, reading = lr_fixtures(make_width_sweep)


def group(frame: pd.DataFrame, width: int, arm: str) -> pd.Series:
    (i,) = [i for i, r in frame.iterrows() if r["model.n_embd"] == width and arm_name(r) == arm]
    return frame.loc[i]


def test_the_arm_is_read_back_from_the_keys_an_arm_sets():
    # conf/arm/'s names: the keys each file sets, as results.csv holds them (NaN: unset)
    nan = math.nan
    assert arm_name({"norm.kind": "none", "norm.p": nan}) == "none"
    assert arm_name({"norm.kind": "l2", "norm.p": nan, "norm.gamma_init": "qknorm"}) == "qknorm"
    assert arm_name({"norm.kind": "lp", "norm.p": 2.0}) == "qknorm"  # lp at 2 is QKNorm
    assert arm_name({"norm.kind": "lp", "norm.p": 4.0, "norm.gamma_init": "calibrated"}) == (
        "lp4_calibrated")
    assert arm_name({"norm.kind": "lp", "norm.p": 4.0}) == "lp4"  # γ init not a column
    assert arm_name({"norm.kind": "rms", "norm.p": nan}) == "rms"
    assert arm_name({"norm.kind": "none", "model.attn_softcap": 50.0}) == "softcap"
    assert arm_name({"norm.kind": "none", "train.z_loss": 1e-4, "model.attn_softcap": nan}) == (
        "z_loss")
    assert arm_name({"norm.kind": "none", "train.z_loss": 0.0, "model.qk_clip": 100.0}) == (
        "qk_clip")
    assert arm_name({"norm.kind": "l2", "model.attn_softcap": 50.0}) == "qknorm+softcap"
    frame = pd.DataFrame({"norm.kind": ["none", "none", "l2"], "norm.p": [nan, nan, nan],
                          "model.attn_softcap": [30.0, 50.0, nan]})
    assert arm_names(frame).tolist() == ["softcap (model.attn_softcap=30)",
                                         "softcap (model.attn_softcap=50)", "qknorm"]


def test_each_width_and_arm_has_its_own_sensitivity_best_lr_and_max_stable_lr(reading):
    summary = reading.summary
    assert len(summary) == 6
    for width in HEADS:
        for arm in ARMS:
            r = group(summary, width, arm)
            values = [sensitivity(width, arm, s) for s in seeds_of(width, arm)]
            mean, sd = statistics.fmean(values), statistics.stdev(values)
            half = sps.t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values))
            assert r["sensitivity_n"] == len(values)
            assert r["sensitivity_mean"] == pytest.approx(mean, abs=1e-12)
            assert (r["sensitivity_ci_low"], r["sensitivity_ci_high"]) == pytest.approx(
                (mean - half, mean + half), abs=1e-12)
    # the best lr: lowest mean over its runs of min(ℓ, ℓ₀); softcap's moves down at 128
    best = {(w, a): group(summary, w, a)["best_lr"] for w in HEADS for a in ARMS}
    assert best == {(64, "qknorm"): 0.1, (64, "lp4_calibrated"): 0.1, (64, "softcap"): 0.1,
                    (128, "qknorm"): 0.1, (128, "lp4_calibrated"): 0.1, (128, "softcap"): 0.01}
    at_128 = {lr: statistics.fmean(counted(128, "softcap", lr, s) for s in SEEDS) for lr in LRS}
    assert min(at_128, key=at_128.get) == 0.01
    # max stable lr: every seed completed (ending above ℓ₀ is completed; diverged, failed not)
    stable = {(w, a): group(summary, w, a)["max_stable_lr"] for w in HEADS for a in ARMS}
    assert stable == {(64, "qknorm"): 1.0, (64, "lp4_calibrated"): 1.0, (64, "softcap"): 1.0,
                      (128, "qknorm"): 1.0, (128, "lp4_calibrated"): 0.1, (128, "softcap"): 0.1}


def test_delta_is_against_the_qknorm_of_the_same_width_with_holm_within_each_width(reading):
    paired = reading.paired
    assert reading.reference == "norm=l2" and sorted(reading.family) == ["model.n_embd", "model.n_head"]
    assert len(paired) == 4  # two arms at each of two widths
    for width in HEADS:
        p = {}
        for arm in ("lp4_calibrated", "softcap"):
            seeds = seeds_of(width, arm)
            x = [sensitivity(width, arm, s) for s in seeds]
            ref = [sensitivity(width, "qknorm", s) for s in seeds]
            r = group(paired, width, arm)
            assert r["n_pairs"] == len(seeds)
            assert r["delta_mean"] == pytest.approx(statistics.fmean(np.subtract(x, ref)),
                                                    abs=1e-12)
            p[arm] = sps.ttest_rel(x, ref).pvalue
            assert r["t_pvalue"] == pytest.approx(p[arm], rel=1e-9)
        for arm, adjusted in holm_by_hand(p).items():
            assert group(paired, width, arm)["holm_pvalue"] == pytest.approx(adjusted, rel=1e-9)


def test_the_reference_is_the_qknorm_arm_never_a_controlled_norm_none(reading):
    points, keys = reading.points, reading.keys
    reference = lrsens.reference_of(points, keys)
    # the arm's keys only: the width is matched per group, so each width has its own QKNorm
    assert set(reference) == {"norm.kind", "norm.p", "norm.gamma_init", "model.attn_softcap"}
    assert (reference["norm.kind"], reference["norm.gamma_init"]) == ("l2", "qknorm")
    # without QKNorm the fallback is norm=none with no control: softcap (norm=none) is not it
    assert lrsens.reference_of(points[arm_names(points) != "qknorm"], keys) is None


def section_of(summary: str) -> str:
    return summary.split("## Learning-rate sensitivity")[1].split("\n## ")[0]


def width_table(section: str) -> list[list[str]]:
    """The cells of the by-width table, one list per row."""
    lines = section.split("| width (heads) |")[1].split("\n\n")[0].splitlines()[2:]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]


def test_summary_prints_the_width_table_with_the_hand_values(sweep, tmp_path):
    root = tmp_path / "sweep"
    shutil.copytree(sweep, root)
    section = section_of(build_report(root, Options(formats=())).summary)
    rows = width_table(section)
    assert [r[:2] for r in rows] == [["64 (2)", "qknorm"], ["64 (2)", "lp4_calibrated"],
                                     ["64 (2)", "softcap"], ["128 (4)", "qknorm"],
                                     ["128 (4)", "lp4_calibrated"], ["128 (4)", "softcap"]]
    for r in rows:
        width, arm = int(r[0].split()[0]), r[1]
        values = [sensitivity(width, arm, s) for s in seeds_of(width, arm)]
        low, high = sps.t.interval(0.95, len(values) - 1, loc=statistics.fmean(values),
                                   scale=sps.sem(values))
        assert r[2:4] == [str(len(values)), f"{statistics.fmean(values):.4f} [{low:.4f}, "
                                            f"{high:.4f}]"]
        if arm == "qknorm":
            assert r[6:] == ["reference", "", ""]
            continue
        seeds = seeds_of(width, arm)
        d = [sensitivity(width, arm, s) - sensitivity(width, "qknorm", s) for s in seeds]
        low, high = sps.t.interval(0.95, len(d) - 1, loc=statistics.fmean(d), scale=sps.sem(d))
        assert r[6] == f"{statistics.fmean(d):.4f} [{low:.4f}, {high:.4f}]"
        assert r[7] == f"{sps.ttest_1samp(d, 0.0).pvalue:.3g}"
    # best lr and max stable lr, as the hand table in the test above
    assert [r[4:6] for r in rows] == [["0.1", "1"], ["0.1", "1"], ["0.1", "1"],
                                      ["0.1", "1"], ["0.1", "0.1"], ["0.01", "0.1"]]
    # the Holm p of softcap at 128: the smaller of that width's two, doubled
    p = {a: sps.ttest_rel([sensitivity(128, a, s) for s in seeds_of(128, a)],
                          [sensitivity(128, "qknorm", s) for s in seeds_of(128, a)]).pvalue
         for a in ("lp4_calibrated", "softcap")}
    assert rows[5][8] == f"{2 * p['softcap']:.3g}" and rows[4][8] == f"{p['lp4_calibrated']:.3g}"
    assert "Holm family: the arms compared with qknorm at one width (2 at each width), not " \
           "the whole table" in section
    assert "Holm p within each value of model.n_head, model.n_embd: the comparisons with the " \
           "reference of that value (the width table says why)." in section


def test_one_width_has_no_width_table_nor_width_figure(sweep, tmp_path):
    """As a study that runs width by width shows while its second width has finished one lr:
    that width has no group (one lr is no curve), so one width is read."""
    root = tmp_path / "one"
    shutil.copytree(sweep, root)
    for path in root.glob("*/.hydra/config.yaml"):
        cfg = yaml.safe_load(path.read_text())
        if cfg["model"]["n_embd"] == 128 and cfg["optimizer"]["lr"] != 0.01:
            shutil.rmtree(path.parent.parent)
    assert results.collect(root).runs["model.n_embd"].nunique() == 2
    report = build_report(root, Options(formats=("png",)))
    section = section_of(report.summary)
    assert "By width" not in section and "| width" not in section
    assert "Holm p over the table's comparisons." in section
    assert "report/lr_width.png" not in report.files
    assert "report/attn_logit_heads.png" in report.files  # per-head logits: any width
    # the reference is still this width's QKNorm, and with one width Holm spans the table
    runs = results.collect(root).runs
    one = lrsens.compute(runs, results.collect_curves(runs, root))
    assert one.family == [] and lrsens.width_view(one) is None
    p = {a: sps.ttest_rel([sensitivity(64, a, s) for s in SEEDS],
                          [sensitivity(64, "qknorm", s) for s in SEEDS]).pvalue
         for a in ("lp4_calibrated", "softcap")}
    for arm, adjusted in holm_by_hand(p).items():
        r = one.paired[arm_names(one.paired) == arm].iloc[0]
        assert r["holm_pvalue"] == pytest.approx(adjusted, rel=1e-9)


def test_groups_of_different_lr_grids_are_said_not_to_compare(sweep, tmp_path):
    """softcap at 64 without lr 1.0 (a study still running): its sensitivity is over 2 lr."""
    root = tmp_path / "short"
    shutil.copytree(sweep, root)
    for path in root.glob("*/.hydra/config.yaml"):
        cfg = yaml.safe_load(path.read_text())
        if (cfg["model"]["n_embd"], cfg["model"]["attn_softcap"], cfg["optimizer"]["lr"]) == (
                64, 50.0, 1.0):
            shutil.rmtree(path.parent.parent)
    section = section_of(build_report(root, Options(formats=())).summary)
    assert "The groups ran 2 different lr grids (2 to 3 lr;" in section
    short = [r for r in width_table(section) if r[:2] == ["64 (2)", "softcap"]][0]
    values = [statistics.fmean(counted(64, "softcap", lr, s) for lr in LRS[:2])
              - min(counted(64, "softcap", lr, s) for lr in LRS[:2]) for s in SEEDS]
    assert short[3].startswith(f"{statistics.fmean(values):.4f} [")
    assert "different lr grids" not in section_of(
        build_report(sweep, Options(formats=())).summary)


def test_the_width_figure_draws_the_hand_sensitivities_and_lrs(reading):
    fig = lrplots.lr_width(reading)
    sens, lrs = fig.axes
    assert sens.get_xscale() == "log" and lrs.get_yscale() == "log"
    containers = {c.get_label(): c for c in sens.containers}
    assert set(containers) == set(ARMS)
    for arm, container in containers.items():
        line, _, (bars,) = container
        means = [statistics.fmean(sensitivity(w, arm, s) for s in seeds_of(w, arm))
                 for w in HEADS]
        assert line.get_xdata().tolist() == [64, 128]
        assert line.get_ydata().tolist() == pytest.approx(means, abs=1e-12)
        for (x, segment), width in zip([(s[0][0], s) for s in bars.get_segments()], HEADS):
            values = [sensitivity(width, arm, s) for s in seeds_of(width, arm)]
            low, high = sps.t.interval(0.95, len(values) - 1, loc=statistics.fmean(values),
                                       scale=sps.sem(values))
            assert x == width
            assert [segment[0][1], segment[1][1]] == pytest.approx([low, high], abs=1e-12)
    best = {ln.get_label(): ln.get_ydata().tolist() for ln in lrs.get_lines()
            if ln.get_gid() == lrplots.BEST_LR_GID}
    stable = {ln.get_label(): ln.get_ydata().tolist() for ln in lrs.get_lines()
              if ln.get_gid() == lrplots.MAX_STABLE_GID}
    assert best == {"qknorm: best": [0.1, 0.1], "lp4_calibrated: best": [0.1, 0.1],
                    "softcap: best": [0.1, 0.01]}
    assert stable == {"qknorm: max stable": [1.0, 1.0], "lp4_calibrated: max stable": [1.0, 0.1],
                      "softcap: max stable": [1.0, 0.1]}
    plots.close(fig)


def test_the_head_figure_draws_every_head_of_every_run_at_the_chosen_lr(reading):
    for at_lr in (None, 0.1):  # the grid's largest by default
        lr = 1.0 if at_lr is None else at_lr
        fig = lrplots.attn_logit_heads(reading, at_lr)
        assert [ax.get_title() for ax in fig.axes] == ["qknorm", "lp4_calibrated", "softcap"]
        assert f"lr = {lr:g}" in fig._suptitle.get_text()
        for ax, arm in zip(fig.axes, ["qknorm", "lp4_calibrated", "softcap"]):
            for width in HEADS:
                drawn = {gid: [] for gid in (lrplots.HEADS_GID, lrplots.DIVERGED_GID)}
                for c in ax.collections:
                    if c.get_label().lstrip("_") == f"{width} wide":
                        drawn[c.get_gid()] += [(round(x), round(y, 9)) for x, y in c.get_offsets()]
                expected = {gid: [] for gid in drawn}
                for seed in SEEDS:
                    if (width, arm, lr, seed) == FAILED:
                        continue  # not counted: not drawn
                    gid = (lrplots.DIVERGED_GID if (width, arm, lr, seed) == DIVERGED
                           else lrplots.HEADS_GID)
                    expected[gid] += [(i, round(head_logit(width, arm, lr, seed, i, h), 9))
                                      for i in range(N_LAYER) for h in range(HEADS[width])]
                for gid in drawn:
                    assert sorted(drawn[gid]) == sorted(expected[gid])
        plots.close(fig)


def test_a_report_rebuilt_from_results_csv_keeps_the_width_view(sweep, tmp_path):
    root = tmp_path / "sweep"
    shutil.copytree(sweep, root)
    report = build_report(root, Options(formats=("png",)))
    assert {"report/lr_width.png", "report/attn_logit_heads.png"} <= set(report.files)
    rebuilt = tmp_path / "rebuilt"
    rebuilt.mkdir()
    for name in ("results.csv", "curves.csv"):
        (rebuilt / name).write_bytes(report.files[name])
    again = build_report(rebuilt, Options(formats=("png",)))
    assert section_of(again.summary) == section_of(report.summary)
    assert {"report/lr_width.png", "report/attn_logit_heads.png"} <= set(again.files)
