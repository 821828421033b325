"""Racing over replicates (issue 13, part 1): the decision rule on objectives with a known
answer, the committed grids replayed as races, the checks, and a real race through the CLI that
is killed and resumed (tests/helpers/race_task.py, a task whose losses are a table)."""

from __future__ import annotations

import math
import shlex
import statistics

import numpy as np
import optuna
import pandas as pd
import pytest
from hydra_racing_sweeper import racing, readback
from hydra_racing_sweeper.multitest import PAIRED_T, for_folds
from hydra_racing_sweeper.race import looks
from optuna.trial import TrialState
from scipy import stats

from qknorm.errors import UserError
from qknorm.report.summary import race_section
from tests.helpers import REPO
from tests.helpers.config import compose_hydra_config
from tests.helpers.race import RACE, TASK, calls, plan, two_sweepers
from tests.helpers.studies import age_heartbeats, study_of

P_GRID = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, math.inf]


# -- the statistics ----------------------------------------------------------------------------

def test_one_sided_paired_t_is_scipys_and_ties_never_drop():
    rng = np.random.default_rng(0)
    for n in (2, 3, 5):
        x, y = rng.normal(size=n), rng.normal(size=n)
        want = stats.ttest_rel(x, y, alternative="greater").pvalue
        assert looks.paired_t_greater(list(x - y)) == pytest.approx(want, rel=1e-12)
    assert looks.paired_t_greater([0.0, 0.0, 0.0]) == 1.0  # identical runs: a tie
    assert looks.paired_t_greater([0.5, 0.5, 0.5]) == 0.0  # the same gap on every fold
    assert looks.paired_t_greater([-0.5, -0.5]) == 1.0


# -- the race on synthetic objectives ------------------------------------------------------------

def synthetic(means: dict, n_blocks: int, noise: float, seed: int = 0) -> dict:
    """values[c][b] = mean_c + a block effect shared by every c (large) + noise (small)."""
    rng = np.random.default_rng(seed)
    block = rng.normal(scale=1.0, size=n_blocks)
    return {c: dict(enumerate(m + block + rng.normal(scale=noise, size=n_blocks)))
            for c, m in means.items()}


def test_clearly_worse_candidates_drop_at_the_first_look_and_ties_survive():
    means = {"a": 0.0, "b": 0.0, "c": 0.3, "d": 0.6, "e": 1.0}
    values = synthetic(means, n_blocks=6, noise=0.02)
    values["a2"] = dict(values["a"])  # the same runs again: an exact tie with a
    r = looks.replay_race(list(values), values, set(), n_blocks=6, min_blocks=3, alpha=0.05)
    assert [lk.n for lk in r.looks] == [3, 4, 5, 6] and r.over
    assert r.looks[0].dropped == ("c", "d", "e")  # dropped after the minimum 3 blocks
    assert all(not lk.dropped for lk in r.looks[1:])
    assert r.alive == ["a", "b", "a2"]  # the best and its equals run every block
    first = r.looks[0]
    for c in "cde":  # the paired difference removes the block effect
        assert first.tests[c].delta == pytest.approx(means[c], abs=0.05)
    # b leads (level with a, its noise lower); a and its exact tie a2 get the same test, and
    # survive it.
    assert first.leader == "b"
    assert first.tests["a"] == first.tests["a2"]
    assert first.tests["a2"].delta == pytest.approx(0.03558052772184555, rel=1e-9)
    assert first.tests["a2"].p_adjusted == pytest.approx(0.19966130033896437, rel=1e-9)


def test_the_baseline_is_never_dropped_so_the_race_runs_every_block():
    values = synthetic({"best": 0.0, "base": 0.5, "bad": 1.0}, n_blocks=5, noise=0.02)
    without = looks.replay_race(list(values), values, set(), 5, 3, 0.05)
    assert without.alive == ["best"] and [lk.n for lk in without.looks] == [3]
    kept = looks.replay_race(list(values), values, set(), 5, 3, 0.05, baseline="base")
    assert kept.alive == ["best", "base"] and [lk.n for lk in kept.looks] == [3, 4, 5]
    assert kept.looks[0].dropped == ("bad",)
    assert all(lk.tests["base"].p_adjusted <= 0.05 for lk in kept.looks)  # worse, but kept


