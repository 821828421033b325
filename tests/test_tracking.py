"""Trackers (docs/trackers.md), read back with the real libraries: TensorBoard's EventAccumulator
sees every eval of every run of a sweep as metrics.jsonl has it; MlflowClient sees one parent per
sweep, a child per trial, the replicates under it, with metrics.jsonl's history, tags and files."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from qknorm import rundir
from qknorm.rundir import find_run_dirs, read_config
from tests.helpers import synthetic_runs
from tests.helpers.cli import kill_after_evals

FAST = ["experiment=smoke", "threads=1", "train.max_iters=20", "train.eval_interval=10"]
INSTALL = "pip install -e '.[tracking]'"


def needs(module: str):
    return pytest.importorskip(module, reason=f"{module} is not installed ({INSTALL})")


def number(value) -> float:
    return float(value)  # metrics.jsonl writes nan as "nan"


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def sweep_dir(cwd: Path, name: str) -> Path:
    (found,) = (cwd / "outputs" / "sweeps" / name).iterdir()
    return found


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------
# TensorBoard

def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={SCALARS: 0})  # 0: keep every event
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def session_hparams(run_dir: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in info.hparams.items()}


def assert_events_mirror_run_dir(run_dir: Path) -> None:
    """Every metrics.jsonl scalar at every eval, final.json's numbers as final/<key>: exact, in
    float32 (TensorBoard's scalar type)."""
    rows, final = rundir.read_metrics(run_dir), rundir.read_final(run_dir)
    got = scalars(run_dir)
    keys = [k for k in rows[0] if k != "step"]
    # diagnostics included, the largest logits and z (issue 36) too
    assert {"attn_entropy", "logit_std_l0", "attn_logit_max_l0", "out_z", "val_loss"} <= set(keys)
    for key in keys:
        want = [(r["step"], np.float32(number(r[key]))) for r in rows]
        assert len(got[key]) == len(want), key
        assert all(s == ws and same(v, float(wv)) for (s, v), (ws, wv) in zip(got[key], want)), key
    assert got["final/best_val_loss"] == [(final["steps"], np.float32(final["best_val_loss"]))]
    numbers = [k for k, v in final.items() if k not in ("seed", "fold") and (
        v in ("nan", "inf", "-inf") or isinstance(v, (int, float)) and not isinstance(v, bool))]
    assert set(got) == {*keys, *(f"final/{k}" for k in numbers)}


@pytest.mark.slow
def test_tensorboard_sweep_every_run_has_its_own_events_equal_to_metrics_jsonl(cli):
    needs("tensorboard")
    r = cli("-m", "qknorm.train", "-m", *FAST, "tracker=tensorboard", "norm.p=2,4,inf",
            "hydra/launcher=parallel", "hydra.launcher.n_jobs=2")
    assert r.returncode == 0, r.stderr
    sweep = sweep_dir(cli.cwd, "smoke")
    run_dirs = find_run_dirs(sweep)
    assert [d.name for d in run_dirs] == ["0", "1", "2"]
    event_files = [f for d in run_dirs for f in d.glob("events.out.tfevents.*")]
    assert len(event_files) == 3 and len({f.name for f in event_files}) == 3  # one each, never shared
    for run_dir in run_dirs:
        assert [r["step"] for r in rundir.read_metrics(run_dir)] == [0, 10, 20]
        assert_events_mirror_run_dir(run_dir)
        hp = session_hparams(run_dir)
        config = read_config(run_dir)
        assert hp["norm.p"] == config["norm.p"] and hp["status"] == "completed"
        assert hp["seed"] == 0 and hp["norm.kind"] == "lp" and "tracker.kind" not in hp

    # what `tensorboard --logdir <sweep dir>` loads: one run per job dir
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    mux = EventMultiplexer().AddRunsFromDirectory(str(sweep))
    mux.Reload()
    assert sorted(mux.Runs()) == ["0", "1", "2"]


RESUME = ["experiment=smoke", "threads=1", "train.max_iters=200", "train.eval_interval=20",
          "train.save_checkpoint=true", "tracker=tensorboard"]


@pytest.mark.slow
def test_tensorboard_resumed_run_has_each_eval_once(cli):
    """A run killed mid-way and resumed: its events are metrics.jsonl's rows, each step once."""
    needs("tensorboard")
    kill_after_evals(cli.cwd, RESUME, "run", n_evals=4)
    run_dir = cli.cwd / "run"
    assert rundir.read_final(run_dir) is None
    ckpt_step = rundir.load_checkpoint(run_dir)["step"]
    killed_steps = scalars(run_dir)["val_loss"]
    assert len(killed_steps) >= 3  # the killed attempt had logged events

    r = cli("-m", "qknorm.train", *RESUME, "hydra.run.dir=run", "train.resume=true")
    assert r.returncode == 0, r.stderr
    assert [row["step"] for row in rundir.read_metrics(run_dir)] == list(range(0, 201, 20))
    assert 20 <= ckpt_step < 200
    assert [s for s, _ in scalars(run_dir)["val_loss"]] == list(range(0, 201, 20))  # no repeats
    assert_events_mirror_run_dir(run_dir)
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1  # the killed attempt's: rebuilt


@pytest.mark.slow
def test_tracker_without_its_package_is_one_line_before_training(cli, tmp_path):
    """tensorboard (or mlflow) missing: one line naming the extra, exit 2, no run dir."""
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "sitecustomize.py").write_text(
        "import sys\nsys.modules['tensorboard'] = None\nsys.modules['mlflow'] = None\n")
    env = {"PYTHONPATH": os.pathsep.join([str(stub), os.environ.get("PYTHONPATH", "")])}
    for tracker, dist in (("tensorboard", "tensorboard"), ("mlflow", "mlflow-skinny")):
        for mode in (["seed=0"], ["-m", "seed=0,1"]):  # a run, a multirun
            r = cli("-m", "qknorm.train", *mode[:-1], *FAST, f"tracker={tracker}", mode[-1], env=env)
            assert r.returncode == 2, r.stderr
            assert one_line(r).startswith(
                f"error: tracker={tracker} needs the {dist} package, which is not installed; run "
                f"{INSTALL} (the 'tracking' extra), or use tracker=none")  # + the job, for -m
            assert not list(cli.cwd.rglob(rundir.METRICS_FILE))  # no training started
            if len(mode) == 2:  # a multirun is checked before its first job: nothing written at all
                assert not (cli.cwd / "outputs" / "sweeps").exists()
    r = cli("-m", "qknorm.tracking.mlflow", str(tmp_path), env=env)
    assert r.returncode == 2 and "the MLflow export needs the mlflow-skinny package" in one_line(r)


