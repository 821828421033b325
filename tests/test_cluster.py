"""What a cluster user runs, on real engines from tests/local_cluster.sh.

Several sweepers on one study in PostgreSQL and in Optuna's journal file: one is killed with
SIGKILL while its trial runs and started again; the study must end with exactly n_trials
finished trials, no params run twice except the killed trial's retry, and the report must
count each once. hydra/launcher=slurm: a grid and a pruned TPE study through sbatch on a
one-node SLURM cluster with accounting; one grid job is cancelled with scancel while it runs,
its trial fails, and a rerun of the same command retries it.
"""

from __future__ import annotations

import collections
import csv
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from hydra_racing_sweeper import slurm as _slurm
from hydra_racing_sweeper import specs as _specs
from hydra_racing_sweeper.study import HEARTBEAT_ATTR
from optuna.trial import TrialState

from tests.helpers import REPO
from tests.helpers.cli import FAST, ok
from tests.helpers.cluster import report_states
from tests.helpers.studies import age_heartbeat, counted, study_of

# timeout: the services start first (tests/helpers/cluster.py), then sweepers waited on up to
# 400 s each
pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(1200)]
# Under pytest-xdist (--dist loadgroup) the tests of one service share a worker, so each session
# starts one PostgreSQL and one SLURM cluster, and the two chains run side by side.
ON_POSTGRES, ON_SLURM = pytest.mark.xdist_group("postgres"), pytest.mark.xdist_group("slurm")

GRID = "choice(1.0,1.5,2.0,3.0,4.0,inf)"  # 6 points: n_trials null = 6
N_SWEEPERS = 3
# Long enough (a few seconds per job) that the kill lands while a trial runs.
SLOW_JOB = [*FAST, "train.max_iters=60", "train.eval_interval=30"]


def load(url: str, name: str) -> optuna.Study:
    return _specs.read_study(name, url)


def sweeper_cmd(kind: str, url: str, name: str, sweep_dir: str) -> list[str]:
    search = (["search=p_grid", f"norm.p={GRID}"] if kind == "grid" else
              ["search=p_tpe_plain", "hydra.sweeper.n_trials=6", "hydra.sweeper.pruner.name=none",
               "~hydra.sweeper.pruner.n_startup_trials", "~hydra.sweeper.pruner.n_warmup_steps",
               "hydra.sweeper.replicates={data.fold:[9]}"])
    return [sys.executable, "-m", "qknorm.train", *search, *SLOW_JOB,
            f"hydra.sweeper.storage={url}", f"hydra.sweeper.study_name={name}",
            "hydra.sweeper.n_jobs=1", "hydra.sweeper.heartbeat_interval=1",
            "hydra.sweeper.grace_period=60", f"hydra.sweep.dir={sweep_dir}"]


