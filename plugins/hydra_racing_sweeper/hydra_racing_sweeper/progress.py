"""A sweep's status in at most three lines, read from its Optuna study alone, so it works from
any terminal or machine while the sweep runs (python -m qknorm.status; the sweeper logs it after
every tell). docs/status.md explains the lines.

  trials 5/8: 2 complete, 1 pruned, 1 failed, 1 running; elapsed 10m00s, ETA ≤ 5m00s (...)
  best: trial 3 (norm.p=2.5) 3.8000 ± 0.0100 (n=2)
  spent: 6 jobs, 120 training steps, 0.0167 core-h

Trials are counted as the sweeper counts them (hydra_racing_sweeper/study.py, holds_slot): a stale trial
that was retried and a surplus trial hold no slot. A racing search counts its proposals by their
answer (readback.answer_rows: best, worse, level, undecided, failed; the rest racing), and its best
is the answer's, with its mean over its replicates:

  trials 6/10: 1 best, 2 worse, 1 level, 1 undecided, 1 failed, 2 racing; elapsed 10m00s, ...

The ETA:

  plain  median job time x jobs left / slots, where a job's time is a completed trial's wall
         time (ask to tell) / its n jobs, and jobs left = (total - finished trials) x the jobs
         per trial. A batch of `slots` trials (the sweeper's n_jobs) takes one trial's wall
         time, whether its launcher runs the batch's jobs one by one or all at once, so this
         is right either way. A running trial counts as not started: the ETA errs long by up
         to one batch.
  race   elapsed / runs done x runs left, where runs left are every block still missing of the
         candidates still racing (the throughput so far: a race's trials live as long as the
         race, so their wall time says nothing about one run's).
  search elapsed / steps run x the budget's steps left (budget_steps); without a budget,
         elapsed / runs done x runs left at most (every proposal not made yet and every
         racing one running all its blocks). Its proposals stay open to the end, so, as in a
         race, the pace so far is all there is.

A sweep that no sweeper runs any more (stopped_sweep: its RUNNING trials' heartbeats are older
than the grace period its sweeper recorded, or none runs and none was told within it) counts
those trials as stopped, and says so with the command that resumes it, in place of the ETA:

  trials 3/8: 2 complete, 0 pruned, 0 failed, 1 stopped; elapsed 1m00s, stopped: no sweeper
  runs it (the heartbeats of its 1 running trial stopped over 20s ago); resume: cd DIR && ...

"≤": the jobs left are an upper bound, because a pruner (a trial's PRUNER_ATTR spec, other than
none) may stop trials early and a race drops candidates. The time per job stays an estimate.
"""

from __future__ import annotations

import math
import os
import shlex
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from hydra_racing_sweeper import readback
from hydra_racing_sweeper.race import verdicts
from hydra_racing_sweeper.rundir import COMPLETED, FAILED, FINAL_FILE, PRUNED, read_final
from hydra_racing_sweeper.specs import journal_stale_ids
from hydra_racing_sweeper.study import (
    DUPLICATE_ATTR,
    JOB_DIRS_ATTR,
    JOBS_ATTR,
    N_ATTR,
    PARAMS_ATTR,
    PRUNER_ATTR,
    RACE_CANDIDATE_ATTR,
    STATUS_ATTR,
    STD_ATTR,
    SURPLUS,
    SWEEPER_ATTR,
    holds_slot,
    recorded_total,
    retried_numbers,
)
from hydra_racing_sweeper.units import duration, finite

# A candidate the race is done with; level (with the leader, within ±δ) is an answer too.
DECIDED = (verdicts.DROPPED, verdicts.LEVEL, verdicts.STOPPED, verdicts.SURVIVED,
           verdicts.FAILED)

# A racing search's answers (readback.answer_rows), in the order its status line counts them.
ANSWERS = (verdicts.BEST, verdicts.WORSE, verdicts.LEVEL, verdicts.UNDECIDED, verdicts.FAILED,
           verdicts.RACING, verdicts.NOT_RUN)

# run dir -> ((mtime_ns, size) of its final.json, the fields the status reads). A final.json is
# read once per version: a retried job may write its run dir's final.json again.
_finals: dict[str, tuple[tuple[int, int], dict[str, Any] | None]] = {}