def test_a_look_waits_for_live_candidates_and_a_failed_one_leaves_without_a_test():
    values = synthetic({"a": 0.0, "b": 1.0, "c": 0.0}, n_blocks=4, noise=0.02)
    partial = {"a": values["a"], "b": values["b"], "c": {0: values["c"][0]}}
    waiting = looks.replay_race(["a", "b", "c"], partial, {"c"}, 4, 3, 0.05)
    assert waiting.need == 3 and not waiting.looks and waiting.alive == ["a", "b", "c"]
    failed = looks.replay_race(["a", "b", "c"], partial, set(), 4, 3, 0.05)  # c's run failed
    assert failed.gone == {"c": 3} and "c" not in failed.looks[0].tests
    assert failed.looks[0].dropped == ("b",) and failed.alive == ["a"] and failed.over


def test_a_spent_budget_ends_the_race_where_it_stands_instead_of_waiting_for_a_block():
    values = synthetic({"a": 0.0, "b": 0.02, "c": 1.0}, n_blocks=5, noise=0.02)
    partial = {c: {b: v[b] for b in range(4)} for c, v in values.items()}  # 4 of 5 blocks run
    going = looks.replay_race(["a", "b", "c"], partial, {"a", "b", "c"}, 5, 3, 0.05)
    assert going.need == 5 and not going.over
    spent = looks.replay_race(["a", "b", "c"], partial, {"a", "b", "c"}, 5, 3, 0.05,
                         budget_spent=True)
    assert spent.over and spent.need is None
    assert [lk.n for lk in spent.looks] == [lk.n for lk in going.looks] == [3, 4]  # same looks
    assert spent.alive == going.alive and "c" not in spent.alive
    whole = looks.replay_race(["a", "b", "c"], values, set(), 5, 3, 0.05, budget_spent=True)
    assert [lk.n for lk in whole.looks] == [3, 4, 5]  # every block in: the budget changes nothing


@pytest.mark.parametrize("gamma_init, baseline, runs, dropped, test", [
    ("qknorm", 2.0, 28, {1.0: 3, 2.5: 3, 3.0: 3, 3.5: 3, 4.0: 3, math.inf: 3}, PAIRED_T),
    ("calibrated", 2.0, 39, {1.0: 4}, PAIRED_T),
    ("calibrated", None, 38, {1.0: 4, 2.0: 4}, PAIRED_T),  # p = 2 not protected
    # The corrected t of the 5-fold layout (the race's test since issue 34): p = 2.5 and 3.5
    # need a fourth fold, and on the calibrated grid no p is dropped, p = 2 alone after fold 5.
    ("qknorm", 2.0, 30, {1.0: 3, 2.5: 4, 3.0: 3, 3.5: 4, 4.0: 3, math.inf: 3}, for_folds(5)),
    ("calibrated", 2.0, 40, {}, for_folds(5)),
    ("calibrated", None, 40, {2.0: 5}, for_folds(5)),
])
def test_the_committed_grids_replayed_as_races(gamma_init, baseline, runs, dropped, test):
    """docs/results' 5-fold grids, replayed fold by fold: which p a race would have dropped
    after how many folds, and how many of the 40 runs it would have run, under the plain and
    the corrected test."""
    df = pd.read_csv(REPO / "docs" / "results" / "paper_cpu" / gamma_init / "results.csv")
    values = {p: dict(zip(g["data.fold"], g["best_val_loss"], strict=True))
              for p, g in df.groupby("norm.p")}
    assert sorted(values) == P_GRID
    r = looks.replay_race(P_GRID, values, set(), 5, 3, 0.05, baseline, test=test)
    assert {p: lk.n for p, lk in r.dropped().items()} == dropped
    assert sum(dropped.get(p, 5) for p in P_GRID) == runs
    assert r.looks[-1].leader == (2.0 if gamma_init == "qknorm" else 4.0)


# -- the checks ---------------------------------------------------------------------------------

