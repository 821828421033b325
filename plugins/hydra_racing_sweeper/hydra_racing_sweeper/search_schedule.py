"""The racing search (RaceSearchSchedule): hydra.sweeper.race with a tpe, gp or random sampler
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
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hydra_racing_sweeper import launcher, readback, specs
from hydra_racing_sweeper.launcher import Job, JobResult, Launcher
from hydra_racing_sweeper.plan import Plan
from hydra_racing_sweeper.race import (
    FAILED,
    INCUMBENT,
    PARKED,
    RACING,
    Judgement,
    Proposal,
    Search,
    SearchTurn,
    driver,
)
from hydra_racing_sweeper.racing import RacingSchedule, log_limits
from hydra_racing_sweeper.schedule import room
from hydra_racing_sweeper.study import (
    JOB_DIRS_ATTR,
    RACE_CANDIDATE_ATTR,
    RETRIED_ATTR,
    STATUS_ATTR,
    SURPLUS,
    Heartbeat,
)

log = logging.getLogger(__name__)


class RaceSearchSchedule(RacingSchedule):
    """A trial per proposal; a proposal runs the blocks the driver's turn asks for, one at a
    time; it is told once its race is decided (PRUNED: worse, level, undecided, stopped). At
    the end the incumbent is told COMPLETE with its mean over its blocks, and the proposals
    still open (racing, parked) PRUNED: the answer (driver.search_answer) says what they are."""

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
        the same point at once; a repeat as `propose` means it, _repeats) is given up before it
        runs, as a surplus trial is."""
        everything = study.get_trials(deepcopy=False)
        earlier, frozen = readback.proposals(everything), {t.number: t for t in everything}
        for trial in trials:
            if RETRIED_ATTR not in frozen[trial.number].system_attrs and any(
                    t.number < trial.number and _repeats(trial.params, t.params) for t in earlier):
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
    repeat of an earlier proposal (equal, or a float a rounding apart: _repeats) is told its
    value and the sampler asked again, up to `attempts` times (then None: nothing new to
    propose)."""
    known, values = [params for params, _ in told], [value for _, value in told]
    design = next((params for params in initial
                   if not any(_repeats(params, k) for k in known)), None)
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
        twin = next((i for i, k in enumerate(known) if _repeats(params, k)), None)
        if twin is None:
            return params
        if values[twin] is not None:
            told.append((params, values[twin]))
    return None


def _repeats(params: dict[str, Any], earlier: dict[str, Any]) -> bool:
    """`params` is `earlier` again: each value equal, or both floats a rounding apart. A GP
    proposes an end of its interval again as 0.9999999999999998 where the initial design put
    1.0 (issue 70: a twin that took two runs in a replay)."""
    def alike(a: Any, b: Any) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return a == b
    return params.keys() == earlier.keys() and all(alike(v, earlier[k]) for k, v in params.items())


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


# A proposal's log line is the search's step, not its answer: the answer (readback.answer_rows) tests
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
