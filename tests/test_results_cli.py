"""scripts/report.py and scripts/plot.py through the real command line, in tmp dirs; the
collector reading while a real multirun writes; a tiny Optuna study."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time

import optuna
import pandas as pd
import pytest
import yaml
from scipy import stats as sps

from qknorm import rundir
from qknorm.report import Options, load, results, stats, summarize
from tests.helpers import REPO
from tests.helpers.cli import REPORT, assert_one_line_error
from tests.helpers.synthetic_runs import (
    config,
    final,
    make_search,
    make_sweep,
    search_loss,
    write_config,
    write_curve,
)

PLOT = str(REPO / "scripts" / "plot.py")


@pytest.mark.parametrize("args, words", [
    (["--metric", "loss"], ["--metric loss is not a column", "best_val_loss"]),
    (["--metric", "status"], ["--metric status is not a numeric column"]),
    (["--baseline", "3"], ["--baseline 3: no run used norm.p=3", "2, 4, inf"]),
    (["--baseline", "two"], ["--baseline 'two' is not a number"]),
    (["--by", "optimizer.lr"], ["--by optimizer.lr is not a column"]),
    (["--metric", "attn_entropy"], ["--metric attn_entropy: no run logged it, the runs predate "
                                    "attention diagnostics", "rerun them", "best_val_loss"]),
])
def test_bad_option_is_one_line_and_writes_nothing(cli, args, words):
    sweep = make_sweep(cli.cwd / "sweep")
    before = sorted(p for p in sweep.rglob("*"))
    assert_one_line_error(cli(REPORT, "sweep", *args), *words)
    assert sorted(p for p in sweep.rglob("*")) == before  # no results.csv, no report/, no temp


@pytest.mark.slow
def test_dir_without_runs_and_bad_out(cli):
    (cli.cwd / "empty").mkdir()
    assert_one_line_error(cli(REPORT, "empty"), "no runs under empty")
    make_sweep(cli.cwd / "sweep")
    assert_one_line_error(cli(PLOT, "loss_vs_p", "sweep", "--out", "fig.gif"), "--out fig.gif", ".png")
    assert not (cli.cwd / "fig.gif").exists() and not (cli.cwd / "sweep" / "report").exists()


def test_plot_script_writes_the_named_file(cli):
    make_sweep(cli.cwd / "sweep")
    r = cli(PLOT, "loss_vs_p", "sweep", "--metric", "wall_time_s", "--baseline", "inf", "--logx",
            "--out", "figs/time.pdf")
    assert r.returncode == 0, r.stderr
    assert (cli.cwd / "figs" / "time.pdf").read_bytes()[:5] == b"%PDF-"


@pytest.mark.slow
def test_plot_py_takes_the_kind_first(cli):
    """scripts/plot.py KIND DIR: the figure lands in DIR/report/KIND.png; each kind keeps its
    own checks (curves: --metric names a metrics.jsonl column)."""
    assert cli(str(REPO / "scripts" / "plot.py"), "--help").returncode == 0  # lists every KIND
    make_sweep(cli.cwd / "sweep")
    r = cli(str(REPO / "scripts" / "plot.py"), "gamma_vs_p", "sweep")
    assert r.returncode == 0, r.stderr
    assert (cli.cwd / "sweep" / "report" / "gamma_vs_p.png").read_bytes()[:4] == b"\x89PNG"
    assert_one_line_error(cli(str(REPO / "scripts" / "plot.py"), "curves", "sweep", "--metric", "x"),
                      "--metric x is not a metrics.jsonl column", "val_loss")
    assert_one_line_error(cli(str(REPO / "scripts" / "plot.py"), "curves", "sweep", "--metric",
                          "attn_entropy_frac"), "--metric attn_entropy_frac: no run logged it")


# ---------------------------------------------------------------------------------------------
# reading while a sweep writes (issue 6, item 4)

def test_every_partial_state_is_listed_incomplete_and_never_counted(tmp_path):
    cfg = config(2.0, 0)
    write_config(tmp_path / "0", cfg)
    rundir.write_final(tmp_path / "0", final("completed", 1.0, 1.0, 2.0, 0, 0))
    (tmp_path / "1" / ".hydra").mkdir(parents=True)  # Hydra made the dir, nothing else yet
    write_config(tmp_path / "2", cfg)
    (tmp_path / "2" / ".hydra" / "config.yaml").write_text("model:\n  n_layer: 1\nnorm: {kind: l")
    write_config(tmp_path / "3", cfg)
    write_curve(tmp_path / "3", 1.5, 10.0, 2.0)
    with open(tmp_path / "3" / rundir.METRICS_FILE, "a") as f:
        f.write('{"step": 30, "val_')
    write_config(tmp_path / "4", cfg)  # a temp file of an atomic write in flight
    (tmp_path / "4" / "final.json.abc123").write_text('{"status": "compl')
    write_config(tmp_path / "5", cfg)  # a final.json written by hand, torn
    (tmp_path / "5" / rundir.FINAL_FILE).write_text('{"status": "completed", "best_val')
    collection = results.collect(tmp_path)
    runs = collection.runs
    assert list(runs["status"]) == ["completed"] + ["incomplete"] * 5
    assert stats.group_summary(runs, ["best_val_loss"])["n"].tolist() == [1]
    assert stats.excluded(runs) == {"incomplete": 5}
    assert any("without a readable .hydra/config.yaml" in w for w in collection.warnings)


@pytest.mark.slow
def test_collector_reads_a_live_multirun_then_report_cli_end_to_end(cli):
    """Collect in a loop while a real multirun writes: never a crash, never a partial run counted."""
    job = subprocess.Popen(
        [sys.executable, "-m", "qknorm.train", "-m", "norm.p=2,4", "data.fold=0,1",
         "experiment=smoke", "threads=1"], cwd=cli.cwd, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    snapshots = []
    while job.poll() is None:
        if (cli.cwd / "outputs").exists():
            try:
                snapshots.append(results.collect(cli.cwd / "outputs").runs)
            except results.UserError:  # no run dir yet
                pass
        time.sleep(0.05)
    assert job.returncode == 0, job.stderr.read()
    (sweep,) = (cli.cwd / "outputs" / "sweeps" / "smoke").iterdir()
    end = results.collect(sweep).runs
    assert list(end["status"]) == ["completed"] * 4
    final_best = {f"sweeps/smoke/{sweep.name}/{r}": b for r, b in zip(end["run_dir"],
                                                                         end["best_val_loss"])}
    assert snapshots, "the collector never ran while the sweep wrote"
    for snap in snapshots:  # whatever was counted then is exactly what the finished run says
        done = stats.completed(snap)
        assert all(done["best_val_loss"] == done["run_dir"].map(final_best))
        assert snap["status"].isin(["completed", "incomplete"]).all()

    r = cli(REPORT, str(sweep.relative_to(cli.cwd)))
    assert r.returncode == 0, r.stderr
    assert "4 runs, 4 completed" in r.stdout and "## Δ best_val_loss vs p=2" in r.stdout
    table = pd.read_csv(sweep / "results.csv")
    assert sorted(zip(table["norm.p"], table["data.fold"])) == [(2, 0), (2, 1), (4, 0), (4, 1)]
    assert table["best_val_loss"].tolist() == end["best_val_loss"].tolist()
    for name in ("loss_vs_p", "curves", "time_vs_p", "gamma_vs_p"):
        assert (sweep / "report" / f"{name}.png").stat().st_size > 1000


# ---------------------------------------------------------------------------------------------
# Optuna studies

def make_study_runs(tmp_path):
    """A study with trials 0, 1 COMPLETE and 2 PRUNED, and one job dir per trial."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="p_tpe", storage=storage)
    states = {}
    for number, p in enumerate([2.0, 4.0, 3.0]):
        trial = study.ask({"norm.p": optuna.distributions.FloatDistribution(1.0, 8.0)})
        assert trial.params["norm.p"] >= 1.0 and trial.number == number
        run = tmp_path / "sweep" / str(number)
        write_config(run, config(p, 0, study=("p_tpe", storage, number)))
        write_curve(run, 1.0 + number / 10, 10.0, p)
        if number < 2:
            study.tell(trial, 1.0 + number / 10)
            rundir.write_final(run, final("completed", 1.0 + number / 10, 5.0, p, 0, 0))
            states[number] = "COMPLETE"
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            rundir.write_final(run, final("pruned", 1.3, 2.0, p, 0, 0, error="pruned at step 10"))
            states[number] = "PRUNED"
    return tmp_path / "sweep", states


