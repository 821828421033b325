"""A nanoGPT-shaped GPT whose attention takes its query-key normalization from config.

Learned positions, pre-LN blocks, GELU MLP, weight tying, no biases by default -- as nanoGPT's
model.py, with one change: CausalSelfAttention normalizes q and k through the layer
`qknorm.norms.build_qk_norm` builds from config (qknorm/nn.py) and hands SDPA the scale that
norm asks for.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from qknorm.config import ModelConfig, NormConfig
from qknorm.nn import LpQKNorm
from qknorm.norms import build_qk_norm


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
                     scale: float | None) -> torch.Tensor:
    """Fused causal SDPA. Under bf16 autocast on CPU it runs in float32: there the bf16 flash-
    attention backward is several times slower than the float32 one, which cancels all that bf16
    gains in the matmuls around it (docs/performance.md, "Speed notes"). On CUDA it stays bf16."""
    if q.device.type == "cpu" and v.dtype == torch.bfloat16:
        with torch.autocast("cpu", enabled=False):
            y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                               dropout_p=dropout_p, is_causal=True, scale=scale)
        return y.to(v.dtype)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True,
                                          scale=scale)


def softcap(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """Gemma 2's logit softcap, cap * tanh(logits / cap): about the identity for |logits| well
    below cap, never beyond ±cap. (PyTorch has it only as a flex_attention score_mod, which
    needs torch.compile; the two ops here are the same arithmetic in eager and compiled runs.)"""
    return cap * torch.tanh(logits / cap)


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
                       scale: float | None, mask: torch.Tensor,
                       cap: float | None = None) -> torch.Tensor:
    """softmax(scale * q k^T + mask) v written out, as nanoGPT's non-flash path: under
    torch.compile on CPU the mask and softmax fuse, and that beat the flash kernel at short blocks.

    `mask` is additive (0 on and below the diagonal, -inf above), at least (T, T); baddbmm adds
    it and applies the scale inside the q k^T matmul. The softmax runs in float32 under autocast.
    `cap` (model.attn_softcap) softcaps scale * q k^T first: the mask is added after the tanh,
    which would turn its -inf into -cap.
    """
    B, nh, T, hs = q.shape
    scale = 1.0 / math.sqrt(hs) if scale is None else scale
    q2, kt = q.reshape(B * nh, T, hs), k.reshape(B * nh, T, hs).transpose(1, 2)
    if cap is None:
        att = torch.baddbmm(mask[:T, :T].to(q.dtype), q2, kt, alpha=scale)  # (B*nh, T, T)
    else:
        att = softcap(torch.bmm(q2, kt) * scale, cap) + mask[:T, :T].to(q.dtype)
    att = F.dropout(F.softmax(att, dim=-1, dtype=torch.float32), dropout_p, training=dropout_p > 0)
    return torch.bmm(att.to(v.dtype), v.reshape(B * nh, T, hs)).view(B, nh, T, hs)


def use_explicit_attention(setting: str, device: torch.device, cap: float | None = None) -> bool:
    """model.attention=auto takes the explicit path where it measured faster: on CPU under
    torch.compile, which fuses its mask and softmax (2% of a model=cpu step); in eager mode SDPA
    was as fast in float32 and faster in bf16 (docs/performance.md, "Speed notes"). A softcap
    (`cap`) needs the logits themselves, which SDPA never hands out: the explicit path always."""
    if cap is not None:
        return True
    if setting == "auto":
        return device.type == "cpu" and torch.compiler.is_compiling()
    return setting == "explicit"


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
           scale: float | None, setting: str, mask: torch.Tensor,
           cap: float | None = None) -> torch.Tensor:
    """Causal attention of (B, nh, T, hs) heads by the path model.attention picks (the one
    choice both architectures make): the fused SDPA kernel or the explicit ops; `cap`
    (model.attn_softcap) softcaps the logits, on the explicit path."""
    if use_explicit_attention(setting, q.device, cap):
        return explicit_attention(q, k, v, dropout_p, scale, mask, cap)
    return causal_attention(q, k, v, dropout_p, scale)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, norm: NormConfig):
        super().__init__()
        self.n_head, self.n_embd, self.dropout = cfg.n_head, cfg.n_embd, cfg.dropout
        head_dim = cfg.n_embd // cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.qk_norm = build_qk_norm(norm, cfg.n_head, head_dim, cfg.block_size)
        self.attention = cfg.attention
        self.attn_softcap = cfg.attn_softcap  # read by the attention and the diagnostics
        # Additive causal mask for the explicit path; not saved (checkpoints stay as they were).
        mask = torch.full((cfg.block_size, cfg.block_size), -math.inf).triu(1)
        self.register_buffer("causal_mask", mask, persistent=False)
        self.qk_clip = cfg.qk_clip
        if self.qk_clip is not None:  # each head's largest logit in the last training forward
            self.register_buffer("max_logit", torch.zeros(cfg.n_head), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q, k = self.qk_norm(q, k)
        if self.qk_clip is not None and self.training:
            self._record_max_logit(q, k)
        dropout = self.dropout if self.training else 0.0
        y = attend(q, k, v, dropout, self.qk_norm.scale, self.attention, self.causal_mask,
                   self.attn_softcap)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): re-assemble the heads
        return self.resid_dropout(self.c_proj(y))

    @torch.no_grad()
    def _record_max_logit(self, q: torch.Tensor, k: torch.Tensor) -> None:
        """max_logit <- each head's largest logit scale * q.k over the batch's causal pairs
        (signed, as Kimi K2's S_max): one more q k^T, outside autograd, that SDPA never shows."""
        hs = q.size(-1)
        scale = self.qk_norm.scale if self.qk_norm.scale is not None else hs ** -0.5
        logits = scale * q.float() @ k.float().transpose(-2, -1)  # (B, nh, T, T)
        T = logits.size(-1)
        logits = logits + self.causal_mask[:T, :T]  # -inf above the diagonal: never the max
        self.max_logit.copy_(logits.amax(dim=(0, 2, 3)))

    @torch.no_grad()
    def qk_clip_(self) -> None:
        """Kimi K2's QK-Clip (arXiv 2507.20534), after an optimizer step: a head whose largest
        logit S passed tau = model.qk_clip gets its W_q and W_k rows (and biases) scaled by
        sqrt(tau / S), so that the same input gives it logits S * tau / S = tau at most; the
        other heads are left alone. Nothing without model.qk_clip."""
        if self.qk_clip is None:
            return
        gamma = torch.where(self.max_logit > self.qk_clip, self.qk_clip / self.max_logit, 1.0)
        factor = gamma.sqrt().repeat_interleave(self.n_embd // self.n_head)  # (C,): per row
        for param in (self.c_attn.weight, self.c_attn.bias):
            if param is not None:  # rows: q (0..C), k (C..2C), v (2C..3C, never clipped)
                rows = param[:2 * self.n_embd].view(2, self.n_embd, -1)
                rows.mul_(factor.to(param.dtype).view(1, -1, 1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, norm: NormConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg, norm)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class LanguageModel(nn.Module):
    """What the loop, the diagnostics and sampling read from a model, whatever its architecture
    (GPT here, AnGPT in qknorm/angpt.py): `transformer.h[i].attn.qk_norm`, the gamma and p
    read-outs, the optimizer, the step after `optimizer.step()`, generation."""

    block_size: int

    def lp_norms(self) -> list[LpQKNorm]:
        return [b.attn.qk_norm for b in self.transformer.h if isinstance(b.attn.qk_norm, LpQKNorm)]

    @torch.no_grad()
    def gamma_mean(self) -> float | None:
        """Mean gamma over layers (and heads); None when the norm has no gamma."""
        norms = self.lp_norms()
        return torch.stack([n.gamma.float().mean() for n in norms]).mean().item() if norms else None

    @torch.no_grad()
    def p_mean(self) -> float | None:
        """Mean p over layers and heads (the fixed p unless norm.p_learnable); None without Lp."""
        norms = self.lp_norms()
        if not norms:
            return None
        return float(torch.stack([torch.as_tensor(n.p, dtype=torch.float32).mean() for n in norms]).mean())

    def configure_optimizer(self, lr: float, weight_decay: float, betas: tuple[float, float],
                            device_type: str) -> torch.optim.AdamW:
        """AdamW; Linear and Embedding weights decay, the rest (biases, norms, gamma, p) do not.

        Fused (one kernel over all parameters) on CUDA and CPU: on CPU it measured 2.8x faster
        than the default per-parameter loop, 4% of a model=cpu step (docs/performance.md, "Speed notes").
        """
        decayed = {id(m.weight) for m in self.modules() if isinstance(m, (nn.Linear, nn.Embedding))}
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if id(p) in decayed], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) not in decayed], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=device_type in ("cuda", "cpu"))

    def project_weights_(self) -> None:
        """Called after every optimizer step. GPT applies QK-Clip there (model.qk_clip; its
        weights are otherwise free, weight decay keeps them small); AnGPT bounds its rows."""

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature  # (B, vocab)
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, 1, generator=generator)), dim=1)
        return idx