def test_a_race_spec_names_its_candidates_blocks_and_baseline():
    spec = plan({"min_replicates": 3, "alpha": 0.05, "baseline": 2})
    assert spec.candidates == ((1.0,), (2.0,), (math.inf,)) and spec.baseline == (2.0,)
    assert spec.labels[(math.inf,)] == "norm.p=inf" and spec.sign == 1.0
    assert spec.blocks == tuple(f"data.fold={f}" for f in range(5))
    assert plan({"baseline": "inf"}).baseline == (math.inf,)  # as a YAML file gives it
    assert plan({}, directions=["maximize"]) is None  # {}: no race
    assert plan({"alpha": 0.1}, directions=["maximize"]).sign == -1.0


ON = {"alpha": 0.05}  # a race with every other setting at its default
BAD_RACES = [
    ({"min_replicates": 3}, {"folds": (0, 1)},
     "hydra.sweeper.race.min_replicates=3 but the replicates give 2 (data.fold=0, data.fold=1)"),
    (ON, {"folds": ()}, "hydra.sweeper.race needs replicates to race over"),
    ({"alpha": 1.5}, {}, "hydra.sweeper.race.alpha=1.5 must be in (0, 1), e.g. 0.05"),
    ({"alpha": 0}, {}, "hydra.sweeper.race.alpha=0 must be in (0, 1)"),
    ({"min_replicates": 1}, {}, "hydra.sweeper.race.min_replicates=1 must be >= 2"),
    ({"baseline": 2.5}, {}, "hydra.sweeper.race.baseline=norm.p=2.5 is not among the "
                            "candidates (norm.p=1.0; norm.p=2.0; norm.p=inf); pick one"),
    ({"baseline": 2.0}, {"params": {"norm": "choice(lp,l2)", "norm.p": "choice(2.0,4.0)"}},
     "hydra.sweeper.race.baseline=2.0 is ambiguous: the candidates vary norm, norm.p"),
    ({"alpah": 0.1}, {}, "hydra.sweeper.race.alpah is not a race key; did you mean "
                         "hydra.sweeper.race.alpha?"),
    ({"budget_steps": 2.5e4}, {}, "hydra.sweeper.race.budget_steps=25000.0: Value '25000.0' of "
                                  "type 'float' could not be converted to Integer"),
    ({"budget_steps": 0}, {}, "hydra.sweeper.race.budget_steps=0 must be a whole number of "
                              "training steps >= 1"),
    (ON, {"sampler": "cmaes"}, "hydra.sweeper.race with sampler.name=cmaes: a race needs the "
                               "grid sampler (every candidate at once) or one of tpe, gp, random"),
    (ON, {"sampler": "tpe"}, "hydra.sweeper.n_trials=null: a search that races its proposals "
                             "needs a number of proposals, e.g. n_trials: 24"),
    ({"baseline": 2.0}, {"sampler": "tpe", "n_trials": 8}, "hydra.sweeper.race.baseline=2.0: a "
     "search races its proposals against its incumbent, not a baseline; set baseline: null"),
    (ON, {"pruner": "median"}, "set pruner: {name: none}, not pruner.name=median"),
    (ON, {"n_trials": 2}, "hydra.sweeper.n_trials=2: a race runs the whole grid"),
    (ON, {"objectives": ["a", "b"], "directions": ["minimize"] * 2}, "races one objective"),
]


@pytest.mark.parametrize("spec, kw, message", BAD_RACES, ids=[
    "fewer-folds", "no-replicates", "alpha-high", "alpha-zero", "min-1", "baseline",
    "baseline-ambiguous", "unknown-key", "budget-float", "budget-zero", "sampler",
    "search-n-trials", "search-baseline", "pruner",
    "n-trials", "objectives"])
def test_bad_race_settings_are_one_line_naming_the_value_and_the_fix(spec, kw, message):
    with pytest.raises(UserError) as e:
        plan(spec, **kw)
    assert message in str(e.value) and "\n" not in str(e.value) and e.value.exit_code == 2


