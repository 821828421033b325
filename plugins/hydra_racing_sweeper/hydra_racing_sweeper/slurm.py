"""hydra/launcher=slurm: checks before a sweep touches its study (sbatch is there, and the
cluster accepts a job with the launcher's settings, asked with `sbatch --test-only`, which
submits nothing); each job of a batch told on its own when one ends without a result (scancel,
a lost node); and a rerun retrying the trials whose job was interrupted that way."""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from typing import Any

import optuna
from hydra.core.utils import JobReturn, JobStatus
from optuna.trial import TrialState

from hydra_racing_sweeper.errors import UserError
from hydra_racing_sweeper.study import ERROR_ATTR, retried_numbers, retry

log = logging.getLogger(__name__)

TIMEOUT_S = 30
# How often at most (seconds) submitit asks sacct whether a job without a result has ended
# (its default, 600, can leave a sweep waiting 10 minutes on a scancelled job). Finished
# jobs are seen within a second from their result file either way.
SACCT_INTERVAL_S = 30
# SLURM states of a job that ended for a reason outside its params (a user's scancel, a lost
# node, preemption): its trial fails, and a rerun retries it. A TIMEOUT, OUT_OF_MEMORY or
# FAILED job would end the same way again: its trial fails for good, like a diverged run.
INTERRUPTED = ("CANCELLED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL")
ENDED = re.compile(r"SLURM job (\S+) ended ([A-Z_]+)")  # JobEnded's message, read back by reruns


def is_slurm(launcher: Mapping[str, Any]) -> bool:
    return str(launcher.get("_target_", "")).endswith("SlurmLauncher")


def sbatch_test_args(launcher: Mapping[str, Any]) -> list[str]:
    args = ["sbatch", "--test-only", "--wrap=true", f"--time={launcher.get('timeout_min', 60)}"]
    for key, flag in (("partition", "--partition"), ("cpus_per_task", "--cpus-per-task"),
                      ("nodes", "--nodes"), ("tasks_per_node", "--ntasks-per-node")):
        if launcher.get(key) is not None:
            args.append(f"{flag}={launcher[key]}")
    if launcher.get("mem_gb") is not None:
        args.append(f"--mem={launcher['mem_gb']}G")
    return args


def check(launcher: Mapping[str, Any]) -> None:
    """Raise UserError (one line) when SLURM cannot take the sweep's jobs."""
    if not is_slurm(launcher):
        return
    if shutil.which("sbatch") is None:
        raise UserError("hydra/launcher=slurm: sbatch is not on PATH; start the sweep where "
                        "SLURM's commands are (a login node) or pick another launcher, e.g. "
                        "hydra/launcher=parallel")
    try:
        r = subprocess.run(sbatch_test_args(launcher), capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"hydra/launcher=slurm: sbatch --test-only did not answer in "
                        f"{TIMEOUT_S} s; check that slurmctld is up (sinfo)") from None
    if r.returncode == 0:
        _warn_without_accounting()
        return
    lines = [ln.removeprefix("sbatch: error: ") for ln in r.stderr.splitlines() if ln.strip()]
    reason = lines[0] if lines else f"exit {r.returncode}"
    partition = launcher.get("partition")
    if "invalid partition" in reason.lower():
        raise UserError(f"hydra.launcher.partition={partition} is not a partition of this "
                        f"cluster ({reason}); set hydra.launcher.partition to one of: "
                        f"{_partitions()}")
    raise UserError(f"hydra/launcher=slurm: the cluster refuses a job with these settings "
                    f"({reason}); fix hydra.launcher.partition, cpus_per_task, mem_gb or "
                    "timeout_min")


def _warn_without_accounting() -> None:
    """submitit learns that a job without a result has ended from sacct, which answers only
    where SLURM runs its accounting daemon (slurmdbd): elsewhere a scancelled job is never
    seen to end and the sweep waits for it for good. Worth a line before the sweep starts."""
    try:
        r = subprocess.run(["sacct", "-n", "-X", "-j", "1", "-o", "State"], capture_output=True,
                           text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        r = subprocess.CompletedProcess([], 1, "", str(e))
    if r.returncode != 0:
        reason = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[0]
        log.warning("hydra/launcher=slurm: sacct does not answer (%s): a job cancelled with "
                    "scancel, or lost with its node, will never be seen to end and the sweep "
                    "will wait for it; SLURM needs its accounting daemon, slurmdbd", reason)


def _partitions() -> str:
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return "(sinfo did not answer)"
    return ", ".join(p.rstrip("*") for p in r.stdout.split()) or "(sinfo lists none)"


class JobEnded(Exception):
    """What a job that ended without a result returns: its SLURM state and its log."""

    def __init__(self, job_id: str, state: str, log_path: str):
        rerun = "; rerun the sweep to retry it" if state in INTERRUPTED else ""
        super().__init__(f"SLURM job {job_id} ended {state} before writing its result "
                         f"(log: {log_path}){rerun}")


@contextlib.contextmanager
def each_job_answers(launcher: Mapping[str, Any]) -> Iterator[None]:
    """For one launch through submitit's SLURM executor, a job that ends without a result
    returns a failed JobReturn (its value a JobEnded) instead of raising.

    hydra-submitit-launcher collects a batch as `[job.results()[0] for job in jobs]`: there the
    first job that was scancelled (or lost its node) raises for the whole batch while its other
    jobs still run, and every trial of the batch would fail. Its launch has no hook for this,
    so submitit's SLURM job class is swapped for ours while it runs (arrays name the class
    directly, single jobs through the executor)."""
    if not is_slurm(launcher):
        yield
        return
    from submitit.slurm import slurm

    watcher = slurm.SlurmJob.watcher  # one for all jobs, ours included
    saved = slurm.SlurmJob, slurm.SlurmExecutor.job_class, watcher._delay_s
    slurm.SlurmJob = slurm.SlurmExecutor.job_class = _answering_job_class()
    watcher._delay_s = min(watcher._delay_s, SACCT_INTERVAL_S)
    try:
        yield
    finally:
        slurm.SlurmJob, slurm.SlurmExecutor.job_class, watcher._delay_s = saved


def _answering_job_class() -> type:
    from submitit.core.utils import UncompletedJobError
    from submitit.slurm.slurm import SlurmJob

    class AnsweringSlurmJob(SlurmJob):
        def results(self) -> list[Any]:
            try:
                return super().results()
            except UncompletedJobError:  # no result file: the job ended outside Python
                state = (self.state or "UNKNOWN").split()[0]  # "CANCELLED by 0" -> CANCELLED
                ended = JobEnded(self.job_id, state, str(self.paths.stderr))
                return [JobReturn(status=JobStatus.FAILED, _return_value=ended)]

    return AnsweringSlurmJob


def retry_interrupted(study: optuna.Study) -> list[int]:
    """Enqueue once more the params of each failed trial whose job was interrupted (INTERRUPTED
    states), as a retry of it: the failed trial then no longer counts toward n_trials, and the
    retry runs first. Called when a sweep starts, so the sweep that saw the job end does not
    start it again: the rerun does. Returns the numbers of the trials retried."""
    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    numbers = []
    for t in trials:
        ended = ENDED.search(str(t.user_attrs.get(ERROR_ATTR, "")))
        if t.state != TrialState.FAIL or t.number in retried or not ended \
                or ended.group(2) not in INTERRUPTED:
            continue
        retry(study, t)  # its job dirs come along: completed replicates are read back
        log.info("trial %d: SLURM job %s ended %s; its params run again", t.number,
                 ended.group(1), ended.group(2))
        numbers.append(t.number)
    return numbers
