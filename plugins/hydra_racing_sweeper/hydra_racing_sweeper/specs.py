"""Samplers, pruners and storage from plain specs: one definition for the sweeper and its jobs.

A job must build the same pruner as the sweeper to answer should_prune(). The sweeper stores the
pruner spec (a small dict) in each trial's user attributes under PRUNER_ATTR at ask time and the
job rebuilds it with `build_pruner`: the job then uses exactly the pruner its trial was asked
under, whatever a later rerun configures, and job configs carry no pruner keys.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import TrialState
from sqlalchemy import event, text
from sqlalchemy.engine import Engine, make_url

from hydra_racing_sweeper import rundir
from hydra_racing_sweeper.errors import UserError, first_line
from hydra_racing_sweeper.study import HEARTBEAT_ATTR, holds_slot, is_stale, retried_numbers, retry

# Heartbeats and stale-trial retries are what make kill-and-rerun work; Optuna labels them
# experimental and expects them inside Study.optimize. We use them on purpose: keep logs clean.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")

JOURNAL_PREFIX = "journal:///"  # journal:///rel/path.log or journal:////abs/path.log, as SQLite
SQLITE_TIMEOUT_S = 60  # several processes write one SQLite file: wait for the lock, do not fail
# storage: null where the jobs run in the sweeper's process: an Optuna in-memory storage, which
# the jobs' trial.report reaches through this registry (by URL), not through a database.
MEMORY_PREFIX = "memory:"
_IN_MEMORY: dict[str, optuna.storages.InMemoryStorage] = {}

class AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler that does not call Study.stop() when the grid is used up: that only works
    inside Study.optimize, and the sweeper stops at n_trials (at most the grid's size) anyway."""

    def after_trial(self, study, trial, state, values) -> None:
        pass

    def _get_unvisited_grid_ids(self, study) -> list[int]:
        # Optuna counts every finished trial as visiting its point, FAIL included, so a point
        # whose trial was killed (its retry still waiting) or given up looked done, and a
        # concurrent sweeper re-ran a finished point instead. Taken here: the points of trials
        # that hold a slot toward n_trials, and of retries waiting to run.
        trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
        retried = retried_numbers(trials)
        taken = {t.system_attrs["grid_id"] for t in trials
                 if "grid_id" in t.system_attrs
                 and self._same_search_space(t.system_attrs["search_space"])
                 and (t.state == TrialState.WAITING or holds_slot(t, retried))}
        return sorted(set(range(self._n_min_trials)) - taken)


SAMPLERS: dict[str, Callable[..., optuna.samplers.BaseSampler]] = {
    "tpe": optuna.samplers.TPESampler,
    "gp": optuna.samplers.GPSampler,
    "random": optuna.samplers.RandomSampler,
    "grid": AskTellGridSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "qmc": optuna.samplers.QMCSampler,
    "nsgaii": optuna.samplers.NSGAIISampler,
}
# Defaults that moved between the Optuna releases pyproject allows, pinned so one command proposes
# the same points under each (tests/test_sweeper_seeds.py replays a committed search on both).
# TPE, 4.9 -> 5.0: multivariate False -> None (multivariate for one objective), constant_liar
# False -> True. constant_liar=True, as the committed searches ran (on 5.0): a batch's later
# trials are proposed away from its earlier, running ones. Independent TPE: 4.9's and 5.0's
# multivariate TPE propose different points; on one param (every preset) 5.0's two agree.
# A spec's own value wins: +hydra.sweeper.sampler.multivariate=true.
PINNED: dict[str, dict[str, Any]] = {"tpe": {"multivariate": False, "constant_liar": True}}
# Hydra's sampler nodes name an Optuna class in `_target_`: the spec name it is built as here.
TARGETS = {f"optuna.samplers.{optuna_class.__name__}": name
           for name, optuna_class in {**SAMPLERS, "grid": optuna.samplers.GridSampler}.items()}
# Hydra's plugin passes these to instantiate, not to the sampler: dropped from a `_target_` node.
INSTANTIATE_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")
MOTPE_REMOVED = ("hydra.sweeper.sampler: the motpe sampler was removed in Optuna 4.0; use "
                 "hydra/sweeper/sampler=tpe (TPE samples several objectives too)")
