"""The words a race and a racing search say of a candidate, one vocabulary for both: its trial's
record (the trial user attr `race`), the console's last line, qknorm.status and the report.
Whether a comparison is level, worse or not shown is hydra_racing_sweeper.decision's; here is how a race
words it (ANSWER_OF).

How it left, or stands (the trial's outcome):
  DROPPED   a race's look found it significantly worse than the leader (Holm)
  LEVEL     a look found it level with the leader (or the incumbent) within ±δ (TOST)
  STOPPED   a run of it was stopped inside its replicate, at a rung (the margin rule)
  SURVIVED  in the race at its end
  FAILED    a run of it failed
  NOT_RUN   a search's proposal the search ended before it ran a replicate (its budget: no
            further run fit), its trial closed with none
  RACING    still running replicates (a search's challenger on its way to a takeover)
  NOT_STARTED  a race's candidate no sweeper has asked for yet
  INCUMBENT the racing search's best of the moment
  PARKED    a search's challenger behind by less than δ while it explores, confirmed later

What a look did with a candidate (driver.look_verdict: the claims' record of a race's looks,
scripts/race_replay.py): DROPPED, LEVEL, or
  STAYS     in the race after the look

The answer (what the race says of it at the end):
  BEST      the leader of the last look, or the search's incumbent
  WORSE     dropped, or decision.WORSE at its last look (shown behind, not level)
  LEVEL     decision.LEVEL: level within ±δ
  UNDECIDED decision.NOT_SHOWN, or stopped at a rung (untested)
A race asks one way (behind the leader or not), so it never answers decision.BETTER.
"""

from __future__ import annotations

from hydra_racing_sweeper import decision

DROPPED, SURVIVED, FAILED, STOPPED = "dropped", "survived", "failed", "stopped"
LEVEL = decision.LEVEL  # left the race level with the leader (equivalence, TOST)
RACING, NOT_STARTED = "racing", "not started"
NOT_RUN = "not run"  # a proposal the search ended (its budget) before it ran anything
INCUMBENT = "incumbent"
PARKED = "parked"  # behind by less than δ while the search explores: confirmed later, or told
WORSE, BEST, UNDECIDED = decision.WORSE, "best", "undecided"
STAYS = "stays"  # neither dropped nor taken out level at a look
# A comparison's outcome (hydra_racing_sweeper.decision, asked one way) as a race answers it.
ANSWER_OF = {decision.LEVEL: LEVEL, decision.WORSE: WORSE, decision.NOT_SHOWN: UNDECIDED}

# The answer an outcome gives by itself (every other outcome is its own answer; a race's
# survivor is answered by its last look: looks.look_answer). Stopped at a rung: undecided, since the
# margin rule saves compute and tests nothing (on noisy curves it stops p the grid does not
# show worse, docs/search.md).
ANSWER = {DROPPED: WORSE, STOPPED: UNDECIDED, INCUMBENT: BEST}


def outcome_answer(outcome: str) -> str:
    """The answer of an outcome that needs no look (ANSWER; else the outcome itself)."""
    return ANSWER.get(outcome, outcome)
