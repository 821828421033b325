"""GPT properties: causality, loss at init, overfitting one batch, plain attention = textbook."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from qknorm.config import ModelConfig, NormConfig
from qknorm.model import GPT

TINY = ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16)
NORMS = {
    "none": NormConfig(kind="none"),
    "l2": NormConfig(kind="l2", p=2.0),
    "lp4": NormConfig(kind="lp", p=4.0),
    "lp_inf": NormConfig(kind="lp", p=math.inf),
    "lp_calibrated": NormConfig(kind="lp", p=1.0, gamma_init="calibrated"),
    "lp_learned_p": NormConfig(kind="lp", p=3.0, p_learnable=True, gamma_shape="head"),
    "rms": NormConfig(kind="rms"),
}


def make_model(norm: NormConfig, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(TINY, norm, vocab_size=65)


@pytest.mark.parametrize("norm", NORMS.values(), ids=NORMS.keys())
def test_causality(norm):
    model = make_model(norm).eval()
    idx = torch.randint(65, (2, 16), generator=torch.Generator().manual_seed(1))
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 65
    with torch.no_grad():
        a, _ = model(idx, idx)  # passing targets returns logits at every position
        b, _ = model(changed, changed)
    torch.testing.assert_close(a[:, :9], b[:, :9], rtol=0, atol=0)
    assert not torch.allclose(a[:, 9:], b[:, 9:])


@pytest.mark.parametrize("norm", NORMS.values(), ids=NORMS.keys())
def test_loss_at_init_is_ln_vocab(norm):
    model = make_model(norm)
    g = torch.Generator().manual_seed(2)
    idx, targets = torch.randint(65, (2, 8, 16), generator=g)  # targets independent of inputs
    _, loss = model(idx, targets)
    assert loss.item() == pytest.approx(math.log(65), abs=0.1)


@pytest.mark.parametrize("name", ["none", "lp4", "rms"])
def test_overfits_one_batch(name):
    model = make_model(NORMS[name])
    idx = torch.randint(65, (4, 17), generator=torch.Generator().manual_seed(3))
    x, y = idx[:, :-1], idx[:, 1:]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1


def textbook_attention(attn, x: torch.Tensor, logits) -> torch.Tensor:
    """softmax(logits(q, k)) v with an explicit causal mask, through attn's own projections."""
    B, T, C = x.shape
    q, k, v = attn.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, 2, C // 2).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
    scores = logits(q, k).masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -math.inf)
    y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)  # (B, T, C)
    return attn.c_proj(y)


def test_norm_none_equals_textbook_attention():
    attn = make_model(NORMS["none"]).eval().transformer.h[0].attn
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = textbook_attention(attn, x, lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(16))
        torch.testing.assert_close(attn(x), want, rtol=1e-5, atol=1e-6)


def test_lp_attention_equals_gamma_times_normalized_dot_product():
    attn = make_model(NormConfig(kind="lp", p=3.0, gamma_init=5.0)).eval().transformer.h[0].attn
    x = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(5))

    def lp_logits(q, k):  # gamma * q_hat . k_hat, no 1/sqrt(d)
        q = q / torch.linalg.vector_norm(q, 3.0, dim=-1, keepdim=True)
        k = k / torch.linalg.vector_norm(k, 3.0, dim=-1, keepdim=True)
        return 5.0 * (q @ k.transpose(-2, -1))

    with torch.no_grad():
        torch.testing.assert_close(attn(x), textbook_attention(attn, x, lp_logits), rtol=1e-5, atol=1e-6)


def test_weight_tying_and_param_count():
    model = make_model(NORMS["l2"])
    assert model.lm_head.weight is model.transformer.wte.weight
    # 2 blocks x (attn 4*32*32 + mlp 8*32*32 + 2 LN weights + gamma) + ln_f + wte 65*32
    expected = 2 * (4 * 32 * 32 + 8 * 32 * 32 + 2 * 32 + 1) + 32 + 65 * 32
    assert model.n_params() == expected


def test_gamma_and_p_do_not_decay():
    model = make_model(NORMS["lp_learned_p"])
    opt = model.configure_optimizer(1e-3, 0.1, (0.9, 0.99), "cpu")
    decayed = {id(p) for p in opt.param_groups[0]["params"]}
    for norm in model.lp_norms():
        assert id(norm.gamma) not in decayed and id(norm.p_theta) not in decayed
    assert id(model.lm_head.weight) in decayed


def test_bf16_autocast_on_cpu_runs_attention_in_float32_and_stays_close_to_float32(monkeypatch):
    """Under autocast the matmuls run in bf16 but SDPA gets float32 inputs (its CPU bf16
    backward is slow), so outputs and gradients stay within bf16 rounding of float32."""
    from qknorm.model import causal_attention

    seen, real_sdpa = [], F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append((q.dtype, k.dtype, v.dtype))
        return real_sdpa(q, k, v, **kw)

    model = make_model(NORMS["lp4"])
    idx = torch.randint(0, 65, (4, 16), generator=torch.Generator().manual_seed(7))
    _, loss32 = model(idx, idx)
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss16 = model(idx, idx)
        y = causal_attention(*(torch.randn(1, 2, 16, 8).bfloat16() for _ in range(3)), 0.0, 1.0)
    assert seen == [(torch.float32,) * 3] * (TINY.n_layer + 1)
    assert logits.dtype == torch.bfloat16 and y.dtype == torch.bfloat16
    assert abs(loss16.item() - loss32.item()) < 0.02
    loss16.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("norm", NORMS.values(), ids=NORMS.keys())
