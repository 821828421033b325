"""What the race's rules read of a study's trials: the trials a race counts, each one's block
results (user attr RACE_RUNS_ATTR, as the racing schedules write them: hydra_racing_sweeper/records.py),
their steps, and a racing search's proposals in the order they were first made, as the
driver's ledger."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from optuna.trial import FrozenTrial, TrialState

from hydra_racing_sweeper.race import Proposal
from hydra_racing_sweeper.rundir import FAILED
from hydra_racing_sweeper.study import (
    RACE_CANDIDATE_ATTR,
    RACE_RUNS_ATTR,
    RETRIED_ATTR,
    STATUS_ATTR,
    SURPLUS,
    retried_numbers,
)


def counted(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """The trials a race counts, in order: not a killed sweeper's retried original (its retry
    inherits the original's block results), not a surplus one."""
    trials = list(trials)
    retried = retried_numbers(trials)
    return [t for t in trials
            if t.number not in retried and t.user_attrs.get(STATUS_ATTR) != SURPLUS]


def race_trials(trials: Iterable[FrozenTrial]) -> dict[str, FrozenTrial]:
    """Each candidate's latest counted trial, by its label (what the report has)."""
    return {t.user_attrs[RACE_CANDIDATE_ATTR]: t for t in counted(trials)
            if RACE_CANDIDATE_ATTR in t.user_attrs}


def completed(runs: Mapping[str, dict]) -> dict[str, dict]:
    """The block results of runs that went to the end (not stopped at a rung)."""
    return {b: r for b, r in runs.items() if r.get("stopped_at") is None}


def block_values(user_attrs: Mapping[str, object], blocks: Sequence[str],
                 sign: float = 1.0) -> dict[int, float]:
    """A trial's completed blocks (user attr RACE_RUNS_ATTR): block index -> sign * value."""
    runs = completed(user_attrs.get(RACE_RUNS_ATTR, {}))
    return {i: sign * runs[b]["value"] for i, b in enumerate(blocks) if b in runs}


def stopped_block(user_attrs: Mapping[str, object]) -> str | None:
    """The block in which a trial's run was stopped at a rung (it is out), or None."""
    runs = user_attrs.get(RACE_RUNS_ATTR, {})
    return next((b for b, r in runs.items() if r.get("stopped_at") is not None), None)


def steps_spent(trials: Iterable[object]) -> int:
    """The training steps of every run the trials' race_runs record (a run stopped at a rung:
    its steps to the rung)."""
    return sum(r.get("steps") or 0 for t in trials
               for r in t.user_attrs.get(RACE_RUNS_ATTR, {}).values())


def run_steps(trials: Iterable[object]) -> int:
    """The steps of the longest completed run the trials' race_runs record (a whole run's
    length, as the budget counts runs: driver; 0: none completed yet)."""
    return max((r.get("steps") or 0 for t in trials
                for r in completed(t.user_attrs.get(RACE_RUNS_ATTR, {})).values()), default=0)


def proposals(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that are proposals, in the order they were first proposed: counted (not a
    retried original, not surplus, not waiting), with params, ordered by the trial their
    retries started from."""
    # A retry waiting to be asked holds no params yet: until a sweeper takes it, its failed
    # original stands for the proposal (same block results), so the replay does not lose it.
    retried = retried_numbers([t for t in trials if t.state != TrialState.WAITING])
    parent = {t.number: t.system_attrs.get(RETRIED_ATTR) for t in trials}

    def origin(n: int) -> int:
        while parent.get(n) is not None:
            n = parent[n]
        return n

    return sorted((t for t in trials if t.params and t.number not in retried
                   and t.user_attrs.get(STATUS_ATTR) != SURPLUS
                   and t.state != TrialState.WAITING),
                  key=lambda t: origin(t.number))


def ledger(trials: list[FrozenTrial], settings: dict, sign: float = 1.0
           ) -> tuple[list[FrozenTrial], list[Proposal]]:
    """The proposals' trials, and what the driver reads of each: its completed blocks, whether
    a run of it stopped at a rung (and how far behind there), whether it can run more, the
    steps its runs took, and whether it failed."""
    props_t = proposals(trials)
    return props_t, [_proposal(t, settings, sign) for t in props_t]


def _proposal(t: FrozenTrial, settings: dict, sign: float) -> Proposal:
    runs = t.user_attrs.get(RACE_RUNS_ATTR, {})
    stopped = stopped_block(t.user_attrs)
    return Proposal(
        tuple(t.params.values()), block_values(t.user_attrs, settings["blocks"], sign),
        stopped is not None, t.state == TrialState.RUNNING and stopped is None,
        runs[stopped].get("delta") if stopped else None,
        steps_spent([t]), run_steps([t]),
        # failed: its trial did (a fail_value tells it COMPLETE, its status says failed)
        t.state == TrialState.FAIL or t.user_attrs.get(STATUS_ATTR) == FAILED)