def wait_for_running_trial_of(url: str, name: str, sweep_dir: Path, timeout_s: float = 240):
    """The number of a RUNNING trial whose job runs in sweep_dir (the sweeper to kill)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.3)
        try:
            trials = load(url, name).get_trials(deepcopy=False)
        except Exception:  # study or schema not created yet
            continue
        for t in trials:
            dirs = list(sweep_dir.glob(f"trial{t.number}*"))
            # its job still training (no final.json yet): a kill now lands inside the trial,
            # not just after its sweeper told it COMPLETE (a smoke job lasts seconds)
            if (t.state == TrialState.RUNNING and dirs
                    and not any(next(d.rglob("final.json"), None) for d in dirs)):
                return t.number
    pytest.fail(f"no trial of {sweep_dir.name} was ever running")


def states_of(study: optuna.Study) -> dict[str, int]:
    trials = study.get_trials(deepcopy=False)
    count = collections.Counter(t.state.name for t in trials)
    count["counted"] = len(counted(study))
    return dict(count)


def run_killed_scenario(cwd: Path, kind: str, url: str, name: str) -> None:
    dirs = [cwd / "sweeps" / f"s{i}" for i in range(N_SWEEPERS)]
    cmds = [sweeper_cmd(kind, url, name, str(d)) for d in dirs]
    # TPE: a seed per sweeper, or all three sample the same p. Grid: one seed for all, as
    # Optuna shuffles the grid by the seed and grid point k must mean the same p everywhere.
    seeds = [f"hydra.sweeper.sampler.seed={i if kind == 'tpe' else 0}" for i in range(N_SWEEPERS)]
    procs = [subprocess.Popen(c + [seeds[i]], cwd=cwd,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for i, c in enumerate(cmds)]
    try:
        killed = wait_for_running_trial_of(url, name, dirs[0])
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait()
        age_heartbeat(url, name, killed)
        procs[0] = subprocess.Popen(cmds[0], cwd=cwd, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
        errs = [p.communicate(timeout=400)[1] for p in procs]
    finally:
        for p in procs:  # a failed assertion above must not leave sweepers running
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    for p, err in zip(procs, errs, strict=True):
        assert p.returncode == 0, err[-3000:]
    check_study(cwd, url, name, killed, kind)


def table(trials: list) -> list[tuple]:
    """What a failed assertion shows: each trial's number, state, params, grid point, status,
    the trial it retries and its jobs."""
    return [(t.number, t.state.name, t.params, t.system_attrs.get("grid_id"),
             t.user_attrs.get("status"), t.system_attrs.get("failed_trial"), t.user_attrs.get("jobs"))
            for t in trials]


def check_study(cwd: Path, url: str, name: str, killed: int, kind: str) -> None:
    study = load(url, name)
    trials = study.get_trials()
    real = counted(study)
    assert len(real) == 6 and all(t.state == TrialState.COMPLETE for t in real), table(trials)
    by_number = {t.number: t for t in trials}
    assert by_number[killed].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert [t.state for t in retries] == [TrialState.COMPLETE]
    assert retries[0].params == by_number[killed].params
    # No params twice among the counted trials (the killed trial does not count).
    params = [tuple(sorted(t.params.items())) for t in real]
    assert len(set(params)) == 6, table(trials)
    if kind == "grid":
        assert sorted(t.params["norm.p"] for t in real) == [1.0, 1.5, 2.0, 3.0, 4.0, math.inf]
    # Every launched job ran exactly once; the killed one left no final.json.
    jobs = [j for t in real for j in t.user_attrs["jobs"]]
    assert len(jobs) == len(set(jobs)) == 6
    report_counts_each_finished_trial_once(cwd, real)
    report_states(f"{kind} on {url.split(':')[0]}, 3 sweepers, 1 killed", states_of(study))


def report_counts_each_finished_trial_once(cwd: Path, real: list) -> None:
    r = subprocess.run([sys.executable, "scripts/report.py", str(cwd / "sweeps"), "--baseline", "none"],
                       cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(cwd / "sweeps" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    done = [row for row in rows if row["status"] == "completed"]
    assert sorted(int(float(row["trial"])) for row in done) == sorted(t.number for t in real)
    assert all(row["trial_state"] == "COMPLETE" for row in done)
    # The killed job: listed as incomplete once Hydra wrote its config, never counted.
    assert sum(row["status"] == "incomplete" for row in rows) <= 1


@ON_POSTGRES
@pytest.mark.parametrize("kind", ["grid", "tpe"])
def test_three_sweepers_on_postgres_one_killed(tmp_path, postgres_url, kind):
    run_killed_scenario(tmp_path, kind, postgres_url, f"pg_{kind}")


def test_three_sweepers_on_a_journal_file_one_killed(tmp_path):
    url = f"journal:///{tmp_path}/optuna.log"  # absolute: journal:////tmp/...
    run_killed_scenario(tmp_path, "tpe", url, "journal_tpe")
    study = load(url, "journal_tpe")
    # Heartbeats are system attrs in the journal; the killed trial's stopped, so it was failed.
    assert all(HEARTBEAT_ATTR in t.system_attrs for t in counted(study))


def test_journal_relative_path_is_made_absolute_for_jobs(tmp_path):
    assert (_specs.absolute_url("journal:///outputs/optuna.log", tmp_path)
            == f"journal:///{tmp_path}/outputs/optuna.log")
    assert _specs.absolute_url("journal:////abs/x.log", tmp_path) == "journal:////abs/x.log"


BAD_STORAGE = [
    ("postgresql+psycopg://postgres@127.0.0.1:1/qknorm", "cannot be opened"),
    ("journal:///no/such/dir/optuna.log", "no/such does not exist; create it"),
]


def test_journal_url_of_another_form_names_the_form():
    with pytest.raises(_specs.UserError, match="is not a journal URL; write journal:///"):
        _specs.storage_file("journal://outputs/x.log")  # two slashes: a host, not a path


@pytest.mark.parametrize("url, message", BAD_STORAGE, ids=["pg-unreachable", "journal-dir"])
def test_bad_storage_is_one_line_before_any_trial(cli, url, message):
    r = cli("-m", "qknorm.train", "search=p_tpe_plain", *FAST, f"hydra.sweeper.storage={url}")
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: hydra.sweeper.storage=") \
        and message in lines[0], lines
    assert not list(cli.cwd.rglob("trial[0-9]*"))  # no job started
    assert not list(cli.cwd.rglob("*.log"))  # no journal written


SLURM = ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
         "hydra.launcher.timeout_min=10"]


def slurm_logs(sweep: Path, suffix: str) -> list[Path]:
    """Where docs/cluster.md says each job's stdout/stderr land: .submitit/<jobid>/<jobid>_0_log.*"""
    return sorted(sweep.glob(f".submitit/*/*_0_log.{suffix}"))


