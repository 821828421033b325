"""Race mode's checks and its state in the study (the statistics live in qknorm/sweep/racestats.py).

With `hydra.sweeper.race` set, a trial is one candidate (a grid point) that runs its replicate
blocks a look at a time; the sweeper (_sweep.py, _run_race) launches them. Everything the race
decides follows from what the study holds: each trial's block results (user attr `race_runs`)
and the race settings (study user attr `race`). So a rerun after a kill, or another sweeper on
the same study, replays the same looks and runs only the blocks still missing.

With `rungs`, a candidate whose run of a block was stopped at a rung (qknorm/sweep/job.py, the job
side) leaves the race: its block result says `stopped_at`, and the replay counts it out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from qknorm.config import rungs_problem
from qknorm.errors import UserError
from qknorm.sweep import racestats as racing
from qknorm.sweep.space import SearchSpace, format_value
from qknorm.sweep.study import (
    RACE_CANDIDATE_ATTR,
    RACE_RUNS_ATTR,
    RACE_SETTINGS_ATTR,
    STATUS_ATTR,
    SURPLUS,
    retried_numbers,
)

OPTIONS = {"min_replicates": 3, "alpha": 0.05, "baseline": None, "rungs": None, "margin": 0.05,
           "budget_steps": None}
EXAMPLE = "race: {min_replicates: 3, alpha: 0.05, baseline: 2.0, rungs: [1000]}"


@dataclass(frozen=True)
class RaceSpec:
    min_replicates: int
    alpha: float
    baseline: Hashable | None  # the baseline's candidate key (trial params, in space order)
    candidates: tuple[Hashable, ...]  # every grid point, in grid order
    labels: dict[Hashable, str]  # candidate -> "norm.p=2.0"
    blocks: tuple[str, ...]  # replicate combinations as labels, in launch order
    sign: float  # +1 minimize, -1 maximize: the race always lowers sign * value
    rungs: tuple[int, ...] = ()  # steps at which a run is judged inside its block; (): never
    margin: float = 0.05  # a run stops when its val loss is above the best other's by more
    budget_steps: int | None = None  # no block launches once the race's runs took this many

    def settings(self) -> dict[str, Any]:
        """What a rerun must match (stored in the study): the same race, or another study.
        Without rungs, rungs and margin are None, as a study raced before they existed reads;
        so is budget_steps without a budget."""
        return {"min_replicates": self.min_replicates, "alpha": self.alpha,
                "baseline": self.labels.get(self.baseline), "blocks": list(self.blocks),
                "candidates": [self.labels[c] for c in self.candidates],
                "rungs": list(self.rungs) or None, "margin": self.margin if self.rungs else None,
                "budget_steps": self.budget_steps}


def plan(spec: Any, space: SearchSpace, blocks: list[str], directions: list[str],
         objectives: list[str], sampler: str, pruner: str, n_trials: int | None) -> RaceSpec | None:
    """The race, every setting checked (UserError names the value and the fix); None: off
    (race: {} or null)."""
    if spec is None or spec == {}:
        return None
    options = _options(spec)
    if sampler != "grid":
        raise UserError(f"hydra.sweeper.race needs sampler: {{name: grid}} (a race starts every "
                         f"candidate at once), not sampler.name={sampler}")
    if pruner != "none":
        raise UserError(f"hydra.sweeper.race runs whole folds: set pruner: {{name: none}}, not "
                         f"pruner.name={pruner}")
    if len(objectives) != 1:
        raise UserError(f"hydra.sweeper.race races one objective, not {objectives}; keep one "
                         "in hydra.sweeper.objectives")
    if n_trials is not None and n_trials != space.grid_size:
        raise UserError(f"hydra.sweeper.n_trials={n_trials}: a race runs the whole grid; set "
                         f"n_trials: null (the grid's {space.grid_size} points)")
    minimum = _min_replicates(options["min_replicates"])
    alpha = options["alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise UserError(f"hydra.sweeper.race.alpha={alpha!r} must be in (0, 1), e.g. 0.05")
    if blocks == [""]:
        raise UserError("hydra.sweeper.race needs replicates to race over; set e.g. "
                         "hydra.sweeper.replicates={data.fold:[0,1,2,3,4]}")
    if len(blocks) < minimum:
        raise UserError(f"hydra.sweeper.race.min_replicates={minimum} but the replicates give "
                         f"{len(blocks)} ({', '.join(blocks)}); list at least {minimum} or lower "
                         "min_replicates")
    candidates = [tuple(c) for c in itertools.product(*(p.grid for p in space.params))]
    labels = {c: _candidate_label(space, c) for c in candidates}
    baseline = _baseline(options["baseline"], space, candidates)
    rungs, margin = _rungs(options["rungs"], options["margin"], directions[0])
    return RaceSpec(minimum, float(alpha), baseline, tuple(candidates), labels, tuple(blocks),
                    1.0 if directions[0] == "minimize" else -1.0, rungs, margin,
                    _budget(options["budget_steps"]))


def _options(spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise UserError(f"hydra.sweeper.race={spec!r} must be null or a mapping, e.g. {EXAMPLE}")
    for key in spec:
        if key not in OPTIONS:
            raise UserError(f"hydra.sweeper.race.{key} is not a race option "
                             f"({', '.join(OPTIONS)}); fix its spelling or remove it")
    return {**OPTIONS, **spec}


def _min_replicates(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise UserError(f"hydra.sweeper.race.min_replicates={value!r} must be an integer >= 2 "
                         "(a paired t-test needs two pairs), e.g. 3")
    return value


def _budget(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"hydra.sweeper.race.budget_steps={value!r} must be a whole number of "
                         "training steps >= 1 (summed over the race's runs), e.g. 26667 for a "
                         "third of paper_cpu's 80,000, or null for no budget")
    return value


def _rungs(rungs: Any, margin: Any, direction: str) -> tuple[tuple[int, ...], float]:
    """In-fold stopping's settings, checked as far as they go without the task's config (the
    sweeper checks the rungs against train.max_iters and train.eval_interval)."""
    if rungs is None or rungs == []:
        return (), 0.05
    problem = rungs_problem(rungs, max_iters=math.inf, eval_interval=1)
    if problem:
        raise UserError(f"hydra.sweeper.race.rungs={rungs!r} {problem}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not (
            math.isfinite(margin) and margin > 0):
        raise UserError(f"hydra.sweeper.race.margin={margin!r} must be a number > 0 (val loss "
                         "units: how far behind the best run of a fold a run may be at a "
                         "rung), e.g. 0.05")
    if direction != "minimize":
        raise UserError("hydra.sweeper.race.rungs judge runs on val loss (lower is better), "
                         "but the race maximizes its objective; set rungs: null")
    return tuple(rungs), float(margin)


def _candidate_label(space: SearchSpace, candidate: Sequence[Any]) -> str:
    values = space.values(dict(zip((p.name for p in space.params), candidate, strict=True)))
    return " ".join(f"{k}={format_value(v)}" for k, v in values.items())


def _same(a: Any, b: Any) -> bool:
    """A baseline as written (2, 2.0, 'inf') against a config value (2.0, inf)."""
    try:
        return not isinstance(a, bool) and not isinstance(b, bool) and float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _baseline(value: Any, space: SearchSpace, candidates: list[tuple]) -> Hashable | None:
    if value is None:
        return None
    keys = [p.key for p in space.params]
    if not isinstance(value, dict):
        if len(keys) > 1:
            raise UserError(f"hydra.sweeper.race.baseline={format_value(value)} is ambiguous: "
                             f"the candidates vary {', '.join(keys)}; give each, e.g. baseline: "
                             f"{{{', '.join(f'{k}: ...' for k in keys)}}}")
        value = {keys[0]: value}
    names = [p.name for p in space.params]
    for c in candidates:
        config = space.values(dict(zip(names, c, strict=True)))
        if set(value) == set(config) and all(_same(value[k], config[k]) for k in config):
            return c
    shown = ", ".join(f"{k}={format_value(v)}" for k, v in value.items())
    choices = "; ".join(" ".join(f"{k}={format_value(v)}" for k, v in
                                 space.values(dict(zip(names, c, strict=True))).items())
                        for c in candidates)
    raise UserError(f"hydra.sweeper.race.baseline={shown} is not among the candidates "
                     f"({choices}); pick one of them, or null for none")


def check_study(study: optuna.Study, race: RaceSpec, study_name: str) -> None:
    """A study holds one race: a rerun must race the same way. Raises before touching it."""
    have = study.user_attrs.get(RACE_SETTINGS_ATTR)
    want = race.settings()
    if have is None and study.get_trials(deepcopy=False):
        raise UserError(f"study {study_name!r} holds a sweep that was not a race; race under "
                         "another hydra.sweeper.study_name")
    for key in want if have is not None else ():
        value = have.get(key)  # a key the study lacks: raced before it existed, i.e. None
        if want.get(key) != value:
            raise UserError(f"study {study_name!r} was raced with {key}={value!r}, not "
                             f"{want.get(key)!r}; rerun with its settings or use another "
                             "hydra.sweeper.study_name")


def record_settings(study: optuna.Study, race: RaceSpec) -> None:
    if RACE_SETTINGS_ATTR not in study.user_attrs:
        study.set_user_attr(RACE_SETTINGS_ATTR, race.settings())


def candidate(trial: FrozenTrial | optuna.Trial, space: SearchSpace) -> Hashable:
    """A trial's candidate: its param values in the space's order (a grid point)."""
    return tuple(trial.params[p.name] for p in space.params)


def _counted(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials a race counts, in order: not a killed sweeper's retried original (its retry
    inherits the original's block results), not a surplus one."""
    retried = retried_numbers(trials)
    return [t for t in trials
            if t.number not in retried and t.user_attrs.get(STATUS_ATTR) != SURPLUS]


