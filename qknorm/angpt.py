"""anGPT (Franke et al., arXiv 2505.22014): a GPT normalized by constant factors, for model.arch=angpt.

What changes against qknorm/model.py's GPT, as docs/angpt.md reads the public descriptions:
  - no LayerNorm: every map is followed by a constant nu chosen so that its output has norm
    about 1 when its input has norm 1 and its weight rows norm 1 (E||W x||^2 = rows / d_in);
  - the residual stream is interpolated, not added: h <- nu(alpha) * (h + alpha * (x - h)), with
    nu(alpha) = 1 / sqrt(alpha^2 + (1 - alpha)^2) the norm a LERP of two independent unit
    vectors loses;
  - every weight row has norm <= 1 after every optimizer step (`project_weights_`), embedding
    rows exactly 1; weights start with unit rows;
  - SwiGLU MLP, RoPE instead of learned positions, untied head scaled by a learned s_z.
The q/k norm (norm.*) is the project's, as in GPT, built by norms.build_qk_norm with anGPT's
temperature at p = 2 (`logit_scale`). Every choice the sources leave open is a model.angpt_*
key or is named in docs/angpt.md.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from qknorm.config import ModelConfig, NormConfig
from qknorm.model import LanguageModel, attend
from qknorm.nn import initial_gamma
from qknorm.norms import build_qk_norm

ROPE_BASE = 10000.0
MLP_RATIO = 4  # SwiGLU's hidden width F = 4 d, two up-projections of F each (the spec's nu_uz)


# ---------------------------------------------------------------------------------------------
# the pieces


@torch.no_grad()
def bound_rows_(weight: torch.Tensor, exact: bool = False) -> None:
    """In place: every row (a vector over the input dim, dim 1 of an nn.Linear weight) divided by
    max(1, ||row||), or by ||row|| when `exact`. Computed in float32 whatever the weight's dtype,
    so a bf16 weight is bounded by its rounded float32 norm, not by a bf16 sum."""
    w = weight.float()
    norm = torch.linalg.vector_norm(w, dim=1, keepdim=True)
    norm = norm.clamp_min(torch.finfo(w.dtype).tiny) if exact else norm.clamp_min(1.0)
    weight.copy_(w / norm)


class Scaled(nn.Module):
    """A learned vector stored at `scale` and used as s = stored * (init / scale) (nGPT's
    reparameterisation): every such parameter sits near `scale`, so one Adam lr moves them alike."""

    def __init__(self, size: int, init: float, scale: float):
        super().__init__()
        self.init, self.scale = init, scale
        self.stored = nn.Parameter(torch.full((size,), scale))

    def forward(self) -> torch.Tensor:
        return self.stored * (self.init / self.scale)


def nu_lerp(alpha: torch.Tensor) -> torch.Tensor:
    """1 / sqrt(alpha^2 + (1 - alpha)^2): E||(1 - alpha) h + alpha x||^2 for independent unit h, x
    with zero mean is (1 - alpha)^2 + alpha^2."""
    return (alpha * alpha + (1 - alpha) * (1 - alpha)).rsqrt()


def lerp_norm(h: torch.Tensor, x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The residual step: h + a (x - h), rescaled to about unit norm; a = |alpha| per dim (an
    alpha gone negative still interpolates). h, x: (B, T, C); alpha: (C,)."""
    a = alpha.abs()
    return (h + a * (x - h)) * nu_lerp(a)


