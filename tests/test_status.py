"""A sweep's status (hydra_racing_sweeper/progress.py, python -m qknorm.status) on studies built here with
Optuna in tmp storages, with known durations and run dirs, and once on a real small sweep."""

from __future__ import annotations

import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from hydra_racing_sweeper import open_reader, status_lines
from hydra_racing_sweeper.progress import duration
from hydra_racing_sweeper.specs import JOURNAL_PREFIX
from hydra_racing_sweeper.study import (
    N_ATTR,
    N_TRIALS_ATTR,
    RACE_CANDIDATE_ATTR,
    RACE_OUTCOME_ATTR,
    RACE_RUNS_ATTR,
    RACE_SETTINGS_ATTR,
    RETRIED_ATTR,
    STATUS_ATTR,
    STD_ATTR,
    record_total,
)
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from qknorm import rundir
from tests.helpers.studies import DONE_BLOCK, NOW, finished_study, new_study, run, trial

optuna.logging.set_verbosity(optuna.logging.WARNING)


def job(root: Path, name: str, steps: int, wall: float, threads: int) -> str:
    d = root / name
    d.mkdir(parents=True)
    rundir.write_final(d, {"status": "completed", "steps": steps, "wall_time_s": wall,
                           "threads": threads})
    return str(d)


def plain_study(tmp_path: Path, url: str) -> optuna.Study:
    """5 counted trials (2 complete, 1 pruned, 1 failed, 1 running), plus a stale trial that
    was retried (its retry waits) and a surplus one: neither counts."""
    jobs = tmp_path / "jobs"
    median = {"name": "median"}
    study = new_study(url)
    for t in [
        trial(0, TrialState.COMPLETE, 600, 100, 3.9, status="completed", n=2, std=0.02,
              mean=3.9, pruner=median,
              jobs=[job(jobs, "0_a", 30, 10.0, 2), job(jobs, "0_b", 30, 10.0, 2)]),
        trial(1, TrialState.COMPLETE, 500, 140, 3.8, status="completed", n=2, std=0.01,
              mean=3.8, pruner=median,
              jobs=[job(jobs, "1_a", 30, 14.0, 2), job(jobs, "1_b", 30, 14.0, 2)]),
        trial(2, TrialState.PRUNED, 400, 20, status="pruned", n=1, pruner=median,
              jobs=[job(jobs, "2_a", 10, 5.0, 1)]),
        trial(3, TrialState.FAIL, 300, 5, status="failed", n=1, pruner=median,
              error="boom", jobs=[str(jobs / "3_a")]),  # no final.json: costs nothing known
        trial(4, TrialState.FAIL, 200, 1, pruner=median),  # stale: killed with its sweeper
        trial(5, TrialState.COMPLETE, 100, 1, 1.0, status="surplus", pruner=median),
        trial(6, TrialState.RUNNING, 50, pruner=median,
              # a running trial's finished replicate is spent compute too
              job_dirs={"data.fold=0": job(jobs, "6_a", 30, 7.0, 1),
                        "data.fold=1": str(jobs / "6_b")}),
    ]:
        study.add_trial(t)
    retry = trial(7, TrialState.WAITING, 0, pruner=median)
    retry.system_attrs[RETRIED_ATTR] = 4
    retry.datetime_start = None
    study.add_trial(retry)
    return study


