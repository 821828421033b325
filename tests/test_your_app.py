"""The racing sweeper for any Hydra app (docs/your_app.md): the job-side API
(qknorm.sweep.trial.report), how a job learns its trial (hydra.job.env_set), what the sweeper
reads back from a task that is not qknorm.train, and examples/noisy_app/ copied outside the
repository (no optuna key in its config) swept with hydra/sweeper=qknorm_optuna: a race over
seeds, a stop at a rung, a median pruner, the racing search and a killed sweep resumed."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra_racing_sweeper import identity, status_lines, trial
from hydra_racing_sweeper.launcher import returned_fields
from hydra_racing_sweeper.readback import answer_rows, settings_of
from hydra_racing_sweeper.study import RACE_OUTCOME_ATTR, RACE_RUNS_ATTR, RACE_STOP_ATTR
from omegaconf import OmegaConf
from optuna.trial import TrialState
from scipy import stats

from qknorm.errors import UserError
from qknorm.report.results import collect
from tests.helpers import REPO
from tests.helpers.cli import assert_one_line_error, ok, run_cli
from tests.helpers.holm import holm_by_hand
from tests.helpers.studies import median_pruned_trial

APP = REPO / "examples" / "noisy_app"
# The app's sweeps import this checkout's qknorm and plugin (hydra_racing_sweeper), not those of
# another checkout that an editable install points to.
CHECKOUT = os.pathsep.join([str(REPO), str(REPO / "plugins" / "hydra_racing_sweeper")])


# -- the API, in memory -------------------------------------------------------------------------

def test_outside_a_sweep_report_is_false_and_imports_neither_optuna_hydra_nor_torch():
    code = ("import sys; from hydra_racing_sweeper import trial; "
            "print(trial.report(1, 0.5), [m for m in ('optuna', 'hydra', 'torch') "
            "if m in sys.modules])")
    env = {k: v for k, v in os.environ.items() if k not in identity.ENV}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**env, "PYTHONPATH": str(REPO)}, timeout=60)
    assert r.stdout.split() == ["False", "[]"], r.stderr


def test_the_sweeper_of_another_task_imports_no_torch():
    """What the sweeper loads for a task that is not qknorm.train (qknorm.train's step timing
    and config checks load only for its own jobs): `pip install 'qknorm[sweep]'` in an app's
    environment is all it needs."""
    code = ("import sys, hydra_racing_sweeper.sweep, hydra_racing_sweeper.job, "
            "hydra_plugins.hydra_racing_sweeper.racing_sweeper; print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert r.stdout.split() == ["False"], r.stderr


@pytest.mark.parametrize("ident", [
    identity.Identity("s", "sqlite:////tmp/o.db", 3),
    identity.Identity("it's", "postgresql+psycopg://u:p@h/db?x=1", 12, "seed=1 data.fold=0",
                   (5, 10), 0.25),
    identity.Identity("r", "journal:////a b/o.log", 0, "seed=0", (5, 10), None, (0.5, 0.125)),
])
def test_the_identity_a_job_reads_is_the_one_the_sweeper_set(monkeypatch, ident):
    """env_overrides as Hydra parses them, set as env_set sets them, read back by identity."""
    for o in OverridesParser.create().parse_overrides(identity.env_overrides(ident)):
        key = o.key_or_group.removeprefix("hydra.job.env_set.")
        assert key in identity.ENV
        monkeypatch.setenv(key, o.value())
    assert identity.identity() == ident


def test_a_return_value_is_the_objectives_number_or_a_dict_naming_them():
    assert returned_fields(0.5, ["loss"]) == ({"loss": 0.5}, "")
    assert returned_fields(2, ["loss"]) == ({"loss": 2.0}, "")
    assert returned_fields({"loss": 0.5, "acc": 0.9}, ["acc"])[0]["acc"] == 0.9
    assert returned_fields(OmegaConf.create({"loss": 0.5}), ["loss"]) == ({"loss": 0.5}, "")
    assert returned_fields({"acc": 0.9}, ["loss"])[1].startswith(
        "the task returned ['acc'], without 'loss' of hydra.sweeper.objectives=['loss']")
    assert returned_fields(0.5, ["loss", "time"])[1].startswith(
        "the task returned 1 value for 2 directions")
    assert returned_fields((0.5, 2), ["loss", "time"]) == ({"loss": 0.5, "time": 2.0}, "")
    assert returned_fields([1, 2, 3], ["loss", "time"])[1].startswith(
        "the task returned 3 values for 2 directions")
    assert returned_fields({"acc": 0.9}, ["value"], named=False) == ({"value": 0.9}, "")
    assert returned_fields(None, ["loss"])[1].startswith("the task returned NoneType, neither")
    assert returned_fields(True, ["loss"])[1].startswith("the task returned bool")


def test_a_median_pruned_report_says_stop_and_marks_the_trial(tmp_path, monkeypatch):
    """Optuna's MedianPruner, rebuilt in the job from the trial's pruner spec: two finished
    trials at 1.0 per step, the third at 3.0 is pruned at the first step past the warm-up."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    study, t = median_pruned_trial(url, 5)
    monkeypatch.setenv(identity.STUDY, "m")
    monkeypatch.setenv(identity.STORAGE, url)
    monkeypatch.setenv(identity.TRIAL, str(t.number))
    said = [trial.report(step, 3.0) for step in range(5)]
    assert said == [False, False, True, True, True]  # steps 0-1 warm up; stopped from step 2
    stored = study.get_trials()[t.number]
    assert stored.user_attrs["pruned_step"] == 2 and sorted(stored.intermediate_values) == [0, 1, 2]