@pytest.mark.slow
def test_bad_tracker_is_one_line(cli):
    r = cli("-m", "qknorm.train", *FAST, "tracker.kind=wandb")
    assert r.returncode == 2
    assert one_line(r) == ("error: tracker.kind='wandb' is not one of none, tensorboard, mlflow; "
                           "pick one of those")
    r = cli("-m", "qknorm.train", *FAST, "tracker.urii=x")
    assert r.returncode == 2 and "tracker.urii" in one_line(r)


def test_tracker_options_compose(tmp_path):
    from tests.helpers.config import compose_config, compose_hydra_config

    assert compose_config().tracker.kind == "none"
    assert list(compose_hydra_config("tracker=mlflow").hydra.callbacks) == ["qknorm_mlflow"]
    if importlib_has("mlflow"):
        t = compose_config("tracker=mlflow").tracker
        assert (t.kind, t.uri, t.experiment) == ("mlflow", "sqlite:///outputs/mlflow.db", None)


def importlib_has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------------------------------------
# MLflow

def tree(uri: str, experiment: str):
    """(client, {run name path: run}) of the experiment, paths as 'sweep/trial/replicate'."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    by_id = {r.info.run_id: r for r in runs}

    def path(r) -> str:
        parent = r.data.tags.get("mlflow.parentRunId")
        return (path(by_id[parent]) + "/" if parent else "") + r.info.run_name

    paths = {path(r): r for r in runs}
    assert len(paths) == len(runs), sorted(paths)  # no run twice
    return client, paths


def assert_run_mirrors_run_dir(client, run, run_dir: Path) -> None:
    rows, final, config = rundir.read_metrics(run_dir), rundir.read_final(run_dir), read_config(run_dir)
    t = run.data.tags
    # A run outside a git work tree has git_sha null: its tag says unknown (so this holds from
    # a checkout and from a copy without .git alike).
    assert t["status"] == final["status"] and t["git_sha"] == (final["git_sha"] or "unknown")
    assert t["run_dir"] == str(run_dir.resolve()) and t["p"] == str(config["norm.p"])
    assert run.data.params["norm.p"] == str(config["norm.p"])
    assert run.data.params["seed"] == str(config["seed"])
    for key in [k for k in rows[0] if k != "step"]:
        history = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
        assert [m.step for m in history] == [r["step"] for r in rows], key
        assert all(same(m.value, number(r[key])) for m, r in zip(history, rows)), key
    assert run.data.metrics["final/best_val_loss"] == final["best_val_loss"]
    files = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert files == {".hydra", *(f for f in ("final.json", "metrics.jsonl", "train.log")
                                 if (run_dir / f).exists())}
    hydra = {f.path for f in client.list_artifacts(run.info.run_id, ".hydra")}
    assert hydra == {".hydra/config.yaml", ".hydra/overrides.yaml"}


@pytest.mark.slow
def test_mlflow_optuna_study_is_a_parent_with_a_child_per_trial_and_its_folds(cli, monkeypatch):
    needs("mlflow")
    uri = "sqlite:///outputs/mlflow.db"
    r = cli("-m", "qknorm.train", "search=p_tpe_plain", *FAST, "hydra.sweeper.n_trials=2",
            "hydra.sweeper.n_jobs=1", "tracker=mlflow", f"tracker.uri={uri}")
    assert r.returncode == 0, r.stderr
    assert "mlflow: 4 run(s) exported, 0 already there" in r.stderr
    sweep = sweep_dir(cli.cwd, "p_tpe_plain")
    monkeypatch.chdir(cli.cwd)  # the URI is relative, as the sweep took it
    client, paths = tree(uri, "p_tpe_plain")
    p = {n: read_config(sweep / f"trial{n}_8")["norm.p"] for n in (0, 1)}
    assert sorted(paths) == ["study p_tpe_plain", *(f"study p_tpe_plain/trial {n}: norm.p={p[n]}{rep}"
                                                for n in (0, 1)
                                                for rep in ("", "/data.fold=8", "/data.fold=9"))]
    assert paths["study p_tpe_plain"].data.tags["qknorm.level"] == "sweep"
    for n in (0, 1):
        trial = paths[f"study p_tpe_plain/trial {n}: norm.p={p[n]}"]
        assert trial.data.tags["status"] == "completed" and trial.info.status == "FINISHED"
        assert trial.data.params["norm.p"] == str(p[n])
        for fold in (8, 9):
            run = paths[f"study p_tpe_plain/trial {n}: norm.p={p[n]}/data.fold={fold}"]
            assert run.data.tags["trial"] == str(n) and run.info.status == "FINISHED"
            assert_run_mirrors_run_dir(client, run, sweep / f"trial{n}_{fold}")
    artifacts = {f.path for f in client.list_artifacts(paths["study p_tpe_plain"].info.run_id, sweep.name)}
    assert f"{sweep.name}/optimization_results.yaml" in artifacts

    # the export again, by the command: nothing new, nothing twice
    again = cli("-m", "qknorm.tracking.mlflow", str(sweep), "--uri", uri)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("mlflow: 0 run(s) exported, 4 already there, 0 without")
    assert sorted(tree(uri, "p_tpe_plain")[1]) == sorted(paths)


@pytest.mark.slow
def test_mlflow_basic_multirun_with_diverged_jobs_is_exported_when_it_fails(cli, monkeypatch):
    needs("mlflow")
    uri = "sqlite:///mlflow.db"
    r = cli("-m", "qknorm.train", "-m", *FAST, "optimizer.min_lr=0", "optimizer.lr=1e-3,1e6",
            "seed=0,1", "tracker=mlflow", f"tracker.uri={uri}", "tracker.experiment=mixed")
    assert r.returncode == 1  # the multirun had failed jobs
    assert "mlflow: 4 run(s) exported" in r.stderr
    sweep = sweep_dir(cli.cwd, "smoke")
    monkeypatch.chdir(cli.cwd)
    client, paths = tree(uri, "mixed")
    top = f"sweep {sweep.name}"
    # a trial is named by its overrides as Hydra writes them in .hydra/overrides.yaml
    assert sorted(paths) == [top, *(f"{top}/optimizer.lr={lr}{rep}" for lr in ("0.001", "1000000.0")
                                   for rep in ("", "/seed=0", "/seed=1"))]
    for job, (lr, seed) in enumerate([("0.001", 0), ("0.001", 1), ("1000000.0", 0),
                                      ("1000000.0", 1)]):
        run = paths[f"{top}/optimizer.lr={lr}/seed={seed}"]
        status = rundir.read_final(sweep / str(job))["status"]
        assert status == ("completed" if lr == "0.001" else "diverged")
        assert run.info.status == ("FINISHED" if lr == "0.001" else "FAILED")
        assert_run_mirrors_run_dir(client, run, sweep / str(job))
        if lr == "1000000.0":
            assert run.data.tags["error"] == rundir.read_final(sweep / str(job))["error"]
    assert paths[f"{top}/optimizer.lr=1000000.0"].data.tags["status"] == "diverged"
    assert paths[f"{top}/optimizer.lr=0.001"].data.tags["status"] == "completed"


def synthetic_sweep(root: Path) -> Path:
    """The results tests' 12 hand-written job dirs (one diverged, one killed), as a multirun."""
    synthetic_runs.make_sweep(root)
    for run_dir in find_run_dirs(root):
        (run_dir / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}}))
    return root


