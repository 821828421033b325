"""The report of a sweep (docs/design.md, "The report"): results.csv, summary.md and report/ figures.

`build_report` validates every input and renders every file in memory; `write_report` then
writes them one by one atomically. A bad --metric, --by or --baseline therefore fails before
anything is written, and a reader never sees half a file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from hydra_plugins.qknorm_sweeper import _race as sweeper_race
from qknorm import plots, race, results, rundir, stats
from qknorm.errors import UserError

DEFAULT_METRIC = "best_val_loss"
TIME_METRIC = "wall_time_s"
STATUS_MEANING = {**rundir.STATUS_MEANING, rundir.INCOMPLETE: "no final.json: killed, or still running"}


@dataclass
class Options:
    metric: str = DEFAULT_METRIC
    baseline: float | str | None = stats.AUTO  # a p, "auto" (2, or see resolve_baseline), None
    baseline_note: str = ""  # set by load(): what "auto" did when p = 2 was not run
    by: list[str] = field(default_factory=list)
    logx: bool = False
    formats: tuple[str, ...] = ("png", "pdf")


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
    if text.strip().lower() == stats.AUTO:
        return stats.AUTO
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


def load(root: Path, options: Options) -> results.Collection:
    """Collect the runs and check the options against them (UserError on any bad value).

    Resolves options.baseline in place to the run p it names (or None), with baseline_note
    saying what the default did when p = 2 was not run.
    """
    collection = results.collect(root)
    check_columns(collection.runs, options.metric, options.by)
    options.baseline, options.baseline_note = stats.resolve_baseline(collection.runs,
                                                                     options.baseline)
    return collection


# ---------------------------------------------------------------------------------------------
# summary.md

def _num(x: float) -> str:
    """4 decimals for losses, fewer for seconds and tokens/s."""
    if x is None or pd.isna(x):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.4f}" if abs(x) < 10 else f"{x:.2f}" if abs(x) < 1000 else f"{x:.0f}"


def _error(error) -> str:
    return "" if pd.isna(error) else str(error).replace("|", "/")[:120]  # | would split the row


def _pval(x: float) -> str:
    return "-" if x is None or pd.isna(x) else f"{x:.3g}"


def _group_label(row: pd.Series, keys: list[str]) -> list[str]:
    out = []
    for key in keys:
        value = row[key]
        out.append(stats.format_p(value) if key == "norm.p" else str(value))
    return out


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _per_group_table(summary: pd.DataFrame, keys: list[str], metric: str) -> str:
    rows = []
    for _, r in summary.iterrows():
        rows.append(_group_label(r, keys) + [
            str(int(r["n"])), _num(r[f"{metric}_mean"]), _num(r[f"{metric}_std"]),
            f"[{_num(r[f'{metric}_ci_low'])}, {_num(r[f'{metric}_ci_high'])}]"])
    return markdown_table(keys + ["n", "mean", "std", "95% t-interval"], rows)


def _delta_table(paired: pd.DataFrame, keys: list[str]) -> str:
    rows = []
    for _, r in paired.iterrows():
        rows.append(_group_label(r, keys) + [
            str(int(r["n_pairs"])), _num(r["delta_mean"]),
            f"[{_num(r['delta_ci_low'])}, {_num(r['delta_ci_high'])}]",
            _pval(r["t_pvalue"]), _pval(r["holm_pvalue"]), _pval(r["wilcoxon_pvalue"]),
            "-" if pd.isna(r["d_z"]) else f"{r['d_z']:.2f}", r["note"] or ""])
    return markdown_table(keys + ["pairs", "mean Δ", "95% t-interval of Δ", "paired t p",
                          "Holm p", "Wilcoxon p", "d_z", "note"], rows)


def _holm_sentence(paired: pd.DataFrame, baseline: str) -> str:
    """Which family the Holm column corrects over, and what that buys, in one sentence."""
    m = int(paired["t_pvalue"].notna().sum())
    if m == 0:
        return "No comparison has a t-test (too few pairs), so Holm p is empty."
    untested = len(paired) - m
    left_out = f" ({untested} without a t-test left out)" if untested else ""
    return (f"Holm p: Holm–Bonferroni step-down over the {m} comparison(s) against p={baseline} "
            f"in this table{left_out}, on the paired-t p-values; it controls the family-wise "
            "error rate: calling a difference wherever Holm p < α makes any false call with "
            "probability at most α, whatever the dependence between the tests (they share the "
            "baseline's runs). d_z = mean Δ / sd(Δ) (sd with ddof=1): Cohen's paired effect "
            "size, Δ in units of its spread over pairs.")


@dataclass
class Statistics:
    """Every number summary.md shows, each computed once (qknorm.stats), before any formatting."""

    keys: list[str]  # the group columns: norm.p, plus norm.kind and --by keys when they vary
    excluded: dict[str, int]  # status -> runs left out of statistics
    folded: pd.Series  # label (norm=none, p=2) -> completed runs counted once (results.duplicates)
    per_metric: dict[str, pd.DataFrame]  # metric -> group_summary (the chosen metric, wall time)
    best: pd.DataFrame
    paired: pd.DataFrame | None  # None without a baseline
    # final and best val loss side by side: None for runs collected without their curves
    readings: pd.DataFrame | None
    readings_paired: dict[str, pd.DataFrame]  # reading -> paired Δ vs the baseline
    disagreement: stats.Disagreement | None
    ranking: pd.DataFrame | None  # None without curves, or with --by
    fits: pd.DataFrame | None  # a continuous search: stats.fit_minima per --by series; else None
    attention: pd.DataFrame | None = None  # stats.attention_summary: empty without diagnostics


def compute(collection: results.Collection, options: Options,
            curves: pd.DataFrame | None = None) -> Statistics:
    runs, metric, by = collection.runs, options.metric, options.by
    per_metric = {m: stats.group_summary(runs, [m], by) for m in dict.fromkeys([metric, TIME_METRIC])}
    readings = stats.readings_summary(runs, by) if "best_step" in runs else None
    compared = [metric, *(stats.READINGS if readings is not None else ())]
    paired = ({m: stats.paired_vs_baseline(runs, m, options.baseline, by)
               for m in dict.fromkeys(compared)} if options.baseline is not None else {})
    return Statistics(
        keys=stats.group_keys(runs, by), excluded=stats.excluded(runs),
        folded=results.duplicates(runs), per_metric=per_metric,
        best=stats.best(per_metric[metric], metric, by), paired=paired.get(metric),
        ranking=stats.ranking_by_step(curves) if curves is not None and not by else None,
        readings=readings, readings_paired={m: paired[m] for m in stats.READINGS if m in paired},
        disagreement=stats.readings_disagree(readings) if readings is not None else None,
        fits=stats.fit_minima(runs, metric, by) if stats.continuous_p(runs) else None,
        attention=stats.attention_summary(runs, curves, by) if curves is not None else None,
    )


def summarize(collection: results.Collection, options: Options,
              curves: pd.DataFrame | None = None, computed: Statistics | None = None) -> str:
    """summary.md: the statistics of `compute` (computed here unless given), formatted section
    by section."""
    s = computed or compute(collection, options, curves)
    runs, metric = collection.runs, options.metric
    out = [f"# Results: {collection.root.as_posix()}", "", _counts_line(runs, s.excluded), ""]
    out += _folded_note(s.folded)
    if s.fits is not None:
        out += ["The p values come from a continuous search: loss_vs_p draws each trial as a "
                "point with a quadratic fit in log p and its 95% band per series.", ""]
    counts = s.per_metric[metric]["n"]
    if len(counts) and counts.max() < 2:
        out += ["One completed run per p: no std, intervals or tests. Replicate each p over folds "
                "or seeds for error bars (e.g. `data.fold=0,1,2`, or the sweeper's `replicates`).",
                ""]
    for m, table in s.per_metric.items():
        out += [f"## {m} per p", "", _per_group_table(table, s.keys, m) if len(table)
                else "no completed runs", ""]
    if options.baseline_note:
        out += [options.baseline_note, ""]
    if s.paired is not None:
        out += _delta_section(s.paired, s.keys, metric, options.baseline)
    if s.readings is not None and len(s.readings):
        out += _readings_section(s, metric, options.baseline)
    if s.ranking is not None and len(s.ranking):
        out += _ranking_section(s.ranking)
    if s.fits is not None:
        out += _fit_section(s.fits, options.by, metric)
    if s.attention is not None and len(s.attention):
        out += _attention_section(s.attention, s.keys)
    out += _best_section(s.best, s.keys, metric)
    for (name, _), study in collection.studies.items():
        held = sweeper_race.elimination(study) if study is not None else None
        if held is not None:  # a race's elimination table and the compute it spent
            out += race.report_lines(held, name)
    bad = runs[runs["status"] != rundir.COMPLETED]
    if len(bad):
        rows = [[r.run_dir, r.status, _error(r.error)] for r in bad.itertuples()]
        out += ["## Excluded runs", "", markdown_table(["run_dir", "status", "error"], rows), ""]
    if collection.warnings:
        out += ["## Notes", ""] + [f"- {w}" for w in collection.warnings] + [""]
    return "\n".join(out)


def _counts_line(runs: pd.DataFrame, excluded: dict[str, int]) -> str:
    n_done = int((runs["status"] == rundir.COMPLETED).sum())  # repeats too: _folded_note
    line = f"{len(runs)} runs, {n_done} completed (only completed runs count in statistics)"
    if excluded:
        line += "; excluded: " + ", ".join(f"{n} {s} ({STATUS_MEANING[s]})"
                                           for s, n in excluded.items())
    return line + "."


def _folded_note(folded: pd.Series) -> list[str]:
    if not len(folded):
        return []
    labels = ", ".join(f"{k} ×{n}" for k, n in folded.items())
    return [f"Counted once: {int(folded.sum())} completed run(s) repeat another run's effective "
            f"config, seed and fold ({labels}), the same deterministic run again, not a "
            "replicate; results.csv's duplicate_of names the run each repeats.", ""]


def _delta_section(paired: pd.DataFrame, keys: list[str], metric: str,
                   baseline: float) -> list[str]:
    b = stats.format_p(baseline)
    return [f"## Δ {metric} vs p={b} (group − baseline), paired by (seed, data.fold)", "",
            "Negative Δ: lower than the baseline. p-values: paired t-test "
            "(scipy.stats.ttest_rel) and Wilcoxon signed-rank (scipy.stats.wilcoxon), "
            "two-sided.", "",
            *([_holm_sentence(paired, b), "", _delta_table(paired, keys)] if len(paired) else
              ["no completed group to compare with the baseline"]), ""]


def _readings_section(s: Statistics, metric: str, baseline: float | None) -> list[str]:
    """Best and final val loss per group, their paired Δ, and whether they order p alike."""
    r = s.readings
    delta_cols = ["n_pairs", "delta_mean", "delta_ci_low", "delta_ci_high"]
    paired = {m: r[s.keys].merge(t[s.keys + delta_cols], on=s.keys, how="left")
              for m, t in s.readings_paired.items()}  # row i of each is row i of r
    rows = []
    for i, row in r.iterrows():
        cells = _group_label(row, s.keys) + [str(int(row["n"]))]
        for m in stats.READINGS:
            cells.append(f"{_num(row[f'{m}_mean'])} [{_num(row[f'{m}_ci_low'])}, "
                         f"{_num(row[f'{m}_ci_high'])}]")
            if m == "best_val_loss":
                cells.append(_num(row["best_step_median"]).removesuffix(".00"))
        cells.append(f"{row['best_at_end']:.0%}" if pd.notna(row["best_at_end"]) else "-")
        for m in paired:
            d = paired[m].loc[i]
            cells.append("-" if pd.isna(d["n_pairs"]) else
                         f"{_num(d['delta_mean'])} [{_num(d['delta_ci_low'])}, "
                         f"{_num(d['delta_ci_high'])}]")
        rows.append(cells)
    header = s.keys + ["n", "best: mean [95% t-interval]", "best step (median)",
                       "final: mean [95% t-interval]", "runs best at the last eval"]
    if baseline is not None:
        header += [f"Δ best vs p={stats.format_p(baseline)} [95%]",
                   f"Δ final vs p={stats.format_p(baseline)} [95%]"]
    return ["## Final and best val loss side by side", "",
            "best = the lowest val loss of the run's evals, reached at `best step`; final = the "
            "val loss at the last step. Δ: group − baseline, paired by (seed, data.fold), "
            f"95% t-interval. `--metric` picks the reading that ranks (here: {metric}).", "",
            markdown_table(header, rows), "", _disagreement_line(s), ""]


def _disagreement_line(s: Statistics) -> str:
    d, r = s.disagreement, s.readings
    if d is None:
        return "Both readings order the groups alike."

    def names(rows: list[int], with_step: bool = False) -> str:
        return ", ".join(" ".join(f"{k}={v}" for k, v in zip(s.keys, _group_label(r.loc[i], s.keys)))
                         + (
            f" (best at step {_num(r.loc[i, 'best_step_median']).removesuffix('.00')})"
            if with_step else "") for i in rows) or "none"
    line = (f"**The two readings order the groups differently** (Kendall τ = {d.kendall_tau:.2f} "
            f"between their means): lowest best val loss: {names([d.best_by_best])}; lowest "
            f"final val loss: {names([d.best_by_final])}.")
    if d.improving and d.past_best:
        line += (f" Likely cause: runs still improving at the end ({names(d.improving)}: most "
                 f"had their best eval last) against runs past their best "
                 f"({names(d.past_best, with_step=True)}), which overfit after it; the curves "
                 "figure shows both.")
    return line


def _ranking_section(ranking: pd.DataFrame) -> list[str]:
    return ["## Ranking of p by mean val_loss at each eval", "",
            "Does it settle? Kendall's τ compares each eval's order with the last "
            "eval's (1 = the same order).", "",
            markdown_table(["step", "order (best first)", "Kendall τ vs last eval"],
                           [[str(r.step), r.order, f"{r.kendall_tau:.2f}"]
                            for r in ranking.itertuples()]), ""]


def _fit_section(fits: pd.DataFrame, by: list[str], metric: str) -> list[str]:
    """Where each series' quadratic fit in log p is lowest (the curve of loss_vs_p), with the 95%
    interval of the fitted mean there."""
    rows = []
    for _, r in fits.iterrows():
        if pd.isna(r["p"]):
            cells = ["-", "-", "-", f"no fit: fewer than {stats.MIN_FIT_POINTS} trials at 3 or "
                     "more finite p"]
        else:
            cells = [stats.format_p(r["p"], 3), _num(r["mean"]),
                     f"[{_num(r['low'])}, {_num(r['high'])}]",
                     f"the {r['edge']} finite p run" if r["edge"] else ""]
        rows.append([str(r[k]) for k in by] + [str(int(r["trials"]))] + cells)
    return [f"## Quadratic fit of {metric} in log p (loss_vs_p's curve)", "",
            "Fitted to the trial means at finite p; a trend to read the search by, not a model.",
            "", markdown_table(list(by) + ["trials", "lowest at p", "fitted mean",
                                           "95% interval", "note"], rows), ""]


def _attention_section(summary: pd.DataFrame, keys: list[str]) -> list[str]:
    """The attention diagnostics at step 0 and at the end, mean ± sd over each group's runs."""
    def cell(row: pd.Series, name: str) -> str:
        sd = row[f"{name}_std"]
        return _num(row[f"{name}_mean"]) + ("" if pd.isna(sd) else f" ± {_num(sd)}")

    columns = {"entropy/ln(t+1), step 0": "attn_entropy_frac_step0",
               "entropy/ln(t+1), end": "attn_entropy_frac",
               "max weight, step 0": "attn_max_weight_step0", "max weight, end": "attn_max_weight",
               "logit sd, step 0": "logit_std_step0", "logit sd, end": "logit_std", "γ, end": "gamma"}
    rows = [_group_label(r, keys) + [str(int(r["n"]))] + [cell(r, c) for c in columns.values()]
            for _, r in summary.iterrows()]
    return ["## Attention at step 0 and at the end", "",
            "Means over layers, heads and rows t ≥ 1 of the causal attention on the first "
            "train.diag_batches val batches (README, \"Attention diagnostics\"), then mean ± sd "
            "over the runs: entropy as a fraction of its maximum ln(t+1) (1: uniform over the "
            "visible tokens), the largest weight of a row, the sd of a row's logits.", "",
            markdown_table(keys + ["runs", *columns], rows), ""]


