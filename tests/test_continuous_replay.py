"""search_replay --continuous (qknorm.research.continuous): the file it reads, the runs it makes
from a committed grid's noise, how it scores an answer, OUT.json as the issue fixed it, and that
its racing search proposes what the live sweeper proposes for the same seed."""

from __future__ import annotations

import csv
import json
import math
import statistics

import optuna
import pytest
from hydra_racing_sweeper import readback
from hydra_racing_sweeper.launcher import JobResult
from hydra_racing_sweeper.race import RaceSpec
from hydra_racing_sweeper.search_schedule import RaceSearchSchedule
from hydra_racing_sweeper.space import parse_space, replicate_combinations
from hydra_racing_sweeper.sweep import OptunaSweep

from qknorm import jsonfile
from qknorm.errors import UserError
from qknorm.research import continuous, search_replay
from qknorm.rundir import COMPLETED
from tests.helpers import REPO
from tests.helpers.race import sweep_plan
from tests.helpers.studies import Beats

BOWL = {"name": "bowl", "noise": "calibrated", "x": [0.0, 0.25, 0.5, 0.75, 1.0],
        "f": [0.25, 0.0625, 0.0, 0.0625, 0.25]}  # (x - 0.5)^2 at the points


def write(tmp_path, data) -> str:
    path = tmp_path / "land.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_f_is_linear_between_the_files_points(tmp_path):
    _, (shape,) = continuous.read(write(tmp_path, {"delta": 0.02, "landscapes": [BOWL]}))
    assert shape.at(0.5) == 0.0 and shape.at(0.0) == 0.25 and shape.at(1.0) == 0.25
    assert shape.at(0.125) == pytest.approx((0.25 + 0.0625) / 2)  # halfway between 0 and 0.25
    assert shape.at(0.6) == pytest.approx(0.0625 * 0.1 / 0.25)
    assert shape.floor == 0.0


@pytest.mark.parametrize(("bad", "named"), [
    ({"delta": 0}, "delta=0"),
    ({"landscapes": [{**BOWL, "noise": "paper_cpu"}]}, "noise='paper_cpu'"),
    ({"landscapes": [{**BOWL, "x": [0.0, 0.5, 0.4, 0.75, 1.0]}]}, "x must ascend"),
    ({"landscapes": [{**BOWL, "x": [0.1, 0.25, 0.5, 0.75, 1.0]}]}, "x must ascend from 0 to 1"),
    ({"landscapes": [{**BOWL, "f": [0.0] * 4}]}, "f be as long"),
    ({"landscapes": [BOWL, BOWL]}, "name 'bowl'"),
])
def test_a_bad_file_is_one_line_naming_the_value(tmp_path, bad, named):
    with pytest.raises(UserError) as e:
        continuous.read(write(tmp_path, {"delta": 0.02, "landscapes": [BOWL], **bad}))
    assert named in str(e.value) and "\n" not in str(e.value)


def test_the_cli_refuses_a_bad_file_before_running(tmp_path, capsys):
    path = write(tmp_path, {"delta": 0.02, "landscapes": [{**BOWL, "noise": "x"}]})
    out = tmp_path / "out.json"
    assert search_replay.main(["--continuous", path, "--budgets", "4000", "--out",
                               str(out)]) == 2
    assert "noise='x'" in capsys.readouterr().err and not out.exists()


def recorded(grid_dir: str, fold: int) -> list[float]:
    """Each p's run on `fold` less that p's mean over the folds, from results.csv by hand."""
    rows = [r for r in csv.DictReader((REPO / grid_dir / "results.csv").open())
            if r["status"] == "completed"]
    by_p: dict[str, dict[int, float]] = {}
    for r in rows:
        by_p.setdefault(r["norm.p"], {})[int(r["data.fold"])] = float(r["best_val_loss"])
    return [runs[fold] - statistics.fmean(runs.values()) for runs in by_p.values()]


