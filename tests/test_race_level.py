"""A race that can conclude level (equivalence, TOST): the rule on values computed by hand,
the settings and checks, the answers the report and the console give, and a real race through
the command line (tests/helpers/race_task.py) in which a candidate leaves level, killed and
resumed by two sweepers, deciding exactly as one uninterrupted sweeper."""

from __future__ import annotations

import math
import statistics

import optuna
import pytest
from hydra_racing_sweeper import decision, readback
from hydra_racing_sweeper.race import looks
from optuna.trial import TrialState
from scipy import stats

from qknorm.errors import UserError
from tests.helpers import REPO
from tests.helpers.race import RACE, TASK, calls, plan, race_plan, refused, two_sweepers
from tests.helpers.studies import age_heartbeats, frozen, run, study_of

# Four candidates over 4 blocks; the block effect (1, 2, 3, 4) is shared, pairing removes it.
VALUES = {"a": [1.0, 2.0, 3.0, 4.0],
          "b": [1.01, 2.0, 3.02, 4.0],  # d vs a: 0.01, 0, 0.02 (0): level within ±0.03
          "c": [1.5, 2.6, 3.4, 4.5],  # d: 0.5, 0.6, 0.4: clearly worse
          "d": [1.2, 1.9, 3.1, 4.1]}  # d: 0.2, -0.1, 0.1, 0.1: too noisy to say
BLOCKS = {c: dict(enumerate(v)) for c, v in VALUES.items()}


def t90(df: int) -> float:
    """The (1 - 2 alpha) = 90% two-sided interval's quantile: one-sided 95%."""
    return float(stats.t.ppf(0.95, df))


def test_a_candidate_whose_90_percent_interval_lies_inside_delta_leaves_level():
    r = looks.replay_race(list(BLOCKS), BLOCKS, set(), n_blocks=4, min_blocks=3, alpha=0.05,
                     equivalence=0.03)
    first = r.looks[0]
    assert (first.n, first.leader, first.dropped, first.level, first.decided) == (
        3, "a", ("c",), ("b",), False)  # d is open: the race goes on
    # b - a = 0.01, 0, 0.02: mean 0.01, sd 0.01, interval 0.01 ± t(0.95, 2) * 0.01 / sqrt(3)
    half = t90(2) * 0.01 / math.sqrt(3)
    b = first.tests["b"]
    assert half == pytest.approx(0.016858544608470, abs=1e-12)
    assert (b.low, b.high) == (pytest.approx(0.01 - half, abs=1e-12),
                               pytest.approx(0.01 + half, abs=1e-12))
    assert -0.03 <= b.low and b.high <= 0.03  # inside ±δ: level
    # Holm over b, c, d; c's p (t = 0.5 / (0.1 / sqrt 3)) doubled is its adjusted p: dropped
    p_c = float(stats.t.sf(0.5 / (0.1 / math.sqrt(3)), 2))
    assert first.tests["c"].p_adjusted == pytest.approx(3 * p_c, abs=1e-12)
    assert b.p == pytest.approx(float(stats.t.sf(0.01 / (0.01 / math.sqrt(3)), 2)), abs=1e-12)
    assert b.p_adjusted == pytest.approx(2 * b.p, abs=1e-12)  # not significant: not dropped
    # d: mean 1/15, sd of (0.2, -0.1, 0.1): interval far wider than ±0.03
    d_sd = statistics.stdev([0.2, -0.1, 0.1])
    assert first.tests["d"].low == pytest.approx(0.2 / 3 - t90(2) * d_sd / math.sqrt(3),
                                                 abs=1e-12)
    assert r.level() == {"b": first} and r.dropped() == {"c": first}
    assert [lk.n for lk in r.looks] == [3, 4] and r.over and r.alive == ["a", "d"]
    assert r.looks[1].tests.keys() == {"d"}  # b and c ran no block 3


