"""The racing search: hydra.sweeper.race with a tpe, gp or random sampler (search=p_tpe).

The sampler proposes one candidate at a time, and each is raced against the incumbent block by
block (qknorm/sweep/race/intensify.py: the rules, the answer). The study holds everything: each
trial's block results (user attr `race_runs`, as a race keeps them) and the settings (study
user attr `race`, with `search`: the sampler), so a rerun after a kill, or a second sweeper on
the study, replays the same decisions and runs only what is missing. Proposals are ordered by
the trial that first proposed them (a killed sweeper's retry keeps its original's place).

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
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from qknorm.sweep import launcher, specs
from qknorm.sweep.launcher import Job, JobResult, Launcher
from qknorm.sweep.plan import Plan
from qknorm.sweep.race import driver, intensify, readback
from qknorm.sweep.race.schedule import (
    check_study,
    completed_jobs,
    keep_runs,
    log_limits,
    record_settings,
    with_block,
)
from qknorm.sweep.race.verdicts import FAILED, INCUMBENT, PARKED, RACING
from qknorm.sweep.schedule import room
from qknorm.sweep.study import (
    JOB_DIRS_ATTR,
    RACE_CANDIDATE_ATTR,
    RACE_OUTCOME_ATTR,
    RACE_RUNS_ATTR,
    RETRIED_ATTR,
    STATUS_ATTR,
    SURPLUS,
    Heartbeat,
    left_to_retry,
)

log = logging.getLogger(__name__)


class RaceSearchSchedule:
    """A trial per proposal; a proposal runs the blocks the driver's step asks for, one at a
    time; it is told once its race is decided (PRUNED: worse, level, undecided, stopped). At
    the end the incumbent is told COMPLETE with its mean over its blocks, and the proposals
    still open (racing, parked) PRUNED: the answer (driver.answer) says what they are."""

    def __init__(self, plan: Plan, launcher: Launcher, objectives: list[str], n_jobs: int,
                 heartbeat: Heartbeat):
        # launcher: the loop's (a schedule's common signature); the search's jobs need none
        self.plan, self.spec, self.objectives = plan, plan.race, objectives
        self.n_jobs, self.heartbeat = n_jobs, heartbeat
        self.mine: dict[int, optuna.Trial] = {}
        self.settings = plan.race.settings()
        self.trials: list[FrozenTrial] = []  # the proposals' trials, in proposal order
        self.props: list[intensify.Proposal] = []
        self.step = driver.SearchStep(intensify.Search(), [], False, False, True)
        self.waiting = False  # a killed sweeper's retries wait to be asked
        self.exhausted = False  # the sampler proposed only repeats (a small categorical space)

    @staticmethod
    def check_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        check_study(study, plan.race, study_name)

    @staticmethod
    def prepare_study(plan: Plan, study: optuna.Study, study_name: str) -> None:
        """Before the loop: a rerun must search as the study was searched (check_study), which
        then keeps the search's settings."""
        check_study(study, plan.race, study_name)
        record_settings(study, plan.race)

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
        """The search's next step (qknorm/sweep/race/driver.py), from the study: once per pass of
        the loop (settle)."""
        everything = study.get_trials(deepcopy=False)
        self.trials, self.props = readback.ledger(everything, self.settings,
                                                  self.spec.sign)
        self.waiting = any(t.state == TrialState.WAITING for t in everything)
        # Read once: nothing is asked before the next pass, which reads the study again.
        self.step = driver.search_step(
            self.props, readback.rules(self.settings), self.spec.budget_steps,
            self.spec.explore, self.n_jobs, room(study, self.plan, everything), self.exhausted)
        return everything

    def settle(self, study: optuna.Study) -> bool:
        everything = self._replay(study)
        for t in everything:  # failed as stale by another sweeper: its retry carries it on
            if t.number in self.mine and t.state.is_finished():
                left_to_retry(t.number)
                self._forget(self.mine[t.number])
        index = {t.number: i for i, t in enumerate(self.trials)}
        done = driver.closed(self.step)
        for trial in list(self.mine.values()):
            i = index.get(trial.number)
            if i not in done:
                continue
            judged = self.step.search.judged[i]
            with launcher.unless_failed_elsewhere(trial):
                trial.set_user_attr(RACE_OUTCOME_ATTR, self._outcome(i, judged))
            jobs = completed_jobs(trial, self.spec.blocks, self.objectives[0])
            dirs = [*trial.user_attrs.get(JOB_DIRS_ATTR, {}).values()]
            if judged.outcome == INCUMBENT:
                launcher.tell(study, trial, jobs, self.plan, self.objectives, _shown(trial))
            else:  # out, or still racing when the search ended (its answer says undecided)
                launcher.tell_out(study, trial, jobs, dirs, self.objectives)
            log.info("trial %d [%s]: %s", trial.number, _shown(trial), _words(judged))
            self._forget(trial)
        return self.step.over and not self.mine and not self.waiting  # killed sweepers' too

    def _outcome(self, i: int, j: intensify.Judgement) -> dict[str, Any]:
        inc = j.against if j.against is not None else self.step.search.incumbent
        return {"outcome": j.outcome, "n": j.n,
                "incumbent": None if inc is None else _label(self.plan, self.trials[inc]),
                "delta": j.delta, "p": j.p, "low": j.low, "high": j.high}

    def next_jobs(self, study: optuna.Study) -> list[Job]:
        """The runs of the driver's step that are my proposals' (the incumbent's first; none
        while it makes a new proposal, whose first block joins the next launch)."""
        jobs = []
        for i, b in self.step.runs:
            trial = self.mine.get(self.trials[i].number)
            if trial is not None and self.spec.blocks[b] not in trial.user_attrs.get(
                    RACE_RUNS_ATTR, {}):
                jobs.append((trial, self.plan.combinations[b]))
        return jobs

    def record(self, study: optuna.Study, jobs: list[Job], results: list[JobResult]) -> None:
        """Each block's result into its trial (RACE_RUNS_ATTR), as the race keeps them."""
        written = {t.number: t.user_attrs for t in study.get_trials(deepcopy=False)}
        for (trial, combo), job in zip(jobs, results, strict=True):
            if trial.number not in self.mine:
                continue
            runs = with_block(trial, combo, job, written[trial.number], self.objectives[0])
            if runs is None:
                trial.set_user_attr(RACE_OUTCOME_ATTR, {"outcome": FAILED})
                jobs_done = completed_jobs(trial, self.spec.blocks, self.objectives[0])
                launcher.tell(study, trial, [*jobs_done, job], self.plan, self.objectives,
                                _shown(trial))
                self._forget(trial)
                continue
            keep_runs(trial, runs)

    def wants(self, study: optuna.Study) -> int:
        """A retry of a killed sweeper's proposal, else one new proposal (enqueued here, asked
        for by the loop) when the driver's step makes one."""
        if self.waiting:  # asked by the loop (Optuna's ask takes waiting trials first)
            return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        if not self.step.propose:
            return 0
        params = self._propose(study)
        if params is None:  # the sampler proposes only candidates already raced: none is left
            self.exhausted = True
            return 0
        study.enqueue_trial(params)
        return 1

    def _propose(self, study: optuna.Study) -> dict[str, Any] | None:
        told = [(t.params, v) for t, v in zip(self.trials, driver.told(self.props, self.step.search),
                                              strict=True)]
        spec = self.plan.sampler_spec
        return propose(lambda n: specs.build_sampler({**spec, "seed": _seed(spec, n)}, None),
                       told, self.plan.space.distributions, self.spec.initial)

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

    def _forget(self, trial: optuna.Trial) -> None:
        del self.mine[trial.number]
        self.heartbeat.discard(trial._trial_id)


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


def _words(j: intensify.Judgement) -> str:
    if j.outcome == INCUMBENT:
        return f"the incumbent after {j.n} replicates"
    if j.outcome in (RACING, PARKED):
        return f"still in the search when it ended, after {j.n} replicates"
    if j.delta is None:
        return f"{j.outcome} after {j.n} replicates"
    words = f"{j.outcome} against the incumbent after {j.n} replicates: Δ {j.delta:+.4g}"
    if j.p is None:  # one replicate: no test (screened out on its first)
        return words
    return f"{words}, interval [{j.low:+.4g}, {j.high:+.4g}], one-sided p {j.p:.3g}"
