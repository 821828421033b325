"""Train one GPT: `train(cfg, out_dir)` is the loop (the command line is qknorm/cli.py).

nanoGPT-style: `setup` builds everything a run holds into one `Run`; the loop then reads top to
bottom -- LR as a pure function of the step, an eval over fixed batches every eval_interval,
forward/backward/clip/step in plain sight. It writes metrics.jsonl at every eval and final.json
(atomically) at the end, whatever the end was. `python -m qknorm.train` still runs the command.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import pickle
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from qknorm import memory, rundir, tracking
from qknorm.arch import build_model
from qknorm.config import Config, OptimizerConfig
from qknorm.data import Splits, WindowSampler, load_splits
from qknorm.diagnostics import attention_diagnostics
from qknorm.effective import BOOKKEEPING, flatten
from qknorm.errors import RunDiverged, RunPruned, UserError, first_line
from qknorm.hooks import EvalHook
from qknorm.model import LanguageModel, z_loss
from qknorm.ticker import Ticker
from qknorm.tokenizer import bits_per, text_per_token

log = logging.getLogger(__name__)

# final.json's `error` of a run stopped by Ctrl-C (SIGINT); its status is `failed` (docs/runs.md)
INTERRUPTED = "interrupted (Ctrl-C)"
EVAL_SEED = 1337  # eval batches are the same for every seed and p, so runs compare on equal data


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


def resolve_compile(setting: bool | str, device: torch.device) -> bool:
    """compile=auto compiles where it was measured faster: CUDA (about 2x the eager step on the
    paper model), not CPU (no gain at our model sizes). true/false are taken as given."""
    if setting == "auto":
        return device.type == "cuda"
    return bool(setting)


def fixed_batches(sampler: WindowSampler, n: int, batch_size: int, device: torch.device):
    eval_rng = torch.Generator().manual_seed(EVAL_SEED)
    return [tuple(t.to(device) for t in sampler.sample(batch_size, eval_rng)) for _ in range(n)]


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
    # The same, from the second eval interval a process trains on: the first one carries
    # warm-up and torch.compile's compilation, which would hide the steady speed.
    steady_time_s: float = 0.0
    steady_tokens: int = 0
    diagnostics: dict[str, float] = field(default_factory=dict)  # the last eval's (diagnostics.py)

    # nan until an eval has timed an interval: a run stopped before its first one (Ctrl-C) has
    # tokens but no time yet, and final.json must still be written
    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.train_time_s if self.tokens and self.train_time_s else math.nan

    @property
    def steady_tokens_per_s(self) -> float:
        return (self.steady_tokens / self.steady_time_s if self.steady_tokens and self.steady_time_s
                else math.nan)

    def add_interval(self, seconds: float, tokens: int, steady: bool) -> None:
        """Account for the training steps between two evals."""
        self.train_time_s += seconds
        if steady:
            self.steady_time_s += seconds
            self.steady_tokens += tokens


@dataclass
class Run:
    """Everything one run holds: built by `setup`, advanced by the loop, saved in checkpoints."""

    cfg: Config
    device: torch.device
    splits: Splits
    raw_model: LanguageModel  # GPT or AnGPT (model.arch): parameters, state_dict, the gamma and p read-outs
    compiled: torch.nn.Module  # what forward runs through: torch.compile(raw_model), or raw_model
    optimizer: torch.optim.Optimizer
    autocast: AbstractContextManager
    batch_rng: torch.Generator  # draws the training batches; checkpoints save it as batch_rng
    eval_batches: dict[str, list]
    # First non-finite training step (-1: none yet), on the device: the loop never waits for it.
    bad_step: torch.Tensor
    # {"char": c, "byte": b}: the text one val target token covers on average (text_per_token)
    val_text: dict[str, float]
    progress: Progress = field(default_factory=Progress)
    start: float = 0.0  # perf_counter() at step 0 (earlier by a resumed run's elapsed time)
    out_dir: Path | None = None
    on_eval: EvalHook | None = None
    tracker: tracking.RunTracker | None = None  # mirrors metrics.jsonl and final.json (tracker=...)

    def in_bits(self, name: str, val_loss: float) -> dict[str, float]:
        """{name_bpc, name_bpb}: a validation loss in bits per character and per byte."""
        return {f"{name}_bpc": bits_per(val_loss, self.val_text["char"]),
                f"{name}_bpb": bits_per(val_loss, self.val_text["byte"])}


def setup(cfg: Config, splits: Splits | None = None) -> Run:
    """The model, optimizer, batches and generators of a run, seeded and in the loop's order.

    The bench builds its variants here too, so it times exactly what training runs. `splits`
    lets several runs share one loaded corpus.
    """
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    memory.check_fits(cfg, device, resolve_compile(cfg.compile, device))  # before any allocation
    if splits is None:
        splits = load_splits(cfg.data, cfg.model.block_size)  # user errors surface before any file
    raw_model = build_model(cfg.model, cfg.norm, len(splits.tokenizer)).to(device)
    o, t = cfg.optimizer, cfg.train
    val_batches = fixed_batches(splits.val, t.eval_iters, t.batch_size, device)
    return Run(
        cfg=cfg, device=device, splits=splits, raw_model=raw_model,
        compiled=(compile_model(raw_model) if resolve_compile(cfg.compile, device)
                  else raw_model),
        optimizer=raw_model.configure_optimizer(o.lr, o.weight_decay, (o.beta1, o.beta2),
                                                device.type),
        autocast=(torch.autocast(device.type, dtype=torch.bfloat16) if cfg.dtype == "bfloat16"
                  else nullcontext()),
        batch_rng=torch.Generator().manual_seed(cfg.seed),
        eval_batches={"train": fixed_batches(splits.train, t.eval_iters, t.batch_size, device),
                      "val": val_batches},
        bad_step=torch.full((), -1, dtype=torch.long, device=device),
        val_text=text_per_token(splits.tokenizer, val_batches),
    )


def compile_model(model: LanguageModel) -> torch.nn.Module:
    # A private inductor cache: a shared /tmp one can be deleted under a running job.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                          str(Path.home() / ".cache" / "qknorm" / "inductor"))
    return torch.compile(model)


def train(cfg: Config, out_dir: Path, on_eval: EvalHook | None = None) -> dict[str, Any]:
    """Run the training loop; return final.json's fields. Raises RunDiverged / RunPruned."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.train.max_iters == 0:  # allowed on purpose: the untrained model's losses
        log.info("train.max_iters=0: one eval of the initialized model, no training step")
    run = setup(cfg)
    run.out_dir, run.on_eval = out_dir, on_eval
    checkpoint = _resume_state(cfg, out_dir) if cfg.train.resume else None  # before any file
    final: dict[str, Any] = {
        "n_params": run.raw_model.n_params(), "seed": cfg.seed, "fold": cfg.data.fold,
        "git_sha": rundir.git_sha(), "torch_version": torch.__version__,
        "device": run.device.type, "dtype": cfg.dtype,
        "compiled": run.compiled is not run.raw_model, "threads": torch.get_num_threads(),
    }
    if checkpoint:
        run.progress = Progress(**checkpoint["progress"])
    run.start = time.perf_counter() - (checkpoint["elapsed_s"] if checkpoint else 0.0)
    status, error = rundir.FAILED, None
    try:
        first_step = _restore(run, checkpoint) if checkpoint else 0
        run.tracker = tracking.open_run(cfg, out_dir)  # after _restore: it mirrors metrics.jsonl
        _loop(run, first_step, resumed=checkpoint is not None)
        status = rundir.COMPLETED
    except RunDiverged as e:
        status, error = rundir.DIVERGED, str(e)
        final["diverged_step"] = e.step
        raise
    except RunPruned as e:
        status, error = rundir.PRUNED, str(e)
        raise
    except KeyboardInterrupt:  # Ctrl-C: the record says the run did not finish, and why
        error = INTERRUPTED
        raise
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        p = run.progress
        final.update({
            "status": status, "val_loss": p.val_loss, "best_val_loss": p.best_val_loss,
            **run.in_bits("val", p.val_loss), **run.in_bits("best_val", p.best_val_loss),
            "train_loss": p.train_loss, "steps": p.step,
            "wall_time_s": time.perf_counter() - run.start, "tokens_per_s": p.tokens_per_s,
            "steady_tokens_per_s": p.steady_tokens_per_s, "p": run.raw_model.p_mean(),
            "gamma": run.raw_model.gamma_mean(), **p.diagnostics,
        })
        if error is not None:
            final["error"] = error
        rundir.write_final(out_dir, final)
        _close_tracker(run, final)
    return final