def test_a_study_holds_one_race_and_a_rerun_must_race_it_the_same_way():
    spec = plan({"min_replicates": 3, "alpha": 0.05, "baseline": 2})
    study = optuna.create_study()
    racing.check_study(study, spec, "s")  # new and empty: fine
    racing.record_settings(study, spec)
    assert study.user_attrs["race"]["baseline"] == "norm.p=2.0"
    racing.check_study(study, spec, "s")  # the same race: resumes
    with pytest.raises(UserError, match=r"^study 's' was raced with alpha=0.05, not 0.1; rerun "
                                         "with its settings or use another hydra"):
        racing.check_study(study, plan({"alpha": 0.1, "baseline": 2}), "s")
    with pytest.raises(UserError, match=r"^study 's' was raced with budget_steps=None, not 900"):
        racing.check_study(study, plan({"baseline": 2, "budget_steps": 900}), "s")
    grid = optuna.create_study()
    grid.tell(grid.ask(), 1.0)
    with pytest.raises(UserError, match="holds a sweep that was not a race"):
        racing.check_study(grid, spec, "g")
    assert grid.user_attrs == {}  # checked, not touched


def test_p_race_turns_paper_cpu_into_a_race_in_its_own_study_and_folder():
    hydra_cfg = compose_hydra_config("experiment=paper_cpu", "search=p_race",
                                     "norm.gamma_init=calibrated").hydra
    sweeper = hydra_cfg.sweeper
    assert dict(sweeper.race) == {"min_replicates": 3, "alpha": 0.05, "baseline": 2.0,
                                  "rungs": [0.25, 0.5], "margin": [0.1, 0.04],
                                  "budget_steps": None,
                                  "equivalence": 0.02, "test": "auto"}
    assert list(sweeper.replicates["data.fold"]) == list(range(10))  # the experiment's folds
    assert sweeper.sampler.name == "grid" and sweeper.n_trials is None
    assert sweeper.study_name == "paper_cpu_calibrated_race"  # never the grid's study
    assert hydra_cfg.sweep.dir == "outputs/sweeps/paper_cpu_calibrated_race"


def test_the_report_summary_carries_the_elimination_table(tmp_path):
    """summary.md of a race's sweep dir: each p's outcome, the look that dropped it and the
    compute against the grid, read back from the study the runs name."""
    from qknorm import rundir
    from qknorm.report import build as report
    from tests.helpers.synthetic_runs import config, final, write_config

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="r", storage=storage)
    study.set_user_attr("race", {"min_replicates": 2, "alpha": 0.05, "baseline": "norm.p=2.0",
                                 "blocks": ["data.fold=0", "data.fold=1", "data.fold=2"],
                                 "candidates": ["norm.p=2.0", "norm.p=4.0"]})
    loss = {2.0: [1.0, 1.1, 1.2], 4.0: [1.5, 1.6]}  # p = 4 dropped after 2 folds
    dist = {"norm.p": optuna.distributions.CategoricalDistribution([2.0, 4.0])}
    for number, (p, values) in enumerate(loss.items()):
        runs = {f"data.fold={f}": {"value": v, "steps": 20, "core_s": 3.0}
                for f, v in enumerate(values)}
        record = ({"outcome": "survived", "n": 3, "after": "data.fold=2", "leader": "norm.p=2.0"}
                  if p == 2.0 else
                  {"outcome": "dropped", "n": 2, "after": "data.fold=1", "leader": "norm.p=2.0",
                   "delta": 0.5, "p": 0.0, "p_adjusted": 0.0})
        study.add_trial(optuna.trial.create_trial(
            params={"norm.p": p}, distributions=dist,
            state=TrialState.COMPLETE if p == 2.0 else TrialState.PRUNED,
            value=statistics.fmean(values) if p == 2.0 else None,
            user_attrs={"race_candidate": f"norm.p={p}", "race_runs": runs, "race": record}))
        for f, v in enumerate(values):
            run = tmp_path / "sweep" / f"trial{number}_{f}"
            write_config(run, config(p, f, study=("r", storage, number)))
            rundir.write_final(run, final("completed", v, 3.0, p, 0, f))
    options = report.Options()
    collection = report.load(tmp_path / "sweep", options)
    text = report.summarize(collection, options)
    assert "## Race: study r" in text and "the baseline, norm.p=2.0, is never dropped" in text
    assert "| norm.p=4.0 | dropped | 2 | data.fold=1 | norm.p=2.0 | +0.5000 | 0 | 0 | 1.5500 |" in text
    assert ("Compute: 5 of the full grid's 6 runs (83%), 100 of ≈120 training steps (83%), "
            "15 of ≈18 core-seconds (83%;") in text


