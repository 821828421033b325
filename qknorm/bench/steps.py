"""Speed measurements: training-step time per variant, the norm alone per p (per-job overhead:
qknorm.bench.overhead).

Step times of all variants are measured in one process, interleaved (A B C A B C ...) after a
warm-up, so that load from other processes falls on every variant alike; each round gives one
time per variant, and ratios are taken per round (variant / reference in the same round) before
their median. `scripts/bench.py` is the command line; everything here returns plain dicts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from qknorm.config import ARCHS, ATTENTIONS, CONF_DIR  # model.arch; model.attention (auto: not in names)
from qknorm.errors import UserError, first_line
from qknorm.nn import LpQKNorm, lp_norm_scaled, lp_normalize
from qknorm.pace import time_steps

# name -> (Hydra overrides, force the general Lp path). l2 is Lp at p=2 with its fast path (the
# square root of a sum of squares); lp_p2_general is the same maths through max-scaling and pow,
# to show what the fast path buys.
NORMS: dict[str, tuple[tuple[str, ...], bool]] = {
    "none": (("norm=none",), False),
    "l2": (("norm=l2",), False),
    "lp_p1": (("norm=lp", "norm.p=1"), False),
    "lp_p2_general": (("norm=lp", "norm.p=2"), True),
    "lp_p3.5": (("norm=lp", "norm.p=3.5"), False),
    "lp_p4": (("norm=lp", "norm.p=4"), False),
    "lp_pinf": (("norm=lp", "norm.p=inf"), False),
    "rms": (("norm=rms",), False),
    # the logit controls from outside QK-norm (conf/arm/, issue 46): plain attention plus each
    "softcap": (("arm=softcap",), False),
    "z_loss": (("arm=z_loss",), False),
    "qk_clip": (("arm=qk_clip",), False),
}
DTYPES = {"float32": "fp32", "bfloat16": "bf16"}
REFERENCE = "none-fp32-eager"  # issue 13's reference: every variant's speed-up is against it
MICRO_PS = (1.0, 2.0, 3.0, 3.5, 4.0, 8.0, math.inf)

# (numerator, denominator) pairs of norm names, per dtype and mode, reported as step-time ratios.
NORM_RATIOS = (("lp_p4", "l2"), ("lp_pinf", "l2"), ("l2", "none"), ("lp_p4", "lp_p2_general"),
               ("lp_p2_general", "l2"), ("lp_p1", "l2"), ("lp_p3.5", "l2"), ("rms", "none"))


@dataclass(frozen=True)
class Variant:
    norm: str
    dtype: str = "float32"
    compile: bool = False
    attention: str = "auto"
    arch: str = "gpt"  # model.arch; gpt is left out of names (they predate the key)

    @property
    def name(self) -> str:
        mode = "compiled" if self.compile else "eager"
        suffix = "" if self.attention == "auto" else f"-{self.attention}"
        prefix = "" if self.arch == "gpt" else f"{self.arch}-"
        return f"{prefix}{self.norm}-{DTYPES[self.dtype]}-{mode}{suffix}"


def variants(norms: list[str], dtypes: list[str], compile_modes: list[bool],
             attentions: list[str] = ("auto",), archs: list[str] = ("gpt",)) -> list[Variant]:
    for what, given, known in (("norm variant", norms, NORMS), ("dtype", dtypes, DTYPES),
                               ("attention", attentions, ATTENTIONS), ("arch", archs, ARCHS)):
        for value in given:
            if value not in known:
                raise UserError(f"unknown {what} {value!r}; pick from {', '.join(known)}")
    # arch innermost: a round times GPT and anGPT of one setting back to back
    return [Variant(n, d, c, a, arch) for a in attentions for c in compile_modes for d in dtypes
            for n in norms for arch in archs]


def compose(model: str, overrides: list[str]):
    """The typed Config exactly as `python -m qknorm.train model=<model> <overrides>` builds it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from qknorm.config import register_configs, to_config

    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return to_config(hydra_compose("config", overrides=[f"model={model}", *overrides]))
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(f"cannot compose model={model} {' '.join(overrides)}: "
                        f"{first_line(e)}") from e


def spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles and IQR (the spread we quote), plus n."""
    if len(values) < 2:
        v = values[0] if values else math.nan
        return {"median": v, "q1": v, "q3": v, "iqr": 0.0, "n": len(values)}
    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": med, "q1": q1, "q3": q3, "iqr": q3 - q1, "n": len(values)}


# ---------------------------------------------------------------------------------------------
# the reference path: Lp with no fast path, to show what the fast paths buy


def lp_normalize_general(x: torch.Tensor, p: float, dim: int = -1, eps: float = 1e-6,
                         gamma: torch.Tensor | None = None) -> torch.Tensor:
    """lp_normalize with no fast path: max-scaling and pow for every finite p (max|x| for
    p = inf), autograd for the backward, gamma applied as a full-size multiply."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    out = xf / lp_norm_scaled(xf, p, dim).clamp_min(eps)
    return (out if gamma is None else out * gamma).to(x.dtype)


