"""The qknorm_optuna sweeper through the real command line, on the smoke model in tmp dirs.

Each test reads the study back from its SQLite storage and the jobs' final.json / metrics.jsonl,
and checks numbers against each other (a trial's value is the mean of its jobs' best_val_loss).
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
import yaml
from hydra_racing_sweeper import specs
from optuna.trial import TrialState

from qknorm import rundir
from tests.helpers.cli import FAST, ok
from tests.helpers.studies import age_heartbeats, counted, study_of

pytestmark = pytest.mark.slow


def job_config(run_dir: str) -> dict:
    return yaml.safe_load((Path(run_dir) / ".hydra" / "config.yaml").read_text())


def sweep_dirs(cwd: Path, name: str) -> list[Path]:
    return sorted((cwd / "outputs" / "sweeps" / name).iterdir())


def test_tpe_trial_value_is_mean_of_replicates_and_reruns_top_up(cli):
    args = ["-m", "qknorm.train", "search=p_tpe_plain", *FAST, "hydra.sweeper.study_name=t",
            "hydra.sweeper.n_trials=4", "hydra.sweeper.pruner.name=none",
            "~hydra.sweeper.pruner.n_startup_trials", "~hydra.sweeper.pruner.n_warmup_steps",
            "hydra.sweeper.replicates={data.fold:[0,1]}"]
    ok(cli(*args))
    trials = study_of(cli.cwd, "t").get_trials()
    assert len(trials) == 4 and all(t.state == TrialState.COMPLETE for t in trials)
    for t in trials:
        jobs = t.user_attrs["jobs"]
        assert sorted(job_config(j)["data"]["fold"] for j in jobs) == [0, 1]
        assert {job_config(j)["optuna"]["trial"] for j in jobs} == {t.number}
        losses = [rundir.read_final(Path(j))["best_val_loss"] for j in jobs]
        assert t.value == pytest.approx(statistics.fmean(losses), rel=1e-12)
        assert t.user_attrs["std"] == pytest.approx(statistics.stdev(losses), rel=1e-9)
        assert t.user_attrs["n"] == 2
        # 1/norm.p was searched; the jobs got its reciprocal (0 would be inf).
        inv = t.params["1/norm.p"]
        expected_p = math.inf if inv == 0 else 1 / inv
        assert all(job_config(j)["norm"]["p"] == pytest.approx(expected_p) for j in jobs)
    (first,) = sweep_dirs(cli.cwd, "p_tpe_plain")
    results = yaml.safe_load((first / "optimization_results.yaml").read_text())
    best = min(trials, key=lambda t: t.value)
    assert (results["best_trial"], results["best_value"]) == (best.number, best.value)
    assert (first / "trials.csv").read_text().count("\n") == 5  # header + 4 trials

    time.sleep(1.1)  # a new sweep dir (stamped to the second)
    ok(cli(*args))  # the study is complete: nothing runs
    assert len(study_of(cli.cwd, "t").get_trials()) == 4
    time.sleep(1.1)
    # Still inside TPE's 6 random start-up trials: a new process with the same seed must not
    # replay the stream that proposed trials 0-3 (it did: the top-up ran nothing new).
    ok(cli(*args, "hydra.sweeper.n_trials=6"))
    trials = study_of(cli.cwd, "t").get_trials()
    assert len(trials) == 6 and all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.params["1/norm.p"] for t in trials}) == 6
    second, third = sweep_dirs(cli.cwd, "p_tpe_plain")[1:]
    assert not list(second.glob("trial[0-9]*")), "the rerun of a finished study launched jobs"
    assert sorted(p.name for p in third.glob("trial[0-9]*")) == [
        "trial4_0", "trial4_1", "trial5_0", "trial5_1"]


@pytest.mark.parametrize("launcher", ["basic", "parallel"])
def test_pruned_trials_stop_their_jobs_early(cli, launcher):
    # A tiny lr keeps val loss near ln(65) = 4.17 at step 10; lr 1e-2 is well below 4.1 by then.
    # The threshold pruner makes which trials are pruned independent of the trial order.
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, "train.max_iters=30",
            f"hydra/launcher={launcher}", "hydra.sweeper.study_name=prune",
            "norm.p=2.0", "optimizer.lr=choice(0.01,0.00000001,0.00000002)",
            "optimizer.warmup_iters=0", "optimizer.min_lr=0",
            "hydra.sweeper.pruner.name=threshold", "++hydra.sweeper.pruner.upper=4.1",
            "+hydra.sweeper.pruner.n_warmup_steps=10")
    ok(r)
    trials = study_of(cli.cwd, "prune").get_trials()
    states = {t.params["optimizer.lr"]: t.state for t in trials}
    assert states == {0.01: TrialState.COMPLETE, 1e-8: TrialState.PRUNED,
                      2e-8: TrialState.PRUNED}
    for t in trials:
        (job,) = t.user_attrs["jobs"]
        steps = [row["step"] for row in rundir.read_metrics(Path(job))]
        final = rundir.read_final(Path(job))
        if t.state == TrialState.PRUNED:
            assert final["status"] == "pruned" and steps == [0, 10]
            assert t.intermediate_values[10] == pytest.approx(
                rundir.read_metrics(Path(job))[-1]["val_loss"])
        else:
            assert final["status"] == "completed" and steps == [0, 10, 20, 30]


def test_raising_and_diverging_jobs_fail_their_trials_and_the_sweep_goes_on(cli):
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, "hydra.sweeper.study_name=f",
            "norm.p=2.0", "optimizer.lr=choice(0.001,1000000.0)",
            # 50000 folds hold out 22 characters, too few for a window of 32: found only when a
            # job reads the corpus (a config check, e.g. data.fold=12, is refused at plan time)
            "data.n_folds=choice(10,50000)", "hydra.sweeper.max_failure_rate=0.75")
    ok(r)
    trials = study_of(cli.cwd, "f").get_trials()
    by = {(t.params["optimizer.lr"], t.params["data.n_folds"]): t for t in trials}
    assert len(trials) == 4
    assert by[(0.001, 10)].state == TrialState.COMPLETE
    diverged = by[(1e6, 10)]
    assert diverged.state == TrialState.FAIL and "diverged" in diverged.user_attrs["error"]
    final = rundir.read_final(Path(diverged.user_attrs["jobs"][0]))
    assert final["status"] == "diverged" and final["diverged_step"] >= 0
    for lr in (0.001, 1e6):  # 50000 folds: the job raises before training
        raised = by[(lr, 50000)]
        assert raised.state == TrialState.FAIL
        assert "model.block_size=32 does not fit" in raised.user_attrs["error"]
    assert "Traceback" not in r.stderr


def test_fail_value_is_told_instead_of_fail(cli):
    ok(cli("-m", "qknorm.train", "search=p_grid", *FAST, "hydra.sweeper.study_name=pen",
           "norm.p=2.0", "optimizer.lr=choice(0.001,1000000.0)", "hydra.sweeper.fail_value=10.0",
           "hydra.sweeper.max_failure_rate=0.5"))
    trials = {t.params["optimizer.lr"]: t for t in study_of(cli.cwd, "pen").get_trials()}
    assert trials[1e6].state == TrialState.COMPLETE and trials[1e6].value == 10.0
    assert trials[1e6].user_attrs["status"] == "failed"
    assert trials[0.001].value < 10.0 and trials[0.001].user_attrs["status"] == "completed"
    (sweep,) = sweep_dirs(cli.cwd, "p_grid")
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["best_value"] == trials[0.001].value


def test_sweep_stops_when_failures_exceed_max_failure_rate(cli):
    # Every job diverges (lr 1e4: a non-finite loss at once; preflight cannot know that, as it
    # knows a fold out of range). 0.25 x 4 trials allows 1 failure: stop after 2.
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, "hydra.sweeper.study_name=stop",
            "norm.p=2.0", "optimizer.lr=choice(1e4,2e4,3e4,4e4)", "hydra.sweeper.n_jobs=1",
            "hydra.sweeper.max_failure_rate=0.25")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("stopped: 2 trials of study stop failed") and "max_failure_rate" in last
    assert "Traceback" not in r.stderr
    trials = study_of(cli.cwd, "stop").get_trials()
    assert len(trials) == 2 and all(t.state == TrialState.FAIL for t in trials)


@pytest.mark.timeout(900)  # its sweepers are given 600 s (pyproject.toml's default: 600)
def test_two_sweepers_on_one_sqlite_study_finish_with_exactly_n_trials(cli):
    cmd = [sys.executable, "-m", "qknorm.train", "search=p_tpe_plain", *FAST, "train.max_iters=10",
           "hydra.sweeper.study_name=duo", "hydra.sweeper.n_trials=7", "hydra.sweeper.n_jobs=2",
           "hydra.sweeper.pruner.name=none", "~hydra.sweeper.pruner.n_startup_trials",
           "~hydra.sweeper.pruner.n_warmup_steps", "hydra.sweeper.replicates={data.fold:[9]}"]
    procs = [subprocess.Popen(cmd + [f"hydra.sweeper.sampler.seed={seed}"], cwd=cli.cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in (0, 1)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    study = study_of(cli.cwd, "duo")
    real = counted(study)
    assert len(real) == 7 and all(t.state == TrialState.COMPLETE for t in real)
    jobs = [j for t in real for j in t.user_attrs["jobs"]]
    assert len(jobs) == len(set(jobs)) == 7  # no trial ran twice, none shares a job dir
    surplus = [t for t in study.get_trials() if t.user_attrs.get("status") == "surplus"]
    assert all("jobs" not in t.user_attrs for t in surplus)  # given up before launching
    job_dirs = [p for d in (cli.cwd / "outputs" / "sweeps" / "p_tpe_plain").iterdir()
                for p in d.glob("trial[0-9]*")]
    assert len(job_dirs) == 7


def test_grid_over_p_reaches_inf(cli):
    ok(cli("-m", "qknorm.train", "search=p_grid", *FAST, "train.max_iters=10",
           "hydra.sweeper.study_name=g"))
    trials = study_of(cli.cwd, "g").get_trials()
    assert sorted(t.params["norm.p"] for t in trials) == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0,
                                                          math.inf]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    (inf_trial,) = [t for t in trials if t.params["norm.p"] == math.inf]
    final = rundir.read_final(Path(inf_trial.user_attrs["jobs"][0]))
    assert float(final["p"]) == math.inf and final["best_val_loss"] == inf_trial.value
    (sweep,) = sweep_dirs(cli.cwd, "p_grid")
    csv = (sweep / "trials.csv").read_text()
    assert ",inf," in csv and csv.count("\n") == 9


def test_pruner_and_sampler_switched_by_name(cli):
    """p_tpe's median pruner and TPE options do not leak into a pruner and sampler named on the
    command line: dropped (and logged) where the new class does not take them, kept (seed)
    where it does."""
    r = cli("-m", "qknorm.train", "search=p_tpe_plain", *FAST, "hydra.sweeper.study_name=byname",
            "hydra.sweeper.n_trials=1", "hydra.sweeper.replicates={data.fold:[8]}",
            "hydra.sweeper.pruner.name=none", "hydra.sweeper.sampler.name=random")
    ok(r)
    out = r.stdout + r.stderr
    assert ("hydra.sweeper.pruner.name=none: dropped n_startup_trials=4, n_warmup_steps=500, "
            "set in the config for another pruner (Optuna's NopPruner does not take them)") in out
    assert ("hydra.sweeper.sampler.name=random: dropped n_startup_trials=6, set in the config "
            "for another sampler (Optuna's RandomSampler does not take them)") in out
    assert "n_trials=1, 1 job(s) per trial, RandomSampler, NopPruner" in out
    (trial,) = study_of(cli.cwd, "byname").get_trials()
    assert trial.state == TrialState.COMPLETE
    assert trial.user_attrs["pruner"] == {"name": "none"}  # the spec its job rebuilt
    # The preset's seed 0 reached RandomSampler: the same first draw as one built by hand with
    # seed 0 as the sweeper derives it for a study's first trial (_specs.reseeded).
    space = {"1/norm.p": optuna.distributions.FloatDistribution(0.0, 1.0)}
    seed = specs.reseeded({"name": "random", "seed": 0}, 0)["seed"]
    by_hand = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask(space)
    assert trial.params == by_hand.params


def test_grid_trial_that_repeats_an_effective_config_is_told_its_result_not_run(cli):
    """norm=none never reads norm.p: of the grid's 4 points it runs 3 jobs (issue 12)."""
    ok(cli("-m", "qknorm.train", "search=p_grid", *FAST, "train.max_iters=10",
           "hydra.sweeper.study_name=rep", "norm=choice(none,lp)", "norm.p=choice(2,4)",
           "hydra.sweeper.n_jobs=4"))
    trials = study_of(cli.cwd, "rep").get_trials()
    assert sorted((t.params["norm"], t.params["norm.p"]) for t in trials) == [
        ("lp", 2), ("lp", 4), ("none", 2), ("none", 4)]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    (repeat,) = [t for t in trials if "duplicate_of" in t.user_attrs]
    original = trials[repeat.user_attrs["duplicate_of"]]
    assert repeat.params["norm"] == original.params["norm"] == "none"
    assert repeat.value == original.value and repeat.user_attrs["jobs"] == original.user_attrs["jobs"]
    (sweep,) = sweep_dirs(cli.cwd, "p_grid")
    assert len(list(sweep.glob("trial[0-9]*"))) == 3  # the repeat launched no job
    assert f"{repeat.number},COMPLETE,completed" in (sweep / "trials.csv").read_text()


