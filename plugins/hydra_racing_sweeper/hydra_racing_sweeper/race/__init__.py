"""The race: trials raced over their replicates (e.g. folds), a look at a time, so that the ones
shown worse stop early. Its rules, as pure functions of the values the runs recorded: no
Optuna, no study, nothing of qknorm.sweep outside this package (tests/test_faces.py checks).

Two forms, set by hydra.sweeper.race: a race over the grid's candidates (sampler grid: every
candidate runs the first min_replicates blocks, then each look drops those significantly worse
than the leader, docs/race.md), and a racing search (sampler tpe, gp or random: each proposal
is raced block by block against the incumbent, SMAC's intensification, docs/search.md). Both
may stop a run inside its replicate at a rung, and take out a candidate level with the leader
within ±δ.

One driver steps the rules for the live schedules (hydra_racing_sweeper/race_schedule.py and
hydra_racing_sweeper/search_schedule.py, which adapt it to a study), the research replays
(qknorm/research/race_sims.py) and the tests alike; what a study of them holds is read back by
hydra_racing_sweeper/readback/.

What the rest uses is named here (`__all__`), as Optuna's `optuna.pruners` names its pruners:
the names below, each one idea under one name (no two rooms share a name), and the modules
`driver`, `looks`, `intensify` and `verdicts` as namespaces of them: `driver.race_turn` is
`race_turn`, and no name outside `__all__` is used through a module (tests/test_faces.py
checks both). The rooms:

  settings   hydra.sweeper.race typed (RaceConf) and checked as far as no search space is
             needed (checked_race -> RaceSpec; the plan adds the candidates); the looks'
             test chosen from the replicate keys (replicate_test)
  rungs      the rungs checked and resolved to eval steps (resolve_rungs; the replays too),
             one resolution for every candidate's run length (judged_at)
  verdicts   the words said of a candidate (dropped, level, worse, best, incumbent, ...)
  looks      the race's rules: a look's tests (Holm, TOST), the replay, the rung stop, the order
  intensify  the racing search's rules: a challenger against the incumbent, the final answer
  driver     what a race or a search runs next, from its ledger of recorded values
"""

from hydra_racing_sweeper.race import driver, intensify, looks, verdicts
from hydra_racing_sweeper.race.driver import (
    RaceLedger,
    RaceTurn,
    RaceVerdict,
    SearchTurn,
    closed,
    fits,
    look_verdict,
    race_turn,
    race_verdict,
    runs_fit,
    search_answer,
    search_turn,
    spent,
    told,
)
from hydra_racing_sweeper.race.intensify import (
    Judgement,
    Proposal,
    Rules,
    Search,
    adjusted_value,
    compare,
    final_judgements,
    replay_search,
)
from hydra_racing_sweeper.race.looks import (
    Look,
    Race,
    Stop,
    Test,
    look,
    look_answer,
    paired_t_greater,
    replay_race,
    standing,
    stop_at_rung,
    test_outcome,
)
from hydra_racing_sweeper.race.rungs import Dropped, checked_rungs, judged_at, resolve_rungs
from hydra_racing_sweeper.race.settings import (
    SEARCH_SAMPLERS,
    RaceConf,
    RaceSpec,
    checked_race,
    race_conf,
    replicate_test,
    step_margins,
)
from hydra_racing_sweeper.race.verdicts import (
    BEST,
    DROPPED,
    FAILED,
    INCUMBENT,
    LEVEL,
    NOT_RUN,
    NOT_STARTED,
    PARKED,
    RACING,
    STAYS,
    STOPPED,
    SURVIVED,
    UNDECIDED,
    WORSE,
    outcome_answer,
)

__all__ = [
    "driver", "intensify", "looks", "verdicts",
    # the driver: a race's or a search's next turn, its verdicts, the budget
    "RaceLedger", "RaceTurn", "RaceVerdict", "SearchTurn", "closed", "fits", "look_verdict",
    "race_turn", "race_verdict", "runs_fit", "search_answer", "search_turn", "spent", "told",
    # the racing search's rules (intensify)
    "Judgement", "Proposal", "Rules", "Search", "adjusted_value", "compare", "final_judgements",
    "replay_search",
    # the race's rules (looks)
    "Look", "Race", "Stop", "Test", "look", "look_answer", "paired_t_greater", "replay_race",
    "standing", "stop_at_rung", "test_outcome",
    "Dropped", "checked_rungs", "judged_at", "resolve_rungs",
    "SEARCH_SAMPLERS", "RaceConf", "RaceSpec", "checked_race", "race_conf", "replicate_test",
    "step_margins",
    "BEST", "DROPPED", "FAILED", "INCUMBENT", "LEVEL", "NOT_RUN", "NOT_STARTED",
    "PARKED", "RACING", "STAYS", "STOPPED", "SURVIVED", "UNDECIDED", "WORSE", "outcome_answer",
]
