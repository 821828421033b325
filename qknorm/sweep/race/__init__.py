"""The race: trials raced over their replicates (e.g. folds), a look at a time, so that the ones
shown worse stop early.

Two forms, set by hydra.sweeper.race: a race over the grid's candidates (sampler grid: every
candidate runs the first min_replicates blocks, then each look drops those significantly worse
than the leader, docs/race.md), and a racing search (sampler tpe, gp or random: each proposal
is raced block by block against the incumbent, SMAC's intensification, docs/search.md). Both
may stop a run inside its replicate at a rung, and take out a candidate level with the leader
within ±δ.

The rules are pure functions of the values the runs recorded; one driver steps them for the
live schedules, the research replays (qknorm/research/race_sims.py) and the tests alike. The
schedules adapt the driver to a study, and everything a race decides is replayed from what the
study holds, so a resumed sweep, or a second sweeper on the study, decides the same.

  settings   hydra.sweeper.race typed (RaceConf) and checked (plan_race -> RaceSpec)
  rungs      the rungs checked and resolved to eval steps (resolve_rungs; the replays too)
  verdicts   the words said of a candidate (dropped, level, worse, best, incumbent, ...)
  looks      the race's rules: a look's tests (Holm, TOST), the replay, the rung stop, the order
  intensify  the racing search's rules: a challenger against the incumbent, the final answer
  driver     what a race or a search runs next, from its ledger of recorded values
  schedule   RaceSchedule (the sweep's loop runs it), and what it and RaceSearchSchedule
             keep in a study
  search     RaceSearchSchedule, and `propose` (a sampler's next proposal, also the replays')
  readback   from a study: its kind (plain, race, search), the race's elimination table and
             console line, the search's proposals and answer (light: the status line reads it)

Nothing is loaded here: a training job's rung check (qknorm/sweep/job.py) imports `looks`
alone.
"""
