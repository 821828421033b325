"""Lp normalization: the maths identities the README's "The maths" promises."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from qknorm.config import NormConfig
from qknorm.nn import calibration_factor, initial_gamma, lp_norm, lp_normalize, qknorm_gamma
from qknorm.norms import build_qk_norm

PS = [1.0, 1.5, 2.0, 3.0, 4.0, 8.0, 64.0, math.inf]


def reference_norm(x: torch.Tensor, p: float) -> torch.Tensor:
    """torch.linalg.vector_norm in float64: the textbook definition to compare against."""
    return torch.linalg.vector_norm(x.double(), ord=p, dim=-1, keepdim=True)


@pytest.mark.parametrize("p", PS)
def test_output_has_unit_lp_norm(p):
    x = torch.randn(4, 3, 16, 32, generator=torch.Generator().manual_seed(0))
    y = lp_normalize(x, p)
    torch.testing.assert_close(reference_norm(y, p), torch.ones(4, 3, 16, 1, dtype=torch.float64),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", PS + [2.5, 5.0, 7.0])
def test_lp_norm_matches_textbook_definition(p):
    x = torch.randn(64, 48, generator=torch.Generator().manual_seed(1)) * 3
    torch.testing.assert_close(lp_norm(x, p).double(), reference_norm(x, p), rtol=1e-5, atol=1e-6)


def test_p2_equals_f_normalize():
    x = torch.randn(8, 4, 10, 16, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(lp_normalize(x, 2.0), F.normalize(x, p=2.0, dim=-1, eps=1e-6))


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("scale", [1e-3, 7.0, 1e3])
def test_scale_invariance(p, scale):
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(lp_normalize(x * scale, p), lp_normalize(x, p), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", PS)
def test_finite_gradient_at_zero_vector(p):
    x = torch.zeros(3, 8, requires_grad=True)
    y = lp_normalize(x, p)
    (y * torch.arange(8.0)).sum().backward()
    assert torch.equal(y, torch.zeros(3, 8))
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 3.0, 3.5, 4.0, 8.0, math.inf])
@pytest.mark.parametrize("gamma_shape", [(), (3, 1, 1)])
def test_gradcheck_float64(p, gamma_shape):
    """lp_normalize's hand-written backward (x and the folded-in gamma) against finite differences."""
    # Inputs away from ties and zeros, where the Lp norm is differentiable (p=1's kink at 0 and
    # p=inf's at ties have no gradient to check).
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 4, 6, dtype=torch.float64, generator=g)
    x = (x + x.sign()).requires_grad_()
    gamma = (torch.rand(gamma_shape, dtype=torch.float64, generator=g) + 1).requires_grad_()
    assert torch.autograd.gradcheck(lambda t, s: lp_normalize(t, p, gamma=s), (x, gamma),
                                    eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5, 4.0, math.inf])
def test_gamma_folds_into_the_scale(p):
    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(10))
    gamma = torch.tensor([[[2.0]], [[0.5]], [[7.0]]])
    torch.testing.assert_close(lp_normalize(x, p, gamma=gamma), gamma * lp_normalize(x, p))


def test_pinf_gradient_is_shared_among_ties_like_autograd_amax():
    x = torch.tensor([[3.0, -3.0, 1.0, 0.5], [2.0, 1.0, 2.0, 2.0]], requires_grad=True)
    w = torch.tensor([[1.0, 2.0, -1.0, 0.5], [0.3, -2.0, 1.0, 4.0]])
    (lp_normalize(x, math.inf) * w).sum().backward()
    ref = x.detach().clone().requires_grad_()
    (ref / ref.abs().amax(-1, keepdim=True) * w).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad)


def test_gradient_below_eps_treats_the_norm_as_the_constant_eps():
    """A row whose norm is clamped at eps is x / eps: its gradient is gamma / eps, nothing more."""
    x = torch.full((2, 4), 1e-9, requires_grad=True)
    gamma = torch.tensor(3.0, requires_grad=True)
    lp_normalize(x, 4.0, eps=1e-6, gamma=gamma).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2, 4), 3.0 / 1e-6))
    torch.testing.assert_close(gamma.grad, torch.tensor(8 * 1e-9 / 1e-6))


def test_bfloat16_backward_returns_bfloat16_gradients_close_to_float32():
    x16 = torch.randn(4, 2, 8, 16, generator=torch.Generator().manual_seed(11)).bfloat16()
    w = torch.randn(4, 2, 8, 16, generator=torch.Generator().manual_seed(12))
    x16.requires_grad_()
    (lp_normalize(x16, 4.0) * w.bfloat16()).float().sum().backward()
    ref = x16.detach().float().requires_grad_()  # the same values, in float32
    (lp_normalize(ref, 4.0) * w.bfloat16().float()).sum().backward()
    assert x16.grad.dtype == torch.bfloat16
    torch.testing.assert_close(x16.grad.float(), ref.grad, rtol=2e-2, atol=2e-2)


