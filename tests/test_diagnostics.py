"""Attention and output-logit diagnostics and the log-parametrized gamma: values against hand
computation."""

from __future__ import annotations

import math
from contextlib import nullcontext

import pytest
import torch

from qknorm.config import ModelConfig, NormConfig
from qknorm.diagnostics import MAXIMA, STATS, attention_diagnostics, output_stats, row_stats
from qknorm.model import GPT
from tests.helpers.models import set_heads

LN2 = math.log(2)


def test_row_stats_equal_hand_computed_values():
    # Row 1 sees logits (0, 0): uniform over 2 keys. Row 2 sees (0, 0, ln 2): weights
    # (1/4, 1/4, 1/2). Entries above the diagonal (99) must not count.
    logits = torch.tensor([[5.0, 99.0, 99.0],
                           [0.0, 0.0, 99.0],
                           [0.0, 0.0, LN2]], dtype=torch.float64)
    s = row_stats(logits)
    torch.testing.assert_close(s["attn_entropy"], torch.tensor([LN2, 1.5 * LN2], dtype=torch.float64))
    torch.testing.assert_close(s["attn_entropy_frac"],
                               torch.tensor([1.0, 1.5 * LN2 / math.log(3)], dtype=torch.float64))
    torch.testing.assert_close(s["attn_max_weight"], torch.tensor([0.5, 0.5], dtype=torch.float64))
    # population std of (0, 0, ln 2): sqrt(2/9) ln 2
    torch.testing.assert_close(s["logit_std"],
                               torch.tensor([0.0, math.sqrt(2 / 9) * LN2], dtype=torch.float64))
    torch.testing.assert_close(s["attn_logit_max"], torch.tensor([0.0, LN2], dtype=torch.float64))


def test_largest_logit_is_the_largest_magnitude_below_the_diagonal_of_rows_t_ge_1():
    # -7 is the largest |logit| a softmax sees; 99 above the diagonal and row 0's 50 (one key,
    # nothing to collapse) are not counted
    logits = torch.tensor([[50.0, 99.0, 99.0],
                           [1.0, -2.0, 99.0],
                           [-7.0, 3.0, 6.5]], dtype=torch.float64)
    assert row_stats(logits)["attn_logit_max"].tolist() == [2.0, 7.0]


def test_output_stats_equal_hand_computed_values():
    # position 0: four equal logits, Z = 4; position 1: (ln 4, 0, 0, -ln 4), Z = 4 + 1 + 1 + 1/4
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0],
                           [math.log(4), 0.0, 0.0, -math.log(4)]], dtype=torch.float64)
    s = output_stats(logits)
    torch.testing.assert_close(s["out_z"], torch.tensor([math.log(4), math.log(6.25)]))
    torch.testing.assert_close(s["out_logit_mean"], torch.tensor([0.0, 0.0]))
    torch.testing.assert_close(s["out_logit_max"], torch.tensor([0.0, math.log(4)]))


def _model(norm: NormConfig, n_layer: int = 2, T: int = 8) -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig(n_layer=n_layer, n_head=2, n_embd=16, block_size=T), norm, 65)


def test_zero_queries_and_keys_give_uniform_attention_in_every_layer():
    """q = k = 0 (c_attn's q/k rows zeroed): every logit is 0, so row t is uniform over t + 1
    keys: entropy ln(t+1), fraction 1, largest weight 1/(t+1), logit spread 0."""
    T = 8
    model = _model(NormConfig(kind="lp", p=4.0, gamma_init=3.0), T=T)
    for block in model.transformer.h:
        with torch.no_grad():
            block.attn.c_attn.weight[:32].zero_()  # the q and k thirds of the projection
    x = torch.randint(65, (3, T), generator=torch.Generator().manual_seed(1))
    d = attention_diagnostics(model, [(x, x), (x, x)], nullcontext())
    rows = range(1, T)
    for layer in ("", "_l0", "_l1"):
        assert d[f"attn_entropy{layer}"] == pytest.approx(sum(math.log(t + 1) for t in rows) / (T - 1))
        assert d[f"attn_entropy_frac{layer}"] == pytest.approx(1.0)
        assert d[f"attn_max_weight{layer}"] == pytest.approx(sum(1 / (t + 1) for t in rows) / (T - 1))
        assert d[f"logit_std{layer}"] == 0.0
    assert d["gamma_l0"] == d["gamma_l1"] == 3.0