def test_a_plain_study_counts_as_the_sweeper_does_and_bounds_its_eta(tmp_path):
    study = plain_study(tmp_path, f"sqlite:///{tmp_path}/o.db")
    # Job time: median of 100/2 and 140/2 = 60 s; 8 - 4 finished = 4 trials of 2 jobs left;
    # 60 x 8 / 2 slots = 240 s. A median pruner may stop trials: at most.
    assert status_lines(study, n_trials=8, slots=2, now=NOW) == [
        "trials 4/8: 2 complete, 1 pruned, 1 failed, 1 running; elapsed 10m00s, "
        "ETA ≤ 4m00s (8 jobs left x 1m00s median job / 2 slots)",
        "best: trial 1 (norm.p=3) 3.8000 ± 0.0100 (n=2)",
        # steps 30+30+30+30+10+30; core-s 20+20+28+28+5+7 = 108 = 0.03 core-h
        "spent: 6 jobs, 160 training steps, 0.03 core-h",
    ]
    # Without n_trials, and none recorded (a study from before record_total): the count so
    # far, no ETA.
    assert status_lines(study, now=NOW)[0] == (
        "trials 4 so far: 2 complete, 1 pruned, 1 failed, 1 running; elapsed 10m00s, "
        "ETA unknown (the total is not known: give n_trials)")
    # The total its sweeper recorded in the study is enough: the same lines as n_trials=8.
    record_total(study, 8)
    assert status_lines(study, slots=2, now=NOW) == status_lines(study, n_trials=8, slots=2,
                                                                 now=NOW)


def test_the_eta_is_the_median_job_time_times_the_jobs_left_over_the_slots(tmp_path):
    study = new_study(f"sqlite:///{tmp_path}/o.db")
    for i, took in enumerate([30, 90, 60]):  # one job each, no pruner: an estimate, not a bound
        study.add_trial(trial(i, TrialState.COMPLETE, 1000 - 100 * i, took, 4.0 - i / 10,
                              status="completed", n=1, pruner={"name": "none"}))
    first = "trials 3/10: 3 complete, 0 pruned, 0 failed, 0 running; elapsed 16m40s, "
    assert status_lines(study, 10, 1, NOW)[0] == first + (
        "ETA 7m00s (7 jobs left x 1m00s median job / 1 slot)")  # 60 x 7
    assert status_lines(study, 10, 3, NOW)[0] == first + (
        "ETA 2m20s (7 jobs left x 1m00s median job / 3 slots)")  # 60 x 7 / 3
    # All done: elapsed is the first start (1000 s before NOW) to the last end (800 - 60 s
    # before), the same whenever it is read.
    assert status_lines(study, 3, 1, NOW + 9999)[0] == (
        "trials 3/3: 3 complete, 0 pruned, 0 failed, 0 running; elapsed 4m20s, done")
    assert status_lines(study, 3, 1, NOW)[1] == "best: trial 2 (norm.p=4) 3.8000"  # n = 1
    assert [duration(s) for s in (0, 59.4, 61, 3599, 7500, 90000)] == [
        "0s", "59s", "1m01s", "59m59s", "2h05m", "1d01h"]


def test_best_line_maximize_replicates_and_the_pareto_front(tmp_path):
    url = f"sqlite:///{tmp_path}/o.db"
    up = new_study(url, "up", ["maximize"])
    up.add_trial(trial(0, TrialState.COMPLETE, 100, 10, 5.0, status="completed", n=3, std=0.5))
    up.add_trial(trial(1, TrialState.COMPLETE, 90, 10, 7.25, status="completed", n=3,
                       std=0.125, params={"norm.p": 1 / 3}))
    # A penalised failure is COMPLETE with a great value, but not a result.
    up.add_trial(trial(2, TrialState.COMPLETE, 80, 10, 99.0, status="failed", n=3))
    assert status_lines(up, 3, now=NOW)[1] == (
        "best: trial 1 (norm.p=0.3333) 7.2500 ± 0.1250 (n=3)")
    two = new_study(url, "two", ["minimize", "minimize"])
    for i, v in enumerate([[1.0, 3.0], [2.0, 2.0], [2.5, 2.5], [3.0, 1.0]]):
        two.add_trial(trial(i, TrialState.COMPLETE, 100, 10, v, status="completed", n=1))
    assert status_lines(two, 4, now=NOW)[1] == "Pareto front: 3 of 4 complete trials"
    none = new_study(url, "none")
    assert status_lines(none, 4, now=NOW) == [
        "trials 0/4: 0 complete, 0 pruned, 0 failed, 0 running; not started",
        "best: none yet", "spent: 0 jobs, 0 training steps, 0 core-h"]