def status_lines(study: optuna.Study, n_trials: int | None = None, slots: int = 1,
                 now: float | None = None, stopped: Stopped | None = None) -> list[str]:
    """The study's status (see the module doc): progress and time, the best so far, the compute
    spent. `n_trials`: the sweep's total (None: a race's candidates, else the total the
    sweeper recorded in the study, else the grid's size for a grid, else unknown); `slots`:
    trials run at once (the sweeper's n_jobs); `now`: Unix time (tests fix it); `stopped`: no
    sweeper runs the study (stopped_sweep; the sweeper's own lines pass None)."""
    now = time.time() if now is None else now
    trials = study.get_trials(deepcopy=False)  # the one read of the study
    retried = retried_numbers(trials)
    counted = [t for t in trials if holds_slot(t, retried)]
    settings = readback.settings_of(study)
    searched = readback.answer_rows(trials, settings)  # None: not a racing search
    elim = (readback.elimination_of(settings, readback.race_trials(trials))
            if readback.kind(settings) == readback.RACE else None)
    total = n_trials if n_trials is not None else (
        len(settings["candidates"]) if elim is not None
        else recorded_total(study.user_attrs) or _grid_size(trials))
    lines = [_progress(trials, counted, total, slots, now, elim, searched, settings, stopped),
             _best(study, counted) if searched is None else _search_best(searched)]
    lines.append(_race_line(elim) if elim is not None else _spent_line(trials, retried, searched))
    if searched is not None:
        lines += readback.answer_lines(searched, settings)
    return lines


# -- line 1: trials and time ----------------------------------------------------------------

def _progress(trials: list[FrozenTrial], counted: list[FrozenTrial], total: int | None,
              slots: int, now: float, elim: readback.Elimination | None,
              searched: list[dict] | None, settings: dict | None,
              stopped: Stopped | None = None) -> str:
    running = sum(t.state == TrialState.RUNNING for t in counted)
    starts = [t.datetime_start.timestamp() for t in trials if t.datetime_start is not None]
    if searched is None:
        by = {s: sum(t.state.is_finished() and t.user_attrs.get(STATUS_ATTR) == s
                     for t in counted) for s in (COMPLETED, PRUNED, FAILED)}
        finished = sum(by.values())
    else:  # a racing search: its proposals by their answer (the incumbent's is best)
        by = {w: sum(r["answer"] == w for r in searched) for w in ANSWERS}
        finished = len(searched) - by[verdicts.RACING]
    done = running == 0 and total is not None and finished >= total
    halted = stopped is not None and bool(starts) and not done
    # A stopped sweep's trials still RUNNING in the study run nowhere: they are stopped.
    moving = "stopped" if halted else "running"
    if searched is None:
        words = (f"{by[COMPLETED]} complete, {by[PRUNED]} pruned, {by[FAILED]} failed, "
                 f"{running} {moving}")
    else:
        words = ", ".join(f"{n} {'stopped' if halted and w == verdicts.RACING else w}"
                          for w, n in by.items() if n or w != verdicts.NOT_RUN)  # rare: if any
    shown = f"{finished}/{total}" if total is not None else f"{finished} so far"
    line = f"trials {shown}: {words}"
    if not starts:
        return line + "; not started"
    last = max([t.datetime_complete.timestamp() for t in trials if t.datetime_complete],
               default=max(starts))
    if done:  # over: its elapsed time stays what it was
        return line + f"; elapsed {duration(max(last, *starts) - min(starts))}, done"
    # Not over, stopped or not: the clock runs from the first start, as it did while a sweeper
    # ran it, so a reading never goes back (a stopped sweep read 34 s after reading 41 s
    # running, counted to its last end); never before the last event the study holds (the
    # clock of a machine behind the sweeper's).
    elapsed = max(now, last, *starts) - min(starts)
    if halted:
        return line + f"; elapsed {duration(elapsed)}, {stopped.line()}"
    line += f"; elapsed {duration(elapsed)}, "
    if total is None:
        return line + "ETA unknown (the total is not known: give n_trials)"
    if searched is not None:
        return line + _search_eta(searched, elapsed, settings.get("budget_steps"), total,
                                  len(settings["blocks"]))
    bound = "≤ " if elim is not None or _pruned_sometimes(trials) else ""
    if elim is not None:
        return line + _race_eta(elim, elapsed, bound)
    timed = [t for t in counted if t.state == TrialState.COMPLETE
             and t.user_attrs.get(STATUS_ATTR) == COMPLETED and DUPLICATE_ATTR not in t.user_attrs
             and t.duration is not None and (t.user_attrs.get(N_ATTR) or 0) >= 1]
    if not timed:
        return line + "ETA unknown (no trial completed yet)"
    job_s = statistics.median(t.duration.total_seconds() / t.user_attrs[N_ATTR] for t in timed)
    per_trial = max(t.user_attrs[N_ATTR] for t in timed)
    jobs_left = max(total - finished, 0) * per_trial
    eta = job_s * jobs_left / max(slots, 1)
    return line + (f"ETA {bound}{duration(eta)} ({jobs_left} jobs left x {duration(job_s)} "
                   f"median job / {slots} slot{'s' if slots != 1 else ''})")


