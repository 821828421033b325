"""qknorm.research.landscapes: planted means on a recorded grid's fold effects, residuals and
curves; the JSON round trip; what the recorded H200 grids' noise lets judge() see."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from qknorm.errors import UserError
from qknorm.research import grid_runs
from qknorm.research import landscapes as ls
from tests.helpers import REPO

COMMITTED = REPO / "docs/results/landscapes/landscapes.json"

# 2 p x 2 folds, curves at steps 0, 10, 20 ending at the run's value. Means: p = 1 1.20, p = 2
# 1.10, grand 1.15; mean curves p = 1 {3.1, 1.98, 1.2}, p = 2 {3.1, 1.88, 1.1}, so the base
# curve is {3.1, 1.93, 1.15} and its drop by step 10 is (3.1 - 1.93) / (3.1 - 1.15) = 0.6.
CURVES = {(1.0, 0): (3.0, 1.90, 1.10), (1.0, 1): (3.2, 2.06, 1.30),
          (2.0, 0): (3.0, 1.80, 0.96), (2.0, 1): (3.2, 1.96, 1.24)}


def tiny(curves: bool = True) -> dict[float, list[dict]]:
    return {p: [{"fold": f, "value": CURVES[p, f][-1], "steps": 20, "core_s": 3.0 + p + f,
                 "curve": dict(zip((0, 10, 20), CURVES[p, f], strict=True)) if curves else None}
                for f in (0, 1)] for p in (1.0, 2.0)}


PLANTED = {1.0: -0.05, 2.0: 0.0}  # p = 1 planted 0.05 below the base level 1.15


def test_values_are_the_planted_mean_plus_the_recorded_deviation_from_the_ps_mean():
    got = ls.plant(tiny(), PLANTED)
    # value = recorded - p's mean + 1.15 + Δ: 1.10 - 1.20 + 1.15 - 0.05 = 1.00, ...
    assert [r["value"] for r in got[1.0]] == pytest.approx([1.00, 1.20])
    assert [r["value"] for r in got[2.0]] == pytest.approx([1.01, 1.29])
    assert [[(r["fold"], r["steps"], r["core_s"]) for r in got[p]] for p in (1.0, 2.0)] == \
        [[(0, 20, 4.0), (1, 20, 5.0)], [(0, 20, 5.0), (1, 20, 6.0)]]
    assert ls.base_level(tiny()) == pytest.approx(1.15)


def test_fold_effects_and_paired_residuals_are_the_recorded_ones():
    got = ls.plant(tiny(), PLANTED)
    # Fold effects: recorded fold means 1.03, 1.27 around 1.15 -> -0.12, +0.12; planted fold
    # means 1.005, 1.245 around 1.125 -> the same.
    means = [(got[1.0][f]["value"] + got[2.0][f]["value"]) / 2 for f in (0, 1)]
    assert [m - sum(means) / 2 for m in means] == pytest.approx([-0.12, 0.12])
    # Paired p = 1 - p = 2: recorded 0.14, 0.06 (mean 0.10, residual differences +-0.04);
    # planted: Δ difference -0.05 plus the same +-0.04.
    assert [got[1.0][f]["value"] - got[2.0][f]["value"] for f in (0, 1)] == \
        pytest.approx([-0.05 + 0.04, -0.05 - 0.04])


def test_curves_ramp_the_planted_effect_in_with_the_base_curves_drop():
    got = ls.plant(tiny(), PLANTED)
    # Step 10: recorded - p's mean curve + 1.93 + Δ * 0.6; step 0: no effect; step 20: the value.
    assert [list(r["curve"].values()) for r in got[1.0]] == \
        [pytest.approx([3.0, 1.90 - 1.98 + 1.93 - 0.03, 1.00]),
         pytest.approx([3.2, 2.06 - 1.98 + 1.93 - 0.03, 1.20])]
    assert [list(r["curve"].values()) for r in got[2.0]] == \
        [pytest.approx([3.0, 1.85, 1.01]), pytest.approx([3.2, 2.01, 1.29])]
    assert all(list(r["curve"]) == [0, 10, 20] for runs in got.values() for r in runs)


def test_a_grid_without_curves_is_planted_without_curves():
    got = ls.plant(tiny(curves=False), PLANTED)
    assert [r["value"] for r in got[1.0]] == pytest.approx([1.00, 1.20])
    assert all(r["curve"] is None for runs in got.values() for r in runs)


def test_planting_refuses_other_p_and_curves_at_different_steps():
    with pytest.raises(UserError, match="not the grid's p"):
        ls.plant(tiny(), {1.0: 0.0})
    grid = tiny()
    grid[2.0][1]["curve"] = {0: 3.2, 20: 1.24}
    with pytest.raises(UserError, match="same steps"):
        ls.plant(grid, PLANTED)


def test_the_landscapes_plant_what_their_names_say():
    ps = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, math.inf]
    got = ls.landscapes(ps)
    assert got["spike_3_1.5d"] == {p: -0.03 if p == 3.0 else 0.0 for p in ps}
    assert got["spike_inf_2d"][math.inf] == -0.04 and got["spike_1.5_1d"][1.5] == -0.02
    assert got["two_basins"] == {p: {1.5: 0.0, 4.0: 0.005}.get(p, 0.06) for p in ps}
    assert got["slope"][1.0] == 0.0 and got["slope"][1.5] == pytest.approx(0.018)  # 2.7δ/3
    assert got["slope"][math.inf] == pytest.approx(0.054)
    assert [got["slope"][p] for p in ps] == sorted(got["slope"][p] for p in ps)
    assert got["slope_inf"][math.inf] == 0.0 and got["flat"] == dict.fromkeys(ps, 0.0)
    with pytest.raises(UserError, match="no p"):
        ls.landscapes([1.0, 2.0])


def test_the_loader_gives_back_the_builders_grids(tmp_path):
    ps = [1.0, 1.5, 3.0, 4.0, math.inf]  # the p the landscapes need, inf among them
    # Residuals that differ between p (judge's t needs paired differences that vary).
    grid = {p: [r | {"value": r["value"] + i * r["fold"] / 100} for r in tiny()[1.0]]
            for i, p in enumerate(ps)}
    built = ls.build({"tiny": grid})
    path = tmp_path / "landscapes.json"
    path.write_text(ls.dumps(built, {"tiny": "some/dir"}, "cmd"))
    loaded = ls.load_landscapes(path)
    assert loaded == {name: e["grid"] for name, e in built.items()}
    assert all(type(s) is int for g in loaded.values() for runs in g.values()
               for r in runs for s in r["curve"])
    assert math.inf in loaded["tiny/flat"]
    assert ls.load_planted(path) == {name: e["planted"] for name, e in built.items()}
    assert "Infinity" not in path.read_text()  # strict JSON: inf only as the key 'inf'


def recorded() -> dict[str, dict[float, list[dict]]]:
    return {Path(d).name: grid_runs.load(REPO / d / "results.csv", REPO / d / "curves.csv")
            for d in ls.SOURCES}


def test_the_committed_json_is_what_the_generator_writes():
    import json

    committed = COMMITTED.read_text()
    header = json.loads(committed)
    dirs = {Path(d).name: d for d in ls.SOURCES}
    assert committed == ls.dumps(ls.build(recorded()), dirs, header["command"])


def test_every_planted_run_ends_at_its_value_its_best():
    for grid in ls.load_landscapes(COMMITTED).values():
        for runs in grid.values():
            for r in runs:
                assert min(r["curve"].values()) == r["value"] == r["curve"][max(r["curve"])]


@pytest.mark.parametrize("source", ["calibrated", "qknorm"])
def test_judge_sees_the_planted_best_on_the_recorded_noise(source):
    built = ls.build({source: recorded()[source]})
    answers = {name.split("/")[1]: e["judge"] for name, e in built.items()}
    for name, answer in answers.items():
        if name.startswith("spike_"):  # the spike p is the grid's best and not shown worse
            assert answer.best == float(name.split("_")[1]), name
    basins = answers["two_basins"]
    assert basins.best == 1.5 and 4.0 not in basins.worse
    assert answers["slope"].best == 1.0 and answers["slope_inf"].best == math.inf
    assert answers["flat"].worse == frozenset()


def test_on_the_calibrated_noise_every_planted_gap_of_one_delta_shows():
    grid = recorded()["calibrated"]
    answers = {n.split("/")[1]: e["judge"] for n, e in ls.build({"c": grid}).items()}
    for name, answer in answers.items():
        if name.startswith("spike_"):
            assert answer.worse == set(grid) - {answer.best}, name
    assert answers["two_basins"].worse == set(grid) - {1.5, 4.0}


def test_judge_calls_worse_by_the_one_sided_test_of_the_race_and_the_search():
    """Issue 56: "worse" is one test everywhere. p = 4 behind p = 2 by 0.005 … 0.045 over 5
    folds: the corrected t (variance × (1/5 + 1/4)) gives t = 2.357 on 4 df, one-sided p
    0.039 (worse at 0.05), two-sided 0.078 (which the grid's yardstick read before)."""
    from scipy import stats as sps

    base = [1.80, 1.85, 1.90, 1.82, 1.88]
    d = [0.005, 0.015, 0.025, 0.035, 0.045]
    grid = {p: [{"fold": f, "value": v + (dv if p == 4.0 else 0.0)}
                for f, (v, dv) in enumerate(zip(base, d))] for p in (2.0, 4.0)}
    sd = sps.tstd(d)
    t = 0.025 / (sd * math.sqrt(1 / 5 + 1 / 4))
    assert 0.025 < sps.t.sf(t, 4) < 0.05 < 2 * sps.t.sf(t, 4)
    answer = grid_runs.judge(grid, equivalence=None)
    assert (answer.best, answer.worse) == (2.0, frozenset({4.0}))
    assert answer.delta[4.0] == pytest.approx(0.025)