def test_a_grid_study_knows_its_total(tmp_path):
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/o.db", study_name="g",
                                sampler=optuna.samplers.GridSampler(
                                    {"norm.p": [1.0, 2.0, 4.0], "seed": [0, 1]}, seed=0))
    for _ in range(2):
        t = study.ask()
        t.suggest_categorical("norm.p", [1.0, 2.0, 4.0])
        t.suggest_categorical("seed", [0, 1])
        t.set_user_attr(STATUS_ATTR, "completed")
        t.set_user_attr(N_ATTR, 1)
        study.tell(t, 3.0)
    assert status_lines(study, now=NOW)[0].startswith(
        "trials 2/6: 2 complete, 0 pruned, 0 failed, 0 running; elapsed ")


F = [f"data.fold={f}" for f in range(3)]
CANDIDATES = ["norm.p=1.0", "norm.p=2.0", "norm.p=inf"]


def race_trial(number: int, p: float, state: TrialState, runs: dict, **attrs) -> FrozenTrial:
    # Every candidate is asked when the race starts, 600 s before NOW, and lives as long.
    t = trial(number, state, 600, None if state == TrialState.RUNNING else 500,
              params={"norm.p": p}, **attrs)
    t.distributions = {"norm.p": CategoricalDistribution([1.0, 2.0, math.inf])}
    t.user_attrs.update({RACE_CANDIDATE_ATTR: f"norm.p={p}", RACE_RUNS_ATTR: runs})
    return t


def race_study(url: str) -> optuna.Study:
    study = new_study(url, "r")
    study.set_user_attr(RACE_SETTINGS_ATTR, {
        "min_replicates": 2, "alpha": 0.05, "baseline": "norm.p=2.0", "blocks": F,
        "candidates": CANDIDATES, "rungs": None, "margin": None, "budget_steps": None})
    study.add_trial(race_trial(0, 1.0, TrialState.PRUNED, {F[0]: run(2.5), F[1]: run(2.6)},
                               status="pruned", n=2,
                               **{RACE_OUTCOME_ATTR: {"outcome": "dropped", "n": 2,
                                                      "after": F[1]}}))
    study.add_trial(race_trial(1, 2.0, TrialState.RUNNING, {F[0]: run(1.9), F[1]: run(2.0)}))
    study.add_trial(race_trial(2, math.inf, TrialState.RUNNING,
                               {F[0]: run(2.0), F[1]: run(2.05)}))
    return study


def test_a_race_shows_its_decisions_its_share_of_the_grid_and_a_bounded_eta(tmp_path):
    study = race_study(f"sqlite:///{tmp_path}/o.db")
    # 6 runs in 600 s: 100 s a run; p=2 and p=inf lack one fold each: 2 runs left at most.
    assert status_lines(study, now=NOW) == [
        "trials 1/3: 0 complete, 1 pruned, 0 failed, 2 running; elapsed 10m00s, "
        "ETA ≤ 3m20s (2 runs left at most x 1m40s per run so far)",
        "best: none yet",
        "race: 1 of 3 candidates decided (1 dropped), 2 racing; ran 6 of 9 runs (67% of the "
        "grid), 180 training steps (67%), 0.005 core-h (67% of the grid's estimate); looks by "
        "the paired t",
    ]


# -- the command line --------------------------------------------------------------------------

def status_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qknorm.status", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())


@pytest.mark.slow
def test_the_cli_reads_sqlite_read_only_and_a_journal_file(tmp_path):
    db = tmp_path / "o.db"
    finished_study(f"sqlite:///{db}")
    before = (db.stat().st_mtime_ns, db.read_bytes())
    r = status_cli("sqlite:///o.db", "--n-trials", "2", cwd=tmp_path)  # relative: from cwd
    assert (r.returncode, r.stderr, r.stdout) == (0, "", DONE_BLOCK)
    assert (db.stat().st_mtime_ns, db.read_bytes()) == before  # read, never written
    reader = open_reader(f"sqlite:///{db}")
    with pytest.raises(Exception) as e:  # Optuna wraps the driver's error: its cause says why
        reader.set_study_user_attr(reader.get_study_id_from_name("done"), "x", 1)
    assert "attempt to write a readonly database" in str(e.value.__cause__)
    log = tmp_path / "o.log"
    finished_study(optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(log))))
    r = status_cli(JOURNAL_PREFIX + str(log), "--study", "done", "--n-trials", "2",
                   cwd=tmp_path)
    assert (r.returncode, r.stderr, r.stdout) == (0, "", DONE_BLOCK)


