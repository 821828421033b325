"""What a record computes from: its sources' runs (each results.csv read once, as a report
rebuilt from it reads it) and its settings (the test, δ, α, a filter), checked with one line
naming the record and the fix."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
from hydra_racing_sweeper.multitest import ReplicateTest

from qknorm import jsonfile
from qknorm.claims.records import Book, Record
from qknorm.errors import UserError
from qknorm.report import format_p, results, stats

REQUIRED = object()
Rows = dict[str, dict[str, object]]  # what a kind computes: row -> field -> value
ALPHA = round(1 - stats.CONFIDENCE, 10)  # the report's α: its intervals are 95%, TOST at 5%


class Runs:
    """The sources' runs and curves, each read once (results.read_results, collect_curves)."""

    def __init__(self, book: Book):
        self.book = book
        self._runs: dict[str, pd.DataFrame] = {}
        self._curves: dict[str, pd.DataFrame] = {}
        self._files: dict[Path, Any] = {}

    def folder(self, name: object, record: Record) -> Path:
        return self.book.results / self.book.source(name, record.id).dir

    def runs(self, name: object, record: Record) -> pd.DataFrame:
        if name not in self._runs:
            self._runs[name] = results.read_results(self.folder(name, record)).runs
        return self._runs[name].copy()

    def curves(self, name: object, record: Record) -> pd.DataFrame:
        """The runs' evals from the source's curves.csv (with norm.p and status)."""
        folder = self.folder(name, record)
        if not (folder / results.CURVES_CSV_NAME).is_file():
            raise UserError(f"record {record.id} reads curves, and {folder} has no "
                            f"{results.CURVES_CSV_NAME}; use a source whose report kept them")
        if name not in self._curves:
            self._curves[name] = results.collect_curves(self.runs(name, record), folder)
        return self._curves[name].copy()

    def file(self, record: Record, what: str, name: object = None) -> Any:
        """The JSON a record reads in place of runs (its `file:`, or `name`, under docs/results):
        a replay's, a simulation's, a benchmark's (`what` it must be, for the error); each read
        once."""
        path = self.book.results / str(setting(record, "file") if name is None else name)
        if path not in self._files:
            try:
                self._files[path] = jsonfile.read(path)
            except (OSError, ValueError) as e:
                raise UserError(f"record {record.id}: {path} is not {what} ({e})") from None
        return self._files[path]


def setting(record: Record, key: str, default: Any = REQUIRED) -> Any:
    """A record's setting; UserError naming the record when a required one is missing."""
    if key in record.spec:
        return record.spec[key]
    if default is REQUIRED:
        raise UserError(f"record {record.id} ({record.file}) has no {key}; add {key}: to it")
    return default


def selected(runs: pd.DataFrame, where: dict | None, record: Record) -> pd.DataFrame:
    """The runs whose columns take the values `where` names (a value or a list of them)."""
    for column, wanted in (where or {}).items():
        if column not in runs.columns:
            raise UserError(f"record {record.id}: where names {column}, which its runs lack")
        values = wanted if isinstance(wanted, list) else [wanted]
        if pd.api.types.is_numeric_dtype(runs[column]):
            values = [float(v) for v in values]
        runs = runs[runs[column].isin(values)]
    return runs


def replicate_test(runs: pd.DataFrame, record: Record) -> ReplicateTest:
    """The test the record names (corrected or paired) and, for corrected, its fold layout
    (n_folds), held against the layout the runs recorded; then the report's own choice
    (stats.replicate_test) makes it."""
    option = setting(record, "test")
    n_folds = setting(record, "n_folds", None)
    if option == "corrected" and n_folds is None:
        raise UserError(f"record {record.id}: test corrected needs its fold layout; add "
                        "n_folds: K (data.n_folds of the runs)")
    recorded = {int(k) for k in runs["data.n_folds"].dropna().unique()}
    if n_folds is not None and recorded and recorded != {int(n_folds)}:
        raise UserError(f"record {record.id}: n_folds {n_folds}, but its runs recorded "
                        f"data.n_folds = {', '.join(map(str, sorted(recorded)))}; fix n_folds")
    return stats.replicate_test(runs, option, n_folds)


def alpha(record: Record) -> float:
    """α as the record states it: the report's tests are at 5%, which the record must say."""
    value = float(setting(record, "alpha"))
    if not math.isclose(value, ALPHA):
        raise UserError(f"record {record.id}: alpha {value:g}, but the report tests at "
                        f"{ALPHA:g}; write alpha: {ALPHA:g}")
    return value


def row_key(p: float) -> str:
    """A row for a p: as the report writes p (1, 1.5, inf)."""
    return format_p(p)