def test_study_runs_carry_trial_number_and_state(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sweep, states = make_study_runs(tmp_path)
    runs = results.collect(sweep).runs
    assert runs["trial"].tolist() == [0, 1, 2]
    assert runs["trial_state"].tolist() == [states[i] for i in range(3)]
    assert stats.excluded(runs) == {"pruned": 1}
    assert "optuna.trial" not in runs.columns  # bookkeeping, not a swept key


def test_missing_study_storage_is_a_note_and_never_creates_a_database(tmp_path):
    run = tmp_path / "0"
    write_config(run, config(2.0, 0, study=("gone", f"sqlite:///{tmp_path / 'no.db'}", 0)))
    collection = results.collect(tmp_path)
    assert collection.runs["trial"].tolist() == [0] and pd.isna(collection.runs["trial_state"][0])
    assert "study 'gone'" in collection.warnings[0] and not (tmp_path / "no.db").exists()


@pytest.mark.slow
def test_report_cli_on_a_study_draws_its_optuna_plots(cli):
    sweep, _ = make_study_runs(cli.cwd)
    r = cli(REPORT, "sweep", "--quiet")
    assert r.returncode == 0, r.stderr
    report = sweep / "report"
    for kind in ("history", "importances", "slice"):
        assert (report / f"optuna_p_tpe_{kind}.png").stat().st_size > 1000, kind
        assert (report / f"optuna_p_tpe_{kind}.pdf").read_bytes()[:5] == b"%PDF-"
    csv = pd.read_csv(sweep / "results.csv")
    assert csv["trial_state"].tolist() == ["COMPLETE", "COMPLETE", "PRUNED"]
    assert math.isclose(csv.loc[0, "norm.p"], 2.0)


# ---------------------------------------------------------------------------------------------
# issue 12: the report of a Bayesian search; repeated runs counted once

@pytest.mark.slow
def test_search_report_cli_default_baseline_and_by(cli):
    sweep = make_search(cli.cwd / "search")
    r = cli(REPORT, "search", "--by", "optimizer.lr")  # --baseline left at its default
    assert r.returncode == 0, r.stderr
    assert "p=2 was not run and the p values come from a continuous search" in r.stdout
    assert "## Δ" not in r.stdout  # no paired table, and the sentence above says why
    assert (sweep / "report" / "loss_vs_p.png").stat().st_size > 1000
    # folds 8 and 9 at mean ± 0.01: the corrected t of a 10-fold layout, variance × (1/2 + 1/9)
    half = sps.t.ppf(0.975, 1) * math.sqrt(2 * 0.01**2) * math.sqrt(1 / 2 + 1 / 9)
    best = [ln for ln in r.stdout.splitlines() if ln.startswith("- norm.p=")]
    expected = []
    for p, label, lr in ((1.4421307763, "1.44213", 3e-3), (1.7604252702890315, "1.76043", 1e-3)):
        m = search_loss(p, lr)
        expected.append(f"- norm.p={label}, optimizer.lr={lr}: mean {m:.4f}, 95% t-interval "
                        f"[{m - half:.4f}, {m + half:.4f}], n=2")
    assert best == expected


@pytest.mark.slow
def test_search_report_cli_accepts_the_baseline_as_printed(cli):
    make_search(cli.cwd / "search")
    r = cli(REPORT, "search", "--by", "optimizer.lr", "--baseline", "1.83526")
    assert r.returncode == 0, r.stderr
    assert "## Δ best_val_loss vs p=1.83526 (group − baseline)" in r.stdout
    assert "| 1.44213 | 0.003 | 2 |" in r.stdout  # paired with the baseline within lr=0.003


def test_search_report_cli_bad_baseline_lists_each_p_as_accepted(cli):
    sweep = make_search(cli.cwd / "search")
    before = sorted(sweep.rglob("*"))
    r = cli(REPORT, "search", "--baseline", "1.8353")
    assert_one_line_error(r, "--baseline 1.8353: no run used norm.p=1.8353",
                      "each accepted as written: 1.09485, 1.19045, 1.27198, 1.44213, 1.76043, "
                      "1.83526, 2.28526, 2.60796, 3.50177, 4.12996, 6.23381, 11.4772, inf")
    assert sorted(sweep.rglob("*")) == before


@pytest.mark.slow
def test_tpe_study_report_end_to_end(cli):
    """The issue's flow: a TPE study over p and lr, then its report with the defaults and --by."""
    r = cli("-m", "qknorm.train", "search=p_tpe_plain", "experiment=smoke", "threads=1",
            "train.max_iters=10", "train.eval_interval=5", "hydra.sweeper.n_trials=4",
            "hydra.sweeper.replicates={data.fold:[9]}", "optimizer.lr=choice(1e-3,3e-3)",
            "hydra.sweep.dir=tpe")
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli(REPORT, "tpe", "--by", "optimizer.lr")
    assert r.returncode == 0, r.stderr
    assert "4 runs, 4 completed" in r.stdout and "continuous search" in r.stdout
    assert pd.read_csv(cli.cwd / "tpe" / "results.csv")["trial"].nunique() == 4


@pytest.mark.slow
def test_mixed_grid_launches_each_effective_config_once_and_report_counts_it_once(cli):
    r = cli("-m", "qknorm.train", "-m", "experiment=smoke", "threads=1", "train.max_iters=10",
            "norm=none,rms,lp", "norm.p=2,4", "data.fold=8,9", "hydra.sweep.dir=grid")
    assert r.returncode == 0, r.stderr[-2000:]
    jobs = sorted(int(d.name) for d in (cli.cwd / "grid").iterdir() if d.is_dir())
    assert jobs == list(range(8))  # none x 2 folds, rms x 2, lp x 2 p x 2; not 12
    assert "8 of 12 jobs launched; 4 repeated an earlier job's effective config" in r.stdout
    # the old launcher's repeats, as a grid before issue 12 left them: the report folds them
    shutil.copytree(cli.cwd / "grid" / "0", cli.cwd / "grid" / "8")
    cfg = cli.cwd / "grid" / "8" / ".hydra" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("p: 2.0", "p: 4.0"))
    options = Options(baseline=None)  # in-process: the report's figures are tested elsewhere
    collection = load(cli.cwd / "grid", options)
    assert collection.runs["duplicate_of"].fillna("").tolist() == [""] * 8 + ["0"]
    table = stats.group_summary(collection.runs, ["best_val_loss"])
    assert list(zip(table["norm.kind"], table["norm.p"].fillna(0), table["n"])) == [
        ("lp", 2.0, 2), ("lp", 4.0, 2), ("none", 0, 2), ("rms", 0, 2)]
    assert "Counted once: 1 completed run(s) repeat another run's effective config, seed and " \
           "fold (norm=none ×1)" in summarize(collection, options)


