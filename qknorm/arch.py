"""The table from model.arch to a model: nanoGPT's GPT (qknorm/model.py) or anGPT
(qknorm/angpt.py). Train, sample and the bench build every model here, so neither module
builds the other."""

from __future__ import annotations

from qknorm.angpt import AnGPT
from qknorm.config import ModelConfig, NormConfig
from qknorm.model import GPT, LanguageModel

MODELS: dict[str, type[LanguageModel]] = {"gpt": GPT, "angpt": AnGPT}  # keys: config.ARCHS


def build_model(cfg: ModelConfig, norm: NormConfig, vocab_size: int) -> LanguageModel:
    return MODELS[cfg.arch](cfg, norm, vocab_size)
