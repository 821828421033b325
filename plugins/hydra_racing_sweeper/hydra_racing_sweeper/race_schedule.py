"""The race (RaceSchedule): with `hydra.sweeper.race` set and the grid sampler, a trial is one
candidate (a grid point) that runs its replicate blocks a look at a time; the sweep's loop
(hydra_racing_sweeper/sweep.py) launches them. Everything the race decides follows from what the study
holds: each trial's block results (user attr `race_runs`) and the race settings (study user
attr `race`). So a rerun after a kill, or another sweeper on the same study, replays the same
looks and runs only the blocks still missing. With `rungs`, a candidate whose run of a block
was stopped at a rung (hydra_racing_sweeper/job.py, the job side) leaves the race: its block result
says `stopped_at`, and the replay counts it out.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hydra_racing_sweeper import launcher, readback
from hydra_racing_sweeper.launcher import Job, JobResult, Launcher
from hydra_racing_sweeper.plan import Plan
from hydra_racing_sweeper.race import Look, Race, RaceSpec, RaceTurn, driver
from hydra_racing_sweeper.racing import RacingSchedule, log_limits
from hydra_racing_sweeper.records import outcome_record, stopped_record
from hydra_racing_sweeper.schedule import room
from hydra_racing_sweeper.space import SearchSpace
from hydra_racing_sweeper.study import JOB_DIRS_ATTR, RACE_CANDIDATE_ATTR, RACE_RUNS_ATTR, Heartbeat

log = logging.getLogger(__name__)


def current_trials(trials: list[FrozenTrial], space: SearchSpace) -> dict[Hashable, FrozenTrial]:
    """Each candidate's latest counted trial (readback.counted), by its grid point."""
    return {space.candidate(t): t for t in readback.counted(trials) if t.params}


def turn(trials: list[FrozenTrial], race: RaceSpec, space: SearchSpace) -> RaceTurn:
    """The race replayed from the study (driver.race_turn): looks so far, who is in, and the
    runs the next look needs, in launch order."""
    current = current_trials(trials, space)
    values = {c: readback.block_values(t.user_attrs, race.blocks, race.sign)
              for c, t in current.items()}
    # Not started yet, or running/waiting for a sweeper: it can still run blocks. A candidate
    # stopped at a rung is out, like a failed one: it leaves before the next look, untested.
    live = {c for c in race.candidates
            if c not in current or (current[c].state in (TrialState.RUNNING, TrialState.WAITING)
                                    and readback.stopped_block(current[c].user_attrs) is None)}
    ledger = driver.RaceLedger(race.candidates, values, live,
                               readback.steps_spent(current.values()),
                               readback.run_steps(current.values()))
    return driver.race_turn(ledger, readback.rules(race.settings()), race.baseline, race.budget_steps,
                            bool(race.rungs))


def state(trials: list[FrozenTrial], race: RaceSpec, space: SearchSpace) -> Race:
    return turn(trials, race, space).race


def outcome_attr(race: RaceSpec, result: Race, c: Hashable, n_run: int,
                 failed: bool = False) -> dict[str, Any]:
    """The trial user attr `race`: how the candidate's race ended, with the look that decided
    it (Δ in the objective's units: candidate - leader; driver.race_verdict). With
    equivalence, also the look's (1 - 2 alpha) interval of Δ (`low`, `high`). The answer
    (worse, level, best, undecided) is not stored: the reports derive it from this record
    under today's rule (readback.elimination, looks.look_answer), so an old study reads as the
    code decides now."""
    v = driver.race_verdict(result, c, readback.rules(race.settings()), failed=failed)
    return outcome_record(v, n_run, race.blocks, race.labels.__getitem__, race.sign,
                          race.equivalence)


def stop_attr(race: RaceSpec, trial: FrozenTrial | optuna.Trial, block: str,
              n_run: int) -> dict[str, Any]:
    """The trial user attr `race` of a candidate stopped at a rung: the block, the step, its
    val loss there minus the best other run's (Δ > margin) and which candidate that was."""
    return stopped_record(trial.user_attrs[RACE_RUNS_ATTR], block, n_run)


