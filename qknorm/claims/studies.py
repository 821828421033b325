"""Records over studies with a reading of their own, each through the report's module for it.

  lr     a sweep over the learning rate (qknorm.report.lrsens): per norm group its LR
         sensitivity with the 95% interval, the max stable lr, the lowest mean loss over the lr
         grid (ℓ*) and where, the range of the largest attention logit over the grid, Δ
         sensitivity vs the reference with t p and Holm p; per group and lr (row GROUP@LR) the
         mean loss and the largest attention logit; over a width ladder also per width and arm
         (rows WIDTH/ARM and WIDTH/ARM@LR, with the runs counted and diverged); row all: the
         runs counted over the study, Δ against the reference of the same width; with
         `equivalence` (δ) and `alpha` each Δ's words (qknorm.claims.verdicts: more, less,
         level, not shown; `p`: each asked both ways, Holm over the setting's arms: the report's
         Holm p) and its
         `contrasts`: named differences of sensitivity paired by replicate (a rise across width,
         a gap's change, one arm against another, a row of another source), worded alike
  arch   two architectures on the same folds (qknorm.report.archcompare, from the comparison's
         comparison.csv): per arm (row ARCH/P) the mean with its interval and the steps to the
         reference's loss; per p (row between/P) ARCH − reference arch; the interaction
  bench  a committed scripts/bench.py JSON: per ratio of step times (its name without spaces)
         the median, quartiles and the percent it adds; per variant (its name) the median step
         in seconds, and with `steps` (and `runs`) the hours a run (the days a preset) would take;
         per variant of `speedup_cpu` (row cpu_time/NAME) its CPU time over the reference's; per
         report dir of --report (row DIR/statistics, DIR/report) corrected and paired seconds
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from hydra_racing_sweeper import multitest

from qknorm.claims import verdicts
from qknorm.claims.inputs import Rows, Runs, alpha, replicate_test, row_key, selected, setting
from qknorm.claims.records import Record
from qknorm.errors import UserError
from qknorm.report import archcompare, lrsens, stats


def lr(record: Record, runs: Runs) -> Rows:
    source = setting(record, "source")
    frame = selected(runs.runs(source, record), setting(record, "where", None), record)
    reading = lrsens.compute(frame, runs.curves(source, record),
                             test=replicate_test(frame, record))
    if reading is None:
        raise UserError(f"record {record.id}: its runs do not sweep {lrsens.LR}")
    keys, rows = reading.keys, {}
    for _, r in reading.summary.iterrows():
        at = _group(reading.by_lr, r, keys)
        best = at[at[lrsens.LR] == r["best_lr"]].iloc[0]
        rows[lrsens.label(r, keys)] = {
            "sensitivity": r["sensitivity_mean"], "low": r["sensitivity_ci_low"],
            "high": r["sensitivity_ci_high"], "max_stable_lr": r["max_stable_lr"],
            "diverged": int(r["diverged"]), "best_loss": best["val_loss_mean"],
            "best_lr": best[lrsens.LR], "logit_min": at["attn_logit_max"].min(),
            "logit_max": at["attn_logit_max"].max()}
        for _, a in at.iterrows():
            rows[f"{lrsens.label(r, keys)}@{a[lrsens.LR]:g}"] = {
                "loss": a["val_loss_mean"], "logit": a["attn_logit_max"]}
    for _, r in reading.paired.iterrows():
        rows[lrsens.label(r, keys)].update({
            "delta": r["delta_mean"], "dlow": r["delta_ci_low"], "dhigh": r["delta_ci_high"],
            "t_p": r["t_pvalue"], "holm": r["holm_pvalue"]})
    rows.update(_by_width(reading))
    at = reading.by_lr  # the runs counted over the study
    rows["all"] = {"runs": int(at["runs"].sum()), "diverged": int(at["diverged"].sum()),
                   "completed": int(at["runs"].sum() - at["diverged"].sum())}
    if setting(record, "equivalence", None) is not None:
        _worded(record, runs, reading, rows)
    return rows


def replicate_values(reading: lrsens.LRSensitivity) -> dict[str, pd.Series]:
    """Each group's sensitivity per replicate (indexed by seed and fold), named as its rows
    are: WIDTH/SERIES over a width ladder, else the group's label."""
    reps = reading.replicates.reset_index(drop=True)
    widths = lrsens.has_widths(reading)
    names = (lrsens.series_names(reps, reading.keys) if widths else
             pd.Series([lrsens.label(r, reading.keys) for _, r in reps.iterrows()]))
    if widths:
        names = reps[lrsens.WIDTH].astype(int).astype(str) + "/" + names
    column = lrsens.READINGS["val_loss"]
    return {name: reps.loc[names == name].set_index(lrsens.REPLICATE)[column].dropna()
            for name in names.unique()}


