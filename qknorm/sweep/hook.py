"""QknormTask: what the racing sweeper is told of qknorm.train's jobs (hydra_racing_sweeper's
task hook, named by qknorm_optuna's `task_hook`). The sweeper calls it; it never imports
qknorm. Each method answers for qknorm.train's config only and keeps the sweeper's default
(knows nothing) for another app's, so any app may still run under qknorm_optuna.

A time for the plan line (`measure`) builds the job's run and times its real training step and
an eval batch here, on the job's device and threads (restored afterwards).
"""

from __future__ import annotations

import copy
import time
from typing import Any

from hydra_racing_sweeper import TaskHook, UserError, format_value
from omegaconf import DictConfig, OmegaConf, open_dict

from qknorm.config import P_KINDS, Config, to_config
from qknorm.effective import effective_config

# Steps are timed (after one untimed) until this much time or MAX_STEPS steps: a few steps for a
# mean, and a launch that barely waits even where a step takes seconds (the default model's
# on 2 CPU cores).
MEASURE_S = 1.0
MAX_STEPS = 50
# Where and how fast a run is computed, not what it computes: threads, device and compile may
# change the last bits of a loss, not the question (a study started on a CPU may go on on a
# GPU); `name` is the sweep folder's; a checkpoint is saved or resumed from, the run the same.
NOT_THE_QUESTION = ("threads", "device", "compile", "name", "train.save_checkpoint",
                    "train.resume")


def is_qknorm(flat: dict[str, Any]) -> bool:
    """A flattened job config is qknorm.train's (it has a norm)."""
    return "norm.kind" in flat


class QknormTask(TaskHook):
    command = "python -m qknorm.train"

    def race_example(self, baseline: Any) -> str:
        """docs/race.md's smoke race (checked to run: 12 smoke runs, seconds each), with the
        baseline given in its grid."""
        b = format_value(baseline).removesuffix(".0") if baseline is not None else None
        grid = ["1", "2", "4", "inf"]
        choice = ",".join(grid + ([b] if b is not None and b not in grid else []))
        return (f"{self.command} experiment=smoke search=p_race 'norm.p=choice({choice})' "
                "'++hydra.sweeper.replicates={data.fold:[0,1,2]}' "
                "hydra.sweeper.race.min_replicates=2 'hydra.sweeper.race.rungs=[10,20]' "
                "hydra.sweeper.race.margin=0.05")

    def typed(self, cfg: DictConfig) -> Config | None:
        """A composed job config (hydra node and all) as qknorm.train reads it, checked
        (to_config: raises UserError); None when the task is not qknorm.train."""
        if OmegaConf.get_type(cfg) is not Config:
            return None
        job = copy.deepcopy(cfg)
        with open_dict(job):  # the job's own config, as Hydra hands it to the task
            job.pop("hydra", None)
        return to_config(job)

    def check(self, job: Config, params: dict[str, str], cfg: DictConfig,
              on_this_host: bool) -> None:
        """A search of p under a norm that reads none; a model that does not fit this
        machine's memory (qknorm/memory.py) where its jobs run here (a SLURM node is another
        machine): each job would refuse itself at its start, after the study was made."""
        searched = [name for name, key in params.items() if key == "norm.p"]
        if searched and job.norm.kind not in P_KINDS:
            raise UserError(f"hydra.sweeper.params.{searched[0]} searches norm.p, but norm.kind="
                            f"{job.norm.kind} reads no p (every trial would train the same "
                            "model); drop the search of p, or pick norm=lp")
        if not on_this_host:
            return
        from qknorm import memory  # torch
        from qknorm.train import resolve_compile, resolve_device

        device = resolve_device(job.device)
        memory.check_fits(job, device, resolve_compile(job.compile, device))

    def effective(self, flat: dict[str, Any]) -> dict[str, Any] | None:
        return effective_config(flat) if is_qknorm(flat) else None

    def question(self, flat: dict[str, Any]) -> dict[str, Any]:
        if not is_qknorm(flat):
            return flat
        return {k: v for k, v in effective_config(flat).items() if k not in NOT_THE_QUESTION}

    def length(self, cfg: DictConfig) -> tuple[int | None, int | None]:
        return (OmegaConf.select(cfg, "train.max_iters"),
                OmegaConf.select(cfg, "train.eval_interval"))

    def n_folds(self, cfg: DictConfig) -> int | None:
        return OmegaConf.select(cfg, "data.n_folds")

    def records(self, study_name: str, storage: str, trial: int) -> dict[str, Any]:
        """The trial in the job's own config (optuna.*), which qknorm's run-dir report and
        trackers read."""
        return {"optuna.study_name": study_name, "optuna.storage": storage, "optuna.trial": trial}

    def measure(self, job: Config):
        return measure(job)


def measure(cfg: Config):
    """Build the job's run (qknorm.train.setup) and time its training step and an eval batch
    as the loop runs them, on the job's device and threads (restored afterwards): a cost.Pace."""
    import torch
    from hydra_racing_sweeper import cost

    from qknorm.pace import time_steps
    from qknorm.train import estimate_loss, setup

    threads = torch.get_num_threads()
    try:
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        start = time.perf_counter()
        run = setup(cfg)
        setup_s = time.perf_counter() - start
        time_steps(run, 1)  # the first step pays for lazy init and allocation
        start, n = time.perf_counter(), 0
        while n < MAX_STEPS and time.perf_counter() - start < MEASURE_S:
            time_steps(run, 1)
            n += 1
        step_s = (time.perf_counter() - start) / n
        # An eval is eval_iters batches of each of train and val: time one, count them all.
        batches = run.eval_batches["val"]
        estimate_loss(run.compiled, batches[:1], run.autocast)  # untimed, as the first step
        start = time.perf_counter()
        estimate_loss(run.compiled, batches[1:2] or batches[:1], run.autocast)
        eval_s = (time.perf_counter() - start) * 2 * len(batches)
        where = f"{run.device.type}, {torch.get_num_threads()} thread" + (
            "s" if torch.get_num_threads() != 1 else "")
    finally:
        torch.set_num_threads(threads)
    return cost.Pace(setup_s, step_s, eval_s, where)
