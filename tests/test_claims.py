"""Claims as records (qknorm.claims): each kind recomputed on hand-made runs against numbers
worked out here by hand (t quantiles from scipy, written out), printed digits, the page blocks,
and the committed records against the committed runs."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hydra_racing_sweeper.multitest import PAIRED_T

from qknorm.claims import check, kinds, page, printed, records, verdicts
from qknorm.claims.inputs import Runs
from qknorm.errors import UserError

REPO = Path(__file__).resolve().parents[1]
T975_2 = 4.302652729749462  # scipy.stats.t.ppf(0.975, 2)
T95_2 = 2.9199855803537242  # scipy.stats.t.ppf(0.95, 2)
C = 1 / 3 + 1 / 4  # the corrected t's variance factor: 3 folds of a 5-fold layout
SHA = "abc1234" + "0" * 33
# best_val_loss by p, then fold 0, 1, 2: Δ vs p = 2 is +0.01, +0.02, +0.03 at p = 4 and
# +0.10, +0.12, +0.14 at p = 1
GRID = {2.0: [1.80, 1.85, 1.90], 4.0: [1.81, 1.87, 1.93], 1.0: [1.90, 1.97, 2.04]}
SOURCES = """
sources:
  grid: {dir: grid, commit: abc1234, command: by hand, hardware: none}
  other: {dir: other, commit: abc1234, command: by hand, hardware: none}
  race: {dir: race, commit: abc1234, command: by hand, hardware: none}