# -- a real race through the command line ---------------------------------------------------------

# What the table in race_task.py makes the race do: x=3 out after 2 folds, x=4 after 3.
EXPECTED_RUNS = sorted([(1, f) for f in range(4)] + [(2, f) for f in range(4)]
                       + [(3, 0), (3, 1), (4, 0), (4, 1), (4, 2)])


@pytest.mark.slow
def test_a_killed_race_resumed_by_two_sweepers_runs_only_the_missing_folds(cli):
    from tests.helpers.race_task import THREADS, WALL_S, loss

    killed = cli(TASK, *RACE, "kill_at='1,2'")  # dies as x=1 starts fold 2 (the second look)
    assert killed.returncode == 9, killed.stderr[-2000:]
    assert age_heartbeats(cli.cwd) >= 1  # the killed sweep's running trials: stale from now

    # Two sweepers resume it at once: they share the live candidates and every look.
    r = two_sweepers(cli, TASK, *RACE, "kill_at='1,2'")
    assert sorted(calls(cli.cwd)) == EXPECTED_RUNS  # every run once: nothing finished ran again

    study = study_of(cli.cwd, "r")
    e = readback.elimination(study)
    rows = {row["candidate"]: row for row in e.rows}
    assert {c: (row["outcome"], row["n"], row["after"], row["leader"])
            for c, row in rows.items()} == {
        "x=1": ("survived", 4, "fold=3", "x=1"), "x=2": ("survived", 4, "fold=3", "x=1"),
        "x=3": ("dropped", 2, "fold=1", "x=1"), "x=4": ("dropped", 3, "fold=2", "x=1")}
    assert rows["x=3"]["p_adjusted"] == pytest.approx(0.0144, abs=1e-4)
    assert rows["x=4"]["p_adjusted"] == pytest.approx(0.0415, abs=1e-4)
    assert rows["x=4"]["delta"] == pytest.approx(statistics.fmean(
        loss(4, f) - loss(1, f) for f in range(3)))
    assert e.spent == {"runs": 13, "stopped": 0, "steps": 1300, "core_s": 13 * WALL_S * THREADS}
    assert e.grid == {"runs": 16, "steps": 1600, "core_s": 16 * WALL_S * THREADS}
    counted = [t for t in study.get_trials() if t.state != TrialState.FAIL]  # FAIL: killed
    states = {t.user_attrs["race_candidate"]: t for t in counted}
    assert {c: t.state for c, t in states.items()} == {
        "x=1": TrialState.COMPLETE, "x=2": TrialState.COMPLETE,
        "x=3": TrialState.PRUNED, "x=4": TrialState.PRUNED}
    assert states["x=2"].value == pytest.approx(statistics.fmean(loss(2, f) for f in range(4)))
    from hydra_racing_sweeper.outputs import trials_rows

    rows = trials_rows(study, ["best_val_loss"])  # trials.csv's rows, as the last sweeper wrote
    assert sorted((r["x"], r.get("race", ""), r.get("race_after", "")) for r in rows) == [
        (1, "", ""), (1, "survived", "fold=3"), (2, "", ""), (2, "survived", "fold=3"),
        (3, "dropped", "fold=1"), (4, "", ""), (4, "dropped", "fold=2")]  # "": killed trials
    # The sweeper that finishes last prints the whole race; the other what it saw then.
    lines = [ln for out in (r.stdout, (cli.cwd / "other.log").read_text())
             for ln in out.splitlines() if ln.startswith("race: ")]
    # each sweeper prints the race as it stood when it stopped: the last one, the whole race
    assert len(lines) == 2
    assert any(ln.startswith("race: 2 of 4 candidates dropped, 2 left (x=1, x=2); ran 13 of "
                             "16 runs (81% of the grid), 52 core-seconds") for ln in lines)
    assert "| x=4 | dropped | 3 | fold=2 | x=1 | +0.1033 |" in "\n".join(
        race_section(readback.elimination(study), "r"))


