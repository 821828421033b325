"""Lines and columns the docs promise, by value: the sweeper's status lines after every tell
(docs/status.md), `python -m qknorm.status` on a folder of several sweeps (one block per study),
a race's "N of them undecided" (docs/race.md), trials.csv's `race` column saying `level`, and
README.md's docs tree naming every docs page."""

from __future__ import annotations

import math

import optuna
import pandas as pd
import pytest
from hydra_racing_sweeper import readback
from optuna.trial import TrialState

from tests.helpers import REPO
from tests.helpers.studies import DONE_BLOCK, finished_study, frozen, new_study, run, trial

FOLDS = [f"data.fold={f}" for f in range(3)]


def survived_race(equivalence: float | None) -> readback.Elimination:
    """Three candidates that ran every fold: p=1 leads, p=2 and p=inf are neither shown worse
    nor level (their Δ is too noisy for 3 folds)."""
    settings = {"min_replicates": 2, "alpha": 0.05, "baseline": None, "blocks": FOLDS,
                "candidates": ["norm.p=1.0", "norm.p=2.0", "norm.p=inf"],
                "equivalence": equivalence}
    survived = {"outcome": "survived", "n": 3, "after": FOLDS[2], "leader": "norm.p=1.0"}
    values = {1.0: [1.0, 1.1, 1.2], 2.0: [1.05, 1.08, 1.3], math.inf: [1.0, 1.2, 1.25]}
    trials = {f"norm.p={p}": frozen(p, {f: run(v) for f, v in zip(FOLDS, vs)},
                                    TrialState.COMPLETE, dict(survived))
              for p, vs in values.items()}
    return readback.elimination_of(settings, trials)


def test_a_race_that_ends_with_survivors_says_how_many_are_undecided():
    e = survived_race(equivalence=0.03)
    assert [r["answer"] for r in e.rows] == ["best", "undecided", "undecided"]
    assert readback.summary_line(e) == (
        "race: 0 of 3 candidates dropped, 3 left (norm.p=1.0, norm.p=2.0, norm.p=inf), 2 of them "
        "undecided; ran 9 of 9 runs (100% of the grid), 27 core-seconds (100% of the grid's "
        "estimate), 270 training steps (100%)")
    # without an equivalence margin no survivor could have been decided: no such count
    assert readback.summary_line(survived_race(equivalence=None)) == (
        "race: 0 of 3 candidates dropped, 3 left (norm.p=1.0, norm.p=2.0, norm.p=inf); ran 9 of "
        "9 runs (100% of the grid), 27 core-seconds (100% of the grid's estimate), 270 training "
        "steps (100%)")


def test_trials_csv_says_level_for_a_candidate_that_left_level(tmp_path):
    from hydra_racing_sweeper import outputs
    from hydra_racing_sweeper.study import PARAMS_ATTR, RACE_OUTCOME_ATTR, STATUS_ATTR

    study = new_study(None, "r")
    dist = {"norm.p": optuna.distributions.CategoricalDistribution([1.0, 4.0])}
    level = {"outcome": "level", "n": 2, "after": "data.fold=1", "leader": "norm.p=1.0",
             "delta": 0.004, "p": 0.2, "p_adjusted": 0.2, "low": -0.01, "high": 0.018}
    study.add_trial(optuna.trial.create_trial(
        params={"norm.p": 1.0}, distributions=dist, value=3.5, user_attrs={
            STATUS_ATTR: "completed", PARAMS_ATTR: {"norm.p": 1.0}, RACE_OUTCOME_ATTR: {
                "outcome": "survived", "n": 3, "after": "data.fold=2", "leader": "norm.p=1.0"}}))
    study.add_trial(optuna.trial.create_trial(
        params={"norm.p": 4.0}, distributions=dist, state=TrialState.PRUNED, user_attrs={
            STATUS_ATTR: "pruned", PARAMS_ATTR: {"norm.p": 4.0}, RACE_OUTCOME_ATTR: level}))
    _, trials_csv = outputs.write(study, tmp_path, ["best_val_loss"], 2, "memory")
    rows = pd.read_csv(trials_csv).to_dict("records")
    assert [(r["trial"], r["state"], r["status"], r["norm.p"], r["race"], r["race_after"])
            for r in rows] == [(0, "COMPLETE", "completed", 1.0, "survived", "data.fold=2"),
                               (1, "PRUNED", "pruned", 4.0, "level", "data.fold=1")]
    assert math.isnan(rows[1]["best_val_loss"])  # a level candidate's mean is not a result


def test_status_of_a_folder_of_several_sweeps_prints_one_block_per_study(tmp_path):
    """Two sweeps (two studies in one storage) under outputs/sweeps: `python -m qknorm.status
    outputs/sweeps` prints both, each as it prints alone."""
    from qknorm.status import parse_args
    from qknorm.status import run as status_run

    (tmp_path / "outputs").mkdir()
    url = f"sqlite:///{tmp_path}/outputs/o.db"
    finished_study(url, "done")
    other = new_study(url, "other")
    other.add_trial(trial(0, TrialState.COMPLETE, 200, 50, 4.25, status="completed", n=1))
    for name, study, n_trials in (("a", "done", 2), ("b", "other", 1)):
        sweep_dir = tmp_path / "outputs" / "sweeps" / name / "DATE"
        sweep_dir.mkdir(parents=True)
        (sweep_dir / "optimization_results.yaml").write_text(
            f"study_name: {study}\nstorage: sqlite:///outputs/o.db\nn_trials: {n_trials}\n")
    lines = status_run(parse_args([str(tmp_path / "outputs" / "sweeps")]))
    assert "\n".join(lines) + "\n" == DONE_BLOCK + (
        "study other:\n"
        "  trials 1/1: 1 complete, 0 pruned, 0 failed, 0 running; elapsed 50s, done\n"
        "  best: trial 0 (norm.p=2) 4.2500\n"
        "  spent: 0 jobs, 0 training steps, 0 core-h\n")


@pytest.mark.slow
def test_the_sweeper_logs_the_status_lines_after_every_tell(cli):
    r = cli("-m", "qknorm.train", "search=p_tpe_plain", "experiment=smoke", "threads=1",
            "train.max_iters=20", "train.eval_interval=10", "hydra.sweeper.study_name=st",
            "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1",
            "hydra.sweeper.replicates={data.fold:[9]}")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    trials = [ln.split("] ", 1)[-1] for ln in out.splitlines() if "trials " in ln and "/2: " in ln]
    assert [t.split(";")[0] for t in trials] == [
        "trials 1/2: 1 complete, 0 pruned, 0 failed, 0 running",
        "trials 2/2: 2 complete, 0 pruned, 0 failed, 0 running"]
    assert trials[-1].endswith(", done")
    best = [ln for ln in out.splitlines() if "best: trial " in ln]
    spent = [ln.split("] ", 1)[-1] for ln in out.splitlines() if "spent: " in ln]
    assert len(best) == 2 and spent[0].startswith("spent: 1 jobs, 20 training steps, ")
    assert spent[1].startswith("spent: 2 jobs, 40 training steps, ")


def test_the_readmes_docs_tree_names_every_docs_page():
    """README.md's "Documentation" tree lists each docs/*.md with one line."""
    readme = (REPO / "README.md").read_text()
    tree = readme.split("## Documentation", 1)[1].split("```")[1]
    listed = {line.split("── ", 1)[1].split()[0] for line in tree.splitlines() if "── " in line}
    pages = {p.name for p in (REPO / "docs").glob("*.md")}
    assert sorted(pages - listed) == []
