"""Lp-QKNorm as a layer for any PyTorch model: torch only (no Hydra, no config objects).

Lp-QKNorm replaces attention's softmax(q.k / sqrt(d)) by softmax(gamma * q_hat . k_hat), where
q_hat = q / ||q||_p and k_hat = k / ||k||_p per head, and gamma is a learned temperature. Two
modules bring it into a model:

  - LpQKNorm(head_dim, p): the pair (q, k) -> (gamma * q_hat, k_hat), for attention you write
    yourself; its `scale` (1.0) is what the attention must then use instead of 1/sqrt(d), e.g.
    F.scaled_dot_product_attention(q, k, v, scale=norm.scale). The project's GPT uses it.
  - LpNorm(head_dim, p): one tensor, for a host that already has `q_norm` / `k_norm` hooks and
    keeps its own 1/sqrt(d) (Hugging Face Qwen3, timm's Attention(qk_norm=True, norm_layer=...));
    `swap_qk_norms(model, p=4.0, block_size=T)` puts it in every such hook of a model.

Both reach the same logits, gamma * q_hat . k_hat; docs/nn.md shows the swap.

    import qknorm.nn
    n = qknorm.nn.swap_qk_norms(model, p=4.0, block_size=2048)  # every q_norm / k_norm
    print(n, "norms swapped")
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize

# The choices of the layers' string arguments. qknorm.config keeps the same tuples for its
# messages without importing torch; tests/test_nn.py checks the two agree.
GAMMA_INITS = ("qknorm", "sqrt_d", "calibrated")
GAMMA_SHAPES = ("scalar", "head")
GAMMA_PARAMS = ("linear", "log")


def check_p(p: float, name: str = "p") -> float:
    """p as a float, or one ValueError naming the bad value and the fix."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not p >= 1:  # NaN fails p >= 1
        raise ValueError(f"{name}={p!r} is not a norm (Lp needs p >= 1); use a float >= 1 or math.inf")
    return float(p)


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
        # CPU, comparisons that produce bool masks are slower (docs/performance.md, "Speed notes").
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


def initial_gamma(gamma_init: str | float, p: float, head_dim: int,
                  block_size: int | None = None) -> float:
    """gamma's start: "qknorm" log2(T^2 - T), "calibrated" that times calibration_factor(p, d)
    (the logit spread of p = 2 at every p), "sqrt_d" sqrt(head_dim), or a positive number.
    T = block_size, the longest sequence the attention sees, is needed by the first two only."""
    if isinstance(gamma_init, str):
        if gamma_init not in GAMMA_INITS:
            raise ValueError(f"gamma_init={gamma_init!r} is not one of {', '.join(GAMMA_INITS)}; "
                             "pick one of those or pass a positive number")
        if gamma_init == "sqrt_d":
            return math.sqrt(head_dim)
        if block_size is None or block_size < 2:
            raise ValueError(f"gamma_init={gamma_init!r} is log2(T^2 - T) for sequence length T, "
                             f"but block_size={block_size!r}; pass block_size=T (the longest "
                             "sequence, >= 2) or a number as gamma_init")
        if gamma_init == "qknorm":
            return qknorm_gamma(block_size)
        return qknorm_gamma(block_size) * calibration_factor(p, head_dim)
    if isinstance(gamma_init, bool) or not isinstance(gamma_init, (int, float)) \
            or not (math.isfinite(gamma_init) and gamma_init > 0):
        raise ValueError(f"gamma_init={gamma_init!r} must be one of {', '.join(GAMMA_INITS)} or a "
                         "positive number; pass e.g. gamma_init='qknorm'")
    return float(gamma_init)


