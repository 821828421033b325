"""Results table, statistics and figures from synthetic run dirs with known numbers."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml
from scipy import stats as sps

from qknorm import plots, results, stats
from qknorm.report import Options, build_report, write_report

from .conftest import REPO

# best_val_loss per (p, fold): 3 p x 4 folds. p=4 fold 2 diverges, p=4 fold 3 is killed.
LOSSES = {
    2.0: [1.5, 1.6, 1.7, 1.8],
    3.0: [1.45, 1.58, 1.61, 1.74],
    4.0: [1.40, 1.62, None, None],
}


def make_run(run_dir, p, fold, loss=None, status="completed", seed=0):
    """A run dir as qknorm.train writes it; no final.json when status is None (killed)."""
    (run_dir / ".hydra").mkdir(parents=True)
    config = {"norm": {"kind": "lp", "p": p}, "seed": seed, "data": {"fold": fold, "n_folds": 4},
              "optuna": {"study_name": None, "storage": None, "trial": None}}
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"step": s, "val_loss": (loss or 2.0) + 0.5 * (2 - s // 10), "train_loss": 2.0}
            for s in (0, 10, 20)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if status is None:
        return
    final = {"status": status, "val_loss": loss if loss else "nan", "best_val_loss": loss or "inf",
             "wall_time_s": 10.0 + fold, "tokens_per_s": 1000.0, "steps": 20, "p": p,
             "gamma": 12.0 - p, "seed": seed, "fold": fold}
    if status == "diverged":
        final.update(error="loss became nan at step 7", diverged_step=7)
    (run_dir / "final.json").write_text(json.dumps(final))


@pytest.fixture
def sweep(tmp_path):
    num = 0
    for p, losses in LOSSES.items():
        for fold, loss in enumerate(losses):
            status = "completed" if loss else ("diverged" if fold == 2 else None)
            make_run(tmp_path / str(num), p, fold, loss, status)
            num += 1
    return tmp_path


def test_collect_has_one_row_per_run_with_statuses(sweep):
    runs = results.collect(sweep).runs
    assert len(runs) == 12
    assert list(runs["run_dir"]) == [str(i) for i in range(12)]
    assert runs["status"].value_counts().to_dict() == {"completed": 10, "diverged": 1, "incomplete": 1}
    assert runs.loc[runs["run_dir"] == "10", "diverged_step"].item() == 7
    assert list(runs.columns[:4]) == ["norm.kind", "norm.p", "seed", "data.fold"]
    assert stats.excluded(runs) == {"diverged": 1, "incomplete": 1}


def test_per_p_mean_std_and_t_interval_by_hand(sweep):
    summary = stats.group_summary(results.collect(sweep).runs, ["best_val_loss"]).set_index("norm.p")
    row = summary.loc[2.0]
    # p=2: mean 1.65; deviations +-0.05, +-0.15 -> var = 0.05 / 3; t(0.975, 3) = 3.182446305
    std = math.sqrt(0.05 / 3)
    half = 3.182446305284263 * std / 2
    assert row["n"] == 4
    assert row["best_val_loss_mean"] == pytest.approx(1.65)
    assert row["best_val_loss_std"] == pytest.approx(std)
    ci = (row["best_val_loss_ci_low"], row["best_val_loss_ci_high"])
    assert ci == pytest.approx((1.65 - half, 1.65 + half))
    # p=4: only its 2 completed runs count (1.40, 1.62): std = 0.22 / sqrt(2); t(0.975, 1) = 12.7062
    row4 = summary.loc[4.0]
    assert row4["n"] == 2 and row4["best_val_loss_mean"] == pytest.approx(1.51)
    half4 = 12.706204736174698 * (0.22 / math.sqrt(2)) / math.sqrt(2)
    assert row4["best_val_loss_ci_high"] == pytest.approx(1.51 + half4)


def test_paired_delta_equals_scipy(sweep):
    paired = stats.paired_vs_baseline(results.collect(sweep).runs, "best_val_loss", 2.0).set_index("norm.p")
    x, base = LOSSES[3.0], LOSSES[2.0]
    d = [a - b for a, b in zip(x, base, strict=True)]
    row = paired.loc[3.0]
    assert row["n_pairs"] == 4
    assert row["delta_mean"] == pytest.approx(sum(d) / 4)
    assert row["t_pvalue"] == pytest.approx(sps.ttest_rel(x, base).pvalue)
    assert row["wilcoxon_pvalue"] == pytest.approx(sps.wilcoxon(x, base).pvalue)
    ci = sps.t.interval(0.95, 3, loc=sum(d) / 4, scale=sps.sem(d))
    assert (row["delta_ci_low"], row["delta_ci_high"]) == pytest.approx(ci)
    # p=4 pairs only on the folds both completed (0 and 1)
    assert paired.loc[4.0, "n_pairs"] == 2
    assert paired.loc[4.0, "delta_mean"] == pytest.approx(((1.40 - 1.5) + (1.62 - 1.6)) / 2)


def test_report_writes_every_file_and_one_marker_per_completed_run(sweep):
    report = build_report(sweep, Options())
    written = write_report(sweep, report)
    names = {p.relative_to(sweep).as_posix() for p in written}
    for fig in ("loss_vs_p", "curves", "time_vs_p", "gamma_vs_p"):
        assert {f"report/{fig}.png", f"report/{fig}.pdf"} <= names
    assert all(p.stat().st_size > 0 for p in written)
    csv = pd.read_csv(sweep / "results.csv")
    assert len(csv) == 12
    summary = (sweep / "summary.md").read_text()
    assert "12 runs, 10 completed" in summary and "1 diverged" in summary and "1 incomplete" in summary

    fig = plots.loss_vs_p(report.runs, "best_val_loss", 2.0)
    dots = [c for ax in fig.axes for c in ax.collections if c.get_gid() == plots.RUN_GID]
    ys = sorted(y for c in dots for y in c.get_offsets()[:, 1])
    assert ys == pytest.approx(sorted(v for vs in LOSSES.values() for v in vs if v))
    plots.close(fig)


def test_collector_never_counts_runs_in_partial_states(tmp_path):
    """What a reader sees while a sweep writes: .hydra only, torn metrics line, torn final.json."""
    make_run(tmp_path / "0", 2.0, 0, 1.5)
    (tmp_path / "1" / ".hydra").mkdir(parents=True)  # Hydra has not written config.yaml yet
    make_run(tmp_path / "2", 2.0, 1, None, status=None)
    with open(tmp_path / "2" / "metrics.jsonl", "a") as f:
        f.write('{"step": 30, "val_lo')  # torn last line
    make_run(tmp_path / "3", 2.0, 2, None, status=None)
    (tmp_path / "3" / "final.json").write_text('{"status": "compl')  # not ours, but never crash
    runs = results.collect(tmp_path).runs
    assert runs["status"].tolist() == ["completed", "incomplete", "incomplete", "incomplete"]
    assert stats.group_summary(runs, ["best_val_loss"])["n"].tolist() == [1]


@pytest.mark.parametrize("args,message", [
    (["--metric", "nope"], "--metric nope"),
    (["--baseline", "7"], "--baseline 7: no run used norm.p=7"),
])
def test_report_cli_bad_input_is_one_line_and_writes_nothing(cli, sweep, args, message):
    r = cli(str(REPO / "scripts" / "report.py"), str(sweep), *args)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: {message}")
    assert not (sweep / "results.csv").exists() and not (sweep / "report").exists()


def test_report_cli_on_empty_dir(cli):
    (cli.cwd / "empty").mkdir()
    r = cli(str(REPO / "scripts" / "report.py"), "empty")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
    assert list((cli.cwd / "empty").iterdir()) == []


def test_report_on_a_real_multirun(cli):
    r = cli("-m", "qknorm.train", "-m", "norm.p=2,4", "data.fold=0,1", "experiment=smoke", "threads=1",
            "train.max_iters=10", "train.eval_interval=5")
    assert r.returncode == 0, r.stderr
    (sweep_dir,) = (cli.cwd / "outputs" / "sweeps" / "smoke").iterdir()
    r = cli(str(REPO / "scripts" / "report.py"), str(sweep_dir))
    assert r.returncode == 0, r.stderr
    csv = pd.read_csv(sweep_dir / "results.csv")
    pairs = sorted(zip(csv["norm.p"], csv["data.fold"], strict=True))
    assert pairs == [(2.0, 0), (2.0, 1), (4.0, 0), (4.0, 1)]
    finals = [json.loads((sweep_dir / str(d) / "final.json").read_text()) for d in csv["run_dir"]]
    assert csv["best_val_loss"].tolist() == pytest.approx([f["best_val_loss"] for f in finals])
    assert (sweep_dir / "report" / "loss_vs_p.png").stat().st_size > 0
    assert "best_val_loss per p" in r.stdout


def test_report_on_a_tiny_optuna_study(cli):
    r = cli("-m", "qknorm.train", "search=p_grid", "experiment=smoke", "threads=1", "train.max_iters=10",
            "train.eval_interval=5", "norm.p=2,inf", "hydra.sweeper.study_name=tiny",
            "hydra.sweeper.n_jobs=1")
    assert r.returncode == 0, r.stderr
    (sweep_dir,) = (cli.cwd / "outputs" / "sweeps").glob("*/*")
    r = cli(str(REPO / "scripts" / "report.py"), str(sweep_dir))
    assert r.returncode == 0, r.stderr
    csv = pd.read_csv(sweep_dir / "results.csv")
    assert sorted(csv["trial"].tolist()) == [0, 1]
    assert set(csv["trial_state"]) == {"COMPLETE"}
    assert any(p.name.startswith("optuna_") for p in (sweep_dir / "report").glob("*.png"))