# -- the example app, swept from outside the repository ----------------------------------------------

def sweep(cwd: Path, *overrides: str, app: str = "app.py"):
    return run_cli([app, "-m", "hydra/sweeper=qknorm_optuna", "steps=6",
                    "hydra.sweeper.storage=sqlite:///optuna.db", "hydra.sweeper.objectives=[loss]",
                    "hydra/job_logging=disabled", *overrides], cwd,
                   env={"PYTHONPATH": CHECKOUT})


@pytest.fixture
def app_dir(tmp_path):
    for name in ("app.py", "config.yaml"):
        shutil.copy(APP / name, tmp_path / name)
    assert set(yaml.safe_load((tmp_path / "config.yaml").read_text())) == {
        "seed", "lr", "steps", "noise"}  # no optuna key: the app knows nothing of the sweeper
    return tmp_path


def study_in(cwd: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{cwd / 'optuna.db'}")


def by_lr(study: optuna.Study) -> dict[float, optuna.trial.FrozenTrial]:
    return {t.params["lr"]: t for t in study.get_trials()}


RACE = ["lr=choice(0.1,0.12,0.05,0.001)", "hydra.sweeper.sampler.name=grid",
        "hydra.sweeper.n_trials=null", "+hydra.sweeper.replicates={seed:[0,1,2,3]}",
        "++hydra.sweeper.race={min_replicates:3,equivalence:0.05,rungs:[3],margin:0.5}",
        "hydra.sweeper.study_name=race"]


@pytest.mark.slow
def test_a_race_over_seeds_drops_stops_and_calls_level(app_dir, monkeypatch):
    """(a) lr=0.05 (0.09 worse, noise 0.01) is dropped after 3 seeds, with the Holm p of the
    one-sided paired t over seeds that scipy gives on its recorded values; lr=0.12 (0.006
    worse) is level with lr=0.1 within ±0.05. (b) lr=0.001 (3.9 worse) is stopped at the rung,
    step 3, by the API, and its trial is PRUNED."""
    r = sweep(app_dir, *RACE)
    ok(r)
    out = r.stdout + r.stderr
    trials = by_lr(study_in(app_dir, "race"))
    outcome = {lr: t.user_attrs[RACE_OUTCOME_ATTR]["outcome"] for lr, t in trials.items()}
    # lr=0.1 and 0.12 differ by less than the noise: either may lead, the other is level
    leader = next(lr for lr in (0.1, 0.12) if outcome[lr] == "survived")
    level = 0.12 if leader == 0.1 else 0.1
    assert outcome == {0.05: "dropped", level: "level", 0.001: "stopped", leader: "survived"}
    assert [trials[lr].state for lr in (0.05, level, 0.001, leader)] == [
        TrialState.PRUNED, TrialState.PRUNED, TrialState.PRUNED, TrialState.COMPLETE]
    # (a) the look after seed=2: the leader against the two still racing
    values = {lr: [t.user_attrs[RACE_RUNS_ATTR][f"seed={s}"]["value"] for s in range(3)]
              for lr, t in trials.items() if lr != 0.001}
    raw = {lr: stats.ttest_rel(values[lr], values[leader], alternative="greater").pvalue
           for lr in (0.05, level)}
    dropped = trials[0.05].user_attrs[RACE_OUTCOME_ATTR]
    assert (dropped["n"], dropped["leader"]) == (3, f"lr={leader}")
    assert dropped["p_adjusted"] == pytest.approx(holm_by_hand(raw)[0.05], rel=1e-9)
    assert dropped["p_adjusted"] <= 0.05
    # (b) stopped at its rung through trial.report: the job's record and the trial's
    stopped = trials[0.001]
    assert stopped.user_attrs[RACE_STOP_ATTR + "seed=0"]["step"] == 3
    (job,) = stopped.user_attrs["job_dirs"].values()
    final = json.loads((Path(job) / "final.json").read_text())
    assert (final["status"], final["steps"]) == ("pruned", 3)
    assert ("race: 1 of 4 candidates dropped, 1 level with the leader within ±0.05 "
            f"(lr={level}), 1 stopped inside a replicate (lr=0.001: seed=0 at step 3") in out
    # the plan's line, with a time once the first job reported its pace
    assert "plan: at most 16 runs (4 trials x 4 replicates); steps and a time once" in out
    assert ("plan: at most 16 runs (4 trials x 4 replicates), 96 training steps (6 a run); "
            "about ") in out
    (table,) = app_dir.glob("multirun/*/*/trials.csv")  # the trials table, one row a trial
    assert len(table.read_text().splitlines()) == 1 + 4
    # the status, from the storage alone, as for qknorm.train's sweeps
    assert status_lines(study_in(app_dir, "race"))[0].startswith(
        "trials 4/4: 1 complete, 3 pruned, 0 failed, 0 running")
    # qknorm's results report reads qknorm.train's run dirs only, and says so in one line
    with pytest.raises(UserError, match="^multirun/.*: its runs are another task's, not "
                                        "qknorm.train's"):
        monkeypatch.chdir(app_dir)
        collect(table.parent.relative_to(app_dir))


@pytest.mark.slow
def test_a_median_pruner_prunes_the_apps_bad_trial(app_dir):
    """(c) a grid of three lr, the far-off one last (the grid's order at seed 5, checked):
    after two trials it is above their median at step 3 and the API stops it there."""
    ok(sweep(app_dir, "lr=choice(0.1,0.12,0.001)", "hydra.sweeper.sampler.name=grid",
             "hydra.sweeper.sampler.seed=5", "hydra.sweeper.n_trials=null",
             "hydra.sweeper.study_name=median",
             "hydra.sweeper.pruner.name=median", "+hydra.sweeper.pruner.n_startup_trials=2",
             "+hydra.sweeper.pruner.n_warmup_steps=3"))
    trials = study_in(app_dir, "median").get_trials()
    assert [t.params["lr"] for t in trials][-1] == 0.001, "the grid's order changed: pick a seed"
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2 + [TrialState.PRUNED]
    assert trials[2].user_attrs["pruned_step"] == 3
    assert max(trials[2].intermediate_values) == 3


@pytest.mark.slow
def test_the_racing_search_answers_best_level_worse_undecided(app_dir):
    """(d) TPE proposes lr, raced over seeds against its incumbent: every proposal gets one of
    the answer's words, the best is the one nearest lr=0.1 among those run on most seeds, and
    the printed answer names it."""
    r = sweep(app_dir, "lr=tag(log,interval(0.001,1.0))", "hydra.sweeper.sampler.name=tpe",
              "hydra.sweeper.sampler.seed=0", "hydra.sweeper.n_trials=4",
              "+hydra.sweeper.replicates={seed:[0,1,2]}", "hydra.sweeper.study_name=search",
              "++hydra.sweeper.race={min_replicates:2,equivalence:0.05,initial:[0.1]}")
    ok(r)
    study = study_in(app_dir, "search")
    rows = answer_rows(study.get_trials(deepcopy=False), settings_of(study))
    assert len(rows) == 4
    assert {row["answer"] for row in rows} <= {"best", "level", "worse", "undecided"}
    (best,) = [row for row in rows if row["answer"] == "best"]
    assert best["params"]["lr"] == 0.1  # the initial proposal: the floor's minimum
    assert any(row["answer"] == "worse" for row in rows)
    # with its range: the best and the proposals level with it, or none
    near = [0.1] + [row["params"]["lr"] for row in rows if row["answer"] == "level"]
    span = (f"; with those level with it, lr in [{min(near):.4g}, {max(near):.4g}]"
            if len(near) > 1 else "; no proposal level with it")
    assert (f"search: best lr=0.1 (mean {best['mean']:.4f} over {best['n']} replicates{span})"
            in r.stdout)


KILLING_APP = '''"""The example app, killing its sweep in trial 1's first job (once) and logging its jobs."""
import os
from pathlib import Path

import hydra
from hydra.utils import get_original_cwd

import app


@hydra.main(version_base=None, config_path=".", config_name="config")
def main(cfg):
    here = Path(get_original_cwd())
    if os.environ.get("RACING_TRIAL") == "1" and not (here / "killed").exists():
        (here / "killed").touch()
        os._exit(9)  # as kill -9: the sweeper (the basic launcher runs jobs in it) dies
    with open(here / "calls.log", "a") as f:
        f.write(f"{os.environ['RACING_TRIAL']}:{os.environ['RACING_BLOCK']}\\n")
    return app.main.__wrapped__(cfg)


main()
'''


@pytest.mark.slow
def test_a_killed_sweep_resumes(app_dir):
    """(e) the sweeper dies in trial 1's first job; the same command again fails trial 1 as
    stale, retries its lr, and does not run trial 0's completed jobs again."""
    (app_dir / "killing.py").write_text(KILLING_APP)
    args = ["lr=choice(0.1,0.12)", "hydra.sweeper.sampler.name=grid",
            "hydra.sweeper.n_trials=null", "+hydra.sweeper.replicates={seed:[0,1]}",
            "hydra.sweeper.study_name=kill", "hydra.sweeper.heartbeat_interval=1",
            "hydra.sweeper.grace_period=1"]
    first = sweep(app_dir, *args, app="killing.py")
    assert first.returncode == 9, first.stderr[-2000:]
    assert (app_dir / "calls.log").read_text().split() == ["0:seed=0", "0:seed=1"]
    time.sleep(2.5)  # past the grace period: the dead sweeper's trial is stale
    ok(sweep(app_dir, *args, app="killing.py"))
    trials = study_in(app_dir, "kill").get_trials()
    assert trials[1].state == TrialState.FAIL
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(t.params["lr"] for t in done) == [0.1, 0.12]
    calls = (app_dir / "calls.log").read_text().split()
    assert [c for c in calls if c.startswith("0:")] == ["0:seed=0", "0:seed=1"]  # not rerun
    assert len(calls) == 2 + 2  # trial 0 before the kill, then trial 1's retry
    assert math.isfinite(done[0].value)


@pytest.mark.slow
def test_another_question_on_the_apps_study_is_refused(app_dir):
    """One study, one question, for any app: after a sweep of lr over an interval, a sweep of
    lr=choice(0.1,0.3) on the same study name (which returned the earlier sweep's answer), a
    noise the study's runs did not have, or another task, are refused in one line before
    anything is asked: in the dry run too."""
    ok(sweep(app_dir, "lr=interval(0.01,0.1)", "hydra.sweeper.n_trials=2",
             "hydra.sweeper.study_name=q"))
    refusals = [
        (["lr=choice(0.1,0.3)"], "its search space differs from this sweep's (the study's -> "
         "this sweep's): lr interval(0.01, 0.1) -> choice(0.1, 0.3); "),
        (["lr=interval(0.01,0.1)", "noise=0.5"], "its runs differ from this sweep's in 1 key "
         "(the study's value -> this sweep's): noise 0.01 -> 0.5; "),
        (["lr=interval(0.01,0.1)", "hydra.sweeper.dry_run=true", "steps=7"],
         "steps 6 -> 7; "),
    ]
    for overrides, needle in refusals:
        r = sweep(app_dir, *overrides, "hydra.sweeper.n_trials=3", "hydra.sweeper.study_name=q")
        r.stderr = r.stderr.strip().splitlines()[-1]  # after Optuna's "Using an existing study"
        assert_one_line_error(r, "study 'q' in sqlite:///optuna.db answers another question: ",
                              needle, "start a new study with hydra.sweeper.study_name=NEW_NAME")
    shutil.copy(app_dir / "app.py", app_dir / "other.py")  # the same config, another task
    r = sweep(app_dir, "lr=interval(0.01,0.1)", "hydra.sweeper.n_trials=3",
              "hydra.sweeper.study_name=q", app="other.py")
    r.stderr = r.stderr.strip().splitlines()[-1]
    assert_one_line_error(r, "its task is app.main, this sweep's other.main; ")
    assert len(study_in(app_dir, "q").get_trials()) == 2  # nothing asked


INTERRUPTED_APP = '''"""The example app, interrupted by Ctrl-C in trial 1 (SIGINT raises KeyboardInterrupt in
the job, which the basic launcher runs in the sweeper's process)."""
import os

import hydra

import app


@hydra.main(version_base=None, config_path=".", config_name="config")
def main(cfg):
    if os.environ.get("RACING_TRIAL") == "1":
        raise KeyboardInterrupt
    return app.main.__wrapped__(cfg)


main()
'''


@pytest.mark.slow
def test_ctrl_c_in_an_apps_sweep_is_one_line_and_exit_130(app_dir):
    """Ctrl-C during another app's sweep: one line (was Hydra's 40-line KeyboardInterrupt
    trace), exit 130 as qknorm.train's own Ctrl-C; the study keeps trial 0."""
    (app_dir / "interrupted.py").write_text(INTERRUPTED_APP)
    r = sweep(app_dir, "lr=choice(0.1,0.12)", "hydra.sweeper.sampler.name=grid",
              "hydra.sweeper.n_trials=null", "hydra.sweeper.study_name=ctrlc", app="interrupted.py")
    assert r.returncode == 130, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("[I ")]  # Optuna's
    assert lines == ["interrupted: stopped by Ctrl-C; study 'ctrlc' in sqlite:///optuna.db keeps "
                     "its finished trials, and the ones that were running run again; rerun the "
                     "same command to resume it"]
    assert "Traceback" not in r.stdout + r.stderr
    states = [t.state for t in study_in(app_dir, "ctrlc").get_trials()]
    assert states == [TrialState.COMPLETE, TrialState.RUNNING]  # stale once its beats stop


@pytest.mark.slow
def test_an_apps_sweep_whose_outputs_cannot_be_written_is_refused_before_its_study(app_dir):
    """A sweep dir under a file (every trial failed with a traceback, after the study was
    made) and a study file under one: one line, exit 2, in the dry run as in the real run,
    and no study."""
    for override, line in [
        ("hydra.sweep.dir=app.py/sweep", "error: hydra.sweep.dir=app.py/sweep cannot be written: "
         "app.py is a file, not a folder; give hydra.sweep.dir a folder you can write to"),
        ("hydra.sweeper.storage=sqlite:///app.py/optuna.db",
         "error: hydra.sweeper.storage='sqlite:///app.py/optuna.db' cannot be written: app.py is "
         "a file, not a folder; give hydra.sweeper.storage a file in a folder you can write to"),
    ]:
        for dry in ("true", "false"):
            r = sweep(app_dir, "lr=choice(0.1,0.12)", f"hydra.sweeper.dry_run={dry}", override)
            assert r.returncode == 2 and r.stderr.strip() == line, r.stderr[-2000:]
    assert sorted(p.name for p in app_dir.iterdir()) == ["app.py", "config.yaml"]  # nothing made