def test_multi_objective_study_writes_the_pareto_front_as_solutions(cli):
    r = cli("-m", "qknorm.train", "search=p_pareto", *FAST, "train.max_iters=10",
            "hydra.sweeper.study_name=mo", "hydra.sweeper.n_trials=4")
    ok(r)
    study = study_of(cli.cwd, "mo")
    for t in study.get_trials():
        final = rundir.read_final(Path(t.user_attrs["jobs"][0]))
        assert t.values == [final["best_val_loss"], final["wall_time_s"]]
    (sweep,) = sweep_dirs(cli.cwd, "p_pareto")
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["name"] == "racing"
    assert results["objectives"] == ["best_val_loss", "wall_time_s"]
    front = {e["trial"]: e for e in results["solutions"]}
    assert set(front) == {t.number for t in study.best_trials}
    for t in study.best_trials:  # values in the objectives' (the directions') order
        assert front[t.number]["values"] == [t.values[0], t.values[1]]
    assert "optimization results: " in r.stdout and "trials: " in r.stdout


def killable_tpe(study: str, n_trials: int, folds: str, max_iters: int,
                 eval_interval: int) -> list[str]:
    """A p_tpe sweep, one trial at a time, heartbeats every second: for tests that kill it. The
    grace period is long, so a heartbeat late under load never fails a live trial; the killed
    sweep's trial is made stale at once by age_heartbeats."""
    return ["-m", "qknorm.train", "search=p_tpe_plain", *FAST, f"train.max_iters={max_iters}",
            f"train.eval_interval={eval_interval}", f"hydra.sweeper.study_name={study}",
            f"hydra.sweeper.n_trials={n_trials}", "hydra.sweeper.n_jobs=1",
            "hydra.sweeper.pruner.name=none", f"hydra.sweeper.replicates={{data.fold:[{folds}]}}",
            "hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=60"]