def test_diagnostics_read_the_logits_the_attention_uses():
    """For norm=none, logits are q.k/sqrt(d) of c_attn's q and k; the layer-0 numbers equal
    row_stats of those, computed here by hand from the block's own weights."""
    model = _model(NormConfig(kind="none"), n_layer=1).eval()
    x = torch.randint(65, (2, 8), generator=torch.Generator().manual_seed(2))
    d = attention_diagnostics(model, [(x, x)], nullcontext())
    with torch.no_grad():
        emb = model.transformer.wte(x) + model.transformer.wpe(torch.arange(8))
        attn = model.transformer.h[0].attn
        q, k, _ = attn.c_attn(model.transformer.h[0].ln_1(emb)).split(16, dim=2)
        q, k = (t.view(2, 8, 2, 8).transpose(1, 2) for t in (q, k))
        want = row_stats(q @ k.transpose(-2, -1) / math.sqrt(8))
    for name in STATS:
        reduce = torch.amax if name in MAXIMA else torch.mean
        assert d[f"{name}_l0"] == pytest.approx(reduce(want[name]).item(), rel=1e-5)
    assert "gamma_l0" not in d  # no gamma without an Lp norm


@pytest.mark.parametrize("norm, largest", [
    # q = c v, k = -c v in every position (v = ones(8); layer 0: c = 1, layer 1: c = 2), so
    # every logit of a layer is one number, its magnitude:
    (NormConfig(kind="none"), lambda c: c * c * 8 / math.sqrt(8)),  # |q.k| / sqrt(d)
    (NormConfig(kind="l2", gamma_init=3.0), lambda c: 3.0),  # gamma * |q_hat.k_hat| = gamma
    # ||v||_2^2 / ||v||_4^2 = 8 / sqrt(8): a unit-L4 pair's dot product is sqrt(d)
    (NormConfig(kind="lp", p=4.0, gamma_init=3.0), lambda c: 3.0 * math.sqrt(8)),
    # RMSNorm makes c v the vector of ones (weight 1): |q.k| / sqrt(d) = d / sqrt(d)
    (NormConfig(kind="rms"), lambda c: 8 / math.sqrt(8)),
], ids=["none", "l2", "lp4", "rms"])
def test_largest_attention_logit_of_a_hand_built_attention(norm, largest):
    """q and k set through c_attn's bias (weights zeroed): the logits are known by hand, as
    each norm defines them; the layer key is each layer's, the plain key the largest of them."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, bias=True), norm, 65)
    for c, block in zip((1.0, 2.0), model.transformer.h):
        with torch.no_grad():
            block.attn.c_attn.weight[:32].zero_()
            block.attn.c_attn.bias[:16].fill_(c)  # q
            block.attn.c_attn.bias[16:32].fill_(-c)  # k: every logit negative
    x = torch.randint(65, (2, 8), generator=torch.Generator().manual_seed(5))
    d = attention_diagnostics(model, [(x, x)], nullcontext())
    assert d["attn_logit_max_l0"] == pytest.approx(largest(1.0), rel=1e-5)
    assert d["attn_logit_max_l1"] == pytest.approx(largest(2.0), rel=1e-5)
    assert d["attn_logit_max"] == pytest.approx(max(largest(1.0), largest(2.0)), rel=1e-5)


HEAD_C = {(0, 0): 1.0, (0, 1): 3.0, (1, 0): 2.0, (1, 1): 0.5}


def test_largest_attention_logit_per_head_of_a_hand_built_attention():
    """attn_logit_max_l{i}_h{h} is each head's |logit| c * sqrt(8); the layer's is the larger
    of its two heads, the plain key the largest of all."""
    x = torch.randint(65, (2, 8), generator=torch.Generator().manual_seed(5))
    d = attention_diagnostics(set_heads(HEAD_C, -1.0), [(x, x), (x.flip(0), x)], nullcontext())
    for (i, h), c in HEAD_C.items():
        assert d[f"attn_logit_max_l{i}_h{h}"] == pytest.approx(c * math.sqrt(8), rel=1e-6)
    assert d["attn_logit_max_l0"] == pytest.approx(3.0 * math.sqrt(8), rel=1e-6)
    assert d["attn_logit_max_l1"] == pytest.approx(2.0 * math.sqrt(8), rel=1e-6)
    assert d["attn_logit_max"] == pytest.approx(3.0 * math.sqrt(8), rel=1e-6)
    assert sorted(k for k in d if k.startswith("attn_logit_max_l") and "_h" in k) == [
        "attn_logit_max_l0_h0", "attn_logit_max_l0_h1", "attn_logit_max_l1_h0",
        "attn_logit_max_l1_h1"]


def test_per_head_maximum_is_over_every_batch_and_row():
    """Head 0 of layer 0 gets the q of one position (row 3) scaled by 1, 5, 2 in three batches
    (a hook on c_attn): its reading is that row's 5 sqrt(8) in the second batch, not the last
    batch's nor a mean over rows; head 1 keeps its 3 sqrt(8)."""
    model = set_heads(HEAD_C, -1.0)
    factors = iter((1.0, 5.0, 2.0))

    def scale_head0_q(module, inputs, output):
        output = output.clone()
        output[:, 3, :8] *= next(factors)
        return output

    model.transformer.h[0].attn.c_attn.register_forward_hook(scale_head0_q)
    x = torch.randint(65, (1, 8), generator=torch.Generator().manual_seed(5))
    d = attention_diagnostics(model, [(x, x)] * 3, nullcontext())
    assert d["attn_logit_max_l0_h0"] == pytest.approx(5 * math.sqrt(8), rel=1e-6)
    assert d["attn_logit_max_l0_h1"] == pytest.approx(3 * math.sqrt(8), rel=1e-6)


