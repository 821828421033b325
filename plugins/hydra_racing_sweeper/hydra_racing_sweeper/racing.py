"""The racing schedules: the race (RaceSchedule) and the racing search (RaceSearchSchedule),
beside the plain one (hydra_racing_sweeper/schedule.py). The race's rules are pure
(hydra_racing_sweeper/race/: looks, intensify, stepped by its driver); these schedules adapt the driver to
a study. What both do alike is in their base, RacingSchedule (as SMAC3's AbstractIntensifier holds its
intensifiers' common steps): the study checked and its settings kept, each launched block's result kept in
its trial, a trial another sweeper failed as stale left to its retry.

The race (RaceSchedule): with `hydra.sweeper.race` set and the grid sampler, a trial is one
candidate (a grid point) that runs its replicate blocks a look at a time; the sweep's loop
(hydra_racing_sweeper/sweep.py) launches them. Everything the race decides follows from what the study
holds: each trial's block results (user attr `race_runs`) and the race settings (study user
attr `race`). So a rerun after a kill, or another sweeper on the same study, replays the same
looks and runs only the blocks still missing. With `rungs`, a candidate whose run of a block
was stopped at a rung (hydra_racing_sweeper/job.py, the job side) leaves the race: its block result
says `stopped_at`, and the replay counts it out.

The racing search (RaceSearchSchedule): hydra.sweeper.race with a tpe, gp or random sampler
(search=p_tpe). The sampler proposes one candidate at a time, and each is raced against the
incumbent block by block (hydra_racing_sweeper/race/intensify.py: the rules, the answer). The study
holds everything, as for a race (with `search`, the sampler, in its settings). Proposals are
ordered by the trial that first proposed them (a killed sweeper's retry keeps its original's
place).

What the sampler is told: it never sees the study's trials. Before each proposal, a fresh
in-memory study gets every proposal so far with its fold-adjusted value against the incumbent
of the moment (intensify.adjusted_value: the incumbent's mean plus the mean paired difference,
or the gap at the rung for one stopped in its first block), and its sampler, seeded by (seed,
proposals so far), proposes the next; the proposal is enqueued in the study and asked for
there. So every value the sampler learns from is on the incumbent's folds, a stopped proposal
counts as what it showed, and the same study always gets the same next proposal.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hydra_racing_sweeper import launcher, readback, specs
from hydra_racing_sweeper.errors import UserError
from hydra_racing_sweeper.launcher import Job, JobResult, Launcher
from hydra_racing_sweeper.plan import Plan
from hydra_racing_sweeper.race import (
    FAILED,
    INCUMBENT,
    PARKED,
    RACING,
    STOPPED,
    Judgement,
    Look,
    Proposal,
    Race,
    RaceSpec,
    RaceTurn,
    Rules,
    Search,
    SearchTurn,
    driver,
)
from hydra_racing_sweeper.rundir import COMPLETED, PRUNED
from hydra_racing_sweeper.schedule import room
from hydra_racing_sweeper.space import SearchSpace
from hydra_racing_sweeper.study import (
    JOB_DIRS_ATTR,
    RACE_CANDIDATE_ATTR,
    RACE_OUTCOME_ATTR,
    RACE_RUNS_ATTR,
    RACE_SETTINGS_ATTR,
    RACE_STOP_ATTR,
    RETRIED_ATTR,
    STATUS_ATTR,
    SURPLUS,
    Heartbeat,
    block_label,
    left_to_retry,
)

log = logging.getLogger(__name__)


def check_study(study: optuna.Study, race: RaceSpec, study_name: str) -> None:
    """A study holds one race: a rerun must race the same way. Raises before touching it."""
    have = study.user_attrs.get(RACE_SETTINGS_ATTR)
    want = race.settings()
    if have is None and study.get_trials(deepcopy=False):
        raise UserError(f"study {study_name!r} holds a sweep that was not a race; race under "
                        "another hydra.sweeper.study_name")
    for key in want if have is not None else ():
        value = have.get(key)  # a key the study lacks: raced before it existed, i.e. None
        if want.get(key) != value:
            raise UserError(f"study {study_name!r} was raced with {key}={value!r}, not "
                            f"{want.get(key)!r}; rerun with its settings or use another "
                            "hydra.sweeper.study_name")


def record_settings(study: optuna.Study, race: RaceSpec) -> None:
    if RACE_SETTINGS_ATTR not in study.user_attrs:
        study.set_user_attr(RACE_SETTINGS_ATTR, race.settings())


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
    return driver.race_turn(ledger, rules(race), race.baseline, race.budget_steps,
                            bool(race.rungs))


def state(trials: list[FrozenTrial], race: RaceSpec, space: SearchSpace) -> Race:
    return turn(trials, race, space).race


def outcome_attr(race: RaceSpec, result: Race, c: Hashable, n_run: int,
                 failed: bool = False) -> dict[str, Any]:
    """The trial user attr `race`: how the candidate's race ended, with the look that decided
    it (Δ in the objective's units: candidate - leader; driver.race_verdict). With
    equivalence, also the look's (1 - 2 alpha) interval of Δ (`low`, `high`). The answer
    (worse, level, best, undecided) is not stored: the reports derive it from this record
    under today's rule (readback.elimination, looks.answer), so an old study reads as the
    code decides now."""
    v = driver.race_verdict(result, c, rules(race), failed=failed)
    return outcome_record(v, n_run, race.blocks, race.labels.__getitem__, race.sign,
                          race.equivalence)


def outcome_record(v: driver.RaceVerdict, n_run: int, blocks: Sequence[str],
                   label: Callable[[Hashable], str], sign: float,
                   equivalence: float | None) -> dict[str, Any]:
    """outcome_attr's record of a verdict (also what a report rebuilt without its study writes,
    qknorm/report/racerebuild.py): Δ and the interval turned back to the objective's sign,
    the leader by its label."""
    out: dict[str, Any] = {"outcome": v.outcome, "n": n_run,
                           "after": blocks[n_run - 1] if n_run else None}
    test = v.test
    if v.look is not None:
        out.update(look=v.look.n, leader=label(v.look.leader),
                   delta=None if test is None else sign * test.delta,
                   p=None if test is None else test.p,
                   p_adjusted=None if test is None else test.p_adjusted)
    if equivalence is not None:
        low, high = ((None, None) if test is None or test.low is None else
                     sorted((sign * test.low, sign * test.high)))
        out.update(low=low, high=high)
    return out


def rules(race: RaceSpec) -> Rules:
    """The race's settings as the driver's rules."""
    return Rules(len(race.blocks), race.min_replicates, race.alpha, race.equivalence, race.test)


def stop_attr(race: RaceSpec, trial: FrozenTrial | optuna.Trial, block: str,
              n_run: int) -> dict[str, Any]:
    """The trial user attr `race` of a candidate stopped at a rung: the block, the step, its
    val loss there minus the best other run's (Δ > margin) and which candidate that was."""
    return stopped_record(trial.user_attrs[RACE_RUNS_ATTR], block, n_run)


