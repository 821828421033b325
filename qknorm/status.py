"""`python -m qknorm.status STORAGE [--study NAME]`: a sweep's status (hydra_racing_sweeper/progress.py)
from any terminal or machine, while it runs or after. docs/status.md explains the lines.

STORAGE is the sweeper's storage URL (sqlite:///outputs/optuna.db, journal:///outputs/optuna.log,
postgresql+psycopg://...) or a sweep dir (outputs/sweeps/p_tpe/<date>, or a folder of several):
its jobs' configs name the study and the storage (optuna.study_name, optuna.storage, absolute
paths) and the sweep's n_trials and n_jobs (.hydra/hydra.yaml); a sweep that ended without a
job that got that far has them in optimization_results.yaml. The storage is only read: SQLite
opens read-only, PostgreSQL in read-only transactions, and no table is created.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from qknorm import rundir
from qknorm.errors import UserError, exit_with, first_line

EXAMPLES = ("sqlite:///outputs/optuna.db, journal:///outputs/optuna.log, "
            "postgresql+psycopg://user@host/db or a sweep dir such as outputs/sweeps/p_tpe/DATE")


@dataclass
class Target:
    url: str  # as the sweep named it: SQLite and journal paths absolute or relative to the cwd
    study: str | None  # None: the storage's only study
    n_trials: int | None = None
    slots: int = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's usage errors as our one line, exit 2
        raise UserError(f"{message}; usage: python -m qknorm.status STORAGE [--study NAME] "
                        "[--n-trials N] [--slots K]")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog="python -m qknorm.status", description=__doc__.split("\n\n")[0])
    p.add_argument("storage", metavar="STORAGE", help=f"a storage URL or a sweep dir ({EXAMPLES})")
    p.add_argument("--study", help="the study (needed when the storage holds several)")
    p.add_argument("--n-trials", type=int, help="the sweep's total, for the ETA (default: the "
                   "total the sweeper recorded in the study; a study from before it records "
                   "none: then a sweep dir's jobs or a grid's size)")
    p.add_argument("--slots", type=int, help="trials run at once, the sweeper's n_jobs (a sweep "
                   "dir knows it; default 1)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    try:
        args = parse_args(argv)
        for line in run(args):
            print(line)
    except UserError as e:
        exit_with(e)


def run(args: argparse.Namespace) -> list[str]:
    from hydra_racing_sweeper import open_reader, read_study, status_lines, stopped_sweep

    if args.n_trials is not None and args.n_trials < 1:
        raise UserError(f"--n-trials={args.n_trials} must be >= 1 (the sweep's total trials)")
    if args.slots is not None and args.slots < 1:
        raise UserError(f"--slots={args.slots} must be >= 1 (the sweeper's n_jobs)")
    targets = _targets(args.storage, args.study)
    out: list[str] = []
    for target in targets:
        storage = open_reader(target.url)
        name = _study_name(storage, target)
        study = read_study(name, target.url, storage)
        n_trials = args.n_trials if args.n_trials is not None else target.n_trials
        slots = args.slots if args.slots is not None else target.slots
        out.append(f"study {name}:")
        stopped = stopped_sweep(study, storage)  # a killed sweeper's: its heartbeats stopped
        out += ["  " + line for line in status_lines(study, n_trials, slots, stopped=stopped)]
    return out


# -- what STORAGE names -----------------------------------------------------------------------

def _is_url(text: str) -> bool:
    return "://" in text or text.startswith("journal:")


def _targets(storage: str, study: str | None) -> list[Target]:
    if _is_url(storage):
        return [Target(storage, study)]
    path = Path(storage)
    if not path.is_dir():
        what = ("a file: write sqlite:///PATH or journal:///PATH for a storage file"
                if path.exists() else "no such directory")
        raise UserError(f"STORAGE={storage!r} is neither a storage URL nor a sweep dir "
                        f"({what}); give e.g. {EXAMPLES}")
    targets = _from_jobs(path) or from_results(path)
    if not targets:
        raise UserError(f"{storage} holds no sweep job (no .hydra/config.yaml with "
                        "optuna.storage) and no optimization_results.yaml; give the sweep's "
                        f"storage URL instead, e.g. {EXAMPLES}")
    if study is not None:
        targets = [t for t in targets if t.study == study]
        if not targets:
            raise UserError(f"--study {study} ran no job in {storage}; pick another sweep dir "
                            "or give the storage URL")
    return targets


def _from_jobs(root: Path) -> list[Target]:
    """One target per (study, storage) the run dirs under root name, in the order found."""
    found: dict[tuple[str, str], Target] = {}
    for run_dir in rundir.find_run_dirs(root):
        config = rundir.read_config(run_dir) or {}
        name, url = config.get("optuna.study_name"), config.get("optuna.storage")
        if not (isinstance(name, str) and isinstance(url, str)) or (name, url) in found:
            continue
        sweeper = rundir.read_hydra(run_dir).get("sweeper") or {}
        n_trials, n_jobs = sweeper.get("n_trials"), sweeper.get("n_jobs")
        found[(name, url)] = Target(url, name, n_trials if isinstance(n_trials, int) else None,
                                    n_jobs if isinstance(n_jobs, int) and n_jobs >= 1 else 1)
    return list(found.values())


def from_results(root: Path) -> list[Target]:
    """From optimization_results.yaml files (written when a sweep ends; their one reader is
    qknorm.sweep's studies_named)."""
    from hydra_racing_sweeper import studies_named

    return [Target(s["storage"], s["study_name"], s["n_trials"]) for s in studies_named(root)]


def _study_name(storage, target: Target) -> str:
    try:
        names = [s.study_name for s in storage.get_all_studies()]
    except Exception as e:
        raise UserError(f"STORAGE={target.url!r} cannot be read ({first_line(e)}); is it an "
                        "Optuna storage?") from None
    if target.study is not None:
        if target.study not in names:
            raise UserError(f"--study {target.study} is not in {target.url} (it holds "
                            f"{', '.join(names) or 'no study'}); pick one of those")
        return target.study
    if len(names) != 1:
        raise UserError(f"{target.url} holds {len(names)} studies "
                        f"({', '.join(names) or 'none'}); pick one with --study NAME"
                        if names else f"{target.url} holds no study; check the storage URL")
    return names[0]


if __name__ == "__main__":
    main()