def rope_tables(block_size: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE's angles t * base^(-2i/hs), each (block_size, head_dim / 2)."""
    freq = ROPE_BASE ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angle = torch.outer(torch.arange(block_size, dtype=torch.float64), freq)
    return angle.cos().float(), angle.sin().float()


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (x_i, x_{i + hs/2}) of x (B, nh, T, hs) by position: L2 norms unchanged."""
    T, half = x.size(-2), x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:T], sin[:T]  # (T, hs/2)
    return torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).to(x.dtype)


def logit_scale(cfg: ModelConfig, head_dim: int) -> float:
    """anGPT's logit scale at p = 2 (model.angpt_logit_scale: sqrt_d, qknorm or a number), read
    as the gamma init of the same name."""
    return initial_gamma(cfg.angpt_logit_scale, 2.0, head_dim, cfg.block_size)


# ---------------------------------------------------------------------------------------------
# the model


class AnAttention(nn.Module):
    """Causal self-attention whose q, k, v heads and output have about unit norm at unit input."""

    def __init__(self, cfg: ModelConfig, norm: NormConfig):
        super().__init__()
        self.n_head, self.n_embd, self.dropout = cfg.n_head, cfg.n_embd, cfg.dropout
        head_dim = cfg.n_embd // cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)  # W_q, W_k, W_v stacked
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        # d rows of a d-wide input give ||W h||^2 = 1 over all heads, 1/nh per head: sqrt(nh)
        # makes each head unit. The output sees nh unit heads (||y||^2 = nh): 1/sqrt(nh).
        self.nu_qkv, self.nu_p = math.sqrt(cfg.n_head), 1.0 / math.sqrt(cfg.n_head)
        self.qk_norm = build_qk_norm(norm, cfg.n_head, head_dim, cfg.block_size,
                                     logit_scale=logit_scale(cfg, head_dim))
        self.attention = cfg.attention
        self.attn_softcap = cfg.attn_softcap  # read by the attention and the diagnostics
        cos, sin = rope_tables(cfg.block_size, head_dim)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        mask = torch.full((cfg.block_size, cfg.block_size), -math.inf).triu(1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, T, C = h.size()
        q, k, v = (self.nu_qkv * self.c_attn(h)).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        # RoPE before the norm: the vectors the norm makes unit-Lp are the ones the dot product
        # sees (for p = 2 either order is the same: a rotation keeps L2 norms).
        q, k = rope(q, self.rope_cos, self.rope_sin), rope(k, self.rope_cos, self.rope_sin)
        q, k = self.qk_norm(q, k)
        dropout = self.dropout if self.training else 0.0
        y = attend(q, k, v, dropout, self.qk_norm.scale, self.attention, self.causal_mask,
                   self.attn_softcap)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): re-assemble the heads
        return self.resid_dropout(self.nu_p * self.c_proj(y))


class AnMLP(nn.Module):
    """SwiGLU, u * SiLU(sqrt(d) z), with each stage scaled back to about unit norm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.hidden = MLP_RATIO * cfg.n_embd
        self.c_fc = nn.Linear(cfg.n_embd, 2 * self.hidden, bias=False)  # W_u, W_z stacked
        self.c_proj = nn.Linear(self.hidden, cfg.n_embd, bias=False)  # W_d
        self.dropout = nn.Dropout(cfg.dropout)
        self.nu_uz = math.sqrt(cfg.n_embd / self.hidden)  # F rows over d inputs: sqrt(d/F)
        # nGPT's sqrt(d) on the gate's input: an entry of z (a unit row . a unit h, times nu_uz)
        # has variance 1/F, so sqrt(d) z has std sqrt(d/F) = 1/2 at F = 4d, the zeta ~ N(0, 1/4)
        # of angpt_nu_acf = 1/sqrt(E[SiLU(zeta)^2]) (the spec's reconstruction; docs/angpt.md).
        self.gate_scale = math.sqrt(cfg.n_embd)
        self.nu_acf = cfg.angpt_nu_acf
        self.nu_d = math.sqrt(self.hidden / cfg.n_embd)  # d rows over F inputs: sqrt(F/d)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        u, z = (self.nu_uz * self.c_fc(h)).split(self.hidden, dim=2)  # (B, T, F) each, unit
        m = self.nu_acf * u * F.silu(self.gate_scale * z)  # (B, T, F), about unit
        return self.dropout(self.nu_d * self.c_proj(m))  # (B, T, C), about unit


class AnBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, norm: NormConfig):
        super().__init__()
        # alpha per dim, stored at 1/sqrt(d) as nGPT stores it (docs/angpt.md)
        scale = 1.0 / math.sqrt(cfg.n_embd)
        self.attn = AnAttention(cfg, norm)
        self.alpha_attn = Scaled(cfg.n_embd, cfg.angpt_alpha_init, scale)
        self.mlp = AnMLP(cfg)
        self.alpha_mlp = Scaled(cfg.n_embd, cfg.angpt_alpha_init, scale)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = lerp_norm(h, self.attn(h), self.alpha_attn())
        return lerp_norm(h, self.mlp(h), self.alpha_mlp())


class AnGPT(LanguageModel):
    def __init__(self, cfg: ModelConfig, norm: NormConfig, vocab_size: int):
        super().__init__()
        self.block_size = cfg.block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, cfg.n_embd),  # rows of norm 1: no nu needed
            h=nn.ModuleList([AnBlock(cfg, norm) for _ in range(cfg.n_layer)]),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, vocab_size, bias=False)  # untied, as nGPT's
        self.s_z = Scaled(vocab_size, 1.0, 1.0 / math.sqrt(cfg.n_embd))
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)  # the direction; rows set below
        self.project_weights_(exact=True)  # every row starts on the sphere: no warm-up needed

    def n_params(self) -> int:
        """Every parameter (no position embedding to leave out, no tied head)."""
        return sum(p.numel() for p in self.parameters())

    def bounded_weights(self) -> list[torch.Tensor]:
        """The matrices whose rows are bounded by 1: every Linear weight, the head's included."""
        return [m.weight for m in self.modules() if isinstance(m, nn.Linear)]

    @torch.no_grad()
    def project_weights_(self, exact: bool = False) -> None:
        """After every optimizer step: rows of every matrix <= 1, embedding rows = 1 (`exact`:
        every row = 1, the init). 1-D parameters (alpha, s_z, the norm's gamma) are left alone."""
        for weight in self.bounded_weights():
            bound_rows_(weight, exact)
        bound_rows_(self.transformer.wte.weight, exact=True)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.size()
        if T > self.block_size:
            raise ValueError(f"sequence of length {T} exceeds block_size {self.block_size}")
        h = self.transformer.wte(idx)  # (B, T, C), unit rows; position comes from RoPE
        for block in self.transformer.h:
            h = block(h)
        if targets is None:
            return self.s_z() * self.lm_head(h[:, [-1], :]), None  # (B, 1, vocab)
        logits = self.s_z() * self.lm_head(h)  # (B, T, vocab)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
        return logits, loss


def fold_constants(model: AnGPT) -> AnGPT:
    """A copy for inference with every nu of the attention and MLP folded into the weights (and
    set to 1): the same logits, no constant left to multiply. Its rows exceed the bound, so it
    is not for training (never call project_weights_ on it)."""
    folded = copy.deepcopy(model)
    with torch.no_grad():
        for block in folded.transformer.h:
            attn, mlp = block.attn, block.mlp
            attn.c_attn.weight.mul_(attn.nu_qkv)
            attn.c_proj.weight.mul_(attn.nu_p)
            mlp.c_fc.weight[:mlp.hidden].mul_(mlp.nu_uz)
            mlp.c_fc.weight[mlp.hidden:].mul_(mlp.nu_uz * mlp.gate_scale)
            mlp.c_proj.weight.mul_(mlp.nu_acf * mlp.nu_d)  # m is linear in nu_acf
            attn.nu_qkv = attn.nu_p = mlp.nu_uz = mlp.gate_scale = mlp.nu_acf = mlp.nu_d = 1.0
    return folded
