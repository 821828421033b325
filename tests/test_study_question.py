"""A study answers one question (hydra_racing_sweeper/question.py): a rerun whose jobs' config differs in
a key that changes a run's value is refused before anything is asked, naming the keys; the
same command, or one that differs only in how fast or where its runs go, resumes it.

The sweep's opening of the study is driven in memory (OptunaSweep._open_study on an in-memory
storage) with the configs the checkout's presets compose; one CLI test has the planner's part.
"""

from __future__ import annotations

import dataclasses
import re

import optuna
import pytest
import yaml
from hydra_racing_sweeper.question import question, task_name
from hydra_racing_sweeper.schedule import EveryReplicate
from hydra_racing_sweeper.space import parse_space
from hydra_racing_sweeper.study import JOB_DIRS_ATTR, QUESTION_ATTR, STATUS_ATTR
from hydra_racing_sweeper.sweep import OptunaSweep
from hydra_racing_sweeper.task import TaskHook
from optuna.trial import TrialState

from qknorm.effective import flatten, task_tree
from qknorm.errors import UserError
from qknorm.sweep.hook import QknormTask
from tests.helpers.cli import FAST, assert_one_line_error
from tests.helpers.config import compose_hydra_config
from tests.helpers.race import sweep_plan

VARIED = ("norm.p", "data.fold")  # search=p_tpe's searched key and replicate key


def asked(*overrides: str) -> dict:
    """The question of search=p_tpe's first job under these overrides, as the planner asks it."""
    cfg = compose_hydra_config("search=p_tpe", *overrides)
    return question(flatten(task_tree(cfg)), VARIED, QknormTask())


def open_study(storage, q: dict | None, params: dict | None = None,
               task: str | None = None) -> optuna.Study:
    """The sweeper's opening of study "p_tpe" for a plain sweep whose jobs ask `q`, searching
    `params` (hydra.sweeper.params as written; default norm.p over 2 and 4), run by `task`."""
    sweep = OptunaSweep(study_name="p_tpe", storage="sqlite:///outputs/optuna.db",
                        direction="minimize", objectives=["best_val_loss"], n_trials=2, n_jobs=1,
                        sampler={"name": "random", "seed": 0}, pruner={"name": "none"},
                        replicates={}, max_failure_rate=0.0, fail_value=None,
                        heartbeat_interval=1, grace_period=None, params={})
    space, _ = parse_space(params or {"norm.p": "choice(2.0,4.0)"}, [])
    plan = dataclasses.replace(sweep_plan(space, 2), question=q, varied=VARIED, task=task,
                               hook=QknormTask())
    return sweep._open_study(storage, plan, EveryReplicate)


def asked_over(study: optuna.Study, params: dict) -> None:
    """One trial asked over `params`' space, as the sweeper asks (Optuna keeps its
    distributions with the trial)."""
    study.ask(parse_space(params, [])[0].distributions)


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
    study.set_user_attr(QUESTION_ATTR, question(flatten(task_tree(cfg)), ["norm.p"], QknormTask()))
    r = cli("-m", "qknorm.train", "search=p_grid", *FAST, "norm.p=choice(2.0,4.0)")
    r.stderr = r.stderr.strip().splitlines()[-1]  # after Optuna's "Using an existing study"
    assert_one_line_error(r, "study 'p_grid' in sqlite:///outputs/optuna.db answers another "
                          "question: its runs differ from this sweep's in 1 key (the study's "
                          "value -> this sweep's): train.max_iters 10 -> 20; ",
                          "hydra.sweeper.study_name=NEW_NAME")
    assert not (cli.cwd / "outputs" / "sweeps").exists()  # nothing ran


# -- the search space and the task: the rest of the question -------------------------------------

P_GRID = {"norm.p": "choice(1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, inf)"}  # conf/search/p_grid.yaml
P_TPE = {"1/norm.p": "interval(0.0, 1.0)"}  # conf/search/p_tpe.yaml


def test_another_grid_on_a_grid_study_is_refused_naming_both_spaces():
    """search=p_grid, then 'norm.p=choice(1,8)' on the same study: its trials walked the
    preset's grid, so "8/2 finished" would answer from p it never asked (p = 8 never ran)."""
    storage = optuna.storages.InMemoryStorage()
    q = asked("experiment=smoke")
    asked_over(open_study(storage, q, P_GRID), P_GRID)
    with pytest.raises(UserError) as e:
        open_study(storage, q, {"norm.p": "choice(1,8)"})
    assert str(e.value) == (
        "study 'p_tpe' in sqlite:///outputs/optuna.db answers another question: its search "
        "space differs from this sweep's (the study's -> this sweep's): norm.p choice(1.0, 1.5, "
        "2.0, 2.5, 3.0, 3.5, 4.0, inf) -> choice(1, 8); rerun with the study's values to add to "
        "it, or start a new study with hydra.sweeper.study_name=NEW_NAME")
    assert len(open_study(storage, q, P_GRID).get_trials()) == 1  # the same grid resumes