def wait_for_running_job(env: dict[str, str], timeout_s: float = 180) -> str:
    """The id of a job squeue lists as RUNNING (e.g. 12_0, an array task)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], env={**os.environ, **env},
                           capture_output=True, text=True, timeout=30)
        if r.stdout.split():
            return r.stdout.split()[0]
        time.sleep(0.2)
    pytest.fail(f"no SLURM job was RUNNING within {timeout_s} s")


def run_grid_cancelling_a_job(cli, args: list[str], env: dict[str, str]) -> str:
    """Run the sweep; scancel the first of its jobs that runs. Returns that job's id."""
    with open(cli.cwd / "grid.out", "w") as out, open(cli.cwd / "grid.err", "w") as err:
        sweep = subprocess.Popen([sys.executable, *args], cwd=cli.cwd, stdout=out, stderr=err,
                                 env={**os.environ, **env}, text=True)
        try:
            job = wait_for_running_job(env)
            subprocess.run(["scancel", job], env={**os.environ, **env}, check=True, timeout=30)
            sweep.wait(timeout=400)
        finally:
            if sweep.poll() is None:  # a failed wait above must not leave the sweep running
                sweep.kill()
                sweep.wait()
    err = (cli.cwd / "grid.err").read_text()
    assert sweep.returncode == 0, err[-3000:]
    assert "sacct does not answer" not in err  # the cluster has accounting
    return job


@ON_SLURM
def test_slurm_runs_a_p_grid_a_scancelled_job_and_a_pruned_tpe_study(cli, slurm_conf):
    env = {"SLURM_CONF": slurm_conf}
    grid = ["-m", "qknorm.train", "search=p_grid", *FAST, "train.max_iters=10", *SLURM,
            "hydra.sweeper.n_jobs=8", "hydra.sweeper.study_name=slurm_grid"]
    # One job is cancelled while it runs: submitit sees it end CANCELLED (sacct, from
    # slurmdbd), the sweep tells its trial FAIL with that error and goes on with the others.
    job = run_grid_cancelling_a_job(cli, grid, env)
    trials = study_of(cli.cwd, "slurm_grid").get_trials()
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1 and len(trials) == 8, [(t.number, t.state.name) for t in trials]
    assert f"trial{failed[0].number}): JobEnded: SLURM job {job} ended CANCELLED" \
        in failed[0].user_attrs["error"]
    report_states("p grid through sbatch, 1 job scancelled", states_of(study_of(cli.cwd, "slurm_grid")))
    (first,) = (cli.cwd / "outputs" / "sweeps" / "p_grid").iterdir()

    # The same command again: the cancelled trial's params run once more, nothing else.
    ok(cli(*grid, env=env))
    study = study_of(cli.cwd, "slurm_grid")
    real = counted(study)  # the cancelled trial no longer counts: it was retried
    assert sorted(t.params["norm.p"] for t in real) == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0,
                                                        math.inf]
    assert all(t.state == TrialState.COMPLETE for t in real)
    (retry,) = [t for t in real if t.system_attrs.get("failed_trial") == failed[0].number]
    assert retry.params == failed[0].params and len(study.get_trials()) == 9
    report_states("p grid rerun", states_of(study))
    # Each job's stdout/stderr where docs/cluster.md says: the 7 first jobs, then the retry.
    (second,) = {*(cli.cwd / "outputs" / "sweeps" / "p_grid").iterdir()} - {first}
    for sweep, n in ((first, 7), (second, 1)):
        outs = [o for o in slurm_logs(sweep, "out") if "step 0: train" in o.read_text()]
        assert len(outs) == n and all("Starting with JobEnvironment" in o.read_text()
                                      for o in outs)
        assert len(slurm_logs(sweep, "err")) == len(slurm_logs(sweep, "out"))

    # Pruning through sbatch: a tiny lr keeps val loss above the threshold at step 10.
    ok(cli("-m", "qknorm.train", "search=p_tpe_plain", *FAST, "train.max_iters=30", *SLURM,
           "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
           "hydra.sweeper.replicates={data.fold:[9]}",  # one job a trial ({} would merge)
           "hydra.sweeper.study_name=slurm_tpe", "optimizer.lr=choice(0.01,0.00000001)",
           "hydra.sweeper.sampler.seed=2", "optimizer.warmup_iters=0", "optimizer.min_lr=0",
           "hydra.sweeper.pruner.name=threshold", "+hydra.sweeper.pruner.upper=4.1",
           "~hydra.sweeper.pruner.n_startup_trials", "hydra.sweeper.pruner.n_warmup_steps=10",
           env=env))
    study = study_of(cli.cwd, "slurm_tpe")
    states = {t.number: (t.params["optimizer.lr"], t.state) for t in study.get_trials()}
    assert {lr for lr, _ in states.values()} == {0.01, 1e-8}, states  # seed 2 draws both
    for lr, state in states.values():
        assert state == (TrialState.COMPLETE if lr == 0.01 else TrialState.PRUNED), states
    report_states("TPE with pruning through sbatch", states_of(study))


