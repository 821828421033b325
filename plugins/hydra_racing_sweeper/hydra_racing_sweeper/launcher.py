"""A trial's jobs: their overrides and run dirs, launching them through Hydra's launcher, their
outcomes from final.json, and telling a trial what its jobs gave."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from hydra_racing_sweeper import rundir, slurm
from hydra_racing_sweeper.identity import REPORTED_FILE, Identity, env_overrides
from hydra_racing_sweeper.plan import Plan
from hydra_racing_sweeper.rundir import COMPLETED, FAILED, PRUNED
from hydra_racing_sweeper.space import format_value
from hydra_racing_sweeper.study import (
    ERROR_ATTR,
    JOB_DIRS_ATTR,
    JOBS_ATTR,
    MEAN_ATTR,
    N_ATTR,
    STATUS_ATTR,
    STD_ATTR,
    block_label,
    left_to_retry,
)

log = logging.getLogger(__name__)

Job = tuple[optuna.Trial, list[str]]  # a trial and one replicate's overrides


@dataclass
class JobResult:
    status: str  # one of hydra_racing_sweeper.rundir.STATUSES
    run_dir: str
    fields: dict[str, Any] = field(default_factory=dict)
    error: str = ""


class Launcher:
    """Runs (trial, replicate) jobs through the Hydra launcher, each in its own run dir."""

    def __init__(self, launcher: Any, hydra_context: Any, config: DictConfig, sweep_dir: Path,
                 study_name: str, url: str, plan: Plan, objectives: list[str]):
        self.launcher, self.hydra_context, self.config = launcher, hydra_context, config
        self.sweep_dir = sweep_dir
        self.study_name, self.url, self.plan = study_name, url, plan
        self.objectives = objectives
        self.job_idx = 0  # jobs launched so far: Hydra numbers them on

    def launch(self, jobs: list[Job]) -> list[JobResult]:
        """Run, in one launch, the (trial, replicate overrides) jobs an earlier attempt did not
        complete. Returns every job's result, in order (a completed earlier one read back)."""
        results_of = [_reused_job(trial, combo) for trial, combo in jobs]
        todo = [i for i, r in enumerate(results_of) if r is None]
        trials = {trial.number: trial for trial, _ in jobs}
        # Kept: the dirs of replicates launched earlier (a race launches a look at a time).
        dirs = {n: dict(t.user_attrs.get(JOB_DIRS_ATTR, {})) for n, t in trials.items()}
        for (trial, combo), reused in zip(jobs, results_of, strict=True):
            planned = (self.sweep_dir / _subdir(trial, combo)).resolve()
            dirs[trial.number][block_label(combo)] = reused.run_dir if reused else str(planned)
        for number, trial in trials.items():  # before launching: a killed sweep's retry finds them
            trial.set_user_attr(JOB_DIRS_ATTR, dirs[number])
        overrides = [self.overrides(*jobs[i]) for i in todo]
        try:
            with slurm.each_job_answers(self.config.hydra.launcher):
                returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx) if todo else []
            launched = [job_result(r, self.objectives, self.plan.named) for r in returns]
        except Exception as e:  # a broken launcher fails this batch, not the study
            log.exception("launcher failed")
            launched = [JobResult(FAILED, "?", error=f"launcher: {type(e).__name__}: {e}")
                        for _ in todo]
        for i, result in zip(todo, launched, strict=True):
            if result.run_dir == "?":  # no config came back (a scancelled job): its planned dir
                result.run_dir = dirs[jobs[i][0].number][block_label(jobs[i][1])]
            results_of[i] = result
        self.job_idx += len(todo)
        return results_of

    def compose(self, overrides: list[str]) -> DictConfig:
        """The job's config as Hydra composes it (the plan composed every value already)."""
        return self.hydra_context.config_loader.load_sweep_config(self.config, overrides)

    def overrides(self, trial: optuna.Trial, combo: list[str]) -> list[str]:
        """A job's overrides: the trial's params, its replicate, and its identity (trial.Identity:
        its trial and, in a race with rungs, how it is judged) in hydra.job.env_set, where the
        job-side API reads it, whatever the task's config. A qknorm.train job's config also
        records its trial (optuna.*), which qknorm's run-dir report and trackers read."""
        plan, subdir = self.plan, _subdir(trial, combo)
        judging = (plan.race.judging(plan.space.candidate(trial))
                   if plan.race is not None and plan.race.rungs else {})
        me = Identity(self.study_name, self.url, trial.number, block_label(combo), **judging)
        # only into a config the hook typed (its own task's): another app's lacks those keys
        record = [] if plan.job is None else [
            f"{k}={format_value(v)}"
            for k, v in plan.hook.records(self.study_name, self.url, trial.number).items()]
        return [
            *plan.base_overrides, *plan.space.overrides(trial.params), *combo, *record,
            # Named by trial number: unique even when several sweepers share one sweep dir.
            f"hydra.sweep.subdir={format_value(subdir)}", *env_overrides(me),
        ]


