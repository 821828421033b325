"""A race as the tests set one up: its plan in memory (hydra_racing_sweeper.raceplan.plan_race on a
grid over p and the folds; a sweep's whole Plan for driving a schedule), the runs a replay asks
for, and a race or a racing search through the real command line on race_task.py's table, killed
and resumed by two sweepers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from hydra_racing_sweeper import readback, specs
from hydra_racing_sweeper.plan import Plan
from hydra_racing_sweeper.race import race_conf
from hydra_racing_sweeper.raceplan import plan_race
from hydra_racing_sweeper.space import SearchSpace, parse_space, replicate_combinations

from qknorm.errors import UserError
from qknorm.research import race_sims
from tests.helpers import REPO
from tests.helpers.studies import study_of

# -- the plan, in memory -------------------------------------------------------------------------


def plan(race_spec, params=None, folds=(0, 1, 2, 3, 4), **kw):
    """The race hydra.sweeper.race=race_spec plans for params (norm.p over {1, 2, inf}) over
    the folds; kw: the sweeper's other settings (sampler, n_trials, directions, ...)."""
    space, _ = parse_space(params or {"norm.p": "choice(1.0,2.0,inf)"}, [])
    combos = replicate_combinations({"data.fold": list(folds)} if folds else {})
    blocks = [" ".join(c) for c in combos]
    args = {"directions": ["minimize"], "objectives": ["best_val_loss"], "sampler": "grid",
            "pruner": "none", "n_trials": None, **kw}
    return plan_race(race_conf(race_spec), space, blocks, **args)


def sweep_plan(space: SearchSpace, n_trials: int, combinations=([],), race=None,
               sampler=None) -> Plan:
    """A sweep's plan, built in memory for driving a schedule without the CLI: minimize, no
    pruner, `sampler` a hydra.sweeper.sampler spec (default: random, seed 0)."""
    sampler = sampler or {"name": "random", "seed": 0}
    return Plan(space=space, base_overrides=[], combinations=[list(c) for c in combinations],
                directions=["minimize"], n_trials=n_trials,
                sampler=specs.build_sampler(sampler, space.grid), sampler_spec=sampler,
                pruner=optuna.pruners.NopPruner(), pruner_spec={"name": "none"},
                fail_values=None, race=race)


def replay_runs(monkeypatch) -> list[tuple]:
    """The (candidate, block) runs race_sims asks for from now on, in its order."""
    ran, real_run = [], race_sims._run

    def logged(grid, p, block, *a, **kw):
        ran.append((p, block))
        return real_run(grid, p, block, *a, **kw)

    monkeypatch.setattr(race_sims, "_run", logged)
    return ran


def race_plan(**options):
    """A race over 3 folds, min_replicates 2 and baseline p=2, with `options` on top."""
    return plan({"min_replicates": 2, "baseline": 2.0, **options}, folds=(0, 1, 2))


def refused(**options) -> str:
    """What race_plan(**options) refuses with: one line, exit code 2 (a UserError)."""
    with pytest.raises(UserError) as e:
        race_plan(**options)
    assert "\n" not in str(e.value) and e.value.exit_code == 2, str(e.value)
    return str(e.value)


# -- through the command line, on race_task.py's table -------------------------------------------

TASK = str(REPO / "tests" / "helpers" / "race_task.py")
# n_jobs=2 of 4 candidates: the first look needs all four, so the sweeper runs two, finds the look
# not ready and asks the other two (the path a second sweeper's candidates would take). A killed
# sweep's trials are made stale by studies.age_heartbeats, so the grace period can be long: a live
# sweeper's heartbeat late by seconds under CI load must not get its trial failed and rerun.
RACE = ["-m", "hydra/sweeper=qknorm_optuna", "x=choice(1,2,3,4)", "hydra.sweeper.study_name=r",
        "hydra.sweeper.sampler.name=grid", "hydra.sweeper.n_trials=null",
        "hydra.sweeper.n_jobs=2", "++hydra.sweeper.replicates={fold:[0,1,2,3]}",
        "++hydra.sweeper.race={min_replicates:2,alpha:0.05,baseline:2}",
        "hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=60",
        "hydra.sweep.dir=sweep", "hydra.output_subdir=null", "hydra/job_logging=disabled"]
# Five candidates, four folds, two to start; δ = 0.05. From the table: x=3 is 1.0 behind (worse),
# x=4 0.1 behind with noise (worse or undecided), x=1, x=2 and x=5 within 0.02 (best or level).
SEARCH = ["-m", "hydra/sweeper=qknorm_optuna", "x=choice(1,2,3,4,5)", "hydra.sweeper.study_name=s",
          "hydra.sweeper.sampler.name=tpe", "hydra.sweeper.sampler.seed=0",
          "hydra.sweeper.n_trials=5", "hydra.sweeper.n_jobs=1", "hydra.sweeper.pruner.name=none",
          "++hydra.sweeper.replicates={fold:[0,1,2,3]}",
          "++hydra.sweeper.race={min_replicates:2,alpha:0.05,equivalence:0.05}",
          "hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=60",
          "hydra.sweep.dir=sweep", "hydra.output_subdir=null", "hydra/job_logging=disabled"]


def calls(cwd: Path) -> list[tuple[int, int]]:
    """The (x, fold) runs race_task.py ran in cwd, in the order they ran (its calls.log)."""
    return [tuple(map(int, ln.split())) for ln in (cwd / "calls.log").read_text().splitlines()
            if ln]


def answers(cwd: Path) -> dict[str, str]:
    """The racing search's answer per candidate (best, level, worse, ...) in study "s"."""
    study = study_of(cwd, "s")
    rows = readback.answer_rows(study.get_trials(), study.user_attrs["race"])
    return {r["candidate"]: r["answer"] for r in rows}


def two_sweepers(cli, *args: str):
    """Run `python ARGS` twice at once in cli's dir (a killed sweep resumed by two sweepers);
    both must succeed. Returns the second's result; the first's output is in other.log."""
    with open(cli.cwd / "other.log", "w") as log:
        other = subprocess.Popen([sys.executable, *args], cwd=cli.cwd, stdout=log,
                                 stderr=subprocess.STDOUT)
        r = cli(*args)
        assert other.wait(timeout=300) == 0, (cli.cwd / "other.log").read_text()[-3000:]
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def check_table(got: dict[str, str]) -> None:
    """The answers race_task.py's table allows a search over x=1..5 (SEARCH): x=3 worse, x=4
    worse or undecided, of x=1, 2, 5 one best and the rest level (or one undecided)."""
    assert sorted(got) == ["x=1", "x=2", "x=3", "x=4", "x=5"]  # each x proposed once
    assert got["x=3"] == "worse"
    assert got["x=4"] in ("worse", "undecided")
    assert sorted(got[x] for x in ("x=1", "x=2", "x=5")) in (["best", "level", "level"],
                                                               ["best", "level", "undecided"])
