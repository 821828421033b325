"""summary.md: the statistics of qknorm.report.computed, formatted section by section, the
race's elimination table included."""

from __future__ import annotations

import math

import pandas as pd
from hydra_racing_sweeper import readback
from hydra_racing_sweeper.multitest import CORRECTED, PAIRED_T, ReplicateTest
from hydra_racing_sweeper.race import verdicts
from hydra_racing_sweeper.units import num

from qknorm import rundir
from qknorm.report import (
    lrsection,
    paxis,
    racerebuild,
    readings,
    results,
    searchsection,
    stats,
)
from qknorm.report.computed import DEFAULT_EQUIVALENCE, TIME_METRIC, Options, Statistics, compute
from qknorm.report.tables import markdown_table, pval
from qknorm.report.timing import TIMING

STATUS_MEANING = {**rundir.STATUS_MEANING, rundir.INCOMPLETE: "no final.json: killed, or still running"}


def _error(error) -> str:
    return "" if pd.isna(error) else str(error).replace("|", "/")[:120]  # | would split the row


def _group_label(row: pd.Series, keys: list[str]) -> list[str]:
    out = []
    for key in keys:
        value = row[key]
        out.append(paxis.format_p(value) if key == "norm.p" else str(value))
    return out


def _per_group_table(summary: pd.DataFrame, keys: list[str], metric: str) -> str:
    rows = []
    for _, r in summary.iterrows():
        rows.append(_group_label(r, keys) + [
            str(int(r["n"])), num(r[f"{metric}_mean"]), num(r[f"{metric}_std"]),
            f"[{num(r[f'{metric}_ci_low'])}, {num(r[f'{metric}_ci_high'])}]"])
    return markdown_table(keys + ["n", "mean", "std", "95% t-interval"], rows)


def _timing_table(timing: pd.DataFrame, keys: list[str], metric: str) -> str:
    """A timing per group: median and range of its runs (qknorm.report.timing says why)."""
    rows = [_group_label(r, keys) + [str(int(r["n"]))]
            + [num(r[f"{metric}_{s}"]) for s in TIMING]
            for _, r in timing.iterrows()]
    return markdown_table(keys + ["n", *TIMING], rows)


def _delta_table(paired: pd.DataFrame, keys: list[str]) -> str:
    verdicts = "verdict" in paired.columns  # computed with an equivalence δ
    rows = []
    for _, r in paired.iterrows():
        rows.append(_group_label(r, keys) + [
            str(int(r["n_pairs"])), num(r["delta_mean"]),
            f"[{num(r['delta_ci_low'])}, {num(r['delta_ci_high'])}]",
            pval(r["t_pvalue"]), pval(r["holm_pvalue"]), pval(r["wilcoxon_pvalue"]),
            "-" if pd.isna(r["d_z"]) else f"{r['d_z']:.2f}", r["note"] or ""]
            + ([f"[{num(r['tost_low'])}, {num(r['tost_high'])}]", r["verdict"]]
               if verdicts else []))
    return markdown_table(keys + ["pairs", "mean Δ", "95% t-interval of Δ", "t p",
                          "Holm p", "Wilcoxon p", "d_z", "note"]
                          + (["90% t-interval of Δ", "verdict"] if verdicts else []), rows)


def _verdict_sentence(equivalence: float) -> str:
    """What the verdict column says and at which levels, in one sentence."""
    return (f"Verdict (lower is better): `level within ±δ` where the 90% t-interval of Δ "
            f"(the test above) lies inside ±δ, δ = {equivalence:g} (`--equivalence`, default "
            f"{DEFAULT_EQUIVALENCE:g} nats; the metric's units): TOST, two one-sided "
            "t-tests at 5% each, per comparison, not corrected over the table, and first: a "
            "difference surely smaller than δ is level even where its Holm p shows it; else "
            "`worse` / `better` where Holm p ≤ 0.05 (the family above); else `undecided` "
            "(neither shown different nor shown within ±δ: more pairs, or a larger δ, would be "
            "needed to say). The rule is hydra_racing_sweeper.decision's, the same for the race, the search "
            "and the results pages.")