"""
TEST = "test: corrected\n    n_folds: 5"


def two_sided_p(t: float) -> float:
    """Student t with 2 degrees of freedom has the CDF 1/2 + t / (2 sqrt(2 + t²))."""
    return 1 - abs(t) / math.sqrt(2 + t * t)


def rows(values: dict[float, list[float]], status: dict | None = None) -> list[dict]:
    return [{"norm.kind": "lp", "norm.p": p, "seed": 0, "data.fold": f, "data.n_folds": 5,
             "status": (status or {}).get((p, f), "completed"), "best_val_loss": v,
             "steps": 500 if (status or {}).get((p, f)) else 2000, "run_dir": f"p{p}_f{f}",
             "wall_time_s": 100.0 + 10 * f + (1000 if (status or {}).get((p, f)) else 0),
             "threads": 1, "git_sha": SHA}
            for p, vs in values.items() for f, v in enumerate(vs)]


def write(root: Path, folder: str, runs: list[dict], curves: list[dict] | None = None) -> None:
    path = root / "docs" / "results" / folder
    path.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(runs).to_csv(path / "results.csv", index=False)
    if curves is not None:
        pd.DataFrame(curves).to_csv(path / "curves.csv", index=False)


def race_curves() -> list[dict]:
    """Val loss at steps 0, 500, 2000: at 0 the order is 1 < 4 < 2 (the last's reversed), at
    500 it is 4 < 2 < 1 (one swap; means 2.28, 2.30, 2.333), at 2000 the best val losses; p = 3
    stopped at 500 in fold 0."""
    at = {0: {1.0: 4.0, 4.0: 4.1, 2.0: 4.2}, 500: {4.0: 2.28, 2.0: 2.30, 1.0: 2.40}}
    out = [{"run_dir": f"p{p}_f{f}", "step": s, "val_loss": at[s][p] if s in at else GRID[p][f]}
           for p in GRID for f in range(3) for s in (0, 500, 2000)]
    for row in out:  # p = 1 at 2.20 in fold 2 at step 500: the best there, not in fold 0
        if row["run_dir"] == "p1.0_f2" and row["step"] == 500:
            row["val_loss"] = 2.20
    return out + [{"run_dir": "p3.0_f0", "step": s, "val_loss": v} for s, v in ((0, 4.3), (500, 2.5))]


@pytest.fixture
def book(tmp_path) -> records.Book:
    write(tmp_path, "grid", rows(GRID))
    other = {2.0: [1.81, 1.84, 1.93]}  # grid − other at p = 2: −0.01, +0.01, −0.03
    write(tmp_path, "other", rows(other))
    write(tmp_path, "race", rows({**GRID, 3.0: [2.5]}, {(3.0, 0): "pruned"}), race_curves())
    home = tmp_path / records.HOME
    home.mkdir(parents=True)
    (home / "sources.yaml").write_text(SOURCES)
    return records.load(tmp_path)


def record(book: records.Book, kind: str, spec: str) -> records.Record:
    """A record of `kind` with `spec`'s settings (YAML), read as a records file reads it."""
    path = book.results / "records" / "r.yaml"
    path.write_text(f"records:\n  r:\n    kind: {kind}\n    {spec}\n")
    return records.load(book.results.parents[1]).records["r"]


def test_printed_agrees_to_its_printed_digits():
    assert printed.agrees("0.0073", 0.00734) and not printed.agrees("0.0073", 0.00736)
    assert printed.agrees("+0.2200", 0.22004) and not printed.agrees("+0.2200", 0.22006)
    assert printed.agrees("-0.0000", 0.00003) and printed.agrees("7.26e-05", 7.2649e-05)
    assert not printed.agrees("7.26e-05", 7.2651e-05)
    assert printed.agrees("19,500", 19500) and not printed.agrees("19,500", 19501)
    assert printed.agrees("−0.0080", -0.00801)  # a page's minus
    assert printed.agrees("level within ±δ", "level within ±δ")
    assert not printed.agrees("level within ±δ", "undecided")
    assert printed.agrees("-", math.nan) and not printed.agrees("1", math.nan)
    assert printed.agrees("inf", math.inf)


def test_a_quote_rounds_the_printed_value_and_keeps_its_sign():
    assert printed.quote("+0.0331", 3) == "+0.033"
    assert printed.quote("-0.0080", 3) == "-0.008"
    assert printed.quote("0.0947", 2) == "0.09"
    assert printed.quote("2.0582", 2) == "2.06"


def test_means_record_on_hand_made_runs(book):
    got = kinds.compute(record(book, "means", f"source: grid\n    metric: best_val_loss\n    {TEST}"),
                        Runs(book))
    half = T975_2 * 0.05 * math.sqrt(C)  # p = 2: sd 0.05 over 3 folds
    assert got["2"]["n"] == 3 and got["2"]["mean"] == pytest.approx(1.85)
    assert got["2"]["low"] == pytest.approx(1.85 - half)
    assert got["2"]["high"] == pytest.approx(1.85 + half)
    assert got["1"]["mean"] == pytest.approx(1.97)
    assert got["all"]["lowest"] == "2"  # means 1.85 (p = 2), 1.87 (p = 4), 1.97 (p = 1)
    assert (got["all"]["min"], got["all"]["max"]) == pytest.approx((1.85, 1.97))


DELTAS = (f"source: grid\n    metric: best_val_loss\n    baseline: 2\n    {TEST}\n"
          "    equivalence: 0.02\n    alpha: 0.05")


def test_deltas_record_on_hand_made_runs(book):
    got = kinds.compute(record(book, "deltas", DELTAS), Runs(book))
    t4, t1 = 0.02 / (0.01 * math.sqrt(C)), 0.12 / (0.02 * math.sqrt(C))
    p4, p1 = two_sided_p(t4), two_sided_p(t1)
    four, one = got["4"], got["1"]
    assert four["delta"] == pytest.approx(0.02) and four["t_p"] == pytest.approx(p4)
    assert four["low"] == pytest.approx(0.02 - T975_2 * 0.01 * math.sqrt(C))
    assert four["tost_high"] == pytest.approx(0.02 + T95_2 * 0.01 * math.sqrt(C))
    assert one["holm"] == pytest.approx(2 * p1)  # Holm: the smaller p of 2, doubled
    assert four["holm"] == pytest.approx(max(2 * p1, p4))
    assert (one["verdict"], four["verdict"]) == ("worse", "undecided")  # 2 p1 = 0.032, p4 = 0.12
    # Strength (hydra_racing_sweeper.decision): p = 1's 95% interval clears 0 by far more than δ/10; p = 4's
    # undecided one straddles 0 with both edges over δ/10 = 0.002 away (low ≈ -0.013): clear.
    assert four["low"] < -0.002 and four["high"] > 0.002
    assert (one["strength"], four["strength"]) == ("clear", "clear")
    assert (four["below"], four["above"]) == (0, 3)
    assert got["all"]["compared"] == 2 and got["all"]["largest"] == pytest.approx(0.12)
    assert got["all"]["tally"] == "1 worse, 1 undecided"  # counted from the calls above


def test_paired_and_spread_records_pair_two_sources_by_fold(book):
    spec = (f"a: {{source: grid}}\n    b: {{source: other}}\n    metric: best_val_loss\n    "
            f"{TEST}")
    got = kinds.compute(record(book, "paired", spec), Runs(book))["2"]  # d = −.01, +.01, −.03
    assert got["delta"] == pytest.approx(-0.01)
    assert got["t_p"] == pytest.approx(two_sided_p(-0.01 / (0.02 * math.sqrt(C))))
    assert got["high"] == pytest.approx(-0.01 + T975_2 * 0.02 * math.sqrt(C))
    assert (got["below"], got["above"]) == (2, 1)
    worded = kinds.compute(record(book, "paired", spec + "\n    equivalence: 0.02"), Runs(book))
    assert worded["2"]["holm"] == pytest.approx(got["t_p"])  # one p: Holm over 1 is its p
    assert worded["2"]["call"] == "undecided"  # 90%: −0.01 ± 0.045, p 0.58
    spread = kinds.compute(record(book, "spread", "a: {source: grid}\n    b: {source: other}\n"
                                  "    metric: best_val_loss"), Runs(book))
    assert spread["2"]["max_abs"] == pytest.approx(0.03)
    assert spread["2"]["mean_diff"] == pytest.approx(-0.01)
    assert spread["all"]["n"] == 3  # only p = 2 ran on both


def test_agreement_record_counts_the_calls_two_records_share(book):
    """The grid read at δ = 0.02 and at δ = 0.05: p = 1 is worse under both (Holm p 0.032, its
    90% interval +0.12 ± 0.045 past either δ); p = 4's 90% interval, +0.02 ± 0.022, lies inside
    ±0.05 but not ±0.02: level against undecided."""
    wide = DELTAS.replace("equivalence: 0.02", "equivalence: 0.05")
    (book.results / "records" / "r.yaml").write_text(
        f"records:\n  a:\n    kind: deltas\n    {DELTAS}\n  b:\n    kind: deltas\n    {wide}\n"
        "  both:\n    kind: agreement\n    a: a\n    b: b\n")
    book = records.load(book.results.parents[1])
    got = kinds.compute(book.records["both"], Runs(book))
    assert got["1"] == {"a": "worse", "b": "worse"}
    assert got["4"] == {"a": "undecided", "b": "level within ±δ"}
    assert got["all"] == {"compared": 2, "agree": 1, "differ": "4"}


def test_best_and_heads_records_read_the_runs(book):
    """The grid's lowest best_val_loss is p = 2's fold 0 (1.80), 9 runs; `heads` over the
    columns named best_val*: one per run, so p = 2's three values 1.80, 1.85, 1.90."""
    got = kinds.compute(record(book, "best", "source: grid\n    metric: best_val_loss\n    "
                               "by: norm.p\n    reference: 4"), Runs(book))["all"]
    assert got == {"value": 1.80, "at": 2.0, "runs": 9, "completed": 9, "ratio": 0.5}
    got = kinds.compute(record(book, "heads", "source: grid\n    prefix: best_val"),
                        Runs(book))["2"]
    assert got["heads"] == 3 and (got["min"], got["max"]) == (1.80, 1.90)
    assert got["mean"] == pytest.approx(1.85) and got["fold_max"] == 1.90


def test_race_record_replays_the_looks(book):
    spec = (f"source: race\n    metric: best_val_loss\n    {TEST}\n    min_replicates: 3\n"
            "    alpha: 0.05\n    baseline: 2\n    equivalence: 0.02")
    got = kinds.compute(record(book, "race", spec), Runs(book))
    t4, t1 = 0.02 / (0.01 * math.sqrt(C)), 0.12 / (0.02 * math.sqrt(C))
    one_sided = {"1": two_sided_p(t1) / 2, "4": two_sided_p(t4) / 2}
    assert got["look3"] == {"leader": "2"}
    assert got["3:1"]["p"] == pytest.approx(one_sided["1"])
    assert got["3:1"]["holm"] == pytest.approx(2 * one_sided["1"])
    assert got["3:4"]["holm"] == pytest.approx(max(2 * one_sided["1"], one_sided["4"]))
    assert got["3:1"]["low"] == pytest.approx(0.12 - T95_2 * 0.02 * math.sqrt(C))
    assert (got["3:1"]["outcome"], got["3:4"]["outcome"]) == ("dropped", "stays")
    assert got["3:1"]["strength"] == "clear"
    assert got["end"] == {"folds": 3, "alive": "2, 4"}  # p = 3 stopped in fold 0: never looked at


def test_rungs_ranking_and_steps_records_read_the_race(book):
    runs = Runs(book)
    stopped = kinds.compute(record(book, "rungs", "source: race"), runs)
    assert stopped["3"]["step"] == 500 and stopped["3"]["best"] == "4"  # fold 0's best at 500
    assert stopped["3"]["gap"] == pytest.approx(2.50 - 2.28)
    ranking = kinds.compute(record(book, "ranking", "source: race\n    spans: [[0, 500]]"), runs)
    assert ranking["0"]["tau"] == pytest.approx(-1.0)  # reversed
    assert ranking["500"]["tau"] == pytest.approx(1 / 3)  # (2 concordant − 1 discordant) / 3
    assert ranking["0-500"] == pytest.approx({"tau_min": -1.0, "tau_max": 1 / 3})
    assert ranking["settled"] == {"step": 2000}
    spent = kinds.compute(record(book, "steps", "source: race\n    grid_folds: 5\n"
                                 "    grid_steps: 2000"), runs)["all"]
    assert (spent["steps"], spent["grid"]) == (9 * 2000 + 500, 4 * 5 * 2000)
    # completed runs only (100, 110, 120 s by fold; the stopped run's 1100 s is not one)
    assert (spent["wall_min"], spent["wall_median"], spent["wall_max"]) == (100, 110, 120)
    assert spent["percent"] == pytest.approx(46.25)
    # every run's wall time × 1 thread: 3 p × (100 + 110 + 120) s, and the stopped one's 1100 s
    assert spent["core_h"] == pytest.approx((3 * 330 + 1100) / 3600)


def test_room_record_splits_the_race_runs_gaps_by_the_grids_worse_p(book):
    """race_curves at step 500, gap to the fold's best: fold 0 p = 1 0.12, p = 3 0.22, p = 4 0;
    fold 1 p = 1 0.12, p = 4 0; fold 2 p = 1 0 (the best), p = 4 0.08. On the grid (corrected
    t, 3 of 5 folds, one-sided, Holm over p = 1 and 4) p = 1 is worse: t = 0.12 / (0.02
    sqrt(1/3 + 1/4)) = 7.86, p 0.0079, Holm 0.016; p = 4 is not: t = 2.62, p 0.060."""
    got = kinds.compute(record(book, "room", "source: race\n    grid: grid\n    baseline: 2\n"
                               "    alpha: 0.05\n    equivalence: 0.02\n    rungs: '500:0.1'"),
                        Runs(book))
    at = got["500"]
    assert (at["not_worse_p"], at["not_worse_fold"], at["not_worse_runs"]) == ("3", 0, 4)
    assert at["not_worse_gap"] == pytest.approx(0.22)
    assert (at["worse_p"], at["worse_fold"], at["worse_runs"]) == ("1", 2, 3)
    assert at["worse_gap"] == pytest.approx(0.0)
    stops = {k: v for k, v in got.items() if k.startswith("stop/")}
    assert sorted(stops) == ["stop/1/0", "stop/1/1", "stop/3/0"]  # over 0.1 at step 500
    assert stops["stop/1/1"]["gap"] == pytest.approx(0.12)
    assert (stops["stop/1/0"]["worse_on_grid"], stops["stop/3/0"]["worse_on_grid"]) == ("yes", "no")


def test_paper_record_quotes_the_papers_losses(book):
    got = kinds.compute(record(book, "paper", "claim: the paper"), Runs(book))
    assert got["4"]["loss"] == 1.357461  # arXiv 2602.05006's table
    assert got["4"]["delta"] == pytest.approx(1.357461 - 1.40506)
    # runs of 360-363 s on its GPU: 80 runs one after another at their mean, 8.0 h
    assert got["run"] == pytest.approx({"min_s": 360, "max_s": 363, "grid_h": 80 * 361.5 / 3600})


def test_check_names_the_record_and_both_values(book):
    spec = f"source: grid\n    metric: best_val_loss\n    {TEST}"
    rec = record(book, "means", spec + '\n    rows: {"2": {mean: "1.8500", n: 3}, "7": {n: 1}}')
    assert check.record(rec, Runs(book)) == [
        "r [7]: the runs give no such row (they give 1, 2, 4, all)"]
    rec = record(book, "means", spec + '\n    rows: {"2": {mean: "1.8501"}}')
    assert check.record(rec, Runs(book)) == [
        "r [2] mean: the record says 1.8501, the runs give 1.85 (r.yaml)"]


def test_bad_records_are_one_line_errors(book):
    with pytest.raises(UserError, match=r"record r, row 2, mean: 1.85 is not quoted"):
        record(book, "means", 'rows: {"2": {mean: 1.85}}')
    runs = Runs(book)
    with pytest.raises(UserError, match="test corrected needs its fold layout; add n_folds"):
        kinds.compute(record(book, "means", "source: grid\n    metric: best_val_loss\n"
                             "    test: corrected"), runs)
    with pytest.raises(UserError, match="n_folds 10, but its runs recorded data.n_folds = 5"):
        kinds.compute(record(book, "means", "source: grid\n    metric: best_val_loss\n"
                             "    test: corrected\n    n_folds: 10"), runs)
    with pytest.raises(UserError, match="alpha 0.1, but the report tests at 0.05"):
        kinds.compute(record(book, "deltas", DELTAS.replace("0.05", "0.1")), runs)
    with pytest.raises(UserError, match="kind 'mean' is not one of means, deltas"):
        kinds.compute(record(book, "mean", "source: grid"), runs)
    with pytest.raises(UserError, match="source 'nope' is not defined"):
        kinds.compute(record(book, "means", f"source: nope\n    metric: x\n    {TEST}"), runs)


TEMPLATE = """
blocks:
  table: |
    | p | Δ |
    |---|---|
    | 4 | {{r 4 delta}} ({{r 4 delta | 3 | u}}, {{r 4 delta | abs}}) |
"""


def test_blocks_render_from_records_and_a_stale_block_is_named(book):
    home = book.results / "records"
    (home / "r.yaml").write_text('records:\n  r: {kind: paper, rows: {"4": {delta: "-0.0476"}}}\n'
                                 + TEMPLATE)
    book = records.load(book.results.parents[1])
    marked = "intro\n<!-- claims:table -->\nold\n<!-- /claims:table -->\nend\n"
    problems: list[str] = []
    new = page.render_page(marked, book, "page.md", problems)
    assert problems == []
    assert new == ("intro\n<!-- claims:table -->\n| p | Δ |\n|---|---|\n"
                   "| 4 | -0.0476 (−0.048, 0.0476) |\n<!-- /claims:table -->\nend\n")
    assert page.differing(marked, new) == ["table"]
    assert page.differing(new, new) == []
    page.render("{{r 5 delta}} {{q 4 delta}} {{r 4 x}}", book, "block t", problems)
    assert problems == ["block t: {{r 5 delta}}: record r has no row 5",
                        "block t: {{q 4 delta}}: no record q",
                        "block t: {{r 4 x}}: record r, row 4, has no field x"]


def test_a_nudged_committed_value_fails_naming_the_record(tmp_path):
    """The committed γ-init-qknorm grid, copied: its records agree; nudge p = 4's fold-0 run by
    +0.01 and the check names the records and numbers that moved."""
    committed = records.load(REPO)
    shutil.copytree(REPO / "docs/results/paper_cpu/qknorm", tmp_path / "paper_cpu/qknorm")
    committed.results = tmp_path
    grid = [committed.records[i] for i in ("grid.cpu_qknorm.means", "grid.cpu_qknorm.deltas")]
    assert [p for r in grid for p in check.record(r, Runs(committed))] == []
    csv = tmp_path / "paper_cpu/qknorm/results.csv"
    runs = pd.read_csv(csv)
    runs.loc[(runs["norm.p"] == 4.0) & (runs["data.fold"] == 0), "best_val_loss"] += 0.01
    runs.to_csv(csv, index=False)
    problems = [p for r in grid for p in check.record(r, Runs(committed))]
    assert "grid.cpu_qknorm.means [4] mean: the record says 1.9924, the runs give 1.99445 " \
           "(paper_cpu.yaml)" in problems
    assert "grid.cpu_qknorm.deltas [4] delta: the record says +0.1543, the runs give +0.156278 " \
           "(paper_cpu.yaml)" in problems


def test_the_committed_records_and_pages_agree():
    problems, numbers = check.everything(records.load(REPO), REPO)
    assert problems == []
    assert numbers > 300


T975_1 = 12.706204736174694  # scipy.stats.t.ppf(0.975, 1)
T95_1 = 6.313751514675037  # scipy.stats.t.ppf(0.95, 1)


def lr_runs() -> tuple[list[dict], list[dict]]:
    """p = 2 and p = 4 at lr 0.001 and 0.01, seeds 0 and 1 on fold 9, ℓ₀ = 4 everywhere: final
    val losses (seed 0, seed 1) p = 2: (2.0, 2.4), (2.1, 2.3); p = 4: (2.5, 2.6), (2.4, 2.8)."""
    loss = {(2.0, 0): (2.0, 2.4), (2.0, 1): (2.1, 2.3), (4.0, 0): (2.5, 2.6), (4.0, 1): (2.4, 2.8)}
    runs, curves = [], []
    for (p, seed), values in loss.items():
        for lr, v in zip((0.001, 0.01), values):
            name = f"p{p}_s{seed}_lr{lr}"
            runs.append({"optimizer.lr": lr, "norm.kind": "lp", "norm.p": p, "seed": seed,
                         "data.fold": 9, "data.n_folds": 10, "status": "completed",
                         "val_loss": v, "best_val_loss": v, "attn_logit_max": 10 * p + lr,
                         "run_dir": name, "git_sha": SHA})
            curves += [{"run_dir": name, "step": 0, "val_loss": 4.0},
                       {"run_dir": name, "step": 100, "val_loss": v}]
    return runs, curves


def test_lr_record_reads_the_sensitivity_of_each_norm(book):
    write(book.results.parents[1], "lr", *lr_runs())
    (book.results / "records" / "lr.yaml").write_text(
        "sources:\n  lr: {dir: lr, commit: abc1234, command: by hand, hardware: none}\n")
    book = records.load(book.results.parents[1])
    got = kinds.compute(record(book, "lr", "source: lr\n    test: paired"), Runs(book))
    # sensitivity of a seed: mean over lr of ℓ − ℓ*: p = 2 (0 + 0.4)/2, (0 + 0.2)/2
    two, four = got["p=2"], got["p=4"]
    assert two["sensitivity"] == pytest.approx(0.15)
    assert two["high"] == pytest.approx(0.15 + T975_1 * 0.1 / math.sqrt(2) / math.sqrt(2))
    assert (two["best_loss"], two["best_lr"]) == (pytest.approx(2.05), 0.001)
    assert (two["logit_min"], two["logit_max"]) == (pytest.approx(20.001), pytest.approx(20.01))
    # p = 4: 0.05 and 0.2; paired by seed against p = 2: −0.15, +0.1
    assert four["delta"] == pytest.approx(-0.025)
    assert four["holm"] == pytest.approx(four["t_p"])  # one comparison
    t = 0.025 / ((0.25 / math.sqrt(2)) / math.sqrt(2))  # sd of (−0.15, +0.1) is 0.25 / √2
    assert four["t_p"] == pytest.approx(1 - 2 * math.atan(t) / math.pi)  # t with 1 df: Cauchy
    assert got["p=4@0.01"]["loss"] == pytest.approx(2.7)


def width_ladder(book, logit_max):
    """Two widths × QKNorm and no QK-norm × lr 0.001, 0.01 × seeds 0, 1, ℓ₀ = 4, written as the
    source `lw` (attn_logit_max: logit_max(kind, lr)); the book reloaded with it."""
    loss = {(64, "l2", 0): (2.0, 2.4), (64, "l2", 1): (2.1, 2.3),
            (64, "none", 0): (2.0, 2.8), (64, "none", 1): (2.2, 2.6),
            (256, "l2", 0): (1.9, 2.1), (256, "l2", 1): (1.8, 2.2),
            (256, "none", 0): (1.9, 3.3), (256, "none", 1): (1.8, 3.1)}
    runs, curves = [], []
    for (width, kind, seed), values in loss.items():
        for lr, v in zip((0.001, 0.01), values):
            name = f"w{width}_{kind}_s{seed}_lr{lr}"
            runs.append({"model.n_embd": width, "model.n_head": width // 32, "optimizer.lr": lr,
                         "norm.kind": kind, "norm.p": 2.0 if kind == "l2" else math.nan,
                         "seed": seed, "data.fold": 9, "data.n_folds": 10,
                         "status": "completed", "val_loss": v, "best_val_loss": v,
                         "attn_logit_max": logit_max(kind, lr), "run_dir": name, "git_sha": SHA})
            curves += [{"run_dir": name, "step": 0, "val_loss": 4.0},
                       {"run_dir": name, "step": 100, "val_loss": v}]
    write(book.results.parents[1], "lw", runs, curves)
    (book.results / "records" / "lw.yaml").write_text(
        "sources:\n  lw: {dir: lw, commit: abc1234, command: by hand, hardware: none}\n")
    return records.load(book.results.parents[1])


def test_lr_record_over_a_width_ladder_reads_each_width_against_its_own_qknorm(book):
    """Two widths × QKNorm and no QK-norm × lr 0.001, 0.01 × seeds 0, 1, ℓ₀ = 4: rows
    WIDTH/ARM with Δ against QKNorm of the same width, and WIDTH/ARM@LR."""
    book = width_ladder(book, lambda kind, lr: 11.0 if kind == "l2" else 100 * lr)
    got = kinds.compute(record(book, "lr", "source: lw\n    test: paired"), Runs(book))
    # a seed's sensitivity: its mean over the 2 lr minus its lowest. 64: qknorm 0.2, 0.1;
    # none 0.4, 0.2 (Δ 0.2, 0.1). 256: qknorm 0.1, 0.2; none 0.7, 0.65 (Δ 0.6, 0.45)
    assert got["64/qknorm"]["sensitivity"] == pytest.approx(0.15)
    assert got["256/none"]["sensitivity"] == pytest.approx(0.675)
    assert got["64/none"]["delta"] == pytest.approx(0.15)
    assert got["256/none"]["delta"] == pytest.approx(0.525)
    # the paired t on 1 df (a Cauchy): t = mean / (sd / √2); sd(0.6, 0.45) = 0.15 / √2
    for width, d, sd in ((64, 0.15, 0.1 / math.sqrt(2)), (256, 0.525, 0.15 / math.sqrt(2))):
        t = d / (sd / math.sqrt(2))
        row = got[f"{width}/none"]
        assert row["t_p"] == pytest.approx(1 - 2 * math.atan(t) / math.pi)
        assert row["holm"] == pytest.approx(row["t_p"])  # one comparison at each width
    assert (got["256/none"]["best_lr"], got["256/none"]["max_stable_lr"]) == (0.001, 0.01)
    assert math.isnan(got["64/qknorm"]["delta"])  # the reference
    assert got["256/none@0.01"]["loss"] == pytest.approx(3.2)
    assert got["256/none@0.01"]["logit"] == pytest.approx(1.0)
    assert (got["256/none@0.01"]["runs"], got["256/none@0.01"]["diverged"]) == (2, 0)


def test_arch_record_pairs_the_architectures_by_fold(book):
    root = book.results.parents[1]
    best = {("gpt", 2.0): [1.80, 1.85, 1.90], ("gpt", 4.0): [1.81, 1.86, 1.92],
            ("angpt", 2.0): [1.70, 1.74, 1.81], ("angpt", 4.0): [1.70, 1.76, 1.80]}
    steps = {("gpt", 2.0): [2000] * 3, ("gpt", 4.0): [2000, math.nan, 2000],
             ("angpt", 2.0): [1250] * 3, ("angpt", 4.0): [1250, 1500, 1250]}
    folds = [{"model.arch": a, "norm.p": p, "data.fold": f, "run_dir": f"{a}{p}{f}",
              "best_val_loss": v, "val_loss": v, "tokens_per_s": 1.0, "steps_to_ref": s}
             for (a, p), vs in best.items() for f, (v, s) in enumerate(zip(vs, steps[(a, p)]))]
    write(root, "arch", [{**r, "seed": 0, "data.n_folds": 5, "status": "completed",
                          "norm.kind": "lp", "git_sha": SHA} for r in folds])
    pd.DataFrame(folds).to_csv(book.results / "arch" / "comparison.csv", index=False)
    (book.results / "records" / "a.yaml").write_text(
        "sources:\n  arch: {dir: arch, commit: abc1234, command: by hand, hardware: none}\n")
    book = records.load(root)
    got = kinds.compute(record(book, "arch", f"source: arch\n    {TEST}\n    reference: gpt:2\n"
                               "    arch: angpt\n    p: 4"), Runs(book))
    assert got["between/2"]["delta"] == pytest.approx(-0.10)  # −0.10, −0.11, −0.09
    assert got["between/2"]["high"] == pytest.approx(-0.10 + T975_2 * 0.01 * math.sqrt(C))
    assert got["between/2"]["steps"] == -750
    # (angpt 4 − 2) − (gpt 4 − 2) per fold: 0 − 0.01, 0.02 − 0.01, −0.01 − 0.02
    assert got["interaction"]["delta"] == pytest.approx(-0.01)
    assert got["interaction"]["t_p"] == pytest.approx(two_sided_p(-0.01 / (0.02 * math.sqrt(C))))
    assert (got["gpt/4"]["reached"], got["angpt/4"]["steps"]) == (2, pytest.approx(4000 / 3))


def json_report() -> str:
    """scripts/bench.py --report's JSON for one report dir (medians only, as the kind reads)."""
    def times(paired, corrected, ratio):
        return {"paired_s": {"median": paired}, "corrected_s": {"median": corrected},
                "corrected / paired": {"median": ratio}}
    return json.dumps({"report": [{"dir": "docs/results/paper_cpu/qknorm",
                                   "statistics": times(0.21, 0.16, 0.76),
                                   "report": times(1.04, 0.97, 0.91)}]})


def test_bench_record_reads_a_ratio_of_step_times(book):
    (book.results / "bench.json").write_text(
        '{"ratios": {"angpt / gpt": {"median": 1.42, "q1": 1.38, "q3": 1.48}}, '
        '"variants": [{"name": "lp-bf16", "step_ms": {"median": 9000.0}}]}')
    got = kinds.compute(record(book, "bench", "file: bench.json\n    steps: 4000\n    runs: 6"),
                        Runs(book))
    assert got["angpt/gpt"]["percent"] == pytest.approx(42.0)
    # 9 s a step: 4000 steps are 10 h, 6 runs 60 h = 2.5 days
    assert got["lp-bf16"] == pytest.approx({"step_s": 9.0, "run_h": 10.0, "days": 2.5})
    (book.results / "report.json").write_text(json_report())
    got = kinds.compute(record(book, "bench", "file: report.json"), Runs(book))
    assert got["qknorm/statistics"] == {"paired_s": 0.21, "corrected_s": 0.16, "ratio": 0.76}
    assert got["qknorm/report"]["ratio"] == 0.91
    (book.results / "cpu.json").write_text('{"speedup_cpu": {"softcap": {"median": 0.8}}}')
    got = kinds.compute(record(book, "bench", "file: cpu.json"), Runs(book))
    assert got["cpu_time/softcap"]["relative"] == pytest.approx(1.25)  # 1 / 0.8
    with pytest.raises(UserError, match="is not a scripts/bench.py JSON with ratios"):
        kinds.compute(record(book, "bench", "file: nope.json"), Runs(book))


def test_search_record_answers_against_the_named_incumbent(book):
    """The incumbent p = 2 ran folds 0–2; p = 1.5 folds 0–1 (+0.01, +0.03 behind), p = 3 fold 0
    only, p = 4 stopped at a rung in fold 0."""
    runs = rows({2.0: [1.80, 1.85, 1.90], 1.5: [1.81, 1.88], 3.0: [1.9], 4.0: [2.5]},
                {(4.0, 0): "pruned"})
    write(book.results.parents[1], "race", runs)
    spec = (f"source: race\n    metric: best_val_loss\n    {TEST}\n    alpha: 0.05\n"
            "    equivalence: 0.02\n    incumbent: '2'\n    rules: today's")
    got = kinds.compute(record(book, "search", spec), Runs(book))
    se = math.sqrt(0.0002) * math.sqrt(1 / 2 + 1 / 4)  # sd of (0.01, 0.03), 2 folds of 5
    assert got["1.5"]["delta"] == pytest.approx(0.02)
    # the t on 1 df, Holm over the three proposals besides the incumbent (p = 3, one fold,
    # and p = 4, stopped, count at p = 1): 3 x the raw p
    assert got["1.5"]["p"] == pytest.approx(3 * (0.5 - math.atan(0.02 / se) / math.pi))
    assert got["1.5"]["high"] == pytest.approx(0.02 + T95_1 * se)
    assert (got["1.5"]["outcome"], got["3"]["outcome"], got["4"]["outcome"]) == (
        "undecided", "undecided", "stopped")
    assert got["3"]["delta"] == pytest.approx(0.10)  # one fold in common: its difference
    assert got["2"]["outcome"] == "incumbent"
    # no proposal level with it: the range the search cannot tell apart is the best alone
    assert (got["2"]["range_low"], got["2"]["range_high"]) == (2.0, 2.0)
    assert "range_low" not in got["1.5"]
    with pytest.raises(UserError, match="incumbent 2.5 is not a p of its runs"):
        kinds.compute(record(book, "search", spec.replace("'2'", "'2.5'")), Runs(book))


def test_search_record_gives_the_range_of_p_level_with_the_incumbent(book):
    """The incumbent p = 2 (folds 0-2); p = 1.5 behind by 0, +0.002, +0.001 (mean +0.001, sd
    0.001: 90% interval +0.001 ± 2.92 x 0.001 x √(1/3 + 1/4) = [−0.0012, +0.0032], inside
    ±0.02: level) and p = 2.5 by −0.001, +0.001, +0.003 (sd 0.002: [−0.0035, +0.0055], level);
    p = 4 behind by +0.10, +0.12, +0.14 (its interval outside ±0.02: not level) and p = 1 on
    fold 0 alone (untested). The range: p from 1.5 to 2.5, on the incumbent's row; p = 1 and 4,
    though further out, are not in it."""
    runs = rows({2.0: [1.80, 1.85, 1.90], 1.5: [1.80, 1.852, 1.901],
                 2.5: [1.799, 1.851, 1.903], 4.0: [1.90, 1.97, 2.04], 1.0: [1.80]}, {})
    write(book.results.parents[1], "race", runs)
    spec = (f"source: race\n    metric: best_val_loss\n    {TEST}\n    alpha: 0.05\n"
            "    equivalence: 0.02\n    incumbent: '2'\n    rules: today's")
    got = kinds.compute(record(book, "search", spec), Runs(book))
    assert got["1.5"]["high"] == pytest.approx(0.001 + T95_2 * 0.001 * math.sqrt(C))
    assert [got[p]["outcome"] for p in ("1.5", "2.5", "1")] == ["level", "level", "undecided"]
    assert got["4"]["outcome"] != "level"
    assert (got["2"]["range_low"], got["2"]["range_high"]) == (1.5, 2.5)


def test_search_record_keeps_two_p_a_millionth_apart_on_their_own_rows(book):
    """A sampler may propose two p that print alike at six digits (GP, two in a launch):
    p = 1.3324171 (the incumbent, folds 0-1) and 1.3324169 (folds 0-1, +0.001 and +0.003
    behind), both 1.33242 at six digits; each is its own row, at eight digits, in the search
    and runs records."""
    runs = rows({1.3324171: [1.80, 1.85], 1.3324169: [1.801, 1.853], 2.0: [1.9]}, {})
    write(book.results.parents[1], "race", runs)
    spec = (f"source: race\n    metric: best_val_loss\n    {TEST}\n    alpha: 0.05\n"
            "    equivalence: 0.02\n    incumbent: '1.3324171'\n    rules: today's")
    got = kinds.compute(record(book, "search", spec), Runs(book))
    assert set(got) == {"1.3324171", "1.3324169", "2"}
    assert got["1.3324169"]["delta"] == pytest.approx(0.002)  # (0.001 + 0.003) / 2
    spec = "source: race\n    metric: best_val_loss\n    incumbent: '1.3324171'"
    got = kinds.compute(record(book, "runs", spec), Runs(book))
    assert got["1.3324169/1"]["gap"] == pytest.approx(0.003)
    assert len(got) == 5


def test_rungs_record_keeps_two_stopped_p_a_millionth_apart_on_their_own_rows(book):
    """Two p alike at six digits (1.33242), both stopped at step 500 of fold 0 (as GP's
    1.3324171 and 1.3324169 were in the live search): at 500 p = 2 is at 2.30, they at 2.40
    and 2.45, so their gaps to the best other run are 0.10 and 0.15, both behind p = 2."""
    near = {1.3324171: [2.40], 1.3324169: [2.45]}
    runs = rows({**near, 2.0: [1.9]}, {(p, 0): "pruned" for p in near})
    curves = [{"run_dir": f"p{p}_f0", "step": 500, "val_loss": v[0]} for p, v in near.items()]
    curves += [{"run_dir": "p2.0_f0", "step": s, "val_loss": v} for s, v in ((500, 2.30), (2000, 1.9))]
    write(book.results.parents[1], "race", runs, curves)
    got = kinds.compute(record(book, "rungs", "source: race"), Runs(book))
    assert set(got) == {"1.3324171", "1.3324169"}
    assert got["1.3324171"]["gap"] == pytest.approx(0.10)
    assert got["1.3324169"]["gap"] == pytest.approx(0.15)
    assert got["1.3324171"]["best"] == got["1.3324169"]["best"] == "2"


def test_check_names_a_stale_unused_or_twice_marked_block_and_a_wrong_commit(book):
    root = book.results.parents[1]
    (book.results / "records" / "r.yaml").write_text(
        'records:\n  r: {kind: paper, rows: {"4": {delta: "-0.0476"}}}\n'
        "blocks:\n  a: 'Δ {{r 4 delta}}'\n  b: 'unused'\n")
    block = "<!-- claims:a -->\nΔ {}\n<!-- /claims:a -->\n"
    (root / records.PAGES[0]).write_text(block.format("-0.0476"))
    (root / records.PAGES[1]).write_text(block.format("-0.0400"))
    book = records.load(root)
    assert check.pages(book, root) == [
        "README.md: block a differs from what its records (r) give, its words or its numbers; "
        "run `python -m qknorm.claims render`",
        "block b is on no page; mark it with <!-- claims:b --> or remove it",
        "block a is marked 2 times; mark it once"]
    book.sources["grid"] = records.Source("grid", "grid", "def5678", "by hand", "none")
    assert check.sources(book, Runs(book)) == [
        "source grid: commit def5678, but its runs recorded abc1234"]
    (book.results / "records" / "s.yaml").write_text("blocks:\n  a: 'again'\n")
    with pytest.raises(UserError, match="a is defined twice, in r.yaml and s.yaml; keep one"):
        records.load(root)


def test_a_row_given_twice_in_a_record_is_refused(book):
    """YAML keeps a mapping's last key: a row written twice would hide the first, unchecked."""
    path = book.results / "records" / "r.yaml"
    path.write_text('records:\n  r:\n    kind: means\n    source: grid\n    rows:\n'
                    '      "2": {mean: "1.80"}\n      "4": {mean: "1.90"}\n      "2": {n: "3"}\n')
    with pytest.raises(UserError, match=r"r.yaml is not YAML: 2 given twice in one mapping"):
        records.load(book.results.parents[1])


@pytest.mark.slow
def test_claims_cli_checks_renders_and_exits_nonzero_naming_the_difference(cli, tmp_path):
    home = tmp_path / records.HOME
    home.mkdir(parents=True)
    (home / "r.yaml").write_text('records:\n  r: {kind: paper, rows: {"4": {delta: "-0.0476"}}}\n'
                                 "blocks:\n  a: 'Δ {{r 4 delta}}'\n")
    (tmp_path / records.PAGES[0]).write_text("a page without blocks\n")
    (tmp_path / records.PAGES[1]).write_text("<!-- claims:a -->\nold\n<!-- /claims:a -->\n")

    def claims(*args):  # this checkout's qknorm, whichever one is installed
        return cli("-m", "qknorm.claims", *args, "--root", str(tmp_path),
                   env={"PYTHONPATH": str(REPO)})

    r = claims("check")
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == ("README.md: block a differs from what its records (r) "
                                        "give, its words or its numbers; run `python -m "
                                        "qknorm.claims render`")
    r = claims("render")
    assert r.returncode == 0 and "rendered README.md: a" in r.stdout
    assert (tmp_path / "README.md").read_text() == "<!-- claims:a -->\nΔ -0.0476\n<!-- /claims:a -->\n"
    r = claims("check")
    assert r.returncode == 0, r.stdout
    assert r.stdout.strip() == ("claims: 1 records, 1 printed values, 1 blocks: all agree with "
                                "the runs")
    (home / "r.yaml").write_text('records:\n  r: {kind: paper, rows: {"4": {delta: 1.5}}}\n')
    r = claims("check")
    assert r.returncode == 2
    assert r.stderr.strip() == ('error: record r, row 4, delta: 1.5 is not quoted; write it as '
                                'printed, e.g. "1.5", so its digits are kept')


@pytest.mark.parametrize("rid, needle", [
    ("", "show needs a record's id: python -m qknorm.claims show ID; the records are "),
    ("nope", "no record nope; the records are "),
])
def test_show_without_an_id_or_with_an_unknown_one_names_the_records(rid, needle):
    """`claims show` with no id said 'no record ;' (issue 54)."""
    from qknorm.claims.__main__ import _show
    from qknorm.errors import UserError

    book = records.load(REPO)
    with pytest.raises(UserError) as e:
        _show(book, rid)
    assert str(e.value).startswith(needle)
    assert str(e.value).endswith(", ".join(book.records)) and book.records


def test_the_words_of_a_comparison_follow_its_test():
    """verdicts.call by hand: level where the 90% interval lies inside ±δ (marginal within δ/10
    of δ), more/less where the adjusted one-sided p <= α, not shown otherwise, marginal where
    an edge of the 95% interval is within δ/10 of 0."""
    call = verdicts.call
    assert call(0.5, 0.0, -0.05, 0.05, -0.01, 0.01, 0.02, 0.05) == "level"
    assert call(0.5, 0.0, -0.05, 0.05, -0.019, 0.01, 0.02, 0.05) == "level (marginal)"
    assert call(0.04, 0.2, 0.10, 0.30, 0.12, 0.28, 0.02, 0.05) == "more"
    assert call(0.04, 0.2, 0.001, 0.30, 0.02, 0.28, 0.02, 0.05) == "more (marginal)"
    assert call(0.05, -0.2, -0.30, -0.10, -0.28, -0.12, 0.02, 0.05) == "less"
    assert call(0.06, 0.1, -0.10, 0.30, 0.0, 0.28, 0.02, 0.05) == "not shown"
    assert call(0.06, 0.1, 0.0005, 0.30, 0.01, 0.28, 0.02, 0.05) == "not shown (marginal)"
    # 2 comparisons asked both ways: 2 × the smaller one-sided p (0.02, 0.04), then Holm over 2
    # (0.04, max(0.04, 0.04)); a p above 1/2 both ways caps at 1
    assert verdicts.holm_both_ways([(0.01, 0.99), (0.98, 0.02)]) == [
        pytest.approx(0.04), pytest.approx(0.04)]
    assert verdicts.holm_both_ways([(0.6, 0.7)]) == [1.0]
    # one-sided p of the paired t on d = (1, 2, 3): t = 2 / (1 / √3) = 2√3 on 2 df, whose
    # upper tail is 1/2 − t / (2 √(2 + t²))
    t = 2 * math.sqrt(3)
    more, less = verdicts.one_sided([1.0, 2.0, 3.0], PAIRED_T)
    assert more == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)))
    assert less == pytest.approx(1 - more)