def current_trials(trials: list[FrozenTrial], space: SearchSpace) -> dict[Hashable, FrozenTrial]:
    """Each candidate's latest counted trial, by its grid point."""
    return {candidate(t, space): t for t in _counted(trials) if t.params}


def block_values(trial: FrozenTrial | optuna.Trial, race: RaceSpec) -> dict[int, float]:
    """Block index -> sign * objective, for the blocks the trial completed."""
    runs = racing.completed(trial.user_attrs.get(RACE_RUNS_ATTR, {}))
    return {i: race.sign * runs[b]["value"] for i, b in enumerate(race.blocks) if b in runs}


def stopped_block(trial: FrozenTrial | optuna.Trial) -> str | None:
    """The block in which the trial's run was stopped at a rung (it is out), or None."""
    runs = trial.user_attrs.get(RACE_RUNS_ATTR, {})
    return next((b for b, r in runs.items() if r.get("stopped_at") is not None), None)


def state(trials: list[FrozenTrial], race: RaceSpec, space: SearchSpace) -> racing.Race:
    """The race replayed from the study: looks so far, who is in, what the next look needs."""
    current = current_trials(trials, space)
    values = {c: block_values(t, race) for c, t in current.items()}
    # Not started yet, or running/waiting for a sweeper: it can still run blocks. A candidate
    # stopped at a rung is out, like a failed one: it leaves before the next look, untested.
    live = {c for c in race.candidates
            if c not in current or (current[c].state in (TrialState.RUNNING, TrialState.WAITING)
                                    and stopped_block(current[c]) is None)}
    return racing.replay(race.candidates, values, live, len(race.blocks), race.min_replicates,
                         race.alpha, race.baseline, _budget_spent(race, current.values()))


