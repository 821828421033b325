"""Train one GPT: `python -m qknorm.train [overrides]`, or `-m` for a multirun.

`train(cfg, out_dir)` is the loop, nanoGPT-style: LR as a pure function of the step, fixed eval
batches, forward/backward/clip/step in plain sight. It writes metrics.jsonl at every eval and
final.json (atomically) at the end, whatever the end was. `task` is the thin Hydra task function;
`main` wraps Hydra's command line so user mistakes print as one line (README: Failure handling).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import pickle
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
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from qknorm import pruning, rundir
from qknorm.config import Config, OptimizerConfig, flatten, register_configs, to_config
from qknorm.data import Splits, WindowSampler, load_splits
from qknorm.errors import RunDiverged, RunPruned, UserError, one_line
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
    resume = _resume_state(cfg, out_dir) if cfg.train.resume else None  # before any file
    progress = Progress(**resume["progress"]) if resume else Progress()
    start = time.perf_counter() - (resume["elapsed_s"] if resume else 0.0)
    status, error = "failed", None
    try:
        _loop(cfg, model, splits, device, out_dir, progress, on_eval, start, resume)
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
          progress: Progress, on_eval: EvalHook | None, start: float,
          resume: dict[str, Any] | None = None) -> None:
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
    first_step = _restore(resume, model, optimizer, g, out_dir) if resume else 0
    # First non-finite step, tracked on the device so the loop never waits for the loss.
    bad_step = torch.full((), -1, dtype=torch.long, device=device)
    tokens_per_step = t.batch_size * cfg.model.block_size

    bar = tqdm(total=t.max_iters, initial=first_step, disable=None, desc="train", unit="it",
               dynamic_ncols=True)
    tick = time.perf_counter()
    for step in range(first_step, t.max_iters + 1):
        lr = lr_at(step, o, t.max_iters)
        for group in optimizer.param_groups:
            group["lr"] = lr
        resumed_here = resume is not None and step == first_step  # evaluated before the kill
        if (step % t.eval_interval == 0 or step == t.max_iters) and not resumed_here:
            progress.train_time_s += time.perf_counter() - tick
            _evaluate(step, step_model, model, eval_batches, autocast, bad_step, out_dir, progress,
                      optimizer, cfg, start, on_eval, bar, g)
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
              optimizer, cfg: Config, start, on_eval, bar, g) -> None:
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
        _save_checkpoint(out_dir, model, optimizer, g, progress, cfg, start)
    if on_eval is not None:
        on_eval(step, row)


# ---------------------------------------------------------------------------------------------
# checkpoints: everything a killed run needs to continue bitwise where it stopped

# Keys that may differ between a run and its resumption (they do not change what is computed)
RESUME_FREE_KEYS = ("train.resume", "train.save_checkpoint", "threads", "compile", "name",
                    "optuna.study_name", "optuna.storage", "optuna.trial")


def _save_checkpoint(out_dir: Path, model: GPT, optimizer, g: torch.Generator,
                     progress: Progress, cfg: Config, start: float) -> None:
    rundir.save_checkpoint(out_dir, {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": progress.step,
        "config": OmegaConf.to_container(OmegaConf.structured(cfg)),
        "best_val_loss": progress.best_val_loss,
        "progress": dataclasses.asdict(progress), "elapsed_s": time.perf_counter() - start,
        "batch_rng": g.get_state(), "torch_rng": torch.get_rng_state(),  # batches, dropout
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
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path} was not loaded: torch.load(weights_only=True) refused it "
                        f"({first}); delete it and train from scratch") from e
    saved, now = flatten(state["config"]), flatten(OmegaConf.to_container(OmegaConf.structured(cfg)))
    changed = [f"{k}={saved.get(k)!r}->{now.get(k)!r}" for k in sorted(set(saved) | set(now))
               if k not in RESUME_FREE_KEYS and saved.get(k) != now.get(k)]
    if changed:
        raise UserError(f"train.resume=true but the config differs from the checkpoint's "
                        f"({', '.join(changed)}); resume with the interrupted run's overrides")
    return state


def _restore(state: dict[str, Any], model: GPT, optimizer, g: torch.Generator,
             out_dir: Path) -> int:
    """Load the checkpoint into model, optimizer and RNGs; drop metrics rows logged after it."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    g.set_state(state["batch_rng"])
    torch.set_rng_state(state["torch_rng"])
    step = int(state["step"])
    rows = [r for r in rundir.read_metrics(out_dir) if r["step"] <= step]  # no duplicate evals
    text = "".join(json.dumps(r) + "\n" for r in rows)
    rundir.atomic_write_bytes(out_dir / rundir.METRICS_FILE, text.encode())
    log.info("resumed from %s at step %d", out_dir / rundir.CKPT_FILE, step)
    return step


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
def task(cfg: DictConfig) -> float:
    """One job: Hydra calls this once for a run, once per job for a multirun."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    single_run = HydraConfig.get().mode == RunMode.RUN
    try:
        config = to_config(cfg)
        final = train(config, out_dir, pruning.eval_hook(config.optuna))
    except (UserError, RunDiverged) as e:
        if not single_run:
            e.sweep_dir = HydraConfig.get().sweep.dir  # for main()'s summary of the multirun
            raise  # the sweeper records the failed job and goes on
        _log_trace_to_run_log(out_dir)
        kind = "error" if isinstance(e, UserError) else "diverged"
        print(f"{kind}: {e}", file=sys.stderr)
        sys.exit(2 if isinstance(e, UserError) else 1)
    print(f"{final['status']}: best_val_loss={final['best_val_loss']:.4f} "
          f"steps={final['steps']} wall_time_s={final['wall_time_s']:.1f} -> {out_dir}")
    return final["best_val_loss"]


def main() -> None:
    """The command: Hydra's CLI, but a user mistake is one console line and exit code 2.

    Hydra prints its own errors in several lines plus a hint; with HYDRA_FULL_ERROR=1 it raises
    them instead, so we set it for the call and word the error ourselves. A user who sets
    HYDRA_FULL_ERROR=1 gets the full trace as usual.
    """
    wants_trace = os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        preflight(sys.argv[1:])
        os.environ["HYDRA_FULL_ERROR"] = "1"
        task()
    except Exception as e:
        if wants_trace:
            raise
        sweep_dir = getattr(e, "sweep_dir", None)
        if sweep_dir is not None:  # a multirun ran every job; some did not complete
            print(f"error: {multirun_summary(Path(sweep_dir), e)}", file=sys.stderr)
            sys.exit(1)
        line = one_line(e)
        if line is None:
            raise  # not a user mistake: a bug, whose trace is the useful thing to show
        print(f"error: {line}", file=sys.stderr)
        sys.exit(2)


def multirun_summary(sweep_dir: Path, first_error: BaseException) -> str:
    """One line: how many jobs ended how, the first failure, and where the records are."""
    statuses = [rundir.read_final(d)["status"] for d in sorted(sweep_dir.iterdir())
                if d.is_dir() and (d / rundir.FINAL_FILE).exists()]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in rundir.STATUSES if s in statuses)
    return (f"multirun finished with failed jobs ({counts}); first: {first_error}; "
            f"each job's final.json under {sweep_dir} has its status")


BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def preflight(argv: list[str]) -> None:
    """Compose the config, and for a basic-sweeper multirun validate every job, before any starts.

    A typo in the fifth value of a sweep then stops the command before the first job trains.
    Other sweepers (search=...) choose their values as they go: we check the fixed part.
    """
    args = get_args_parser().parse_args(argv)
    if (args.help or args.hydra_help or args.cfg or args.info or args.shell_completion
            or args.experimental_rerun or args.config_path or args.config_name or args.config_dir):
        return  # Hydra's own commands, or a config tree we did not write: Hydra handles those
    overrides = OverridesParser.create().parse_overrides(args.overrides)
    fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        primary = compose("config", overrides=fixed, return_hydra_config=True)
        if not (args.multirun or str(primary.hydra.mode) in ("MULTIRUN", "RunMode.MULTIRUN")):
            return  # a single run validates itself, with the trace in its log file
        jobs = [fixed]
        if primary.hydra.sweeper._target_ == BASIC_SWEEPER:
            params = [f"{k}={v}" for k, v in (primary.hydra.sweeper.params or {}).items()]
            parsed = OverridesParser.create().parse_overrides([*params, *args.overrides])
            (jobs,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
        checked_data: set[tuple] = set()
        for num, job in enumerate(jobs):
            try:
                config = to_config(compose("config", overrides=list(job)))
                data_key = (*vars(config.data).values(), config.model.block_size)
                if data_key not in checked_data:  # the corpus, its checksum, the fold sizes
                    load_splits(config.data, config.model.block_size)
                    checked_data.add(data_key)
            except UserError as e:
                raise UserError(f"{e} [multirun job #{num}: {' '.join(job)}]; "
                                "no job was started") from e


if __name__ == "__main__":
    main()