def test_a_width_ladder_record_words_each_delta_and_contrast_by_the_rule(book):
    """The ladder of the test above with δ and α: each Δ is asked both ways (2 × the smaller
    one-sided p), Holm over its width's arms; a contrast (the gap at 256 against the gap at 64)
    likewise."""
    book = width_ladder(book, lambda kind, lr: 1.0)
    spec = ("source: lw\n    test: paired\n    equivalence: 0.02\n    alpha: 0.05\n"
            "    contrasts:\n      widen: {a: 256/none - 256/qknorm, b: 64/none - 64/qknorm}")
    got = kinds.compute(record(book, "lr", spec), Runs(book))
    # Δ per seed: 64 wide 0.2, 0.1; 256 wide 0.6, 0.45; on 1 df the one-sided p of t is
    # 1/2 − atan(t)/π, 2 × the smaller of the two ways, Holm over one comparison a width
    for width, d, sd in ((64, 0.15, 0.1 / math.sqrt(2)), (256, 0.525, 0.15 / math.sqrt(2))):
        t = d / (sd / math.sqrt(2))
        assert got[f"{width}/none"]["p"] == pytest.approx(2 * (0.5 - math.atan(t) / math.pi))
    assert got["64/none"]["call"] == "not shown"  # t = 3: p 0.205
    assert got["256/none"]["call"] == "not shown"  # t = 7: p 0.0903, above α on 1 df
    widen = got["widen"]  # gap 256 − gap 64 per seed: 0.4, 0.35
    assert (widen["n"], widen["delta"]) == (2, pytest.approx(0.375))
    t = 0.375 / (0.05 / math.sqrt(2) / math.sqrt(2))
    assert widen["p"] == pytest.approx(1 - 2 * math.atan(t) / math.pi)
    assert widen["dlow"] == pytest.approx(0.375 - T975_1 * 0.025)
    assert widen["call"] == "more"  # t = 15: p 0.0424 <= α, its 95% interval clear of 0