def _close_tracker(run: Run, final: dict[str, Any]) -> None:
    """The tracker's last write; its failure is logged, never taken for the run's."""
    if run.tracker is None:
        return
    try:
        run.tracker.close(final)
    except Exception as e:
        log.warning("tracker %s was not closed: %s", run.cfg.tracker.kind, first_line(e))


def _loop(run: Run, first_step: int, resumed: bool) -> None:
    t = run.cfg.train
    tokens_per_step = t.batch_size * run.cfg.model.block_size
    bar = tqdm(total=t.max_iters, initial=first_step, disable=None, desc="train", unit="it",
               dynamic_ncols=True)
    # Not a terminal (tqdm draws nothing): a progress line in the log instead (qknorm/ticker.py)
    ticker = Ticker(first_step, t.max_iters, tokens_per_step,
                    run.cfg.tracker.progress_s if bar.disable else 0, log.info)
    progress = run.progress
    tick, tokens_at_tick, intervals = time.perf_counter(), progress.tokens, 0
    for step in range(first_step, t.max_iters + 1):
        lr = lr_at(step, run.cfg.optimizer, t.max_iters)
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        evaluated_before_kill = resumed and step == first_step
        if (step % t.eval_interval == 0 or step == t.max_iters) and not evaluated_before_kill:
            if step > first_step:
                progress.add_interval(time.perf_counter() - tick, progress.tokens - tokens_at_tick,
                                      steady=intervals > 0)
                intervals += 1
            _evaluate(run, step, bar)
            tick, tokens_at_tick = time.perf_counter(), progress.tokens
        if step == t.max_iters:
            break
        x, y = (b.to(run.device, non_blocking=True)
                for b in run.splits.train.sample(t.batch_size, run.batch_rng))
        loss = train_step(run, x, y)
        run.bad_step = torch.where((run.bad_step < 0) & ~torch.isfinite(loss.detach()), step,
                                   run.bad_step)
        progress.step = step + 1
        progress.tokens += tokens_per_step
        bar.update(1)
        if ticker.due():
            ticker.tick(step + 1, loss.item())
    bar.close()


