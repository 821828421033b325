"""A race or a racing search read back from its study: what kind of study it is, the race's
elimination table and the compute it spent, the search's proposals and its answer. What the
sweeper prints at its end, qknorm.status shows any time and the report tabulates, from the
study alone (the schedules, qknorm/sweep/race/schedule.py and search.py, write it). Light
imports only: the status line reads it.

A study's kind is in one study user attr (RACE_SETTINGS_ATTR, stored as `race`): none for a
plain sweep, the race's settings for a race, and for a racing search the same with `search`,
its sampler.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from qknorm.cells import num
from qknorm.multitest import PAIRED_T, ReplicateTest
from qknorm.sweep.race import driver, intensify, looks, verdicts
from qknorm.sweep.race.verdicts import (
    BEST,
    DROPPED,
    LEVEL,
    NOT_STARTED,
    PARKED,
    RACING,
    STOPPED,
    SURVIVED,
    UNDECIDED,
    WORSE,
)
from qknorm.sweep.study import (
    RACE_CANDIDATE_ATTR,
    RACE_OUTCOME_ATTR,
    RACE_RUNS_ATTR,
    RACE_SETTINGS_ATTR,
    RETRIED_ATTR,
    STATUS_ATTR,
    SURPLUS,
    retried_numbers,
)

PLAIN, RACE, SEARCH = "plain", "race", "search"  # the kinds of study (kind)


def settings_of(study: Any) -> Any:
    """The race settings a study holds (study user attr RACE_SETTINGS_ATTR); None: none, or no
    study."""
    return None if study is None else study.user_attrs.get(RACE_SETTINGS_ATTR)


def kind(of: Any) -> str:
    """What kind of study this is, or a sweep will make: SEARCH (a racing search: its settings
    name the sampler, `search`), RACE (any other race settings) or PLAIN (none). `of`: a study
    (anything with user_attrs), its race settings (RaceSpec.settings(), a dict), or None."""
    settings = settings_of(of) if hasattr(of, "user_attrs") else of
    if not isinstance(settings, dict):
        return PLAIN
    return SEARCH if settings.get("search") else RACE


# ---------------------------------------------------------------------------------------------
# A race: its counted trials, their block results, the elimination table and the console line.

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
                and self.spent["steps"] + self.run > self.budget_steps
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
        row["answer"] = looks.answer(outcome, row["leader"], label, row["p_adjusted"],
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


def settings_test(settings: Mapping[str, object]) -> ReplicateTest:
    """The looks' test as a study's race settings record it (a race or a racing search; one
    raced before the key existed: the paired t)."""
    return (ReplicateTest(settings["test"], settings["ratio"]) if settings.get("test")
            else PAIRED_T)


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


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole and math.isfinite(whole) else "-"


def summary_line(e: Elimination) -> str:
    """One line for the console at the end of a race."""
    dropped = [r for r in e.rows if r["outcome"] == DROPPED]
    level = [r for r in e.rows if r["outcome"] == LEVEL]
    stopped = [r for r in e.rows if r["outcome"] == STOPPED]
    left = [r for r in e.rows if r["outcome"] == SURVIVED]
    racing = [r for r in e.rows if r["outcome"] in (RACING, NOT_STARTED)]
    line = f"race: {len(dropped)} of {len(e.rows)} candidates dropped, "
    if level:
        line += (f"{len(level)} level with the leader within ±{e.equivalence:g} ("
                 + ", ".join(r["candidate"] for r in level) + "), ")
    if stopped:
        line += (f"{len(stopped)} stopped inside a replicate ("
                 + "; ".join(f"{r['candidate']}: {stop_place(r)}, Δ {num(r['delta'], '+.4f')}"
                             for r in stopped) + "), ")
    line += f"{len(left)} left ({', '.join(r['candidate'] for r in left) or 'none'})"
    undecided = [r for r in left if r["answer"] == UNDECIDED]
    if undecided and not racing and e.equivalence is not None:  # without δ, none is decided
        line += f", {len(undecided)} of them undecided"
    if racing:  # held by another sweeper on this study, or by one that was killed
        line += (f", {len(racing)} still racing elsewhere "
                 f"({', '.join(r['candidate'] for r in racing)})")
    partial = f" ({e.spent['stopped']} stopped early)" if e.spent.get("stopped") else ""
    line += (f"; ran {e.spent['runs']}{partial} of "
             f"{e.grid['runs']} runs ({share(e.spent['runs'], e.grid['runs'])} of the grid)")
    if e.spent["core_s"]:
        line += (f", {e.spent['core_s']:,.0f} core-seconds "
                 f"({share(e.spent['core_s'], e.grid['core_s'])} of the grid's estimate)")
    if e.spent["steps"]:
        line += (f", {e.spent['steps']:,.0f} training steps "
                 f"({share(e.spent['steps'], e.grid['steps'])})")
    return line + (f"; {budget_words(e)}" if e.out_of_budget else "")


def budget_words(e: Elimination) -> str:
    return (f"no further run fits in its budget of {e.budget_steps:,} training steps: no "
            "further replicate was launched")


def stop_place(row: dict) -> str:
    return f"{row['after']} at step {row['step']}"


# ---------------------------------------------------------------------------------------------
# A racing search: its proposals in the order they were first made, the search replayed from
# their block results (qknorm/sweep/race/intensify.py, through the driver) and its answer.

def rules(settings: dict) -> intensify.Rules:
    return intensify.Rules(len(settings["blocks"]), settings["min_replicates"],
                           settings["alpha"], settings.get("equivalence"),
                           settings_test(settings))


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
           ) -> tuple[list[FrozenTrial], list[intensify.Proposal]]:
    """The proposals' trials, and what the driver reads of each: its completed blocks, whether
    a run of it stopped at a rung (and how far behind there), whether it can run more, and the
    steps its runs took."""
    props_t = proposals(trials)
    return props_t, [_proposal(t, settings, sign) for t in props_t]


def _proposal(t: FrozenTrial, settings: dict, sign: float) -> intensify.Proposal:
    runs = t.user_attrs.get(RACE_RUNS_ATTR, {})
    stopped = stopped_block(t.user_attrs)
    return intensify.Proposal(
        tuple(t.params.values()), block_values(t.user_attrs, settings["blocks"], sign),
        stopped is not None, t.state == TrialState.RUNNING and stopped is None,
        runs[stopped].get("delta") if stopped else None,
        steps_spent([t]), run_steps([t]))


def answer(trials: list[FrozenTrial], settings: Any) -> list[dict] | None:
    """One row per proposal: label, trial number, answer (best, level, worse, undecided,
    racing, failed), replicates run, mean (and sample std) over the completed ones, Δ vs the
    best with its interval and Holm-adjusted p, steps; None when the settings are not a racing
    search's."""
    if kind(settings) != SEARCH:
        return None
    props_t, props = ledger(trials, settings, settings.get("sign", 1.0))
    search, final = driver.answer(props, rules(settings))
    rows = []
    for i, t in enumerate(props_t):
        racing = search.judged.get(i) is not None and search.judged[i].outcome in (
            RACING, PARKED) and props[i].live
        j = None if racing else final.get(i) or search.judged.get(i)
        runs = t.user_attrs.get(RACE_RUNS_ATTR, {})
        done = completed(runs)
        word = verdicts.answer(j.outcome) if j else RACING  # stopped: undecided, untested
        values = [r["value"] for r in done.values()]
        rows.append({"candidate": t.user_attrs.get(RACE_CANDIDATE_ATTR, str(t.params)),
                     "number": t.number, "params": dict(t.params), "answer": word,
                     "stopped": j is not None and j.outcome == STOPPED,
                     "n": len(runs), "mean": statistics.fmean(values) if values else None,
                     "std": statistics.stdev(values) if len(values) > 1 else None,
                     "delta": j.delta if j else None,
                     "low": j.low if j else None, "high": j.high if j else None,
                     "p_adjusted": j.p if j else None,
                     "steps": props[i].steps})  # the ledger summed its runs
    return rows