def _holm_sentence(paired: pd.DataFrame, baseline: str) -> str:
    """Which family the Holm column corrects over, and what that buys, in one sentence."""
    m = int(paired["t_pvalue"].notna().sum())
    if m == 0:
        return "No comparison has a t-test (too few pairs), so Holm p is empty."
    untested = len(paired) - m
    left_out = f" ({untested} without a t-test left out)" if untested else ""
    return (f"Holm p: Holm–Bonferroni step-down over the {m} comparison(s) against p={baseline} "
            f"in this table{left_out}, on the t-test's p-values; it controls the family-wise "
            "error rate: calling a difference wherever Holm p ≤ α makes any false call with "
            "probability at most α, whatever the dependence between the tests (they share the "
            "baseline's runs). d_z = mean Δ / sd(Δ) (sd with ddof=1): Cohen's paired effect "
            "size, Δ in units of its spread over pairs.")


def summarize(collection: results.Collection, options: Options,
              curves: pd.DataFrame | None = None, computed: Statistics | None = None) -> str:
    """summary.md: the statistics of `compute` (computed here unless given), formatted section
    by section."""
    s = computed or compute(collection, options, curves)
    runs, metric = collection.runs, options.metric
    out = [f"# Results: {collection.root.as_posix()}", ""]
    if collection.covers:  # a resumed sweep's dir: the study's runs in its other dirs too
        out += [collection.covers, ""]
    out += [_counts_line(runs, s.excluded), "", test_line(s.test, runs), ""]
    out += _folded_note(s.folded)
    if s.fits is not None:
        out += ["The p values come from a continuous search: loss_vs_p draws each trial as a "
                + ("point with a quadratic fit in log p and its 95% band per series."
                   if s.fits["p"].notna().any() else
                   f"point; too few trials for a quadratic fit (it needs {stats.MIN_FIT_POINTS} "
                   "at 3 or more finite p)."), ""]
    counts = s.per_metric[metric]["n"]
    if len(counts) and counts.max() < 2:
        out += ["One completed run per p: no std, intervals or tests. Replicate each p over folds "
                "or seeds for error bars (e.g. `data.fold=0,1,2`, or the sweeper's `replicates`).",
                ""]
    for m, table in s.per_metric.items():
        out += [f"## {m} per p", "", _per_group_table(table, s.keys, m) if len(table)
                else "no completed runs", ""]
    if s.timing is not None:
        out += [f"## {TIME_METRIC} per p", "", _timing_table(s.timing, s.keys, TIME_METRIC)
                if len(s.timing) else "no completed runs", ""]
    if options.baseline_note:
        out += [options.baseline_note, ""]
    if s.paired is not None:
        out += _delta_section(s.paired, s.keys, metric, options.baseline, options.equivalence,
                              s.test)
    if s.readings is not None and len(s.readings):
        out += _readings_section(s, metric, options.baseline)
    if s.ranking is not None and len(s.ranking):
        out += _ranking_section(s.ranking)
    searches = {name: (readback.answer_rows(study.get_trials(), readback.settings_of(study)),
                       readback.settings_of(study))
                for (name, _), study in collection.studies.items()
                if readback.kind(study) == readback.SEARCH}
    answer = _search_answer(searches)
    if s.fits is not None:
        out += _fit_section(s.fits, options.by, metric) + answer
    if s.attention is not None and len(s.attention):
        out += _attention_section(s.attention, s.keys)
    if s.lr is not None:
        out += lrsection.section(s.lr)
    out += _best_section(s.best, s.keys, metric) + answer
    out += _study_sections(collection, curves, searches)
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


def test_line(test: ReplicateTest, runs: pd.DataFrame) -> str:
    """Which test made every interval, p-value and verdict below, and over what."""
    if test.name == CORRECTED:
        seeds = stats.completed(runs)["seed"].nunique() > 1
        return (f"Test: the {test.label()}, over folds (a replicate is a data.fold"
                f"{', its seeds averaged first' if seeds else ''}); `--test paired` for the "
                "plain paired t.")
    return ("Test: the paired t (replicates independent: a replicate is a (seed, data.fold) "
            "pair); `--test corrected` where they are folds of one corpus.")