@pytest.mark.slow
def test_a_race_launches_no_run_past_its_budget(cli):
    """Budget 900 steps, 100 a run: the first run goes alone (a run's length is not known
    before one completes), the first look's other seven fit (800 steps) and drop x=3; of the
    next look's three runs one fits, the best's (by its mean over folds 0-1) fold 2; then none
    fits: x=1, x=2 and x=4 survive the first look, within the budget."""
    from tests.helpers.race_task import loss

    r = cli(TASK, *RACE, "++hydra.sweeper.race.budget_steps=900")
    assert r.returncode == 0, r.stderr[-3000:]
    best = min((1, 2, 4), key=lambda x: statistics.fmean(loss(x, f) for f in range(2)))
    assert sorted(calls(cli.cwd)) == sorted([(x, f) for x in (1, 2, 3, 4) for f in range(2)]
                                            + [(best, 2)])
    study = study_of(cli.cwd, "r")
    e = readback.elimination(study)
    assert {row["candidate"]: (row["outcome"], row["n"]) for row in e.rows} == {
        "x=1": ("survived", 2 + (best == 1)), "x=2": ("survived", 2 + (best == 2)),
        "x=3": ("dropped", 2), "x=4": ("survived", 2 + (best == 4))}
    assert e.spent["steps"] == 900 and e.out_of_budget
    assert ("ran 9 of 16 runs (56% of the grid), 36 core-seconds (56% of the grid's estimate), "
            "900 training steps (56%); no further run fits in its budget of 900 training "
            "steps: no further replicate was launched") in r.stdout


@pytest.mark.slow
def test_bad_race_input_exits_2_before_any_job_or_study(cli):
    r = cli(TASK, *[a.replace("min_replicates:2", "min_replicates:5") for a in RACE])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: hydra.sweeper.race.min_replicates=5 but the replicates give 4 (fold=0, fold=1, "
        "fold=2, fold=3); list at least 5 or lower min_replicates"]
    assert not (cli.cwd / "outputs").exists() and not (cli.cwd / "calls.log").exists()



@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("++hydra.sweeper.race.alpah=0.1",
     "error: hydra.sweeper.race.alpah is not a race key; did you mean hydra.sweeper.race.alpha?"),
    ("++hydra.sweeper.race.margin=big", "error: hydra.sweeper.race.margin='big': Value 'big' of "
     "type 'str' could not be converted to Float"),
    ("hydra.sweeper.race.rungs=500", "error: hydra.sweeper.race.rungs=500: Invalid value "
     "assigned: AnyNode is not a ListConfig, list or tuple."),
])
def test_a_misspelt_race_key_or_a_wrong_type_is_one_line_before_the_study(cli, override, message):
    """hydra.sweeper.race is typed by hydra_racing_sweeper/race/settings.py's RaceConf: OmegaConf refuses
    the key or the value before the study is touched, in one line."""
    r = cli("-m", "qknorm.train", "experiment=smoke", "search=p_race", override)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), r.stderr


@pytest.mark.timeout(900)  # its race is given 600 s (pyproject.toml's default: 600)
@pytest.mark.slow
def test_p_race_without_a_grid_names_what_a_race_needs_and_a_command_that_runs(cli):
    """search=p_race on an experiment with no grid: the error is a race's, not TPE's interval."""
    r = cli("-m", "qknorm.train", "experiment=smoke", "search=p_race")
    assert r.returncode == 2
    command = ("python -m qknorm.train experiment=smoke search=p_race 'norm.p=choice(1,2,4,inf)' "
               "'++hydra.sweeper.replicates={data.fold:[0,1,2]}' "
               "hydra.sweeper.race.min_replicates=2 'hydra.sweeper.race.rungs=[10,20]' "
               "hydra.sweeper.race.margin=0.05")
    assert r.stderr.strip().splitlines() == [
        "error: a race races a grid of candidates over replicates, and hydra.sweeper.params has "
        "no grid; give the key as choice(...) with the baseline 2 in it, and more replicates "
        f"than min_replicates, e.g. {command}"]
    assert "interval" not in r.stderr
    assert not (cli.cwd / "outputs").exists()
    # The command it suggests runs (threads=1: the suite's cores are shared).
    run = cli(*shlex.split(command)[1:], "threads=1", timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "study smoke_race: 4/4 trials finished (0 failed)" in run.stdout