def start_detached(cli, args: list[str]) -> subprocess.Popen:
    """The command in its own process group, so os.killpg takes its jobs down with it."""
    return subprocess.Popen([sys.executable, *args], cwd=cli.cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def test_killed_sweep_resumes_keeps_finished_trials_and_retries_running_ones(cli):
    # Slow enough jobs (200 steps) that the kill lands while one runs; heartbeats every second.
    args = killable_tpe("kill", n_trials=3, folds="9", max_iters=200, eval_interval=50)
    proc = start_detached(cli, args)
    db = cli.cwd / "outputs" / "optuna.db"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if not db.exists():
                continue
            try:
                states = [t.state for t in study_of(cli.cwd, "kill").get_trials()]
            except (KeyError, sqlalchemy.exc.SQLAlchemyError):
                continue  # study not created yet, or its schema is being created right now
            if states.count(TrialState.COMPLETE) >= 1 and TrialState.RUNNING in states:
                break
        else:
            pytest.fail("the sweep never had a finished and a running trial")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = {t.number: t for t in study_of(cli.cwd, "kill").get_trials()}
    done_before = {n: t for n, t in before.items() if t.state == TrialState.COMPLETE}
    (killed,) = [t for t in before.values() if t.state == TrialState.RUNNING]
    assert age_heartbeats(cli.cwd) >= 1  # the killed trial's heartbeat: stale from now

    ok(cli(*args))
    trials = study_of(cli.cwd, "kill").get_trials()
    after = {t.number: t for t in trials}
    for n, t in done_before.items():  # kept as they were, not rerun
        assert after[n].state == TrialState.COMPLETE and after[n].value == t.value
        assert after[n].user_attrs["jobs"] == t.user_attrs["jobs"]
    assert after[killed.number].state == TrialState.FAIL
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retry) == 1 and retry[0].params == killed.params
    assert retry[0].state == TrialState.COMPLETE
    real = counted(study_of(cli.cwd, "kill"))
    assert len(real) == 3 and all(t.state == TrialState.COMPLETE for t in real)
    new_dir = sweep_dirs(cli.cwd, "p_tpe_plain")[-1]
    rerun_jobs = {p.name for p in new_dir.glob("trial[0-9]*")}
    assert all(f"trial{n}_9" not in rerun_jobs for n in done_before)
    assert f"trial{retry[0].number}_9" in rerun_jobs