def _race_eta(elim: readback.Elimination, elapsed: float, bound: str) -> str:
    """A race's ETA: the runs its undecided candidates may still make, at the pace so far."""
    runs_done = elim.spent["runs"]
    left = sum(len(elim.blocks) - r["n"] for r in elim.rows if r["outcome"] not in DECIDED)
    if not runs_done:
        return "ETA unknown (no run finished yet)"
    per_run = elapsed / runs_done
    return (f"ETA {bound}{duration(per_run * left)} ({left} runs left at most x "
            f"{duration(per_run)} per run so far)")


def _search_eta(searched: list[dict], elapsed: float, budget: int | None, total: int | None,
                n_blocks: int) -> str:
    """A racing search's ETA at the pace so far (its proposals stay open until it ends, so no
    trial's wall time says what a run takes). With a step budget: elapsed / steps run x the
    budget's steps left; without: elapsed / runs done x runs left at most (every proposal not
    yet made, and every racing one, running all its blocks)."""
    steps = sum(r["steps"] for r in searched)
    runs = sum(r["n"] for r in searched)
    if budget is not None:
        if not steps:
            return "ETA unknown (no run finished yet)"
        left = max(budget - steps, 0)
        return (f"ETA ≤ {duration(elapsed / steps * left)} ({left:,} of the budget's "
                f"{budget:,} steps left x {elapsed / steps:.3g} s a step so far)")
    if not runs:
        return "ETA unknown (no run finished yet)"
    left = (max((total or 0) - len(searched), 0) * n_blocks
            + sum(n_blocks - r["n"] for r in searched if r["answer"] == verdicts.RACING))
    return (f"ETA ≤ {duration(elapsed / runs * left)} ({left} runs left at most x "
            f"{duration(elapsed / runs)} per run so far)")


def _pruned_sometimes(trials: list[FrozenTrial]) -> bool:
    """Whether the latest trial was asked under a pruner that may stop trials early."""
    spec = next((t.user_attrs[PRUNER_ATTR] for t in reversed(trials)
                 if isinstance(t.user_attrs.get(PRUNER_ATTR), dict)), None)
    return spec is not None and spec.get("name", "none") != "none"


def _grid_size(trials: list[FrozenTrial]) -> int | None:
    """The grid's size, from the search space Optuna's GridSampler stores in each trial."""
    for t in reversed(trials):
        space = t.system_attrs.get("search_space")
        if isinstance(space, dict) and "grid_id" in t.system_attrs:
            return math.prod(len(v) for v in space.values())
    return None


# -- a stopped sweep ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Stopped:
    """No sweeper runs the study: what the status says instead of a running count and an ETA."""

    stale: int  # RUNNING trials whose heartbeat is older than the grace period
    grace: int  # the sweeper's grace period, seconds
    command: str | None  # what resumes it, and where (the latest sweeper's, SWEEPER_ATTR)
    cwd: str | None

    def line(self) -> str:
        why = (f"the heartbeats of its {self.stale} running trial{'s' if self.stale > 1 else ''}"
               f" stopped over {self.grace}s ago" if self.stale
               else f"no trial running and none told for over {self.grace}s")
        resume = (f"cd {shlex.quote(self.cwd)} && {self.command}" if self.command and self.cwd
                  else "rerun the command that started it")
        return f"stopped: no sweeper runs it ({why}); resume: {resume}"


