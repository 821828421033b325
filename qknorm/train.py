"""Train one GPT: `python -m qknorm.train [overrides]`, or `-m` for a multirun.

`train(cfg, out_dir)` is the loop, nanoGPT-style: LR as a pure function of the step, fixed eval
batches, forward/backward/clip/step in plain sight. It writes metrics.jsonl at every eval and
final.json (atomically) at the end, whatever the end was. `main` is the thin Hydra entry point.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from qknorm import rundir
from qknorm.config import Config, OptimizerConfig, register_configs, to_config
from qknorm.data import Splits, WindowSampler, load_splits
from qknorm.errors import RunDiverged, RunPruned, UserError
from qknorm.model import GPT

log = logging.getLogger(__name__)

EVAL_SEED = 1337  # eval batches are the same for every seed and p, so runs compare on equal data

# on_eval(step, metrics_row) is called after every eval; it may raise RunPruned to stop the run.
EvalHook = Callable[[int, dict[str, Any]], None]


def lr_at(step: int, cfg: OptimizerConfig, max_iters: int) -> float:
    """Linear warmup to lr, then cosine decay to min_lr at max_iters."""
    if step < cfg.warmup_iters:
        return cfg.lr * (step + 1) / (cfg.warmup_iters + 1)
    if step >= max_iters:
        return cfg.min_lr
    ratio = (step - cfg.warmup_iters) / max(1, max_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda but no CUDA device is available; use device=cpu or device=auto")
    return torch.device(name)


def fixed_batches(sampler: WindowSampler, n: int, batch_size: int, device: torch.device):
    g = torch.Generator().manual_seed(EVAL_SEED)
    return [tuple(t.to(device) for t in sampler.sample(batch_size, g)) for _ in range(n)]


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, batches, autocast) -> float:
    model.eval()
    total = torch.zeros(())
    for x, y in batches:
        with autocast:
            _, loss = model(x, y)
        total += loss.float().cpu()
    model.train()
    return total.item() / len(batches)


@dataclass
class Progress:
    """What the loop knows so far: enough to write final.json however the run ends."""

    step: int = 0
    val_loss: float = math.nan
    best_val_loss: float = math.inf
    train_loss: float = math.nan
    train_time_s: float = 0.0  # time in forward/backward/step only (evals excluded)
    tokens: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.train_time_s if self.tokens else math.nan


def train(cfg: Config, out_dir: Path, on_eval: EvalHook | None = None) -> dict[str, Any]:
    """Run the training loop; return final.json's fields. Raises RunDiverged / RunPruned."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    splits = load_splits(cfg.data, cfg.model.block_size)  # user errors surface before any file

    model = GPT(cfg.model, cfg.norm, len(splits.vocab)).to(device)
    final: dict[str, Any] = {
        "n_params": model.n_params(), "seed": cfg.seed, "fold": cfg.data.fold,
        "git_sha": rundir.git_sha(), "torch_version": torch.__version__, "device": device.type,
        "dtype": cfg.dtype, "threads": torch.get_num_threads(),
    }
    progress = Progress()
    start = time.perf_counter()
    status, error = "failed", None
    try:
        _loop(cfg, model, splits, device, out_dir, progress, on_eval, start)
        status = "completed"
    except RunDiverged as e:
        status, error = "diverged", str(e)
        final["diverged_step"] = e.step
        raise
    except RunPruned as e:
        status, error = "pruned", str(e)
        raise
    except BaseException as e:  # KeyboardInterrupt too: the record says the run did not finish
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        final.update({
            "status": status, "val_loss": progress.val_loss,
            "best_val_loss": progress.best_val_loss, "train_loss": progress.train_loss,
            "steps": progress.step, "wall_time_s": time.perf_counter() - start,
            "tokens_per_s": progress.tokens_per_s, "p": model.p_mean(),
            "gamma": model.gamma_mean(),
        })
        if error is not None:
            final["error"] = error
        rundir.write_final(out_dir, final)
    return final