@contextlib.contextmanager
def unless_failed_elsewhere(trial: optuna.Trial):
    """Telling a trial that another sweeper has failed as stale is skipped (study.left_to_retry).
    Without this, the one late heartbeat ended the whole sweep: a set_user_attr raises
    UpdateFinishedTrialError, and study.tell a ValueError ("Cannot tell a FAIL trial") when the
    trial was failed after its attrs were written."""
    try:
        yield
    except UpdateFinishedTrialError:
        left_to_retry(trial.number)
    except ValueError:
        stored = trial.study.get_trials(deepcopy=False)[trial.number]  # numbers are indices
        if not stored.state.is_finished():
            raise
        left_to_retry(trial.number)


def tell(study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult], plan: Plan,
         objectives: list[str], label: str | None = None) -> None:
    """COMPLETE with the mean over the jobs, PRUNED when one was pruned, else FAIL (or fail_value).
    `label`: the trial in the log line (default: its overrides, plan.space.label)."""
    with unless_failed_elsewhere(trial):
        _tell(study, trial, jobs, plan, objectives, label or plan.space.label(trial.params))


def _tell(study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult], plan: Plan,
          objectives: list[str], label: str) -> None:
    trial.set_user_attr(JOBS_ATTR, [j.run_dir for j in jobs])
    trial.set_user_attr(N_ATTR, len(jobs))
    bad = [j for j in jobs if j.status not in (COMPLETED, PRUNED)]
    values, error = None, ""
    if not bad and not any(j.status == PRUNED for j in jobs):
        values, error = mean_values(jobs, objectives, trial)
    if bad or error:
        error = error or f"job {bad[0].status} ({bad[0].run_dir}): {bad[0].error}"
        trial.set_user_attr(STATUS_ATTR, FAILED)
        trial.set_user_attr(ERROR_ATTR, error)
        if plan.fail_values is not None:
            study.tell(trial, plan.fail_values)
            log.warning("trial %d [%s] FAILED, told fail_value %s: %s", trial.number, label,
                        plan.fail_values, error)
        else:
            study.tell(trial, state=TrialState.FAIL)
            log.warning("trial %d [%s] FAILED: %s", trial.number, label, error)
    elif values is None:
        trial.set_user_attr(STATUS_ATTR, PRUNED)
        study.tell(trial, state=TrialState.PRUNED)
        log.info("trial %d [%s] PRUNED", trial.number, label)
    else:
        trial.set_user_attr(STATUS_ATTR, COMPLETED)
        study.tell(trial, values)
        shown = ", ".join(f"{o}={v:.4g}" for o, v in zip(objectives, values, strict=True))
        log.info("trial %d [%s] COMPLETE: %s (mean of %d)", trial.number, label, shown,
                 len(jobs))