def test_resumed_sweep_trains_only_the_replicates_the_killed_one_did_not_finish(cli):
    # One trial, two folds run one after the other (basic launcher): kill it during fold 9.
    args = killable_tpe("reuse", n_trials=1, folds="8,9", max_iters=400, eval_interval=100)
    proc = start_detached(cli, args)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not list(cli.cwd.glob("outputs/sweeps/*/*/trial0_9")):
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    (first,) = cli.cwd.glob("outputs/sweeps/*/*/trial0_8")
    assert rundir.read_final(first)["status"] == "completed"
    assert rundir.read_final(first.parent / "trial0_9") is None  # killed mid-run
    assert age_heartbeats(cli.cwd) >= 1  # the killed trial's heartbeat: stale from now

    ok(cli(*args))
    study = study_of(cli.cwd, "reuse")
    (retry,) = [t for t in study.get_trials() if t.system_attrs.get("failed_trial") == 0]
    assert retry.state == TrialState.COMPLETE
    jobs = retry.user_attrs["jobs"]
    assert jobs[0] == str(first)  # fold 8 read back, not trained again
    assert Path(jobs[1]).name == f"trial{retry.number}_9"
    assert not list(cli.cwd.glob(f"outputs/sweeps/*/*/trial{retry.number}_8"))
    losses = [rundir.read_final(j)["best_val_loss"] for j in jobs]
    assert retry.value == pytest.approx(statistics.fmean(losses))


