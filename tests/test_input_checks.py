"""Input errors found before anything trains: each is one UserError naming the bad value and
the fix (the command-line side of them: tests/test_failures.py, tests/test_search_inputs.py)."""

from __future__ import annotations

import pytest
from hydra_racing_sweeper.space import parse_param

from qknorm.config import DataConfig
from qknorm.data import load_text
from qknorm.errors import UserError


def _text_config(path) -> DataConfig:
    return DataConfig(corpus="text", path=str(path), sha256=None)


def test_a_corpus_of_one_symbol_is_refused_with_its_path_and_count(tmp_path):
    # 200 KB of NUL bytes: valid UTF-8, but a model of one symbol reaches loss 0 learning nothing
    path = tmp_path / "nul.txt"
    path.write_bytes(b"\0" * 200_000)
    with pytest.raises(UserError) as e:
        load_text(_text_config(path))
    assert str(path) in str(e.value) and "1 distinct character" in str(e.value)
    assert "at least 2" in str(e.value)


def test_a_corpus_of_two_symbols_is_read(tmp_path):
    path = tmp_path / "ab.txt"
    path.write_text("ab" * 100)
    assert load_text(_text_config(path)) == "ab" * 100


# parse_param sees the space as hydra.sweeper.params holds it: the reciprocal key 1/norm.p can be
# given there only (Hydra's command-line grammar has no '/' in a key)
@pytest.mark.parametrize("key, text, needles", [
    ("norm.p", "interval(0.5,0.9)", ["norm.p=interval(0.5,0.9): 0.5 is below 1", ">= 1 or inf"]),
    ("norm.p", "choice(2,0.5,inf)", ["norm.p=choice(2,0.5,inf): 0.5 is below 1"]),
    ("norm.p", "range(0,3)", ["norm.p=range(0,3): 0 is below 1"]),
    # 1/norm.p = 2 is p = 1/2 = 0.5
    ("1/norm.p", "interval(0.0,2.0)", ["1/norm.p=interval(0.0,2.0): 2.0 gives norm.p=0.5",
                                       "1/norm.p must be within [0, 1]"]),
    ("1/norm.p", "choice(0,0.5,4)", ["4 gives norm.p=0.25", "within [0, 1]"]),
])
def test_a_search_of_p_below_1_is_refused_naming_the_bound(key, text, needles):
    with pytest.raises(UserError) as e:
        parse_param(key, text)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


@pytest.mark.parametrize("key, text", [("norm.p", "interval(1,8)"), ("norm.p", "choice(1,2,inf)"),
                                       ("1/norm.p", "interval(0,1)"), ("1/norm.p", "choice(0,1)"),
                                       ("optimizer.lr", "interval(0.0001,0.01)")])
def test_a_search_of_p_at_or_above_1_is_taken(key, text):
    assert parse_param(key, text).key == key.removeprefix("1/")


def test_max_iters_zero_says_it_evaluates_the_untrained_model(tmp_path, caplog):
    import logging

    from qknorm.bench.steps import compose
    from qknorm.train import train

    with caplog.at_level(logging.INFO, logger="qknorm.train"):
        final = train(compose("tiny", ["train.max_iters=0", "train.eval_iters=1", "threads=1"]),
                      tmp_path)
    assert (final["status"], final["steps"]) == ("completed", 0)
    assert ("train.max_iters=0: one eval of the initialized model, no training step"
            in caplog.messages)


def _argv(line: list[str]) -> list[str]:
    """The command line: -m first (argparse's order), experiment=smoke unless given."""
    rest = [a for a in line if a != "-m"]
    base = [] if any(a.startswith("experiment=") for a in rest) else ["experiment=smoke"]
    return ["-m"] * ("-m" in line) + base + rest


