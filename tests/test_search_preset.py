"""search=p_tpe held to its docs (issue 68): docs/search.md's table of the preset, read from
the page, against conf/search/p_tpe.yaml key by key, both ways. The replay tests compute their
expected entries from the YAML itself, so without this its sampler, start-up trials, explore,
min_replicates or the order of `initial` could change with every test passing."""

from __future__ import annotations

import math

import yaml

from tests.helpers import REPO


def documented() -> dict[str, object]:
    """docs/search.md's table under "## Settings": hydra.sweeper key -> its value, read as
    YAML reads it (`[.inf, 1.0]` is [inf, 1.0], `null` None)."""
    lines = (REPO / "docs" / "search.md").read_text().splitlines()
    start = lines.index("| key | value | why |", lines.index("## Settings"))
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        key, value = (cell.strip().strip("`") for cell in line.split("|")[1:3])
        out[key] = yaml.safe_load(value)
    return out


def flat(tree: dict, prefix: str = "") -> dict[str, object]:
    """Nested keys dotted (race: {alpha: 0.05} -> race.alpha), as the table names them."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_the_preset_is_the_one_docs_search_md_states_key_for_key():
    sweeper = yaml.safe_load((REPO / "conf" / "search" / "p_tpe.yaml").read_text())[
        "hydra"]["sweeper"]
    preset, written = flat(sweeper), documented()
    assert set(preset) == set(written)
    for key, value in written.items():
        assert preset[key] == value, key


def test_the_table_holds_what_the_page_says_in_words():
    """The facts the page leans on, from outside the YAML: GP with 2 start-up trials (the
    initial design's two), 1 fold for a takeover, explore 0.6, a stop 0.06 behind at the half
    rung, p = inf then p = 1 first, 5 folds, δ 0.02."""
    written = documented()
    assert written["sampler.name"] == "gp" and written["sampler.n_startup_trials"] == 2
    assert written["race.min_replicates"] == 1 and written["race.explore"] == 0.6
    assert written["race.margin"] == [0.1, 0.06] and written["race.rungs"] == [0.25, 0.5]
    assert written["race.initial"] == [math.inf, 1.0]
    assert written["replicates.data.fold"] == [0, 1, 2, 3, 4]
    assert written["race.equivalence"] == 0.02
