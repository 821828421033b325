"""The race's schedule (race.race_schedule.RaceSchedule) driven in memory by the sweep's own loop
(OptunaSweep._run), its runs looked up in a table instead of trained: the trials it tells, the
Holm-adjusted p it records, and that the replay (research.race_sims.race), whose numbers
docs/search.md publishes, makes the same runs in the same order and gives the same answer."""

from __future__ import annotations

import math

import optuna
import pytest
from hydra_racing_sweeper import race_schedule, readback
from hydra_racing_sweeper.launcher import JobResult
from hydra_racing_sweeper.plan import Plan
from hydra_racing_sweeper.race import BEST, DROPPED, LEVEL, UNDECIDED, WORSE
from hydra_racing_sweeper.space import parse_space, replicate_combinations
from hydra_racing_sweeper.study import RACE_RUNS_ATTR
from hydra_racing_sweeper.sweep import OptunaSweep
from optuna.trial import TrialState
from scipy import stats

from qknorm.research import race_sims
from qknorm.rundir import COMPLETED
from tests.helpers.holm import holm_by_hand
from tests.helpers.race import plan as race_spec
from tests.helpers.race import replay_runs, sweep_plan
from tests.helpers.studies import Beats

FOLDS = 5
STEPS = 100
# Loss = the candidate's level + the fold's + noise per (p, fold): p=inf 0.5 behind the
# baseline p=2, p=1 0.1 behind, p=4 0.005 behind with noise 10 times that (level or undecided).
LEVEL_OF = {1.0: 1.50, 2.0: 1.40, 4.0: 1.405, math.inf: 1.90}
FOLD_OF = [0.0, 0.10, -0.05, 0.20, 0.05]
NOISE = {1.0: [0.0, 0.02, -0.01, 0.015, -0.02], 2.0: [0.0, 0.0, 0.0, 0.0, 0.0],
         4.0: [0.01, -0.015, 0.012, -0.008, 0.006], math.inf: [0.0, 0.01, 0.005, -0.01, 0.0]}


def loss(p: float, fold: int) -> float:
    return LEVEL_OF[p] + FOLD_OF[fold] + NOISE[p][fold]


class TableLauncher:
    """The launcher's face (launch(jobs) -> results, one after another in the jobs' order),
    with each (p, fold) run's best_val_loss from the table; `ran` keeps the order."""

    def __init__(self) -> None:
        self.ran: list[tuple[float, int]] = []

    def launch(self, jobs) -> list[JobResult]:
        out = []
        for trial, combo in jobs:
            p, fold = trial.params["norm.p"], int(combo[0].split("=")[1])
            self.ran.append((p, fold))
            out.append(JobResult(COMPLETED, f"p{p}-f{fold}", {
                "best_val_loss": loss(p, fold), "steps": STEPS, "wall_time_s": 2.0,
                "threads": 1}))
        return out


def race_plan(**race) -> Plan:
    params = {"norm.p": "choice(1.0,2.0,4.0,inf)"}
    space, _ = parse_space(params, [])
    spec = race_spec(race, params=params, folds=tuple(range(FOLDS)))
    return sweep_plan(space, space.grid_size,
                      replicate_combinations({"data.fold": list(range(FOLDS))}), spec,
                      {"name": "grid", "seed": 0})


def run_race(plan: Plan) -> tuple[optuna.Study, TableLauncher]:
    """The sweep's loop over a RaceSchedule on a fresh in-memory study, n_jobs=4: all four
    candidates asked at once, as the replay has them."""
    sweep = OptunaSweep(study_name="r", storage="", direction="minimize",
                        objectives=["best_val_loss"], n_trials=None, n_jobs=4,
                        sampler=plan.sampler_spec, pruner=plan.pruner_spec, replicates={},
                        max_failure_rate=0.0, fail_value=None, heartbeat_interval=1,
                        grace_period=None, params={}, race=None)
    study = optuna.create_study(sampler=plan.sampler, directions=plan.directions)
    race_schedule.RaceSchedule.prepare_study(plan, study, "r")
    launcher, beats = TableLauncher(), Beats()
    sched = race_schedule.RaceSchedule(plan, launcher, ["best_val_loss"], 4, beats)
    assert sweep._run(study, plan, sched, launcher, beats) is None
    assert not beats.ids  # every trial it asked was told and its heartbeat let go
    return study, launcher