# Overrides that contradict each other (issue 54): each is refused before anything composes a
# run, through the command line's own preflight (qknorm/cli.py), in memory.
@pytest.mark.parametrize("line, needles", [
    (["arm=softcap", "arm=z_loss"], ["arm is given twice (arm=softcap, arm=z_loss)",
                                     "-m", "arm=softcap,z_loss"]),
    (["experiment=smoke", "experiment=paper"], ["experiment is given twice"]),
    (["arm=lp4_calibrated", "norm=none"], ["norm=none contradicts arm=lp4_calibrated",
                                           "norm=lp norm.p=4.0 norm.gamma_init=calibrated"]),
    (["arm=lp4_calibrated", "norm.p=8"], ["norm.p=8 contradicts arm=lp4_calibrated"]),
    (["arm=softcap", "model.attn_softcap=30"], ["model.attn_softcap=30 contradicts arm=softcap"]),
    (["-m", "arm=softcap,lp4_calibrated", "norm=lp"], ["norm=lp contradicts arm=softcap"]),
    (["norm=none", "norm.p=4"], ["norm.p=4 is not read by norm=none", "pick norm=lp"]),
    (["norm=rms", "norm.gamma_init=sqrt_d"], ["norm.gamma_init=sqrt_d is not read by norm=rms"]),
    (["arm=softcap", "norm.p=4"], ["norm.p=4 is not read by norm=none"]),
    (["-m", "norm=none", "norm.p=2,4"], ["norm.p=2,4 is not read by norm=none"]),
])
def test_contradicting_overrides_are_refused_in_one_line(line, needles):
    from qknorm.cli import preflight

    with pytest.raises(UserError) as e:
        preflight(_argv(line))
    assert "\n" not in str(e.value)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


@pytest.mark.parametrize("line", [
    ["arm=softcap", "norm=none"],  # repeats what the arm sets
    ["arm=qknorm", "norm.gamma_learnable=false"],  # a key the arm leaves alone
    ["norm=lp", "norm.p=4"],
    ["train.max_iters=5", "train.max_iters=6"],  # a value key twice: Hydra's last-wins, kept
    ["-m", "norm=none,lp", "norm.p=2,4"],  # p is read by some of the grid's jobs
    ["-m", "arm=softcap,z_loss"],
    # a study's searched key: its planner refuses p under rms, in its own words (test_search_inputs)
    ["search=p_tpe", "norm=rms", "norm.p=interval(1,8)"],
])
def test_overrides_that_agree_are_taken(line):
    from qknorm.cli import preflight

    preflight(_argv(line))  # raises nothing


def test_a_replicate_key_typed_under_hydra_sweeper_replicates_says_how_to_write_it():
    """Hydra splits hydra.sweeper.replicates.data.fold at every dot; the line used to answer
    'did you mean hydra.sweeper.replicates.data.fold?', the key typed (issue 54)."""
    from qknorm.cli import preflight
    from qknorm.errors import one_line

    with pytest.raises(Exception) as e:
        preflight(["search=p_tpe", "experiment=smoke", "hydra.sweeper.replicates.data.fold=[0,1]"])
    assert one_line(e.value) == (
        "hydra.sweeper.replicates.data.fold=[0,1]: Hydra splits a key at its dots, so this names "
        "hydra.sweeper.replicates.data, not hydra.sweeper.replicates's key data.fold; write "
        "data.fold=0,1 (the replicate's values, replacing the preset's)")
    with pytest.raises(Exception) as e:  # a replicate key the preset lacks
        preflight(["search=p_tpe", "experiment=smoke", "hydra.sweeper.replicates.data.seed=[0,1]"])
    assert one_line(e.value).endswith("write '++hydra.sweeper.replicates={data.seed: [0,1]}'")


@pytest.mark.parametrize("override, needles", [
    ("hydra.sweeper.replicates={}", ["merges into the preset's hydra.sweeper.replicates "
                                     "({data.fold: [0, 1, 2, 3, 4]}) and leaves it as it is",
                                     "data.fold=0"]),
    ("hydra.sweeper.race={}", ["merges into the preset's hydra.sweeper.race ({min_replicates: 1"]),
])
def test_an_empty_mapping_over_a_presets_is_refused(override, needles):
    """`replicates={}` kept the preset's 5 folds without a word (Hydra merges mappings)."""
    from qknorm.cli import preflight

    with pytest.raises(UserError) as e:
        preflight(["search=p_tpe", "experiment=smoke", override])
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


def test_p_race_without_a_grid_names_the_baseline_given():
    """It named 'the baseline 2' whatever baseline the command line gave (issue 54)."""
    from hydra_racing_sweeper.plan import race_needs_a_grid

    from qknorm.sweep.hook import QknormTask

    hook = QknormTask()
    five = race_needs_a_grid(5, hook)
    assert "choice(...) with the baseline 5 in it" in five
    assert "'norm.p=choice(1,2,4,inf,5)'" in five
    assert "with the baseline 2 in it" in race_needs_a_grid(2.0, hook)  # the preset's
    assert "'norm.p=choice(1,2,4,inf)'" in race_needs_a_grid(2.0, hook)
    assert "with the baseline" not in race_needs_a_grid(None, hook)
