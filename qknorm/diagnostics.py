"""Attention and output-logit diagnostics: how sharp each layer's attention is and how large the
logits grow, measured at every eval.

What the norm's p and gamma change is the softmax's temperature and shape; these numbers measure
that directly instead of arguing it from E||x||_p. Per layer, over the rows t >= 1 of the causal
attention (row 0 attends to itself alone, so it says nothing), on fixed eval batches:
  - attn_entropy: the row's entropy -sum_j a_tj ln a_tj, in nats;
  - attn_entropy_frac: that entropy over the causal maximum ln(t + 1) (1: uniform, 0: one key);
  - attn_max_weight: the row's largest weight;
  - logit_std: the standard deviation of the row's logits over its keys j <= t (softmax ignores a
    row's shift, so the spread within a row is its temperature);
  - attn_logit_max: the largest |logit| of any row, head and batch (a maximum, not a mean):
    the attention-logit growth Wortsman et al. 2023 (arXiv 2309.14322) find behind high-lr
    divergence, the logit as the norm defines it (gamma q_hat.k_hat for l2/lp, q.k/sqrt(d) for
    none and rms); per head too, as attn_logit_max_l{layer}_h{head} (QK-Clip and the field's
    reports work per head);
and, for the Lp norms, gamma per layer and a learned p per head. Keys end in `_l{layer}`; the
keys without it are the layer means, except attn_logit_max: the largest over layers (and a
layer's the largest over its heads). Every statistic reads the logits the softmax takes: with
model.attn_softcap they are the softcapped ones, so attn_logit_max stays below the cap.

The output logits (every position of the same batches, the head's logits before the softmax):
out_logit_mean (their mean), out_logit_max (their largest |logit|) and out_z (the mean over
positions of log Z = logsumexp over the vocabulary, what z-loss keeps near 0): the output-logit
divergence is the other high-lr failure Wortsman et al. describe.

The numbers come from an extra no-grad forward of the eager model (forward hooks read the
normalized q and k), outside the training step: the step's time is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import AbstractContextManager

import torch

from qknorm.model import LanguageModel, softcap

STATS = ("attn_entropy", "attn_entropy_frac", "attn_max_weight", "logit_std", "attn_logit_max")
OUTPUT_STATS = ("out_logit_mean", "out_logit_max", "out_z")
# Reduced by their maximum, over rows, batches and layers: the largest logit is the reading (a
# mean would hide the one row whose softmax collapsed). Every other statistic is a mean.
MAXIMA = ("attn_logit_max", "out_logit_max")


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
        "attn_logit_max": inside.abs().amax(-1)[..., rows],  # the 0s above the diagonal: |x| >= 0
    }


def output_stats(logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-position statistics of output logits (..., V) -> each (...): the mean logit, the
    largest |logit| and z = logsumexp over the vocabulary (log of the softmax's normalizer)."""
    logits = logits.float()
    return {"out_logit_mean": logits.mean(-1), "out_logit_max": logits.abs().amax(-1),
            "out_z": logits.logsumexp(-1)}


class _Reduction:
    """Running reductions of per-row (or per-position) statistics over the batches: the mean of
    each, the maximum of MAXIMA. Kept on the device: one read-back, in values()."""

    def __init__(self):
        self.totals: dict[str, torch.Tensor] = {}
        self.count = 0

    def add(self, stats: dict[str, torch.Tensor]) -> None:
        for name, values in stats.items():
            values = values.double()
            if name in MAXIMA:
                top = values.amax()
                self.totals[name] = torch.maximum(self.totals[name], top) if name in self.totals else top
            else:
                self.totals[name] = self.totals.get(name, 0.0) + values.sum()
        self.count += next(iter(stats.values())).numel()

    def values(self) -> dict[str, float]:
        return {name: float(total) if name in MAXIMA else float(total) / self.count
                for name, total in self.totals.items()}


class _LayerRecorder(_Reduction):
    """A forward hook on one layer's q/k norm: reduces each statistic over the rows it sees,
    and keeps attn_logit_max per head as well (`head_max`)."""

    def __init__(self, module: torch.nn.Module, head_dim: int, cap: float | None):
        super().__init__()
        # The scale SDPA applies: the norm's own (1 for Lp, gamma folded into q) or 1/sqrt(d).
        self.scale = module.scale if module.scale is not None else head_dim ** -0.5
        self.cap = cap  # model.attn_softcap: the attention softcaps its logits before the softmax
        self.head_max: torch.Tensor | None = None
        self.handle = module.register_forward_hook(self)

    def __call__(self, module, inputs, output) -> None:
        q, k = (t.float() for t in output)
        logits = self.scale * q @ k.transpose(-2, -1)  # (B, nh, T, T)
        stats = row_stats(logits if self.cap is None else softcap(logits, self.cap))
        heads = stats["attn_logit_max"].amax(dim=(0, 2)).double()  # (B, nh, T-1) -> (nh,)
        self.head_max = heads if self.head_max is None else torch.maximum(self.head_max, heads)
        self.add(stats)

    def per_head(self) -> list[float]:
        return [] if self.head_max is None else self.head_max.tolist()


@torch.no_grad()
def attention_diagnostics(model: LanguageModel, batches: Iterable, autocast: AbstractContextManager
                          ) -> dict[str, float]:
    """The diagnostics of `model` (eager, not compiled: hooks) on `batches` of (x, y): the
    attention's per layer and over layers, the output logits', the norm's read-outs."""
    blocks = model.transformer.h
    head_dim = blocks[0].attn.n_embd // blocks[0].attn.n_head
    recorders = [_LayerRecorder(block.attn.qk_norm, head_dim, block.attn.attn_softcap)
                 for block in blocks]
    outputs = _Reduction()
    was_training = model.training
    model.eval()
    try:
        for x, y in batches:
            with autocast:
                logits, _ = model(x, y)  # with targets: the logits of every position
            outputs.add(output_stats(logits))
    finally:
        for r in recorders:
            r.handle.remove()
        model.train(was_training)
    out: dict[str, float] = {}
    per_layer = [r.values() for r in recorders]
    for name in STATS:
        values = [layer[name] for layer in per_layer]
        out[name] = max(values) if name in MAXIMA else sum(values) / len(values)
        out.update({f"{name}_l{i}": v for i, v in enumerate(values)})
    for i, r in enumerate(recorders):
        out.update({f"attn_logit_max_l{i}_h{h}": v for h, v in enumerate(r.per_head())})
    out.update(outputs.values())
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