def test_a_nudged_width_result_changes_the_words_and_the_check_names_the_record(tmp_path):
    """The committed clipped width study, copied; no QK-norm at 256 wide made clearly worse
    (QKNorm's runs of the same seed and lr, + 0.4 + 0.01 × seed from lr 1e-2 on): its words
    cross from `not shown` to `more`, the check names the record and both words, and once the
    record is updated the page's block renders other words and the unrendered page fails,
    naming the block and the record."""
    book = records.load(REPO)
    shutil.copytree(REPO / "docs/results/lr_width/clip1", tmp_path / "lr_width/clip1")
    book.results = tmp_path
    csv = tmp_path / "lr_width/clip1/results.csv"
    runs = pd.read_csv(csv)
    at = (runs["model.n_embd"] == 256) & (runs["train.z_loss"] == 0) & \
        runs["model.attn_softcap"].isna()
    keys = ["seed", "optimizer.lr"]
    qk = runs[at & (runs["norm.kind"] == "l2")].set_index(keys)["val_loss"]
    none = at & (runs["norm.kind"] == "none") & (runs["status"] != "incomplete")
    index = pd.MultiIndex.from_frame(runs.loc[none, keys])
    nudged = qk.reindex(index).to_numpy() + ((runs.loc[none, "optimizer.lr"] >= 0.01) *
                                             (0.4 + 0.01 * runs.loc[none, "seed"])).to_numpy()
    runs.loc[none, "val_loss"] = nudged
    runs.loc[none, "status"] = "completed"
    runs.to_csv(csv, index=False)
    rec = book.records["lw.clip1"]
    assert rec.rows["256/none"]["call"] == "not shown"
    got = kinds.compute(rec, Runs(book))["256/none"]
    assert got["call"] == "more"
    assert got["delta"] == pytest.approx(0.75 * 0.41)  # 6 of 8 lr, + 0.40, 0.41, 0.42
    assert "lw.clip1 [256/none] call: the record says not shown, the runs give more " \
           "(lr_width.yaml)" in check.record(rec, Runs(book))
    # the record updated as `claims show` gives it; the block's words follow
    fields = {**rec.rows["256/none"], "call": "more", "p": printed.full(got["p"])}
    book.records["lw.clip1"] = records.Record(rec.id, rec.kind, rec.claim, rec.spec,
                                              {**rec.rows, "256/none": fields}, rec.file)
    text = (REPO / records.PAGES[0]).read_text()
    problems: list[str] = []
    rendered = page.render_page(text, book, "page", problems)
    assert problems == []
    old, new = (page.BLOCK.search(t[t.index("<!-- claims:lw.clip1.says"):])["body"]
                for t in (text, rendered))
    assert old.count(": more") + 1 == new.count(": more")
    assert old.count(": not shown") - 1 == new.count(": not shown")
    problems = check.pages(book, REPO)
    named = [p for p in problems if "lw.clip1.says" in p]
    assert len(named) == 1 and "(lw.clip1)" in named[0]