class RaceSchedule(RacingSchedule):
    """A trial per candidate, launched a look at a time: the grid's candidates are asked, each
    look's blocks run, and a candidate is told once the race is done with it (PRUNED when
    dropped or stopped at a rung, COMPLETE at the end). Every pass replays the race from the
    study (state), so blocks and decisions of another sweeper, or of a killed one, count; while
    a look needs another sweeper's blocks there is nothing to launch and the loop waits."""

    def __init__(self, plan: Plan, launcher: Launcher, objectives: list[str], n_jobs: int,
                 heartbeat: Heartbeat):
        super().__init__(plan, launcher, objectives, n_jobs, heartbeat)
        self.race = Race()
        self.turn = RaceTurn(self.race, [])

    @staticmethod
    def log_plan(plan: Plan) -> None:
        spec = plan.race
        log.info("race over %d replicates: every candidate runs the first %d, then those "
                 "significantly worse than the leader stop (alpha=%g, baseline %s)",
                 len(spec.blocks), spec.min_replicates, spec.alpha,
                 spec.labels.get(spec.baseline, "none"))
        log_limits(spec)

    @staticmethod
    def final_lines(study: optuna.Study) -> list[str]:
        """The console's last line: what the race dropped, kept and spent."""
        return [readback.summary_line(readback.elimination(study))]

    def settle(self, study: optuna.Study) -> bool:
        """Tell my candidates the race is done with: dropped ones PRUNED, and once it is over,
        the rest COMPLETE with their mean over the blocks they ran. Each gets user attr
        RACE_OUTCOME_ATTR: the outcome and the look that decided it (the report's table)."""
        trials = study.get_trials(deepcopy=False)
        self.turn = turn(trials, self.spec, self.plan.space)
        self.race = self.turn.race
        dropped, level = self.race.dropped(), self.race.level()
        self._forget_stale(trials)
        for trial in list(self.mine.values()):
            c = self.plan.space.candidate(trial)
            stopped = readback.stopped_block(trial.user_attrs)
            if c not in dropped and c not in level and not self.race.over and stopped is None:
                continue
            jobs = self._completed(trial)
            self._keep_outcome(trial, stop_attr(self.spec, trial, stopped, len(jobs) + 1)
                               if stopped is not None
                               else outcome_attr(self.spec, self.race, c, len(jobs)))
            if stopped is not None:  # stopped at a rung: out, whatever the looks say
                self._tell_stopped(study, trial, jobs, stopped)
            elif c in dropped:
                self._tell_dropped(study, trial, jobs, dropped[c])
            elif c in level:
                self._tell_level(study, trial, jobs, level[c])
            else:
                launcher.tell(study, trial, jobs, self.plan, self.objectives)
            self._forget(trial)
        return not self.mine and not self.next_jobs(study) and self.wants(study) <= 0

    def next_jobs(self, study: optuna.Study) -> list[Job]:
        """The runs of the driver's turn that are my candidates', in its launch order (block by
        block, best first; with rungs one block a launch), leaving out blocks already in the
        study."""
        mine = {self.plan.space.candidate(t): t for t in self.mine.values()}
        return [(mine[c], self.plan.combinations[b]) for c, b in self.turn.runs
                if c in mine and self._missing(mine[c], b)]

    def wants(self, study: optuna.Study) -> int:
        """Candidates nobody runs yet, or a killed sweeper's retries."""
        return 0 if self.race.over else min(self.n_jobs, room(study, self.plan))

    def admit(self, study: optuna.Study, trials: list[optuna.Trial]) -> None:
        for trial in trials:
            trial.set_user_attr(RACE_CANDIDATE_ATTR,
                                self.spec.labels[self.plan.space.candidate(trial)])
            self.mine[trial.number] = trial

    def _failed_outcome(self, study: optuna.Study, trial: optuna.Trial,
                        jobs: list[JobResult]) -> dict[str, Any]:
        race = state(study.get_trials(deepcopy=False), self.spec, self.plan.space)
        return outcome_attr(self.spec, race, self.plan.space.candidate(trial), len(jobs),
                            failed=True)

    def _tell_stopped(self, study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult],
                      block: str) -> None:
        stop = trial.user_attrs[RACE_RUNS_ATTR][block]
        stopped_dir = trial.user_attrs.get(JOB_DIRS_ATTR, {}).get(block, "?")
        launcher.tell_out(study, trial, jobs, [*(j.run_dir for j in jobs), stopped_dir],
                            self.objectives)
        log.info("trial %d [%s] stopped in %s at step %d: val loss %.4g, above %s's %.4g by "
                 "%.4g > margin=%g", trial.number, self.spec.labels[self.plan.space.candidate(
                     trial)], block, stop["stopped_at"], stop["val_loss"],
                 stop["best"], stop["val_loss"] - stop["delta"], stop["delta"],
                 self.spec.margin_at(stop["stopped_at"]))

    def _tell_level(self, study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult],
                    look: Look) -> None:
        """Level with the leader: told PRUNED with its mean over the blocks it ran, as a
        dropped candidate is (its runs are results; the race needs no more of them)."""
        launcher.tell_out(study, trial, jobs, [j.run_dir for j in jobs], self.objectives)
        plan, c = self.plan, self.plan.space.candidate(trial)
        test = look.tests[c]
        low, high = sorted((plan.race.sign * test.low, plan.race.sign * test.high))
        log.info("trial %d [%s] level with the leader %s after %s: Δ %.4g, its %g%% "
                 "interval [%.4g, %.4g] inside ±%g on %d paired replicates (TOST at "
                 "alpha=%g, %s)", trial.number, plan.race.labels[c],
                 plan.race.labels[look.leader], plan.race.blocks[look.n - 1],
                 plan.race.sign * test.delta, 100 * (1 - 2 * plan.race.alpha), low, high,
                 plan.race.equivalence, look.n, plan.race.alpha, plan.race.test.short())

    def _tell_dropped(self, study: optuna.Study, trial: optuna.Trial, jobs: list[JobResult],
                      look: Look) -> None:
        launcher.tell_out(study, trial, jobs, [j.run_dir for j in jobs], self.objectives)
        plan, c = self.plan, self.plan.space.candidate(trial)
        test = look.tests[c]
        log.info("trial %d [%s] dropped after %s: worse than the leader %s by %.4g on %d "
                 "paired replicates (one-sided %s, Holm-adjusted p=%.3g <= alpha=%g)",
                 trial.number, plan.race.labels[c], plan.race.blocks[look.n - 1],
                 plan.race.labels[look.leader], plan.race.sign * test.delta, look.n,
                 plan.race.test.short(), test.p_adjusted, plan.race.alpha)
