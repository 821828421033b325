"""Which p values the runs used and which one the paired comparisons take as baseline: the run p
(a grid's, or a continuous search's), a --baseline checked against them, and "auto" resolved to
p = 2 or the run p nearest to it.
"""

from __future__ import annotations

import math

import pandas as pd

from qknorm.config import P_KINDS
from qknorm.errors import UserError
from qknorm.report.paxis import format_p, label_digits, p_labels

AUTO = "auto"  # --baseline's default: p = 2 when run, else what resolve_baseline says


def run_ps(df: pd.DataFrame) -> list[float]:
    """The distinct p values of the Lp runs, sorted (inf last)."""
    return sorted(set(df.loc[df["norm.kind"].isin(P_KINDS), "norm.p"].dropna()))


def continuous_p(df: pd.DataFrame) -> bool:
    """Whether the p values are a continuous search's rather than a grid's.

    A grid's p values are typed (or listed by a preset) and print exactly at 6 significant
    digits; a sampler's (TPE, GP, random over an interval) almost never do. More than 12
    distinct finite p are drawn as a continuous search too: no axis holds one tick per p.
    """
    finite = [p for p in run_ps(df) if math.isfinite(p)]
    return len(finite) > 12 or any(float(format_p(p)) != p for p in finite)


def check_baseline(df: pd.DataFrame, baseline: float) -> float:
    """The run p that `baseline` names: equal to it, or printed the same (the report's tables
    and this error round p to 6 significant digits). UserError naming every p run otherwise."""
    ps = run_ps(df)
    if baseline in ps:
        return baseline
    digits, labels = label_digits(ps), p_labels(ps)
    for p, label in labels.items():  # labels are distinct: at most one matches
        if format_p(baseline, digits) == label:
            return p
    run = ", ".join(labels.values()) or "none"
    raise UserError(f"--baseline {format_p(baseline)}: no run used norm.p={format_p(baseline)} "
                    f"(p values run, each accepted as written: {run}); pass one of those, or "
                    "--baseline none")


def resolve_baseline(df: pd.DataFrame, baseline: float | str | None) -> tuple[float | None, str]:
    """(the baseline p, or None for no paired table; one sentence for the summary when the
    default could not be p = 2). A p the user gave must have been run (UserError)."""
    if baseline is None:
        return None, ""
    if baseline != AUTO:
        return check_baseline(df, float(baseline)), ""
    ps = run_ps(df)
    if 2.0 in ps:
        return 2.0, ""
    if not ps:
        return None, "No run has a p (norm=none or rms only), so there is no paired Δ table."
    if continuous_p(df):
        return None, ("p=2 was not run and the p values come from a continuous search, "
                      "where any one p is a single trial, so there is no paired Δ table; the "
                      "loss_vs_p figure shows the trials' trend, and --baseline P with a p from "
                      "the tables above compares every p with that one.")
    nearest = min(ps, key=lambda p: abs(math.log(p / 2.0)))  # inf is infinitely far
    return nearest, (f"p=2 was not run, so the baseline is the run p nearest to 2, "
                     f"p={p_labels(ps)[nearest]}; --baseline P picks another, --baseline none "
                     "drops the comparison.")