def tell_out(study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult], dirs: list[str],
             objectives: list[str]) -> None:
    """A candidate the race is done with before its end: PRUNED, with its mean/std over
    the blocks it completed (`jobs`) and every run dir it has (`dirs`)."""
    with unless_failed_elsewhere(trial):
        trial.set_user_attr(JOBS_ATTR, dirs)
        trial.set_user_attr(N_ATTR, len(jobs))
        if jobs:
            mean_values(jobs, objectives, trial)
        trial.set_user_attr(STATUS_ATTR, PRUNED)
        study.tell(trial, state=TrialState.PRUNED)


def _subdir(trial: optuna.Trial, combo: list[str]) -> str:
    rep = "_".join(o.split("=", 1)[1] for o in combo)
    return f"trial{trial.number}" + (f"_{rep}" if rep else "")


def _reused_job(trial: optuna.Trial, combo: list[str]) -> JobResult | None:
    """The completed job of an earlier attempt at this trial, if any.

    A trial retried after its sweeper was killed (RetryHeartbeatStaleTrialCallback re-enqueues
    it with the killed trial's user attrs) inherits that attempt's job dirs: the replicates that
    completed there are read back instead of trained again, so a resumed sweep runs only what
    is missing.
    """
    earlier = trial.user_attrs.get(JOB_DIRS_ATTR, {}).get(block_label(combo))
    result = _final_result(earlier, None) if earlier else None
    return result if result is not None and result.status == COMPLETED else None


def objective(job: JobResult, name: str) -> float | None:
    """A completed job's finite objective, or None (the job failed, or it has no such field)."""
    if job.status != COMPLETED:
        return None
    try:
        value = float(job.fields[name])
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def mean_values(jobs: list[JobResult], objectives: list[str],
                 trial: optuna.Trial) -> tuple[list[float] | None, str]:
    """Mean of each objective over the replicate jobs; mean/std/n go into user attrs."""
    means, stds = [], []
    for name in objectives:
        try:
            xs = [float(j.fields[name]) for j in jobs]
        except (KeyError, TypeError, ValueError):
            return None, (f"final.json of {jobs[0].run_dir} has no number {name!r}; "
                          "hydra.sweeper.objectives must name final.json fields (or the keys "
                          "the task returns)")
        if not all(math.isfinite(x) for x in xs):
            return None, f"{name} is not finite in {[j.run_dir for j in jobs]}"
        means.append(statistics.fmean(xs))
        stds.append(statistics.stdev(xs) if len(xs) > 1 else 0.0)
    single = len(objectives) == 1
    trial.set_user_attr(MEAN_ATTR, means[0] if single else means)
    trial.set_user_attr(STD_ATTR, stds[0] if single else stds)  # sample std (n - 1)
    return means, ""


def job_result(ret: JobReturn, objectives: list[str], named: bool = True) -> JobResult:
    """A job's outcome: its final.json (qknorm.train writes one), or else the task's return
    value (a number, or a mapping naming the objectives) with what the job reported through
    hydra_racing_sweeper.trial (identity.REPORTED_FILE: its last step, its seconds, the step it was
    stopped at: status pruned). The latter is then written as the job's final.json, so a
    resumed sweep reads the completed job back instead of running it again."""
    run_dir = str(ret.hydra_cfg.hydra.runtime.output_dir) if ret.hydra_cfg else "?"
    result = _final_result(run_dir, ret)
    if result is not None:
        return result
    if ret.status != JobStatus.COMPLETED:
        return JobResult(FAILED, run_dir, error=_exception_line(ret))
    fields, error = returned_fields(ret.return_value, objectives, named)
    if error:
        return JobResult(FAILED, run_dir, error=error)
    reported = _reported(run_dir)
    status = COMPLETED if reported.get("stopped") is None else PRUNED
    final = {"status": status, **fields, "steps": reported.get("step"),
             "wall_time_s": reported.get("seconds")}
    if status == PRUNED:
        final["error"] = f"stopped at step {reported['stopped']}"
    if run_dir != "?":
        rundir.write_final(Path(run_dir), final)
    return JobResult(status, run_dir, final, final.get("error", ""))