def table_grid() -> dict:
    """The table as race_sims reads a grid's committed runs: per p, its runs fold by fold."""
    return {p: [{"value": loss(p, f), "steps": STEPS, "core_s": 2.0, "curve": None}
                for f in range(FOLDS)] for p in LEVEL_OF}


def by_p(study: optuna.Study) -> dict[float, optuna.trial.FrozenTrial]:
    return {t.params["norm.p"]: t for t in study.get_trials()}


def test_the_race_drops_the_far_candidate_at_the_first_look_with_holms_p():
    study, launcher = run_race(race_plan(min_replicates=2, baseline=2.0))
    trials = by_p(study)
    # First look, folds 0 and 1: the leader is p=2; each other p's one-sided paired t against
    # it, Holm over the three (scipy's test, Holm by hand).
    raw = {p: stats.ttest_rel([loss(p, f) for f in (0, 1)], [loss(2.0, f) for f in (0, 1)],
                              alternative="greater").pvalue for p in (1.0, 4.0, math.inf)}
    holm = holm_by_hand(raw)
    assert holm[math.inf] <= 0.05 < min(holm[1.0], holm[4.0])  # only p=inf goes now
    inf = trials[math.inf]
    assert inf.state == TrialState.PRUNED
    assert inf.user_attrs["race"]["outcome"] == DROPPED and inf.user_attrs["race"]["n"] == 2
    assert inf.user_attrs["race"]["p_adjusted"] == pytest.approx(holm[math.inf], rel=1e-9)
    assert inf.user_attrs["race"]["delta"] == pytest.approx(
        sum(loss(math.inf, f) - loss(2.0, f) for f in (0, 1)) / 2)
    assert sorted(f for p, f in launcher.ran if p == math.inf) == [0, 1]  # no run after
    # Every (p, fold) at most once; the survivors told COMPLETE with their mean.
    assert len(set(launcher.ran)) == len(launcher.ran)
    best = trials[2.0]
    n = len(best.user_attrs[RACE_RUNS_ATTR])
    assert best.state == TrialState.COMPLETE
    assert best.value == pytest.approx(sum(loss(2.0, f) for f in range(n)) / n)


@pytest.mark.parametrize(("race", "words"), [
    ({"min_replicates": 2, "baseline": 2.0}, {BEST, WORSE, UNDECIDED}),
    ({"min_replicates": 2, "baseline": 2.0, "equivalence": 0.02}, {BEST, WORSE, LEVEL}),
    ({"min_replicates": 3, "baseline": None, "alpha": 0.1, "equivalence": 0.05},
     {BEST, WORSE, LEVEL}),
    ({"min_replicates": 2, "baseline": 2.0, "budget_steps": 1000}, {BEST, WORSE, UNDECIDED}),
], ids=["holm", "equivalence", "no-baseline", "budget"])
def test_the_replay_makes_the_live_races_runs_and_answer(race, words, monkeypatch):
    """race_sims.race on the same table: the runs the schedule launched, in its order, the same
    answer per candidate and the same steps (`words`: the answers the case must reach, so that
    each rule's path is taken)."""
    plan = race_plan(**race)
    study, launcher = run_race(plan)
    ran = replay_runs(monkeypatch)
    spec = plan.race
    baseline = None if spec.baseline is None else spec.baseline[0]
    sim = race_sims.race(table_grid(), spec.budget_steps, readback.rules(spec.settings()), {}, baseline)
    assert ran == launcher.ran
    assert sim["steps"] == STEPS * len(launcher.ran) == readback.steps_spent(study.get_trials())
    p_of = {label: c[0] for c, label in spec.labels.items()}
    answer = {p_of[row["candidate"]]: row["answer"] for row in readback.elimination(study).rows}
    assert sim["best_p"] == next(p for p, a in answer.items() if a == BEST)
    assert sim["worse"] == sorted(p for p, a in answer.items() if a == WORSE)
    assert sim["level"] == sorted(p for p, a in answer.items() if a == LEVEL)
    assert set(answer.values()) == words