class GeneralLpQKNorm(LpQKNorm):
    """LpQKNorm through `lp_normalize_general`: the same parameters, the reference path."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (lp_normalize_general(q, self.p, eps=self.eps, gamma=self.gamma),
                lp_normalize_general(k, self.p, eps=self.eps))


def use_general_path(model: torch.nn.Module) -> None:
    """Switch every LpQKNorm of a model to the reference path, in place (before its first step,
    so torch.compile traces the switched forward)."""
    for norm in model.modules():
        if type(norm) is LpQKNorm:
            norm.__class__ = GeneralLpQKNorm  # same state, other forward


# ---------------------------------------------------------------------------------------------
# training-step benchmark


def build_run(variant: Variant, model: str, extra: list[str], splits_cache: dict):
    """The variant's Run through qknorm.train.setup: it steps exactly as training does."""
    from qknorm.data import load_splits
    from qknorm.train import setup

    overrides, general = NORMS[variant.norm]
    cfg = compose(model, [*overrides, f"dtype={variant.dtype}", *extra,
                          f"compile={str(variant.compile).lower()}",
                          f"model.attention={variant.attention}", f"model.arch={variant.arch}"])
    key = (cfg.data.fold, cfg.model.block_size)
    if key not in splits_cache:
        splits_cache[key] = load_splits(cfg.data, cfg.model.block_size)
    run = setup(cfg, splits_cache[key])
    if general:
        use_general_path(run.raw_model)
    return run


def bench_steps(variant_list: list[Variant], model: str = "cpu", extra: list[str] = (),
                warmup: int = 10, rounds: int = 15, steps: int = 5) -> dict[str, Any]:
    """Interleaved step times for every variant; per-variant medians and per-round ratios."""
    splits_cache: dict = {}
    runs, setup_s = [], {}
    if any(v.compile for v in variant_list):
        # Every compiled model is one more cache entry of the same forward code; past dynamo's
        # limit (8) a variant would silently run eager.
        import torch._dynamo

        limit = torch._dynamo.config.recompile_limit
        torch._dynamo.config.recompile_limit = max(limit, 2 * len(variant_list))
    for v in variant_list:
        t0 = time.perf_counter()
        run = build_run(v, model, list(extra), splits_cache)
        time_steps(run, max(1, warmup))  # compiles here when compile=true
        setup_s[v.name] = time.perf_counter() - t0
        runs.append(run)
    times: dict[str, list[float]] = {v.name: [] for v in variant_list}
    cpu_times: dict[str, list[float]] = {v.name: [] for v in variant_list}
    for _ in range(rounds):
        for v, run in zip(variant_list, runs):
            wall, cpu = time_steps(run, steps)
            times[v.name].append(wall)
            cpu_times[v.name].append(cpu)
    cfg = runs[0].cfg
    tokens_per_step = cfg.train.batch_size * cfg.model.block_size
    rows = []
    for v in variant_list:
        ts = times[v.name]
        rows.append({
            "name": v.name, "norm": v.norm, "dtype": v.dtype, "compile": v.compile,
            "attention": v.attention, "arch": v.arch, "general_lp_path": NORMS[v.norm][1],
            "step_ms": spread([1e3 * t for t in ts]),
            "cpu_step_ms": spread([1e3 * t for t in cpu_times[v.name]]),
            "tokens_per_s": spread([tokens_per_step / t for t in ts]),
            "setup_s": setup_s[v.name],
        })
    return {
        "config": {"model": model, "overrides": list(extra), "n_layer": cfg.model.n_layer,
                   "n_head": cfg.model.n_head, "n_embd": cfg.model.n_embd,
                   "block_size": cfg.model.block_size, "batch_size": cfg.train.batch_size,
                   "device": runs[0].device.type},
        "warmup_steps": warmup, "rounds": rounds, "steps_per_round": steps,
        "variants": rows, "ratios": _ratios(variant_list, times),
        "ratios_cpu": _ratios(variant_list, cpu_times),
        "reference": REFERENCE, "speedup": _speedups(times), "speedup_cpu": _speedups(cpu_times),
    }


