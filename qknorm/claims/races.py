"""Records over a sweep's course: a race's looks, the runs it stopped at a rung, and how the
order of p settles over the evals; each through the code that made or reports them.

  race     the race's looks replayed on its recorded runs (hydra_racing_sweeper.race.looks.replay_race, as
           scripts/race_replay.py replays them): per look and p, Δ vs the leader, one-sided p,
           Holm p, the 90% interval, what the look did and its strength; the leader per look;
           where the race ended
  rungs    each run a race stopped inside its fold: its gap at that step to the best run of the
           same fold there (looks.stop_at_rung, the rule the race stopped it by)
  room     how far behind its fold's best run every run was at each eval step, runs of p the
           grid calls worse apart from the rest (rung_error_rates.room, the --room table the
           rungs were chosen on), and the runs over a margin of `rungs`
  ranking  Kendall's τ between each eval's order of p and the last's (stats.ranking_by_step),
           with its range over spans of steps
  search   a racing search's answer: every proposal against the incumbent the record names
           (which the study's ledger chose; the ledger is not committed), on the folds both ran,
           Holm over the comparisons (hydra_racing_sweeper.race.final_judgements, the sweeper's own at
           this commit); the record's `rules` says so and how that differs from the rules the
           search ran under (its summary.md); on the incumbent's row, range_low and range_high:
           the lowest and highest p over it and the proposals level with it, what the search
           cannot tell apart from its best (readback.level_range, the rule the console line gives)
"""

from __future__ import annotations

import math

from hydra_racing_sweeper import decision
from hydra_racing_sweeper.race import DROPPED, LEVEL, driver, intensify, looks, verdicts
from hydra_racing_sweeper.readback import level_range

from qknorm.claims.inputs import Rows, Runs, alpha, replicate_test, row_key, setting
from qknorm.claims.records import Record
from qknorm.errors import UserError
from qknorm.report import p_labels, stats
from qknorm.research import recorded_folds, rung_error_rates
from qknorm.rundir import COMPLETED


def race(record: Record, runs: Runs) -> Rows:
    path = runs.folder(setting(record, "source"), record) / "results.csv"
    values, n_folds, layout = recorded_folds.completed_by_fold(path, setting(record, "metric"))
    option, given = setting(record, "test"), setting(record, "n_folds", None)
    test = recorded_folds.replicate_test(option, n_folds > 1, layout, given)
    alpha, delta = float(setting(record, "alpha")), float(setting(record, "equivalence"))
    base = setting(record, "baseline", None)
    base = None if base is None else float(base)
    r = looks.replay_race(sorted(values), values, set(), n_folds,
                     int(setting(record, "min_replicates")), alpha, base, equivalence=delta,
                     test=test)
    rows: Rows = {}
    for lk in r.looks:
        rows[f"look{lk.n}"] = {"leader": row_key(lk.leader)}
        for c, t in lk.tests.items():
            did = driver.look_verdict(lk, c, base, delta)  # the baseline level: stays, LEVEL
            # A call's strength (dropped or level); a candidate that stays made none.
            how = looks.test_outcome(t, alpha, delta).strength if did in (LEVEL, DROPPED) else ""
            rows[f"{lk.n}:{row_key(c)}"] = {
                "delta": t.delta, "p": t.p, "holm": t.p_adjusted, "low": t.low, "high": t.high,
                "outcome": did, "strength": how,
                "call": decision.Outcome(did, how).worded(),
                "room": decision.room(t.low, t.high, delta)}
    rows["end"] = {"folds": r.looks[-1].n if r.looks else 0,
                   "alive": ", ".join(row_key(c) for c in r.alive)}
    return rows


def rungs(record: Record, runs: Runs) -> Rows:
    source = setting(record, "source")
    frame, curves = runs.runs(source, record), runs.curves(source, record)
    metric = setting(record, "metric", "val_loss")
    labels = p_labels(frame["norm.p"])  # two stopped p alike at six digits keep two rows
    rows = {}
    for _, run in frame[frame["status"] != COMPLETED].iterrows():
        mine = curves[curves["run_dir"] == run["run_dir"]]
        step = float(mine["step"].max())
        fold = frame[(frame["data.fold"] == run["data.fold"]) & (frame["run_dir"] != run["run_dir"])]
        there = curves[curves["run_dir"].isin(fold["run_dir"]) & (curves["step"] == step)]
        value = float(mine.loc[mine["step"] == step, metric].iloc[0])
        stop = looks.stop_at_rung(value, dict(zip(there["norm.p"], there[metric])), -math.inf)
        rows[labels[run["norm.p"]]] = {"fold": int(run["data.fold"]), "step": int(step),
                                       "gap": stop.delta if stop else math.nan,
                                       "best": labels[stop.best] if stop else "-"}
    return rows


