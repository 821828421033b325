"""The report of a sweep (docs/design.md, "The report"): results.csv, curves.csv, summary.md
and report/ figures.

`build_report` validates every input and renders every file in memory; `write_report` then
writes them one by one atomically. A bad --metric, --by or --baseline therefore fails before
anything is written, and a reader never sees half a file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from hydra_racing_sweeper import readback

from qknorm import rundir
from qknorm.errors import UserError
from qknorm.report import (
    baseline,
    deltaplot,
    lrplots,
    lrsens,
    plots,
    racerebuild,
    results,
    stats,
    stepplots,
    studyplots,
)
from qknorm.report.computed import Options, compute
from qknorm.report.summary import summarize


@dataclass
class Report:
    runs: pd.DataFrame
    summary: str
    files: dict[str, bytes]  # path relative to the report root -> contents


# ---------------------------------------------------------------------------------------------
# validation: every check before anything is computed or written

def parse_p(text: str) -> float | None:
    """'2' -> 2.0, 'inf' -> inf, 'none' -> None (no baseline), 'auto' -> 'auto'."""
    if text.strip().lower() == "none":
        return None
    if text.strip().lower() == baseline.AUTO:
        return baseline.AUTO
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"--baseline {text!r} is not a number; pass a p that was run, e.g. "
                        "--baseline 2 or --baseline inf, or --baseline none") from None
    if math.isnan(value):
        raise UserError("--baseline nan is not a p; pass a p that was run, e.g. --baseline 2")
    return value


def metric_columns(runs: pd.DataFrame) -> list[str]:
    """The numeric columns --metric can name: a diagnostic only where some run logged it."""
    return [c for c in runs.columns if pd.api.types.is_numeric_dtype(runs[c])
            and c not in ("trial",) and not (results.is_diagnostic(c) and runs[c].isna().all())]


def check_logged(runs: pd.DataFrame, metric: str, choices: list[str] | None = None) -> None:
    """UserError when `metric` is an attention diagnostic that no run logged: runs from before
    issue 14 have none, and a table or figure of NaN would say nothing. `choices`: the metrics
    to offer instead (default: every column --metric can name)."""
    if not results.is_diagnostic(metric) or metric in metric_columns(runs):
        return
    logged = [c for c in metric_columns(runs) if results.is_diagnostic(c)]
    if not logged:
        raise UserError(f"--metric {metric}: no run logged it, the runs predate attention "
                        "diagnostics (issue 14) or ran with train.diag_batches=0; rerun them with "
                        "this qknorm, or pick one of: "
                        f"{', '.join(choices or metric_columns(runs))}")
    why = {"gamma": " (gamma_l<i>: only norms with a γ)",
           "p": " (p_l<i>_h<h>: only with norm.p_learnable)"}.get(metric.split("_")[0], "")
    raise UserError(f"--metric {metric}: no run logged it{why}; pick a diagnostic they logged: "
                    f"{', '.join(logged)}")


def check_columns(runs: pd.DataFrame, metric: str, by: list[str]) -> None:
    check_logged(runs, metric)
    numeric = metric_columns(runs)
    if metric not in runs.columns or metric not in numeric:
        what = "is not a numeric column" if metric in runs.columns else "is not a column"
        raise UserError(f"--metric {metric} {what} of results.csv; use one of: "
                        f"{', '.join(numeric)}")
    for key in by:
        if key not in runs.columns:
            swept = results.swept_keys(runs)
            raise UserError(f"--by {key} is not a column of results.csv; use a key that varies "
                            f"across the runs: {', '.join(swept) or 'none does'}")


def check_finished(runs: pd.DataFrame, root: Path) -> None:
    """UserError when no run has a final.json: every number of the report would be empty (and
    pandas failed on the empty columns' dtype before saying so)."""
    if (runs["status"] == results.INCOMPLETE).all():
        dirs = f"{len(runs)} run dir{'s' if len(runs) != 1 else ''}"
        raise UserError(f"no run under {root} has finished: {dirs}, no final.json in any"
                        " (runs still going, or stopped before training); report again "
                        "once a run has finished")


def load(root: Path, options: Options) -> results.Collection:
    """Collect the runs and check the options against them (UserError on any bad value).

    Resolves options.baseline in place to the run p it names (or None), with baseline_note
    saying what the default did when p = 2 was not run.
    """
    collection = results.collect(root)
    check_finished(collection.runs, root)
    check_columns(collection.runs, options.metric, options.by)
    options.baseline, options.baseline_note = baseline.resolve_baseline(collection.runs,
                                                                        options.baseline)
    runs = collection.runs
    if options.n_folds is not None:
        known = runs["data.n_folds"].dropna()
        if len(known) and (known != options.n_folds).any():
            raise UserError(f"--n-folds {options.n_folds}: the runs recorded data.n_folds = "
                            f"{', '.join(map(str, sorted(known.unique())))}; drop --n-folds")
        runs["data.n_folds"] = pd.array([options.n_folds] * len(runs), dtype="Int64")
    options.replicate_test = stats.replicate_test(runs, options.test, options.n_folds)
    return collection


# ---------------------------------------------------------------------------------------------
# the whole report

def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def has_curves(collection: results.Collection, curves: pd.DataFrame) -> bool:
    """False for a report rebuilt from a results.csv without curves.csv: the curve figures and
    curves.csv are then left as they are, not redrawn or rewritten empty."""
    return len(curves) > 0 or not collection.rebuilt


def figures(collection: results.Collection, options: Options, curves: pd.DataFrame,
            paired: pd.DataFrame | None = None,
            lr: lrsens.LRSensitivity | None = None) -> dict[str, object]:
    """Every figure; `paired` (compute's table vs the baseline) adds delta_vs_p, `lr` (its
    learning-rate reading) lr_sensitivity, attn_logit_curves and, where they apply, lr_width
    (several widths) and attn_logit_heads (per-head logits logged). The entropy and logit figures
    need runs that logged diagnostics: older runs report without them."""
    runs = collection.runs
    with_curves = has_curves(collection, curves)
    figs: dict[str, object] = {
        "loss_vs_p": plots.loss_vs_p(runs, options.metric, options.baseline, options.logx,
                                     options.by, options.replicate_test),
        "time_vs_p": plots.time_vs_p(runs, options.logx),
    }
    if with_curves:
        figs["curves"] = stepplots.curves(curves)
        figs["gamma_vs_p"] = plots.gamma_vs_p(runs, curves, options.logx, options.replicate_test)
    if paired is not None and len(paired):
        figs["delta_vs_p"] = deltaplot.delta_vs_p(paired, options.metric, options.baseline,
                                              options.logx, options.by, baseline.continuous_p(runs),
                                              options.equivalence, options.replicate_test)
    if plots.logged(runs, plots.ENTROPY) and with_curves:
        figs["entropy_vs_p"] = plots.entropy_vs_p(runs, curves, options.logx, options.by,
                                                  options.replicate_test)
        figs["entropy_curves"] = stepplots.entropy_curves(curves, runs, options.by)
    if plots.learned_p_columns(runs):
        figs["learned_p"] = plots.learned_p(runs)
    if lr is not None:
        figs["lr_sensitivity"] = lrplots.lr_sensitivity(lr)
        optional = {"attn_logit_curves": lrplots.attn_logit_curves(lr, curves),
                    "lr_width": lrplots.lr_width(lr), "attn_logit_heads": lrplots.attn_logit_heads(lr)}
        figs.update({name: fig for name, fig in optional.items() if fig is not None})
    for (name, _), study in collection.studies.items():
        if study is None:
            continue  # results.collect noted why
        study_figs, notes = studyplots.optuna_figures(study)
        collection.warnings.extend(notes)
        for kind, fig in study_figs.items():
            figs[f"optuna_{_safe(name)}_{kind}"] = fig
    return figs


def build_report(root: Path | str, options: Options | None = None) -> Report:
    """Everything in memory: validated runs, summary.md text, results.csv and figure bytes."""
    options = options or Options()
    collection = load(Path(root), options)
    curves = results.collect_curves(collection.runs, collection.root)
    collection.runs = results.add_best_step(collection.runs, curves)
    computed = compute(collection, options, curves)  # once, for the figures and summary.md
    files: dict[str, bytes] = {}
    for name, fig in figures(collection, options, curves, computed.paired,
                             computed.lr).items():
        for fmt in options.formats:
            files[f"report/{name}.{fmt}"] = plots.render(fig, fmt)
        plots.close(fig)
    summary = summarize(collection, options, curves, computed)
    tables = {"results.csv": collection.runs.to_csv(index=False).encode()}
    if has_curves(collection, curves):
        tables["curves.csv"] = curves[results.curves_csv_columns(curves)].to_csv(index=False).encode()
    races = {name: readback.settings_of(study) for (name, _), study in collection.studies.items()
             if readback.kind(study) == readback.RACE}
    races = races or (racerebuild.read_settings(collection.root) if collection.rebuilt else {})
    if races:  # so that a report rebuilt from results.csv reports the race too (racerebuild)
        tables[racerebuild.RACE_FILE] = racerebuild.settings_json(races)
    files = {**tables, "summary.md": summary.encode(), **files}
    return Report(collection.runs, summary, files)


def write_report(root: Path | str, report: Report) -> list[Path]:
    written = []
    for rel, data in report.files.items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        rundir.atomic_write_bytes(path, data)
        written.append(path)
    return written
