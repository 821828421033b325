"""A stand-in for Hydra's Optuna sweeper plugin (hydra-optuna-sweeper), whose released version
needs optuna < 3 and cannot be installed beside optuna 5: it registers what that plugin
registers, in the same way (written here from its documented config, not copied): the sweeper
`hydra/sweeper=optuna`, whose `sampler` is typed by a structured SamplerConfig, and the
`hydra/sweeper/sampler` group as structured configs. Its tpe node's n_startup_trials is 7 (the
real one's is 10, as ours) so a test can tell whose node a composition took."""

# OmegaConf 2.3 reads typing.Optional/Dict/List in structured configs, not `X | None`.
# ruff: noqa: UP006, UP007, UP035, UP045

from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class SamplerConfig:
    _target_: str = MISSING


@dataclass
class TPESamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.TPESampler"
    seed: Optional[int] = None
    n_startup_trials: int = 7


@dataclass
class RandomSamplerConfig(SamplerConfig):
    _target_: str = "optuna.samplers.RandomSampler"
    seed: Optional[int] = None


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.fake_optuna_sweeper.NotRun"
    defaults: List[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: SamplerConfig = MISSING
    direction: Any = "minimize"
    storage: Optional[Any] = None
    study_name: Optional[str] = None
    n_trials: int = 20
    n_jobs: int = 2


cs = ConfigStore.instance()
cs.store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="optuna_sweeper")
cs.store(group="hydra/sweeper/sampler", name="tpe", node=TPESamplerConfig,
         provider="optuna_sweeper")
cs.store(group="hydra/sweeper/sampler", name="random", node=RandomSamplerConfig,
         provider="optuna_sweeper")
