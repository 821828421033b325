"""A race or a racing search as a table, from its study: the race's elimination (each
candidate's outcome, the look that decided it, the compute spent against the grid's) and the
search's answer (one row per proposal, replayed through the driver). What the sweeper prints
at its end, qknorm.status shows any time and the report tabulates."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial

from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest
from hydra_racing_sweeper.race import (
    NOT_STARTED,
    PARKED,
    RACING,
    STOPPED,
    SURVIVED,
    driver,
    looks,
    runs_fit,
    verdicts,
)
from hydra_racing_sweeper.readback.kinds import RACE, SEARCH, kind, rules, settings_of, settings_test
from hydra_racing_sweeper.readback.ledger import completed, ledger, race_trials, run_steps
from hydra_racing_sweeper.study import (
    RACE_CANDIDATE_ATTR,
    RACE_OUTCOME_ATTR,
    RACE_RUNS_ATTR,
)


@dataclass
class Elimination:
    blocks: list[str]
    baseline: str | None
    rows: list[dict]  # per candidate, in grid order: label, outcome, n, after, leader, delta, ...
    spent: dict[str, float]  # runs, steps, core_s the race ran
    grid: dict[str, float]  # the same for the full grid (steps, core_s: estimated)
    budget_steps: int | None = None  # the race's budget, if it had one
    equivalence: float | None = None  # δ, if the race took out level candidates
    alpha: float = 0.05  # the race's
    test: ReplicateTest = PAIRED_T  # its looks' test (a study raced before the key: paired)
    run: int = 0  # the steps of its longest completed run (run_steps)

    @property
    def out_of_budget(self) -> bool:
        """Replicates are left to run and no further run fits in what is left of its budget:
        it ended (or ends) there (the driver's rule)."""
        return (self.budget_steps is not None
                and runs_fit(self.spent["steps"], self.run, self.budget_steps) == 0
                and any(r["outcome"] in (SURVIVED, RACING) and r["n"] < len(self.blocks)
                        for r in self.rows))


def elimination(study: Any) -> Elimination | None:
    """The race a study holds (for the console line, the status and the report), or None: not
    a race (a racing search answers with `answer`)."""
    if kind(study) != RACE:
        return None
    return elimination_of(settings_of(study), race_trials(study.get_trials(deepcopy=False)))


def elimination_of(settings: dict, trials: Mapping[str, object]) -> Elimination:
    """The race of these settings (study user attr RACE_SETTINGS_ATTR) and each candidate's
    counted trial by label (race_trials picks them). A run stopped at a rung counts in the
    compute spent (its partial steps and core-seconds), not in the mean."""
    blocks = list(settings["blocks"])
    runs_of = {label: dict(t.user_attrs.get(RACE_RUNS_ATTR, {})) if t is not None else {}
               for label, t in ((c, trials.get(c)) for c in settings["candidates"])}
    rows = []
    spent = {"runs": 0, "stopped": 0, "steps": 0, "core_s": 0.0}
    records = {label: (trials[label].user_attrs.get(RACE_OUTCOME_ATTR, {})
                       if trials.get(label) is not None else {})
               for label in settings["candidates"]}
    survivors = sum(r.get("outcome") == SURVIVED for r in records.values())
    equivalence = settings.get("equivalence")  # a study raced before the key: None
    for label in settings["candidates"]:
        t, record = trials.get(label), records[label]
        runs, done = runs_of[label], completed(runs_of[label])
        outcome = record.get("outcome") or (RACING if t is not None else NOT_STARTED)
        row = {"candidate": label, "outcome": outcome, "n": len(runs),
               "mean": statistics.fmean(r["value"] for r in done.values()) if done
               else math.nan,
               **{k: record.get(k) for k in ("after", "step", "leader", "delta", "p",
                                             "p_adjusted", "low", "high")}}
        row["answer"] = looks.look_answer(outcome, row["leader"], label, row["p_adjusted"],
                                     row["low"], row["high"], settings["alpha"], equivalence,
                                     survivors == 1)
        # What the candidate's runs cost (a stopped run's partial steps and core-seconds too).
        for key in ("steps", "core_s"):
            row[key] = sum(r[key] for r in runs.values() if r.get(key) is not None)
        rows.append(row)
        spent["runs"] += len(runs)
        spent["stopped"] += len(runs) - len(done)
        for key in ("steps", "core_s"):
            spent[key] += row[key]
    return Elimination(blocks, settings.get("baseline"), rows, spent,
                       _grid_estimate(runs_of, len(blocks)), settings.get("budget_steps"),
                       equivalence, settings["alpha"], settings_test(settings),
                       run_steps(t for t in trials.values() if t is not None))


def _grid_estimate(runs_of: Mapping[str, Mapping[str, dict]], n_blocks: int) -> dict:
    """The full grid's runs, steps and core-seconds: every candidate's mean completed run,
    times the number of blocks; for a candidate with none (stopped in its first block), the
    mean completed run of all candidates (same model, same steps)."""
    grid: dict[str, float] = {"runs": len(runs_of) * n_blocks}
    for key in ("steps", "core_s"):
        means = {}
        for label, runs in runs_of.items():
            known = [r[key] for r in completed(runs).values() if r.get(key) is not None]
            means[label] = statistics.fmean(known) if known else None
        seen = [m for m in means.values() if m is not None]
        fallback = statistics.fmean(seen) if seen else math.nan
        grid[key] = sum((fallback if m is None else m) * n_blocks for m in means.values())
    return grid


def answer_rows(trials: list[FrozenTrial], settings: Any) -> list[dict] | None:
    """One row per proposal: label, trial number, answer (best, level, worse, undecided,
    racing, failed, not run), replicates run, mean (and sample std) over the completed ones, Δ
    vs the best with its interval and Holm-adjusted p, steps and its longest completed run's;
    None when the settings are not a racing search's."""
    if kind(settings) != SEARCH:
        return None
    props_t, props = ledger(trials, settings, settings.get("sign", 1.0))
    search, final = driver.search_answer(props, rules(settings))
    rows = []
    for i, t in enumerate(props_t):
        racing = search.judged.get(i) is not None and search.judged[i].outcome in (
            RACING, PARKED) and props[i].live
        j = None if racing else final.get(i) or search.judged.get(i)
        runs = t.user_attrs.get(RACE_RUNS_ATTR, {})
        done = completed(runs)
        word = verdicts.outcome_answer(j.outcome) if j else RACING  # stopped: undecided, untested
        values = [r["value"] for r in done.values()]
        rows.append({"candidate": t.user_attrs.get(RACE_CANDIDATE_ATTR, str(t.params)),
                     "number": t.number, "params": dict(t.params), "answer": word,
                     "stopped": j is not None and j.outcome == STOPPED,
                     "n": len(runs), "mean": statistics.fmean(values) if values else None,
                     "std": statistics.stdev(values) if len(values) > 1 else None,
                     "delta": j.delta if j else None,
                     "low": j.low if j else None, "high": j.high if j else None,
                     "p_adjusted": j.p if j else None,
                     "steps": props[i].steps,  # the ledger summed its runs
                     "run": props[i].run})  # its longest completed run: the budget's unit
    return rows
