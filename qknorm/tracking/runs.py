"""Finished run dirs, read and placed in a tracker's tree: sweep (an Optuna study, or the sweep
dir of a basic multirun) > trial (a study's trial number; for a basic multirun, the job's
overrides less the replicate keys) > replicate (fold, seed). A single run has no sweep."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qknorm import rundir


@dataclass
class Job:
    """One finished run dir, read, and where it goes in MLflow."""

    run_dir: Path
    config: dict[str, Any]
    final: dict[str, Any]
    metrics: list[dict[str, Any]]
    experiment: str
    replicate: list[str]  # its replicate overrides, e.g. ["data.fold=8"]
    start_ms: int
    end_ms: int
    sweep: tuple[str, str] | None = None  # (key, run name); None: a single run
    trial: tuple[str, str] | None = None
    trial_overrides: list[str] = field(default_factory=list)



def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _mtime_ms(path: Path, default: int) -> int:
    try:
        return int(path.stat().st_mtime * 1000)
    except OSError:
        return default


def read_job(run_dir: Path, experiment: str | None) -> Job | None:
    """The run dir's files and its place in MLflow; None while it has no final.json."""
    final = rundir.read_finished(run_dir)
    if final is None:
        return None
    config = rundir.read_config(run_dir) or {}
    hydra = rundir.read_hydra(run_dir)
    overrides = rundir.read_overrides(run_dir)
    sweeper_replicates = (hydra.get("sweeper") or {}).get("replicates") or {}
    replicate_keys = {*rundir.REPLICATE_KEYS, *sweeper_replicates}
    end_ms = _mtime_ms(run_dir / rundir.FINAL_FILE, 0)
    job = Job(
        run_dir=run_dir, config=config, final=final, metrics=rundir.read_metrics(run_dir),
        experiment=experiment or str(config.get("name") or "qknorm"),
        replicate=[o for o in overrides if _key(o) in replicate_keys],
        start_ms=_mtime_ms(run_dir / rundir.CONFIG_FILE, end_ms), end_ms=end_ms)
    study, storage, trial = (config.get(f"optuna.{k}") for k in ("study_name", "storage", "trial"))
    kept = [o for o in overrides if _key(o) not in replicate_keys and not _key(o).startswith("optuna.")]
    if study is not None and trial is not None:  # a job of our Optuna sweeper
        key = f"optuna:{study}@{storage}"
        job.sweep = (key, f"study {study}")
        job.trial = (f"{key}#trial={int(trial)}", f"trial {int(trial)}")
        job.trial_overrides = kept
    elif hydra.get("mode") == "MULTIRUN":  # a basic multirun: a trial is a point of its grid
        key = f"sweep:{run_dir.parent}"
        job.sweep = (key, f"sweep {run_dir.parent.name}")
        job.trial = (f"{key}#{','.join(sorted(kept))}", "")
        job.trial_overrides = kept
    return job


def _label(job: Job, common: set[str]) -> str:
    return ",".join(o for o in job.trial_overrides if o not in common)


def read_jobs(root: Path, experiment: str | None) -> tuple[list[Job], int]:
    """The finished run dirs under root (Jobs) and how many are not finished."""
    run_dirs = rundir.run_dirs_under(root)
    jobs, incomplete = [], 0
    for run_dir in run_dirs:
        job = read_job(run_dir.resolve(), experiment)
        if job is None:
            incomplete += 1
        else:
            jobs.append(job)
    # trial names: the overrides that set a trial apart within its sweep
    sweeps: dict[str, list[Job]] = {}
    for job in jobs:
        if job.sweep is not None:
            sweeps.setdefault(job.sweep[0], []).append(job)
    for members in sweeps.values():
        common = set.intersection(*(set(j.trial_overrides) for j in members))
        for job in members:
            label = _label(job, common)
            name = (f"{job.trial[1]}: {label}" if job.trial[1] and label
                    else job.trial[1] or label or "trial")
            job.trial = (job.trial[0], name)
    return jobs, incomplete