def _best_section(best: pd.DataFrame, keys: list[str], metric: str) -> list[str]:
    out = [f"## Best (lowest mean {metric})", ""]
    if not len(best):
        out += ["no completed runs", ""]
    for _, r in best.iterrows():
        label = ", ".join(f"{k}={v}" for k, v in zip(keys, _group_label(r, keys)))
        out += [f"- {label}: mean {_num(r[f'{metric}_mean'])}, 95% t-interval "
                f"[{_num(r[f'{metric}_ci_low'])}, {_num(r[f'{metric}_ci_high'])}], "
                f"n={int(r['n'])}"]
    return out + [""]


# ---------------------------------------------------------------------------------------------
# the whole report

def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def figures(collection: results.Collection, options: Options, curves: pd.DataFrame,
            paired: pd.DataFrame | None = None) -> dict[str, object]:
    """Every figure; `paired` (compute's table vs the baseline) adds delta_vs_p. The entropy
    figures need runs that logged attention diagnostics: older runs report without them."""
    runs = collection.runs
    figs: dict[str, object] = {
        "loss_vs_p": plots.loss_vs_p(runs, options.metric, options.baseline, options.logx,
                                     options.by),
        "curves": plots.curves(curves),
        "time_vs_p": plots.time_vs_p(runs, options.logx),
        "gamma_vs_p": plots.gamma_vs_p(runs, curves, options.logx),
    }
    if paired is not None and len(paired):
        figs["delta_vs_p"] = plots.delta_vs_p(paired, options.metric, options.baseline,
                                              options.logx, options.by, stats.continuous_p(runs))
    if plots.logged(runs, plots.ENTROPY):
        figs["entropy_vs_p"] = plots.entropy_vs_p(runs, curves, options.logx, options.by)
        figs["entropy_curves"] = plots.entropy_curves(curves, runs, options.by)
    if plots.learned_p_columns(runs):
        figs["learned_p"] = plots.learned_p(runs)
    for (name, _), study in collection.studies.items():
        if study is None:
            continue  # results.collect noted why
        study_figs, notes = plots.optuna_figures(study)
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
    for name, fig in figures(collection, options, curves, computed.paired).items():
        for fmt in options.formats:
            files[f"report/{name}.{fmt}"] = plots.render(fig, fmt)
        plots.close(fig)
    summary = summarize(collection, options, curves, computed)
    files = {"results.csv": collection.runs.to_csv(index=False).encode(),
             "summary.md": summary.encode(), **files}
    return Report(collection.runs, summary, files)


def write_report(root: Path | str, report: Report) -> list[Path]:
    written = []
    for rel, data in report.files.items():
        path = Path(root) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        rundir.atomic_write_bytes(path, data)
        written.append(path)
    return written
