"""Hydra's basic grid sweeper (`-m a=1,2 b=x,y`), minus repeated runs.

Stored as `hydra/sweeper=qknorm_basic`, qknorm's default (conf/config.yaml), so every `-m` grid
of qknorm gets it; never under Hydra's own name `basic`: a plugin must not change `-m` for the
other Hydra apps of an environment it is installed in. It launches the same cartesian product as
Hydra's BasicSweeper, except a job whose effective config (qknorm.effective.effective_config: the
keys its norm kind uses) an earlier job of the sweep already has: `-m norm=none,lp norm.p=2,4`
runs norm=none once, not once per p, because norm=none never reads norm.p. Skipped jobs are
logged; the jobs that run are numbered 0, 1, ... without gaps.
"""

import logging
from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore

log = logging.getLogger(__name__)


@dataclass
class DedupBasicSweeperConf(BasicSweeperConf):  # the same keys: max_batch_size, params
    _target_: str = "hydra_plugins.qknorm_sweeper.basic.DedupBasicSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="qknorm_basic",
                             node=DedupBasicSweeperConf, provider="qknorm_sweeper")


class DedupBasicSweeper(BasicSweeper):
    def split_arguments(self, overrides, max_batch_size):  # an instance method here: it composes
        (jobs,) = BasicSweeper.split_arguments(overrides, None)
        kept, dropped = self.unique(jobs)
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

    def _task_config(self, job: list[str]) -> dict:
        from qknorm.effective import task_tree

        assert self.hydra_context is not None and self.config is not None
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(job))
        # Not qknorm's task: every job is its own run, as in Hydra's.
        return task_tree(cfg) or {"_job": list(job)}
