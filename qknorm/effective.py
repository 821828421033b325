"""When two runs are the same run: a config's effective part, without the keys its norm kind
never reads and without bookkeeping. The one home of "same effective config": the basic
sweeper and preflight (`unique_jobs`), the Optuna sweeper's repeats and the report's
duplicates all ask here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from qknorm.config import ANGPT_KEYS


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """{'norm': {'p': 2}} -> {'norm.p': 2}: the dotted names users type on the command line."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# Keys a norm kind never reads: runs that differ only in these are the same run. Hydra still
# composes them (norm=none inherits norm.p from the schema), so a grid `norm=none,lp norm.p=2,4`
# would launch norm=none twice and a report would count it twice (issue 12, pseudo-replication).
GAMMA_KEYS = ("norm.gamma_init", "norm.gamma_learnable", "norm.gamma_shape", "norm.gamma_param",
              "norm.p_learnable")
UNUSED_KEYS = {
    "none": ("norm.p", *GAMMA_KEYS, "norm.eps"),
    "rms": ("norm.p", *GAMMA_KEYS),
    "l2": ("norm.p",),  # l2 is lp at p = 2 whatever norm.p says (validate() insists on 2)
    "lp": (),
}
# The value a kind fixes an unused key to (validate() rejects any other): of a sweep's jobs
# that repeat one effective config, the one with these values is the one launched, whatever
# the grid's order (`norm=l2 norm.p=4,2` runs l2 at p = 2, as `norm.p=2,4` does).
FIXED_VALUES = {"l2": {"norm.p": 2.0}}
# per-job labels the sweeper sets (trial number), and where the numbers are mirrored: not the
# run's config
BOOKKEEPING = ("optuna.", "tracker.")
# model.arch=gpt drops model.arch too: a GPT job's effective config (and so the digest a study
# keeps of it) stays what it was before the key existed, and studies started then resume.
UNUSED_BY_ARCH = {"gpt": ("model.arch", *ANGPT_KEYS), "angpt": ("model.bias",)}
# Keys added after runs existed, dropped at the value every earlier run had, for the same
# reason: studies started before them keep their digests and resume. The data keys of issue 37
# (Tiny Shakespeare, char level) and the logit controls of issue 46 (no softcap, no QK-Clip, no z-loss).
# And data.vocab_size, which only the BPE reads.
KEYS_BEFORE = {"data.corpus": "shakespeare", "data.tokenizer": "char",
               "model.attn_softcap": None, "model.qk_clip": None, "train.z_loss": 0.0}
UNUSED_BY_TOKENIZER = {"char": ("data.vocab_size",), "byte": ("data.vocab_size",)}


def effective_config(flat: dict[str, Any]) -> dict[str, Any]:
    """A flattened config without the keys its norm kind or architecture does not use, nor
    bookkeeping keys: two runs with equal effective configs compute the same thing (bitwise,
    on CPU)."""
    unused = (*UNUSED_KEYS.get(flat.get("norm.kind"), ()),
              *UNUSED_BY_ARCH.get(flat.get("model.arch", "gpt"), ()),
              *(k for k, v in KEYS_BEFORE.items() if flat.get(k, v) == v),
              *UNUSED_BY_TOKENIZER.get(flat.get("data.tokenizer", "char"), ()))
    return {k: v for k, v in flat.items() if k not in unused and not k.startswith(BOOKKEEPING)}


def effective_key(flat: dict[str, Any]) -> str:
    """A hashable, order-free form of effective_config (values may be lists or dicts)."""
    return repr(sorted(effective_config(flat).items()))


def task_tree(cfg: DictConfig) -> dict[str, Any] | None:
    """A composed job's task config as a nested dict (Hydra's own node dropped), or None when
    the task is not qknorm's (no `norm`): its runs may differ, so nothing counts as a repeat.
    The one helper behind every "same effective config" check (basic sweeper, preflight, the
    Optuna sweeper's repeats)."""
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree.pop("hydra", None)
    return tree if "norm" in tree else None


def unique_jobs(jobs: list, compose: Callable[[Any], dict[str, Any]]) -> tuple[list, list]:
    """Drop the jobs of a sweep whose effective config an earlier job already has.

    `compose(job)` gives a job's task config as a nested dict. Returns (kept jobs, [(dropped
    job, the kept job it repeats)]), both in the sweep's order.
    """
    first: dict[str, Any] = {}  # effective key -> (index in kept, the job fixes its kind's keys)
    kept, dropped = [], []
    for job in jobs:
        flat = flatten(compose(job))
        key, fixed = effective_key(flat), _fixed(flat)
        if key not in first:
            first[key] = (len(kept), fixed)
            kept.append(job)
        elif fixed and not first[key][1]:  # l2 at p = 2 after l2 at p = 4: launch the valid one
            index = first[key][0]
            dropped.append((kept[index], job))
            kept[index], first[key] = job, (index, True)
        else:
            dropped.append((job, kept[first[key][0]]))
    return kept, dropped


def _fixed(flat: dict[str, Any]) -> bool:
    """The job sets its kind's fixed keys (FIXED_VALUES) to their values."""
    return all(flat.get(k) == v for k, v in FIXED_VALUES.get(flat.get("norm.kind"), {}).items())