def test_a_sweep_dir_without_jobs_finds_its_study_in_optimization_results(tmp_path):
    """Its storage is as the sweep was given it, relative to where the sweep ran: found from
    the sweep dir's ancestors, whatever the reader's cwd."""
    (tmp_path / "outputs").mkdir()
    finished_study(f"sqlite:///{tmp_path}/outputs/o.db")
    sweep_dir = tmp_path / "outputs" / "sweeps" / "p_tpe" / "DATE"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "optimization_results.yaml").write_text(
        "study_name: done\nstorage: sqlite:///outputs/o.db\nn_trials: 2\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = status_cli(str(sweep_dir), cwd=elsewhere)
    assert (r.returncode, r.stderr, r.stdout) == (0, "", DONE_BLOCK)


@pytest.mark.parametrize("args, message", [
    (["sqlite:///missing.db"], "error: STORAGE='sqlite:///missing.db': missing.db does not "
     "exist (relative paths are from the current directory, {cwd}/); fix the path or run from "
     "the directory the sweep ran in"),
    (["sqlite:///o.db"], "error: sqlite:///o.db holds 2 studies (done, other); pick one with "
                         "--study NAME"),
    (["sqlite:///o.db", "--study", "nope"], "error: --study nope is not in sqlite:///o.db (it "
                                            "holds done, other); pick one of those"),
    (["o.db"], "error: STORAGE='o.db' is neither a storage URL nor a sweep dir (a file: write "
               "sqlite:///PATH or journal:///PATH for a storage file); give e.g. "
               "sqlite:///outputs/optuna.db, journal:///outputs/optuna.log, "
               "postgresql+psycopg://user@host/db or a sweep dir such as "
               "outputs/sweeps/p_tpe/DATE"),
    (["sqlite:///o.db", "--slots", "0"], "error: --slots=0 must be >= 1 (the sweeper's n_jobs)"),
    ([], "error: the following arguments are required: STORAGE; usage: python -m "
         "qknorm.status STORAGE [--study NAME] [--n-trials N] [--slots K]"),
])
def test_bad_input_is_one_line_naming_the_value_and_the_fix(tmp_path, args, message):
    finished_study(f"sqlite:///{tmp_path}/o.db")
    new_study(f"sqlite:///{tmp_path}/o.db", "other")
    r = status_cli(*args, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", message.format(cwd=tmp_path.name) + "\n")
    assert not (tmp_path / "missing.db").exists()  # a mistyped path creates no empty database


@pytest.mark.slow
def test_a_real_sweep_shows_two_of_two_complete(cli):
    fast = ["experiment=smoke", "threads=1", "train.max_iters=20", "train.eval_interval=10"]
    r = cli("-m", "qknorm.train", "search=p_tpe_plain", *fast, "hydra.sweeper.study_name=st",
            "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1")
    assert r.returncode == 0, r.stderr[-3000:]
    # The URL alone knows the total of a TPE study (the sweeper recorded it); so do the jobs.
    r = cli("-m", "qknorm.status", "sqlite:///outputs/optuna.db")
    (sweep_dir,) = (cli.cwd / "outputs" / "sweeps" / "p_tpe_plain").iterdir()
    by_dir = cli("-m", "qknorm.status", str(sweep_dir))
    assert r.returncode == 0 and by_dir.returncode == 0, r.stderr + by_dir.stderr
    assert by_dir.stdout == r.stdout
    lines = r.stdout.splitlines()
    assert lines[0] == "study st:"
    assert lines[1].startswith("  trials 2/2: 2 complete, 0 pruned, 0 failed, 0 running; "
                               "elapsed ") and lines[1].endswith(", done")
    study = optuna.load_study(study_name="st", storage=f"sqlite:///{cli.cwd}/outputs/optuna.db")
    assert study.user_attrs[N_TRIALS_ATTR] == 2
    best = study.best_trial
    assert lines[2].startswith(f"  best: trial {best.number} (norm.p=") and (
        f") {best.value:.4f} ± {best.user_attrs[STD_ATTR]:.4f} (n=2)") in lines[2]
    # 2 trials x 2 folds (p_tpe's replicates) x 20 steps
    assert lines[3].startswith("  spent: 4 jobs, 80 training steps, ")



@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.xdist_group("postgres")
def test_the_cli_reads_postgresql_in_read_only_transactions(tmp_path, postgres_url):
    name = f"status_{tmp_path.name}"  # the session's server is shared: a study of its own
    finished_study(postgres_url, name)
    r = status_cli(postgres_url, "--study", name, "--n-trials", "2", cwd=tmp_path)
    assert (r.returncode, r.stderr, r.stdout) == (0, "", DONE_BLOCK.replace("done:", f"{name}:"))
    reader = open_reader(postgres_url)
    study_id = reader.get_study_id_from_name(name)
    with pytest.raises(Exception) as e:  # Optuna wraps the driver's error: its cause says why
        reader.set_study_user_attr(study_id, "x", 1)
    assert "cannot execute INSERT in a read-only transaction" in str(e.value.__cause__)


# -- a racing search: its proposals counted by their answer ------------------------------------

SEARCH_SETTINGS = {"min_replicates": 2, "alpha": 0.05, "equivalence": 0.02, "blocks": F,
                   "candidates": [], "rungs": None, "margin": None, "budget_steps": None,
                   "search": "tpe"}


def search_trial(number: int, p: float, state: TrialState, values: list[float],
                 **attrs) -> FrozenTrial:
    told = None if state != TrialState.COMPLETE else sum(values) / len(values)
    t = trial(number, state, 600 - 10 * number, None if state == TrialState.RUNNING else 50,
              told, params={"norm.p": p}, **attrs)
    t.user_attrs.update({RACE_CANDIDATE_ATTR: f"norm.p={p}",
                         RACE_RUNS_ATTR: {F[i]: run(v) for i, v in enumerate(values)}})
    return t


def search_study(url: str, ended: bool = False) -> optuna.Study:
    """8 proposals against the incumbent p=2 (2.00, 2.10, 2.20 on folds 0-2, still running):
    p=4.87 and p=8 behind by 0.30 and 0.50 ± 0.01 on all three folds (worse), p=2.5 by
    0.0015 ± 0.0005 (level within ±0.02), p=1.5 one fold run (undecided), p=3 failed before
    its first fold, p=1.2 and p=6 still running (racing). `ended`: the search's end told the
    incumbent COMPLETE, and p=1.2 and p=6 PRUNED."""
    study = new_study(url, "q")
    study.set_user_attr(RACE_SETTINGS_ATTR, SEARCH_SETTINGS)
    pruned = {"status": "pruned"}
    running, told = (TrialState.PRUNED, pruned) if ended else (TrialState.RUNNING, {})
    for t in [
        search_trial(0, 2.0, TrialState.COMPLETE if ended else TrialState.RUNNING,
                     [2.00, 2.10, 2.20], **({"status": "completed"} if ended else {})),
        search_trial(1, 4.872838681541604, TrialState.PRUNED, [2.30, 2.41, 2.49], **pruned),
        search_trial(2, 8.0, TrialState.PRUNED, [2.50, 2.62, 2.68], **pruned),
        search_trial(3, 2.5, TrialState.PRUNED, [2.001, 2.102, 2.2015], **pruned),
        search_trial(4, 1.5, TrialState.PRUNED, [2.05], **pruned),
        search_trial(5, 3.0, TrialState.FAIL, [], status="failed"),
        search_trial(6, 1.2, running, [2.03], **told),
        search_trial(7, 6.0, running, [], **told),
    ]:
        study.add_trial(t)
    return study


def test_a_search_counts_its_proposals_by_their_answer_and_its_best_is_the_answers(tmp_path):
    study = search_study(f"sqlite:///{tmp_path}/o.db")
    lines = status_lines(study, n_trials=10, now=NOW)
    # Not "0 complete, 4 pruned, 1 failed, 3 running": 6 proposals have an answer (the
    # incumbent's is best), 2 race on. No trial is COMPLETE yet, but 14 runs are done in 600 s:
    # at most 11 are left (2 proposals not made x 3 folds, p=1.2's 2 folds, p=6's 3), 600 x 11 /
    # 14 = 471 s; 600 / 14 = 43 s a run.
    assert lines[0] == ("trials 6/10: 1 best, 2 worse, 1 level, 1 undecided, 1 failed, "
                        "2 racing; elapsed 10m00s, ETA ≤ 7m51s (11 runs left at most x 43s "
                        "per run so far)")
    # The answer's best, not "best: none yet": mean (2.0 + 2.1 + 2.2) / 3, sample std 0.1.
    assert lines[1] == "best: trial 0 (norm.p=2) 2.1000 ± 0.1000 (n=3)"
    assert lines[3] == (
        "search: best norm.p=2 (mean 2.1000 over 3 replicates; with those level with it, "
        "norm.p in [2, 2.5]); level with it within ±0.02: "
        "norm.p=2.5; worse: norm.p=4.873, norm.p=8; undecided: norm.p=1.5; "
        "racing: norm.p=1.2, norm.p=6; failed: norm.p=3; 8 proposals, 420 training steps")
    # every proposal counted is named: the failed one too (issue 54: "4 proposals", 3 named)
    # Its end: every proposal has an answer (p=1.2's one fold: undecided; p=6 ran none, and
    # none of it failed: not run), none races, and the time runs from the first start (600 s
    # before NOW) to the last end (p=6's: 530 - 50 s before NOW).
    ended = status_lines(search_study(f"sqlite:///{tmp_path}/e.db", ended=True), 8, now=NOW)
    assert ended[:2] == [
        "trials 8/8: 1 best, 2 worse, 1 level, 2 undecided, 1 failed, 0 racing, 1 not run; "
        "elapsed 2m00s, done", "best: trial 0 (norm.p=2) 2.1000 ± 0.1000 (n=3)"]


def test_a_search_with_a_step_budget_paces_its_eta_by_the_budgets_steps_left(tmp_path):
    study = search_study(f"sqlite:///{tmp_path}/o.db")
    study.set_user_attr(RACE_SETTINGS_ATTR, {**SEARCH_SETTINGS, "budget_steps": 1000})
    # 420 steps in 600 s: 1.43 s a step; 580 left x 600 / 420 = 828.6 s
    assert status_lines(study, n_trials=10, now=NOW)[0].endswith(
        "elapsed 10m00s, ETA ≤ 13m49s (580 of the budget's 1,000 steps left x 1.43 s a step "
        "so far)")


# -- a killed sweeper: its heartbeats stop, and the status says stopped --------------------------

ARGV = ["/usr/bin/python3.11", "-m", "qknorm.train", "search=p_tpe", "experiment=smoke"]


def beating_search(tmp_path: Path) -> str:
    """search_study in tmp_path/outputs/optuna.db, its sweeper recorded (heartbeat every 10 s,
    so stale after 20 s) and a heartbeat just now for each of its 3 running trials."""
    from hydra_racing_sweeper.specs import open_storage
    from hydra_racing_sweeper.study import record_sweeper

    (tmp_path / "outputs").mkdir()
    url = f"sqlite:///{tmp_path}/outputs/optuna.db"
    study = search_study(url)
    record_sweeper(study, 10, None, ARGV, "/home/me/my sweeps")
    storage = open_storage(url, heartbeat_interval=10)
    for t in study.get_trials(states=(TrialState.RUNNING,)):
        storage.record_heartbeat(t._trial_id)
    return url


def test_a_killed_sweeper_reads_as_stopped_with_the_command_that_resumes_it(tmp_path):
    from qknorm.status import parse_args, run
    from tests.helpers.studies import age_heartbeats

    url = beating_search(tmp_path)
    live = run(parse_args([url, "--n-trials", "10"]))
    assert live[1].startswith("  trials 6/10: 1 best, 2 worse, 1 level, 1 undecided, 1 failed, "
                              "2 racing; elapsed ")  # heartbeats fresh: it runs, with an ETA
    assert "ETA ≤ " in live[1]
    assert age_heartbeats(tmp_path) == 3  # as 20 s after a kill -9: no beat since
    stopped = run(parse_args([url, "--n-trials", "10"]))
    # Elapsed from the first start (600 s before NOW) to now, but never before the last event
    # (p=3's end, 500 s before NOW: search_trial; this machine's clock reads before it);
    # the racing two are stopped.
    assert stopped[1] == (
        "  trials 6/10: 1 best, 2 worse, 1 level, 1 undecided, 1 failed, 2 stopped; elapsed "
        "1m40s, stopped: no sweeper runs it (the heartbeats of its 3 running trials stopped "
        "over 20s ago); resume: cd '/home/me/my sweeps' && python -m qknorm.train search=p_tpe "
        "experiment=smoke")


def test_one_live_heartbeat_or_a_study_without_the_record_is_not_stopped(tmp_path):
    from hydra_racing_sweeper.progress import stopped_sweep
    from hydra_racing_sweeper.study import SWEEPER_ATTR

    url = beating_search(tmp_path)
    storage = open_reader(url)
    study = optuna.load_study(study_name="q", storage=storage)
    running = study.get_trials(states=(TrialState.RUNNING,))
    with sqlite3.connect(tmp_path / "outputs" / "optuna.db") as db:  # two of three stale
        db.execute("UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, '-1 hour') "
                   "WHERE trial_id != ?", (running[0]._trial_id,))
    db.close()
    assert stopped_sweep(study, storage) is None  # a sweeper beats one: it runs (and retries)
    with sqlite3.connect(tmp_path / "outputs" / "optuna.db") as db:
        db.execute("UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, '-1 hour')")
    db.close()
    assert stopped_sweep(study, storage).stale == 3
    # a study from before the record: nothing known
    optuna.load_study(study_name="q", storage=url).set_user_attr(SWEEPER_ATTR, None)
    assert stopped_sweep(optuna.load_study(study_name="q", storage=storage), storage) is None


@pytest.mark.parametrize("backend", ["sqlite", "journal"])
def test_a_running_trial_that_never_beat_reads_as_stopped_once_grace_old(tmp_path, backend):
    """A sweeper killed between its ask and its first beat: the trial has no heartbeat, and its
    start stands for one (study.is_stale), on this machine's clock; grace 20 s."""
    from datetime import datetime, timedelta

    from hydra_racing_sweeper.progress import stopped_sweep
    from hydra_racing_sweeper.specs import open_storage
    from hydra_racing_sweeper.study import record_sweeper

    url = (f"sqlite:///{tmp_path}/o.db" if backend == "sqlite"
           else f"{JOURNAL_PREFIX}{tmp_path}/o.log")
    writer = open_storage(url, heartbeat_interval=10)

    def read_one_running(name: str, started_s_ago: float):
        study = new_study(writer, name)
        record_sweeper(study, 10, None, ARGV, "/w")
        t = optuna.trial.create_trial(state=TrialState.RUNNING, params={"p": 2.0},
                                      distributions={"p": CategoricalDistribution([2.0, 4.0])})
        t.datetime_start = datetime.now() - timedelta(seconds=started_s_ago)
        study.add_trial(t)
        reader = open_reader(url)
        return stopped_sweep(optuna.load_study(study_name=name, storage=reader), reader)

    assert read_one_running("asked", 15) is None  # its sweeper may beat it yet
    gone = read_one_running("killed", 25)
    assert (gone.stale, gone.grace) == (1, 20)


def test_a_sweep_with_no_trial_running_and_none_told_lately_is_stopped(tmp_path):
    """A sweep stopped between trials (its failures over max_failure_rate, or killed after a
    tell): no running trial, the last told 50 s before, grace 20 s."""
    from hydra_racing_sweeper.progress import stopped_sweep
    from hydra_racing_sweeper.study import record_sweeper

    study = new_study(f"sqlite:///{tmp_path}/o.db")
    study.add_trial(trial(0, TrialState.COMPLETE, 100, 50, 3.0, status="completed", n=1))
    record_sweeper(study, 10, None, ARGV, "/w")
    storage = open_reader(f"sqlite:///{tmp_path}/o.db")
    assert stopped_sweep(study, storage, now=NOW - 40) is None  # told 10 s before: in grace
    gone = stopped_sweep(study, storage, now=NOW)
    assert gone.line() == ("stopped: no sweeper runs it (no trial running and none told for "
                           "over 20s); resume: cd /w && python -m qknorm.train search=p_tpe "
                           "experiment=smoke")
    # elapsed runs from the first start (100 s before NOW) to now, stopped or not: read 40 s
    # before NOW (in grace: running) it was 60 s; read at NOW, stopped, 100 s (was 50 s: the
    # last end, a reading that went back after a kill -9)
    assert status_lines(study, 4, now=NOW - 40)[0].startswith(
        "trials 1/4: 1 complete, 0 pruned, 0 failed, 0 running; elapsed 1m00s, ")
    assert status_lines(study, 4, now=NOW, stopped=gone)[0] == (
        "trials 1/4: 1 complete, 0 pruned, 0 failed, 0 stopped; elapsed 1m40s, " + gone.line())
    assert status_lines(study, 4, now=NOW + 60, stopped=gone)[0].startswith(
        "trials 1/4: 1 complete, 0 pruned, 0 failed, 0 stopped; elapsed 2m40s, stopped: ")
    # done: from the first start to the last end, whenever it is read
    assert status_lines(study, 1, now=NOW, stopped=gone)[0].endswith("elapsed 50s, done")


def test_a_searchs_spent_line_says_why_its_steps_differ_from_the_answers(tmp_path):
    """The spent line counts run dirs with a final.json; the search's answer line the runs its
    proposals recorded (race_runs). p=6 (trial 7) finished its fold 0 on disk, but its sweeper
    was killed before recording it: 30 steps on disk, 420 = 14 recorded runs x 30 steps."""
    from hydra_racing_sweeper.study import JOB_DIRS_ATTR

    study = search_study(f"sqlite:///{tmp_path}/o.db")
    t7 = study.get_trials()[7]
    study._storage.set_trial_user_attr(t7._trial_id, JOB_DIRS_ATTR, {
        F[0]: job(tmp_path, "7_0", 30, 36.0, 1)})
    lines = status_lines(study, n_trials=10, now=NOW)
    assert lines[2] == ("spent: 1 jobs, 30 training steps, 0.01 core-h (run dirs with a "
                        "final.json; the search's line counts the 420 steps of the runs its "
                        "proposals recorded)")
    assert lines[3].endswith("; 8 proposals, 420 training steps")


def test_a_journal_sweep_whose_heartbeat_aged_reads_as_stopped(tmp_path):
    """The journal keeps a beat as a trial system attr (specs.JournalHeartbeatStorage): the
    status reads it from a plain reader, on this machine's clock."""
    from hydra_racing_sweeper.progress import stopped_sweep
    from hydra_racing_sweeper.specs import open_storage
    from hydra_racing_sweeper.study import HEARTBEAT_ATTR, record_sweeper

    url = f"{JOURNAL_PREFIX}{tmp_path}/o.log"
    writer = open_storage(url, heartbeat_interval=10)
    study = new_study(writer, "j")
    running = study.ask()
    writer.record_heartbeat(running._trial_id)
    record_sweeper(study, 10, 30, ARGV, "/w")
    reader = open_reader(url)
    assert stopped_sweep(optuna.load_study(study_name="j", storage=reader), reader) is None
    writer.set_trial_system_attr(running._trial_id, HEARTBEAT_ATTR, NOW - 3600)
    reader = open_reader(url)
    gone = stopped_sweep(optuna.load_study(study_name="j", storage=reader), reader, now=NOW)
    assert (gone.stale, gone.grace) == (1, 30)
