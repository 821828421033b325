"""Rungs as fractions of train.max_iters (hydra.sweeper.race.rungs=[0.25,0.5]): how the plan
resolves them to eval steps, the rungs it drops and the line that says so, the checks of
nonsense, the replays' rungs, and the overrides as a user types them."""

from __future__ import annotations

import logging

import pytest
from hydra_racing_sweeper.multitest import PAIRED_T
from hydra_racing_sweeper.race import Dropped, judged_at, replicate_test, resolve_rungs, step_margins

from qknorm.errors import UserError
from tests.helpers.race import race_plan, refused


@pytest.mark.parametrize("rungs, margin, max_iters, every, steps, margins, dropped", [
    # paper_cpu: a quarter and a half of 2000 are today's steps 500 and 1000
    ([0.25, 0.5], [0.1, 0.04], 2000, 250, (500, 1000), (0.1, 0.04), []),
    # 0.25 * 500 = 125 is below the first eval after 0 (250); 0.5 * 500 = 250 is one
    ([0.25, 0.5], [0.1, 0.04], 500, 250, (250,), (0.04,), [Dropped(0.25, 0, "before the first "
                                                                   "eval")]),
    # smoke: 0.25 * 30 = 7.5 -> 0; 0.5 * 30 = 15 -> down to the eval at 10
    ([0.25, 0.5], 0.05, 30, 10, (10,), (0.05,), [Dropped(0.25, 0, "before the first eval")]),
    # 0.25 * 40 = 10 and 0.3 * 40 = 12 -> 10: the later one is dropped, the first kept
    ([0.25, 0.3], [0.1, 0.04], 40, 10, (10,), (0.1,), [Dropped(0.3, 10, "an earlier rung's "
                                                                          "step")]),
    # whole steps are themselves; at or after the run's end they are dropped
    ([250, 500], 0.05, 500, 250, (250,), (0.05,), [Dropped(500, 500, "not before "
                                                   "train.max_iters=500, the run's end")]),
    # 0.29 * 100 is 28.999999999999996 in floats: still step 29
    ([0.29], 0.05, 100, 1, (29,), (0.05,), []),
])
def test_a_rung_resolves_to_the_eval_step_at_or_below_its_fraction_of_the_run(
        rungs, margin, max_iters, every, steps, margins, dropped):
    assert resolve_rungs(rungs, margin, max_iters, every) == (steps, margins, dropped)


def test_every_rung_dropped_leaves_no_rung_and_the_presets_fit_the_committed_grids():
    assert resolve_rungs([0.25, 0.5], 0.05, 3, 10) == ((), (), [
        Dropped(0.25, 0, "before the first eval"), Dropped(0.5, 0, "before the first eval")])
    assert str(Dropped(0.25, 0, "before the first eval")) == "0.25 (step 0: before the first eval)"
    # The replays' rungs (qknorm/research/search_replay.py) at paper_cpu's 2000 steps: p_race's as
    # the replays judged before rungs were fractions; p_tpe's half rung 0.06 since issue 70
    from qknorm.research import search_replay

    assert search_replay.RACE["race"]["rungs"] == {500: 0.1, 1000: 0.04}
    assert search_replay.SEARCH["race"]["rungs"] == {500: 0.1, 1000: 0.06}
    assert step_margins({"rungs": [0.5]}, 2000, 250) == {1000: 0.05}  # the default margin


def test_a_step_typed_as_one_must_be_an_eval_step():
    with pytest.raises(UserError) as e:
        resolve_rungs([15], 0.05, 30, 10)
    assert str(e.value) == ("hydra.sweeper.race.rungs=[15] has 15, not an eval step (a multiple "
                            "of train.eval_interval=10); use e.g. 10")


@pytest.mark.parametrize("options, message", [
    ({"rungs": [-0.25]}, "hydra.sweeper.race.rungs=[-0.25] has -0.25: a rung is a fraction of "
                         "train.max_iters in (0, 1), e.g. 0.25, or a whole training step >= 1, "
                         "e.g. 500"),
    ({"rungs": [1.5]}, "hydra.sweeper.race.rungs=[1.5] has 1.5: a rung is a fraction"),
    ({"rungs": [True]}, "hydra.sweeper.race.rungs=[True] has True: a rung is a fraction"),
    ({"rungs": [0.25, 500]}, "hydra.sweeper.race.rungs=[0.25, 500] mixes fractions of "
                             "train.max_iters and steps; give all as one, e.g. [0.25, 0.5]"),
    ({"rungs": [0.5, 0.25]}, "hydra.sweeper.race.rungs=[0.5, 0.25] must be increasing, e.g. "
                             "[0.25, 0.5] (fractions of train.max_iters)"),
    ({"rungs": [0.5], "margin": -0.1}, "hydra.sweeper.race.margin=-0.1 must be a number > 0"),
    ({"rungs": 500}, "hydra.sweeper.race.rungs=500: Invalid value assigned: AnyNode is not a "
                     "ListConfig, list or tuple."),
])
def test_nonsense_rungs_are_one_line_naming_the_value_and_the_fix(options, message):
    assert refused(**options).startswith(message)