@pytest.mark.parametrize("backend", ["sqlite", "journal"])
def test_a_trial_killed_before_its_first_heartbeat_is_failed_and_retried_once_grace_old(
        tmp_path, backend):
    # A sweeper killed between its ask and its first beat (Heartbeat.add) leaves a RUNNING trial
    # with no heartbeat: Optuna's own test never calls it stale, so it held a slot for ever
    # (seen once in make test, in the kill-and-resume test above).
    from datetime import datetime, timedelta

    from hydra_racing_sweeper.study import RETRIED_ATTR
    from optuna.distributions import FloatDistribution

    url = (f"sqlite:///{tmp_path}/s.db" if backend == "sqlite"
           else f"{specs.JOURNAL_PREFIX}{tmp_path}/s.log")
    storage = specs.open_storage(url, heartbeat_interval=10)  # grace 20 s
    study = optuna.create_study(study_name="s", storage=storage)

    def running(x: float, started_s_ago: float) -> int:
        t = optuna.trial.create_trial(state=TrialState.RUNNING, params={"x": x},
                                      distributions={"x": FloatDistribution(0, 1)})
        t.datetime_start = datetime.now() - timedelta(seconds=started_s_ago)
        study.add_trial(t)
        return study.get_trials(deepcopy=False)[-1]._trial_id

    killed = running(0.1, 25)  # no beat, started 25 s ago: over the grace period
    asking = running(0.2, 15)  # no beat yet, 15 s: within it (a live sweeper may beat it next)
    beating = running(0.3, 3600)  # an hour's run, beaten just now: its beat, not its start
    storage.record_heartbeat(beating)
    optuna.storages.fail_stale_trials(study)
    states = {t._trial_id: t.state for t in study.get_trials()}
    assert [states[i] for i in (killed, asking, beating)] == [
        TrialState.FAIL, TrialState.RUNNING, TrialState.RUNNING]
    (retry,) = study.get_trials(states=(TrialState.WAITING,))
    assert retry.params == {"x": 0.1} and retry.system_attrs[RETRIED_ATTR] == 0


BAD_INPUTS = [
    (["hydra.sweeper.sampler.name=bayes"], "hydra.sweeper.sampler.name='bayes' is not one of"),
    (["hydra.sweeper.pruner.name=early"], "hydra.sweeper.pruner.name='early' is not one of"),
    (["hydra.sweeper.storage=notadb://x/y"], "hydra.sweeper.storage='notadb://x/y' cannot be"),
    (["hydra.sweeper.storage=sqlite:///no/such/dir/optuna.db"], "does not exist"),
    (["norm.p=interval(4.0,1.0)"], "low 4 must be below high 1"),
    (["norm.q=interval(1.0,4.0)"], "hydra.sweeper.params.norm.q"),
    (["++hydra.sweeper.replicates={data.foldd:[0,1]}"], "hydra.sweeper.replicates.data.foldd"),
    (["hydra.sweeper.pruner.name=none", "hydra.sweeper.pruner.n_warmup_steps=5"],
     "hydra.sweeper.pruner.n_warmup_steps=5 is not an option of Optuna's NopPruner"),
]


@pytest.mark.parametrize("overrides, message", BAD_INPUTS,
                         ids=["sampler", "pruner", "url", "sqlite-dir", "interval", "param-key",
                              "replicate-key", "pruner-option-given"])
def test_bad_sweeper_input_is_one_line_before_anything_runs(cli, overrides, message):
    r = cli("-m", "qknorm.train", "search=p_tpe_plain", *FAST, *overrides)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not (cli.cwd / "outputs" / "optuna.db").exists()  # no study created or touched
    assert not list((cli.cwd / "outputs").glob("sweeps/*/*/trial[0-9]*"))  # no job started


def test_bad_input_leaves_an_existing_study_untouched(cli):
    ok(cli("-m", "qknorm.train", "search=p_grid", *FAST, "train.max_iters=10",
           "hydra.sweeper.study_name=keep", "norm.p=choice(2.0,inf)"))
    before = [(t.number, t.state, t.value) for t in study_of(cli.cwd, "keep").get_trials()]
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, "hydra.sweeper.study_name=keep",
            "norm.p=choice(2.0,inf)", "hydra.sweeper.n_jobs=0")
    assert r.returncode == 2 and "hydra.sweeper.n_jobs=0 must be >= 1" in r.stderr
    assert [(t.number, t.state, t.value) for t in study_of(cli.cwd, "keep").get_trials()] == before