@ON_SLURM
def test_slurm_partition_that_does_not_exist_is_one_line(cli, slurm_conf):
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, *SLURM,
            "hydra.launcher.partition=nope", env={"SLURM_CONF": slurm_conf})
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == ["error: hydra.launcher.partition=nope is not a partition of this cluster "
                     "(invalid partition specified: nope); set hydra.launcher.partition to one "
                     "of: debug"]
    assert not (cli.cwd / "outputs" / "optuna.db").exists()  # the study untouched


def test_only_interrupted_slurm_jobs_are_retried_and_each_once():
    study = optuna.create_study()
    dist = {"p": optuna.distributions.FloatDistribution(1.0, 8.0)}
    for p, state in ((1.0, "CANCELLED"), (2.0, "TIMEOUT"), (3.0, "NODE_FAIL")):
        study.enqueue_trial({"p": p})
        t = study.ask(dist)
        t.set_user_attr("status", "failed")
        t.set_user_attr("error", f"job failed (d): {_slurm.JobEnded('7_0', state, 'log')}")
        study.tell(t, state=TrialState.FAIL)
    assert _slurm.retry_interrupted(study) == [0, 2]
    assert _slurm.retry_interrupted(study) == []  # a second sweep start adds none
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [(t.params["p"], t.system_attrs["failed_trial"]) for t in waiting] == [(1.0, 0),
                                                                                   (3.0, 2)]
    assert all("error" not in t.user_attrs and "status" not in t.user_attrs for t in waiting)
    assert study.ask(dist).params["p"] == 1.0  # the next ask runs the retry


def test_slurm_without_accounting_warns_that_a_cancelled_job_would_hang(tmp_path, monkeypatch,
                                                                        caplog):
    if shutil.which("sacct") is None:
        pytest.skip("no sacct on this machine (apt-get install slurm-client)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\n")  # accounting: none, the default
    monkeypatch.setenv("SLURM_CONF", str(conf))
    with caplog.at_level(logging.WARNING):
        _slurm._warn_without_accounting()
    assert "sacct does not answer (Slurm accounting storage is disabled)" in caplog.text
    assert "slurmdbd" in caplog.text


def test_slurm_without_sbatch_is_one_line(cli):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason="hydra-submitit-launcher is not installed: pip install -e '.[slurm]'")
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, *SLURM, env={"PATH": "/nonexistent"})
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: hydra/launcher=slurm: sbatch is not "
                                                   "on PATH"), lines
    assert not (cli.cwd / "outputs" / "optuna.db").exists()