def test_another_interval_on_a_tpe_study_is_refused_naming_both_params():
    """search=p_tpe with 'norm.p=interval(2,4)' on a study that searched 1/norm.p over [0, 1]
    (p in [1, inf]): its best, p = 1.087, lies outside what is asked."""
    storage = optuna.storages.InMemoryStorage()
    q = asked("experiment=smoke")
    asked_over(open_study(storage, q, P_TPE), P_TPE)
    with pytest.raises(UserError, match=re.escape(
            "its search space differs from this sweep's (the study's -> this sweep's): 1/norm.p "
            "interval(0.0, 1.0) -> unset, norm.p unset -> interval(2.0, 4.0); rerun")):
        open_study(storage, q, {"norm.p": "interval(2,4)"})
    with pytest.raises(UserError, match=re.escape(
            "(the study's -> this sweep's): 1/norm.p interval(0.0, 1.0) -> interval(0.0, 0.5); ")):
        open_study(storage, q, {"1/norm.p": "interval(0.0, 0.5)"})  # the same key, narrower
    with pytest.raises(UserError, match=re.escape(
            "1/norm.p interval(0.0, 1.0) -> tag(log, interval(0.01, 1.0)); ")):
        open_study(storage, q, {"1/norm.p": "tag(log, interval(0.01, 1.0))"})


def test_a_space_and_a_config_that_both_differ_are_named_in_one_line():
    storage = optuna.storages.InMemoryStorage()
    asked_over(open_study(storage, asked("experiment=smoke"), P_GRID), P_GRID)
    with pytest.raises(UserError) as e:
        open_study(storage, asked("experiment=smoke", "optimizer.lr=3e-3"), {"norm.p": "range(1,3)"})
    # range(1,3) is the ordered whole numbers 1..2 (as int(interval(1, 2))), not a choice
    assert ("(the study's -> this sweep's): norm.p choice(1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, inf) "
            "-> tag(int, interval(1, 2)); its runs differ from this sweep's in 1 key (the study's value -> "
            "this sweep's): optimizer.lr 0.001 -> 0.003; rerun") in str(e.value)
    assert len(str(e.value).splitlines()) == 1


# Another app's question: its whole config less the searched and replicate keys (no qknorm
# effective config: which keys only say how fast, only the app knows), and its task.
APP_CONFIG = {"seed": 0, "lr": 0.01, "steps": 100, "noise": 0.01}  # examples/noisy_app/config.yaml


def test_another_apps_config_and_task_are_its_question():
    assert question(flatten(APP_CONFIG), ["lr", "seed"], TaskHook()) == {"noise": 0.01, "steps": 100}
    # nested keys by their dotted names; a device key counts (the app's, not qknorm's)
    assert question(flatten({"model": {"width": 8}, "device": "cpu", "lr": 1}), ["lr"], TaskHook()) == {
        "device": "cpu", "model.width": 8}
    storage = optuna.storages.InMemoryStorage()
    app = question(flatten(APP_CONFIG), ["lr"], TaskHook())
    study = open_study(storage, app, {"lr": "interval(0.01,0.1)"}, task="app.main")
    asked_over(study, {"lr": "interval(0.01,0.1)"})
    assert study.user_attrs["task"] == "app.main"
    with pytest.raises(UserError, match=re.escape(
            "answers another question: its search space differs from this sweep's (the study's "
            "-> this sweep's): lr interval(0.01, 0.1) -> choice(0.1, 0.3); rerun")):
        open_study(storage, app, {"lr": "choice(0.1,0.3)"}, task="app.main")
    with pytest.raises(UserError, match=re.escape(
            "answers another question: its task is app.main, this sweep's other.main; rerun")):
        open_study(storage, app, {"lr": "interval(0.01,0.1)"}, task="other.main")
    with pytest.raises(UserError, match=re.escape(
            "in 1 key (the study's value -> this sweep's): noise 0.01 -> 0.5; rerun")):
        open_study(storage, question(flatten({**APP_CONFIG, "noise": 0.5}), ["lr"], TaskHook()),
                   {"lr": "interval(0.01,0.1)"}, task="app.main")
    assert len(open_study(storage, app, {"lr": "interval(0.01,0.1)"},
                          task="app.main").get_trials()) == 1


def test_a_task_is_named_by_the_module_it_was_defined_in():
    assert task_name(asked) == "tests.test_study_question.asked"
    script = {"__name__": "__main__", "__file__": "/somewhere/app.py", "__spec__": None}
    exec("def main(cfg):\n    return 0\n", script)  # a function of a script run as app.py
    assert task_name(script["main"]) == "app.main"


@pytest.mark.slow
def test_a_grid_study_refuses_another_grid_through_the_command_line(cli):
    """The command line's part: a study whose one trial was asked over the preset's grid (as
    search=p_grid asks) refuses 'norm.p=choice(1,8)', in the dry run and the real run, before
    anything is asked or trained."""
    (cli.cwd / "outputs").mkdir()
    study = optuna.create_study(study_name="p_grid",
                                storage=f"sqlite:///{cli.cwd / 'outputs' / 'optuna.db'}")
    asked_over(study, P_GRID)
    for dry in ("true", "false"):
        r = cli("-m", "qknorm.train", "search=p_grid", *FAST, "norm.p=choice(1,8)",
                f"hydra.sweeper.dry_run={dry}")
        r.stderr = r.stderr.strip().splitlines()[-1]  # after Optuna's "Using an existing study"
        assert_one_line_error(r, "study 'p_grid' in sqlite:///outputs/optuna.db answers another "
                              "question: its search space differs from this sweep's (the "
                              "study's -> this sweep's): norm.p choice(1.0, 1.5, 2.0, 2.5, 3.0, "
                              "3.5, 4.0, inf) -> choice(1, 8); ",
                              "hydra.sweeper.study_name=NEW_NAME")
    assert len(study.get_trials()) == 1  # nothing asked
    assert not (cli.cwd / "outputs" / "sweeps").exists()  # nothing ran