def _differences(values: dict[str, pd.Series], side: str, where: str) -> pd.Series:
    """One side of a contrast: a row's replicates, or `ROW - ROW` (a gap), per replicate."""
    terms = [t.strip() for t in side.split(" - ")]
    missing = [t for t in terms if t not in values]
    if missing or len(terms) > 2:
        raise UserError(f"{where}: {side!r} is not ROW or ROW - ROW of its rows "
                        f"({', '.join(values)})")
    out = values[terms[0]]
    if len(terms) == 2:
        out = out - values[terms[1]]
    return out.dropna()


def _worded(record: Record, runs: Runs, reading: lrsens.LRSensitivity, rows: Rows) -> None:
    """Each Δ row's and each contrast's words (verdicts.call), in place: one-sided p each way
    Holm-adjusted within its family (a setting's arms; a contrast's `family`)."""
    equivalence, level = float(setting(record, "equivalence")), alpha(record)
    test = reading.test
    values = replicate_values(reading)
    items: dict[str, tuple[str, list[float]]] = {}  # row -> (family, differences)
    table = lrsens.width_view(reading)
    if table is not None:
        for _, v in table[~table["reference"]].iterrows():
            name = f"{v['width']}/{v['series']}"
            base = table[table["reference"] & (table["width"] == v["width"])]
            if len(base):
                ref = f"{v['width']}/{base.iloc[0]['series']}"
                items[name] = (str(v["width"]), _paired(values[name], values[ref]))
    elif reading.reference in values:  # one setting: each group against the reference
        for _, r in reading.paired.iterrows():
            name = lrsens.label(r, reading.keys)
            items[name] = ("all", _paired(values[name], values[reading.reference]))
    for name, spec in (setting(record, "contrasts", None) or {}).items():
        where = f"record {record.id}, contrast {name}"
        if not isinstance(spec, dict) or not {"a", "b"} <= set(spec):
            raise UserError(f"{where}: give it a: ROW and b: ROW (or SOURCE:ROW)")
        a = _differences(values, str(spec["a"]), where)
        b = _side_of(record, runs, values, str(spec["b"]), where)
        items[str(name)] = (f"contrast {spec.get('family', name)}", _paired(a, b))
        rows[str(name)] = {}
    families: dict[str, list[str]] = {}
    for name, (family, _) in items.items():
        families.setdefault(family, []).append(name)
    for names in families.values():
        ps = [verdicts.one_sided(items[n][1], test) for n in names]
        for n, adjusted in zip(names, verdicts.holm_both_ways(ps), strict=True):
            d = items[n][1]
            low, high = test.interval(d, stats.CONFIDENCE) if len(d) >= 2 else (math.nan,) * 2
            tost = multitest.tost_interval(d, level, test) if len(d) >= 2 else (math.nan,) * 2
            mean = float(np.mean(d)) if d else math.nan
            fields = {"p": adjusted,
                      "call": verdicts.call(adjusted, mean, low, high, *tost, equivalence, level)}
            if n in rows and "delta" not in rows[n]:  # a contrast: its difference too
                fields.update({"n": len(d), "delta": mean,
                               "dlow": low, "dhigh": high})
            rows.setdefault(n, {}).update(fields)





def _paired(a: pd.Series, b: pd.Series) -> list[float]:
    common = a.index.intersection(b.index)
    return (a[common] - b[common]).tolist()


def _side_of(record: Record, runs: Runs, values: dict[str, pd.Series], side: str,
             where: str) -> pd.Series:
    """A contrast's b: a row of this record's runs, or SOURCE:ROW of another source's (read
    with the same where and test)."""
    if ":" not in side:
        return _differences(values, side, where)
    source, row = side.split(":", 1)
    frame = selected(runs.runs(source, record), setting(record, "where", None), record)
    other = lrsens.compute(frame, runs.curves(source, record),
                           test=replicate_test(frame, record))
    if other is None:
        raise UserError(f"{where}: source {source} does not sweep {lrsens.LR}")
    return _differences(replicate_values(other), row, where)


