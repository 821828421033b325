"""Claims as records (qknorm.claims): each kind recomputed on hand-made runs against numbers
worked out here by hand (t quantiles from scipy, written out), printed digits, the page blocks,
and the committed records against the committed runs."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from qknorm.claims import check, kinds, page, printed, records, strength
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
             "git_sha": SHA}
            for p, vs in values.items() for f, v in enumerate(vs)]


def write(root: Path, folder: str, runs: list[dict], curves: list[dict] | None = None) -> None:
    path = root / "docs" / "results" / folder
    path.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(runs).to_csv(path / "results.csv", index=False)
    if curves is not None:
        pd.DataFrame(curves).to_csv(path / "curves.csv", index=False)


def race_curves() -> list[dict]:
    """Val loss at steps 0, 500, 2000: at 0 the order is 1 < 4 < 2 (the last's reversed), at
    500 it is 4 < 2 < 1 (one swap), at 2000 the best val losses; p = 3 stopped at 500."""
    at = {0: {1.0: 4.0, 4.0: 4.1, 2.0: 4.2}, 500: {4.0: 2.28, 2.0: 2.30, 1.0: 2.40}}
    out = [{"run_dir": f"p{p}_f{f}", "step": s, "val_loss": at[s][p] if s in at else GRID[p][f]}
           for p in GRID for f in range(3) for s in (0, 500, 2000)]
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


def test_strength_is_marginal_within_a_tenth_of_delta_of_the_line():
    # level: the 90% interval's outer edge against δ = 0.02 (the KJV's −0.0193 is 0.0007 in)
    assert strength.of_level(-0.0193, 0.0069, 0.02) == strength.MARGINAL
    assert strength.of_level(-0.0179, 0.0069, 0.02) == strength.CLEAR
    # worse: the interval's inner edge against 0 (+0.0005 is closer than 0.002)
    assert strength.of_difference(0.0005, 0.0240, 0.02) == strength.MARGINAL
    assert strength.of_difference(0.0021, 0.0240, 0.02) == strength.CLEAR
    assert strength.of_difference(-0.01, 0.02, 0.02) == strength.MARGINAL  # spans 0


def test_means_record_on_hand_made_runs(book):
    got = kinds.compute(record(book, "means", f"source: grid\n    metric: best_val_loss\n    {TEST}"),
                        Runs(book))
    half = T975_2 * 0.05 * math.sqrt(C)  # p = 2: sd 0.05 over 3 folds
    assert got["2"]["n"] == 3 and got["2"]["mean"] == pytest.approx(1.85)
    assert got["2"]["low"] == pytest.approx(1.85 - half)
    assert got["2"]["high"] == pytest.approx(1.85 + half)
    assert got["1"]["mean"] == pytest.approx(1.97)


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
    assert (one["strength"], four["strength"]) == ("clear", "")
    assert (four["below"], four["above"]) == (0, 3)


def test_paired_and_spread_records_pair_two_sources_by_fold(book):
    spec = (f"a: {{source: grid}}\n    b: {{source: other}}\n    metric: best_val_loss\n    "
            f"{TEST}")
    got = kinds.compute(record(book, "paired", spec), Runs(book))["2"]  # d = −.01, +.01, −.03
    assert got["delta"] == pytest.approx(-0.01)
    assert got["t_p"] == pytest.approx(two_sided_p(-0.01 / (0.02 * math.sqrt(C))))
    assert got["high"] == pytest.approx(-0.01 + T975_2 * 0.02 * math.sqrt(C))
    assert (got["below"], got["above"]) == (2, 1)
    spread = kinds.compute(record(book, "spread", "a: {source: grid}\n    b: {source: other}\n"
                                  "    metric: best_val_loss"), Runs(book))
    assert spread["2"]["max_abs"] == pytest.approx(0.03)
    assert spread["2"]["mean_diff"] == pytest.approx(-0.01)
    assert spread["all"]["n"] == 3  # only p = 2 ran on both


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
    assert stopped["3"]["step"] == 500 and stopped["3"]["best"] == "4"  # 2.28 at step 500
    assert stopped["3"]["gap"] == pytest.approx(2.50 - 2.28)
    ranking = kinds.compute(record(book, "ranking", "source: race\n    spans: [[0, 500]]"), runs)
    assert ranking["0"]["tau"] == pytest.approx(-1.0)  # reversed
    assert ranking["500"]["tau"] == pytest.approx(1 / 3)  # (2 concordant − 1 discordant) / 3
    assert ranking["0-500"] == pytest.approx({"tau_min": -1.0, "tau_max": 1 / 3})
    assert ranking["settled"] == {"step": 2000}
    spent = kinds.compute(record(book, "steps", "source: race\n    grid_folds: 5\n"
                                 "    grid_steps: 2000"), runs)["all"]
    assert (spent["steps"], spent["grid"]) == (9 * 2000 + 500, 4 * 5 * 2000)
    assert spent["percent"] == pytest.approx(46.25)


def test_paper_record_quotes_the_papers_losses(book):
    got = kinds.compute(record(book, "paper", "claim: the paper"), Runs(book))
    assert got["4"]["loss"] == 1.357461  # arXiv 2602.05006's table
    assert got["4"]["delta"] == pytest.approx(1.357461 - 1.40506)


def test_check_names_the_record_and_both_values(book):
    spec = f"source: grid\n    metric: best_val_loss\n    {TEST}"
    rec = record(book, "means", spec + '\n    rows: {"2": {mean: "1.8500", n: 3}, "7": {n: 1}}')
    assert check.record(rec, Runs(book)) == [
        "r [7]: the runs give no such row (they give 1, 2, 4)"]
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
