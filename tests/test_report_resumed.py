"""The report of a resumed sweep's dir covers its study's runs in every sweep dir: each rerun of
`search=p_grid` writes a new <stamp>/, and the report of the last one had only the trials run
there (7 of 8 p after a resume), with no word of the others."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import optuna
from hydra_racing_sweeper.study import JOB_DIRS_ATTR, JOBS_ATTR, RETRIED_ATTR, STATUS_ATTR
from optuna.trial import TrialState

from qknorm import rundir
from qknorm.report import results
from qknorm.report.build import load
from qknorm.report.computed import Options
from qknorm.report.summary import summarize
from tests.helpers.synthetic_runs import config, final, write_config, write_curve

optuna.logging.set_verbosity(optuna.logging.WARNING)

LOSS = {1.0: 2.0, 2.0: 1.5, 4.0: 1.6, math.inf: 1.9}


def resumed_grid(tmp_path: Path) -> tuple[Path, Path]:
    """A grid over p in {1, 2, 4, inf}, study `g`: its first sweep (S1) finished p = 1, 2, 4 and
    was killed while trial 3 (p = inf) ran; the rerun (S2) retried it as trial 4, which ran
    p = inf in S2. Returns (S1, S2)."""
    url = f"sqlite:///{tmp_path}/o.db"
    study = optuna.create_study(study_name="g", storage=url)
    dist = optuna.distributions.CategoricalDistribution(list(LOSS))
    s1, s2 = (tmp_path / "sweeps" / "p_grid" / s for s in ("S1", "S2"))
    for number, (p, sweep, state) in enumerate([
            (1.0, s1, TrialState.COMPLETE), (2.0, s1, TrialState.COMPLETE),
            (4.0, s1, TrialState.COMPLETE), (math.inf, s1, TrialState.FAIL),
            (math.inf, s2, TrialState.COMPLETE)]):
        run = sweep / f"trial{number}"
        write_config(run, config(p, 0, study=("g", url, number)))
        write_curve(run, LOSS[p], 10.0, p)
        done = state == TrialState.COMPLETE
        if done:  # the killed trial's run left no final.json
            rundir.write_final(run, final("completed", LOSS[p], 1.0, p, 0, 0))
        study.add_trial(optuna.trial.create_trial(
            state=state, value=LOSS[p] if done else None, params={"norm.p": p},
            distributions={"norm.p": dist},
            user_attrs={JOB_DIRS_ATTR: {"": str(run)},
                        **({STATUS_ATTR: "completed", JOBS_ATTR: [str(run)]} if done else {})},
            system_attrs={RETRIED_ATTR: 3} if number == 4 else {}))
    return s1, s2


def test_a_resumed_grids_last_sweep_dir_reports_every_p_of_its_study(tmp_path):
    _, s2 = resumed_grid(tmp_path)
    options = Options()
    collection = load(s2, options)  # results.collect, and the options checked against it
    runs = collection.runs
    # All 4 p, once each: S1's three and S2's retry; not the killed trial's run (its retry
    # stands for it), as the status counts the study's runs.
    assert sorted(runs["norm.p"]) == [1.0, 2.0, 4.0, math.inf]
    assert list(runs["run_dir"]) == ["trial4", "../S1/trial0", "../S1/trial1", "../S1/trial2"]
    assert list(runs["best_val_loss"]) == [1.9, 2.0, 1.5, 1.6]
    assert list(runs["trial"]) == [4, 0, 1, 2]
    summary = summarize(collection, options).splitlines()
    assert summary[2] == ("Covers every run of study g: 1 under this directory and 3 from its "
                          "other sweep dirs (../S1), which a resumed sweep wrote.")
    assert summary[4].startswith("4 runs, 4 completed")


def test_a_sweep_dir_that_holds_its_whole_study_says_nothing_more(tmp_path):
    s1, _ = resumed_grid(tmp_path)
    shutil.rmtree(tmp_path / "sweeps" / "p_grid" / "S2")  # its other sweep dir: not here
    collection = results.collect(s1)
    assert collection.covers is None
    assert list(collection.runs["run_dir"]) == ["trial0", "trial1", "trial2", "trial3"]


def test_a_rerun_that_found_its_study_done_reports_the_studys_runs(tmp_path):
    """A rerun of a finished study runs nothing: its sweep dir holds only the
    optimization_results.yaml the sweeper writes at its end, which names the study."""
    resumed_grid(tmp_path)
    s3 = tmp_path / "sweeps" / "p_grid" / "S3"
    s3.mkdir()
    (s3 / "optimization_results.yaml").write_text(
        f"study_name: g\nstorage: sqlite:///{tmp_path}/o.db\nn_trials: 4\n")
    collection = results.collect(s3)
    assert sorted(collection.runs["norm.p"]) == [1.0, 2.0, 4.0, math.inf]
    assert list(collection.runs["run_dir"]) == [
        "../S1/trial0", "../S1/trial1", "../S1/trial2", "../S2/trial4"]
    assert collection.covers == (
        "Covers every run of study g: none under this directory (its rerun found the study "
        "done) and 4 from its other sweep dirs (../S1, ../S2), which a resumed sweep wrote.")