def _lp_norm_f64(x: torch.Tensor, p: float) -> torch.Tensor:
    """lp_norm's stable formula, evaluated in float64 for gradcheck."""
    if math.isinf(p):
        return x.abs().amax(-1, keepdim=True)
    m = x.abs().amax(-1, keepdim=True).detach()
    return m * (x.abs() / m).pow(p).sum(-1, keepdim=True).pow(1 / p)


@pytest.mark.parametrize("p", [1.5, 2.0, 3.0, 4.0, math.inf])
def test_float32_gradient_matches_float64_formula(p):
    """The fast paths' gradients equal the float64 reference's (what gradcheck certified)."""
    x64 = torch.randn(5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    w = torch.randn(5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    x32 = x64.float().requires_grad_()
    (lp_normalize(x32, p) * w.float()).sum().backward()
    x64 = x64.requires_grad_()
    (x64 / _lp_norm_f64(x64, p) * w).sum().backward()
    torch.testing.assert_close(x32.grad.double(), x64.grad, rtol=1e-4, atol=1e-5)


def test_no_overflow_for_large_p_and_large_inputs():
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(7)) * 1e4
    y = lp_normalize(x, 64.0)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(reference_norm(y, 64.0), torch.ones(4, 1, dtype=torch.float64),
                               rtol=1e-5, atol=1e-5)


def test_bfloat16_input_is_normalized_in_float32_and_returned_in_bfloat16():
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(8)).bfloat16()
    y = lp_normalize(x, 4.0)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(reference_norm(y.float(), 4.0), torch.ones(4, 1, dtype=torch.float64),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("p", [0.5, math.nan])
def test_rejects_p_below_one_or_nan(p):
    with pytest.raises(ValueError, match="p="):
        lp_normalize(torch.ones(3), p)


def test_qknorm_gamma_is_log2_of_t_squared_minus_t():
    assert qknorm_gamma(64) == pytest.approx(math.log2(64 * 64 - 64))  # 11.977
    assert qknorm_gamma(256) == pytest.approx(math.log2(256 * 255))


def test_gamma_inits():
    assert initial_gamma("sqrt_d", 4.0, 32, 64) == pytest.approx(math.sqrt(32))
    assert initial_gamma(3.5, 2.0, 32, 64) == 3.5
    cal = initial_gamma("calibrated", 2.0, 32, 64)
    assert cal == pytest.approx(qknorm_gamma(64))  # p=2 is its own reference


def test_calibration_factor_matches_design_ratio():
    # README, "The maths": at d=64 the logit spread differs ~190x between p=1 and p=4.
    ratio = calibration_factor(4.0, 64) / calibration_factor(1.0, 64)
    assert 170 < 1 / ratio < 210


def test_calibrated_gamma_equalizes_logit_spread_across_p():
    """Mean |q_hat . k_hat| * gamma at init agrees across p within 10% (fresh random inputs)."""
    d, T = 32, 64
    g = torch.Generator().manual_seed(123)
    q, k = torch.randn(4096, d, generator=g), torch.randn(4096, d, generator=g)
    spreads = {}
    for p in [1.0, 1.5, 2.0, 3.0, 4.0, 8.0, math.inf]:
        gamma = initial_gamma("calibrated", p, d, T)
        spreads[p] = ((lp_normalize(q, p) * lp_normalize(k, p)).sum(-1).abs().mean() * gamma).item()
    ref = spreads[2.0]
    assert all(abs(s / ref - 1) < 0.10 for s in spreads.values()), spreads
    # ... while at equal gamma they differ by orders of magnitude.
    raw = {p: spreads[p] / initial_gamma("calibrated", p, d, T)
           for p in (1.0, 4.0)}
    assert raw[4.0] / raw[1.0] > 50


def test_learnable_p_starts_at_p_and_never_drops_below_one():
    norm = build_qk_norm(NormConfig(p=3.0, p_learnable=True), n_head=2, head_dim=8, block_size=16)
    torch.testing.assert_close(norm.p, torch.full((2, 1, 1), 3.0))
    with torch.no_grad():
        norm.p_theta.fill_(-50.0)
    assert (norm.p >= 1.0).all()  # p = 1 + softplus(theta): never below 1
    q = torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(9))
    qn, _ = norm(q, q)
    assert torch.isfinite(qn).all()


def test_gamma_shapes_and_learnability():
    per_head = build_qk_norm(NormConfig(gamma_shape="head"), n_head=3, head_dim=8, block_size=16)
    assert per_head.gamma.shape == (3, 1, 1) and per_head.gamma.requires_grad
    fixed = build_qk_norm(NormConfig(gamma_learnable=False), n_head=3, head_dim=8, block_size=16)
    assert fixed.gamma.shape == () and "gamma" not in dict(fixed.named_parameters())
