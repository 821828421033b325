"""Whether a run's T x T tensors fit the device's memory, checked before anything is built.

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
    """Raise UserError when the T x T tensors of a run on `device` (`compiled`: under
    torch.compile) exceed `available` bytes (default: what `available_bytes(device)` reads):
    one line naming the value, the sizes and the fix."""
    free = available_bytes(device) if available is None else available
    if free is None:
        return
    m, t = cfg.model, cfg.train
    square = m.block_size ** 2 * FLOAT_BYTES
    masks = m.n_layer * square
    per_batch = t.batch_size * m.n_head * square  # one (B, nh, T, T) float32 tensor
    where = f"this {device.type} has {free / GB:.1f} GB available"
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