def test_the_race_ends_once_no_comparison_is_open():
    values = {c: BLOCKS[c] for c in "abc"}  # without d, the first look decides everyone
    r = looks.replay_race(list(values), values, set(), n_blocks=4, min_blocks=3, alpha=0.05,
                     equivalence=0.03)
    assert [lk.n for lk in r.looks] == [3] and r.looks[0].decided and r.over
    assert r.alive == ["a"] and r.need is None
    # The baseline never leaves, but a decided baseline leaves no comparison open either.
    kept = looks.replay_race(list(values), values, set(), 4, 3, 0.05, baseline="b", equivalence=0.03)
    assert [lk.n for lk in kept.looks] == [3] and kept.looks[0].level == ()
    assert kept.alive == ["a", "b"] and kept.over
    # The same baseline shown worse (c as the baseline) is decided too.
    worse = looks.replay_race(list(values), values, set(), 4, 3, 0.05, baseline="c", equivalence=0.03)
    assert [lk.n for lk in worse.looks] == [3] and worse.alive == ["a", "c"]


def test_level_comes_before_a_drop_and_delta_null_is_todays_race():
    # b behind a by 0.02 on every block but 0.0005: certainly worse, and certainly within ±0.05:
    # level (the user called 0.05 negligible); with δ = 0.01 it is outside: dropped.
    values = {"a": {0: 1.0, 1: 2.0, 2: 3.0}, "b": {0: 1.02, 1: 2.0205, 2: 3.02}}
    r = looks.replay_race(["a", "b"], values, set(), 3, 3, 0.05, equivalence=0.05)
    assert r.looks[0].level == ("b",) and r.looks[0].dropped == ()
    assert r.looks[0].tests["b"].p_adjusted <= 0.05  # significantly behind as well
    narrow = looks.replay_race(["a", "b"], values, set(), 3, 3, 0.05, equivalence=0.01)
    assert narrow.looks[0].dropped == ("b",) and narrow.looks[0].level == ()
    off = looks.replay_race(list(BLOCKS), BLOCKS, set(), 4, 3, 0.05)
    assert all(lk.level == () and not lk.decided for lk in off.looks)
    assert all(t.low is None and t.high is None for lk in off.looks for t in lk.tests.values())
    assert [lk.n for lk in off.looks] == [3, 4] and off.alive == ["a", "b", "d"]


def test_identical_runs_are_level_and_an_interval_on_the_bound_counts_as_inside():
    values = {"a": {0: 1.0, 1: 2.0}, "a2": {0: 1.0, 1: 2.0}}
    r = looks.replay_race(["a", "a2"], values, set(), 2, 2, 0.05, equivalence=0.01)
    assert r.level() == {"a2": r.looks[0]} and r.looks[0].tests["a2"].low == 0.0
    assert decision.level(-0.03, 0.03, 0.03) and not decision.level(-0.03, 0.03, 0.0299)
    assert not decision.level(-0.03, 0.03, None)


@pytest.mark.parametrize("outcome, leader, p_adj, interval, alone, want", [
    ("dropped", "x", 0.01, (None, None), False, "worse"),
    ("stopped", "x", None, (None, None), False, "undecided"),  # a rung rule tests nothing
    ("level", "x", 0.4, (-0.01, 0.01), False, "level"),
    ("survived", "me", None, (None, None), False, "best"),
    ("survived", None, None, (None, None), True, "best"),  # the others left before any look
    ("survived", None, None, (None, None), False, "undecided"),  # a budget ended it early
    ("survived", "x", 0.01, (0.005, 0.025), False, "worse"),  # a baseline shown behind
    ("survived", "x", 0.01, (0.005, 0.015), False, "level"),  # behind, but surely by < δ
    ("survived", "x", 0.3, (-0.01, 0.015), False, "level"),  # a baseline level with it
    ("survived", "x", 0.3, (-0.01, 0.025), False, "undecided"),
    ("failed", None, None, (None, None), False, "failed"),
])
def test_each_candidate_gets_one_answer(outcome, leader, p_adj, interval, alone, want):
    assert looks.look_answer(outcome, leader, "me", p_adj, *interval, alpha=0.05, equivalence=0.02,
                        alone=alone) == want


# -- the settings -------------------------------------------------------------------------------

@pytest.mark.parametrize("value, message", [
    (0, "hydra.sweeper.race.equivalence=0 must be a number > 0 (δ in the objective's units"),
    (-0.02, "hydra.sweeper.race.equivalence=-0.02 must be a number > 0"),
    (math.inf, "hydra.sweeper.race.equivalence=inf must be a number > 0"),
    ("small", "hydra.sweeper.race.equivalence='small': Value 'small' of type 'str' could not be "
              "converted to Float"),
])
def test_bad_equivalence_is_one_line_naming_the_value_and_the_fix(value, message):
    assert refused(equivalence=value).startswith(message)


