"""Text from a trained run: rebuild the model from its checkpoint and generate."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from qknorm import rundir
from qknorm.angpt import build_model
from qknorm.config import Config
from qknorm.data import Vocab, load_text
from qknorm.errors import UserError
from qknorm.model import LanguageModel


def load_trained(run_dir: Path, device: str = "cpu") -> tuple[LanguageModel, Vocab]:
    """The run's model (eval mode) and vocabulary, from ckpt.pt and the corpus it trained on."""
    if not (Path(run_dir) / rundir.CKPT_FILE).exists():
        raise UserError(f"no {rundir.CKPT_FILE} in {run_dir}; train with train.save_checkpoint=true")
    ckpt = rundir.load_checkpoint(run_dir, map_location=device)
    cfg: Config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), ckpt["config"]))
    vocab = Vocab.from_text(load_text(cfg.data))
    model = build_model(cfg.model, cfg.norm, len(vocab)).to(device)
    model.load_state_dict(ckpt["model"])
    return model.eval(), vocab


def sample_text(run_dir: Path, start: str = "\n", max_new_tokens: int = 500,
                temperature: float = 0.8, top_k: int | None = 200, seed: int = 0) -> str:
    model, vocab = load_trained(run_dir)
    unknown = sorted(set(start) - set(vocab.chars))
    if unknown:
        raise UserError(f"--start contains characters not in the vocabulary: {unknown!r}; "
                        "use characters from the training corpus")
    if temperature <= 0:
        raise UserError(f"--temperature={temperature} must be > 0")
    idx = vocab.encode(start)[None, :]  # (1, T)
    out = model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k,
                         generator=torch.Generator().manual_seed(seed))
    return vocab.decode(out[0].tolist())
