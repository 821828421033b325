"""The arms of the logit-control comparison (issue 46, conf/arm/): which arm a run is, read back
from the keys an arm sets. Hydra records `arm=` as a defaults choice, not as a config key, so
results.csv has no `arm` column; a run is its keys (norm=l2 typed by hand is the qknorm arm too).
The one home of an arm's name in the report's tables and figures, of QKNorm as the reference,
and of which group keys are the arm and which the setting it ran in (the width, ...).
"""

from __future__ import annotations

import pandas as pd

from qknorm.report.paxis import format_p

# The logit controls outside QK-norm, by the name of the conf/arm/ file that sets each alone.
CONTROLS = {"model.attn_softcap": "softcap", "train.z_loss": "z_loss", "model.qk_clip": "qk_clip"}
ARM_KEYS = ("norm.kind", "norm.p", "norm.gamma_init", *CONTROLS)
REFERENCE = "qknorm"  # Henry et al.'s QKNorm: L2 q, k with γ from log2(T² − T)
FALLBACK = "none"  # the reference where QKNorm was not run


def is_arm_key(key: str) -> bool:
    """A key that tells arms apart: every norm.* key (a kind's unused ones are NaN in the lr
    reading, so they can never be matched across kinds) and the controls'."""
    return key.startswith("norm.") or key in ARM_KEYS


def setting_keys(keys) -> list[str]:
    """The group keys that are not the arm: what a group shares with its reference (model.n_embd
    in a width ladder)."""
    return [k for k in keys if not is_arm_key(k)]


def _on(value) -> bool:
    """A control is set: softcap and QK-Clip null when off, z-loss 0."""
    return not pd.isna(value) and value != 0


def _norm_name(kind, p, gamma) -> str:
    """none, rms, qknorm (L2, the default γ init), lp<p> with _<γ init> unless it is QKNorm's
    (lp4_calibrated). A γ init that did not vary is not a column: then the name is silent on it."""
    if kind not in ("l2", "lp"):
        return str(kind)
    p = 2.0 if kind == "l2" else p
    default_gamma = pd.isna(gamma) or gamma == "qknorm"
    if p == 2.0 and default_gamma:
        return REFERENCE
    return f"lp{format_p(p)}" + ("" if default_gamma else f"_{gamma}")


def arm_name(row) -> str:
    """The arm of a run or group (a Series or dict with any of ARM_KEYS; an absent key is the
    sweep's constant, read as unset): the conf/arm/ name where one fits (none, qknorm,
    lp4_calibrated, rms, softcap, z_loss, qk_clip), else its parts joined by + (qknorm+softcap)."""
    norm = _norm_name(row.get("norm.kind"), row.get("norm.p"), row.get("norm.gamma_init"))
    controls = [name for key, name in CONTROLS.items() if _on(row.get(key))]
    return "+".join(controls if norm == "none" and controls else [norm, *controls])


def arm_names(frame: pd.DataFrame) -> pd.Series:
    """arm_name of every row; where two rows of one name differ in a control's value (a sweep
    over the softcap), each gets its value too: softcap (model.attn_softcap=30)."""
    names = pd.Series([arm_name(r) for _, r in frame.iterrows()], index=frame.index, dtype=object)
    controls = [k for k in CONTROLS if k in frame.columns]
    for name in names.unique():
        mine = frame.loc[names == name, controls]
        differ = [k for k in controls if mine[k].nunique() > 1]
        for i, row in mine.iterrows():
            if differ:
                names[i] = f"{name} ({', '.join(f'{k}={row[k]:g}' for k in differ)})"
    return names
