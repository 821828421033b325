"""Exceptions that end a run, and how the command line reports them.

`one_line(exc)` turns a user mistake (ours, or one Hydra/OmegaConf found while composing the
config) into the single console line the user sees: the bad value and the fix, no traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

from hydra.errors import (
    ConfigCompositionException,
    MissingConfigException,
    OverrideParseException,
)
from hydra_racing_sweeper.errors import (  # noqa: F401 (re-exported: one class for the sweeper's errors and ours)
    INTERRUPTED_EXIT,
    UserError,
    did_you_mean,
    exit_interrupted,
    exit_with,
    first_line,
)
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    OmegaConfBaseException,
    ValidationError,
)

LIST_KEYS = "`python -m qknorm.train --cfg job` lists every key and its value"
# hydra.* keys are not the job's: Hydra prints them with --cfg hydra (the sweeper's keys are
# hydra.sweeper.*, docs/sweeper.md)
LIST_HYDRA_KEYS = ("`python -m qknorm.train <your overrides> --cfg hydra` lists the hydra.* keys "
                   "(hydra.sweeper.*: docs/sweeper.md)")


def list_keys(key: str) -> str:
    """Where to look up the keys that `key` should have been one of."""
    return LIST_HYDRA_KEYS if key.startswith("hydra.") else LIST_KEYS


def run_main(main: Callable[[], int | None]) -> NoReturn:
    """A command's `if __name__ == "__main__"`: call main and exit with its code; a UserError is
    one line on stderr and exit 2 (no traceback)."""
    try:
        code = main()
    except UserError as e:
        exit_with(e)
    sys.exit(code or 0)


class RunDiverged(RuntimeError):
    """The training loss became non-finite; final.json records status `diverged` and the step."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"loss became {loss} at step {step}; lower optimizer.lr or raise "
                         "optimizer.warmup_iters")
        self.step = step
        self.loss = loss

    def __reduce__(self):  # picklable for launchers that run jobs in other processes (joblib)
        return type(self), (self.step, self.loss), self.__dict__


class RunPruned(RuntimeError):
    """An Optuna pruner stopped the run early; final.json records status `pruned`."""

    def __init__(self, step: int):
        super().__init__(f"pruned at step {step}")
        self.step = step

    def __reduce__(self):
        return type(self), (self.step,), self.__dict__


# OmegaConf's names for the types a value failed to convert to -> what to type instead
_TYPE_HINTS = {"Float": "a number (or inf)", "Integer": "a whole number",
               "Boolean": "true or false", "String": "a string"}


# A mapping given to these (the form before rungs were fractions) cannot merge into a preset's
# list: Hydra's words ("Cannot merge ListConfig with DictConfig") are replaced by the form that works
_RACE_LISTS = ("hydra.sweeper.race.rungs=", "hydra.sweeper.race.margin=")


def _dotted_key(message: str, key: str, parent_node) -> str | None:
    """An override of one key of a mapping whose keys hold dots (hydra.sweeper.replicates'
    data.fold): Hydra splits the typed key at every dot, so it asks for `key` (…replicates.data)
    and the nearest key is the one typed. Says how to write it instead; None for other keys."""
    if message.startswith("Could not override '"):  # Hydra: "... use +KEY=VALUE" below it
        typed = message.rpartition(" use +")[2].strip()
    else:
        typed = message.removeprefix("Error merging override ").split("\n")[0]
    typed_key, _, value = typed.partition("=")
    parent = key.rpartition(".")[0]
    name = typed_key.lstrip("+~").removeprefix(parent + ".")
    keys = [str(k) for k in parent_node] if parent_node is not None else []
    if "." not in name or not any("." in k for k in keys):
        return None
    how = (f"{name}={value.strip('[]')} (the replicate's values, replacing the preset's)"
           if parent == "hydra.sweeper.replicates" and name in keys
           else f"'++{parent}={{{name}: {value}}}'")
    return (f"{typed}: Hydra splits a key at its dots, so this names {key}, not {parent}'s key "
            f"{name}; write {how}")


def _compose_error(e: ConfigCompositionException) -> str:
    cause = e.__cause__
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):  # an unknown key
        key = cause.full_key
        dotted = _dotted_key(str(e), key, cause.parent_node)
        if dotted:
            return dotted
        hint = ""
        if cause.parent_node is not None and cause.key is not None:
            hint = did_you_mean(key.rpartition(".")[0], cause.key, cause.parent_node)
        return f"{key} is not a config key; {hint}{list_keys(key)}"
    if isinstance(cause, ValidationError):  # a value of the wrong type: norm.p=abc
        wanted = next((hint for name, hint in _TYPE_HINTS.items()
                       if f"converted to {name}" in cause.msg), "a value of the right type")
        return (f"{cause.full_key}={cause.value} is not valid ({first_line(cause.msg)}); "
                f"give {cause.full_key} {wanted}")
    message = str(e)
    if message.startswith("Ambiguous value for argument"):
        override = message.split("'")[1]
        return (f"{override} lists several values; add -m to sweep over them, or quote the "
                "value to pass one string")
    override = message.removeprefix("Error merging override ").split("\n")[0]
    if override.startswith(_RACE_LISTS) and "Cannot merge" in str(cause):
        return (f"{override}: a race's rungs are a list and its margin a number or a list, one "
                "per rung, e.g. hydra.sweeper.race.rungs=[0.25,0.5] hydra.sweeper.race.margin="
                "[0.1,0.04] (or margin=0.05 at every rung); docs/race.md")
    parts = [first_line(message)]
    if isinstance(cause, OmegaConfBaseException):
        parts.append(first_line(str(cause)))
    return "; ".join(p for p in parts if p) + f"; {LIST_KEYS}"


def one_line(e: BaseException) -> str | None:
    """The console line for a user mistake, or None when e is not one (then it is a bug: trace)."""
    if isinstance(e, (UserError, RunDiverged)):
        return str(e)
    if isinstance(e, MissingConfigException) and e.options and e.missing_cfg_file:
        group, _, name = e.missing_cfg_file.rpartition("/")
        return f"{group}={name} is not an option of {group}; pick one of {', '.join(e.options)}"
    if isinstance(e, MissingConfigException):
        return first_line(str(e))
    if isinstance(e, ConfigCompositionException):
        return _compose_error(e)
    if isinstance(e, OverrideParseException):
        return (f"cannot parse the override: {first_line(str(e))}; write key=value "
                "(Hydra's override grammar: hydra.cc/docs/advanced/override_grammar/basic)")
    if isinstance(e, OmegaConfBaseException):
        key = getattr(e, "full_key", None)
        return f"{key}: {first_line(str(e))}" if key else first_line(str(e))
    return None