@pytest.mark.slow
def test_concurrent_exports_to_one_sqlite_store_neither_fail_nor_duplicate(tmp_path):
    """Two sweeps exported at once, and one of them twice at once: no lock error, no run twice."""
    needs("mlflow")
    a, b = synthetic_sweep(tmp_path / "a"), synthetic_sweep(tmp_path / "b")
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    procs = [subprocess.Popen([sys.executable, "-m", "qknorm.tracking.mlflow", str(d), "--uri", uri],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for d in (a, b, a)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert not any("lock" in err.lower() for _, err in outs), outs
    lines = sorted(out.split(" -> ")[0] for out, _ in outs)
    assert lines == ["mlflow: 0 run(s) exported, 11 already there, 1 without final.json left out",
                     *["mlflow: 11 run(s) exported, 0 already there, 1 without final.json left out"] * 2]
    client, paths = tree(uri, "synthetic")
    for sweep in (a, b):
        top = f"sweep {sweep.name}"
        trials = {k for k in paths if k.count("/") == 1 and k.startswith(top + "/")}
        assert trials == {f"{top}/norm.p={p}" for p in (2.0, 4.0, math.inf)}
        runs = [k for k in paths if k.count("/") == 2 and k.startswith(top + "/")]
        assert len(runs) == 11  # 12 jobs, the killed one has no final.json
    diverged = paths[f"sweep a/norm.p=4.0/data.fold={synthetic_runs.DIVERGED[1]}"]
    assert diverged.data.tags["status"] == "diverged" and diverged.info.status == "FAILED"
    assert paths["sweep a/norm.p=4.0"].data.tags["status"] == "diverged"
    assert_run_mirrors_run_dir(client, diverged, a / "7")


@pytest.mark.slow
def test_mlflow_export_bad_input_is_one_line(cli, tmp_path):
    needs("mlflow")
    r = cli("-m", "qknorm.tracking.mlflow", str(tmp_path / "nope"))
    assert r.returncode == 2
    assert one_line(r) == (f"error: {tmp_path / 'nope'} is not a directory; pass a sweep dir "
                           "(outputs/sweeps/<name>/<stamp>), a run dir, or outputs/")
    synthetic_sweep(tmp_path / "s")
    r = cli("-m", "qknorm.tracking.mlflow", str(tmp_path / "s"), "--uri", "bogus://x")
    assert r.returncode == 2
    line = one_line(r)
    assert line.startswith("error: MLflow store 'bogus://x': ") and line.endswith(
        "; check --uri / tracker.uri (e.g. sqlite:///outputs/mlflow.db)")


@pytest.mark.slow
def test_a_store_that_cannot_be_opened_is_one_line_before_training(cli):
    """issue 38: an unknown scheme or a server that does not answer is found before any job
    trains, in one line, exit 2, for a run and a multirun."""
    needs("mlflow")
    for uri, why, mode in (("notascheme://x", "(unsupported scheme 'notascheme')", ["seed=0"]),
                           ("http://127.0.0.1:9", "(API request to http://127.0.0.1:9/api/2.0/"
                            "mlflow/", ["-m", "seed=0,1"])):
        r = cli("-m", "qknorm.train", *mode[:-1], *FAST, "tracker=mlflow",
                f"tracker.uri={uri}", mode[-1])  # a run with one store, a multirun the other
        assert r.returncode == 2, r.stderr
        line = one_line(r)
        assert line.startswith(f"error: tracker.uri={uri} cannot be opened as an MLflow "
                               f"store {why}") and len(line) < 400
        assert not list(cli.cwd.rglob(rundir.METRICS_FILE))  # nothing trained


def test_a_store_that_fails_at_the_end_exits_non_zero_and_says_where_the_runs_are(
        tmp_path, monkeypatch, capsys):
    """Opened at the start, failing at the export (disk full, server gone): the runs stay on
    disk, the line names them and the command that exports them, and the command exits 1."""
    needs("mlflow")
    from omegaconf import OmegaConf

    from qknorm.tracking import mlflow as tracking_mlflow

    run = tmp_path / "run"
    run.mkdir()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = OmegaConf.create({"tracker": {"uri": uri, "experiment": None},
                               "hydra": {"run": {"dir": str(run)}}})
    callback = tracking_mlflow.ExportCallback()
    callback.on_run_start(config)  # the store opens: no error

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tracking_mlflow, "export", full)
    with pytest.raises(SystemExit) as stop:
        callback.on_run_end(config)
    assert stop.value.code == 1
    assert capsys.readouterr().err.strip() == (
        f"error: mlflow export of {run} failed ([Errno 28] No space left on device); the runs "
        f"are in {run}: run python -m qknorm.tracking.mlflow {run} --uri {uri}")


# ---------------------------------------------------------------------------------------------
# MLflow: every ending, a single run, a topped-up study, a late final.json, the lock (in process)

def study_job(sweep: Path, trial: int, fold: int, status: str | None, study: str = "s") -> Path:
    """A job dir of our Optuna sweeper (trial<N>_<fold>): evals at 0 and 10 (and 20 when it
    completed); status None: no final.json yet (still running, or killed)."""
    run = sweep / f"trial{trial}_{fold}"
    cfg = synthetic_runs.config(2.0 + trial, fold, study=(study, "sqlite:///s.db", trial))
    synthetic_runs.write_config(run, cfg)
    steps = (0, 10, 20) if status == "completed" else (0, 10)
    for step in steps:
        rundir.append_metrics(run, {"step": step, "val_loss": 3.0 - step / 10, "lr": 1e-3})
    if status is not None:
        extra = {} if status == "completed" else {"error": "pruned at step 10"}
        rundir.write_final(run, {**synthetic_runs.final(status, 2.0, 1.0, 2.0 + trial, 0, fold,
                                                        **extra), "steps": steps[-1]})
    return run


def mlflow_paths(uri: str, experiment: str = "synthetic") -> dict:
    return tree(uri, experiment)[1]


def test_mlflow_every_ending_a_late_final_json_and_a_topped_up_study(tmp_path):
    """Pruned (by the pruner) and race-stopped runs are exported KILLED, their trials too; a run
    dir that gains final.json later is exported by the next export, under its trial; a second
    sweep of the same study (topped up) puts its new trials under the study's one parent."""
    needs("mlflow")
    from qknorm.tracking.mlflow import export

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = tmp_path / "sweeps" / "first"
    study_job(first, 0, 0, "completed")
    study_job(first, 0, 1, "completed")
    study_job(first, 1, 0, "pruned")  # the pruner's
    study_job(first, 2, 0, "pruned")  # stopped at the race's rung
    late = study_job(first, 2, 1, None)  # still running
    summary = export(first, uri)
    assert (summary.exported, summary.present, summary.incomplete) == (4, 0, 1)
    paths = mlflow_paths(uri)
    t = {n: f"study s/trial {n}: norm.p={2.0 + n}" for n in range(4)}
    assert sorted(paths) == sorted(["study s", f"{t[0]}", f"{t[0]}/data.fold=0", f"{t[0]}/data.fold=1",
                                    t[1], f"{t[1]}/data.fold=0", t[2], f"{t[2]}/data.fold=0"])
    for name, status, mlflow_status in ((f"{t[0]}/data.fold=0", "completed", "FINISHED"),
                                        (f"{t[1]}/data.fold=0", "pruned", "KILLED"),
                                        (f"{t[2]}/data.fold=0", "pruned", "KILLED"),
                                        (t[0], "completed", "FINISHED"), (t[1], "pruned", "KILLED"),
                                        (t[2], "pruned", "KILLED")):
        run = paths[name]
        assert (run.data.tags["status"], run.info.status) == (status, mlflow_status), name
    stopped = paths[f"{t[2]}/data.fold=0"]
    assert stopped.data.tags["error"] == "pruned at step 10"
    # Its replicate block (the job's RACING_BLOCK, not in its config): the run's name, from its
    # replicate overrides, and the config key the block sets.
    assert (stopped.info.run_name, stopped.data.params["data.fold"]) == ("data.fold=0", "0")
    client = tree(uri, "synthetic")[0]
    assert [(m.step, m.value) for m in sorted(client.get_metric_history(stopped.info.run_id, "val_loss"),
                                              key=lambda m: m.step)] == [(0, 3.0), (10, 2.0)]
    assert paths[t[2]].data.tags["replicates"] == "1"

    # the running job ends: the next export adds it, and only it, under trial 2
    rundir.write_final(late, {**synthetic_runs.final("completed", 1.9, 1.0, 4.0, 0, 1), "steps": 20})
    summary = export(first, uri)
    assert (summary.exported, summary.present, summary.incomplete) == (1, 4, 0)
    paths = mlflow_paths(uri)
    assert paths[f"{t[2]}/data.fold=1"].info.status == "FINISHED"
    assert paths[t[2]].data.tags["replicates"] == "2"
    assert (paths[t[2]].data.tags["status"], paths[t[2]].info.status) == ("pruned", "KILLED")
    assert len(paths) == 9

    # the study topped up by a later sweep (its own sweep dir): same parent, new trial under it
    second = tmp_path / "sweeps" / "second"
    study_job(second, 3, 0, "completed")
    (second / "trials.csv").write_text("number,value\n3,2.0\n")
    summary = export(second, uri)
    assert (summary.exported, summary.present, summary.incomplete) == (1, 0, 0)
    paths = mlflow_paths(uri)
    assert [k for k in paths if "/" not in k] == ["study s"]  # one parent per study
    # (named by its number alone: an export names trials by the overrides that differ among
    # the trials it exports, and this one exports one trial)
    assert paths["study s/trial 3/data.fold=0"].data.tags["qknorm.level"] == "run"
    assert len(paths) == 11
    parent = paths["study s"].info.run_id
    assert {f.path for f in client.list_artifacts(parent, "second")} == {"second/trials.csv"}


def single_run(tmp_path, **final_fields):
    """A synthetic single run (Hydra mode RUN, p = 4, fold 0) and an MLflow store beside it."""
    run = tmp_path / "run"
    synthetic_runs.write_config(run, synthetic_runs.config(4.0, 0))
    (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "RUN"}}))
    synthetic_runs.write_curve(run, 1.5, 10.0, 4.0)
    rundir.write_final(run, synthetic_runs.final("completed", 1.5, 3.0, 4.0, 0, 0,
                                                 **final_fields))
    return run, f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_mlflow_single_run_is_one_top_level_run(tmp_path):
    needs("mlflow")
    from qknorm.tracking.mlflow import export

    run, uri = single_run(tmp_path)
    summary = export(run, uri)
    assert (summary.exported, summary.present, summary.incomplete) == (1, 0, 0)
    client, paths = tree(uri, "synthetic")
    assert list(paths) == ["data.fold=0"]  # named by its replicate override
    single = paths["data.fold=0"]
    assert "mlflow.parentRunId" not in single.data.tags
    assert single.data.tags["qknorm.level"] == "run" and single.info.status == "FINISHED"
    assert single.data.tags["qknorm.key"] == f"run:{run.resolve()}"
    assert_run_mirrors_run_dir(client, single, run)
    assert export(run, uri).present == 1 and len(tree(uri, "synthetic")[1]) == 1