def test_explicit_attention_equals_sdpa_forward_and_gradients(norm):
    """model.attention=explicit computes what SDPA computes: loss within 1e-6, every gradient
    within rtol 1e-4 / atol 1e-6 (float32; only the order of the sums differs)."""
    idx = torch.randint(65, (3, 16), generator=torch.Generator().manual_seed(8))
    losses, grads = [], []
    for attention in ("sdpa", "explicit"):
        torch.manual_seed(0)
        model = GPT(dataclasses.replace(TINY, attention=attention), norm, vocab_size=65)
        _, loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert losses[1] == pytest.approx(losses[0], abs=1e-6)
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_explicit_attention_under_bf16_autocast_stays_close_to_float32():
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(TINY, attention="explicit"), NORMS["lp4"], vocab_size=65)
    idx = torch.randint(0, 65, (4, 16), generator=torch.Generator().manual_seed(7))
    _, loss32 = model(idx, idx)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss16 = model(idx, idx)
    assert logits.dtype == torch.bfloat16
    assert abs(loss16.item() - loss32.item()) < 0.02


@pytest.mark.parametrize("setting, device, compiling, explicit", [
    ("auto", "cpu", False, False), ("auto", "cpu", True, True), ("auto", "cuda", True, False),
    ("explicit", "cuda", False, True), ("sdpa", "cpu", True, False)])
def test_auto_attention_is_explicit_only_when_compiled_on_cpu(monkeypatch, setting, device,
                                                               compiling, explicit):
    from qknorm.model import use_explicit_attention

    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
    assert use_explicit_attention(setting, torch.device(device)) is explicit


def test_optimizer_is_fused_on_cpu_and_steps_as_the_per_parameter_loop():
    """Fused AdamW (the CPU default) against torch's for-loop AdamW, same groups: after 3 steps
    the parameters agree within rtol 1e-5, atol 1e-6 (Adam divides by sqrt(v), so rounding
    differences in tiny gradients grow a little at every step: 4e-9 after one, 4e-7 after three)."""
    models = [make_model(NORMS["lp4"]) for _ in range(2)]
    fused = models[0].configure_optimizer(1e-2, 0.1, (0.9, 0.99), "cpu")
    assert fused.defaults["fused"] is True
    params = dict(models[1].named_parameters())
    loop = torch.optim.AdamW([{"params": [params[n] for n in _names(models[0], g["params"])],
                               "weight_decay": g["weight_decay"]} for g in fused.param_groups],
                             lr=1e-2, betas=(0.9, 0.99), foreach=False)
    assert [g["fused"] for g in loop.param_groups] == [None, None]
    idx = torch.randint(65, (4, 17), generator=torch.Generator().manual_seed(9))
    for model, opt in zip(models, (fused, loop)):
        for _ in range(3):
            _, loss = model(idx[:, :-1], idx[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad()
    for (name, a), b in zip(models[0].named_parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def _names(model: GPT, params) -> list[str]:
    ids = {id(p) for p in params}
    return [n for n, p in model.named_parameters() if id(p) in ids]


# GPT's logits pinned (docs/angpt.md: model.arch=gpt is "unchanged bit for bit"). Produced by
# running this very computation on the code of commit b9ba86b (torch 2.13.0+cpu, x86 AVX2):
# seed 0, TINY, vocab 65, built through the model.arch table, cast to float64, eval, the batch
# below; printed with repr(). float64 leaves only summation-order noise (~1e-16) between CPUs;
# any change to GPT's arithmetic (an eps, an order of ops, a scale) moves these far more.
GOLDEN_GPT = {
    "none": ([-0.030544593203964975, 0.01135534967690278, -0.11734972602377944,
              0.020155188429015713, -0.0846183484797515, 0.11502486834067595],
             7.642414895190502, 3.7771642208099365),
    "lp4": ([0.008565965047115248, 0.04244982076868206, -0.16324827728846314,
             0.034686288449410976, -0.11202428386656585, 0.1341974495559187],
            6.613845944960559, 3.7880518436431885),
}


@pytest.mark.parametrize("name", GOLDEN_GPT)
def test_gpt_logits_match_the_golden_values(name):
    from qknorm.arch import build_model

    torch.manual_seed(0)
    model = build_model(TINY, NORMS[name], 65)
    assert type(model) is GPT
    model = model.double().eval()
    idx = torch.randint(65, (2, 16), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        logits, loss = model(idx, idx)
    row, total, want_loss = GOLDEN_GPT[name]
    assert logits[1, -1, :6].tolist() == pytest.approx(row, rel=1e-12, abs=1e-15)
    assert logits.sum().item() == pytest.approx(total, rel=1e-12)
    assert loss.item() == want_loss  # cross-entropy in float32: exact
