"""Hydra's basic grid sweeper (`-m a=1,2 b=x,y`), minus repeated runs.

Stored as `hydra/sweeper=qknorm_basic`, qknorm's default (conf/config.yaml), so every `-m` grid
of qknorm gets it; never under Hydra's own name `basic`: a plugin must not change `-m` for the
other Hydra apps of an environment it is installed in. It launches the same cartesian product as
Hydra's BasicSweeper, except a job whose effective config (qknorm.effective.effective_config: the
keys its norm kind uses) an earlier job of the sweep already has: `-m norm=none,lp norm.p=2,4`
runs norm=none once, not once per p, because norm=none never reads norm.p. Skipped jobs are
logged; the jobs that run are numbered 0, 1, ... without gaps.

Like qknorm_optuna it logs its plan before the first launch (runs, training steps and evals at
most: hydra_racing_sweeper/cost.py), and `hydra.sweeper.dry_run=true` adds the time measured here and
stops: nothing launched or written. A real sweep does not measure (a second of each launch).
"""

import logging
from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore

log = logging.getLogger(__name__)


@dataclass
class DedupBasicSweeperConf(BasicSweeperConf):  # Hydra's keys (max_batch_size, params), and:
    _target_: str = "hydra_plugins.qknorm_sweeper.basic.DedupBasicSweeper"
    dry_run: bool = False  # log the plan with a measured time and stop (qknorm_optuna's key)


ConfigStore.instance().store(group="hydra/sweeper", name="qknorm_basic",
                             node=DedupBasicSweeperConf, provider="qknorm_sweeper")


class DedupBasicSweeper(BasicSweeper):
    def __init__(self, max_batch_size=None, params=None, dry_run=False):
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.dry_run = dry_run
        self._trees: dict[tuple, dict] = {}  # each job's task config, composed once

    def sweep(self, arguments):
        if not self.dry_run:
            return super().sweep(arguments)
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = self._parse_config()  # as BasicSweeper.sweep reads its jobs
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        (jobs,) = BasicSweeper.split_arguments(parser.parse_overrides([*params, *arguments]), None)
        kept, _ = self.unique(jobs)
        log.info("%s", self.plan_line(kept, measure=True))
        print("dry run (hydra.sweeper.dry_run=true): nothing was launched, run or written")
        return []

    def split_arguments(self, overrides, max_batch_size):  # an instance method here: it composes
        (jobs,) = BasicSweeper.split_arguments(overrides, None)
        kept, dropped = self.unique(jobs)
        log.info("%s", self.plan_line(kept, measure=False))
        if max_batch_size is None:
            return [kept]
        return list(BasicSweeper.split_overrides_to_chunks(kept, max_batch_size))

    def unique(self, jobs: list[list[str]]) -> tuple[list, list]:
        from qknorm.effective import unique_jobs  # lazily: Hydra imports this module on every run

        kept, dropped = unique_jobs(jobs, self._task_config)
        for job, same in dropped:
            log.info("skipped job [%s]: same effective config as [%s]", " ".join(job),
                     " ".join(same))
        if dropped:
            log.info("%d of %d jobs launched; %d repeated an earlier job's effective config",
                     len(kept), len(jobs), len(dropped))
        return kept, dropped

    def plan_line(self, jobs: list[list[str]], measure: bool) -> str:
        """cost.py's plan line for these jobs: each its own max_iters and eval_interval; with
        `measure`, a time from the first job's step measured here."""
        from hydra_racing_sweeper import cost

        from qknorm.sweep.hook import measure

        trees = [self._task_config(job) for job in jobs]
        train = [t.get("train") for t in trees]
        if not jobs or not all(isinstance(t, dict) for t in train):  # not qknorm.train's task
            return cost.line(cost.Work(len(jobs), 1), None, grid=True)
        works = [cost.work(1, 1, t["max_iters"], t["eval_interval"]) for t in train]
        total = cost.Work(len(jobs), 1, sum(w.steps for w in works), sum(w.evals for w in works))
        if not measure:
            return cost.line(total, None, grid=True) + "; hydra.sweeper.dry_run=true measures their time"
        return cost.line(total, measure(self._job_config(jobs[0])), grid=True)

    def _job_config(self, job: list[str]):
        from qknorm.sweep.hook import QknormTask

        return QknormTask().typed(self.hydra_context.config_loader.load_sweep_config(self.config, list(job)))

    def _task_config(self, job: list[str]) -> dict:
        from qknorm.effective import task_tree

        assert self.hydra_context is not None and self.config is not None
        if tuple(job) not in self._trees:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(job))
            # Not qknorm's task: every job is its own run, as in Hydra's.
            self._trees[tuple(job)] = task_tree(cfg) or {"_job": list(job)}
        return self._trees[tuple(job)]