class RelativeScale(nn.Module):
    """gamma = gamma0 * exp(theta), theta trained from 0 (gamma_param="log").

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


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}; pick one of those")


def _add_gamma(module: nn.Module, gamma0: torch.Tensor, learnable: bool, param: str) -> None:
    """module.gamma: a parameter (linear), gamma0 * exp(theta) (log), or a buffer (fixed)."""
    _choice("gamma_param", param, GAMMA_PARAMS)
    if learnable:
        module.gamma = nn.Parameter(gamma0)
        if param == "log":
            parametrize.register_parametrization(module, "gamma", RelativeScale(gamma0))
    else:
        module.register_buffer("gamma", gamma0)


# ---------------------------------------------------------------------------------------------
# modules


class LpQKNorm(nn.Module):
    """Lp-QKNorm on the pair: (q, k) of shape (B, nh, T, hs) -> (gamma * q_hat, k_hat), with
    q_hat = q / ||q||_p and k_hat = k / ||k||_p over hs. The attention then uses `scale` (1.0):

        q, k = norm(q, k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=norm.scale)

    gives softmax(gamma * q_hat . k_hat) v; gamma rides on q, so the fused kernel stays in use.

    head_dim: hs. p: >= 1 or math.inf. n_head: heads, for gamma_shape="head" and a learned p
    (one per head). block_size: the longest sequence T, for gamma_init "qknorm" and "calibrated".
    gamma_init: see initial_gamma. gamma_param: "linear" (gamma is the parameter) or "log"
    (gamma = gamma0 * exp(theta), see RelativeScale). p_learnable: p = 1 + softplus(theta) per
    head, started at p. eps: floor of the norm.
    """

    scale = 1.0

    def __init__(self, head_dim: int, p: float = 2.0, *, n_head: int = 1, block_size: int | None = None,
                 gamma_init: str | float = "qknorm", gamma_shape: str = "scalar",
                 gamma_learnable: bool = True, gamma_param: str = "linear", p_learnable: bool = False,
                 eps: float = 1e-6):
        super().__init__()
        p = check_p(p)
        _choice("gamma_shape", gamma_shape, GAMMA_SHAPES)
        if not eps > 0:
            raise ValueError(f"eps={eps!r} must be > 0 (it floors the norm); use e.g. 1e-6")
        self.eps = eps
        self.p_learnable = p_learnable
        gamma_shape = (n_head, 1, 1) if gamma_shape == "head" else ()  # broadcasts on (B, nh, T, 1)
        gamma = torch.full(gamma_shape, initial_gamma(gamma_init, p, head_dim, block_size))
        _add_gamma(self, gamma, gamma_learnable, gamma_param)
        if p_learnable:
            # p = 1 + softplus(theta) keeps p > 1 for any theta; theta starts where p = p0.
            # (An infinite start has no finite theta; start large instead.)
            p0 = min(p, 64.0)
            theta = p0 - 1 + math.log(-math.expm1(-(p0 - 1))) if p0 > 1 else -20.0
            self.p_theta = nn.Parameter(torch.full((n_head, 1, 1), theta))
        else:
            self.p_fixed = p

    @property
    def p(self) -> float | torch.Tensor:
        """p per head (n_head, 1, 1) when learnable, else the fixed float."""
        return 1.0 + F.softplus(self.p_theta) if self.p_learnable else self.p_fixed

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = lp_normalize(q, self.p, eps=self.eps, gamma=self.gamma)  # (B, nh, T, hs)
        k = lp_normalize(k, self.p, eps=self.eps)  # (B, nh, T, hs)
        return q, k


class LpNorm(nn.Module):
    """Lp normalization of one tensor over its last dim, for a host attention with `q_norm` and
    `k_norm` hooks (each called on one of q, k) that keeps its own 1/sqrt(d) on the logits:

        x -> x / ||x||_p * sqrt(gamma / host_scale),   host_scale = 1/sqrt(head_dim) by default

    so each side carries sqrt(gamma) * d**0.25. The host computes host_scale * q_norm(q) .
    k_norm(k) = host_scale * sqrt(gamma_q / host_scale) * sqrt(gamma_k / host_scale) * q_hat .
    k_hat = sqrt(gamma_q * gamma_k) * q_hat . k_hat: Lp-QKNorm's logits gamma * q_hat . k_hat,
    the host's 1/sqrt(d) undone, without touching the host's attention code. q_norm and k_norm
    each hold a gamma; both start at gamma_init, and the logits' temperature is their geometric
    mean (equal to gamma while they stay equal). Pass host_scale if the host scales its logits
    by something other than 1/sqrt(head_dim).

    gamma is a scalar: a host's q_norm may see (B, T, nh, hs) or (B, nh, T, hs), so a per-head
    gamma has no layout to rely on (use LpQKNorm in attention you write for that, or a learned p).
    Arguments as LpQKNorm's; the input may have any shape (..., head_dim).
    """

    def __init__(self, head_dim: int, p: float = 2.0, *, block_size: int | None = None,
                 gamma_init: str | float = "qknorm", gamma_learnable: bool = True,
                 gamma_param: str = "linear", host_scale: float | None = None, eps: float = 1e-6):
        super().__init__()
        self.head_dim, self.p = head_dim, check_p(p)
        if not eps > 0:
            raise ValueError(f"eps={eps!r} must be > 0 (it floors the norm); use e.g. 1e-6")
        self.eps = eps
        self.host_scale = head_dim ** -0.5 if host_scale is None else host_scale
        if not (math.isfinite(self.host_scale) and self.host_scale > 0):
            raise ValueError(f"host_scale={host_scale!r} must be the positive number the host "
                             "multiplies its logits by; leave it None for 1/sqrt(head_dim)")
        gamma = torch.tensor(initial_gamma(gamma_init, self.p, head_dim, block_size))
        _add_gamma(self, gamma, gamma_learnable, gamma_param)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        side = (self.gamma / self.host_scale).sqrt()  # sqrt(gamma) * d**0.25 by default
        return lp_normalize(x, self.p, eps=self.eps, gamma=side)  # (..., head_dim)

    def extra_repr(self) -> str:
        return f"{self.head_dim}, p={self.p}, host_scale={self.host_scale:.4g}, eps={self.eps}"


def _head_dim_of(module: nn.Module) -> int | None:
    """The width a norm module normalizes: nn.RMSNorm/LayerNorm's normalized_shape, else the
    last dim of its weight (Hugging Face's Qwen3RMSNorm and the like)."""
    shape = getattr(module, "normalized_shape", None)
    if shape:
        return int(shape[-1])
    weight = getattr(module, "weight", None)
    return int(weight.shape[-1]) if isinstance(weight, torch.Tensor) and weight.dim() >= 1 else None


def swap_qk_norms(model: nn.Module, p: float = 4.0, names: tuple[str, ...] = ("q_norm", "k_norm"),
                  head_dim: int | None = None, **kwargs) -> int:
    """Replace every submodule of `model` named q_norm or k_norm (or `names`) by LpNorm, in
    place; returns how many were replaced. LpNorm's scale split keeps the host's 1/sqrt(d)
    correct (see LpNorm), so nothing else in the model changes:

        n = swap_qk_norms(model, p=4.0, block_size=2048)  # e.g. a Qwen3ForCausalLM: 2 per layer

    head_dim: read from each replaced module (normalized_shape or weight) unless given.
    kwargs go to LpNorm (block_size, gamma_init, gamma_param, host_scale, eps). The new modules
    are on the device of the ones they replace, gamma in float32. Raises ValueError when no
    module has those names (a swap that does nothing would train the host's own norm unnoticed).
    """
    swaps = []
    for parent in model.modules():
        for name in names:
            old = getattr(parent, name, None)
            if isinstance(old, nn.Module):
                swaps.append((parent, name, old))
    if not swaps:
        raise ValueError(f"no submodule named {' or '.join(names)} in {type(model).__name__}; "
                         "pass names=(...) with the attribute names its attention uses")
    for parent, name, old in swaps:
        d = head_dim if head_dim is not None else _head_dim_of(old)
        if d is None:
            raise ValueError(f"cannot read the head dim of {type(old).__name__} at {name}; "
                             "pass head_dim=...")
        device = next(iter(old.parameters()), next(iter(old.buffers()), torch.empty(0))).device
        setattr(parent, name, LpNorm(d, p, **kwargs).to(device))
    return len(swaps)
