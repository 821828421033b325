"""Checks for hydra/launcher=slurm before a sweep touches its study: sbatch is there, and the
cluster accepts a job with the launcher's settings (partition, cpus, memory, time), asked with
`sbatch --test-only`, which submits nothing."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from hydra_plugins.qknorm_sweeper._errors import SweepError

TIMEOUT_S = 30


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
    """Raise SweepError (one line) when SLURM cannot take the sweep's jobs."""
    if not is_slurm(launcher):
        return
    if shutil.which("sbatch") is None:
        raise SweepError("hydra/launcher=slurm: sbatch is not on PATH; start the sweep where "
                         "SLURM's commands are (a login node) or pick another launcher, e.g. "
                         "hydra/launcher=parallel")
    try:
        r = subprocess.run(sbatch_test_args(launcher), capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SweepError(f"hydra/launcher=slurm: sbatch --test-only did not answer in "
                         f"{TIMEOUT_S} s; check that slurmctld is up (sinfo)") from None
    if r.returncode == 0:
        return
    lines = [ln.removeprefix("sbatch: error: ") for ln in r.stderr.splitlines() if ln.strip()]
    reason = lines[0] if lines else f"exit {r.returncode}"
    partition = launcher.get("partition")
    if "invalid partition" in reason.lower():
        raise SweepError(f"hydra.launcher.partition={partition} is not a partition of this "
                         f"cluster ({reason}); set hydra.launcher.partition to one of: "
                         f"{_partitions()}")
    raise SweepError(f"hydra/launcher=slurm: the cluster refuses a job with these settings "
                     f"({reason}); fix hydra.launcher.partition, cpus_per_task, mem_gb or "
                     "timeout_min")


def _partitions() -> str:
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return "(sinfo did not answer)"
    return ", ".join(p.rstrip("*") for p in r.stdout.split()) or "(sinfo lists none)"
