"""Models whose attention logits are known by hand, for the diagnostics' and the logit
controls' tests."""

from __future__ import annotations

import torch

from qknorm.config import ModelConfig, NormConfig
from qknorm.model import GPT


def set_heads(c: dict[tuple[int, int], float], k: float, v: float | None = None,
              **model: float | None) -> GPT:
    """2 layers x 2 heads of dim 8, norm=none, q, k (and v) set through c_attn's bias, their
    weights zeroed: head h of layer i has q = c[i, h] * ones and k = k * ones in every position,
    so each of its logits is c[i, h] * k * 8 / sqrt(8) (q.k / sqrt(d)); v = v * ones when given.
    `model`: further ModelConfig keys (attn_softcap, qk_clip)."""
    torch.manual_seed(0)
    gpt = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, bias=True, **model),
              NormConfig(kind="none"), 65)
    for i, block in enumerate(gpt.transformer.h):
        with torch.no_grad():
            block.attn.c_attn.weight[:32].zero_()
            for h in (0, 1):
                block.attn.c_attn.bias[8 * h:8 * (h + 1)].fill_(c[i, h])  # q of head h
            block.attn.c_attn.bias[16:32].fill_(k)
            if v is not None:
                block.attn.c_attn.bias[32:].fill_(v)
    return gpt
