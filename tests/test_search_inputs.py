"""A search's input errors are refused at plan time, before any study, run dir or training:
one line naming the bad value and the fix, exit 2 (docs/failures.md, docs/sweeper.md)."""

from __future__ import annotations

import pytest

from tests.helpers.cli import assert_one_line_error

pytestmark = pytest.mark.slow  # each case starts the real command line (5-10 s on 2 cores)

# the smoke runs (30 steps) end before the preset's rungs (500, 1000): no rungs, so the only
# mistake is the one under test; one trial, so a check that misses trains for seconds, not minutes
SMOKE = ["experiment=smoke", "threads=1", "~hydra.sweeper.race.rungs", "hydra.sweeper.n_trials=1"]

# (id, overrides, [substrings of the one line]): a search space outside its key's domain, a
# replicate out of range of the composed config, a p searched that the norm never reads
BAD_SEARCHES = [
    ("p_interval_below_1", ["norm.p=interval(0.5,0.9)"],
     ["hydra.sweeper.params.norm.p=interval(0.5,0.9)", "0.5 is below 1",
      "norm.p must be >= 1 or inf"]),
    ("p_choice_below_1", ["norm.p=choice(2,0.5)"],
     ["hydra.sweeper.params.norm.p=choice(2,0.5)", "0.5 is below 1"]),
    # the preset's folds 0-4 under 2 folds: fold 2 would fail after the first runs trained
    ("fold_beyond_n_folds", ["data.n_folds=2", "hydra.sweeper.race.min_replicates=3"],
     ["hydra.sweeper.replicates.data.fold=[0, 1, 2, 3, 4]",
      "data.fold=2 is out of range for data.n_folds=2", "data.fold=0,1"]),
    ("p_under_norm_none", ["norm=none"],
     ["hydra.sweeper.params.1/norm.p searches norm.p", "norm.kind=none reads no p",
      "norm=lp"]),
    ("p_under_rms", ["norm=rms", "norm.p=interval(1,8)"],
     ["hydra.sweeper.params.norm.p searches norm.p", "norm.kind=rms reads no p"]),
    # a sweeper key is not in --cfg job's list: the line points where it is
    ("unknown_sweeper_key", ["hydra.sweeper.n_trial=3"],
     ["hydra.sweeper.n_trial is not a config key", "did you mean hydra.sweeper.n_trials?",
      "--cfg hydra` lists the hydra.* keys (hydra.sweeper.*: docs/sweeper.md)"]),
]


@pytest.mark.parametrize("overrides, needles", [c[1:] for c in BAD_SEARCHES],
                         ids=[c[0] for c in BAD_SEARCHES])
def test_a_bad_search_is_refused_before_anything_is_written(cli, overrides, needles):
    r = cli("-m", "qknorm.train", "search=p_tpe", *SMOKE, *overrides)
    assert_one_line_error(r, *needles)
    assert not (cli.cwd / "outputs").exists()  # no study, no sweep dir, no run


def test_a_dry_run_refuses_what_the_real_run_would(cli):
    """A study raced with other settings (here rungs [10]) refused the real run after a clean
    dry run (issue 54): the dry run reads the study with the same checks, and writes nothing."""
    import optuna

    (cli.cwd / "outputs").mkdir()
    db = cli.cwd / "outputs" / "optuna.db"
    study = optuna.create_study(study_name="p_tpe", storage=f"sqlite:///{db}")
    study.set_user_attr("race", {"rungs": [10]})
    before = db.read_bytes()
    r = cli("-m", "qknorm.train", "search=p_tpe", *SMOKE, "hydra.sweeper.dry_run=true")
    assert_one_line_error(r, "study 'p_tpe' was raced with", "hydra.sweeper.study_name")
    assert db.read_bytes() == before


def test_a_grid_logs_its_plan_and_takes_dry_run(cli):
    """-m under qknorm_basic: the plan line, and dry_run stops before any job (issue 54)."""
    r = cli("-m", "qknorm.train", "-m", "experiment=smoke", "threads=1", "norm=none,lp",
            "norm.p=2,4", "hydra.sweeper.dry_run=true", "hydra.sweep.dir=grid")
    assert r.returncode == 0, r.stderr
    # 3 jobs (norm=none once) of smoke's 30 steps, evals at 0, 10, 20, 30: 90 steps, 12 evals
    assert "plan: 3 jobs, 90 training steps and 12 evals; about " in r.stderr + r.stdout
    assert "dry run (hydra.sweeper.dry_run=true)" in r.stdout
    assert not (cli.cwd / "grid").exists()
