"""A study's kind and its race settings read back. The kind is in one study user attr
(RACE_SETTINGS_ATTR, stored as `race`): none for a plain sweep, the race's settings for a
race, and for a racing search the same with `search`, its sampler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra_racing_sweeper.multitest import PAIRED_T, ReplicateTest
from hydra_racing_sweeper.race import Rules
from hydra_racing_sweeper.study import RACE_SETTINGS_ATTR

PLAIN, RACE, SEARCH = "plain", "race", "search"  # the kinds of study (kind)


def settings_of(study: Any) -> Any:
    """The race settings a study holds (study user attr RACE_SETTINGS_ATTR); None: none, or no
    study."""
    return None if study is None else study.user_attrs.get(RACE_SETTINGS_ATTR)


def kind(of: Any) -> str:
    """What kind of study this is, or a sweep will make: SEARCH (a racing search: its settings
    name the sampler, `search`), RACE (any other race settings) or PLAIN (none). `of`: a study
    (anything with user_attrs), its race settings (RaceSpec.settings(), a dict), or None."""
    settings = settings_of(of) if hasattr(of, "user_attrs") else of
    if not isinstance(settings, dict):
        return PLAIN
    return SEARCH if settings.get("search") else RACE


def settings_test(settings: Mapping[str, object]) -> ReplicateTest:
    """The looks' test as a study's race settings record it (a race or a racing search; one
    raced before the key existed: the paired t)."""
    return (ReplicateTest(settings["test"], settings["ratio"]) if settings.get("test")
            else PAIRED_T)


def rules(settings: dict) -> Rules:
    return Rules(len(settings["blocks"]), settings["min_replicates"],
                           settings["alpha"], settings.get("equivalence"),
                           settings_test(settings))
