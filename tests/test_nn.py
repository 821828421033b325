"""qknorm.nn, the layer on its own: torch only, the two modules' logits, their error messages."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from qknorm import config
from qknorm.nn import GAMMA_INITS, GAMMA_PARAMS, GAMMA_SHAPES, LpNorm, LpQKNorm, qknorm_gamma, swap_qk_norms

SWEEP_STACK = ("hydra", "omegaconf", "optuna", "pandas", "matplotlib", "scipy", "sqlalchemy")


def unit(x: torch.Tensor, p: float) -> torch.Tensor:
    """x / ||x||_p over the last dim by the textbook definition (torch.linalg.vector_norm)."""
    return x / torch.linalg.vector_norm(x, p, dim=-1, keepdim=True)


@pytest.mark.slow
def test_import_qknorm_nn_loads_torch_and_none_of_the_sweep_stack():
    """`pip install qknorm` without the sweep extra must be enough for the layer."""
    code = ("import qknorm.nn, sys; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(r.stdout.split())
    assert "torch" in loaded
    assert sorted(loaded.intersection(SWEEP_STACK)) == []


def test_choices_agree_with_the_config_schema():
    """qknorm.config keeps its own copy (it must not import torch): the two must not drift."""
    assert (config.GAMMA_INITS, config.GAMMA_SHAPES, config.GAMMA_PARAMS) == (
        GAMMA_INITS, GAMMA_SHAPES, GAMMA_PARAMS)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, 4.0, math.inf])
def test_lp_qknorm_pair_in_sdpa_gives_gamma_times_normalized_logits(p):
    norm = LpQKNorm(16, p, n_head=4, gamma_init=3.0, gamma_shape="head")
    with torch.no_grad():
        norm.gamma.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]).view(4, 1, 1))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, generator=g) for _ in range(3))  # (B, nh, T, hs)
    with torch.no_grad():
        qn, kn = norm(q, k)
        y = F.scaled_dot_product_attention(qn, kn, v, is_causal=True, scale=norm.scale)
    logits = norm.gamma * unit(q, p) @ unit(k, p).transpose(-2, -1)  # (B, nh, T, T)
    mask = torch.ones(8, 8, dtype=torch.bool).triu(1)
    want = logits.masked_fill(mask, -math.inf).softmax(-1) @ v
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)


def test_lp_qknorm_defaults_start_gamma_at_qknorm_and_learn_one_scalar():
    norm = LpQKNorm(32, 4.0, block_size=64)
    assert norm.gamma.item() == pytest.approx(math.log2(64 * 63))  # 11.977
    assert [name for name, _ in norm.named_parameters()] == ["gamma"]
    assert norm.p == 4.0


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5, 4.0, math.inf])
@pytest.mark.parametrize("host_scale", [None, 0.1])
def test_lp_norm_scale_split_undoes_the_host_scale(p, host_scale):
    """host_scale * q_norm(q) . k_norm(k) = gamma * q_hat . k_hat: each side carries
    sqrt(gamma / host_scale), sqrt(gamma) * d**0.25 for the default 1/sqrt(d)."""
    d, gamma = 16, 5.0
    q_norm = LpNorm(d, p, gamma_init=gamma, host_scale=host_scale)
    k_norm = LpNorm(d, p, gamma_init=gamma, host_scale=host_scale)
    scale = d**-0.5 if host_scale is None else host_scale
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(3, 7, d, generator=g, dtype=torch.float64), torch.randn(3, 7, d, generator=g)
    with torch.no_grad():
        host = scale * q_norm(q.float()) @ k_norm(k).transpose(-2, -1)
        side = q_norm(q.float()) / unit(q.float(), p)
    torch.testing.assert_close(host, gamma * unit(q.float(), p) @ unit(k, p).transpose(-2, -1),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(side, torch.full_like(side, math.sqrt(gamma / scale)))
    if host_scale is None:  # the default, 1/sqrt(d): each side sqrt(gamma) * d**0.25 = 2 sqrt(5)
        assert q_norm.host_scale == 0.25
        torch.testing.assert_close(side, torch.full_like(side, 2 * math.sqrt(5.0)))


def test_lp_norm_gamma_learns_and_log_parametrisation_starts_exactly_at_gamma0():
    linear = LpNorm(16, 4.0, gamma_init=7.0)
    log = LpNorm(16, 4.0, gamma_init=7.0, gamma_param="log")
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2))
    assert torch.equal(linear(x), log(x))  # exp(0) = 1: the same start, bit for bit
    log(x).sum().backward()
    theta = log.parametrizations.gamma.original
    assert theta.item() == 0.0 and theta.grad is not None and theta.grad.item() != 0.0
    fixed = LpNorm(16, 4.0, gamma_init=7.0, gamma_learnable=False)
    assert list(fixed.parameters()) == [] and fixed.gamma.item() == 7.0


@pytest.mark.parametrize(("make", "message"), [
    (lambda: LpQKNorm(16, 0.5, gamma_init=1.0),
     r"p=0\.5 is not a norm \(Lp needs p >= 1\); use a float >= 1 or math\.inf"),
    (lambda: LpQKNorm(16, math.nan, gamma_init=1.0), r"p=nan is not a norm"),
    (lambda: LpNorm(16, 0.0, gamma_init=1.0), r"p=0\.0 is not a norm"),
    (lambda: LpNorm(16, 2.0, gamma_init="qk"),
     r"gamma_init='qk' is not one of qknorm, sqrt_d, calibrated; pick one"),
    (lambda: LpQKNorm(16, 2.0, gamma_init=-1.0), r"gamma_init=-1\.0 must be one of .* or a positive number"),
    (lambda: LpQKNorm(16, 2.0), r"gamma_init='qknorm' is log2\(T\^2 - T\).*pass block_size=T"),
    (lambda: LpQKNorm(16, 2.0, block_size=8, gamma_shape="row"),
     r"gamma_shape='row' is not one of scalar, head"),
    (lambda: LpNorm(16, 2.0, block_size=8, gamma_param="exp"),
     r"gamma_param='exp' is not one of linear, log"),
    (lambda: LpNorm(16, 2.0, block_size=8, eps=0.0), r"eps=0\.0 must be > 0"),
    (lambda: LpNorm(16, 2.0, block_size=8, host_scale=-1.0), r"host_scale=-1\.0 must be the positive"),
])
def test_bad_arguments_raise_one_value_error_naming_value_and_fix(make, message):
    with pytest.raises(ValueError, match=message):
        make()


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_norm = nn.RMSNorm(8)
        self.k_norm = nn.RMSNorm(8)


def test_swap_qk_norms_counts_reads_head_dim_and_refuses_a_model_without_the_names():
    model = nn.Sequential(_Attention(), nn.Linear(8, 8), _Attention())
    assert swap_qk_norms(model, p=3.0, block_size=32) == 4
    norms = [m for m in model.modules() if isinstance(m, LpNorm)]
    want = (8, 3.0, pytest.approx(qknorm_gamma(32)))
    assert [(n.head_dim, n.p, n.gamma.item()) for n in norms] == [want] * 4
    with pytest.raises(ValueError, match="no submodule named q_norm or k_norm in Linear; pass names="):
        swap_qk_norms(nn.Linear(8, 8), p=3.0, block_size=32)


def test_qknorm_norms_still_exports_lp_normalize():
    """qknorm.norms.lp_normalize is a documented name; it is the layer's function."""
    import qknorm.nn
    import qknorm.norms

    assert qknorm.norms.lp_normalize is qknorm.nn.lp_normalize
