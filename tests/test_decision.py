"""hydra_racing_sweeper.decision: the one rule every verdict is decided by (issue 66), checked against scipy
on hand-made differences, and every audience that answers a comparison (the race's look and
answer, the racing search, the report's Δ table, the claims' words, the grid yardstick, the
rung error rates) held to the same word for the same pair."""

from __future__ import annotations

import ast
import math
import subprocess

import pandas as pd
import pytest
from hydra_racing_sweeper import decision
from hydra_racing_sweeper.multitest import PAIRED_T, for_folds
from hydra_racing_sweeper.race import intensify, looks
from scipy import stats as sps

from qknorm.claims import verdicts as claim_words
from qknorm.report import stats
from qknorm.research import grid_runs, rung_error_rates
from tests.helpers import REPO

# Five folds of p = 2 behind p = 4 by 0.008 … 0.012: shown behind (tiny one-sided p) and surely
# inside ±0.02 (the calibrated CPU grid's p = 2 against p = 4 has this shape: Δ +0.008, its 90%
# interval [+0.004, +0.012], one-sided Holm p 0.047).
D = [0.008, 0.009, 0.010, 0.011, 0.012]


def scipy_tost(d, level=0.90):
    """The paired t-interval of mean(d) from scipy, independent of hydra_racing_sweeper.multitest."""
    return sps.t.interval(level, len(d) - 1, loc=sps.tmean(d), scale=sps.sem(d))


def test_level_is_decided_before_a_shown_difference():
    p = sps.ttest_1samp(D, 0.0, alternative="greater").pvalue
    low, high = scipy_tost(D)
    assert p < 1e-3 and -0.02 < low < high < 0.02  # both shown and inside: the case in question
    assert decision.decide(p, 0.05, tost=(low, high), equivalence=0.02).word == decision.LEVEL
    # δ too small for the interval (its upper edge is 0.0115): the test decides
    assert high > 0.011
    assert decision.decide(p, 0.05, tost=(low, high), equivalence=0.011).word == decision.WORSE
    assert decision.decide(p, 0.05, tost=(low, high), equivalence=None).word == decision.WORSE


def test_shown_is_closed_at_alpha_and_no_test_never_shows():
    assert decision.shown(0.05, 0.05) and not decision.shown(0.0500001, 0.05)
    assert not decision.shown(math.nan, 0.05) and not decision.shown(None, 0.05)
    assert decision.decide(math.nan, 0.05).word == decision.NOT_SHOWN


def test_an_interval_on_the_bound_is_level_and_none_without_delta():
    assert decision.level(-0.02, 0.02, 0.02) and not decision.level(-0.02, 0.0201, 0.02)
    assert not decision.level(-0.01, 0.01, None) and not decision.level(math.nan, 0.01, 0.02)


def test_asked_both_ways_the_p_counts_for_the_way_delta_points():
    assert decision.decide(**decision.both_ways(0.01, -0.3), alpha=0.05).word == decision.BETTER
    assert decision.decide(**decision.both_ways(0.01, 0.3), alpha=0.05).word == decision.WORSE
    assert decision.decide(**decision.both_ways(0.2, 0.3), alpha=0.05).word == decision.NOT_SHOWN
    assert decision.decide(**decision.both_ways(0.01, 0.0), alpha=0.05).word == decision.NOT_SHOWN


