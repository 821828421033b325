"""The replays' tables as records (qknorm.claims.replays, replay_table --record): a table and
its template filled from the record's rows are one text; hand-made JSONs give the counts
written here; a count nudged in a committed replay fails the check naming the record."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from qknorm.claims import check, records, replays
from qknorm.claims.inputs import Runs
from qknorm.research import continuous, replay_table
from tests.helpers import REPO

PLACE = re.compile(r"\{\{(\S+) (\S+) (\S+)\}\}")
SCORE = {"seeds": 20, "best_not_grid_worse": 17, "best_is_grid_best": 12,
         "worse_all_grid_worse": 19, "level_all_within_delta": 20, "steps_median": 25500.0,
         "distinct_p_median": 7.0}
GRIDS = {"landscapes": {
    "calibrated/spike": {"best": 2.5, "worse": [1.0, 4.0], "searches": {
        "race_search_tpe": {"26667": SCORE}, "tpe": {"26667": {**SCORE, "seeds": 5}}}}}}


def filled(template: str, rows: dict) -> str:
    """A template's placeholders replaced by the rows' values, printed as the tables print."""
    return PLACE.sub(lambda m: replay_table.printed(m[2], m[3], rows[m[2]][m[3]]), template)


def test_a_grid_replays_tables_are_its_rows_printed():
    """(The tables' cells by hand: tests/test_search_replay.py.)"""
    rows = replay_table.grid_rows(GRIDS, "26667")
    assert rows["calibrated/spike"] == {"best": 2.5, "n_worse": 2}
    assert rows["calibrated/spike/tpe"]["seeds"] == 5
    assert replay_table.compact(GRIDS, "26667").splitlines()[2] == (
        "| calibrated/spike | 2.5, 2 p | 17/20 | 17/5 | 19/20, 20/20 |")
    for layout in (replay_table.table, replay_table.compact):
        template = layout(GRIDS, "26667", replay_table.placeholders("r"))
        assert "{{r calibrated/spike/tpe best_not_grid_worse}}/{{r calibrated/spike/tpe seeds}}" \
            in template
        assert filled(template, rows) == layout(GRIDS, "26667")


def test_a_continuous_replays_counts_are_its_landscapes_gaps(tmp_path):
    """f rises by 0.01 per 0.1 of x from its floor at x = 0.5 (p = 2): with δ = 0.02, p = 2 and
    p = 2.5 (x 0.4, gap 0.01) are within δ/2, p = 4 (x 0.25, gap 0.025) within neither."""
    lands = tmp_path / "lands.json"
    xs = [i / 10 for i in range(11)]
    lands.write_text(json.dumps({"delta": 0.02, "landscapes": [
        {"name": "calibrated/v", "noise": "calibrated", "x": xs,
         "f": [abs(x - 0.5) / 10 for x in xs]}]}))

    def entry(seed, best, worse=(), level=()):
        return {"seed": seed, "best_p": best, "worse": list(worse), "level": list(level),
                "undecided": [], "steps": 26000}

    data = {"landscapes": {"calibrated/v": {"racing": [
        entry(0, 2.0, worse=[4.0]), entry(1, 2.5, level=[2.0]), entry(2, 4.0, worse=[2.0])]}}}
    rows = replay_table.continuous_rows(data, lands)
    got = rows["calibrated/v/racing"]
    assert (got["best_within_delta"], got["best_within_half"]) == (2, 2)
    # seed 2 calls p = 2 worse than its best p = 4: f(2) < f(4), a false call
    assert (got["worse_true"], got["level_within_delta"]) == (2, 3)
    template = replay_table.continuous(data, lands, cell=replay_table.placeholders("c"))
    assert filled(template, rows) == replay_table.continuous(data, lands)
    assert "| calibrated/v | 2, 2 | - | - | 2, 3 |" in replay_table.continuous(data, lands)


def test_a_nudged_replay_count_fails_naming_the_record(tmp_path):
    committed = records.load(REPO)
    shutil.copytree(REPO / "docs/results/landscapes", tmp_path / "landscapes")
    committed.results = tmp_path
    rec = committed.records["continuous.qknorm"]
    assert check.record(rec, Runs(committed)) == []
    out = tmp_path / "landscapes/continuous_qknorm_replay.json"
    data = json.loads(out.read_text())
    seeds = data["landscapes"]["qknorm/flat"]["racing"]
    seeds[0]["worse"] = [seeds[0]["best_p"] * 2]  # flat: f equal everywhere, a worse call false
    out.write_text(json.dumps(data))
    assert check.record(rec, Runs(committed)) == [
        "continuous.qknorm [qknorm/flat/racing] worse_true: the record says 20, the runs give 19 "
        "(replays.yaml)"]


def test_an_error_rate_record_keys_each_cell_and_names_each_tests_rates(tmp_path):
    rates = {"rows": [
        {"folds": 5, "rho": 0.2, "test": "paired", "k": 2, "delta/sigma": None, "world": "level",
         "any worse": 0.315, "mean blocks run": 4.26},
        {"folds": 5, "rho": 0.2, "test": "corrected", "k": 2, "delta/sigma": None,
         "world": "level", "any worse": 0.173, "mean blocks run": 4.56},
        {"folds": 10, "rho": 0.1, "test": "paired", "k": 8, "delta/sigma": 1.0, "world": "gap",
         "level": 0.026}]}
    (tmp_path / "rates.json").write_text(json.dumps(rates))
    book = records.load(REPO)
    book.results = tmp_path
    rec = records.Record("r", "error_rates", "", {"file": "rates.json"}, {}, "r.yaml")
    assert replays.error_rates(rec, Runs(book)) == {
        "5/0.20/2/level/off": {"paired_any_worse": 0.315, "paired_mean_blocks_run": 4.26,
                               "corrected_any_worse": 0.173, "corrected_mean_blocks_run": 4.56},
        "10/0.10/8/gap/1": {"paired_level": 0.026}}


def test_a_power_record_reads_the_named_sigmas_rows_and_each_grids_spread(tmp_path):
    power = {"grids": [{"name": "qknorm", "near": {"median": 0.009, "min": 0.007, "max": 0.012},
                        "all": {"median": 0.02, "min": 0.007, "max": 0.05}}],
             "sigmas": [{"label": "qknorm, far", "rows": [{"K": 5, "worse": 0.1}],
                         "sigma": 0.012, "smallest_K": {"worse": 9, "level": None}},
                        {"label": "near", "rows": [{"K": 5, "worse": 0.69, "level": 0.7}],
                         "sigma": 0.009, "smallest_K": {"worse": 6, "level": 6}}],
             "cost": [{"K": 5, "runs": 40, "qknorm": 1.18, "calibrated": 1.14}],
             "decision": {"sigma_label": "near", "sigma": 0.008, "K": 6, "K_holm_worst": 10},
             "delta": 0.02, "jobs": 2,
             "seeds": {"rows": [{"K": 5, "seeds": 3, "runs_per_p": 15, "worse": 0.84}]}}
    (tmp_path / "power.json").write_text(json.dumps(power))
    book = records.load(REPO)
    book.results = tmp_path
    rec = records.Record("r", "power", "", {"file": "power.json", "sigma": "near"}, {}, "r.yaml")
    assert replays.power(rec, Runs(book)) == {
        "grid/qknorm": {"near_median": 0.009, "near_min": 0.007, "near_max": 0.012,
                        "all_median": 0.02, "all_min": 0.007, "all_max": 0.05},
        "5": {"worse": 0.69, "level": 0.7, "runs": 40, "hours": 1.18, "hours_calibrated": 1.14},
        # δ/σ = 0.02 / 0.008; a run's seconds = 1.18 h × 3600 × 2 jobs / 40 runs
        "decision": {"sigma": 0.008, "K": 6, "K_holm_worst": 10, "delta_over_sigma": 2.5,
                     "run_s": pytest.approx(212.4)},
        "sigma/qknorm/far": {"sigma": 0.012, "K_worse": 9, "K_level": "-"},  # None: never reached
        "sigma/near": {"sigma": 0.009, "K_worse": 6, "K_level": 6},
        "seeds/5x3": {"runs_per_p": 15, "worse": 0.84}}


def test_short_of_bar_names_each_rule_it_misses():
    """Of 20 seeds the bar is 19 for within δ, worse calls and level calls, and SMAC3's count
    for within δ/2 where SMAC3 ran."""
    ok = {"seeds": 20, "best_within_delta": 19, "best_within_half": 17, "worse_true": 19,
          "level_within_delta": 20}
    racing = {"a": ok, "b": ok | {"best_within_delta": 18}, "c": ok | {"worse_true": 18},
              "d": ok | {"level_within_delta": 18}, "e": ok, "f": ok}
    smac3 = {"e": {"best_within_half": 18}, "f": {"best_within_half": 17}}
    assert continuous.short_of_bar(racing, smac3) == ["b", "c", "d", "e"]


def test_a_candidate_record_sums_its_files_and_names_the_landscapes_short(tmp_path):
    """Two landscapes files, one seed each: the racing best within δ/2 on q (gap 0), within δ
    only on c (gap 0.015); SMAC3's best on c within δ/2, so c is short of the bar."""
    xs = [i / 10 for i in range(11)]
    for noise in ("qknorm", "calibrated"):
        (tmp_path / f"{noise}.json").write_text(json.dumps({"delta": 0.02, "landscapes": [
            {"name": f"{noise}/v", "noise": noise, "x": xs, "f": [abs(x - 0.5) / 10 for x in xs]}]}))

    def out(name, method, best):
        return {"landscapes": {name: {method: [{"seed": 0, "best_p": best, "worse": [],
                                                "level": [], "undecided": [], "steps": 1}]}}}
    # x = 0.5 is p = 2 (gap 0); x = 0.35 (gap 0.015) is p = 1/0.35; SMAC3 at p = 2 on c
    files = {"rq.json": out("qknorm/v", "racing", 2.0),
             "rc.json": out("calibrated/v", "racing", 1 / 0.35),
             "sc.json": out("calibrated/v", "smac3", 2.0)}
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    book = records.load(REPO)
    book.results = tmp_path
    rec = records.Record("r", "candidate", "", {
        "files": ["rq.json", "rc.json"], "landscapes": ["qknorm.json", "calibrated.json"],
        "smac3": ["rq.json", "sc.json"]}, {}, "r.yaml")
    assert replays.candidate(rec, Runs(book)) == {"all": {
        "seeds": 1, "landscapes": 2, "best_within_delta": 2, "best_within_half": 1,
        "short": "c/v", "short_noises": "calibrated"}}
    # SMAC3 not run on c's landscapes (null): c is held to within δ and the calls alone
    rec.spec["smac3"] = ["rq.json", None]
    assert replays.candidate(rec, Runs(book))["all"]["short"] is None


def test_a_replays_score_counts_its_seeds_against_the_grids_answer_by_hand():
    """search_replay.score over three hand-made seeds against a grid whose best is p = 2 and
    whose worse p are 1, 8 and 16 (so half of them is 1.5): #1 right throughout (it calls the
    grid's worse p, all of them; its level p = 4 exactly δ behind the best: within, the bound is
    closed); #2 calls one of the three worse
    (fewer than half) and picks p = 4; #3 picks a grid-worse p, calls p = 4 worse (wrong) and a
    p 0.5 behind level (not within δ)."""
    from qknorm.research import grid_runs, search_replay

    truth = grid_runs.GridAnswer(2.0, {1.0: 0.3, 2.0: 0.0, 4.0: 0.02, 8.0: 0.5, 16.0: 0.6},
                                 frozenset({1.0, 8.0, 16.0}))
    outcomes = [
        {"best_p": 2.0, "worse": [1.0, 8.0, 16.0], "level": [4.0], "steps": 100,
         "distinct_p": 4},
        {"best_p": 4.0, "worse": [1.0], "level": [], "steps": 200, "distinct_p": 3},
        {"best_p": 1.0, "worse": [4.0], "level": [8.0], "steps": 300, "distinct_p": 2}]
    assert search_replay.score(outcomes, truth, 0.02) == {
        "seeds": 3, "best_not_grid_worse": 2, "best_is_grid_best": 1,
        "best_p": {"1.0": 1, "2.0": 1, "4.0": 1}, "worse_all_grid_worse": 2,
        "level_all_within_delta": 2, "calls_half_of_grid_worse": 1, "steps_median": 200,
        "steps_max": 300, "distinct_p_median": 3}