def _by_width(reading: lrsens.LRSensitivity) -> Rows:
    """A width ladder's rows as the report's width table reads them (lrsens.width_view): per
    width and arm (row WIDTH/ARM) the sensitivity, best and max stable lr, Δ vs the reference
    of that width; per width, arm and lr (row WIDTH/ARM@LR) the mean loss, the largest
    attention logit, the runs and how many diverged. None without several widths."""
    view = lrsens.width_view(reading)
    if view is None:
        return {}
    rows: Rows = {}
    for _, v in view.iterrows():
        rows[f"{v['width']}/{v['series']}"] = {
            "sensitivity": v["mean"], "low": v["ci_low"], "high": v["ci_high"],
            "best_lr": v["best_lr"], "max_stable_lr": v["max_stable_lr"],
            "delta": v["delta_mean"], "dlow": v["delta_ci_low"], "dhigh": v["delta_ci_high"],
            "t_p": v["t_pvalue"], "holm": v["holm_pvalue"]}
    at = reading.by_lr
    for (_, a), series in zip(at.iterrows(), lrsens.series_names(at, reading.keys), strict=True):
        rows[f"{int(a[lrsens.WIDTH])}/{series}@{a[lrsens.LR]:g}"] = {
            "loss": a["val_loss_mean"], "logit": a["attn_logit_max"], "runs": int(a["runs"]),
            "diverged": int(a["diverged"])}
        group = rows[f"{int(a[lrsens.WIDTH])}/{series}"]  # its runs over the grid, counted
        group["runs"] = group.get("runs", 0) + int(a["runs"])
        group["diverged"] = group.get("diverged", 0) + int(a["diverged"])
    return rows


def _group(frame: pd.DataFrame, row: pd.Series, keys: list[str]) -> pd.DataFrame:
    """frame's rows of `row`'s group: equal on every key, NaN matching NaN (norm=none's p)."""
    match = pd.Series(True, index=frame.index)
    for key in keys:
        match &= frame[key].isna() if pd.isna(row[key]) else frame[key] == row[key]
    return frame[match]


def arch(record: Record, runs: Runs) -> Rows:
    source = setting(record, "source")
    frame = runs.runs(source, record)
    test = replicate_test(frame, record)
    folds = archcompare.read_folds(runs.folder(source, record) / "comparison.csv")
    reference = archcompare.parse_arm(setting(record, "reference"))
    other, p = setting(record, "arch"), float(setting(record, "p"))
    rows: Rows = {}
    for _, r in archcompare.arms(folds, test).iterrows():
        rows[f"{r[archcompare.ARCH]}/{row_key(r['norm.p'])}"] = {
            "n": int(r["n"]), "mean": r["best_val_loss_mean"], "low": r["best_val_loss_ci_low"],
            "high": r["best_val_loss_ci_high"], "steps": r[f"{archcompare.STEPS_TO_REF}_mean"],
            "reached": int(r["reached"])}
    between = archcompare.between_archs(folds, other, reference.arch, test)
    for _, r in between[between["metric"] == "best_val_loss"].iterrows():
        rows[f"between/{row_key(r['norm.p'])}"] = {
            "delta": r["delta"], "low": r["ci_low"], "high": r["ci_high"], "t_p": r["t_pvalue"]}
    for _, r in between[between["metric"] == archcompare.STEPS_TO_REF].iterrows():
        rows[f"between/{row_key(r['norm.p'])}"]["steps"] = r["delta"]
    both = archcompare.interaction(folds, other, reference.arch, p, reference.p, test)
    for _, r in both[both["metric"] == "best_val_loss"].iterrows():
        rows["interaction"] = {"delta": r["delta"], "low": r["ci_low"], "high": r["ci_high"],
                               "t_p": r["t_pvalue"]}
    return rows


def bench(record: Record, runs: Runs) -> Rows:
    what = "a scripts/bench.py JSON with ratios, variants or a report"
    data = runs.file(record, what)
    if not isinstance(data, dict):
        raise UserError(f"record {record.id}: {setting(record, 'file')} is not {what}")
    ratios, variants = data.get("ratios", {}), data.get("variants", [])
    rows: Rows = {name.replace(" ", ""): {"median": r["median"], "q1": r["q1"], "q3": r["q3"],
                                          "percent": 100 * (r["median"] - 1) if r["median"] else
                                          math.nan}
                  for name, r in ratios.items()}
    for r in data.get("report", []):  # --report: per report dir, its statistics and the whole
        for part, times in (("statistics", r["statistics"]), ("report", r["report"])):
            rows[f"{Path(r['dir']).name}/{part}"] = {
                "paired_s": times["paired_s"]["median"],
                "corrected_s": times["corrected_s"]["median"],
                "ratio": times["corrected / paired"]["median"]}
    for name, r in data.get("speedup_cpu", {}).items():  # a step's CPU time / the reference's
        rows[f"cpu_time/{name}"] = {"relative": 1 / r["median"]}
    steps, n_runs = setting(record, "steps", None), setting(record, "runs", None)
    for v in variants:  # a step's median time, and what a run (and a preset's runs) would take
        step_s = v["step_ms"]["median"] / 1000
        row = rows[v["name"]] = {"step_s": step_s}
        if steps is not None:
            row["run_h"] = step_s * int(steps) / 3600
            if n_runs is not None:
                row["days"] = row["run_h"] * int(n_runs) / 24
    return rows