def test_mlflow_a_run_without_a_git_sha_is_tagged_unknown(tmp_path):
    """A run trained outside a git work tree (final.json git_sha null) is tagged unknown."""
    needs("mlflow")
    from qknorm.tracking.mlflow import export

    run, uri = single_run(tmp_path, git_sha=None)
    export(run, uri)
    client, paths = tree(uri, "synthetic")
    assert paths["data.fold=0"].data.tags["git_sha"] == "unknown"
    assert_run_mirrors_run_dir(client, paths["data.fold=0"], run)


def test_mlflow_export_holds_the_store_lock_while_it_writes(tmp_path, monkeypatch):
    """While one export writes, the lock file beside the SQLite store is held (a second export
    waits for it); checked at a point inside the export, not by timing."""
    needs("mlflow")
    import fcntl
    import threading

    from qknorm.tracking import mlflow as tracking_mlflow

    sweep = synthetic_sweep(tmp_path / "a")
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    inside, release = threading.Event(), threading.Event()
    original = tracking_mlflow.Exporter.export

    def paused(self, jobs, summary):
        inside.set()
        assert release.wait(timeout=120)
        return original(self, jobs, summary)

    monkeypatch.setattr(tracking_mlflow.Exporter, "export", paused)
    results = []
    first = threading.Thread(target=lambda: results.append(tracking_mlflow.export(sweep, uri)))
    first.start()
    try:
        assert inside.wait(timeout=120)
        with open(tmp_path / "store" / "mlflow.db.lock", "a") as f:
            with pytest.raises(BlockingIOError):  # held by the export in progress
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        release.set()
        first.join()
    with open(tmp_path / "store" / "mlflow.db.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released once it is done
    assert results[0].exported == 11


@pytest.mark.parametrize("status,extra", [
    ("pruned", {"error": "pruned at step 10"}),
    ("diverged", {"error": "loss became nan at step 10", "diverged_step": 10, "val_loss": "nan"}),
    ("failed", {"error": "RuntimeError: boom"}),
])
def test_tensorboard_run_that_did_not_complete_has_its_final_numbers_and_status(tmp_path, status,
                                                                                extra):
    """final/<key> at the last step and the status hparam whatever the ending; the hparams
    leave out where things go (optuna.storage, tracker.*), keep what ran."""
    needs("tensorboard")
    from qknorm.config import Config, OptunaTrialConfig
    from qknorm.tracking.tensorboard import TensorBoardRun

    cfg = Config(optuna=OptunaTrialConfig(study_name="s", storage="sqlite:///s.db", trial=3))
    run = TensorBoardRun(cfg, tmp_path)
    for step, loss in ((0, 4.0), (10, 3.5)):
        run.log({"step": step, "val_loss": loss, "lr": 1e-3})
    final = {"status": status, "val_loss": 3.5, "best_val_loss": 3.5, "steps": 10, "seed": 0,
             "fold": 9, "p": 4.0, "git_sha": "abc", **extra}
    run.close(final)
    got = scalars(tmp_path)
    finals = {k: v for k, v in got.items() if k.startswith("final/")}
    want_val = math.nan if status == "diverged" else 3.5
    assert set(finals) == {"final/val_loss", "final/best_val_loss", "final/steps", "final/p",
                           *(["final/diverged_step"] if status == "diverged" else [])}
    assert finals["final/best_val_loss"] == [(10, 3.5)] and finals["final/steps"] == [(10, 10.0)]
    ((step, value),) = finals["final/val_loss"]
    assert step == 10 and same(value, want_val)
    assert got["val_loss"] == [(0, 4.0), (10, 3.5)]
    hp = session_hparams(tmp_path)
    assert hp["status"] == status
    assert (hp["optuna.study_name"], hp["optuna.trial"]) == ("s", 3.0)
    assert not [k for k in hp if k.startswith(("optuna.storage", "tracker."))]
