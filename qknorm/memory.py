"""Whether a run's weights and its T x T tensors fit the device's memory, checked before
anything is built.

The weights grow with width and depth: each layer holds at least 12 n_embd^2 of them (the
attention's 4 n_embd^2, the MLP's 8; anGPT's SwiGLU holds more), and training keeps each one's
gradient and AdamW's two moments beside it, all float32 (autocast keeps the weights float32).
model.n_embd=1000000 asks 48 TB of them: without the check, the allocator's traceback.

Every other tensor of a run grows with the block size T; three grow with T^2, and they are what
ends a long-context run with an allocator's traceback (model.block_size=20000 asks 25.6 GB per
diagnostics tensor of experiment=smoke): each layer's additive causal mask, the attention
matrices of the explicit attention path, and the attention diagnostics. The diagnostics are not
chunked instead: one (T, T) head matrix at T = 100000 is already 40 GB, so a bound is needed
anyway, and a bound names the key that fixes it (train.diag_batches=0).

The estimate is a lower bound of those tensors only (float32, 4 bytes an entry), so it refuses
only what cannot fit; a run it lets through may still fail on the rest.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from qknorm.config import Config
from qknorm.errors import UserError

FLOAT_BYTES = 4  # the diagnostics and the masks are float32 whatever config.dtype is
# (B, nh, T, T) float32 tensors alive at once in one layer's diagnostics (the logits, then
# row_stats' masked copies, softmax, entropy terms and deviations): the process's peak resident
# memory grew by 5.2 of them, measured with T=2048, B=4, nh=2, norm=lp and norm=none.
DIAG_TENSORS = 6
# (B, nh, T, T) tensors a training step on the explicit path keeps per layer for backward
# (the logits and the softmax's weights): at least these two.
EXPLICIT_TENSORS = 2
GB = 1e9
# Weights every block holds, in units of n_embd^2: attention's q, k, v and output (4), the MLP's
# two 4x-wide maps (8). A lower bound for both architectures (qknorm/model.py, qknorm/angpt.py).
BLOCK_WEIGHTS = 12
# float32 copies of each weight while training: the weight, its gradient, AdamW's exp_avg and
# exp_avg_sq (train.max_iters=0 only evaluates: the weights alone)
TRAINING_COPIES = 4


def available_bytes(device: torch.device) -> int | None:
    """Memory a run can still take: CUDA's free memory on that GPU, Linux's MemAvailable on
    the CPU; None where neither can be read (then nothing is refused)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _explicit(cfg: Config, device: torch.device, compiled: bool) -> bool:
    """Whether training takes the explicit attention path (qknorm.model.use_explicit_attention,
    decided here before there is a model): a softcap, attention=explicit, or auto compiled on CPU."""
    m = cfg.model
    if m.attn_softcap is not None or m.attention == "explicit":
        return True
    return m.attention == "auto" and device.type == "cpu" and compiled


def check_fits(cfg: Config, device: torch.device, compiled: bool,
               available: int | None = None) -> None:
    """Raise UserError when the weights or the T x T tensors of a run on `device` (`compiled`: under
    torch.compile) exceed `available` bytes (default: what `available_bytes(device)` reads):
    one line naming the value, the sizes and the fix."""
    free = available_bytes(device) if available is None else available
    if free is None:
        return
    m, t = cfg.model, cfg.train
    where = f"this {device.type} has {free / GB:.1f} GB available"
    copies = TRAINING_COPIES if t.max_iters else 1
    weights = BLOCK_WEIGHTS * m.n_layer * m.n_embd ** 2 * FLOAT_BYTES * copies
    if weights > free:  # first: the model is built before any T x T tensor
        held = ", each with its gradient and AdamW's two moments" if copies > 1 else ""
        raise UserError(f"model.n_embd={m.n_embd} model.n_layer={m.n_layer} does not fit: the "
                        f"model's weights need about {weights / GB:.1f} GB (at least "
                        f"{BLOCK_WEIGHTS} x model.n_layer x model.n_embd^2 float32{held}) and "
                        f"{where}; lower model.n_embd or model.n_layer")
    square = m.block_size ** 2 * FLOAT_BYTES
    masks = m.n_layer * square
    per_batch = t.batch_size * m.n_head * square  # one (B, nh, T, T) float32 tensor
    parts = [("the model's causal masks", masks,
              f"model.n_layer={m.n_layer} x block_size^2 float32", "lower model.block_size")]
    if _explicit(cfg, device, compiled):
        parts.append(("training on the explicit attention path", masks
                      + EXPLICIT_TENSORS * m.n_layer * per_batch,
                      f"at least {EXPLICIT_TENSORS} x model.n_layer={m.n_layer} x train.batch_size="
                      f"{t.batch_size} x model.n_head={m.n_head} x block_size^2 float32, with the masks",
                      "lower model.block_size or train.batch_size"))
    if t.diag_batches:
        parts.append(("the attention diagnostics", masks + DIAG_TENSORS * per_batch,
                      f"{DIAG_TENSORS} x train.batch_size={t.batch_size} x model.n_head={m.n_head} "
                      "x block_size^2 float32, with the masks",
                      "set train.diag_batches=0 (no attention diagnostics), or lower "
                      "model.block_size or train.batch_size"))
    for what, need, how, fix in parts:
        if need > free:
            raise UserError(f"model.block_size={m.block_size} does not fit: {what} need about "
                            f"{need / GB:.1f} GB ({how}) and {where}; {fix}")
