"""The adapter from the typed config (`norm.*`, NormConfig) to the layers of `qknorm.nn`.

The maths and the modules live in qknorm/nn.py, which needs torch only; this module is the one
place that reads NormConfig for them. Every module `build_qk_norm` returns maps per-head (q, k)
of shape (B, nh, T, hs) to the (q, k) that go into `F.scaled_dot_product_attention`, and says
which `scale` the attention should use:
  - none: q, k unchanged, scale None (SDPA's 1/sqrt(hs)).
  - lp / l2: q_hat * gamma, k_hat, scale 1.0 -- gamma folded into q keeps the fused kernel.
  - rms: RMSNorm(q) * w_q, RMSNorm(k) * w_k, scale None.

`qknorm.norms.lp_normalize` stays importable from here: it is a documented name.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from qknorm.config import P_KINDS, NormConfig
from qknorm.nn import LpQKNorm, lp_normalize

__all__ = ["NoQKNorm", "RMSQKNorm", "build_qk_norm", "lp_normalize"]


def build_qk_norm(cfg: NormConfig, n_head: int, head_dim: int, block_size: int) -> nn.Module:
    """The table from `norm.kind` to code (l2 is lp at p=2)."""
    if cfg.kind == "none":
        return NoQKNorm()
    if cfg.kind in P_KINDS:
        return LpQKNorm(head_dim, cfg.p, n_head=n_head, block_size=block_size,
                        gamma_init=cfg.gamma_init, gamma_shape=cfg.gamma_shape,
                        gamma_learnable=cfg.gamma_learnable, gamma_param=cfg.gamma_param,
                        p_learnable=cfg.p_learnable, eps=cfg.eps)
    if cfg.kind == "rms":
        return RMSQKNorm(head_dim, eps=cfg.eps)
    raise ValueError(f"unknown norm.kind {cfg.kind!r}")  # validate() catches this first


class NoQKNorm(nn.Module):
    """Plain attention: softmax(q.k / sqrt(hs)), the pair unchanged; `scale` None is SDPA's
    default 1/sqrt(hs)."""

    scale = None

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k


class RMSQKNorm(nn.Module):
    """RMSNorm on q and k over the head dimension, each with a learned per-dim weight; the
    attention keeps 1/sqrt(hs) (`scale` None)."""

    scale = None

    def __init__(self, head_dim: int, eps: float = 1e-6):
        super().__init__()
        self.q_norm = nn.RMSNorm(head_dim, eps=eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=eps)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q_norm(q), self.k_norm(k)