def test_strength_is_marginal_within_a_tenth_of_delta_of_the_line():
    # level: the 90% interval's outer edge against δ = 0.02 (the KJV's −0.0193 is 0.0007 in)
    assert decision.strength(decision.LEVEL, -0.0193, 0.0069, 0.02) == decision.MARGINAL
    assert decision.strength(decision.LEVEL, -0.0179, 0.0069, 0.02) == decision.CLEAR
    # worse: the interval's edge nearest 0 against 0 (+0.0005 is closer than δ/10 = 0.002)
    assert decision.strength(decision.WORSE, 0.0005, 0.0240, 0.02) == decision.MARGINAL
    assert decision.strength(decision.WORSE, 0.0021, 0.0240, 0.02) == decision.CLEAR
    assert decision.strength(decision.WORSE, -0.01, 0.02, 0.02) == decision.MARGINAL  # spans 0
    # not shown: nearly shown where an edge is within δ/10 of 0 (the softcap's +0.000)
    assert decision.strength(decision.NOT_SHOWN, 0.0001, 0.29, 0.02) == decision.MARGINAL
    assert decision.strength(decision.NOT_SHOWN, -0.05, 0.05, 0.02) == decision.CLEAR
    assert decision.strength(decision.LEVEL, -0.01, 0.01, None) == ""
    # on the line (δ = 10: δ/10 = 1 exactly in floats): clear, marginal only inside it
    assert decision.strength(decision.LEVEL, -9.0, 9.0, 10.0) == decision.CLEAR
    assert decision.strength(decision.LEVEL, -9.5, 9.0, 10.0) == decision.MARGINAL
    assert decision.strength(decision.WORSE, 1.0, 5.0, 10.0) == decision.CLEAR
    assert decision.strength(decision.WORSE, 0.5, 5.0, 10.0) == decision.MARGINAL
    assert decision.Outcome(decision.WORSE, decision.MARGINAL).worded({"worse": "more"}) == \
        "more (marginal)"


def _grid() -> dict[float, list[dict]]:
    base = [1.80, 1.85, 1.90, 1.82, 1.88]
    return {p: [{"fold": f, "value": v + (d if p == 2.0 else 0.0), "steps": 1, "core_s": 1.0}
                for f, (v, d) in enumerate(zip(base, D))] for p in (2.0, 4.0)}


def test_every_audience_gives_the_pair_the_same_word(tmp_path):
    """p = 2 against p = 4, shown behind and inside ±δ: level in the race's look and answer, the
    search's comparison, the report's Δ table, the claims' words, the grid's yardstick and the
    rung error rates' worse_on_grid, all under the corrected t of five folds."""
    grid, test, alpha, delta = _grid(), for_folds(5), 0.05, 0.02
    v2, v4 = [r["value"] for r in grid[2.0]], [r["value"] for r in grid[4.0]]
    one_sided = test.p_greater(D)
    assert one_sided < alpha  # shown behind, one way
    lk = looks.look({4.0: v4, 2.0: v2}, alpha, equivalence=delta, test=test)
    assert (lk.leader, lk.level, lk.dropped) == (4.0, (2.0,), ())
    t = lk.tests[2.0]
    assert looks.look_answer("survived", 4.0, 2.0, t.p_adjusted, t.low, t.high, alpha, delta) == "level"
    rules = intensify.Rules(n_blocks=5, min_blocks=2, alpha=alpha, equivalence=delta, test=test)
    assert intensify.compare(v2, v4, rules).outcome == "level"
    judged = grid_runs.judge(grid, alpha=alpha, equivalence=delta)
    assert (judged.best, judged.worse, judged.level) == (4.0, frozenset(), frozenset({2.0}))
    # its TOST interval: the corrected t's 90% one, by hand (variance × (1/5 + 1/4))
    half = sps.t.ppf(0.95, 4) * sps.tstd(D) * math.sqrt(1 / 5 + 1 / 4)
    assert judged.tost[2.0] == pytest.approx((0.01 - half, 0.01 + half))
    df = pd.DataFrame([{"norm.kind": "lp", "norm.p": p, "seed": 0, "data.fold": r["fold"],
                        "status": "completed", "best_val_loss": r["value"]}
                       for p, runs in grid.items() for r in runs])
    table = stats.paired_vs_baseline(df, "best_val_loss", 4.0, equivalence=delta, test=test)
    assert table.set_index("norm.p").loc[2.0, "verdict"] == stats.LEVEL_WITHIN
    low, high = test.interval(D, 0.95)
    more, less = claim_words.one_sided(D, test)
    (adjusted,) = claim_words.holm_both_ways([(more, less)])
    assert claim_words.call(adjusted, 0.01, low, high, *test.interval(D, 0.90), delta,
                            alpha) == claim_words.LEVEL
    runs = tmp_path / "grid"
    runs.mkdir()
    df.assign(**{"data.n_folds": 5}).to_csv(runs / "results.csv", index=False)
    assert rung_error_rates.worse_on_grid(runs, 4.0, alpha, delta) == set()
    assert rung_error_rates.worse_on_grid(runs, 4.0, alpha, None) == {2.0}  # the test alone


def _outside_calls(node):
    """The nodes under `node`, not descending into a call."""
    if isinstance(node, ast.Call):
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _outside_calls(child)