def test_a_run_is_the_landscapes_mean_plus_a_recorded_runs_offset():
    """value(x, b) - base - f(x) is one of the grid's recorded (p, b) offsets (computed from
    results.csv here), base the grid's grand mean; the offsets of a fold average to that
    fold's effect, and those sum to zero over the folds: f is the true mean."""
    noise = continuous.noise("qknorm")
    rows = [float(r["best_val_loss"]) for r in csv.DictReader(
        (REPO / "docs/results/paper_gpu/qknorm/results.csv").open()) if r["status"] == "completed"]
    assert noise.base == pytest.approx(statistics.fmean(rows))
    shape = continuous.Shape("b", "qknorm", (0.0, 1.0), (0.1, 0.0))
    folds = []
    for b in range(5):
        offsets = recorded("docs/results/paper_gpu/qknorm", b)
        folds.append(statistics.fmean(offsets))
        for seed in range(3):
            run = continuous.Landscape(shape, noise, seed).run(0.3, b)
            got = run["value"] - statistics.fmean(rows) - 0.07  # f(0.3) = 0.1 * 0.7
            assert min(abs(got - o) for o in offsets) < 1e-9
            assert run["curve"][max(run["curve"])] == pytest.approx(run["value"], abs=1e-9)
    assert sum(folds) == pytest.approx(0.0, abs=1e-9)
    # the same (seed, x, fold): the same run for every method; another seed draws again
    land = continuous.Landscape(shape, noise, 0)
    assert land.run(0.3, 0) == land.run(0.3, 0)
    assert len({continuous.Landscape(shape, noise, s).run(0.3, 0)["value"]
                for s in range(20)}) > 1


def test_counts_score_the_answer_against_f():
    """BOWL's f (linear between its points), δ = 0.02, by hand: p = 2 (x = 0.5) is the floor
    (f 0); p = 2.2 (x = 5/11): f = 0.0625 (0.5 - 5/11) / 0.25 = 0.01136, within δ, not δ/2;
    p = 1.6 (x = 0.625): f = 0.0625 * 0.125 / 0.25 = 0.03125, out of δ; p = 4: 0.0625."""
    shape = continuous.Shape("bowl", "calibrated", tuple(BOWL["x"]), tuple(BOWL["f"]))
    assert shape.at(1 / 2.2) == pytest.approx(0.0625 * (0.5 - 1 / 2.2) / 0.25)
    assert shape.at(1 / 1.6) == pytest.approx(0.03125)
    entries = [  # #1 right throughout; #2 calls the floor worse and a far p level; #3 out of δ
        {"best_p": 2.0, "worse": [4.0], "level": [2.2], "undecided": [], "steps": 10},
        {"best_p": 2.2, "worse": [2.0], "level": [4.0], "undecided": [1.6], "steps": 20},
        {"best_p": 1.6, "worse": [], "level": [], "undecided": [], "steps": 30},
    ]
    got = continuous.counts(shape, 0.02, entries)
    # within δ: #1, #2; within δ/2: #1. Worse true: #1 (f(4) > f(2)), #3 (none called); #2's
    # f(2) = 0 < f(2.2). Level within δ: #1 (0.0114), #3 (none); #2's |0.0625 - 0.0114| > δ.
    assert got == {"seeds": 3, "best_within_delta": 2, "best_within_half": 1, "worse_true": 2,
                   "level_within_delta": 2, "steps_median": 20, "steps_max": 30}


def test_the_cli_writes_out_json_as_the_issue_fixed_it(tmp_path, capsys):
    """Tiny: two seeds, a budget of 4 runs; the plain TPE and the racing search (SMAC3 has
    its own replay test)."""
    path = write(tmp_path, {"delta": 0.02, "landscapes": [{**BOWL, "x": [0.0, 1.0],
                                                           "f": [0.0, 0.05]}]})
    out = tmp_path / "out.json"
    assert search_replay.main(["--continuous", path, "--budgets", "8000", "--seeds", "2",
                               "--methods", "racing,tpe", "--out", str(out)]) == 0
    text = out.read_text()
    data = json.loads(text)
    assert list(data["landscapes"]) == ["bowl"]
    assert list(data["landscapes"]["bowl"]) == ["racing", "tpe"]
    for entries in data["landscapes"]["bowl"].values():
        assert [e["seed"] for e in entries] == [0, 1]
        for e in entries:
            assert set(e) == {"seed", "best_p", "worse", "level", "undecided", "steps"}
            assert all(isinstance(p, float) for p in [e["best_p"], *e["worse"], *e["level"],
                                                      *e["undecided"]])
    racing = data["landscapes"]["bowl"]["racing"]
    # p = inf (x = 0) is the initial design's first point, JSON's Infinity
    assert "Infinity" in text and any(math.inf in [e["best_p"], *e["undecided"], *e["worse"],
                                                   *e["level"]] for e in racing)
    assert all(e["steps"] <= 8000 for e in racing)  # a search never overshoots its budget
    err = capsys.readouterr().err
    assert "bowl" in err and "racing" in err and "best_within_delta=" in err