def short(row: dict) -> str:
    """A proposal as the answer names it, by config values: norm.p=1.987 (4 significant
    digits), also for a 1/norm.p param; a trial with no params yet by its number."""
    return " ".join(f"{k.removeprefix('1/')}="
                    + (f"{v:.4g}" if isinstance(v, float) else str(v))
                    for k, v in _config_values(row["params"]).items()) or f"trial {row['number']}"


def p_of(row: dict) -> float | None:
    """The proposal's p; None if it sets no p."""
    p = _config_values(row["params"]).get("norm.p", _config_values(row["params"]).get("1/norm.p"))
    return p if isinstance(p, float) else None


def _config_values(params: dict) -> dict[str, Any]:
    """Param name -> the value the job's config gets: a 1/KEY param read back (0 is inf), as
    space.Param.value gives it (space is not imported: the status line stays light)."""
    out = {}
    for key, v in params.items():
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if key.startswith("1/") and number:
            v = math.inf if v == 0 else 1 / v
        out[key] = float(v) if number else v
    return out


def answer_lines(rows: list[dict], settings: dict) -> list[str]:
    """The search's answer in words: the best, level, worse, undecided (what the sweeper prints
    at its end and qknorm.status prints any time)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["answer"], []).append(r)
    best = by.get(BEST, [])
    delta = settings.get("equivalence")
    line = "search: " + (f"best {short(best[0])} (mean {best[0]['mean']:.4f} over "
                         f"{best[0]['n']} replicates)" if best else "no incumbent yet")
    undecided = by.pop(UNDECIDED, [])
    by[UNDECIDED] = [r for r in undecided if not r["stopped"]]
    by[STOPPED] = [r for r in undecided if r["stopped"]]
    for word, what in ((LEVEL, f"level with it within ±{delta:g}" if delta else ""),
                       (WORSE, "worse"), (UNDECIDED, "undecided"),
                       (STOPPED, "undecided, stopped at a rung"), (RACING, "racing")):
        if by.get(word):
            line += f"; {what or word}: " + ", ".join(short(r) for r in by[word])
    for word in [w for w in by if w not in (BEST, LEVEL, WORSE, UNDECIDED, STOPPED, RACING)]:
        line += f"; {word}: " + ", ".join(short(r) for r in by[word])  # failed, ...: all named
    steps = sum(r["steps"] for r in rows)
    return [line + f"; {len(rows)} proposals, {steps:,} training steps"]


def search_lines(study: Any) -> list[str]:
    """A racing search's answer in words (answer_lines); [] for a study of another kind."""
    settings = settings_of(study)
    rows = answer(study.get_trials(deepcopy=False), settings)
    return [] if rows is None else answer_lines(rows, settings)
