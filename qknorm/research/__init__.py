"""Research tools: the measurements behind the docs' numbers, not commands a user of qknorm runs.

Each module is a command, `python -m qknorm.research.<module> --help`, and a library its tests
import: the race's error rates on simulated folds (race_level_error_rates), in-fold stopping on
recorded curves (rung_error_rates), Optuna's searches replayed on a grid's runs (search_replay,
through race_sims for the race and the racing search, grid_runs for a grid's runs and answer,
smac_replay for SMAC3; replay_table prints its JSON as a table; continuous replays them in the
live space, on continuous landscapes, and scores them against issue 53's bar),
landscapes with planted effects on a recorded grid's noise for the replay (landscapes),
the power of the fold test (power, tabulated on the committed grids by fold_power), where a
training step's time goes (profile_step), and each p's recorded runs by fold, what a replay of
looks reads from a results.csv (recorded_folds, shared with scripts/race_replay.py). Nothing here
is imported at package import: each module pulls in only what it needs.
"""

__all__ = ["continuous", "fold_power", "grid_runs", "landscapes", "power", "profile_step",
           "race_level_error_rates", "recorded_folds", "replay_table", "rung_error_rates",
           "search_replay"]
