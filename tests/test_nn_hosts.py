"""qknorm.nn in other people's attention: a tiny random Hugging Face Qwen3 and a timm-style host.

Nothing here reaches the network: the Qwen3 is built from a config written below, with random
weights, and HF_HUB_OFFLINE makes any download attempt fail instead of fetching.
"""

from __future__ import annotations

import copy
import functools
import math
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from qknorm.nn import LpNorm, swap_qk_norms

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers reads it

D, N_HEAD = 16, 4


def unit(x: torch.Tensor, p: float) -> torch.Tensor:
    """x / ||x||_p over the last dim by the textbook definition (torch.linalg.vector_norm)."""
    return x / torch.linalg.vector_norm(x, p, dim=-1, keepdim=True)


# ---------------------------------------------------------------------------------------------
# Hugging Face Qwen3


def tiny_qwen3(seed: int = 0):
    transformers = pytest.importorskip("transformers", reason="Qwen3 host: pip install -e '.[dev]'")
    torch.manual_seed(seed)
    cfg = transformers.Qwen3Config(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=N_HEAD, num_key_value_heads=2, head_dim=D, max_position_embeddings=64)
    cfg._attn_implementation = "eager"  # softmax(scaling * q k^T) written out: the reference path
    return transformers.Qwen3ForCausalLM(cfg).eval()


class L2Reference(nn.Module):
    """Hand-written L2 QKNorm for one side: gamma * x / ||x||_2 (q) or x / ||x||_2 (k)."""

    def __init__(self, gamma: float):
        super().__init__()
        self.gamma = gamma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gamma * x / (x * x).sum(-1, keepdim=True).sqrt()


def test_qwen3_at_p2_matches_hand_written_l2_qknorm():
    """Swapped model: Qwen3's own 1/sqrt(d) with LpNorm's scale split on each side. Reference:
    the same weights, q_norm = gamma * q / ||q||_2, k_norm = k / ||k||_2, and the attention's
    scaling set to 1, i.e. logits gamma * q_hat . k_hat written by hand."""
    model, gamma = tiny_qwen3(), 6.0
    reference = copy.deepcopy(model)
    assert swap_qk_norms(model, p=2.0, gamma_init=gamma) == 2 * 2  # q_norm and k_norm per layer
    for layer in reference.model.layers:
        layer.self_attn.q_norm, layer.self_attn.k_norm = L2Reference(gamma), L2Reference(1.0)
        layer.self_attn.scaling = 1.0
    idx = torch.randint(97, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = model(idx).logits, reference(idx).logits
        original = tiny_qwen3()(idx).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (got - original).abs().max() > 1e-2  # the swap changed the model


def test_qwen3_with_lp_norm_p4_trains_on_a_fixed_batch():
    model = tiny_qwen3().train()
    assert swap_qk_norms(model, p=4.0, block_size=64) == 4
    assert all(type(layer.self_attn.q_norm) is LpNorm for layer in model.model.layers)
    idx = torch.randint(97, (4, 33), generator=torch.Generator().manual_seed(2))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gamma0 = model.model.layers[0].self_attn.q_norm.gamma.item()
    losses = []
    for _ in range(20):
        loss = model(idx[:, :-1], labels=idx[:, :-1]).loss  # HF shifts the labels itself
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(math.log(97), abs=0.3)  # random init: uniform over 97 tokens
    assert losses[-1] < 0.5 * losses[0], losses
    assert model.model.layers[0].self_attn.q_norm.gamma.item() != gamma0  # gamma is trained


# ---------------------------------------------------------------------------------------------
# a timm-style host


class TimmStyleAttention(nn.Module):
    """Mirrors the signature of timm's `Attention(dim, num_heads, qkv_bias, qk_norm, norm_layer)`:
    with qk_norm=True it builds `norm_layer(head_dim)` for q and for k and keeps its own
    scale head_dim**-0.5. Written here because timm depends on torchvision, whose install pulls
    a second (CUDA) torch build; the hook is the signature, which this class reproduces."""

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False, qk_norm: bool = False,
                 norm_layer: type[nn.Module] = nn.LayerNorm):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, N, C = x.shape
        qkv = self.qkv(x).view(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return qkv[0], qkv[1], qkv[2]  # each (B, nh, N, hd)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        q, k, _ = self.qkv_heads(x)
        return self.scale * self.q_norm(q) @ self.k_norm(k).transpose(-2, -1)  # (B, nh, N, N)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        y = F.softmax(self.logits(x), dim=-1) @ self.qkv_heads(x)[2]  # (B, nh, N, hd)
        return self.proj(y.transpose(1, 2).reshape(B, N, C))


@pytest.mark.parametrize("p", [2.0, 4.0, math.inf])
def test_timm_style_host_takes_lp_norm_as_norm_layer(p):
    torch.manual_seed(3)
    gamma = 9.0
    attn = TimmStyleAttention(N_HEAD * D, num_heads=N_HEAD, qk_norm=True,
                              norm_layer=functools.partial(LpNorm, p=p, gamma_init=gamma))
    assert type(attn.q_norm) is LpNorm and attn.q_norm.head_dim == D
    x = torch.randn(2, 10, N_HEAD * D, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        q, k, v = attn.qkv_heads(x)
        want = gamma * unit(q, p) @ unit(k, p).transpose(-2, -1)
        torch.testing.assert_close(attn.logits(x), want, rtol=1e-5, atol=1e-5)
        y = (F.softmax(want, dim=-1) @ v).transpose(1, 2).reshape(2, 10, N_HEAD * D)
        torch.testing.assert_close(attn(x), attn.proj(y), rtol=1e-5, atol=1e-5)