def _compares(path) -> list[tuple[int, str]]:
    """Comparisons in a module's code (not its strings) of an α with anything but a number,
    or of an interval's edge (a name with low or high in it) with a δ; a side that is a call
    (decision.decide(..., alpha, ...) == WORSE) compares its result, not its arguments."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        names = []
        for side in (node.left, *node.comparators):
            inner = [n.id if isinstance(n, ast.Name) else n.attr for n in _outside_calls(side)
                     if isinstance(n, (ast.Name, ast.Attribute))]
            names.append([n.lower() for n in inner])
        alphas = [i for i, n in enumerate(names) if "alpha" in n]
        others = [n for i, n in enumerate(names) if i not in alphas and n]
        edges = any(any("low" in x or "high" in x for x in n) for n in names)
        deltas = any(any(x in ("equivalence", "delta_margin") for x in n) for n in names)
        if (alphas and others) or (edges and deltas):
            out.append((node.lineno, ast.unparse(node)))
    return out


PLUGIN = "plugins/hydra_racing_sweeper"
DECISION = f"{PLUGIN}/hydra_racing_sweeper/decision.py"


def test_no_module_but_decision_compares_a_p_with_alpha_or_an_interval_with_delta():
    files = subprocess.run(["git", "ls-files", "qknorm", "hydra_plugins", "scripts", PLUGIN],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    found = {f: hits for f in files if f.endswith(".py") and f != DECISION
             for hits in [_compares(REPO / f)] if hits}
    assert found == {}
    # and the finder finds one: the rule as decision.py writes it
    assert _compares(REPO / DECISION)


def test_the_paired_t_fallback_is_the_same_rule():
    # A tie test keeps no spread: multitest gives the mean as its interval; decide reads it.
    low, high = PAIRED_T.interval([0.01, 0.01, 0.01], 0.90)
    assert (low, high) == (0.01, 0.01)
    assert decision.decide(1.0, 0.05, tost=(low, high), equivalence=0.02).word == decision.LEVEL


FLIP = {decision.WORSE: decision.BETTER, decision.BETTER: decision.WORSE}


def test_one_pair_reads_one_word_in_every_committed_record():
    """Issue 66 over the committed records: a Δ table's row (p against its baseline) and the
    grid yardstick's (p against the grid's best) that compare the same two p of the same runs
    under the same test and δ (the yardstick's: the corrected t) never disagree on level, and
    never call it worse one way and worse the other. (A call asked both ways can be
    `undecided` where the one-way question shows `worse`: twice the p, another Holm family;
    docs/report.md.) The calibrated CPU grid's p = 2 against p = 4 is one such pair, in three
    records."""
    from qknorm.claims import kinds, records
    from qknorm.claims.inputs import Runs

    book = records.load(REPO)
    of_words = {v: k for k, v in stats.VERDICT_WORDS.items()}
    said: dict[tuple, list[tuple[str, str]]] = {}
    for rid, rec in book.records.items():
        if rec.kind not in ("deltas", "yardstick"):
            continue
        rows = kinds.compute(rec, Runs(book))
        metric = rec.spec.get("metric", "best_val_loss")
        ref = (rows["best"]["p"] if rec.kind == "yardstick"
               else str(stats.format_p(float(rec.spec["baseline"]))))
        for key, row in rows.items():
            if key in ("all", "best"):
                continue
            word = row["call"] if rec.kind == "yardstick" else of_words[row["verdict"]]
            a, b = sorted((key, ref))
            test = "corrected" if rec.kind == "yardstick" else rec.spec["test"]
            said.setdefault((rec.spec["source"], metric, test, float(rec.spec["equivalence"]),
                             a, b), []).append(
                (rid, word if (key, ref) == (a, b) else FLIP.get(word, word)))
    shared = {pair: words for pair, words in said.items() if len(words) > 1}
    assert len(shared.get(("cpu_calibrated", "best_val_loss", "corrected", 0.02, "2", "4"),
                          [])) >= 3
    for pair, words in shared.items():
        levels = {w == decision.LEVEL for _, w in words}
        assert len(levels) == 1, (pair, words)
        assert not {decision.WORSE, decision.BETTER} <= {w for _, w in words}, (pair, words)