def train_step(step_model: torch.nn.Module, model: GPT, optimizer: torch.optim.Optimizer,
               x: torch.Tensor, y: torch.Tensor, autocast, grad_clip: float) -> torch.Tensor:
    """One forward/backward/clip/step; returns the loss on the device (no host sync)."""
    with autocast:
        _, loss = step_model(x, y)
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def _loop(cfg: Config, model: GPT, splits: Splits, device: torch.device, out_dir: Path,
          progress: Progress, on_eval: EvalHook | None, start: float) -> None:
    t, o = cfg.train, cfg.optimizer
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if cfg.dtype == "bfloat16"
                else nullcontext())
    optimizer = model.configure_optimizer(o.lr, o.weight_decay, (o.beta1, o.beta2), device.type)
    step_model = _maybe_compile(model, cfg.compile)
    eval_batches = {
        "train": fixed_batches(splits.train, t.eval_iters, t.batch_size, device),
        "val": fixed_batches(splits.val, t.eval_iters, t.batch_size, device),
    }
    g = torch.Generator().manual_seed(cfg.seed)
    # First non-finite step, tracked on the device so the loop never waits for the loss.
    bad_step = torch.full((), -1, dtype=torch.long, device=device)
    tokens_per_step = t.batch_size * cfg.model.block_size

    bar = tqdm(total=t.max_iters, disable=None, desc="train", unit="it", dynamic_ncols=True)
    tick = time.perf_counter()
    for step in range(t.max_iters + 1):
        lr = lr_at(step, o, t.max_iters)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if step % t.eval_interval == 0 or step == t.max_iters:
            progress.train_time_s += time.perf_counter() - tick
            _evaluate(step, step_model, model, eval_batches, autocast, bad_step, out_dir, progress,
                      optimizer, cfg, start, on_eval, bar)
            tick = time.perf_counter()
        if step == t.max_iters:
            break
        x, y = (b.to(device, non_blocking=True) for b in splits.train.sample(t.batch_size, g))
        loss = train_step(step_model, model, optimizer, x, y, autocast, o.grad_clip)
        bad_step = torch.where((bad_step < 0) & ~torch.isfinite(loss.detach()), step, bad_step)
        progress.step = step + 1
        progress.tokens += tokens_per_step
        bar.update(1)
    bar.close()


def _evaluate(step, step_model, model, eval_batches, autocast, bad_step, out_dir, progress,
              optimizer, cfg: Config, start, on_eval, bar) -> None:
    first_bad = int(bad_step.item())
    if first_bad >= 0:
        raise RunDiverged(first_bad, math.nan)
    train_loss = estimate_loss(step_model, eval_batches["train"], autocast)
    val_loss = estimate_loss(step_model, eval_batches["val"], autocast)
    if not (math.isfinite(val_loss) and math.isfinite(train_loss)):
        raise RunDiverged(step, val_loss if not math.isfinite(val_loss) else train_loss)
    progress.val_loss, progress.train_loss = val_loss, train_loss
    progress.best_val_loss = min(progress.best_val_loss, val_loss)
    row = {
        "step": step, "train_loss": train_loss, "val_loss": val_loss,
        "lr": optimizer.param_groups[0]["lr"], "elapsed_s": time.perf_counter() - start,
        "tokens_per_s": progress.tokens_per_s, "gamma_mean": model.gamma_mean(),
        "p_mean": model.p_mean(),
    }
    rundir.append_metrics(out_dir, row)
    bar.set_postfix(val=f"{val_loss:.4f}", tok_s=f"{progress.tokens_per_s:.0f}")
    log.info("step %d: train %.4f val %.4f", step, train_loss, val_loss)
    if cfg.train.save_checkpoint:
        rundir.save_checkpoint(out_dir, {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
            "config": OmegaConf.to_container(OmegaConf.structured(cfg)),
            "best_val_loss": progress.best_val_loss,
        })
    if on_eval is not None:
        on_eval(step, row)


def _maybe_compile(model: GPT, enabled: bool) -> torch.nn.Module:
    if not enabled:
        return model
    # A private inductor cache: a shared /tmp one can be deleted under a running job.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                          str(Path.home() / ".cache" / "qknorm" / "inductor"))
    return torch.compile(model)


# ---------------------------------------------------------------------------------------------
# command line

register_configs()


def _log_trace_to_run_log(out_dir: Path) -> None:
    """The full traceback goes to the run's log file; the console gets one line."""
    with open(out_dir / f"{HydraConfig.get().job.name}.log", "a") as f:
        f.write(traceback.format_exc())


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    single_run = HydraConfig.get().mode == RunMode.RUN
    try:
        final = train(to_config(cfg), out_dir)
    except (UserError, RunDiverged) as e:
        if not single_run:
            raise  # a multirun records the failed job and goes on
        _log_trace_to_run_log(out_dir)
        kind = "error" if isinstance(e, UserError) else "diverged"
        print(f"{kind}: {e}", file=sys.stderr)
        sys.exit(2 if isinstance(e, UserError) else 1)
    print(f"{final['status']}: best_val_loss={final['best_val_loss']:.4f} "
          f"steps={final['steps']} wall_time_s={final['wall_time_s']:.1f} -> {out_dir}")
    return final["best_val_loss"]


if __name__ == "__main__":
    main()