def test_plugin_is_discovered_outside_the_repo(cli):
    r = cli("-m", "qknorm.train", "--info", "plugins")
    ok(r)
    sweepers = r.stdout.split("Sweeper:")[1].split(":")[0]
    assert "RacingSweeper" in sweepers
    assert "hydra_plugins.qknorm_sweeper.config" in r.stdout  # its config group was registered
    assert "hydra_plugins.hydra_racing_sweeper.config" in r.stdout


def test_surplus_ranks_slots_by_trial_number():
    """The race two sweepers can run into, in one process: both saw room for one more trial
    and both asked. Ranking slot-holding trials by number gives the later one up."""
    from hydra_racing_sweeper.study import Tally, surplus

    study = optuna.create_study()
    for _ in range(4):
        t = study.ask()
        t.set_user_attr("status", "completed")
        study.tell(t, 1.0)
    stale = study.ask()  # a killed sweeper's trial, failed and re-enqueued: holds no slot
    study.tell(stale, state=TrialState.FAIL)
    study.enqueue_trial({}, skip_if_exists=False)
    retried = study._storage.get_all_trials(study._study_id)[-1]
    study._storage.set_trial_system_attr(retried._trial_id, "failed_trial", stale.number)
    a, b = study.ask(), study.ask()  # a pops the waiting retry; both are RUNNING
    assert Tally.of(study) == Tally(finished=4, running=2, failed=0)
    assert surplus(study, [a.number], n_trials=5) == set()
    assert surplus(study, [b.number], n_trials=5) == {b.number}
    assert surplus(study, [a.number, b.number], n_trials=6) == set()


def test_a_replicate_key_on_the_command_line_replaces_the_presets_values():
    from hydra_racing_sweeper.space import cli_replicates

    from qknorm.errors import UserError

    preset = {"data.fold": [0, 1, 2, 3, 4]}
    assert cli_replicates(preset, ["data.fold=3", "norm.p=2,4"]) == ({"data.fold": [3]},
                                                                      ["norm.p=2,4"])
    assert cli_replicates(preset, ["data.fold=0,1"])[0] == {"data.fold": [0, 1]}
    assert cli_replicates(preset, ["seed=1"]) == (preset, ["seed=1"])
    with pytest.raises(UserError, match=r"data.fold=range\(0,3\): data.fold is a replicate key"):
        cli_replicates(preset, ["data.fold=range(0,3)"])


TINY_LR = ["optimizer.lr=0.00000001", "optimizer.warmup_iters=0", "optimizer.min_lr=0",
           "hydra.sweeper.pruner.name=threshold", "++hydra.sweeper.pruner.upper=4.1",
           "++hydra.sweeper.pruner.n_warmup_steps=10"]  # val loss stays near ln 65 = 4.17: pruned


def test_folds_report_into_one_trial_without_optunas_already_reported_warning(cli):
    """Two p x two folds: the second fold of a trial reaches steps its first fold reported.
    Optuna ignores such a report and logged that at every eval, which reads as an error."""
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, "hydra.sweeper.study_name=folds",
            "norm.p=choice(2.0,4.0)", "++hydra.sweeper.replicates={data.fold:[0,1]}",
            "hydra.sweeper.n_jobs=2")
    ok(r)
    logs = r.stdout + r.stderr + "".join(
        p.read_text() for p in cli.cwd.glob("outputs/sweeps/**/*.log"))
    assert "already reported" not in logs
    trials = study_of(cli.cwd, "folds").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:  # the trial's curve is its first fold's, every eval step of it
        fold0 = next(j for j in t.user_attrs["jobs"] if job_config(j)["data"]["fold"] == 0)
        assert t.intermediate_values == {row["step"]: row["val_loss"]
                                         for row in rundir.read_metrics(Path(fold0))}
    # Replicate-major: both p's fold 0 were launched before either's fold 1.
    launched = {}
    for t in trials:
        for j in t.user_attrs["jobs"]:
            hydra_cfg = yaml.safe_load((Path(j) / ".hydra" / "hydra.yaml").read_text())
            launched[hydra_cfg["hydra"]["job"]["num"]] = (t.params["norm.p"],
                                                          job_config(j)["data"]["fold"])
    assert [fold for _, (_, fold) in sorted(launched.items())] == [0, 0, 1, 1]