def test_fractions_stay_as_written_until_the_plan_resolves_them():
    spec = race_plan(rungs=[0.25, 0.5], margin=[0.1, 0.04])
    assert (spec.rungs, spec.margins) == ((0.25, 0.5), (0.1, 0.04))
    at_500 = spec.with_rungs((250,), (0.04,))  # max_iters=500: 0.25 dropped
    assert (at_500.rungs, at_500.margin, at_500.margins) == ((250,), 0.04, ())
    assert at_500.settings()["rungs"] == [250] and at_500.settings()["margin"] == 0.04
    none = spec.with_rungs((), ())  # every rung dropped: a race without rungs, as a study reads
    assert (none.settings()["rungs"], none.settings()["margin"]) == (None, None)


SMOKE_RACE = ["-m", "qknorm.train", "search=p_race", "experiment=smoke", "threads=1",
              "norm.p=choice(1,2)", "++hydra.sweeper.replicates={data.fold:[0,1]}",
              "hydra.sweeper.race.min_replicates=2", "hydra.sweeper.race.equivalence=null"]


@pytest.mark.slow
def test_the_overrides_as_typed_race_with_the_resolved_rungs_and_say_what_was_dropped(cli):
    """smoke (30 steps, an eval every 10): [0.25, 0.5] -> step 0 (dropped) and 10; the job
    gets rungs 10 and the margin of the rung kept (in its hydra.job.env_set: qknorm.sweep.trial).
    A single margin and every rung dropped go through the command line too."""
    r = cli(*SMOKE_RACE, "hydra.sweeper.race.rungs=[0.25,0.5]", "hydra.sweeper.study_name=a")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert ("hydra.sweeper.race.rungs=[0.25, 0.5] at train.max_iters=30 (an eval every 10 "
            "steps): dropped rung 0.25 (step 0: before the first eval); the runs are judged at "
            "step 10") in out
    assert ("RACING_RUNGS='10' ++hydra.job.env_set.RACING_MARGIN='0.04'"
            in out)  # p=1: judged, 0.04 at 10
    r = cli(*SMOKE_RACE, "hydra.sweeper.race.rungs=[0.5]", "hydra.sweeper.race.margin=0.07",
            "train.max_iters=10", "hydra.sweeper.study_name=b")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert ("hydra.sweeper.race.rungs=[0.5] at train.max_iters=10 (an eval every 10 steps): "
            "dropped rung 0.5 (step 0: before the first eval); no rung is left: the race runs "
            "without in-fold stopping") in out
    assert "RACING_RUNGS" not in out


def test_judged_at_gives_every_candidate_one_resolution_or_says_which_lengths_differ(caplog):
    """0.25 of 100 steps, evals every 10 -> step 20 (floor 25/10 * 10); of 200 -> 50: two
    run lengths, two resolutions, refused in one line naming both. One length: its steps, and
    the dropped rung (0.05 of 100 -> step 0) in the log line."""
    with pytest.raises(UserError, match=r"different steps .*100, 10, 200, 10"):
        judged_at([0.25], 0.05, [(100, 10), (200, 10)])
    with caplog.at_level(logging.WARNING, logger="hydra_racing_sweeper.race.rungs"):
        assert judged_at([0.05, 0.25], 0.05, [(100, 10), (100, 10)]) == ((20,), (0.05,))
    assert "dropped rung 0.05 (step 0: before the first eval)" in caplog.text
    with pytest.raises(UserError, match=r"needs a run's steps and eval interval > 0 from the task's hook"):
        judged_at([0.25], 0.05, [(None, 10)])


def test_replicate_test_reads_the_fold_layout_only_when_folds_vary():
    """Seeds alone: the paired t, data.n_folds never read; folds: corrected with the layout's
    n_test/n_train = 1/(k-1) (Nadeau and Bengio's ratio, k=5: 0.25); folds and seeds at once:
    refused unless paired."""
    def unread():
        raise AssertionError("data.n_folds read for a race over seeds")

    assert replicate_test("auto", {"seed": [0, 1, 2]}, unread) == PAIRED_T
    corrected = replicate_test("auto", {"data.fold": [0, 1, 2]}, lambda: 5)
    assert (corrected.name, corrected.ratio) == ("corrected", pytest.approx(1 / 4))
    with pytest.raises(UserError, match="vary data.fold and seed"):
        replicate_test("auto", {"data.fold": [0, 1], "seed": [0, 1]}, lambda: 5)
    assert replicate_test("paired", {"data.fold": [0, 1], "seed": [0, 1]}, unread) == PAIRED_T