PRUNERS: dict[str, Callable[..., optuna.pruners.BasePruner]] = {
    "none": optuna.pruners.NopPruner,
    "median": optuna.pruners.MedianPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    "percentile": optuna.pruners.PercentilePruner,
    "threshold": optuna.pruners.ThresholdPruner,
}


def motpe_removed(*_args: Any, **_kwargs: Any) -> None:
    """The `_target_` of the sampler group's motpe node (Hydra's plugin instantiates it)."""
    raise ValueError(MOTPE_REMOVED)


def sampler_spec(node: Mapping[str, Any]) -> dict[str, Any]:
    """A sampler node in our spec form {name, **options}: the spec form as it is, or a node of
    the sampler group ({_target_: optuna.samplers.XSampler, ...}, Hydra's form) with its
    instantiate keys and None-valued kwargs (None is Optuna's default, as Hydra passes it)
    dropped. A node with both names them both when they disagree."""
    spec = dict(node)
    target = spec.get("_target_")
    if target is None:
        return spec
    if "motpe" in str(target).lower():
        raise UserError(MOTPE_REMOVED)
    if target not in TARGETS:
        raise UserError(f"hydra.sweeper.sampler._target_={target} is not one of "
                        f"{', '.join(TARGETS)}; pick one with hydra/sweeper/sampler=NAME "
                        f"({', '.join(SAMPLERS)})")
    name = TARGETS[target]
    if spec.get("name", name) != name:
        raise UserError(f"hydra.sweeper.sampler has name={spec['name']} and _target_={target} "
                        f"({name}); keep one: ~hydra.sweeper.sampler.name, or "
                        "hydra/sweeper/sampler=spec for the name form")
    options = {k: v for k, v in spec.items()
               if k not in INSTANTIATE_KEYS and k != "name" and v is not None}
    return {"name": name, **({"seed": None} if "seed" in spec else {}), **options}


def _split(spec: Mapping[str, Any], kind: str, table: Mapping[str, Any]) -> tuple[str, dict]:
    options = dict(spec)
    name = options.pop("name", None)
    if name not in table:
        raise UserError(f"hydra.sweeper.{kind}.name={name!r} is not one of "
                        f"{', '.join(table)}; pick one of those")
    return name, options


def resolve(kind: str, spec: Mapping[str, Any], table: Mapping[str, Callable],
            given: set[str]) -> tuple[dict, dict]:
    """The spec to build (`{name, **options}`) and the options dropped from it.

    A preset's options belong to its pruner/sampler: when the command line changes `name`
    (`name` in `given`, the spec's keys set there), options the new class does not take are
    dropped unless they were given too. Any other option it does not take is an error, as is
    a required one that is missing: both name the option and the fix.
    """
    name, options = _split(spec, kind, table)
    factory = table[name]
    accepted, required = _signature(factory)
    unknown = [k for k in options if accepted is not None and k not in accepted]
    dropped = {k: options.pop(k) for k in unknown if "name" in given and k not in given}
    for key in unknown:
        if key not in dropped:
            raise UserError(
                f"hydra.sweeper.{kind}.{key}={options[key]!r} is not an option of Optuna's "
                f"{optuna_name(factory)} ({kind} {name}), which takes "
                f"{', '.join(accepted) if accepted else 'no options'}; fix its spelling or "
                f"remove it with ~hydra.sweeper.{kind}.{key}")
    for key in required:
        if key not in options:
            raise UserError(f"hydra.sweeper.{kind}.name={name} needs {key} (Optuna's "
                            f"{optuna_name(factory)} has no default); add "
                            f"+hydra.sweeper.{kind}.{key}=VALUE")
    return {"name": name, **options}, dropped


INJECTED = {"search_space"}  # GridSampler's: the sweeper passes the search space itself


def _signature(factory: Callable) -> tuple[list[str] | None, list[str]]:
    """The keyword options an Optuna constructor takes (None: any, it has **kwargs), and
    those of them without a default."""
    params = [p for p in inspect.signature(factory).parameters.values() if p.name not in INJECTED]
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    required = [p.name for p in named if p.default is p.empty]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None, required
    return [p.name for p in named], required


