"""A race or a racing search read back from its study alone (the racing schedules,
hydra_racing_sweeper/race_schedule.py and hydra_racing_sweeper/search_schedule.py, write it):
what the sweeper prints at its end, qknorm.status shows any time and the report tabulates. The
rules it replays are the race layer's (hydra_racing_sweeper/race/);
this package reads a study. By concern:

  kinds   a study's kind (plain, race, search) and its race settings, as the driver's rules
  ledger  the trials a race counts, their block results and steps, a search's proposals
  tables  the race's elimination table, the search's answer (one row per proposal)
  words   the same in words: the console's line, the search's answer, a proposal's name
"""

from hydra_racing_sweeper.readback.kinds import PLAIN, RACE, SEARCH, kind, rules, settings_of, settings_test
from hydra_racing_sweeper.readback.ledger import (
    block_values,
    completed,
    counted,
    ledger,
    proposals,
    race_trials,
    run_steps,
    steps_spent,
    stopped_block,
)
from hydra_racing_sweeper.readback.tables import Elimination, answer_rows, elimination, elimination_of
from hydra_racing_sweeper.readback.words import (
    answer_lines,
    budget_words,
    level_range,
    p_of,
    range_words,
    search_lines,
    share,
    short,
    stop_place,
    summary_line,
)

__all__ = [
    "PLAIN", "RACE", "SEARCH", "kind", "rules", "settings_of", "settings_test",
    "block_values", "completed", "counted", "ledger", "proposals", "race_trials", "run_steps",
    "steps_spent", "stopped_block",
    "Elimination", "answer_rows", "elimination", "elimination_of",
    "answer_lines", "budget_words", "level_range", "p_of", "range_words", "search_lines",
    "share", "short", "stop_place", "summary_line",
]