def test_with_replicates_the_first_pruned_job_stops_its_sibling(cli):
    """search=p_tpe's default path: one trial on two folds, run one after the other; fold 0 is
    pruned at step 10 and fold 1 stops at its first eval, step 0, without training on."""
    ok(cli("-m", "qknorm.train", "search=p_tpe_plain", *FAST, "train.max_iters=30",
           "hydra.sweeper.study_name=sib", "hydra.sweeper.n_trials=1",
           "hydra.sweeper.replicates={data.fold:[0,1]}", *TINY_LR))
    (trial,) = study_of(cli.cwd, "sib").get_trials()
    assert trial.state == TrialState.PRUNED and trial.user_attrs["pruned_step"] == 10
    steps = {}
    for j in trial.user_attrs["jobs"]:
        assert rundir.read_final(Path(j))["status"] == "pruned"
        steps[job_config(j)["data"]["fold"]] = [r["step"] for r in rundir.read_metrics(Path(j))]
    assert steps == {0: [0, 10], 1: [0]}
    assert sorted(trial.intermediate_values) == [0, 10]  # fold 1 reported nothing


def test_a_repeat_of_an_earlier_batchs_pruned_trial_is_told_its_result_not_run(cli):
    """One trial a batch, every trial pruned: the second norm=none trial repeats the first,
    which an earlier batch ran and which was pruned; it is told PRUNED, runs nothing, and the
    log says which trial it repeats."""
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, "train.max_iters=30",
            "hydra.sweeper.study_name=rep1", "norm=choice(none,lp)", "norm.p=choice(2,4)",
            "hydra.sweeper.n_jobs=1", *TINY_LR)
    ok(r)
    trials = study_of(cli.cwd, "rep1").get_trials()
    assert [t.state for t in trials] == [TrialState.PRUNED] * 4
    (repeat,) = [t for t in trials if "duplicate_of" in t.user_attrs]
    original = trials[repeat.user_attrs["duplicate_of"]]
    assert original.number < repeat.number and original.params["norm"] == "none"
    assert repeat.params["norm"] == "none" and repeat.params["norm.p"] != original.params["norm.p"]
    assert repeat.user_attrs["jobs"] == original.user_attrs["jobs"]
    assert repeat.user_attrs["status"] == "pruned"
    assert (f"trial {repeat.number} [norm.p={repeat.params['norm.p']} norm=none] not run: same "
            f"effective config as trial {original.number}, told its result (PRUNED)") in r.stdout
    (sweep,) = sweep_dirs(cli.cwd, "p_grid")
    assert len(list(sweep.glob("trial[0-9]*"))) == 3


def test_a_rerun_with_another_replicate_set_or_grid_seed_says_what_the_study_holds(cli):
    """data.fold=0,1 after data.fold=0 found its grid done and ended without a word; another
    grid seed on a grid study was taken silently. Both are one line, exit 2, nothing run."""
    args = ["-m", "qknorm.train", "search=p_grid", *FAST, "train.max_iters=10",
            "hydra.sweeper.study_name=reps", "norm.p=choice(2.0,4.0)"]
    ok(cli(*args, "++hydra.sweeper.replicates={data.fold:[0]}"))
    before = [(t.number, t.state, t.user_attrs["sampler_seed"])
              for t in study_of(cli.cwd, "reps").get_trials()]
    assert before == [(0, TrialState.COMPLETE, 0), (1, TrialState.COMPLETE, 0)]
    r = cli(*args, "++hydra.sweeper.replicates={data.fold:[0,1]}")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1:] == [(  # after Optuna's "Using an existing study"
        "error: study 'reps' holds 2 trial(s) run on the replicates {data.fold:[0]}, not "
        "{data.fold:[0,1]}; a trial's value is the mean over its replicates, so one study keeps "
        "one set: rerun with 'hydra.sweeper.replicates={data.fold:[0]}' to extend it with more "
        "trials, or run the new set in its own study with hydra.sweeper.study_name=NEW_NAME")]
    r = cli(*args, "++hydra.sweeper.replicates={data.fold:[0]}", "hydra.sweeper.sampler.seed=1")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1:] == [(
        "error: hydra.sweeper.sampler.seed=1: the grid trials of study 'reps' were asked with "
        "seed 0; sweepers on one grid study share its seed (Optuna orders the grid by it): "
        "rerun with hydra.sweeper.sampler.seed=0")]
    after = [(t.number, t.state, t.user_attrs["sampler_seed"])
             for t in study_of(cli.cwd, "reps").get_trials()]
    assert after == before
    assert len(sweep_dirs(cli.cwd, "p_grid")) == 1  # the refused reruns launched nothing


