"""The adapter from the typed config (`norm.*`, NormConfig) to the layers of `qknorm.nn`.

The maths and the modules live in qknorm/nn.py, which needs torch only; this module is the one
place that reads NormConfig for them. Every module `build_qk_norm` returns maps per-head (q, k)
of shape (B, nh, T, hs) to the (q, k) that go into `F.scaled_dot_product_attention`, and says
which `scale` the attention should use:
  - none: q, k unchanged, scale None (SDPA's 1/sqrt(hs)).
  - lp / l2: q_hat * gamma, k_hat, scale 1.0 -- gamma folded into q keeps the fused kernel.
  - rms: RMSNorm(q) * w_q, RMSNorm(k) * w_k, scale None.
A model whose q and k arrive about unit already (anGPT, qknorm/angpt.py) passes its
`logit_scale`, the temperature at p = 2: none takes it as its scale (1/sqrt(hs) would leave
attention almost uniform), lp / l2 with gamma_init=calibrated scale it by calibration_factor(p)
(GPT's calibrated scales qknorm's log2(T^2 - T)), rms and every other gamma_init are unchanged.

`qknorm.norms.lp_normalize` stays importable from here: it is a documented name.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

from qknorm.config import P_KINDS, NormConfig
from qknorm.nn import LpQKNorm, calibration_factor, lp_normalize

__all__ = ["NoQKNorm", "RMSQKNorm", "build_qk_norm", "lp_normalize"]


def build_qk_norm(cfg: NormConfig, n_head: int, head_dim: int, block_size: int,
                  logit_scale: float | None = None) -> nn.Module:
    """The table from `norm.kind` to code (l2 is lp at p=2), its one home; `logit_scale`: the
    temperature of a model with unit q and k (see the module doc), None for GPT."""
    if cfg.kind == "none":
        return NoQKNorm(scale=logit_scale)
    if cfg.kind in P_KINDS:
        if logit_scale is not None and cfg.gamma_init == "calibrated":
            cfg = dataclasses.replace(
                cfg, gamma_init=logit_scale * calibration_factor(cfg.p, head_dim))
        return LpQKNorm(head_dim, cfg.p, n_head=n_head, block_size=block_size,
                        gamma_init=cfg.gamma_init, gamma_shape=cfg.gamma_shape,
                        gamma_learnable=cfg.gamma_learnable, gamma_param=cfg.gamma_param,
                        p_learnable=cfg.p_learnable, eps=cfg.eps)
    if cfg.kind == "rms":
        return RMSQKNorm(head_dim, eps=cfg.eps)
    raise ValueError(f"unknown norm.kind {cfg.kind!r}")  # validate() catches this first


class NoQKNorm(nn.Module):
    """Plain attention: softmax(q.k * scale), the pair unchanged; `scale` None is SDPA's
    default 1/sqrt(hs) (anGPT passes its logit scale)."""

    def __init__(self, scale: float | None = None):
        super().__init__()
        self.scale = scale  # the instance's, read by the attention and the diagnostics

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