def stopped_record(runs: Mapping[str, dict], block: str, n_run: int) -> dict[str, Any]:
    """stop_attr's record, from the candidate's race_runs (a rebuilt report's too)."""
    stop = runs[block]
    return {"outcome": STOPPED, "n": n_run, "after": block, "step": stop["stopped_at"],
            "leader": stop.get("best"), "delta": stop.get("delta"), "p": None,
            "p_adjusted": None}


def stopped_entry(stop: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """A block whose run was stopped at a rung, as race_runs keeps it: no value (the run did
    not finish), its partial cost, and where and why it stopped (the job's race_stop attr)."""
    return {**run_entry(None, fields), "stopped_at": int(stop["step"]),
            "val_loss": stop["value"], "best": stop["best"], "delta": stop["delta"]}


def with_block(trial: optuna.Trial, combo: list[str], job: JobResult, written: dict[str, Any],
               objective: str) -> dict[str, Any] | None:
    """The trial's race_runs with a launched block added: its value, or where its run stopped
    at a rung (the job's race_stop attr, in `written`, the trial's attrs fresh from the
    storage); None: the run failed (the caller fails the trial)."""
    value = launcher.objective(job, objective)
    stop = written.get(RACE_STOP_ATTR + block_label(combo))
    runs = trial.user_attrs.get(RACE_RUNS_ATTR, {})
    if value is None and job.status == PRUNED and stop is not None:
        runs[block_label(combo)] = stopped_entry(stop, job.fields)
    elif value is None:
        return None
    else:
        runs[block_label(combo)] = run_entry(value, job.fields)
    return runs


def keep_runs(trial: optuna.Trial, runs: dict[str, Any]) -> None:
    """Write race_runs as soon as a launch returns; a trial another sweeper failed as stale
    meanwhile is left to its retry, which runs the block again."""
    with launcher.unless_failed_elsewhere(trial):
        trial.set_user_attr(RACE_RUNS_ATTR, runs)


def run_entry(value: float | None, fields: dict[str, Any]) -> dict[str, Any]:
    """One block's result as the study keeps it: the value and the run's cost."""
    steps, wall, threads = (fields.get(k) for k in ("steps", "wall_time_s", "threads"))
    core_s = (float(wall) * float(threads)
              if _finite(wall) and _finite(threads) else None)
    return {"value": value, "steps": int(steps) if _finite(steps) else None, "core_s": core_s}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def completed_jobs(trial: FrozenTrial | optuna.Trial, blocks: tuple[str, ...],
                   objective: str) -> list[JobResult]:
    """The trial's completed blocks as job results, in block order; not one stopped at a
    rung."""
    runs = readback.completed(trial.user_attrs.get(RACE_RUNS_ATTR, {}))
    dirs = trial.user_attrs.get(JOB_DIRS_ATTR, {})
    return [JobResult(COMPLETED, dirs.get(b, "?"), {objective: runs[b]["value"]})
            for b in blocks if b in runs]


def log_limits(spec: RaceSpec) -> None:
    """The plan's lines every racing schedule logs after its own: the rungs, δ, the budget."""
    if spec.rungs:
        log.info("in-fold stopping: a run more than its margin above the best other run of "
                 "its replicate at a rung stops there, and its candidate leaves the race; "
                 "rungs: %s", spec.rung_words())
    if spec.equivalence is not None:
        log.info("equivalence: a candidate whose %g%% paired t-interval of its difference to "
                 "the leader lies inside ±%g leaves, level with it (TOST at alpha=%g)",
                 100 * (1 - 2 * spec.alpha), spec.equivalence, spec.alpha)
    if spec.budget_steps is not None:
        log.info("budget: no run launches that would take the runs past %d training steps",
                 spec.budget_steps)


class RacingSchedule:
    """What the two racing schedules do alike (SMAC3's AbstractIntensifier holds its
    intensifiers' common steps so): the study checked and its settings kept before the loop,
    each launched block's result kept in its trial, a block that failed failing its trial, and
    a trial another sweeper failed as stale left to its retry. A subclass says how it plans,
    settles, asks and what a failed block's trial records (_failed_outcome)."""

    def __init__(self, plan: Plan, launcher: Launcher, objectives: list[str], n_jobs: int,
                 heartbeat: Heartbeat):
        # launcher: the loop's (a schedule's common signature); a racing schedule's jobs need
        # none
        self.plan, self.spec, self.objectives = plan, plan.race, objectives
        self.n_jobs, self.heartbeat = n_jobs, heartbeat
        self.mine: dict[int, optuna.Trial] = {}  # this sweeper's trials still racing

    @staticmethod
    def check_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        check_study(study, plan.race, study_name)

    @staticmethod
    def prepare_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        """Before the loop: a rerun must race (or search) as the study was (check_study), which
        then keeps the settings."""
        check_study(study, plan.race, study_name)
        record_settings(study, plan.race)

    def record(self, study: optuna.Study, jobs: list[Job], results: list[JobResult]) -> None:
        """Keep each block's result in its trial (RACE_RUNS_ATTR) as soon as the launch returns;
        a block that failed fails its trial, which leaves the race."""
        # Fresh from the storage: what the jobs wrote there (the rung stops) is not in `trial`.
        written = {t.number: t.user_attrs for t in study.get_trials(deepcopy=False)}
        for (trial, combo), job in zip(jobs, results, strict=True):
            if trial.number not in self.mine:
                continue  # failed on an earlier block of this launch
            runs = with_block(trial, combo, job, written[trial.number], self.objectives[0])
            if runs is None:
                self._tell_failed(study, trial, job)
                continue
            keep_runs(trial, runs)  # a stopped block: out, settle tells it

    def _tell_failed(self, study: optuna.Study, trial: optuna.Trial, job: JobResult) -> None:
        jobs = self._completed(trial)
        self._keep_outcome(trial, self._failed_outcome(study, trial, jobs))
        launcher.tell(study, trial, [*jobs, job], self.plan, self.objectives,
                      self._logged_as(trial))
        self._forget(trial)

    def _failed_outcome(self, study: optuna.Study, trial: optuna.Trial,
                        jobs: list[JobResult]) -> dict[str, Any]:
        raise NotImplementedError

    def _logged_as(self, trial: optuna.Trial) -> str | None:
        """The trial as the log names it (None: its overrides)."""
        return None

    def _forget_stale(self, trials: list[FrozenTrial]) -> None:
        """Mine that another sweeper failed as stale: its retry carries the trial on."""
        for t in trials:
            if t.number in self.mine and t.state.is_finished():
                left_to_retry(t.number)
                self._forget(self.mine[t.number])

    def _keep_outcome(self, trial: optuna.Trial, outcome: dict[str, Any]) -> None:
        """The trial user attr RACE_OUTCOME_ATTR: how its race ended (the report's table)."""
        with launcher.unless_failed_elsewhere(trial):
            trial.set_user_attr(RACE_OUTCOME_ATTR, outcome)

    def _completed(self, trial: FrozenTrial | optuna.Trial) -> list[JobResult]:
        return completed_jobs(trial, self.spec.blocks, self.objectives[0])

    def _missing(self, trial: FrozenTrial | optuna.Trial, block: int) -> bool:
        """The block is not in the trial's race_runs yet (not run, nor running elsewhere)."""
        return self.spec.blocks[block] not in trial.user_attrs.get(RACE_RUNS_ATTR, {})

    def _forget(self, trial: optuna.Trial) -> None:
        del self.mine[trial.number]
        self.heartbeat.discard(trial._trial_id)


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



class RaceSearchSchedule(RacingSchedule):
    """A trial per proposal; a proposal runs the blocks the driver's turn asks for, one at a
    time; it is told once its race is decided (PRUNED: worse, level, undecided, stopped). At
    the end the incumbent is told COMPLETE with its mean over its blocks, and the proposals
    still open (racing, parked) PRUNED: the answer (driver.answer) says what they are."""

    def __init__(self, plan: Plan, launcher: Launcher, objectives: list[str], n_jobs: int,
                 heartbeat: Heartbeat):
        super().__init__(plan, launcher, objectives, n_jobs, heartbeat)
        self.settings = plan.race.settings()
        self.trials: list[FrozenTrial] = []  # the proposals' trials, in proposal order
        self.props: list[Proposal] = []
        self.turn = SearchTurn(Search(), [], False, False, True)
        self.waiting = False  # a killed sweeper's retries wait to be asked
        self.exhausted = False  # the sampler proposed only repeats (a small categorical space)

    @staticmethod
    def log_plan(plan: Plan) -> None:
        spec = plan.race
        budget = (f"{spec.explore:.0%} of the budget is spent or " if spec.budget_steps
                  else "")
        log.info("a search that races its proposals over %d replicates: %s proposes one at a "
                 "time; each runs the incumbent's first replicate and goes on only while it "
                 "leads (δ/2 on the first), taking the incumbent's place once its mean over every "
                 "replicate the incumbent ran (at least %d) is lower; once %sn_trials are made, "
                 "the close ones run on "
                 "until level or worse (one-sided %s at alpha=%g; docs/search.md)",
                 len(spec.blocks), spec.search, spec.min_replicates, budget, spec.test.short(),
                 spec.alpha)
        log_limits(spec)

    @staticmethod
    def final_lines(study: optuna.Study) -> list[str]:
        """The console's last line: the search's answer (readback.answer_lines)."""
        return readback.search_lines(study)

    def _replay(self, study: optuna.Study) -> list[FrozenTrial]:
        """The search's next turn (hydra_racing_sweeper/race/driver.py), from the study: once per pass of
        the loop (settle)."""
        everything = study.get_trials(deepcopy=False)
        self.trials, self.props = readback.ledger(everything, self.settings,
                                                  self.spec.sign)
        self.waiting = any(t.state == TrialState.WAITING for t in everything)
        # Read once: nothing is asked before the next pass, which reads the study again.
        self.turn = driver.search_turn(
            self.props, readback.rules(self.settings), self.spec.budget_steps,
            self.spec.explore, self.n_jobs, room(study, self.plan, everything), self.exhausted)
        return everything

    def settle(self, study: optuna.Study) -> bool:
        everything = self._replay(study)
        self._forget_stale(everything)
        index = {t.number: i for i, t in enumerate(self.trials)}
        done = driver.closed(self.turn)
        for trial in list(self.mine.values()):
            i = index.get(trial.number)
            if i not in done:
                continue
            judged = self.turn.search.judged[i]
            self._keep_outcome(trial, self._outcome(i, judged))
            jobs = self._completed(trial)
            dirs = [*trial.user_attrs.get(JOB_DIRS_ATTR, {}).values()]
            if judged.outcome == INCUMBENT:
                launcher.tell(study, trial, jobs, self.plan, self.objectives, _shown(trial))
            else:  # out, or still racing when the search ended (its answer says undecided)
                launcher.tell_out(study, trial, jobs, dirs, self.objectives)
            log.info("trial %d [%s]: %s", trial.number, _shown(trial), _words(judged))
            self._forget(trial)
        return self.turn.over and not self.mine and not self.waiting  # killed sweepers' too

    def _failed_outcome(self, study: optuna.Study, trial: optuna.Trial,
                        jobs: list[JobResult]) -> dict[str, Any]:
        return {"outcome": FAILED}

    def _logged_as(self, trial: optuna.Trial) -> str | None:
        return _shown(trial)

    def _outcome(self, i: int, j: Judgement) -> dict[str, Any]:
        inc = j.against if j.against is not None else self.turn.search.incumbent
        return {"outcome": j.outcome, "n": j.n,
                "incumbent": None if inc is None else _label(self.plan, self.trials[inc]),
                "delta": j.delta, "p": j.p, "low": j.low, "high": j.high}

    def next_jobs(self, study: optuna.Study) -> list[Job]:
        """The runs of the driver's turn that are my proposals' (the incumbent's first; none
        while it makes a new proposal, whose first block joins the next launch)."""
        jobs = []
        for i, b in self.turn.runs:
            trial = self.mine.get(self.trials[i].number)
            if trial is not None and self._missing(trial, b):
                jobs.append((trial, self.plan.combinations[b]))
        return jobs

    def wants(self, study: optuna.Study) -> int:
        """A retry of a killed sweeper's proposal, else one new proposal (enqueued here, asked
        for by the loop) when the driver's turn makes one."""
        if self.waiting:  # asked by the loop (Optuna's ask takes waiting trials first)
            return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        if not self.turn.propose:
            return 0
        params = self._propose(study)
        if params is None:  # the sampler proposes only candidates already raced: none is left
            self.exhausted = True
            return 0
        study.enqueue_trial(params)
        return 1

    def _propose(self, study: optuna.Study) -> dict[str, Any] | None:
        told = [(t.params, v) for t, v in zip(self.trials, driver.told(self.props, self.turn.search),
                                              strict=True)]
        spec = self.plan.sampler_spec
        return propose(proposal_sampler(spec), told, self.plan.space.distributions, self.spec.initial)

    def admit(self, study: optuna.Study, trials: list[optuna.Trial]) -> None:
        """Take the asked trials; one that repeats an earlier proposal (two sweepers proposed
        the same point at once) is given up before it runs, as a surplus trial is."""
        everything = study.get_trials(deepcopy=False)
        earlier, frozen = readback.proposals(everything), {t.number: t for t in everything}
        for trial in trials:
            if RETRIED_ATTR not in frozen[trial.number].system_attrs and any(
                    t.number < trial.number and t.params == trial.params for t in earlier):
                trial.set_user_attr(STATUS_ATTR, SURPLUS)
                study.tell(trial, state=TrialState.FAIL)
                self.heartbeat.discard(trial._trial_id)
                log.info("trial %d not run: another sweeper proposed %s first", trial.number,
                         _shown(trial))
                continue
            trial.set_user_attr(RACE_CANDIDATE_ATTR, _label(self.plan, trial))
            self.mine[trial.number] = trial


def propose(make: Callable[[int], optuna.samplers.BaseSampler], told: list[tuple[dict, Any]],
            distributions: dict, initial: Sequence[dict] = (),
            attempts: int = 16) -> dict[str, Any] | None:
    """The next proposal: the first of `initial` (the initial design, race.initial) not yet
    proposed; else a fresh in-memory study is told every proposal so far with its value (None:
    not known yet, left out), and its sampler, made by `make(n)` for the n-th ask, proposes; a
    repeat of an earlier proposal is told its value and the sampler asked again, up to
    `attempts` times (then None: nothing new to propose)."""
    known = [params for params, _ in told]
    design = next((params for params in initial if params not in known), None)
    if design is not None:
        return dict(design)
    told = [(params, value) for params, value in told if value is not None]
    for attempt in range(attempts):
        with _quiet():  # not "A new study created in memory" before every proposal
            shadow = optuna.create_study(direction="minimize",
                                         sampler=make(len(known) * attempts + attempt))
        for params, value in told:
            shadow.add_trial(optuna.trial.create_trial(params=params, distributions=distributions,
                                                       value=value))
        params = shadow.ask(distributions).params
        if params not in known:
            return params
        value = dict((repr(p), v) for p, v in told).get(repr(params))
        if value is not None:
            told.append((params, value))
    return None


@contextlib.contextmanager
def _quiet():
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


def proposal_sampler(spec: dict[str, Any]) -> Callable[[int], optuna.samplers.BaseSampler]:
    """The sampler of a search's n-th proposal: the sampler spec reseeded by n, so the same study
    always gets the same next proposal (the continuous replays make theirs so too; the grid
    replays still seed theirs as seed * 100,000 + n, race_sims.sampler_factory)."""
    return lambda n: specs.build_sampler({**spec, "seed": _seed(spec, n)}, None)


def _seed(spec: dict[str, Any], n: int) -> int | None:
    seed = spec.get("seed")
    return None if seed is None else (specs.reseeded(spec, n) or {}).get("seed", seed)


def _label(plan: Plan, trial: FrozenTrial | optuna.Trial) -> str:
    """The proposal as its trial records it (RACE_CANDIDATE_ATTR): its overrides."""
    return plan.space.label(trial.params)


def _shown(trial: FrozenTrial | optuna.Trial) -> str:
    """The proposal as the log says it: as the answer names it (readback.short, norm.p=4.873),
    so one proposal reads the same in every line."""
    return readback.short({"params": dict(trial.params)})


# A proposal's log line is the search's step, not its answer: the answer (readback.answer) tests
# every proposal once more against the final best, Holm-adjusted over all of them, so a "worse"
# here may read "undecided" there (issue 67: the log and the answer disagreed without a word).
FINAL_TEST = ("; its answer comes at the end, tested against the final best with Holm over "
              "every proposal (it may read undecided)")


def _words(j: Judgement) -> str:
    if j.outcome == INCUMBENT:
        return f"the incumbent after {j.n} replicates"
    if j.outcome in (RACING, PARKED) and j.n == 0:  # proposed, then no further run fit
        return "not run: the search ended before its first replicate"
    if j.outcome in (RACING, PARKED):
        return f"still in the search when it ended, after {j.n} replicates"
    if j.delta is None:
        return f"{j.outcome} after {j.n} replicates"
    words = (f"{j.outcome} against the incumbent of the moment after {j.n} replicates: "
             f"Δ {j.delta:+.4g}")
    if j.p is not None:  # one replicate: no test (screened out on its first)
        words += f", interval [{j.low:+.4g}, {j.high:+.4g}], one-sided p {j.p:.3g}"
    return words + FINAL_TEST