def _delta_section(paired: pd.DataFrame, keys: list[str], metric: str,
                   baseline: float, equivalence: float | None = None,
                   test: ReplicateTest = PAIRED_T) -> list[str]:
    b = paxis.format_p(baseline)
    said = ([_verdict_sentence(equivalence), ""]
            if equivalence is not None and "verdict" in paired.columns else [])
    return [f"## Δ {metric} vs p={b} (group − baseline), paired by {stats.pairing(test)}", "",
            f"Negative Δ: lower than the baseline. p-values, two-sided: the {test.short()} (the "
            "test above) and the Wilcoxon signed-rank (scipy.stats.wilcoxon; it treats the "
            "pairs as independent).", "",
            *([_holm_sentence(paired, b), "", *said, _delta_table(paired, keys)] if len(paired)
              else ["no completed group to compare with the baseline"]), ""]


def _readings_section(s: Statistics, metric: str, baseline: float | None) -> list[str]:
    """Best and final val loss per group, their paired Δ, and whether they order p alike."""
    r = s.readings
    delta_cols = ["n_pairs", "delta_mean", "delta_ci_low", "delta_ci_high"]
    paired = {m: r[s.keys].merge(t[s.keys + delta_cols], on=s.keys, how="left")
              for m, t in s.readings_paired.items()}  # row i of each is row i of r
    rows = []
    for i, row in r.iterrows():
        cells = _group_label(row, s.keys) + [str(int(row["n"]))]
        for m in readings.READINGS:
            cells.append(f"{num(row[f'{m}_mean'])} [{num(row[f'{m}_ci_low'])}, "
                         f"{num(row[f'{m}_ci_high'])}]")
            if m == "best_val_loss":
                cells.append(num(row["best_step_median"]).removesuffix(".00"))
        cells.append(f"{row['best_at_end']:.0%}" if pd.notna(row["best_at_end"]) else "-")
        for m in paired:
            d = paired[m].loc[i]
            cells.append("-" if pd.isna(d["n_pairs"]) else
                         f"{num(d['delta_mean'])} [{num(d['delta_ci_low'])}, "
                         f"{num(d['delta_ci_high'])}]")
        rows.append(cells)
    header = s.keys + ["n", "best: mean [95% t-interval]", "best step (median)",
                       "final: mean [95% t-interval]", "runs best at the last eval"]
    if baseline is not None:
        header += [f"Δ best vs p={paxis.format_p(baseline)} [95%]",
                   f"Δ final vs p={paxis.format_p(baseline)} [95%]"]
    return ["## Final and best val loss side by side", "",
            "best = the lowest val loss of the run's evals, reached at `best step`; final = the "
            "val loss at the last step. Δ: group − baseline, paired by replicate, 95% "
            f"interval of the test above. `--metric` picks the reading that ranks (here: {metric}).", "",
            markdown_table(header, rows), "", _disagreement_line(s), ""]