def stopped_sweep(study: optuna.Study, storage: optuna.storages.BaseStorage,
                  now: float | None = None) -> Stopped | None:
    """Whether no sweeper runs the study: its RUNNING trials' heartbeats are all stale (older
    than the grace period its latest sweeper recorded, SWEEPER_ATTR; Optuna's own test, which
    fail_stale_trials applies), or no trial runs and none was told within the grace period.
    None while a sweeper may run it, or when the study records no sweeper (from before the
    record: then nothing is known). `storage`: the study's, opened to read (status.py)."""
    sweeper = study.user_attrs.get(SWEEPER_ATTR)
    if not isinstance(sweeper, dict) or not sweeper.get("grace_period"):
        return None
    grace = int(sweeper["grace_period"])
    now = time.time() if now is None else now
    trials = study.get_trials(deepcopy=False)
    running = [t for t in trials if t.state == TrialState.RUNNING]
    if running:
        stale = _stale_ids(storage, study, grace, now)
        if stale is None or not all(t._trial_id in stale for t in running):
            return None
    else:
        times = [d.timestamp() for t in trials for d in (t.datetime_start, t.datetime_complete)
                 if d is not None]
        if not times or now - max(times) <= grace:
            return None
    return Stopped(len(running), grace, sweeper.get("command"), sweeper.get("cwd"))


def _stale_ids(storage: optuna.storages.BaseStorage, study: optuna.Study, grace: int,
               now: float) -> set[int] | None:
    """Ids of the study's RUNNING trials that are stale (study.is_stale: last heartbeat, or
    start where none, older than `grace` seconds); None for a storage that keeps no heartbeats.
    An RDB storage (specs.open_reader's): its _get_stale_trial_ids, what fail_stale_trials
    calls (it only reads), with the sweeper's grace period. A journal: the beats our
    JournalHeartbeatStorage writes as a trial system attr (specs.journal_stale_ids)."""
    if isinstance(storage, optuna.storages.RDBStorage):
        storage.heartbeat_interval, storage.grace_period = grace, grace
        return set(storage._get_stale_trial_ids(study._study_id))
    if isinstance(storage, optuna.storages.JournalStorage):
        return set(journal_stale_ids(
            study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)), grace, now))
    return None


# -- line 2: the best so far ----------------------------------------------------------------

def _best(study: optuna.Study, counted: list[FrozenTrial]) -> str:
    # A penalised failure is COMPLETE for Optuna but not a result (as outputs.summary).
    done = [t for t in counted if t.state == TrialState.COMPLETE
            and t.user_attrs.get(STATUS_ATTR) == COMPLETED and t.values is not None]
    directions = study.directions
    if len(directions) > 1:
        front = _pareto(done, directions)
        return f"Pareto front: {len(front)} of {len(done)} complete trials"
    if not done:
        return "best: none yet"
    sign = 1.0 if directions[0] == StudyDirection.MINIMIZE else -1.0
    best = min(done, key=lambda t: (sign * t.value, t.number))
    line = f"best: trial {best.number} ({_params(best)}) {best.value:.4f}"
    std, n = best.user_attrs.get(STD_ATTR), best.user_attrs.get(N_ATTR)
    if isinstance(std, list):
        std = std[0]
    if isinstance(n, int) and n > 1:
        if isinstance(std, (int, float)) and math.isfinite(std):
            line += f" ± {std:.4f}"
        line += f" (n={n})"
    return line


def _search_best(rows: list[dict]) -> str:
    """A racing search's best: its answer's (readback.answer_lines), with its trial, its mean
    and std over the replicates it completed, and n as the answer counts them."""
    best = next((r for r in rows if r["answer"] == verdicts.BEST), None)
    if best is None or best["mean"] is None:
        return "best: none yet"
    line = f"best: trial {best['number']} ({readback.short(best)}) {best['mean']:.4f}"
    if best["n"] > 1:
        line += (f" ± {best['std']:.4f}" if best["std"] is not None else "") + \
            f" (n={best['n']})"
    return line