UNRECORDED = Path(__file__).with_name("unrecorded_numbers.yaml")


TYPED = Path(__file__).with_name("typed_comparatives.yaml")
# The pages a reader takes the search's and the race's answers from: no typed comparative left.
HELD_AT_NONE = ("docs/search.md", "docs/search_results.md", "docs/race.md")


def over_the_list(pages: dict[str, str], listed: dict, find=page.unrecorded,
                  what: str = "a number", fix: str = "make it a record's, or allow it if it is a "
                  "config value", name: str = UNRECORDED.name) -> list[str]:
    """Each item `find` gives of `pages` (outside the blocks and the allow-list) beyond its
    pending count, and each pending count the page no longer reaches (the list only shrinks)."""
    problems = []
    for rel, text in pages.items():
        found = find(text, listed["allow"])
        pending = dict(listed["pending"].get(rel) or {})
        seen: dict[str, int] = {}
        for line, item in found:
            seen[item] = seen.get(item, 0) + 1
            if seen[item] > pending.get(item, 0):
                problems.append(f"{rel}:{line}: {item} is {what} outside every claims block; "
                                f"{fix}")
        problems += [f"{rel}: {item} is pending {count} times but the page has it "
                     f"{seen.get(item, 0)}: lower its count in {name}"
                     for item, count in pending.items() if seen.get(item, 0) < count]
    return problems