def optuna_name(factory: Callable) -> str:
    """The Optuna class a factory is or extends (AskTellGridSampler -> GridSampler)."""
    return next(c.__name__ for c in factory.__mro__ if c.__module__.startswith("optuna"))


def _construct(kind: str, name: str, factory: Callable, options: dict) -> Any:
    try:
        return factory(**options)
    except (TypeError, ValueError) as e:
        raise UserError(f"hydra.sweeper.{kind}={{name: {name}, {_fmt(options)}}} is not valid "
                        f"for Optuna's {factory.__name__}: {e}; fix or remove that option"
                        ) from None


def _fmt(options: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in options.items())


def build_pruner(spec: Mapping[str, Any]) -> optuna.pruners.BasePruner:
    name, options = _split(spec, "pruner", PRUNERS)
    return _construct("pruner", name, PRUNERS[name], options)


def build_sampler(spec: Mapping[str, Any],
                  grid: Mapping[str, Sequence[Any]] | None) -> optuna.samplers.BaseSampler:
    """`grid` is the search space as value lists; only the grid sampler needs it. Options the
    spec leaves out that PINNED holds are PINNED's, not the installed Optuna's defaults."""
    name, options = _split(spec, "sampler", SAMPLERS)
    options = {**PINNED.get(name, {}), **options}
    if name == "grid":
        if grid is None:
            raise UserError("hydra.sweeper.sampler.name=grid needs every param as choice(...) "
                            "or range(...); use those, or another sampler for intervals")
        options = {"search_space": dict(grid), **options}
    return _construct("sampler", name, SAMPLERS[name], options)


# Samplers that propose from their own random stream. Seeded, each new process replays that
# stream from its start, so a resumed or topped-up study, or a second sweeper with the same seed,
# was proposed the points it had already run (TPE's and GP's random start-up trials). Not grid
# (its next point is an unvisited one, read from the study) nor qmc (the seed is its scramble;
# the sequence index comes from the study).
STREAM_SAMPLERS = ("tpe", "gp", "random", "cmaes", "nsgaii")


def reseeded(spec: Mapping[str, Any], n_before: int) -> dict[str, Any] | None:
    """The sampler spec for a study's next trial, seeded by (seed, trials already in the study):
    the same command gives the same proposals, and no proposal repeats an earlier trial's
    stream. None: the sampler keeps its seed (unseeded, or not a stream sampler)."""
    if spec.get("name") not in STREAM_SAMPLERS or spec.get("seed") is None:
        return None
    digest = hashlib.sha256(f"{spec['seed']}/{n_before}".encode()).digest()
    return {**spec, "seed": int.from_bytes(digest[:4], "little")}


def default_storage(in_process: bool, sweep_dir: Path) -> str:
    """The storage of `storage: null`: in memory when the jobs run in this process (the basic
    launcher), else a SQLite file in the sweep dir (jobs elsewhere cannot reach memory)."""
    if in_process:
        return f"{MEMORY_PREFIX}{uuid.uuid4().hex[:12]}"
    return f"sqlite:///{sweep_dir.resolve() / 'optuna.db'}"


def in_memory(url: str | None) -> bool:
    return isinstance(url, str) and url.startswith(MEMORY_PREFIX)


def storage_file(url: str) -> Path | None:
    """The file behind a SQLite or journal URL (None for a server or an in-memory database)."""
    if in_memory(url):
        return None
    if url.startswith("journal:"):
        if not url.startswith(JOURNAL_PREFIX) or url == JOURNAL_PREFIX:
            raise UserError(f"hydra.sweeper.storage={url!r} is not a journal URL; write "
                            "journal:///relative/file.log or journal:////absolute/file.log")
        return Path(url.removeprefix(JOURNAL_PREFIX))
    try:
        parsed = make_url(url)
    except Exception:
        raise UserError(f"hydra.sweeper.storage={url!r} is not a database URL; use e.g. "
                        "sqlite:///outputs/optuna.db, journal:///outputs/optuna.log or "
                        "postgresql+psycopg://user@host/db") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return Path(parsed.database)
    return None


def absolute_url(url: str, cwd: Path) -> str:
    """A relative SQLite or journal path made absolute, so jobs find the study wherever they
    run."""
    path = storage_file(url)
    if path is None or path.is_absolute():
        return url
    if url.startswith("journal:"):
        return JOURNAL_PREFIX + str(cwd / path)
    return make_url(url).set(database=str(cwd / path)).render_as_string(hide_password=False)