def _params(trial: FrozenTrial) -> str:
    if RACE_CANDIDATE_ATTR in trial.user_attrs:
        return trial.user_attrs[RACE_CANDIDATE_ATTR]
    params = trial.user_attrs.get(PARAMS_ATTR) or trial.params
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in params.items())


def _pareto(done: list[FrozenTrial], directions: list[StudyDirection]) -> list[FrozenTrial]:
    signs = [1.0 if d == StudyDirection.MINIMIZE else -1.0 for d in directions]
    keys = [[s * v for s, v in zip(signs, t.values, strict=True)] for t in done]

    def dominates(a: list[float], b: list[float]) -> bool:
        return all(x <= y for x, y in zip(a, b, strict=True)) and a != b

    return [t for t, k in zip(done, keys, strict=True)
            if not any(dominates(o, k) for o in keys)]


# -- line 3: compute spent (a race: its share of the grid) ------------------------------------

def _spent_line(trials: list[FrozenTrial], retried: set[int],
                searched: list[dict] | None = None) -> str:
    """Training steps and core-hours over every run dir the study names that has a final.json
    (finished trials' jobs, a running trial's finished replicates); each dir once, as a
    retry and a repeat name the dirs of the trial they stand for. A racing search's answer
    line counts the steps of the runs its proposals recorded (race_runs): a run that finished
    on disk but that no sweeper has read back yet (its sweeper was killed first) is here and
    not there, a run dir on another machine there and not here; when they differ, the line
    says so."""
    dirs: set[str] = set()
    for t in trials:
        if t.user_attrs.get(STATUS_ATTR) == SURPLUS:
            continue
        dirs.update(t.user_attrs.get(JOBS_ATTR) or ())
        dirs.update((t.user_attrs.get(JOB_DIRS_ATTR) or {}).values())
    finals = [f for f in (_final(d) for d in sorted(dirs)) if f is not None]
    steps = sum(_num(f.get("steps")) for f in finals)
    core_s = sum(_num(f.get("wall_time_s")) * _num(f.get("threads")) for f in finals)
    line = (f"spent: {len(finals)} jobs, {steps:,.0f} training steps, "
            f"{core_hours(core_s)} core-h")
    counted = sum(r["steps"] for r in searched) if searched is not None else steps
    if counted != steps:
        line += (f" (run dirs with a final.json; the search's line counts the {counted:,.0f} "
                 "steps of the runs its proposals recorded)")
    return line


def _race_line(e: readback.Elimination) -> str:
    counts = {o: sum(r["outcome"] == o for r in e.rows) for o in DECIDED}
    decided = sum(counts.values())
    parts = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
    line = (f"race: {decided} of {len(e.rows)} candidates decided"
            f"{f' ({parts})' if parts else ''}, {len(e.rows) - decided} racing; "
            f"ran {e.spent['runs']} of {e.grid['runs']} runs "
            f"({readback.share(e.spent['runs'], e.grid['runs'])} of the grid), "
            f"{e.spent['steps']:,.0f} training steps "
            f"({readback.share(e.spent['steps'], e.grid['steps'])}), "
            f"{core_hours(e.spent['core_s'])} core-h "
            f"({readback.share(e.spent['core_s'], e.grid['core_s'])} of the grid's estimate); "
            f"looks by the {e.test.short()}")
    return line


def core_hours(core_s: float) -> str:
    h = core_s / 3600
    return f"{h:,.1f}" if h >= 10 else f"{h:.3g}"


def _num(x: Any) -> float:
    return float(x) if finite(x) else 0.0


def _final(run_dir: str) -> dict[str, Any] | None:
    path = Path(run_dir) / FINAL_FILE
    try:
        st = os.stat(path)
    except OSError:
        return None  # not finished (or not on this machine)
    version = (st.st_mtime_ns, st.st_size)
    cached = _finals.get(run_dir)
    if cached is not None and cached[0] == version:
        return cached[1]
    try:
        final = read_final(Path(run_dir))
    except (OSError, ValueError):  # being replaced right now: read it next time
        return None
    fields = {k: final.get(k) for k in ("steps", "wall_time_s", "threads")} if final else None
    _finals[run_dir] = (version, fields)
    return fields