def _ratios(variant_list: list[Variant], times: dict[str, list[float]]) -> dict[str, dict]:
    """Step-time ratios taken round by round (same moment, same load), then summarized."""
    by_name = {v.name: v for v in variant_list}
    pairs = []
    for v in variant_list:
        for num, den in NORM_RATIOS:
            if v.norm == num:
                pairs.append((v, dataclasses.replace(v, norm=den)))
        if v.dtype == "bfloat16":
            pairs.append((v, dataclasses.replace(v, dtype="float32")))
        if v.compile:
            pairs.append((v, dataclasses.replace(v, compile=False)))
        if v.attention != "auto":
            pairs.append((v, dataclasses.replace(v, attention="auto")))
        if v.arch != "gpt":
            pairs.append((v, dataclasses.replace(v, arch="gpt")))  # anGPT's step against GPT's
    out = {}
    for a, b in pairs:
        if b.name in by_name:
            out[f"{a.name} / {b.name}"] = spread([x / y for x, y in zip(times[a.name], times[b.name])])
    return out


def _speedups(times: dict[str, list[float]]) -> dict[str, dict]:
    """Each variant's speed-up over REFERENCE (reference time / variant time), round by round;
    empty when the reference was not measured."""
    if REFERENCE not in times:
        return {}
    ref = times[REFERENCE]
    return {name: spread([r / t for r, t in zip(ref, ts)]) for name, ts in times.items()
            if name != REFERENCE}


def bench_eval(model: str = "cpu", extra: list[str] = (), norm: str = "lp_p4",
               rounds: int = 15) -> dict[str, Any]:
    """What the attention diagnostics add to an eval: one eval (train and val losses over
    eval_iters batches each) and one diagnostics pass (diag_batches), interleaved per round.
    Training steps do not run them, so they cost eval time only."""
    from qknorm.diagnostics import attention_diagnostics
    from qknorm.train import estimate_loss

    run = build_run(Variant(norm), model, list(extra), {})
    t = run.cfg.train
    diag_batches = run.eval_batches["val"][:t.diag_batches]
    evals, diags = [], []
    for _ in range(rounds + 1):  # the first round warms up
        start = time.perf_counter()
        for split in ("train", "val"):
            estimate_loss(run.compiled, run.eval_batches[split], run.autocast)
        middle = time.perf_counter()
        attention_diagnostics(run.raw_model, diag_batches, run.autocast)
        evals.append(middle - start)
        diags.append(time.perf_counter() - middle)
    evals, diags = evals[1:], diags[1:]
    return {"norm": norm, "eval_iters": t.eval_iters, "diag_batches": t.diag_batches,
            "eval_ms": spread([1e3 * e for e in evals]),
            "diagnostics_ms": spread([1e3 * d for d in diags]),
            "diagnostics / eval": spread([d / e for d, e in zip(diags, evals)])}


# ---------------------------------------------------------------------------------------------
# the norm alone


def bench_norm(shape: tuple[int, ...], ps=MICRO_PS, warmup: int = 20, rounds: int = 15,
               reps: int = 50) -> list[dict[str, Any]]:
    """Forward + backward of lp_normalize on q and k of `shape` (B, nh, T, hs), per p, interleaved.

    Every p also runs through the general path (max-scaling and pow, no fast path), so the table
    shows what each fast path buys. Times are per (q, k) pair, in microseconds.
    """
    data_rng = torch.Generator().manual_seed(0)
    q = torch.randn(shape, generator=data_rng, requires_grad=True)
    k = torch.randn(shape, generator=data_rng, requires_grad=True)
    grad = torch.randn(shape, generator=data_rng)
    gamma = torch.tensor(3.0, requires_grad=True)  # learnable and folded into q, as in LpQKNorm

    def timer(fn, p):
        def run(n):
            start = time.perf_counter()
            for _ in range(n):
                out_q, out_k = fn(q, p, gamma=gamma), fn(k, p)
                torch.autograd.backward((out_q, out_k), (grad, grad))
            return (time.perf_counter() - start) / n
        return run

    cases = [(p, "fast", timer(lp_normalize, p)) for p in ps]
    cases += [(p, "general", timer(lp_normalize_general, p)) for p in ps]
    for _, _, run in cases:
        run(warmup)
    times = {(p, path): [] for p, path, _ in cases}
    for _ in range(rounds):
        for p, path, run in cases:
            times[(p, path)].append(run(reps))
    ref = times[(2.0, "fast")] if (2.0, "fast") in times else None
    rows = []
    for p, path, _ in cases:
        ts = times[(p, path)]
        row = {"p": "inf" if math.isinf(p) else p, "path": path, "us": spread([1e6 * t for t in ts])}
        if ref is not None:
            row["ratio_vs_p2_fast"] = spread([a / b for a, b in zip(ts, ref)])
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------


def environment(threads: int) -> dict[str, Any]:
    return {
        "torch_version": torch.__version__, "python": sys.version.split()[0],
        "threads": threads, "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
