"""Query-key normalizations for attention: Lp-QKNorm, RMS q/k norm, and none.

Every module here maps per-head (q, k) of shape (B, nh, T, hs) to the (q, k) that go into
`F.scaled_dot_product_attention`, and says which `scale` the attention should use:
  - none: q, k unchanged, scale None (SDPA's 1/sqrt(hs)).
  - lp / l2: q_hat * gamma, k_hat, scale 1.0 -- gamma folded into q keeps the fused kernel.
  - rms: RMSNorm(q) * w_q, RMSNorm(k) * w_k, scale None.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from qknorm.config import NormConfig


def lp_norm(x: torch.Tensor, p: float | torch.Tensor, dim: int = -1) -> torch.Tensor:
    """||x||_p along `dim` (keepdim), in float32, stable for any p >= 1 and p = inf.

    Fast paths for the common p; a tensor p (learnable, one per head) takes the general path.
    """
    x = x.float()
    if not torch.is_tensor(p):
        if p == 2.0:
            return x.square().sum(dim, keepdim=True).sqrt()
        if p == 1.0:
            return x.abs().sum(dim, keepdim=True)
        if math.isinf(p):
            return x.abs().amax(dim, keepdim=True)
    return _lp_norm_scaled(x, p, dim)


def _lp_norm_scaled(x: torch.Tensor, p: float | torch.Tensor, dim: int = -1,
                    int_pow: bool = True) -> torch.Tensor:
    """The general path of `lp_norm` (x already float32); int_pow=False sends every p to pow.

    ||x||_p = m * (sum |x/m|^p)^(1/p) with m = max|x|: no overflow for large p. The identity holds
    for any constant m > 0, so m is detached and the gradient stays exact.
    """
    m = x.detach().abs().amax(dim, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    if int_pow and not torch.is_tensor(p) and float(p).is_integer() and p <= 8:
        n = int(p)
        r = x / m if n % 2 == 0 else x.abs() / m  # an even power needs no abs
        s = _int_pow(r, n).sum(dim, keepdim=True)
        inv_p = 1.0 / p
    else:
        s = (x.abs() / m).pow(p).sum(dim, keepdim=True)
        inv_p = 1.0 / p if not torch.is_tensor(p) else p.reciprocal()
    # s >= 1 whenever x != 0; the floor only matters at x = 0, where it keeps the gradient finite.
    return m * s.clamp_min(1e-30).pow(inv_p)


def _int_pow(r: torch.Tensor, n: int) -> torch.Tensor:
    """r**n by repeated squaring: cheaper than pow for small integer n."""
    out, base = None, r
    while n:
        if n & 1:
            out = base if out is None else out * base
        n >>= 1
        if n:
            base = base * base
    return out


def lp_normalize(x: torch.Tensor, p: float | torch.Tensor, dim: int = -1,
                 eps: float = 1e-6) -> torch.Tensor:
    """x / max(||x||_p, eps) along `dim`, computed in float32, returned in x's dtype."""
    if not torch.is_tensor(p) and (math.isnan(p) or p < 1):
        raise ValueError(f"p={p} is not a norm; use a float >= 1 or math.inf")
    if not torch.is_tensor(p) and p == 2.0:
        # rsqrt of the sum of squares: one fused pass, the cheapest normalization there is.
        xf = x.float()
        inv = torch.rsqrt(xf.square().sum(dim, keepdim=True).clamp_min(eps * eps))
        return (xf * inv).to(x.dtype)
    return (x.float() / lp_norm(x, p, dim).clamp_min(eps)).to(x.dtype)


def _lp_normalize_general(x: torch.Tensor, p: float | torch.Tensor, dim: int = -1,
                          eps: float = 1e-6) -> torch.Tensor:
    """lp_normalize without any fast path (every p through max-scaling and pow); only the bench
    uses this, to show what the fast paths buy."""
    xf = x.float()
    return (xf / _lp_norm_scaled(xf, p, dim, int_pow=False).clamp_min(eps)).to(x.dtype)


# ---------------------------------------------------------------------------------------------
# gamma initialisation


def qknorm_gamma(block_size: int) -> float:
    """Henry et al. (2020): g0 = log2(T^2 - T) for sequence length T."""
    return math.log2(block_size**2 - block_size)