def typed_over_the_list(pages: dict[str, str], listed: dict) -> list[str]:
    return over_the_list(pages, listed, page.untyped, "a comparative word",
                         "render it from a record in a block, or put a rule's word in "
                         "backticks", TYPED.name)


def test_the_pages_type_no_new_comparative_outside_a_block():
    listed = yaml.safe_load(TYPED.read_text())
    pages = {str(rel): (REPO / rel).read_text() for rel in records.PAGES}
    assert set(listed["pending"]) == set(pages)
    assert typed_over_the_list(pages, listed) == []
    # the search and race pages: none pending, so a comparative typed there again fails here
    # (a pending count put back in the yaml as well as the word on the page)
    assert {rel: listed["pending"][rel] for rel in HELD_AT_NONE} == {
        rel: {} for rel in HELD_AT_NONE}


def test_a_typed_comparative_outside_a_block_is_named_and_a_rendered_or_named_one_passes():
    """In memory: a result's word typed in prose is named with its line; the same word in a
    block, in backticks (a rule naming its outcome), in code or matched by the allow-list is
    not; a word made a record's leaves a pending count too high, which is named too."""
    text = ("The GP sampler alone met the bar; p = 4 is worse.\n"
            "<!-- claims:x -->\np = 2 is level\n<!-- /claims:x -->\n"
            "`worse` where Holm p <= α; lower is better; `python -m x --more`\n")
    listed = {"allow": [r"\blower is better\b"], "pending": {"page.md": {"better": 1}}}
    assert typed_over_the_list({"page.md": text}, listed) == [
        "page.md:1: alone is a comparative word outside every claims block; render it from a "
        "record in a block, or put a rule's word in backticks",
        "page.md:1: worse is a comparative word outside every claims block; render it from a "
        "record in a block, or put a rule's word in backticks",
        "page.md: better is pending 1 times but the page has it 0: lower its count in "
        "typed_comparatives.yaml"]