def check_storage_folder(url: str) -> None:
    """What opening the storage would refuse of its file's folder, found without making
    anything (the plan's check: a dry run refuses it too). The folder itself is made when it is
    missing (outputs/), but never a whole mistyped path; a file or a read-only folder on the
    way, or a database file that cannot be written, is refused."""
    path = storage_file(url)
    if path is None:
        return
    folder = path.parent
    if not folder.parent.exists():
        raise UserError(f"hydra.sweeper.storage={url!r}: directory {folder.parent} "
                        "does not exist; create it or fix the path")
    why = rundir.unwritable(folder)
    if why is None and path.is_dir():
        why = f"{path} is a folder, not a file"
    elif why is None and path.exists() and not os.access(path, os.W_OK):
        why = f"{path} is not writable"
    if why is not None:
        raise UserError(f"hydra.sweeper.storage={url!r} cannot be written: {why}; give "
                        "hydra.sweeper.storage a file in a folder you can write to")


def _make_folder(url: str, path: Path) -> None:
    check_storage_folder(url)
    path.parent.mkdir(exist_ok=True)


class JournalHeartbeatStorage(optuna.storages.JournalStorage, BaseHeartbeat):
    """Optuna's journal storage with heartbeats, which Optuna gives RDBStorage only: a beat is
    a trial system attr (one journal line per beat), so fail_stale_trials and the retry
    callback work unchanged. Staleness uses each machine's clock: keep clocks in sync (NTP)
    and grace_period well above their skew."""

    def __init__(self, backend, heartbeat_interval: int, grace_period: int | None,
                 callback: Callable | None) -> None:
        super().__init__(backend)
        self._interval = heartbeat_interval
        self._grace = grace_period or 2 * heartbeat_interval
        self._callback = callback

    def record_heartbeat(self, trial_id: int) -> None:
        try:
            self.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # told between the heartbeat thread's copy of ids and this beat

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return journal_stale_ids(
            self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)),
            self._grace, time.time())

    def get_heartbeat_interval(self) -> int | None:
        return self._interval

    def get_heartbeat_stale_trial_callback(self) -> Callable | None:
        return self._callback


def journal_stale_ids(running: Sequence[optuna.trial.FrozenTrial], grace: float,
                      now: float) -> list[int]:
    """Ids of a journal's RUNNING trials that are stale (is_stale), by the beats that
    JournalHeartbeatStorage writes: the sweeper's test, and the status's from a plain reader."""
    return [t._trial_id for t in running
            if is_stale(t, t.system_attrs.get(HEARTBEAT_ATTR), grace, now)]


class RDBHeartbeatStorage(optuna.storages.RDBStorage):
    """Optuna's RDBStorage, whose stale trials include those that never beat (is_stale): Optuna
    judges the trials that beat, on the database's clock; a trial with no heartbeat row is judged
    by its start, on this machine's clock (the clock Optuna wrote it with)."""

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        stale = super()._get_stale_trial_ids(study_id)
        grace = self.grace_period or 2 * self.heartbeat_interval
        now = time.time()
        running = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        with self.engine.connect() as db:  # read after `running`: a trial asked since beats too
            beat = set(db.execute(text(
                "SELECT h.trial_id FROM trial_heartbeats h JOIN trials t "
                "ON t.trial_id = h.trial_id WHERE t.study_id = :study_id"),
                {"study_id": study_id}).scalars())
        return stale + [t._trial_id for t in running
                        if t._trial_id not in beat and is_stale(t, None, grace, now)]


def _open_journal(url: str, path: Path, heartbeat_interval: int | None,
                  grace_period: int | None, callback: Callable | None):
    try:
        backend = optuna.storages.journal.JournalFileBackend(str(path))
        if heartbeat_interval:
            return JournalHeartbeatStorage(backend, heartbeat_interval, grace_period, callback)
        return optuna.storages.JournalStorage(backend)
    except OSError as e:
        raise UserError(f"hydra.sweeper.storage={url!r} cannot be opened ({e}); check the "
                        "path and its permissions") from None