def returned_fields(value: Any, objectives: list[str], named: bool = True
                    ) -> tuple[dict[str, Any], str]:
    """A task's return value as the fields the objectives are read from: a number (anything
    float() takes but a str or a bool: numpy and torch scalars too) is the one objective's
    value; a sequence (tuple, list, ListConfig, array) gives one value per objective, in order;
    a mapping (a dict, a DictConfig) names each objective, or, with the objectives unnamed
    (`named` False), a one-key mapping is the one objective. (fields, "") or ({}, why not)."""
    if isinstance(value, (DictConfig, dict)):
        return _mapping_fields(value, objectives, named)
    if _scalar(value):
        if len(objectives) == 1:
            return {objectives[0]: float(value)}, ""
        return {}, (f"the task returned 1 value for {len(objectives)} directions; return one "
                    f"per objective {objectives}, in order")
    values = _sequence(value)
    if values is None:
        return {}, (f"the task returned {type(value).__name__}, neither a number, a sequence of "
                    f"numbers nor a dict naming hydra.sweeper.objectives={objectives}; return "
                    "the value to optimize")
    if len(values) != len(objectives):
        return {}, (f"the task returned {len(values)} values for {len(objectives)} directions "
                    f"(objectives {objectives}); return one per direction, in order")
    if not all(_scalar(v) for v in values):
        return {}, f"the task returned {values!r}: not every value is a number"
    return {o: float(v) for o, v in zip(objectives, values, strict=True)}, ""


def _mapping_fields(value: Any, objectives: list[str], named: bool) -> tuple[dict[str, Any], str]:
    fields = dict(OmegaConf.to_container(value) if isinstance(value, DictConfig) else value)
    if not named and len(fields) == 1 and len(objectives) == 1:
        return {objectives[0]: next(iter(fields.values()))}, ""
    if not named:
        return {}, (f"the task returned a dict of {sorted(map(str, fields))}; set "
                    "hydra.sweeper.objectives to name the returned keys, in direction order")
    missing = [o for o in objectives if o not in fields]
    if missing:
        return {}, (f"the task returned {sorted(map(str, fields))}, without {missing[0]!r} "
                    f"of hydra.sweeper.objectives={objectives}; return it, or name the "
                    "returned keys in hydra.sweeper.objectives")
    return fields, ""


def _scalar(value: Any) -> bool:
    """A number: what float() takes, but not a str (a number spelt out is a mistake) or a bool."""
    if isinstance(value, (str, bytes, bool)) or _sequence(value) is not None:
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _sequence(value: Any) -> list[Any] | None:
    """A tuple, list, ListConfig or array's items (a 0-d array is a scalar: None)."""
    if isinstance(value, (str, bytes, dict, DictConfig)):
        return None
    if getattr(value, "ndim", 1) == 0:
        return None
    try:
        return list(value)
    except TypeError:
        return None


def _reported(run_dir: str) -> dict[str, Any]:
    """What the job reported through hydra_racing_sweeper.trial, from its output dir ({}: nothing)."""
    try:
        return json.loads((Path(run_dir) / REPORTED_FILE).read_text())
    except (OSError, ValueError):
        return {}


def _final_result(run_dir: str, ret: JobReturn | None) -> JobResult | None:
    """The job's outcome as its final.json says, or None when it wrote none."""
    try:
        final = rundir.read_final(run_dir)
    except (OSError, ValueError) as e:  # ValueError: a JSON decode error
        return JobResult(FAILED, run_dir, error=f"unreadable {Path(run_dir) / rundir.FINAL_FILE}: {e}")
    if final is None:
        return None
    error = final.get("error", "")
    if ret is not None and ret.status == JobStatus.FAILED and not error:
        error = _exception_line(ret)
    return JobResult(final.get("status", FAILED), run_dir, final, error)


def _exception_line(ret: JobReturn) -> str:
    e = ret._return_value
    return f"{type(e).__name__}: {e}" if isinstance(e, BaseException) else "job failed"