def test_the_five_pages_print_no_new_number_outside_a_record():
    listed = yaml.safe_load(UNRECORDED.read_text())
    pages = {str(rel): (REPO / rel).read_text() for rel in records.PAGES}
    assert set(listed["pending"]) == set(pages)
    assert over_the_list(pages, listed) == []


def test_a_new_number_outside_a_block_is_named_and_config_values_pass():
    """In memory: a result typed outside a block is named with its line; the same inside a
    block, in code, in a link, or matched by the allow-list is not; a number made a record
    leaves a pending count too high, which is named too."""
    allow = yaml.safe_load(UNRECORDED.read_text())["allow"]
    text = ("## Results (issue 46)\n"
            "Since issue 56 (Wortsman et al. 2023, SMAC3 2.4.1), 95% intervals at α = 0.05:\n"
            "<!-- claims:x -->\nΔ +0.0124 [−0.0367, +0.0614]\n<!-- /claims:x -->\n"
            "`python -m qknorm.train optimizer.lr=3e-3` [a](lr_width/clip1/x.png) cpu_w64\n"
            "p = 2.066 was 0.0060 behind, in 2 folds.\n")
    listed = {"allow": allow, "pending": {"page.md": {"2.066": 1, "2": 1, "0.4": 1}}}
    assert over_the_list({"page.md": text}, listed) == [
        "page.md:7: 0.0060 is a number outside every claims block; make it a record's, or "
        "allow it if it is a config value",
        f"page.md: 0.4 is pending 1 times but the page has it 0: lower its count in "
        f"{UNRECORDED.name}"]
    assert page.unrecorded("−0.5 and +1,250 steps, 12%", []) == [
        (1, "−0.5"), (1, "+1,250"), (1, "12%")]



def test_a_typed_comparative_word_is_named_and_a_rendered_one_passes(book):
    """In memory: the words a placeholder renders, or a backtick names, pass; a word a
    template types itself fails the check, named by its block."""
    assert page.typed_comparatives(
        "p = 4 {{r 4 call}}: `level` means the 90% interval lies inside ±δ; "
        "[a](docs/better.md)") == []
    assert page.typed_comparatives("p = 4 is Worse and never level; lowered, shows") == [
        "worse", "never", "level"]
    (book.results / "records" / "r.yaml").write_text(
        'records:\n  r: {kind: paper, rows: {"4": {delta: "-0.0476"}}}\n'
        "blocks:\n  a: 'p = 4 is {{r 4 delta}}, better than p = 2'\n  b: 'p = 4: {{r 4 delta}}'\n")
    (book.results.parents[1] / "README.md").write_text(
        "<!-- claims:a -->\n<!-- /claims:a -->\n<!-- claims:b -->\n<!-- /claims:b -->\n")
    problems = check.pages(records.load(book.results.parents[1]), book.results.parents[1])
    typed = [p for p in problems if "types" in p]
    assert typed == ["block a types better: a comparative word in a block is rendered from its "
                     "record's test (a call, verdict or tally field), or reworded"]