def train_step(run: Run, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One forward/backward/clip/step (and anGPT's weight bound); returns the loss it stepped on,
    cross-entropy plus train.z_loss's term when set, on the device (no host sync)."""
    with run.autocast:
        logits, loss = run.compiled(x, y)
        if run.cfg.train.z_loss:
            loss = loss + run.cfg.train.z_loss * z_loss(logits)
    loss.backward()
    if run.cfg.optimizer.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(run.raw_model.parameters(), run.cfg.optimizer.grad_clip)
    run.optimizer.step()
    run.raw_model.project_weights_()  # anGPT's row bound; nothing for GPT
    run.optimizer.zero_grad(set_to_none=True)
    return loss


def _evaluate(run: Run, step: int, bar: tqdm) -> None:
    """Losses on the fixed batches -> metrics.jsonl, checkpoint, the eval hook (may prune)."""
    first_bad = int(run.bad_step.item())
    if first_bad >= 0:
        raise RunDiverged(first_bad, math.nan)
    train_loss = estimate_loss(run.compiled, run.eval_batches["train"], run.autocast)
    val_loss = estimate_loss(run.compiled, run.eval_batches["val"], run.autocast)
    if not (math.isfinite(val_loss) and math.isfinite(train_loss)):
        raise RunDiverged(step, val_loss if not math.isfinite(val_loss) else train_loss)
    progress = run.progress
    progress.val_loss, progress.train_loss = val_loss, train_loss
    progress.best_val_loss = min(progress.best_val_loss, val_loss)
    if run.cfg.train.diag_batches:
        # The eager model (hooks), on the first val batches: outside the timed training steps.
        progress.diagnostics = attention_diagnostics(
            run.raw_model, run.eval_batches["val"][:run.cfg.train.diag_batches], run.autocast)
    row = {
        "step": step, "train_loss": train_loss, "val_loss": val_loss, **run.in_bits("val", val_loss),
        "lr": run.optimizer.param_groups[0]["lr"], "elapsed_s": time.perf_counter() - run.start,
        "tokens_per_s": progress.tokens_per_s,
        "steady_tokens_per_s": progress.steady_tokens_per_s,
        "gamma_mean": run.raw_model.gamma_mean(),
        "p_mean": run.raw_model.p_mean(),
        **progress.diagnostics,
    }
    rundir.append_metrics(run.out_dir, row)
    if run.tracker is not None:
        run.tracker.log(row)
    bar.set_postfix(val=f"{val_loss:.4f}", tok_s=f"{progress.tokens_per_s:.0f}")
    log.info("step %d: train %.4f val %.4f", step, train_loss, val_loss)
    if run.cfg.train.save_checkpoint:
        _save_checkpoint(run)
    if run.on_eval is not None:
        run.on_eval(step, row)


# ---------------------------------------------------------------------------------------------
# checkpoints: everything a killed run needs to continue bitwise where it stopped

# Keys that may differ between a run and its resumption (they do not change what is computed),
# besides the bookkeeping keys (optuna.*, tracker.*: qknorm.effective.BOOKKEEPING)
RESUME_FREE_KEYS = ("train.resume", "train.save_checkpoint", "train.diag_batches", "threads",
                    "compile", "model.attention", "name")


def _save_checkpoint(run: Run) -> None:
    rundir.save_checkpoint(run.out_dir, {
        "model": run.raw_model.state_dict(), "optimizer": run.optimizer.state_dict(),
        "step": run.progress.step, "config": OmegaConf.to_container(OmegaConf.structured(run.cfg)),
        "best_val_loss": run.progress.best_val_loss,
        "progress": dataclasses.asdict(run.progress),
        "elapsed_s": time.perf_counter() - run.start,
        "batch_rng": run.batch_rng.get_state(), "torch_rng": torch.get_rng_state(),  # dropout
    })


def _resume_state(cfg: Config, out_dir: Path) -> dict[str, Any]:
    """The run dir's checkpoint, checked: it exists, is plain data, and matches this config."""
    path = out_dir / rundir.CKPT_FILE
    if not path.exists():
        raise UserError(f"train.resume=true but there is no checkpoint at {path}; pass the "
                        "interrupted run's dir as hydra.run.dir=<dir> (it must have run with "
                        "train.save_checkpoint=true), or drop train.resume")
    try:
        state = rundir.load_checkpoint(out_dir)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as e:
        raise UserError(f"{path} was not loaded: torch.load(weights_only=True) refused it "
                        f"({first_line(e)}); delete it and train from scratch") from e
    # A key the checkpoint lacks (added to the schema after it was written, e.g. model.arch) is
    # read as its default, which is what that run computed with.
    defaults = flatten(OmegaConf.to_container(OmegaConf.structured(Config)))
    saved = {**defaults, **flatten(state["config"])}
    now = flatten(OmegaConf.to_container(OmegaConf.structured(cfg)))
    changed = [f"{k}={saved.get(k)!r}->{now.get(k)!r}" for k in sorted(set(saved) | set(now))
               if k not in RESUME_FREE_KEYS and not k.startswith(BOOKKEEPING)
               and saved.get(k) != now.get(k)]
    if changed:
        raise UserError(f"train.resume=true but the config differs from the checkpoint's "
                        f"({', '.join(changed)}); resume with the interrupted run's overrides")
    return state


def _restore(run: Run, state: dict[str, Any]) -> int:
    """Load the checkpoint into model, optimizer and RNGs; drop metrics rows logged after it."""
    run.raw_model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.batch_rng.set_state(state["batch_rng"])
    torch.set_rng_state(state["torch_rng"])
    step = int(state["step"])
    rows = [r for r in rundir.read_metrics(run.out_dir) if r["step"] <= step]  # no duplicate evals
    rundir.atomic_write_text(run.out_dir / rundir.METRICS_FILE,
                             "".join(json.dumps(r) + "\n" for r in rows))
    log.info("resumed from %s at step %d", run.out_dir / rundir.CKPT_FILE, step)
    return step


if __name__ == "__main__":
    # `python -m qknorm.train` is the command of qknorm/cli.py: run that module as the program.
    # (Importing it from here would make this module depend on the one above it.)
    import runpy

    runpy.run_module("qknorm.cli", run_name="__main__")