def _disagreement_line(s: Statistics) -> str:
    d, r = s.disagreement, s.readings
    if d is None:
        return "Both readings order the groups alike."

    def names(rows: list[int], with_step: bool = False) -> str:
        return ", ".join(" ".join(f"{k}={v}" for k, v in zip(s.keys, _group_label(r.loc[i], s.keys)))
                         + (
            f" (best at step {num(r.loc[i, 'best_step_median']).removesuffix('.00')})"
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
            cells = [paxis.format_p(r["p"], 3), num(r["mean"]),
                     f"[{num(r['low'])}, {num(r['high'])}]",
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
        return num(row[f"{name}_mean"]) + ("" if pd.isna(sd) else f" ± {num(sd)}")

    columns = {"entropy/ln(t+1), step 0": "attn_entropy_frac_step0",
               "entropy/ln(t+1), end": "attn_entropy_frac",
               "max weight, step 0": "attn_max_weight_step0", "max weight, end": "attn_max_weight",
               "logit sd, step 0": "logit_std_step0", "logit sd, end": "logit_std", "γ, end": "gamma"}
    rows = [_group_label(r, keys) + [str(int(r["n"]))] + [cell(r, c) for c in columns.values()]
            for _, r in summary.iterrows()]
    return ["## Attention at step 0 and at the end", "",
            "Means over layers, heads and rows t ≥ 1 of the causal attention on the first "
            "train.diag_batches val batches (docs/design.md, \"Attention diagnostics\"), then mean ± sd "
            "over the runs: entropy as a fraction of its maximum ln(t+1) (1: uniform over the "
            "visible tokens), the largest weight of a row, the sd of a row's logits.", "",
            markdown_table(keys + ["runs", *columns], rows), ""]


def _study_sections(collection: results.Collection, curves: pd.DataFrame | None,
                    searches: dict[str, tuple[list[dict] | None, dict]]) -> list[str]:
    """A race's elimination and compute spent, a racing search's answer, from their studies;
    a rebuilt report's race replayed from its runs (racerebuild)."""
    out = []
    for (name, _), study in collection.studies.items():
        if readback.kind(study) == readback.RACE:
            out += race_section(readback.elimination(study), name)
        elif name in searches:
            out += searchsection.section(*searches[name], name)
    if collection.rebuilt and curves is not None:
        for name, settings in racerebuild.read_settings(collection.root).items():
            out += race_section(racerebuild.elimination(collection.runs, curves, settings), name)
            out[-1:] = [f"Rebuilt from results.csv, curves.csv and {racerebuild.RACE_FILE} "
                        "(qknorm/report/racerebuild.py): the race replayed by the sweeper's "
                        "driver; a stop's best at the rung is the best of its replicate's "
                        "other runs at that step, all of them (the order in which they reached "
                        "it is not recorded).", ""]
    return out


def _search_answer(searches: dict[str, tuple[list[dict] | None, dict]]) -> list[str]:
    """Under the lowest mean and the fit, for a racing search: they are not its answer, which
    is one best compared with every proposal on the replicates both ran (the lowest mean
    may be over fewer replicates; the fit is a reading aid)."""
    out = []
    for name, (rows, _) in searches.items():
        best = next((r for r in rows or () if r["answer"] == verdicts.BEST), None)
        if best is not None:
            out.append(f"Study {name} is a racing search: its answer is {readback.short(best)}"
                       f"{readback.range_words(rows)} (section Search below), compared "
                       "with every proposal on the replicates both ran; a lowest mean above "
                       "may be over fewer replicates, and the fit is a reading aid.")
    return [*out, ""] if out else []


def _best_section(best: pd.DataFrame, keys: list[str], metric: str) -> list[str]:
    out = [f"## Best (lowest mean {metric})", ""]
    if not len(best):
        out += ["no completed runs", ""]
    for _, r in best.iterrows():
        label = ", ".join(f"{k}={v}" for k, v in zip(keys, _group_label(r, keys)))
        out += [f"- {label}: mean {num(r[f'{metric}_mean'])}, 95% t-interval "
                f"[{num(r[f'{metric}_ci_low'])}, {num(r[f'{metric}_ci_high'])}], "
                f"n={int(r['n'])}"]
    return out + [""]


# ---------------------------------------------------------------------------------------------
# a race's section (the race itself: hydra_racing_sweeper/race/looks.py)

def _count(x: float) -> str:
    """A total with thousands separators; "-" where the runs did not report it."""
    return f"{x:,.0f}" if x and math.isfinite(x) else "-"


def race_conclusion(e: readback.Elimination) -> str:
    """The race's conclusion in one sentence, each kind of exit named for what it is: a drop is
    a test against the leader; a stop is the margin rule at a rung, not a test."""
    def names(outcome: str) -> str:
        return ", ".join(r["candidate"] for r in e.rows if r["outcome"] == outcome) or "none"

    def answers(answer: str) -> str:
        return ", ".join(r["candidate"] for r in e.rows if r["answer"] == answer) or "none"
    left = [r for r in e.rows if r["outcome"] == verdicts.SURVIVED]
    best = min(left, key=lambda r: r["mean"])["candidate"] if left else "none"
    return (f"Verdict: dropped as worse than the leader at a look (one-sided {e.test.short()}, "
            "Holm): "
            f"{names(verdicts.DROPPED)}; stopped at a rung, more than the margin behind the best run of "
            f"its replicate (a rule, not a test): {names(verdicts.STOPPED)}; in the race at its end: "
            f"{names(verdicts.SURVIVED)} (lowest mean: {best})."
            + (f" Level with the leader within ±{e.equivalence:g} (its {_tost_words(e)}), left "
               f"the race: {names(verdicts.LEVEL)}; in the race at its end but undecided (neither "
               f"the best nor shown worse or level): {answers(verdicts.UNDECIDED)}."
               if e.equivalence is not None else ""))


def _tost_words(e: readback.Elimination) -> str:
    return (f"{1 - 2 * e.alpha:.0%} interval of Δ ({e.test.short()}) inside ±δ, i.e. TOST at alpha "
            f"{e.alpha:g}: two one-sided tests, no correction over candidates or looks")


def race_section(e: readback.Elimination, name: str) -> list[str]:
    """summary.md's race section: the elimination table and the compute spent vs the grid."""
    header = ["candidate", "outcome", "replicates run", "dropped after / stopped in",
              "leader at that look / best at the rung", "Δ vs leader", "one-sided t p",
              "Holm-adjusted p", "mean"]
    where = {verdicts.DROPPED: lambda r: r["after"], verdicts.STOPPED: readback.stop_place}
    rows = [[r["candidate"], r["outcome"], str(r["n"]),
             where[r["outcome"]](r) if r["outcome"] in where else "-", r["leader"] or "-",
             num(r["delta"], "+.4f"), num(r["p"], ".3g"), num(r["p_adjusted"], ".3g"),
             num(r["mean"], ".4f")] for r in e.rows]
    table = markdown_table(header, rows).splitlines()
    # Each candidate's answer and what it cost, a table of its own so the one above reads as
    # it did before answers existed.
    costs = markdown_table(["candidate", "answer", "runs", "training steps", "core-seconds"],
                           [[r["candidate"], r["answer"], str(r["n"]), _count(r["steps"]),
                             _count(r["core_s"])] for r in e.rows]).splitlines()
    s, g = e.spent, e.grid
    stopped = (f"; {s['stopped']} of them stopped at a rung, counted with their partial steps"
               if s.get("stopped") else "")
    return [
        f"## Race: study {name}", "",
        f"Every candidate ran the first replicates, then after each further one every candidate "
        f"significantly worse than the leader was dropped (one-sided {e.test.short()}, Holm over the "
        f"candidates at that look; the baseline, {e.baseline or 'none here'}, is never "
        f"dropped). Replicates in order: {', '.join(e.blocks)}. For a survivor the columns give "
        "its last look. A candidate `stopped` lost inside a replicate: at a rung (a training "
        "step) its val loss was above the best other candidate's run of that replicate by "
        "more than the margin (Δ); its run stopped there and it ran no further replicate; its "
        "mean is over the replicates it completed.", "",
        *table, "", race_conclusion(e), "",
        "Answers (hydra_racing_sweeper.decision's rule, in the race's words): `worse` (dropped, or a "
        "baseline behind the leader at its last look, Holm-adjusted p <= alpha, not level), "
        + (f"`level` (within ±{e.equivalence:g} of the leader: {_tost_words(e)}; checked "
           "first), " if e.equivalence is not None else "")
        + "`best` (the leader at the last look), `undecided` (stopped at a rung, which is a "
        "rule that saves compute and tests nothing, or in the race to its end and none of "
        "these); each with the runs, training steps and core-seconds it cost (a stopped run's "
        "partial ones included).", "", *costs, "",
        f"Compute: {s['runs']} of the full grid's {g['runs']} runs "
        f"({readback.share(s['runs'], g['runs'])}{stopped}), {_count(s['steps'])} of "
        f"≈{_count(g['steps'])} "
        f"training steps ({readback.share(s['steps'], g['steps'])}), {_count(s['core_s'])} of "
        f"≈{_count(g['core_s'])} core-seconds ({readback.share(s['core_s'], g['core_s'])}; "
        "core-seconds = wall_time_s × "
        "threads per run; the grid's steps and core-seconds are estimated as each candidate's "
        "mean run times the number of replicates)."
        + (f" The race ended early: {readback.budget_words(e)}, so the survivors were not raced to the "
           "last replicate." if e.out_of_budget else ""), ""]