def test_softcapped_attention_reads_the_capped_logits():
    """With model.attn_softcap = 4 every reading is the logit the softmax takes:
    4 tanh(c sqrt(8) / 4) per head, below the cap however large c sqrt(8) is."""
    x = torch.randint(65, (2, 8), generator=torch.Generator().manual_seed(5))
    d = attention_diagnostics(set_heads(HEAD_C, -1.0, attn_softcap=4.0), [(x, x)], nullcontext())
    for (i, h), c in HEAD_C.items():
        want = 4.0 * math.tanh(c * math.sqrt(8) / 4.0)
        assert d[f"attn_logit_max_l{i}_h{h}"] == pytest.approx(want, rel=1e-6)
    assert d["attn_logit_max"] == pytest.approx(4.0 * math.tanh(3.0 * math.sqrt(8) / 4.0), rel=1e-6)
    assert d["attn_logit_max"] < 4.0


def test_output_logit_diagnostics_read_every_position():
    """A zero head (tied to the embedding) gives logits 0: z = ln 65 exactly. A trained-looking
    model's numbers equal output_stats over all positions of its own logits, not the last."""
    model = _model(NormConfig(kind="l2"))
    x = torch.randint(65, (3, 8), generator=torch.Generator().manual_seed(6))
    d = attention_diagnostics(model, [(x, x), (x.flip(0), x)], nullcontext())
    with torch.no_grad():
        logits = torch.cat([model(x, x)[0], model(x.flip(0), x)[0]])
    assert d["out_z"] == pytest.approx(logits.logsumexp(-1).mean().item(), rel=1e-6)
    assert d["out_logit_mean"] == pytest.approx(logits.mean().item(), rel=1e-5, abs=1e-7)
    assert d["out_logit_max"] == pytest.approx(logits.abs().max().item(), rel=1e-6)
    assert d["out_z"] != pytest.approx(logits[:, -1].logsumexp(-1).mean().item(), rel=1e-6)
    with torch.no_grad():
        model.lm_head.weight.zero_()
    d = attention_diagnostics(model, [(x, x)], nullcontext())
    assert (d["out_z"], d["out_logit_mean"], d["out_logit_max"]) == (pytest.approx(math.log(65)),
                                                                     0.0, 0.0)


def test_learned_p_is_read_out_per_layer_and_head():
    model = _model(NormConfig(kind="lp", p=3.0, p_learnable=True))
    with torch.no_grad():
        model.lp_norms()[1].p_theta[1] += 1.0  # layer 1, head 1 moves up
    x = torch.randint(65, (1, 8), generator=torch.Generator().manual_seed(3))
    d = attention_diagnostics(model, [(x, x)], nullcontext())
    assert d["p_l0_h0"] == d["p_l0_h1"] == d["p_l1_h0"] == pytest.approx(3.0)
    # p = 1 + softplus(theta), theta0 = 2 + ln(1 - e^-2) so that p starts at 3; theta0 + 1:
    assert d["p_l1_h1"] == pytest.approx(1 + math.log1p(math.exp(3.0) * (1 - math.exp(-2.0))))
    assert "p_l0_h0" not in attention_diagnostics(_model(NormConfig(kind="lp", p=3.0)), [(x, x)],
                                                  nullcontext())


def test_diagnostics_leave_training_mode_and_hooks_as_they_were():
    model = _model(NormConfig(kind="l2"))
    x = torch.randint(65, (1, 8), generator=torch.Generator().manual_seed(3))
    attention_diagnostics(model, [(x, x)], nullcontext())
    assert model.training
    assert all(not b.attn.qk_norm._forward_hooks for b in model.transformer.h)


def test_log_gamma_starts_at_exactly_the_linear_gamma_and_moves_by_factors():
    for init in ("qknorm", "calibrated", 7.3):
        linear = _model(NormConfig(kind="lp", p=3.5, gamma_init=init))
        log = _model(NormConfig(kind="lp", p=3.5, gamma_init=init, gamma_param="log"))
        for a, b in zip(linear.lp_norms(), log.lp_norms()):
            assert torch.equal(a.gamma, b.gamma)
    # one Adam step of size lr on theta multiplies gamma by exp(+-lr): a relative move
    model = _model(NormConfig(kind="lp", p=2.0, gamma_init=12.0, gamma_param="log"))
    opt = model.configure_optimizer(0.1, 0.0, (0.9, 0.99), "cpu")
    x = torch.randint(65, (2, 8), generator=torch.Generator().manual_seed(4))
    model(x, x)[1].backward()
    opt.step()
    ratio = model.lp_norms()[0].gamma.item() / 12.0
    assert ratio == pytest.approx(math.exp(0.1), rel=1e-4) or ratio == pytest.approx(math.exp(-0.1), rel=1e-4)
