"""The checkout's Hydra configs composed in memory, as `python -m qknorm.train` composes them
(qknorm/cli.py), without starting a run."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from qknorm.config import Config, register_configs, to_config
from tests.helpers import REPO

CONF = REPO / "conf"


def compose_config(*overrides: str) -> Config:
    """The typed, checked job config OVERRIDES give (raises UserError as the CLI would)."""
    register_configs()  # the schema conf/config.yaml names; storing it again is harmless
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return to_config(compose("config", overrides=list(overrides)))


def compose_hydra_config(*overrides: str) -> DictConfig:
    """The untyped composed config with its `hydra` node (sweeper, launcher, sweep dir,
    callbacks): what a preset or a search group sets up for a multirun."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)