def test_equivalence_is_part_of_the_race_a_study_holds():
    from hydra_racing_sweeper import racing

    off, on = race_plan(), race_plan(equivalence=0.02)
    assert (off.equivalence, on.equivalence) == (None, 0.02)
    assert off.settings()["equivalence"] is None and on.settings()["equivalence"] == 0.02
    study = optuna.create_study()
    study.set_user_attr("race", {k: v for k, v in off.settings().items()
                                 if k != "equivalence"})  # raced before the key existed
    racing.check_study(study, off, "s")
    with pytest.raises(UserError, match=r"^study 's' was raced with equivalence=None, not "
                                         r"0.02; rerun with its settings"):
        racing.check_study(study, on, "s")


def test_the_record_of_a_level_candidate_and_of_the_undecided_ones():
    from hydra_racing_sweeper import race_schedule
    from hydra_racing_sweeper.space import parse_space

    spec = race_plan(equivalence=0.03, baseline=None)
    space, _ = parse_space({"norm.p": "choice(1.0,2.0,inf)"}, [])
    folds = [f"data.fold={f}" for f in range(3)]
    # p=1 leads; p=2 is a, b of VALUES shifted (level); p=inf a noisy one (undecided)
    trials = [frozen(p, {folds[b]: run(VALUES[c][b]) for b in range(2)})
              for p, c in ((1.0, "a"), (2.0, "b"), (math.inf, "d"))]
    r = race_schedule.state(trials, spec, space)
    # two blocks: b - a = 0.01, 0: interval 0.005 ± t(0.95, 1) * sd / sqrt 2: too wide
    assert r.looks[0].level == () and r.need == 3
    trials = [frozen(p, {folds[b]: run(VALUES[c][b]) for b in range(3)})
              for p, c in ((1.0, "a"), (2.0, "b"), (math.inf, "d"))]
    r = race_schedule.state(trials, spec, space)
    assert [lk.n for lk in r.looks] == [2, 3] and r.over  # 3 blocks: the last look
    assert r.level() == {(2.0,): r.looks[1]}
    half = t90(2) * 0.01 / math.sqrt(3)
    assert race_schedule.outcome_attr(spec, r, (2.0,), 3) == {
        "outcome": "level", "n": 3, "after": folds[2], "look": 3, "leader": "norm.p=1.0",
        "delta": pytest.approx(0.01), "p": pytest.approx(r.looks[1].tests[(2.0,)].p),
        "p_adjusted": pytest.approx(r.looks[1].tests[(2.0,)].p_adjusted),
        "low": pytest.approx(0.01 - half), "high": pytest.approx(0.01 + half)}
    # The answer is derived from the record, as readback does for the reports (not stored).
    def answer(c):
        a = race_schedule.outcome_attr(spec, r, c, 3)
        return looks.look_answer(a["outcome"], a.get("leader"), f"norm.p={c[0]}", a.get("p_adjusted"),
                            a.get("low"), a.get("high"), spec.alpha, spec.equivalence)
    assert (answer((2.0,)), answer((math.inf,)), answer((1.0,))) == ("level", "undecided", "best")
    assert "low" not in race_schedule.outcome_attr(race_plan(baseline=None), r, (1.0,), 3)  # δ off: as today


# -- a real race through the command line --------------------------------------------------------

@pytest.fixture
def task():
    # x=5 is level with x=1 (race_task.py); δ 0.05
    return [TASK, *[a.replace("choice(1,2,3,4)", "choice(1,2,3,4,5)")
                    .replace("baseline:2}", "baseline:2,equivalence:0.05}") for a in RACE]]


# What the table makes this race do: at the first look (2 folds) x=3 is dropped and x=5 leaves
# level; the baseline x=2, behind x=1 by 0.02 on every fold, is surely within ±0.05: level
# (before its Holm p <= 0.05 could call it worse); at the second (3 folds) x=4 is dropped: no
# comparison is open, the race ends without fold 3.
LEVEL_RUNS = sorted([(x, f) for x in (1, 2, 4) for f in range(3)] + [(3, 0), (3, 1), (5, 0),
                                                                     (5, 1)])


