"""Overrides that contradict each other on one command line, refused before anything runs.

Hydra keeps the last of two picks of one config group (`arm=softcap arm=z_loss` runs z_loss), lets
a command-line group override win over the one an arm's defaults make (`arm=lp4_calibrated
norm=none` trains plain attention), and composes keys the picked norm never reads (`norm=none
norm.p=4`): each would run something other than what the line says, silently. A value key given
twice is left to Hydra (the last wins, documented, and scripts append overrides to a base list).
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf

from qknorm.config import CONF_DIR
from qknorm.effective import UNUSED_KEYS, flatten
from qknorm.errors import UserError

ARM = "arm"  # conf/arm/: one logit control, which sets the norm group and keys of its own


def check_overrides(lines: Sequence[str], composed: DictConfig | None) -> None:
    """Raise UserError for the first contradiction among the command line's `lines`.
    `composed`: the config the fixed overrides compose, hydra node included (None: not known)."""
    overrides = OverridesParser.create().parse_overrides(list(lines))
    _check_groups_once(overrides)
    _check_arms(overrides)
    if composed is None:
        return
    _check_empty_mappings(overrides, composed)
    norm_kind = OmegaConf.select(composed, "norm.kind")
    target = str(OmegaConf.select(composed, "hydra.sweeper._target_", default="") or "")
    if not target.endswith("BasicSweeper"):  # a study's searched keys: its planner words those
        overrides = [o for o in overrides if not o.is_sweep_override()]
    if norm_kind is not None and not any(_key(o) in ("norm", "norm.kind", ARM)
                                         for o in overrides if o.is_sweep_override()):
        _check_norm_reads(overrides, norm_kind)


def _key(o: Override) -> str:
    return o.key_or_group


def _values(o: Override) -> list[str]:
    """The values an override gives its key: one, or each of a choice or range sweep."""
    if o.is_sweep_override():
        return [] if o.is_interval_sweep() else list(o.sweep_string_iterator())
    return [o.get_value_element_as_str()]


def _text(o: Override) -> str:
    return o.input_line or f"{o.get_key_element()}={o.get_value_element_as_str()}"


def _is_group(key: str) -> bool:
    return "." not in key and "/" not in key and (CONF_DIR / key).is_dir()


def _check_groups_once(overrides: list[Override]) -> None:
    seen: dict[str, Override] = {}
    for o in overrides:
        key = _key(o)
        if not _is_group(key) or o.package is not None:
            continue
        if key in seen:
            raise UserError(f"{key} is given twice ({_text(seen[key])}, {_text(o)}): Hydra would "
                            f"keep only the last; give {key} once, or add -m and list the values "
                            f"to run each ({key}={','.join([*_values(seen[key]), *_values(o)])})")
        seen[key] = o


def arm_sets(arm: str) -> tuple[dict[str, str], dict[str, object]]:
    """What conf/arm/<arm>.yaml sets: ({group: option} its defaults override, {key: value})."""
    path = CONF_DIR / ARM / f"{arm}.yaml"
    if not path.exists():
        return {}, {}  # not an option: composing names the options
    tree = OmegaConf.to_container(OmegaConf.load(path))
    groups = {}
    for entry in tree.pop("defaults", None) or []:
        if isinstance(entry, dict):
            for k, v in entry.items():
                groups[k.removeprefix("override ").strip().lstrip("/")] = str(v)
    return groups, flatten(tree)


def _check_arms(overrides: list[Override]) -> None:
    arms = [o for o in overrides if _key(o) == ARM and o.package is None]
    for arm_override in arms:
        for arm in _values(arm_override):
            groups, keys = arm_sets(arm)
            sets = " ".join([*(f"{g}={v}" for g, v in groups.items()),
                             *(f"{k}={v}" for k, v in keys.items())])
            wanted = {**groups, **keys}
            for o in overrides:
                key = _key(o)
                if key in wanted and any(not _same(v, wanted[key]) for v in _values(o)):
                    raise UserError(
                        f"{_text(o)} contradicts arm={arm}, which sets {sets}: the run would not "
                        f"be that arm; drop {_text(o)}, or drop arm={arm} and give the norm and "
                        "keys yourself (conf/arm/*.yaml lists what each arm sets)")


def _same(typed: str, value: object) -> bool:
    """A command-line value is the arm's (norm=none under arm=softcap repeats it: no conflict)."""
    try:
        return float(typed) == float(value)
    except (TypeError, ValueError):
        return typed == str(value)


def _check_empty_mappings(overrides: list[Override], composed: DictConfig) -> None:
    """`key={}` merges nothing into a preset's mapping (Hydra merges mappings): the preset's
    replicates or race stay as they were, silently."""
    for o in overrides:
        if o.is_sweep_override() or o.value() != {}:
            continue
        held = OmegaConf.select(composed, _key(o))
        if isinstance(held, DictConfig) and len(held):
            tree = OmegaConf.to_container(held, resolve=False)
            held_text = "{" + ", ".join(f"{k}: {v}" for k, v in tree.items()) + "}"
            fix = ("for one replicate give its value, e.g. data.fold=0 (docs/sweeper.md)"
                   if _key(o) == "hydra.sweeper.replicates" else
                   "change its keys one by one, or pick a preset without it")
            raise UserError(f"{_text(o)} merges into the preset's {_key(o)} ({held_text}) and "
                            f"leaves it as it is; {fix}")


def _check_norm_reads(overrides: list[Override], kind: str) -> None:
    unread = UNUSED_KEYS.get(kind, ())
    for o in overrides:
        key = _key(o)
        if key in unread and not (kind == "l2" and key == "norm.p"):  # validate() words l2's p
            readers = [k for k, keys in UNUSED_KEYS.items() if key not in keys]
            raise UserError(f"{_text(o)} is not read by norm={kind} (it reads none of "
                            f"{', '.join(unread)}); drop it, or pick "
                            f"{' or '.join(f'norm={k}' for k in readers)}")