def open_reader(url: str) -> optuna.storages.BaseStorage:
    """The one read-only open of a study's storage (the status, the report): a SQLite file
    opened read-only (SQLite's URI mode=ro), a PostgreSQL session in read-only transactions, a
    journal file read (Optuna's backend opens it for appending, which writes nothing); no table
    is ever created, and a missing file is a UserError, never a new empty one."""
    if in_memory(url):
        return _IN_MEMORY.setdefault(url, optuna.storages.InMemoryStorage())
    path = storage_file(url)  # UserError for a URL that is not one
    if path is not None and not path.exists():
        # SQLAlchemy and the journal would create an empty file, then report no study.
        raise UserError(f"STORAGE={url!r}: {path} does not exist (relative paths are from "
                        f"the current directory, {Path.cwd().name}/); fix the path or run "
                        "from the directory the sweep ran in")
    if url.startswith("journal:"):
        return optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(path)))
    engine_kwargs: dict[str, Any] = {}
    if path is not None:  # SQLite
        url = f"sqlite:///file:{path.resolve()}?mode=ro&uri=true"
    elif url.startswith("postgresql"):
        engine_kwargs = {"connect_args": {"options": "-c default_transaction_read_only=on"}}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return RDBHeartbeatStorage(url, engine_kwargs=engine_kwargs,
                                       skip_table_creation=True)
    except Exception as e:  # SQLAlchemy/driver errors vary by backend
        raise UserError(f"STORAGE={url!r} cannot be opened ({first_line(e)}); check the URL, "
                        "the server and its driver") from None


def read_study(name: str, url: str, storage: optuna.storages.BaseStorage | None = None
               ) -> optuna.Study:
    """Study `name` at `url`, opened only to read (open_reader, unless `storage` is one it
    opened already); a UserError in one line when it cannot be loaded."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_reader(url) if storage is None else storage
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except Exception as e:
        raise UserError(f"study {name!r} in {url} cannot be loaded ({first_line(e)})") from None


def serialize_writers(engine: Engine) -> None:
    """Every transaction on this SQLite engine starts with BEGIN IMMEDIATE (SQLAlchemy's
    recipe for the pysqlite driver), so that a read-then-write is one step between processes.

    Python's sqlite3 begins a transaction only at the first write: Optuna's "pop a WAITING
    trial" (read its state, then set RUNNING; the FOR UPDATE is a no-op in SQLite) then lets
    two sweepers that ask at once both take the same enqueued trial, a stale trial's retry
    included, and run its jobs twice (tests/test_specs.py has the two processes that do it).
    PostgreSQL locks the row; the journal file takes a lock of its own."""
    @event.listens_for(engine, "connect")
    def _driver_begins_nothing(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections made while the tables were created began the old way


def open_storage(url: str, heartbeat_interval: int | None = None,
                 grace_period: int | None = None) -> optuna.storages.BaseStorage:
    """Connect (creating the tables of a new database). Raises UserError when unreachable. An
    in-memory study has no heartbeats: nothing outside this process can resume it."""
    if in_memory(url):
        return _IN_MEMORY.setdefault(url, optuna.storages.InMemoryStorage())
    path = storage_file(url)
    if path is not None:
        _make_folder(url, path)
    callback = retry if heartbeat_interval else None  # a stale trial's params run again
    if url.startswith("journal:"):
        return _open_journal(url, path, heartbeat_interval, grace_period, callback)
    engine_kwargs = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    for attempt in range(5):
        try:
            storage = RDBHeartbeatStorage(
                url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval,
                grace_period=grace_period, heartbeat_stale_trial_callback=callback)
            if url.startswith("sqlite"):
                serialize_writers(storage.engine)
            return storage
        except Exception as e:  # SQLAlchemy/driver errors vary by backend
            # Two sweepers started at once on a new database both create its tables; the
            # slower one sees "already exists" (tables) or a UNIQUE failure (alembic's version
            # row). The schema is there now: open it again.
            racing = "already exists" in str(e) or "UNIQUE constraint failed" in str(e)
            if racing and attempt < 4:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise UserError(f"hydra.sweeper.storage={url!r} cannot be opened ({first_line(e)}); "
                            "check the URL, the server and its driver (pip install "
                            "'psycopg[binary]' for PostgreSQL)") from None
    raise AssertionError("unreachable")
