"""Text from a trained run: rebuild the model from its checkpoint and generate."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from qknorm import rundir
from qknorm.arch import build_model
from qknorm.config import Config
from qknorm.data import fold_tokenizer
from qknorm.errors import UserError
from qknorm.model import LanguageModel
from qknorm.tokenizer import Tokenizer


def checkpoint_config(saved: dict) -> Config:
    """A checkpoint's config as today's schema reads it. Its optuna.* keys are left out: they
    say which trial the run was, nothing the model is rebuilt from, and checkpoints written
    before issue 66 carry a race's rungs under them, keys the schema no longer has (the merge
    would fail; the rungs reach a job through its environment now)."""
    kept = {k: v for k, v in saved.items() if k != "optuna"}
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), kept))


def load_trained(run_dir: Path, device: str = "cpu") -> tuple[LanguageModel, Tokenizer]:
    """The run's model (eval mode) and tokenizer, from ckpt.pt and the corpus and fold it
    trained on (a BPE from its cache, or trained again the same way)."""
    if not (Path(run_dir) / rundir.CKPT_FILE).exists():
        raise UserError(f"no {rundir.CKPT_FILE} in {run_dir}; train with train.save_checkpoint=true")
    ckpt = rundir.load_checkpoint(run_dir, map_location=device)
    cfg = checkpoint_config(ckpt["config"])
    tok = fold_tokenizer(cfg.data)
    model = build_model(cfg.model, cfg.norm, len(tok)).to(device)
    model.load_state_dict(ckpt["model"])
    return model.eval(), tok


def sample_text(run_dir: Path, start: str = "\n", max_new_tokens: int = 500,
                temperature: float = 0.8, top_k: int | None = 200, seed: int = 0) -> str:
    model, tok = load_trained(run_dir)
    if temperature <= 0:
        raise UserError(f"--temperature={temperature} must be > 0")
    try:
        idx = tok.encode(start)[None, :]  # (1, T)
    except KeyError as e:  # the char tokenizer knows the corpus's characters only
        raise UserError(f"--start contains {e.args[0]}; use characters from the training "
                        "corpus") from e
    if idx.numel() == 0:
        raise UserError("--start is empty; give at least one character, e.g. --start $'\\n'")
    out = model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k,
                         generator=torch.Generator().manual_seed(seed))
    return tok.decode(out[0].tolist())