def test_a_race_with_a_budget_makes_the_runs_worked_out_by_hand():
    """Budget 1000 steps, 100 a run, min_replicates 2, baseline p=2 (not the driver on both
    sides: the runs by hand). A run's length is unknown until one completes, so the first
    launch is the baseline's fold 0 alone (baseline first, then grid order); then the seven
    other runs of the first look fit (800 spent); its look drops p=inf (Holm by hand above);
    the next look needs three runs and two fit: the two best by their mean over folds 0-1 (p=2
    1.45, p=4 1.4525, p=1 1.555) run fold 2; then none fits and the race ends at its last look."""
    study, launcher = run_race(race_plan(min_replicates=2, baseline=2.0, budget_steps=1000))
    order = [2.0, 1.0, 4.0, math.inf]
    assert launcher.ran == ([(2.0, 0)] + [(p, 0) for p in order[1:]] + [(p, 1) for p in order]
                            + [(2.0, 2), (4.0, 2)])
    rows = {row["candidate"]: row["answer"] for row in readback.elimination(study).rows}
    assert rows == {"norm.p=2.0": BEST, "norm.p=1.0": UNDECIDED, "norm.p=4.0": UNDECIDED,
                    "norm.p=inf": WORSE}
    e = readback.elimination(study)
    assert e.spent["steps"] == 1000 and e.out_of_budget


@pytest.mark.parametrize(("budget", "runs"), [(150, 1), (450, 4)])
def test_a_search_at_two_jobs_never_launches_past_its_budget(budget, runs):
    """The racing search's schedule in the sweep's loop, n_jobs 2 (search=p_tpe's): budget 150
    of 100-step runs launched the incumbent's fold 0 beside the next proposal's (200 steps,
    as `budget_steps=10` of 30-step smoke runs spent 60); now the first launch holds one run
    until a run's length is known, then whole runs that fit."""
    from hydra_racing_sweeper.search_schedule import RaceSearchSchedule

    params = {"norm.p": "choice(1.0,2.0,4.0,inf)"}
    space, _ = parse_space(params, [])
    spec = race_spec({"min_replicates": 2, "equivalence": 0.02, "budget_steps": budget},
                     params=params, folds=tuple(range(FOLDS)), sampler="tpe", n_trials=4)
    plan = sweep_plan(space, 4, replicate_combinations({"data.fold": list(range(FOLDS))}), spec,
                      {"name": "tpe", "seed": 0})
    sweep = OptunaSweep(study_name="s", storage="", direction="minimize",
                        objectives=["best_val_loss"], n_trials=4, n_jobs=2,
                        sampler=plan.sampler_spec, pruner=plan.pruner_spec, replicates={},
                        max_failure_rate=0.0, fail_value=None, heartbeat_interval=1,
                        grace_period=None, params={}, race=None)
    study = optuna.create_study(sampler=plan.sampler, directions=plan.directions)
    RaceSearchSchedule.prepare_study(plan, study, "s")
    launcher, beats = TableLauncher(), Beats()
    sched = RaceSearchSchedule(plan, launcher, ["best_val_loss"], 2, beats)
    assert sweep._run(study, plan, sched, launcher, beats) is None
    assert len(launcher.ran) == runs and readback.steps_spent(study.get_trials()) == STEPS * runs
    assert all(t.state.is_finished() for t in study.get_trials()) and not beats.ids
