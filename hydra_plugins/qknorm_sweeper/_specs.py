"""Samplers, pruners and storage from plain specs: one definition for the sweeper and its jobs.

A job must build the same pruner as the sweeper to answer should_prune(). The sweeper stores the
pruner spec (a small dict) in each trial's user attributes under PRUNER_ATTR at ask time and the
job rebuilds it with `build_pruner`: the job then uses exactly the pruner its trial was asked
under, whatever a later rerun configures, and job configs carry no pruner keys.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy.engine import make_url

from hydra_plugins.qknorm_sweeper._errors import SweepError
from qknorm.errors import first_line

# Heartbeats and stale-trial retries are what make kill-and-rerun work; Optuna labels them
# experimental and expects them inside Study.optimize. We use them on purpose: keep logs clean.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")

PRUNER_ATTR = "pruner"  # trial user attr: the pruner spec its jobs rebuild
PRUNED_STEP_ATTR = "pruned_step"  # trial user attr: set by the first replicate job pruned
SQLITE_TIMEOUT_S = 60  # several processes write one SQLite file: wait for the lock, do not fail

class AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler that does not call Study.stop() when the grid is used up: that only works
    inside Study.optimize, and the sweeper stops at n_trials (at most the grid's size) anyway."""

    def after_trial(self, study, trial, state, values) -> None:
        pass


SAMPLERS: dict[str, Callable[..., optuna.samplers.BaseSampler]] = {
    "tpe": optuna.samplers.TPESampler,
    "gp": optuna.samplers.GPSampler,
    "random": optuna.samplers.RandomSampler,
    "grid": AskTellGridSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "qmc": optuna.samplers.QMCSampler,
    "nsgaii": optuna.samplers.NSGAIISampler,
}
PRUNERS: dict[str, Callable[..., optuna.pruners.BasePruner]] = {
    "none": optuna.pruners.NopPruner,
    "median": optuna.pruners.MedianPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    "percentile": optuna.pruners.PercentilePruner,
    "threshold": optuna.pruners.ThresholdPruner,
}


def _split(spec: Mapping[str, Any], kind: str, table: Mapping[str, Any]) -> tuple[str, dict]:
    options = dict(spec)
    name = options.pop("name", None)
    if name not in table:
        raise SweepError(f"hydra.sweeper.{kind}.name={name!r} is not one of "
                         f"{', '.join(table)}; pick one of those")
    return name, options


def _construct(kind: str, name: str, factory: Callable, options: dict) -> Any:
    try:
        return factory(**options)
    except (TypeError, ValueError) as e:
        raise SweepError(f"hydra.sweeper.{kind}={{name: {name}, {_fmt(options)}}} is not valid "
                         f"for Optuna's {factory.__name__}: {e}; fix or remove that option"
                         ) from None


def _fmt(options: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in options.items())


def build_pruner(spec: Mapping[str, Any]) -> optuna.pruners.BasePruner:
    name, options = _split(spec, "pruner", PRUNERS)
    return _construct("pruner", name, PRUNERS[name], options)


def build_sampler(spec: Mapping[str, Any],
                  grid: Mapping[str, Sequence[Any]] | None) -> optuna.samplers.BaseSampler:
    """`grid` is the search space as value lists; only the grid sampler needs it."""
    name, options = _split(spec, "sampler", SAMPLERS)
    if name == "grid":
        if grid is None:
            raise SweepError("hydra.sweeper.sampler.name=grid needs every param as choice(...) "
                             "or range(...); use those, or another sampler for intervals")
        options = {"search_space": dict(grid), **options}
    return _construct("sampler", name, SAMPLERS[name], options)


def absolute_url(url: str, cwd: Path) -> str:
    """A relative SQLite path made absolute, so jobs find the study wherever they run."""
    try:
        parsed = make_url(url)
    except Exception:
        raise SweepError(f"hydra.sweeper.storage={url!r} is not a database URL; use e.g. "
                         "sqlite:///outputs/optuna.db or postgresql://user@host/db") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database)
        if not path.is_absolute():
            return parsed.set(database=str(cwd / path)).render_as_string(hide_password=False)
    return url


def open_storage(url: str, heartbeat_interval: int | None = None,
                 grace_period: int | None = None) -> optuna.storages.RDBStorage:
    """Connect (creating the tables of a new database). Raises SweepError when unreachable."""
    engine_kwargs = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
        database = make_url(url).database
        if database and database != ":memory:":
            folder = Path(database).parent
            if not folder.parent.is_dir():  # make outputs/, but never a whole mistyped path
                raise SweepError(f"hydra.sweeper.storage={url!r}: directory {folder.parent} "
                                 "does not exist; create it or fix the path")
            folder.mkdir(exist_ok=True)
    callback = (optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=None)
                if heartbeat_interval else None)
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(
                url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_interval,
                grace_period=grace_period, heartbeat_stale_trial_callback=callback)
        except Exception as e:  # SQLAlchemy/driver errors vary by backend
            # Two sweepers started at once on a new database both create its tables; the
            # slower one sees "already exists" (tables) or a UNIQUE failure (alembic's version
            # row). The schema is there now: open it again.
            racing = "already exists" in str(e) or "UNIQUE constraint failed" in str(e)
            if racing and attempt < 4:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise SweepError(f"hydra.sweeper.storage={url!r} cannot be opened ({first_line(e)}); "
                             "check the URL, the server and its driver (pip install "
                             "'qknorm[postgres]' for PostgreSQL)") from None
    raise AssertionError("unreachable")