def decisions(cwd):
    study = study_of(cwd, "r")
    e = readback.elimination(study)
    return study, e, {r["candidate"]: (r["outcome"], r["answer"], r["n"], r["after"],
                                       r["leader"]) for r in e.rows}


EXPECTED = {"x=1": ("survived", "best", 3, "fold=2", "x=1"),
            "x=2": ("survived", "level", 3, "fold=2", "x=1"),
            "x=3": ("dropped", "worse", 2, "fold=1", "x=1"),
            "x=4": ("dropped", "worse", 3, "fold=2", "x=1"),
            "x=5": ("level", "level", 2, "fold=1", "x=1")}


@pytest.mark.slow
def test_a_race_ends_with_a_candidate_level_and_the_rest_decided(cli, task):
    from qknorm.report.summary import race_section
    from tests.helpers.race_task import loss

    r = cli(*task)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(calls(cli.cwd)) == LEVEL_RUNS
    study, e, rows = decisions(cli.cwd)
    assert rows == EXPECTED
    level = next(row for row in e.rows if row["candidate"] == "x=5")
    d = [loss(5, f) - loss(1, f) for f in range(2)]  # 0.002, -0.001
    half = t90(1) * statistics.stdev(d) / math.sqrt(2)
    assert (level["delta"], level["low"], level["high"]) == (
        pytest.approx(0.0005), pytest.approx(0.0005 - half), pytest.approx(0.0005 + half))
    assert -0.05 < level["low"] and level["high"] < 0.05
    by = {t.user_attrs["race_candidate"]: t for t in study.get_trials()}
    assert by["x=5"].state == TrialState.PRUNED
    assert by["x=5"].user_attrs["mean"] == pytest.approx(statistics.fmean(
        loss(5, f) for f in range(2)))  # its mean over the blocks it ran
    assert by["x=1"].state == TrialState.COMPLETE
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("race: "))
    assert line.startswith("race: 2 of 5 candidates dropped, 1 level with the leader within "
                           "±0.05 (x=5), 2 left (x=1, x=2); ran 13 of 20 runs (65% of the grid)")
    text = "\n".join(race_section(e, "r"))
    assert "| x=5 | level | 2 | 200 | 8 |" in text  # answer, runs' steps and core-seconds


@pytest.mark.slow
def test_a_killed_level_race_resumed_by_two_sweepers_decides_as_one_sweeper(cli, task, tmp_path):
    """Killed as x=1 starts fold 2 (after the look where x=5 left level), resumed by two
    sweepers at once: the same runs, each once, and the same decisions as the uninterrupted
    race of test_a_race_ends_with_a_candidate_level_and_the_rest_decided."""
    killed = cli(*task, "kill_at='1,2'")
    assert killed.returncode == 9, killed.stderr[-2000:]
    assert age_heartbeats(cli.cwd) >= 1  # the killed sweep's running trials: stale from now
    two_sweepers(cli, *task, "kill_at='1,2'")
    assert sorted(calls(cli.cwd)) == LEVEL_RUNS  # nothing finished ran again
    _, e, rows = decisions(cli.cwd)
    assert rows == EXPECTED
    assert e.spent == {"runs": 13, "stopped": 0, "steps": 1300, "core_s": 52.0}


def test_the_status_line_counts_a_level_candidate_as_decided():
    from hydra_racing_sweeper.progress import _race_line

    folds = [f"data.fold={f}" for f in range(3)]
    settings = {"min_replicates": 2, "alpha": 0.05, "baseline": None, "blocks": folds,
                "candidates": ["norm.p=1.0", "norm.p=2.0", "norm.p=inf"], "equivalence": 0.03}
    level = {"outcome": "level", "n": 2, "after": folds[1], "leader": "norm.p=1.0",
             "delta": 0.005, "p": 0.25, "p_adjusted": 0.5, "low": -0.02, "high": 0.02}
    trials = {"norm.p=1.0": frozen(1.0, {f: run(1.0) for f in folds[:2]}),
              "norm.p=2.0": frozen(2.0, {f: run(1.0) for f in folds[:2]}, TrialState.PRUNED,
                                   level),
              "norm.p=inf": frozen(math.inf, {f: run(1.2) for f in folds[:2]})}
    e = readback.elimination_of(settings, trials)
    assert [r["answer"] for r in e.rows] == ["racing", "level", "racing"]
    assert _race_line(e) == ("race: 1 of 3 candidates decided (1 level), 2 racing; ran 6 of 9 "
                             "runs (67% of the grid), 180 training steps (67%), 0.005 core-h "
                             "(67% of the grid's estimate); looks by the paired t")
    folds = readback.elimination_of({**settings, "test": "corrected", "ratio": 0.25}, trials)
    assert _race_line(folds).endswith("; looks by the corrected t, n_test/n_train = 1/4")