class GPT(LanguageModel):
    def __init__(self, cfg: ModelConfig, norm: NormConfig, vocab_size: int):
        super().__init__()
        self.block_size = cfg.block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg, norm) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd, bias=cfg.bias),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections.
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @torch.no_grad()
    def project_weights_(self) -> None:
        for block in self.transformer.h:
            block.attn.qk_clip_()

    def n_params(self) -> int:
        """Parameters without the position embedding (nanoGPT's count)."""
        return sum(p.numel() for p in self.parameters()) - self.transformer.wpe.weight.numel()

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.size()
        if T > self.block_size:
            raise ValueError(f"sequence of length {T} exceeds block_size {self.block_size}")
        pos = torch.arange(T, dtype=torch.long, device=idx.device)  # (T,)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None  # (B, 1, vocab): only the last position
        logits = self.lm_head(x)  # (B, T, vocab)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
        return logits, loss


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """PaLM's z-loss term (arXiv 2204.02311): the mean over positions of log(Z)^2, Z = sum over
    the vocabulary of exp(logit), in float32. It pulls log Z to 0, so that the output softmax's
    normalizer stays near 1 and its logits cannot drift together (Wortsman et al.'s output-logit
    divergence); the cross-entropy alone cannot see such a drift."""
    return logits.float().logsumexp(-1).square().mean()