def _budget_spent(race: RaceSpec, trials: Iterable[FrozenTrial]) -> bool:
    """Whether the race's runs so far (stopped ones' partial steps included) took its budget.
    Counted between launches: a launch under way finishes, so a race can end up to one launch
    past its budget."""
    if race.budget_steps is None:
        return False
    spent = sum(r.get("steps") or 0 for t in trials
                for r in t.user_attrs.get(RACE_RUNS_ATTR, {}).values())
    return spent >= race.budget_steps


def record(race: RaceSpec, result: racing.Race, c: Hashable, n_run: int,
           failed: bool = False) -> dict[str, Any]:
    """The trial user attr `race`: how the candidate's race ended, with the look that decided
    it (Δ in the objective's units: candidate - leader)."""
    dropped = result.dropped()
    outcome = (racing.FAILED if failed else racing.DROPPED if c in dropped else racing.SURVIVED)
    out: dict[str, Any] = {"outcome": outcome, "n": n_run,
                           "after": race.blocks[n_run - 1] if n_run else None}
    lk = dropped.get(c) or (result.looks[-1] if result.looks and not failed else None)
    if lk is not None:
        test = lk.tests.get(c)
        out.update(look=lk.n, leader=race.labels[lk.leader],
                   delta=None if test is None else race.sign * test.delta,
                   p=None if test is None else test.p,
                   p_adjusted=None if test is None else test.p_adjusted)
    return out


def launch_order(race: RaceSpec, result: racing.Race) -> list[Hashable]:
    """The candidates in the race, best first (racestats.standing): the order in which their
    runs of a block launch, so that a run is judged at its rungs against the leader's."""
    return racing.standing(result.values, result.alive, race.baseline)


def stop_record(race: RaceSpec, trial: FrozenTrial | optuna.Trial, block: str,
                n_run: int) -> dict[str, Any]:
    """The trial user attr `race` of a candidate stopped at a rung: the block, the step, its
    val loss there minus the best other run's (Δ > margin) and which candidate that was."""
    stop = trial.user_attrs[RACE_RUNS_ATTR][block]
    return {"outcome": racing.STOPPED, "n": n_run, "after": block, "step": stop["stopped_at"],
            "leader": stop.get("best"), "delta": stop.get("delta"), "p": None,
            "p_adjusted": None}


def stopped_entry(stop: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """A block whose run was stopped at a rung, as race_runs keeps it: no value (the run did
    not finish), its partial cost, and where and why it stopped (the job's race_stop attr)."""
    return {**run_entry(None, fields), "stopped_at": int(stop["step"]),
            "val_loss": stop["value"], "best": stop["best"], "delta": stop["delta"]}


def run_entry(value: float | None, fields: dict[str, Any]) -> dict[str, Any]:
    """One block's result as the study keeps it: the value and the run's cost."""
    steps, wall, threads = (fields.get(k) for k in ("steps", "wall_time_s", "threads"))
    core_s = (float(wall) * float(threads)
              if _finite(wall) and _finite(threads) else None)
    return {"value": value, "steps": int(steps) if _finite(steps) else None, "core_s": core_s}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def race_trials(study: optuna.Study) -> dict[str, FrozenTrial]:
    """Each candidate's latest counted trial, by its label (what the report has)."""
    return {t.user_attrs[RACE_CANDIDATE_ATTR]: t for t in _counted(study.get_trials(deepcopy=False))
            if RACE_CANDIDATE_ATTR in t.user_attrs}


def elimination(study: optuna.Study) -> racing.Elimination | None:
    """The race a study holds (for the console line and the report), or None: no race."""
    settings = study.user_attrs.get(RACE_SETTINGS_ATTR)
    if not isinstance(settings, dict):
        return None
    return racing.elimination(settings, race_trials(study))