@pytest.mark.slow
def test_race_replay_reads_a_results_csv_and_says_each_look(tmp_path):
    """scripts/race_replay.py: p = 4 behind the baseline p = 2 by 0.02 (± 0.0005) on 3 folds is
    level at δ 0.05 (level before a drop) and dropped at δ 0.01; p = 8, stopped in fold 0 (no
    completed run), leaves before the first look."""
    import csv
    import subprocess
    import sys

    rows = [{"norm.p": p, "data.fold": f, "data.n_folds": 3, "status": "completed",
             "best_val_loss": v}
            for p, vs in ((2.0, [1.0, 2.0, 3.0]), (4.0, [1.02, 2.0205, 3.02])) for f, v in
            enumerate(vs)] + [{"norm.p": 8.0, "data.fold": 0, "data.n_folds": 3,
                               "status": "pruned", "best_val_loss": 9.0}]
    path = tmp_path / "results.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    script = [sys.executable, str(REPO / "scripts" / "race_replay.py"),
              str(path)]

    def replay(*extra):
        r = subprocess.run([*script, *extra], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()

    wide = replay("--equivalence", "0.05")
    assert wide[0] == ("test: corrected resampled t (Nadeau & Bengio 2003: variance × (1/k + "
                       "1/2), folds not independent)")  # the 3-fold layout's n_test/n_train
    assert wide[1] == "p = 8: left before the look at 3 folds (a fold missing: stopped or not run)"
    assert wide[2] == "look at 3 folds: leader p = 2"
    assert wide[3].startswith("  p = 4: Δ +0.0202, one-sided p ") and wide[3].endswith(": level")
    assert wide[-1] == "over after 3 folds; in the race at its end: p = 2"
    assert replay("--equivalence", "0.01")[3].endswith(": dropped")
    assert replay("--test", "paired")[0] == "test: paired t (replicates independent)"
    bad = subprocess.run([*script, "--metric", "nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"error: {path} has no nope column(s); pass a results.csv written by scripts/report.py"]


def test_a_maximizing_races_record_gives_delta_and_its_interval_in_the_objectives_units():
    """Higher is better: the race lowers −value, and the record turns back. p=1 leads (3.0, 3.2,
    3.1); p=2 is behind by 0.01, 0.015, 0.005: Δ = −0.01 in the objective's units, its 90%
    paired interval −0.01 ± t(0.95, 2) · sd / √3, low below high, inside ±0.03: level
    (p=∞, 0.5 or more behind, is the look's other candidate)."""
    from hydra_racing_sweeper import race_schedule
    from hydra_racing_sweeper.space import parse_space

    spec = plan({"min_replicates": 3, "baseline": None, "equivalence": 0.03, "test": "paired"},
                folds=(0, 1, 2), directions=["maximize"])
    space, _ = parse_space({"norm.p": "choice(1.0,2.0,inf)"}, [])
    folds = [f"data.fold={f}" for f in range(3)]
    lead, behind, far = [3.0, 3.2, 3.1], [2.99, 3.185, 3.095], [2.5, 2.6, 2.52]
    trials = [frozen(p, {folds[b]: run(v[b]) for b in range(3)})
              for p, v in ((1.0, lead), (2.0, behind), (math.inf, far))]
    r = race_schedule.state(trials, spec, space)
    d = [a - b for a, b in zip(lead, behind)]  # behind, in the minimized sign: > 0
    half = stats.t.ppf(0.95, 2) * statistics.stdev(d) / math.sqrt(3)
    attr = race_schedule.outcome_attr(spec, r, (2.0,), 3)
    assert (attr["outcome"], attr["leader"]) == ("level", "norm.p=1.0")
    assert attr["delta"] == pytest.approx(-0.01)
    assert (attr["low"], attr["high"]) == pytest.approx((-0.01 - half, -0.01 + half))
    assert attr["p"] == pytest.approx(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue)