def two_p_plan():
    """A plain sweep's plan over norm.p in {2, 4}, one job a trial, built in memory: for driving
    a schedule's tells without the CLI."""
    from hydra_racing_sweeper.space import parse_space

    from tests.helpers.race import sweep_plan

    space, _ = parse_space({"norm.p": "choice(2.0,4.0)"}, [])
    return sweep_plan(space, 2)


def test_a_trial_failed_as_stale_by_another_sweeper_is_left_to_its_retry(tmp_path, caplog):
    # Seen once in CI: under load this sweeper's heartbeat came late, a second sweeper failed the
    # trial as stale, and telling it raised UpdateFinishedTrialError, ending this whole sweep.
    from hydra_racing_sweeper import launcher
    from hydra_racing_sweeper.study import STATUS_ATTR
    from optuna.storages.journal import JournalFileBackend

    def handle():  # one sweeper's view of the shared journal file
        backend = JournalFileBackend(str(tmp_path / "optuna.log"))
        return optuna.load_study(study_name="s", storage=optuna.storages.JournalStorage(backend))

    optuna.create_study(study_name="s", storage=optuna.storages.JournalStorage(
        JournalFileBackend(str(tmp_path / "optuna.log"))))
    mine, other = handle(), handle()
    plan = two_p_plan()
    trial = mine.ask(plan.space.distributions)
    other.tell(trial.number, state=TrialState.FAIL)  # the other sweeper's stale-trial callback
    done = launcher.JobResult(rundir.COMPLETED, "run", {"best_val_loss": 1.5})
    with caplog.at_level("WARNING"):
        launcher.tell(mine, trial, [done], plan, ["best_val_loss"])
        launcher.tell_out(mine, trial, [done], ["run"], ["best_val_loss"])
    (told,) = mine.get_trials()
    assert told.state == TrialState.FAIL and STATUS_ATTR not in told.user_attrs
    assert caplog.text.count("was failed by another sweeper") == 2


def test_a_trial_failed_as_stale_after_its_status_was_written_counts_once(tmp_path, monkeypatch):
    # Under load a sweeper's heartbeat can come late between writing a trial's status and
    # telling it: the trial ends FAIL with status "completed", and its retry runs it again. Only
    # the retry may hold the slot, or the study counts one point twice (seen once in make test).
    from hydra_racing_sweeper import launcher
    from hydra_racing_sweeper.study import STATUS_ATTR, Tally, retry

    url = f"sqlite:///{tmp_path}/s.db"
    mine = optuna.create_study(study_name="s", storage=url)
    other = optuna.load_study(study_name="s", storage=url)
    plan = two_p_plan()
    trial = mine.ask(plan.space.distributions)
    tell = mine.tell

    def failed_as_stale_first(t, *args, **kwargs):  # the other sweeper's stale-trial callback
        other.tell(t.number, state=TrialState.FAIL)
        retry(other, other.trials[t.number])
        return tell(t, *args, **kwargs)

    monkeypatch.setattr(mine, "tell", failed_as_stale_first)
    launcher.tell(mine, trial, [launcher.JobResult(rundir.COMPLETED, "run",
                                                       {"best_val_loss": 1.5})],
                    plan, ["best_val_loss"])
    told, waiting = mine.get_trials()
    assert (told.state, told.user_attrs[STATUS_ATTR]) == (TrialState.FAIL, "completed")
    assert waiting.state == TrialState.WAITING and waiting.params == told.params
    assert Tally.of(mine) == Tally(finished=0, running=0, failed=0)  # the retry is still to run


def test_a_repeat_failed_as_stale_while_it_waits_is_left_to_its_retry(tmp_path, caplog):
    # A repeat stays RUNNING until its original is told; a late heartbeat meanwhile lets another
    # sweeper fail it, and telling it the original's result must not end this sweep.
    from hydra_racing_sweeper.schedule import EveryReplicate
    from hydra_racing_sweeper.study import DUPLICATE_ATTR, Heartbeat

    url = f"sqlite:///{tmp_path}/s.db"
    mine = optuna.create_study(study_name="s", storage=url)
    plan = two_p_plan()
    original = mine.ask(plan.space.distributions)
    original.set_user_attr("status", "completed")
    mine.tell(original, 1.5)
    repeat = mine.ask(plan.space.distributions)
    optuna.load_study(study_name="s", storage=url).tell(repeat.number, state=TrialState.FAIL)
    schedule = EveryReplicate(plan, None, ["best_val_loss"], 1, Heartbeat(mine._storage, 1))
    schedule.repeats = [(repeat, original.number)]
    with caplog.at_level("WARNING"):
        schedule.settle(mine)
    told = mine.trials[repeat.number]
    assert told.state == TrialState.FAIL and DUPLICATE_ATTR not in told.user_attrs
    assert schedule.repeats == []
    assert f"trial {repeat.number} was failed by another sweeper" in caplog.text
