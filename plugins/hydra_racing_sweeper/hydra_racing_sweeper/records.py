"""The records a race keeps in its study, written once: a block's result in the trial user
attr race_runs (run_entry, stopped_entry) and how a candidate's race ended in the trial user attr
`race` (outcome_record, stopped_record). The racing schedules write them
(hydra_racing_sweeper/racing.py, hydra_racing_sweeper/race_schedule.py), and so does a report that
rebuilds a committed race without its study (qknorm/report/racerebuild.py)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from hydra_racing_sweeper.race import STOPPED, RaceVerdict
from hydra_racing_sweeper.units import finite


def outcome_record(v: RaceVerdict, n_run: int, blocks: Sequence[str],
                   label: Callable[[Hashable], str], sign: float,
                   equivalence: float | None) -> dict[str, Any]:
    """outcome_attr's record of a verdict (also what a report rebuilt without its study writes,
    qknorm/report/racerebuild.py): Δ and the interval turned back to the objective's sign,
    the leader by its label."""
    out: dict[str, Any] = {"outcome": v.outcome, "n": n_run,
                           "after": blocks[n_run - 1] if n_run else None}
    test = v.test
    if v.look is not None:
        out.update(look=v.look.n, leader=label(v.look.leader),
                   delta=None if test is None else sign * test.delta,
                   p=None if test is None else test.p,
                   p_adjusted=None if test is None else test.p_adjusted)
    if equivalence is not None:
        low, high = ((None, None) if test is None or test.low is None else
                     sorted((sign * test.low, sign * test.high)))
        out.update(low=low, high=high)
    return out


def stopped_record(runs: Mapping[str, dict], block: str, n_run: int) -> dict[str, Any]:
    """stop_attr's record, from the candidate's race_runs (a rebuilt report's too)."""
    stop = runs[block]
    return {"outcome": STOPPED, "n": n_run, "after": block, "step": stop["stopped_at"],
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
              if finite(wall) and finite(threads) else None)
    return {"value": value, "steps": int(steps) if finite(steps) else None, "core_s": core_s}

