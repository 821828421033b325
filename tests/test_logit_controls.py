"""Logit controls from outside QK-norm (issue 46): Gemma 2's attention-logit softcap
(model.attn_softcap) and PaLM's z-loss (train.z_loss), each against a hand computation, and
training with both unset unchanged bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir

from qknorm.config import CONF_DIR, ModelConfig, NormConfig, register_configs, to_config
from qknorm.model import GPT, explicit_attention, softcap, use_explicit_attention, z_loss
from qknorm.train import estimate_loss, setup, train_step
from tests.helpers.models import set_heads

register_configs()


def compose_config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return to_config(compose("config", overrides=list(overrides)))


# ---------------------------------------------------------------------------------------------
# the softcap

def test_softcap_is_cap_times_tanh_of_logit_over_cap():
    logits = torch.tensor([0.0, 1.0, -30.0, 200.0], dtype=torch.float64)
    want = [50.0 * math.tanh(v / 50.0) for v in logits.tolist()]
    assert softcap(logits, 50.0).tolist() == pytest.approx(want, rel=1e-15)
    assert softcap(logits, 50.0)[3].item() < 50.0  # 200 is capped below 50


def test_softcapped_attention_equals_the_hand_computation():
    """One head of dim 1, q = (1, 2, 3), k = (4, 5, 6): logit (t, j) = scale q_t k_j, capped at
    c = 5, masked to j <= t, softmax, times v = (1, 10, 100). Written out with math."""
    q = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).view(1, 1, 3, 1)
    k = torch.tensor([4.0, 5.0, 6.0], dtype=torch.float64).view(1, 1, 3, 1)
    v = torch.tensor([1.0, 10.0, 100.0], dtype=torch.float64).view(1, 1, 3, 1)
    mask = torch.full((3, 3), -math.inf, dtype=torch.float64).triu(1)
    scale, cap = 0.5, 5.0
    want = []
    for t in range(3):
        capped = [cap * math.tanh(scale * q[0, 0, t, 0].item() * k[0, 0, j, 0].item() / cap)
                  for j in range(t + 1)]
        weights = [math.exp(c) for c in capped]
        want.append(sum(w * v[0, 0, j, 0].item() for j, w in enumerate(weights)) / sum(weights))
    got = explicit_attention(q, k, v, 0.0, scale, mask, cap=cap).flatten().tolist()
    assert got == pytest.approx(want, rel=1e-6)  # the softmax runs in float32
    assert want[0] == 1.0  # row 0 sees itself alone: the mask survived the cap
    # row 2 uncapped: logits 6, 7.5, 9; capped: 5 tanh(1.2) = 4.17, 4.53, 4.73, flatter
    e = [math.exp(6.0), math.exp(7.5), math.exp(9.0)]
    uncapped = explicit_attention(q, k, v, 0.0, scale, mask).flatten().tolist()
    assert uncapped[2] == pytest.approx((e[0] + 10 * e[1] + 100 * e[2]) / sum(e), rel=1e-6)
    assert got[2] < uncapped[2] - 30


@pytest.mark.parametrize("setting", ["auto", "sdpa", "explicit"])
def test_a_softcap_takes_the_explicit_path_whatever_model_attention_says(setting):
    cpu = torch.device("cpu")
    assert use_explicit_attention(setting, cpu, cap=50.0) is True
    assert use_explicit_attention(setting, cpu, cap=None) is (setting == "explicit")


def _count_sdpa(monkeypatch) -> list[int]:
    calls = []
    sdpa = F.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    return calls


def test_gpt_with_a_softcap_equals_its_hand_written_attention_and_without_keeps_sdpa(monkeypatch):
    """model.attn_softcap=2 (norm=none, so logits are q.k / sqrt(8)): layer 0's attention output
    equals softmax(2 tanh(q.k / (2 sqrt(8))) + mask) v written here, and SDPA is never called;
    unset, every layer runs through SDPA as before."""
    calls = _count_sdpa(monkeypatch)
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8)
    torch.manual_seed(0)
    model = GPT(ModelConfig(**{**vars(cfg), "attn_softcap": 2.0}), NormConfig(kind="none"), 65)
    for p in model.parameters():  # logits large enough for the cap to matter
        p.data.mul_(20.0)
    x = torch.randint(65, (2, 8), generator=torch.Generator().manual_seed(1))
    attn = model.transformer.h[0].attn
    seen = {}
    attn.c_proj.register_forward_hook(lambda m, i, o: seen.setdefault("y", i[0]))
    with torch.no_grad():
        model(x)
        h = model.transformer.h[0].ln_1(model.transformer.wte(x) + model.transformer.wpe(torch.arange(8)))
        q, k, v = (t.view(2, 8, 2, 8).transpose(1, 2) for t in attn.c_attn(h).split(16, dim=2))
        logits = (q @ k.transpose(-2, -1)).double() / math.sqrt(8)
        capped = 2.0 * np.tanh(logits.numpy() / 2.0)
        capped[..., np.triu_indices(8, 1)[0], np.triu_indices(8, 1)[1]] = -np.inf
        weights = np.exp(capped - capped.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        want = (weights @ v.double().numpy()).transpose(0, 2, 1, 3).reshape(2, 8, 16)
    assert np.abs(logits.numpy()).max() > 10  # the cap bites
    np.testing.assert_allclose(seen["y"].numpy(), want, rtol=1e-4, atol=1e-5)
    assert calls == []
    torch.manual_seed(0)
    GPT(cfg, NormConfig(kind="none"), 65)(x)
    assert len(calls) == 2  # one SDPA call per layer


# ---------------------------------------------------------------------------------------------
# the z-loss

def test_z_loss_is_the_mean_squared_log_normalizer():
    # position 0: three equal logits, Z = 3; position 1: (ln 2, 0, 0), Z = 2 + 1 + 1 = 4
    logits = torch.tensor([[[0.0, 0.0, 0.0], [math.log(2), 0.0, 0.0]]])
    assert z_loss(logits).item() == pytest.approx((math.log(3) ** 2 + math.log(4) ** 2) / 2,
                                                  rel=1e-6)
    assert z_loss(torch.zeros(2, 5, 1)).item() == 0.0  # one class: Z = e^0 = 1, log Z = 0


def _tiny(*overrides: str):
    return setup(compose_config("model=tiny", "train.batch_size=4", "optimizer.lr=1e-2",
                                "device=cpu", *overrides))


def test_train_step_steps_on_cross_entropy_plus_z_loss_and_the_evals_stay_cross_entropy():
    """train.z_loss=0.5: the loss train_step returns is the model's cross-entropy plus 0.5 times
    mean log(Z)^2 of its logits (numpy's), the parameters move as a step on that total written
    here, and estimate_loss still reads the plain cross-entropy."""
    run, plain = _tiny("train.z_loss=0.5"), _tiny()
    x, y = run.splits.train.sample(4, run.batch_rng)
    with torch.no_grad():
        logits, ce = run.raw_model(x, y)
    lse = np.log(np.exp(logits.double().numpy()).sum(-1))
    want = ce.item() + 0.5 * float(np.mean(lse ** 2))
    # the same step by hand on `plain` (same seed, so the same weights): CE + 0.5 z
    logits, ce = plain.raw_model(x, y)
    (ce + 0.5 * logits.logsumexp(-1).square().mean()).backward()
    torch.nn.utils.clip_grad_norm_(plain.raw_model.parameters(), plain.cfg.optimizer.grad_clip)
    plain.optimizer.step()
    assert train_step(run, x, y).item() == pytest.approx(want, rel=1e-6)
    for (name, a), b in zip(run.raw_model.named_parameters(), plain.raw_model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    with torch.no_grad():
        ce_after = run.raw_model(x, y)[1].item()
    assert estimate_loss(run.raw_model, [(x, y)], run.autocast) == pytest.approx(ce_after, rel=1e-6)


# ---------------------------------------------------------------------------------------------
# unset: training as before

# Produced by running this very computation on the code of commit 80de9ea (before issue 46's
# controls existed; torch 2.13.0+cpu): model=tiny, batch 4, lr 1e-2, seed 0, three train_steps,
# each step's loss. Bit-identical on the host that made them, not on every host: CPU kernels
# differ with the SIMD width (an AVX-only AMD EPYC gives norm=none's step 2 as 4.06476593, 1.2e-7
# relative below). So they are compared to 1e-6 relative, which still catches a change to the
# forward, the loss or the step: train.z_loss=1e-4 moves every step by 4.2e-4 relative,
# model.attn_softcap=50 norm=lp step 2 by 1.6e-4 (measured on the same host).
GOLDEN_STEPS = {
    "none": [4.178247928619385, 4.0647664070129395, 3.822866678237915],
    "lp": [4.177374362945557, 4.082694053649902, 3.827192544937134],
}


@pytest.mark.parametrize("norm", GOLDEN_STEPS)
def test_training_with_the_controls_unset_steps_as_before(norm):
    run = _tiny(f"norm={norm}")
    assert run.cfg.model.attn_softcap is None and run.cfg.train.z_loss == 0.0
    losses = []
    for _ in range(3):
        x, y = run.splits.train.sample(4, run.batch_rng)
        losses.append(train_step(run, x, y).item())
    assert losses == pytest.approx(GOLDEN_STEPS[norm], rel=1e-6, abs=0)


# ---------------------------------------------------------------------------------------------
# QK-Clip

def test_qk_clip_scales_the_heads_above_tau_to_tau_and_leaves_the_others():
    """tau = 100. Layer 0: head 0's logits 50 sqrt(8) = 141.4 pass it, head 1's 10 sqrt(8) do
    not; layer 1: -50 sqrt(8) (signed, as K2's S_max: a large negative logit is not clipped).
    After the step's forward and project_weights_: head 0's q and k rows are scaled by
    sqrt(100 / 141.4) each, so its logits are 100; every other row is as it was."""
    c = {(0, 0): 50.0, (0, 1): 10.0, (1, 0): -50.0, (1, 1): -50.0}
    model = set_heads(c, 1.0, 2.0, qk_clip=100.0)
    before = [b.attn.c_attn.bias.clone() for b in model.transformer.h]
    x = torch.randint(65, (2, 8), generator=torch.Generator().manual_seed(3))
    model(x, x)  # a training forward records each head's largest logit
    s = 50.0 * math.sqrt(8)
    torch.testing.assert_close(model.transformer.h[0].attn.max_logit,
                               torch.tensor([s, 10.0 * math.sqrt(8)]))
    model.project_weights_()
    factor = math.sqrt(100.0 / s)
    bias0 = model.transformer.h[0].attn.c_attn.bias
    assert bias0[:8].tolist() == pytest.approx([50.0 * factor] * 8, rel=1e-6)  # q, head 0
    assert bias0[16:24].tolist() == pytest.approx([factor] * 8, rel=1e-6)  # k, head 0
    assert torch.equal(bias0[8:16], before[0][8:16]) and torch.equal(bias0[24:], before[0][24:])
    assert torch.equal(model.transformer.h[1].attn.c_attn.bias, before[1])
    model(x, x)
    torch.testing.assert_close(model.transformer.h[0].attn.max_logit,
                               torch.tensor([100.0, 10.0 * math.sqrt(8)]))


def test_qk_clip_reads_the_causal_logits_only():
    """Position 7's key scaled by 10 and its query zeroed (a hook on c_attn): only rows t < 7
    would see that key, above the diagonal, where the mask hides it; the recorded maximum stays
    c sqrt(8), not 10 c sqrt(8)."""
    model = set_heads({(0, 0): 50.0, (0, 1): 10.0, (1, 0): 1.0, (1, 1): 1.0}, 1.0, 2.0, qk_clip=100.0)

    def hide_a_large_key(module, inputs, output):
        output = output.clone()
        output[:, 7, 16:32] *= 10.0  # k at position 7
        output[:, 7, :16] = 0.0  # q at position 7
        return output

    model.transformer.h[0].attn.c_attn.register_forward_hook(hide_a_large_key)
    x = torch.randint(65, (2, 8), generator=torch.Generator().manual_seed(3))
    model(x, x)
    torch.testing.assert_close(model.transformer.h[0].attn.max_logit,
                               torch.tensor([50.0, 10.0]) * math.sqrt(8))


def test_train_step_clips_after_the_optimizer_step():
    """arm=qk_clip with tau far below the initial logits (0.01) and a negligible lr: after one
    train_step, a training forward on the same batch finds every head's largest logit at tau."""
    run = _tiny("arm=qk_clip", "model.qk_clip=0.01", "optimizer.lr=1e-12", "optimizer.min_lr=0")
    x, y = run.splits.train.sample(4, run.batch_rng)
    train_step(run, x, y)
    run.raw_model(x, y)
    for block in run.raw_model.transformer.h:
        torch.testing.assert_close(block.attn.max_logit, torch.full((2,), 0.01), rtol=1e-4,
                                   atol=0)


def test_without_qk_clip_the_model_records_nothing_and_steps_as_before():
    model = set_heads({(0, 0): 50.0, (0, 1): 10.0, (1, 0): 1.0, (1, 1): 1.0}, 1.0, 2.0, qk_clip=100.0)
    plain = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, bias=True),
                NormConfig(kind="none"), 65)
    plain.load_state_dict(model.state_dict())
    x = torch.randint(65, (2, 8), generator=torch.Generator().manual_seed(3))
    plain(x, x)
    plain.project_weights_()
    assert not hasattr(plain.transformer.h[0].attn, "max_logit")
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(),
                                                  model.state_dict().values()))
