"""Claims: every number the results pages state is a record, recomputed from the committed runs.

A record (docs/results/records/*.yaml) names its runs (a committed results.csv, with the
command, commit and hardware that made them), what it computes from them (its kind: means, a
paired Δ against a baseline, a race's looks, ...), the test and its settings (corrected or
paired t and the fold layout, δ, α), and the numbers as the pages print them. `check`
recomputes every record through the report's own code (qknorm.report.stats, hydra_racing_sweeper.multitest,
the race's looks) and says which number differs beyond its printed digits; the pages' marked
blocks are rendered from the records, so a number is typed once.

  records   the records' home read and checked: sources, records, blocks
  printed   how a printed number agrees with a computed one, and a quote with fewer digits
  inputs    what a record computes from: its sources' runs and its settings, checked
  kinds     what each kind of record computes from its runs, by family: grids (means, Δ
            against a baseline), races (looks, rung stops, the order over evals), studies
            (lr sensitivity, ...)
  page      the pages' marked blocks rendered from the records
  check     every record recomputed, every block compared: what differs

`python -m qknorm.claims check` (CI), `render` (rewrite the blocks), `show ID` (a record's
numbers as the runs give them, to write a new record).
"""