def test_first_seed_and_names_pick_the_seeds_and_landscapes(tmp_path, capsys):
    """--first-seed 20 --seeds 2: seeds 20 and 21, each the same run as in a run from seed 0
    (a seed's draw depends on the seed alone); --names: those landscapes only, and an unknown
    one refused in one line naming it."""
    flat = {**BOWL, "name": "flat", "x": [0.0, 1.0], "f": [0.0, 0.0]}
    path = write(tmp_path, {"delta": 0.02, "landscapes": [
        {**BOWL, "x": [0.0, 1.0], "f": [0.0, 0.05]}, flat]})
    args = ["--continuous", path, "--budgets", "6000", "--methods", "racing"]
    late, early = tmp_path / "late.json", tmp_path / "early.json"
    assert search_replay.main([*args, "--first-seed", "20", "--seeds", "2", "--names", "flat",
                               "--out", str(late)]) == 0
    assert search_replay.main([*args, "--seeds", "22", "--out", str(early)]) == 0
    got = json.loads(late.read_text())["landscapes"]
    assert list(got) == ["flat"]
    got_early = json.loads(early.read_text())["landscapes"]
    assert got["flat"]["racing"] == got_early["flat"]["racing"][20:]
    # --update --names: the landscape named is rerun, the others kept as they were
    assert search_replay.main([*args, "--seeds", "22", "--names", "bowl", "--methods", "tpe",
                               "--update", "--out", str(early)]) == 0
    both = json.loads(early.read_text())["landscapes"]
    assert list(both) == ["bowl", "flat"] and list(both["bowl"]) == ["racing", "tpe"]
    assert both["flat"] == {"racing": got_early["flat"]["racing"]}
    capsys.readouterr()
    assert search_replay.main([*args, "--names", "flat,bowl_x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--names=flat,bowl_x: bowl_x not in" in err[0]


def test_set_replays_the_racing_search_under_other_settings(tmp_path, capsys):
    """--set race.explore=0.5 --set n_jobs=1: the entries continuous.racing gives with the
    preset's keys changed by hand; a key the preset lacks is one line, exit 2."""
    path = write(tmp_path, {"delta": 0.02, "landscapes": [{**BOWL, "x": [0.0, 1.0],
                                                           "f": [0.0, 0.05]}]})
    out = tmp_path / "out.json"
    assert search_replay.main(["--continuous", path, "--budgets", "8000", "--seeds", "2",
                               "--methods", "racing", "--set", "race.explore=0.5",
                               "--set", "n_jobs=1", "--out", str(out)]) == 0
    preset = search_replay.preset("p_tpe")
    preset["n_jobs"], preset["race"]["explore"] = 1, 0.5
    race = search_replay._at_paper_cpu(preset["race"])
    rules = search_replay.Rules(5, race["min_replicates"], race["alpha"], race["equivalence"],
                                search_replay.for_folds(5))
    _, (shape,) = continuous.read(path)
    by_hand = [continuous.entry(s, continuous.racing(
        continuous.Landscape(shape, continuous.noise(shape.noise), s), 8000,
        {**preset, "race": race}, rules, race["rungs"])) for s in range(2)]
    assert json.loads(out.read_text())["landscapes"]["bowl"]["racing"] == by_hand
    default = tmp_path / "default.json"
    search_replay.main(["--continuous", path, "--budgets", "8000", "--seeds", "2",
                        "--methods", "racing", "--out", str(default)])
    assert json.loads(default.read_text())["landscapes"] != json.loads(out.read_text())["landscapes"]
    capsys.readouterr()
    assert search_replay.main(["--continuous", path, "--budgets", "8000", "--methods", "racing",
                               "--set", "race.explor=0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --set race.explor=0.5: give KEY=VALUE")
    # without --continuous, not ignored: one line, before anything runs
    assert search_replay.main(["--landscapes", path, "--set", "race.explore=0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "go with --continuous FILE" in err[0]


# -- the replay's sampler is the live sweeper's --------------------------------------------

STEPS = 100


def tiny_noise() -> continuous.Noise:
    """A made-up grid's offsets (two p, five folds), curves of two evals."""
    offsets = {(p, b): {"value": v, "steps": STEPS, "core_s": 1.0,
                        "curve": {50: v + 0.5, STEPS: v}}
               for p, vs in ((1.0, (0.01, -0.02, 0.0, 0.03, -0.01)),
                             (2.0, (-0.01, 0.0, 0.02, -0.03, 0.015)))
               for b, v in enumerate(vs)}
    return continuous.Noise((1.0, 2.0), offsets, 2.0, {50: 2.5, STEPS: 2.0},
                            {50: 0.0, STEPS: 1.0}, 5)


class LandscapeLauncher:
    """The launcher's face: each (1/p, fold) run's best_val_loss from the landscape."""

    def __init__(self, land: continuous.Landscape) -> None:
        self.land, self.ran = land, []

    def launch(self, jobs) -> list[JobResult]:
        out = []
        for trial, combo in jobs:
            x, fold = trial.params[continuous.PARAM], int(combo[0].split("=")[1])
            self.ran.append((x, fold))
            out.append(JobResult(COMPLETED, f"x{x}-f{fold}", {
                "best_val_loss": self.land.run(x, fold)["value"], "steps": STEPS,
                "wall_time_s": 1.0, "threads": 1}))
        return out


@pytest.mark.parametrize(("seed", "options"), [
    (0, {"name": "tpe", "n_startup_trials": 6}), (3, {"name": "tpe", "n_startup_trials": 6}),
    (0, {"name": "gp", "n_startup_trials": 4})])
def test_the_replay_proposes_what_the_live_sweeper_proposes(seed, options):
    """search=p_tpe's space (1/norm.p in [0, 1]), initial design [inf, 1], a sampler (its
    options, seeded: the preset's GP, and TPE, its sampler before), n_jobs 2, on the same
    landscape: the live sweeper (OptunaSweep's loop over RaceSearchSchedule, a landscape for
    a launcher) and the replay (continuous.racing) make the same proposals in the same order,
    and the same runs."""
    space, _ = parse_space({continuous.PARAM: "interval(0.0, 1.0)"}, [])
    folds = list(range(5))
    blocks = tuple(f"data.fold={b}" for b in folds)
    test = search_replay.for_folds(5)
    spec = RaceSpec(min_replicates=2, alpha=0.05, baseline=None, candidates=(), labels={},
                    blocks=blocks, sign=1.0, rungs=(), margin=0.0, budget_steps=16 * STEPS,
                    equivalence=0.02, test=test, search=options["name"], explore=0.8,
                    initial=({continuous.PARAM: 0.0}, {continuous.PARAM: 1.0}))
    sampler = {**options, "seed": seed}
    plan = sweep_plan(space, 24, replicate_combinations({"data.fold": folds}), spec, sampler)
    shape = continuous.Shape("b", "calibrated", (0.0, 0.6, 1.0), (0.09, 0.0, 0.04))
    land = continuous.Landscape(shape, tiny_noise(), seed)
    sweep = OptunaSweep(study_name="s", storage="", direction="minimize",
                        objectives=["best_val_loss"], n_trials=24, n_jobs=2, sampler=sampler,
                        pruner={"name": "none"}, replicates={}, max_failure_rate=0.0,
                        fail_value=None, heartbeat_interval=1, grace_period=None, params={},
                        race=None)
    study = optuna.create_study(sampler=plan.sampler, directions=plan.directions)
    RaceSearchSchedule.prepare_study(plan, study, "s")
    launcher, beats = LandscapeLauncher(land), Beats()
    sched = RaceSearchSchedule(plan, launcher, ["best_val_loss"], 2, beats)
    assert sweep._run(study, plan, sched, launcher, beats) is None
    live = [t.params[continuous.PARAM] for t in sorted(study.get_trials(),
                                                       key=lambda t: t.number)]

    replayed = []

    class Logged(continuous.Landscape):
        def run(self, x, block):
            replayed.append((x, block))
            return super().run(x, block)

    preset = {"sampler": sampler, "n_jobs": 2, "n_trials": 24,
              "race": {"explore": 0.8, "initial": [math.inf, 1.0]}}
    sim = continuous.racing(Logged(shape, land.noise, seed), 16 * STEPS, preset,
                            readback.rules(spec.settings()), {})
    assert len(live) >= 6  # past the initial design and into the sampler's own proposals
    assert sim["proposed"] == live
    assert replayed == launcher.ran


def test_update_reruns_one_method_and_keeps_the_others(tmp_path):
    """--update: racing rerun into an OUT.json that holds tpe; tpe's entries are kept as they
    were, and both commands are listed."""
    path = write(tmp_path, {"delta": 0.02, "landscapes": [{**BOWL, "x": [0.0, 1.0],
                                                           "f": [0.0, 0.05]}]})
    out = tmp_path / "out.json"
    args = ["--continuous", path, "--budgets", "6000", "--seeds", "1", "--out", str(out)]
    assert search_replay.main([*args, "--methods", "tpe"]) == 0
    tpe = json.loads(out.read_text())["landscapes"]["bowl"]["tpe"]
    assert search_replay.main([*args, "--methods", "racing", "--update"]) == 0
    data = json.loads(out.read_text())
    assert data["landscapes"]["bowl"]["tpe"] == tpe
    assert [e["seed"] for e in data["landscapes"]["bowl"]["racing"]] == [0]
    assert len(data["command"]) == 2 and "--update" in data["command"][1]


def test_a_best_exactly_delta_from_the_floor_counts_as_within_it():
    """f rises linearly from 0 at x = 0 (p = ∞) to δ = 0.02 at x = 1 (p = 1): p = 1 is δ from
    the floor exactly, p = 2 (x = 0.5) δ/2 exactly; both bounds are closed (within: <=), as the
    race's level is; a level p exactly δ from the best's f is within δ too."""
    shape = continuous.Shape("slope", "calibrated", (0.0, 1.0), (0.0, 0.02))
    assert (shape.at(1.0) - shape.floor, shape.at(0.5) - shape.floor) == (0.02, 0.01)
    entries = [{"best_p": 1.0, "worse": [], "level": [], "undecided": [], "steps": 10},
               {"best_p": 2.0, "worse": [], "level": [], "undecided": [], "steps": 10},
               {"best_p": math.inf, "worse": [], "level": [1.0], "undecided": [], "steps": 10}]
    got = continuous.counts(shape, 0.02, entries)
    assert (got["best_within_delta"], got["best_within_half"], got["level_within_delta"]) == (
        3, 2, 3)


def test_the_held_out_landscapes_are_the_files_committed_and_their_floors_where_named(tmp_path):
    """continuous_landscapes --held-out rewrites the committed files byte for byte, and each
    landscape's floor and its width within δ are where its formula puts them, by hand:
    bowl_0.15_a4 (4 (x − 0.15)²) within δ = 0.02 for |x − 0.15| ≤ sqrt(0.02/4) = 0.0707;
    two_basins_deep's floor is its second basin, δ/2 below the first; two_basins_shallow's
    second basin, 1.5δ up, is outside δ."""
    from qknorm.research import continuous_landscapes

    assert continuous_landscapes.main(["--held-out", "--out", str(tmp_path)]) == 0
    committed = REPO / "docs/results/landscapes"
    for noise in ("qknorm", "calibrated"):
        name = f"continuous_heldout_{noise}.json"
        made = json.loads((tmp_path / name).read_text())
        assert made["landscapes"] == json.loads((committed / name).read_text())["landscapes"]
    delta, shapes = continuous.read(committed / "continuous_heldout_qknorm.json")
    by = {s.name.split("/")[1]: s for s in shapes}
    assert len(by) == 10 and not set(by) & {"bowl_0", "bowl_0.29", "bowl_0.42", "two_basins"}

    def argmin(s):
        return s.x[s.f.index(s.floor)]

    assert {n: argmin(by[n]) for n in ("bowl_0.1", "bowl_0.7", "bowl_0.55_a0.25")} == {
        "bowl_0.1": 0.1, "bowl_0.7": 0.7, "bowl_0.55_a0.25": 0.55}
    within = [x for x in by["bowl_0.15_a4"].x if by["bowl_0.15_a4"].at(x) <= delta]
    assert (min(within), max(within)) == (0.08, 0.22)  # the grid's points inside 0.15 ± 0.0707
    deep, shallow = by["two_basins_deep"], by["two_basins_shallow"]
    assert (argmin(deep), deep.floor, deep.at(0.3)) == (0.9, -0.01, 0.0)
    assert (argmin(shallow), shallow.at(0.6) - shallow.floor) == (0.1, pytest.approx(0.03))


def test_the_committed_replays_of_the_preset_now_run_no_point_twice():
    """Issue 70: no search of the committed replays under the preset now lists two p a float
    rounding apart (the GP's x = 0.9999999999999998 beside the initial design's 1.0 ran as a new
    point before search_schedule.propose took it for a repeat): every p an answer lists is its own
    proposal, so two alike would be a twin."""
    import itertools

    files = sorted((REPO / "docs/results/landscapes/candidates").glob("sixth_*.json.gz"))
    assert len(files) == 12
    searches = 0
    for path in files:
        for by_method in jsonfile.read(path)["landscapes"].values():
            for e in by_method["racing"]:
                xs = [continuous.x_of(p) for p in
                      [e["best_p"], *e["worse"], *e["level"], *e["undecided"]]]
                assert not any(a != b and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
                               for a, b in itertools.combinations(xs, 2)), (path.name, e["seed"])
                searches += 1
    assert searches == 12 * 10 * 20