@functools.lru_cache(maxsize=64)
def calibration_factor(p: float, head_dim: int, n_samples: int = 8192) -> float:
    """E||x||_p^2 / E||x||_2^2 for x ~ N(0, I_d), by Monte Carlo with a fixed seed.

    For unit-Lp vectors the dot product q_hat.k_hat shrinks or grows with p (about 190x between
    p=1 and p=4 at d=64); multiplying gamma by this factor gives every p the logit spread of p=2.
    """
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n_samples, head_dim, generator=g, dtype=torch.float64)
    norm_p = x.norm(p=p, dim=-1)  # float64: exact enough for any p here, inf included
    norm_2 = x.norm(p=2, dim=-1)
    return (norm_p.square().mean() / norm_2.square().mean()).item()


def initial_gamma(cfg: NormConfig, head_dim: int, block_size: int) -> float:
    if not isinstance(cfg.gamma_init, str):
        return float(cfg.gamma_init)
    if cfg.gamma_init == "qknorm":
        return qknorm_gamma(block_size)
    if cfg.gamma_init == "sqrt_d":
        return math.sqrt(head_dim)
    if cfg.gamma_init == "calibrated":
        return qknorm_gamma(block_size) * calibration_factor(cfg.p, head_dim)
    raise ValueError(f"unknown gamma_init {cfg.gamma_init!r}")  # validate() catches this first


# ---------------------------------------------------------------------------------------------
# modules


class NoQKNorm(nn.Module):
    """Plain attention: softmax(q.k / sqrt(hs))."""

    scale = None

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k


class LpQKNorm(nn.Module):
    """q / ||q||_p * gamma and k / ||k||_p per head; the attention then uses scale 1."""

    scale = 1.0
    _general_path = False  # the bench sets this to time p=2 etc. without the fast paths

    def __init__(self, cfg: NormConfig, n_head: int, head_dim: int, block_size: int):
        super().__init__()
        self.eps = cfg.eps
        self.p_learnable = cfg.p_learnable
        gamma_shape = (n_head, 1, 1) if cfg.gamma_shape == "head" else ()
        gamma = torch.full(gamma_shape, initial_gamma(cfg, head_dim, block_size))
        if cfg.gamma_learnable:
            self.gamma = nn.Parameter(gamma)
        else:
            self.register_buffer("gamma", gamma)
        if cfg.p_learnable:
            # p = 1 + softplus(theta) keeps p > 1 for any theta; theta starts where p = cfg.p.
            # (An infinite start has no finite theta; start large instead.)
            p0 = min(cfg.p, 64.0)
            theta = p0 - 1 + math.log(-math.expm1(-(p0 - 1))) if p0 > 1 else -20.0
            self.p_theta = nn.Parameter(torch.full((n_head, 1, 1), theta))
        else:
            self.p_fixed = cfg.p

    @property
    def p(self) -> float | torch.Tensor:
        """p per head (n_head, 1, 1) when learnable, else the fixed float."""
        return 1.0 + F.softplus(self.p_theta) if self.p_learnable else self.p_fixed

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.p
        normalize = _lp_normalize_general if self._general_path else lp_normalize
        q = normalize(q, p, eps=self.eps) * self.gamma.to(q.dtype)
        k = normalize(k, p, eps=self.eps)
        return q, k


class RMSQKNorm(nn.Module):
    """RMSNorm on q and k over the head dimension, each with a learned per-dim weight."""

    scale = None

    def __init__(self, cfg: NormConfig, head_dim: int):
        super().__init__()
        self.q_norm = nn.RMSNorm(head_dim, eps=cfg.eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=cfg.eps)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.q_norm(q), self.k_norm(k)


def build_qk_norm(cfg: NormConfig, n_head: int, head_dim: int, block_size: int) -> nn.Module:
    """The table from `norm.kind` to code (l2 is lp at p=2)."""
    if cfg.kind == "none":
        return NoQKNorm()
    if cfg.kind in ("l2", "lp"):
        return LpQKNorm(cfg, n_head, head_dim, block_size)
    if cfg.kind == "rms":
        return RMSQKNorm(cfg, head_dim)
    raise ValueError(f"unknown norm.kind {cfg.kind!r}")  # validate() catches this first
