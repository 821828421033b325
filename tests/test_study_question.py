"""A study answers one question (qknorm/sweep/question.py): a rerun whose jobs' config differs in
a key that changes a run's value is refused before anything is asked, naming the keys; the
same command, or one that differs only in how fast or where its runs go, resumes it.

The sweep's opening of the study is driven in memory (OptunaSweep._open_study on an in-memory
storage) with the configs the checkout's presets compose; one CLI test has the planner's part.
"""

from __future__ import annotations

import dataclasses

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from qknorm.effective import flatten, task_tree
from qknorm.errors import UserError
from qknorm.sweep.question import question
from qknorm.sweep.schedule import EveryReplicate
from qknorm.sweep.space import parse_space
from qknorm.sweep.study import JOB_DIRS_ATTR, QUESTION_ATTR, STATUS_ATTR
from qknorm.sweep.sweep import OptunaSweep
from tests.helpers.cli import FAST, assert_one_line_error
from tests.helpers.config import compose_hydra_config
from tests.helpers.race import sweep_plan

VARIED = ("norm.p", "data.fold")  # search=p_tpe's searched key and replicate key


def asked(*overrides: str) -> dict:
    """The question of search=p_tpe's first job under these overrides, as the planner asks it."""
    cfg = compose_hydra_config("search=p_tpe", *overrides)
    return question(flatten(task_tree(cfg)), VARIED)


def open_study(storage, q: dict) -> optuna.Study:
    """The sweeper's opening of study "p_tpe" for a plain sweep whose jobs ask `q`."""
    sweep = OptunaSweep(study_name="p_tpe", storage="sqlite:///outputs/optuna.db",
                        direction="minimize", objectives=["best_val_loss"], n_trials=2, n_jobs=1,
                        sampler={"name": "random", "seed": 0}, pruner={"name": "none"},
                        replicates={}, max_failure_rate=0.0, fail_value=None,
                        heartbeat_interval=1, grace_period=None, params={})
    space, _ = parse_space({"norm.p": "choice(2.0,4.0)"}, [])
    plan = dataclasses.replace(sweep_plan(space, 2), question=q, varied=VARIED)
    return sweep._open_study(storage, plan, EveryReplicate)


def test_another_lr_or_experiment_is_refused_naming_the_keys_that_differ():
    storage = optuna.storages.InMemoryStorage()
    open_study(storage, asked("experiment=smoke", "optimizer.lr=1e-3"))
    with pytest.raises(UserError) as e:
        open_study(storage, asked("experiment=smoke", "optimizer.lr=3e-3"))
    assert str(e.value) == (
        "study 'p_tpe' in sqlite:///outputs/optuna.db answers another question: its runs differ "
        "from this sweep's in 1 key (the study's value -> this sweep's): optimizer.lr 0.001 -> "
        "0.003; rerun with the study's values to add to it, or start a new study with "
        "hydra.sweeper.study_name=NEW_NAME")
    # search=p_tpe after experiment=smoke: every key conf/experiment/smoke.yaml and its
    # model=tiny set (tiny: 1 layer, 2 heads, 32 wide, 32 tokens; conf/model/tiny.yaml).
    with pytest.raises(UserError) as e:
        open_study(storage, asked())
    assert ("in 9 keys (the study's value -> this sweep's): model.block_size 32 -> 64, "
            "model.n_embd 32 -> 128, model.n_head 2 -> 4, model.n_layer 1 -> 4, "
            "optimizer.warmup_iters 5 -> 100, train.batch_size 8 -> 12, train.eval_interval "
            "10 -> 250, train.eval_iters 2 -> 20, train.max_iters 30 -> 2000; ") in str(e.value)


def test_the_docs_two_gamma_inits_are_two_questions():
    storage = optuna.storages.InMemoryStorage()
    open_study(storage, asked("experiment=paper_cpu", "norm.gamma_init=qknorm"))
    with pytest.raises(UserError, match=r"in 1 key .*: norm.gamma_init qknorm -> calibrated; "):
        open_study(storage, asked("experiment=paper_cpu", "norm.gamma_init=calibrated"))


def test_the_same_question_resumes_whatever_runs_it_and_however_fast():
    storage = optuna.storages.InMemoryStorage()
    study = open_study(storage, asked("experiment=smoke"))
    study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=1.0))
    # threads, device, compile: how fast and where, not what; the sweeper's keys are hydra's;
    # a searched value or a replicate is what a study varies.
    again = open_study(storage, asked("experiment=smoke", "threads=2", "device=cpu",
                                      "compile=false", "hydra.sweeper.n_jobs=4",
                                      "hydra.sweeper.n_trials=40", "norm.p=4.0", "data.fold=1"))
    assert len(again.get_trials()) == 1


def test_a_study_from_before_the_record_is_read_from_its_run_dirs(tmp_path):
    """A study whose trials predate the record: its question is read from a run dir's
    .hydra/config.yaml, so a changed config is refused there too; a key the run dir lacks was
    added since, and is not compared."""
    cfg = compose_hydra_config("search=p_tpe", "experiment=smoke", "optimizer.lr=1e-3")
    run_dir = tmp_path / "trial0_0"
    (run_dir / ".hydra").mkdir(parents=True)
    tree = task_tree(cfg)
    del tree["train"]["diag_batches"]  # a run from before the key: not a difference
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(tree))
    storage = optuna.storages.InMemoryStorage()
    old = optuna.create_study(study_name="p_tpe", storage=storage)
    old.add_trial(optuna.trial.create_trial(
        state=TrialState.COMPLETE, value=1.0,
        user_attrs={STATUS_ATTR: "completed", JOB_DIRS_ATTR: {"": str(run_dir)}}))
    with pytest.raises(UserError, match=r": optimizer.lr 0.001 -> 0.003; "):
        open_study(storage, asked("experiment=smoke", "optimizer.lr=3e-3"))
    assert len(open_study(storage, asked("experiment=smoke")).get_trials()) == 1


@pytest.mark.slow
def test_the_planner_asks_the_question_of_the_command_line(cli):
    """Through the command line: a study whose runs had train.max_iters=10 (recorded as the
    planner would, from the composed config) refuses search=p_grid at the smoke preset's 20
    steps, before anything trains; the planner's question leaves out the searched norm.p."""
    cfg = compose_hydra_config("search=p_grid", *FAST, "train.max_iters=10")
    (cli.cwd / "outputs").mkdir()
    study = optuna.create_study(study_name="p_grid", storage="sqlite:///outputs/optuna.db"
                                .replace("outputs", str(cli.cwd / "outputs")))
    study.set_user_attr(QUESTION_ATTR, question(flatten(task_tree(cfg)), ["norm.p"]))
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, "norm.p=choice(2.0,4.0)")
    r.stderr = r.stderr.strip().splitlines()[-1]  # after Optuna's "Using an existing study"
    assert_one_line_error(r, "study 'p_grid' in sqlite:///outputs/optuna.db answers another "
                          "question: its runs differ from this sweep's in 1 key (the study's "
                          "value -> this sweep's): train.max_iters 10 -> 20; ",
                          "hydra.sweeper.study_name=NEW_NAME")
    assert not (cli.cwd / "outputs" / "sweeps").exists()  # nothing ran
