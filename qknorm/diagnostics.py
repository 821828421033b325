"""Attention diagnostics: how sharp each layer's attention is, measured at every eval.

What the norm's p and gamma change is the softmax's temperature and shape; these numbers measure
that directly instead of arguing it from E||x||_p. Per layer, over the rows t >= 1 of the causal
attention (row 0 attends to itself alone, so it says nothing), on fixed eval batches:
  - attn_entropy: the row's entropy -sum_j a_tj ln a_tj, in nats;
  - attn_entropy_frac: that entropy over the causal maximum ln(t + 1) (1: uniform, 0: one key);
  - attn_max_weight: the row's largest weight;
  - logit_std: the standard deviation of the row's logits over its keys j <= t (softmax ignores a
    row's shift, so the spread within a row is its temperature);
and, for the Lp norms, gamma per layer and a learned p per head. Keys end in `_l{layer}`; the
keys without it are the layer means.

The numbers come from an extra no-grad forward of the eager model (forward hooks read the
normalized q and k), outside the training step: the step's time is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import AbstractContextManager

import torch

from qknorm.model import LanguageModel

STATS = ("attn_entropy", "attn_entropy_frac", "attn_max_weight", "logit_std")


def row_stats(logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-row statistics of causal attention logits (..., T, T) -> each (..., T - 1), rows t >= 1.

    Entries above the diagonal (j > t) are ignored whatever they hold.
    """
    T = logits.size(-1)
    causal = torch.ones(T, T, dtype=torch.bool, device=logits.device).tril()
    weights = logits.masked_fill(~causal, -math.inf).softmax(-1)
    entropy = -torch.special.xlogy(weights, weights).sum(-1)  # 0 * ln 0 = 0 above the diagonal
    keys = torch.arange(1, T + 1, dtype=logits.dtype, device=logits.device)  # t + 1 keys in row t
    inside = logits.masked_fill(~causal, 0.0)
    mean = inside.sum(-1) / keys
    var = ((inside - mean.unsqueeze(-1)).square() * causal).sum(-1) / keys
    rows = slice(1, None)
    return {
        "attn_entropy": entropy[..., rows],
        "attn_entropy_frac": entropy[..., rows] / keys[rows].log(),
        "attn_max_weight": weights.amax(-1)[..., rows],
        "logit_std": var[..., rows].sqrt(),
    }


class _LayerRecorder:
    """A forward hook on one layer's q/k norm: sums each statistic over the rows it sees."""

    def __init__(self, module: torch.nn.Module, head_dim: int):
        self.sums: dict[str, torch.Tensor | float] = dict.fromkeys(STATS, 0.0)
        self.rows = 0
        # The scale SDPA applies: the norm's own (1 for Lp, gamma folded into q) or 1/sqrt(d).
        self.scale = module.scale if module.scale is not None else head_dim ** -0.5
        self.handle = module.register_forward_hook(self)

    def __call__(self, module, inputs, output) -> None:
        q, k = (t.float() for t in output)
        stats = row_stats(self.scale * q @ k.transpose(-2, -1))
        for name, values in stats.items():  # summed on the device: one read-back, in means()
            self.sums[name] = self.sums[name] + values.double().sum()
        self.rows += stats["attn_entropy"].numel()

    def means(self) -> dict[str, float]:
        return {name: float(total) / self.rows for name, total in self.sums.items()}


@torch.no_grad()
def attention_diagnostics(model: LanguageModel, batches: Iterable, autocast: AbstractContextManager
                          ) -> dict[str, float]:
    """The diagnostics of `model` (eager, not compiled: hooks) on `batches` of (x, y)."""
    blocks = model.transformer.h
    head_dim = blocks[0].attn.n_embd // blocks[0].attn.n_head
    recorders = [_LayerRecorder(block.attn.qk_norm, head_dim) for block in blocks]
    was_training = model.training
    model.eval()
    try:
        for x, _ in batches:
            with autocast:
                model(x)  # targets=None still runs every layer's attention
    finally:
        for r in recorders:
            r.handle.remove()
        model.train(was_training)
    out: dict[str, float] = {}
    per_layer = [r.means() for r in recorders]
    for name in STATS:
        values = [layer[name] for layer in per_layer]
        out[name] = sum(values) / len(values)
        out.update({f"{name}_l{i}": v for i, v in enumerate(values)})
    out.update(readouts(model))
    return out


@torch.no_grad()
def readouts(model: LanguageModel) -> dict[str, float]:
    """The norm's own parameters per layer: gamma_l{i} (its mean over heads), and with
    norm.p_learnable p_l{i}_h{h} per head, which is where a learned p goes."""
    out: dict[str, float] = {}
    for i, block in enumerate(model.transformer.h):
        norm = block.attn.qk_norm
        if getattr(norm, "gamma", None) is not None:
            out[f"gamma_l{i}"] = norm.gamma.float().mean().item()
        if getattr(norm, "p_learnable", False):
            out.update({f"p_l{i}_h{h}": p for h, p in enumerate(norm.p.flatten().tolist())})
    return out