@pytest.mark.slow
def test_mixed_grid_with_l2_at_another_p_first_runs_l2_once_at_p_2(cli):
    """l2 fixes p = 2: like norm=none it is one run whatever norm.p says, and of its jobs the
    one at p = 2 is launched, in either order of the grid (l2 at p = 4 first failed the
    `norm=l2 fixes p=2` check)."""
    r = cli("-m", "qknorm.train", "-m", "experiment=smoke", "threads=1", "train.max_iters=10",
            "norm=l2,lp", "norm.p=4,2", "hydra.sweep.dir=grid")
    assert r.returncode == 0, r.stderr[-2000:]
    fixed = "experiment=smoke threads=1 train.max_iters=10"
    assert (f"skipped job [{fixed} norm=l2 norm.p=4]: same effective config as [{fixed} norm=l2 "
            "norm.p=2]") in r.stdout
    assert "3 of 4 jobs launched; 1 repeated an earlier job's effective config" in r.stdout
    configs = [yaml.safe_load((cli.cwd / "grid" / str(i) / ".hydra" / "config.yaml").read_text())
               for i in range(3)]
    assert [(c["norm"]["kind"], c["norm"]["p"]) for c in configs] == [
        ("l2", 2.0), ("lp", 4.0), ("lp", 2.0)]
    assert sorted(d.name for d in (cli.cwd / "grid").iterdir() if d.is_dir()) == ["0", "1", "2"]
