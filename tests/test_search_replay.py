"""qknorm.research.search_replay: Optuna's TPE (plain and median-pruned over folds) replayed on a grid's
recorded runs, counting the compute each search would have spent and what it found."""

from __future__ import annotations

import json

import pytest

from qknorm.research import search_replay as replay

# 3 p x 4 folds, 100 steps and 2 s x 2 threads a run; p = 2 is best on every fold, p = 8 worst.
LOSS = {1.0: [1.3, 1.2, 1.4, 1.3], 2.0: [1.0, 0.9, 1.1, 1.0], 8.0: [2.0, 1.9, 2.1, 2.0]}
GRID = {p: [{"value": v, "steps": 100, "core_s": 4.0} for v in vs] for p, vs in LOSS.items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_budget_of_one_step_runs_one_whole_trial(seed):
    out = replay.search(GRID, "tpe", seed, budget=1)
    assert out["distinct_p"] == 1 and out["steps"] == 400 and out["core_s"] == 16.0
    assert out["found_grid_best"] == (out["best_p"] == 2.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_with_the_grids_budget_every_p_runs_and_the_best_is_found(seed):
    plain = replay.search(GRID, "tpe", seed, budget=1200)
    assert plain["distinct_p"] == 3 and plain["steps"] == 1200 and plain["core_s"] == 48.0
    assert plain["best_p"] == 2.0 and plain["found_grid_best"]
    assert plain["steps_to_grid_best"] in (400, 800, 1200)
    # Pruned over folds: p = 2 (best on every fold) is never pruned; a p that comes after two
    # completed trials and is above their median after fold 2 costs 2 folds, not 4.
    pruned = replay.search(GRID, "tpe_median_pruned", seed, budget=1200)
    assert pruned["best_p"] == 2.0 and pruned["distinct_p"] == 3
    assert pruned["steps"] in (1000, 1200) and pruned["core_s"] == pruned["steps"] / 100 * 4.0


def test_the_cli_reads_a_results_csv_and_writes_json(tmp_path):
    rows = ["norm.p,data.fold,status,best_val_loss,steps,wall_time_s,threads"]
    rows += [f"{p},{f},completed,{v},100,2.0,2" for p, vs in LOSS.items() for f, v in enumerate(vs)]
    rows.append("8.0,4,diverged,,30,1.0,2")  # not completed: not in the grid's runs
    (tmp_path / "results.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "replay.json"
    assert replay.main([str(tmp_path / "results.csv"), "--budgets", "1", "--seeds", "2",
                        "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {k: data["grid"][k] for k in ("p", "runs", "steps", "core_s", "best", "worse")} == {
        "p": [1.0, 2.0, 8.0], "runs": 12, "steps": 1200, "core_s": 48.0, "best": 2.0,
        "worse": [1.0, 8.0]}
    assert data["searches"]["tpe"]["1"]["steps_median"] == 400
    assert replay.main([str(tmp_path / "results.csv"), "--budgets", "a third"]) == 2


def test_a_repeat_of_a_pruned_p_stays_pruned_so_a_partial_mean_never_wins():
    """Folds 3 and 4 are harder for every p: p = 8 pruned after fold 2 has a partial mean (1.6)
    below p = 2's full one (2.0). Told to a repeat as a value, it would be the best."""
    fold = [1.0, 1.0, 3.0, 3.0]
    grid = {p: [{"value": f + off, "steps": 100, "core_s": 4.0} for f in fold]
            for p, off in {1.0: 0.3, 2.0: 0.0, 8.0: 0.6}.items()}
    outs = [replay.search(grid, "tpe_median_pruned", seed, budget=1200) for seed in range(6)]
    assert any(o["steps"] < 1200 for o in outs)  # p = 8 was pruned in some seeds
    assert all(o["best_p"] == 2.0 for o in outs)


def curve_grid():
    """p = 2 and p = 8 over 3 folds, 1000 steps a run; p = 8 is 0.5 behind at every eval, so
    it stops at the first rung (500) of any fold where p = 2 ran before it."""
    fold = [1.0, 1.2, 0.9]
    def run(v, behind):
        return {"value": v + behind, "steps": 1000, "core_s": 10.0,
                "curve": {500: v + 0.3 + behind, 1000: v + behind}}
    return {2.0: [run(v, 0.0) for v in fold], 8.0: [run(v, 0.5 + 0.01 * k)
                                                     for k, v in enumerate(fold)]}


def test_the_racing_search_replay_stops_at_rungs_and_keeps_to_its_budget():
    from hydra_racing_sweeper.multitest import for_folds
    from hydra_racing_sweeper.race import Rules

    from qknorm.research import race_sims

    rules = Rules(n_blocks=3, min_blocks=2, alpha=0.05, equivalence=0.02, test=for_folds(3))
    outs = [race_sims.race_search(curve_grid(), "random", s, 10_000, rules, {500: 0.1})
            for s in range(8)]
    # p = 2 first: its fold 0 (1000 steps), p = 8 stopped at step 500 of fold 0 (1500; out,
    # untested: undecided), nothing new to propose, so it confirms: p = 2 runs folds 1, 2 (3500).
    # p = 8 first: it runs fold 0 unjudged, p = 2 runs it 0.5 ahead, both run fold 1 and p = 2
    # takes over (4000), p = 8 is worse on two folds; confirming, p = 2 runs fold 2 (5000).
    assert {(o["steps"], tuple(o["worse"])) for o in outs} == {(3500, ()), (5000, (8.0,))}
    assert all(o["best_p"] == 2.0 for o in outs)
    assert all(o["core_s"] == o["steps"] / 100 for o in outs)  # a stopped run: its share
    tight = [race_sims.race_search(curve_grid(), "random", s, 2400, rules, {500: 0.1})
             for s in range(8)]
    # Once a run is known to take 1000 steps, no launch starts that does not fit in 2400.
    assert {o["steps"] for o in tight} == {1500, 2000}


def test_an_initial_p_the_grid_did_not_run_is_dropped_with_a_line(capsys):
    from qknorm.research import race_sims

    assert replay._initial({"initial": [float("inf"), 1.0, 8]}, GRID) == (1.0, 8.0)
    assert capsys.readouterr().err.splitlines() == [
        "race.initial: p=inf is not a p of this grid (1, 2, 8): dropped"]
    assert replay._initial({"initial": None}, GRID) == ()
    with pytest.raises(ValueError, match=r"initial p \[inf\] not in the grid"):
        race_sims.race_search(GRID, "random", 0, None, None, {}, initial=(float("inf"),))


def test_the_replay_table_prints_each_search_as_counts_over_seeds():
    from qknorm.research import replay_table

    score = {"seeds": 20, "best_not_grid_worse": 19, "best_is_grid_best": 12,
             "worse_all_grid_worse": 20, "level_all_within_delta": 18, "steps_median": 25500.0,
             "distinct_p_median": 7.5}
    data = {"landscapes": {"flat": {"searches": {"smac3": {"26667": {
        **score, "seeds": 3, "best_not_grid_worse": 3, "best_is_grid_best": 2}},
                                                 "race_search_tpe": {"26667": score}}}}}
    lines = replay_table.table(data, "26667").splitlines()
    assert lines[2] == "| flat | race_search_tpe | 19/20 | 12/20 | 20/20 | 18/20 | 25,500 | 7.5 |"
    # the racing search first; SMAC3 gives a best p and calls nothing worse or level
    assert lines[3] == "| flat | smac3 | 3/3 | 2/3 | no claim | no claim | 25,500 | 7.5 |"

    data["landscapes"]["flat"].update(best=2.0, worse=[])
    data["landscapes"]["flat"]["searches"]["race_search_gp"] = {"26667": {
        **score, "best_not_grid_worse": 17, "worse_all_grid_worse": 16}}
    header, _, row = replay_table.compact(data, "26667").splitlines()
    assert header == ("| landscape | grid: best, `worse` | race_search_tpe | race_search_gp | "
                      "smac3 | race_search_tpe: `worse` calls right, `level` calls within δ | "
                      "race_search_gp: `worse` calls right, `level` calls within δ |")
    assert row == "| flat | 2, 0 p | 19/20 | 17/20 | 3/3 | 20/20, 18/20 | 16/20, 18/20 |"


def test_an_update_replaces_every_racing_search_and_keeps_the_others():
    """--update: the race and the racing searches it ran replace the old ones, a racing search
    of another sampler (older rules) is dropped and named, the plain searches stay."""
    old = {"command": "first", "searches": {
        "tpe": {"26667": "plain"}, "race": {"26667": "old"},
        "race_search_tpe": {"26667": "old", "80000": "old"}, "race_search_gp": {"26667": "old"}}}
    new = {"command": "second", "searches": {"race": {"26667": "new"},
                                             "race_search_tpe": {"26667": "new"}}}
    got = replay.updated(old, new)
    assert got["searches"] == {"tpe": {"26667": "plain"}, "race": {"26667": "new"},
                               "race_search_tpe": {"26667": "new"}}
    assert (got["command"], got["updated"], got["dropped"]) == ("first", ["second"],
                                                                ["race_search_gp"])
    scape = {"command": "first", "landscapes": {"a/flat": {"best": 2.0, "searches": old["searches"]}}}
    fresh = {"command": "third", "landscapes": {"a/flat": {"searches": new["searches"]}}}
    got = replay.updated(scape, fresh)
    assert got["landscapes"]["a/flat"] == {"best": 2.0, "searches": {
        "tpe": {"26667": "plain"}, "race": {"26667": "new"}, "race_search_tpe": {"26667": "new"}}}
    assert got["dropped"] == ["race_search_gp"]
    assert replay.updated(got, fresh)["dropped"] == ["race_search_gp"]  # a second update keeps it
