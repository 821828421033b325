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
from torch.nn.utils import parametrize

from qknorm.config import P_KINDS, NormConfig


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """float32 for bfloat16/float16/float32 inputs (float64 stays float64, e.g. for gradcheck)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def lp_norm(x: torch.Tensor, p: float | torch.Tensor, dim: int = -1) -> torch.Tensor:
    """||x||_p along `dim` (keepdim), in float32 (at least), for any p >= 1 and p = inf.

    p = 1, 2, inf are two kernels each; p = 3 and 4 are products (no pow), which overflow only
    for |x| above ~1e12 and ~1e9; every other p, and a tensor p (learnable, one per head), takes
    the max-scaled path, safe for any p. (torch.linalg.vector_norm is not used: on CPU its p=1
    and p=inf reductions are much slower than abs().sum() and abs().amax(); docs/design.md,
    "Speed notes".)
    """
    x = _upcast(x)
    if not torch.is_tensor(p):
        if p == 2.0:
            return (x * x).sum(dim, keepdim=True).sqrt()
        if p == 1.0:
            return x.abs().sum(dim, keepdim=True)
        if math.isinf(p):
            return x.abs().amax(dim, keepdim=True)
        if p == 4.0:
            x2 = x * x
            return (x2 * x2).sum(dim, keepdim=True).sqrt().sqrt()
        if p == 3.0:
            return (x * x * x.abs()).sum(dim, keepdim=True).pow(1 / 3)
    return lp_norm_scaled(x, p, dim)


def lp_norm_scaled(x: torch.Tensor, p: float | torch.Tensor, dim: int = -1) -> torch.Tensor:
    """||x||_p = m * (sum |x/m|^p)^(1/p) with m = max|x| (x already upcast): no overflow for any p.

    The identity holds for any constant m > 0, so m is detached and the gradient stays exact.
    """
    if not torch.is_tensor(p) and math.isinf(p):
        return x.abs().amax(dim, keepdim=True)
    m = x.detach().abs().amax(dim, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    s = (x.abs() / m).pow(p).sum(dim, keepdim=True)
    inv_p = p.reciprocal() if torch.is_tensor(p) else 1.0 / p
    # s >= 1 whenever x != 0; the floor only matters at x = 0, where it keeps the gradient finite.
    return m * s.clamp_min(1e-30).pow(inv_p)


def lp_normalize(x: torch.Tensor, p: float | torch.Tensor, dim: int = -1, eps: float = 1e-6,
                 gamma: torch.Tensor | None = None) -> torch.Tensor:
    """gamma * x / max(||x||_p, eps) along `dim`, computed in float32 (float64 for float64 input),
    returned in x's dtype.

    gamma (optional; broadcasts against the norm, e.g. shape () or (n_head, 1, 1)) multiplies
    the per-row scale 1/||x||_p, not x itself: folding it in costs no full-size multiply.
    A float p goes through `_LpNormalize`, whose backward is written out; a tensor p (learnable)
    goes through autograd, which also gives p its gradient.
    """
    if not torch.is_tensor(p):
        if not p >= 1:  # NaN too; not math.isnan, which torch.compile cannot trace on a float
            raise ValueError(f"p={p} is not a norm; use a float >= 1 or math.inf")
        return _LpNormalize.apply(x, float(p), dim, eps, gamma)
    scale = lp_norm(x, p, dim).clamp_min(eps).reciprocal()
    return (_upcast(x) * (scale if gamma is None else scale * gamma)).to(x.dtype)


class _LpNormalize(torch.autograd.Function):
    """out = gamma * y, y = x / N, N = max(||x||_p, eps), for a fixed p, with the backward in
    closed form.

    Autograd through the norm's formula runs a backward for every abs, pow, clamp and division;
    written out, with G = dL/dout and r = <G, y> per row (one multiply and one sum),
        dL/dx     = gamma / N * (G - r * dN/dx),   dN/dx = sign(x) |y|^(p-1)
        dL/dgamma = sum of r over the rows gamma is shared by.
    dN/dx is x/N for p=2, sign(x) for p=1, x^3/N^3 for p=4, and for p=inf sign(x) on the
    entries that reach max|x| (shared among ties, as autograd's amax does). Where the norm is
    clamped at eps, N is a constant and the dN/dx term drops out.
    """

    @staticmethod
    def forward(ctx, x, p, dim, eps, gamma):
        xf = _upcast(x)
        norm = lp_norm(xf, p, dim)
        scale = norm.clamp_min(eps).reciprocal()
        if gamma is not None:
            scale = scale * gamma
        ctx.save_for_backward(xf, norm, gamma)
        ctx.p, ctx.dim, ctx.eps = p, dim, eps
        return (xf * scale).to(x.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        xf, norm, gamma = ctx.saved_tensors
        p, dim = ctx.p, ctx.dim
        g = grad_out.to(xf.dtype)
        inv = norm.clamp_min(ctx.eps).reciprocal()  # (..., 1): every coefficient below is this small
        r = (g * xf).sum(dim, keepdim=True) * inv  # <G, y>
        a = inv if gamma is None else inv * gamma
        grad_x = grad_gamma = None
        if ctx.needs_input_grad[0]:
            dnorm, coef = _norm_gradient(xf, norm, inv, p, dim)  # dN/dx = coef * dnorm
            live = (norm - ctx.eps).clamp_min_(0.0).sign_()  # 0 where the norm is clamped at eps
            coef = a * r * coef * live
            grad_x = torch.addcmul(g * a, dnorm, coef, value=-1.0).to(grad_out.dtype)
        if gamma is not None and ctx.needs_input_grad[4]:
            grad_gamma = r.sum_to_size(gamma.shape).to(gamma.dtype)
        return grad_x, None, None, None, grad_gamma


def _norm_gradient(xf: torch.Tensor, norm: torch.Tensor, inv: torch.Tensor, p: float,
                   dim: int) -> tuple[torch.Tensor, torch.Tensor | float]:
    """dN/dx = sign(x) |x/N|^(p-1) as (full-size tensor, per-row coefficient), cheapest form per p."""
    if p == 2.0:
        return xf, inv
    if p == 1.0:
        return xf.sign(), 1.0
    if p == 4.0:
        return xf * xf * xf, inv * inv * inv
    if math.isinf(p):
        # 1 where |x| reaches the max, else 0, since sign(|x| - max) is 0 or -1. Float ops: on
        # CPU, comparisons that produce bool masks are slower (docs/design.md, "Speed notes").
        # There x = ±N, so sign(x) = x / N.
        at_max = (xf.abs() - norm).sign_().add_(1.0)
        return xf * at_max, inv / at_max.sum(dim, keepdim=True)
    y = xf * inv  # |y| <= 1: no overflow for any p
    return y.sign() * y.abs().pow(p - 1), 1.0


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

    def __init__(self, cfg: NormConfig, n_head: int, head_dim: int, block_size: int):
        super().__init__()
        self.eps = cfg.eps
        self.p_learnable = cfg.p_learnable
        gamma_shape = (n_head, 1, 1) if cfg.gamma_shape == "head" else ()
        gamma = torch.full(gamma_shape, initial_gamma(cfg, head_dim, block_size))
        if cfg.gamma_learnable:
            self.gamma = nn.Parameter(gamma)
            if cfg.gamma_param == "log":
                parametrize.register_parametrization(self, "gamma", RelativeScale(gamma))
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
        q = lp_normalize(q, self.p, eps=self.eps, gamma=self.gamma)
        k = lp_normalize(k, self.p, eps=self.eps)
        return q, k


class RelativeScale(nn.Module):
    """gamma = gamma0 * exp(theta), theta trained from 0 (norm.gamma_param=log).

    Adam moves a parameter by about lr per step whatever its size, so a linear gamma of 12 at
    lr 1e-3 can hardly move; a step on theta changes gamma by a factor exp(lr), so gamma can
    find its temperature. Written relative to gamma0 (not as exp(log gamma0)) so the start is
    exactly gamma0: exp(0) = 1.
    """

    def __init__(self, gamma0: torch.Tensor):
        super().__init__()
        self.register_buffer("gamma0", gamma0.detach().clone())

    def forward(self, theta: torch.Tensor) -> torch.Tensor:
        return self.gamma0 * theta.exp()

    def right_inverse(self, gamma: torch.Tensor) -> torch.Tensor:
        return (gamma / self.gamma0).log()


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
    if cfg.kind in P_KINDS:
        return LpQKNorm(cfg, n_head, head_dim, block_size)
    if cfg.kind == "rms":
        return RMSQKNorm(cfg, head_dim)
    raise ValueError(f"unknown norm.kind {cfg.kind!r}")  # validate() catches this first