def room(record: Record, runs: Runs) -> Rows:
    """How far behind its fold's best run each run was at each eval step, split by whether its
    p's grid (`grid`) calls that p worse (rung_error_rates.room, its --room table): per step
    (row STEP) the largest gap of a run of a p not worse and the smallest of a worse p's, each
    with its p and fold; per run over a margin of `rungs` (row stop/P/FOLD) its rung and gap."""
    result = rung_error_rates.room(
        runs.folder(setting(record, "source"), record), runs.folder(setting(record, "grid"), record),
        float(setting(record, "baseline")), alpha(record), float(setting(record, "equivalence")),
        rung_error_rates.parse_rungs(str(setting(record, "rungs"))), setting(record, "n_folds", None))
    rows: Rows = {}
    for step, cell in result["steps"].items():
        rows[str(step)] = {}
        for side, key in (("not_worse", "not_worse_largest"), ("worse", "worse_smallest")):
            x = cell[key] or {}
            rows[str(step)] |= {f"{side}_gap": x.get("gap", math.nan),
                                f"{side}_p": row_key(x["p"]) if x else "-",
                                f"{side}_fold": x.get("fold", "-"), f"{side}_runs": x.get("runs", 0)}
    for s in result["stops"]:
        rows[f"stop/{row_key(s['p'])}/{s['fold']}"] = {
            "rung": s["rung"], "gap": s["gap"], "worse_on_grid": "yes" if s["worse_on_grid"] else "no"}
    return rows


def ranking(record: Record, runs: Runs) -> Rows:
    curves = runs.curves(setting(record, "source"), record)
    table = stats.ranking_by_step(curves, setting(record, "metric", "val_loss"))
    rows: Rows = {str(int(r.step)): {"tau": r.kendall_tau, "order": r.order}
                  for r in table.itertuples()}
    for first, last in setting(record, "spans", []):
        span = table[(table["step"] >= first) & (table["step"] <= last)]["kendall_tau"]
        rows[f"{first}-{last}"] = {"tau_min": float(span.min()), "tau_max": float(span.max())}
    settled = table["kendall_tau"].to_numpy() >= 1 - 1e-12
    # the first step from which every eval orders p as the last one does
    since = next((int(table["step"].iloc[i]) for i in range(len(settled)) if settled[i:].all()),
                 None)
    rows["settled"] = {"step": since if since is not None else "-"}
    return rows


def search(record: Record, runs: Runs) -> Rows:
    frame = runs.runs(setting(record, "source"), record)
    setting(record, "rules")  # which rules it is read under: a page block says it with the answer
    metric, named = setting(record, "metric"), str(setting(record, "incumbent"))
    test = replicate_test(frame, record)
    # each p as the report labels it: two alike at six digits (a sampler's) keep two rows
    labels = p_labels(frame["norm.p"])
    proposals = [intensify.Proposal(
        label, {int(r["data.fold"]): float(r[metric]) for _, r in group.iterrows()
                if r["status"] == COMPLETED},
        stopped=bool((group["status"] != COMPLETED).any()), live=False)
        for p, label in labels.items()
        for group in [frame[frame["norm.p"] == p]]]
    names = [prop.key for prop in proposals]
    if named not in names:
        raise UserError(f"record {record.id}: incumbent {named} is not a p of its runs "
                        f"({', '.join(names)})")
    rules = intensify.Rules(int(frame["data.fold"].nunique()), 1,
                            float(setting(record, "alpha")),
                            float(setting(record, "equivalence")), test)
    answer = intensify.final_judgements(intensify.Search(incumbent=names.index(named)), proposals, rules)
    rows: Rows = {names[i]: {"outcome": j.outcome, "n": j.n, "delta": j.delta, "p": j.p,
                             "low": j.low, "high": j.high} for i, j in answer.items()}
    # the best with what it cannot be told apart from: the search's own rule, on its answers
    ps = list(labels)
    spans = level_range([{"answer": verdicts.outcome_answer(j.outcome),
                                "params": {"norm.p": float(ps[i])}} for i, j in answer.items()])
    if "norm.p" in spans:
        rows[named] |= {"range_low": spans["norm.p"][0], "range_high": spans["norm.p"][1]}
    return rows
