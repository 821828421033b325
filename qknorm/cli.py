"""The command `python -m qknorm.train [overrides]` (or `-m` for a multirun): Hydra's command line
around `qknorm.train.train`. (`python -m qknorm.cli` is the same command.)

`task` is the thin Hydra task function; `main` wraps Hydra's command line so that a user mistake
prints as one line (docs/failures.md); `preflight` checks every job of a basic-sweeper
multirun before the first one starts. Hydra's private helpers (`hydra._internal`) are used here
and nowhere else.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import hydra
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from hydra_racing_sweeper import trial
from omegaconf import DictConfig, OmegaConf

from qknorm import memory, rundir
from qknorm.config import CONF_DIR, register_configs, to_config
from qknorm.data import check_given_path, load_splits
from qknorm.effective import task_tree, unique_jobs
from qknorm.errors import (
    RunDiverged,
    RunPruned,
    UserError,
    exit_interrupted,
    exit_with,
    one_line,
)
from qknorm.overrides import check_overrides
from qknorm.train import resolve_compile, resolve_device, train

# The basic sweepers, by their _target_'s class: Hydra's, and ours minus repeats (the plugin's
# basic.py; the library names it only by this string, never by import).
BASIC_SWEEPERS = ("BasicSweeper", "DedupBasicSweeper")
# conf/config.yaml sets hydra.job.name=train, so the run log stays train.log.

# Ctrl-C: the one line printed instead of a trace (a sweep's: the sweeper's, plugin's sweeper.py)
INTERRUPTED_HINT = ("stopped by Ctrl-C; a run that had started has final.json status failed with "
                    "error 'interrupted (Ctrl-C)'; rerun the same command to start again (a search "
                    "resumes its study; a run saved with train.save_checkpoint=true continues "
                    "with train.resume=true hydra.run.dir=<its run dir>)")

register_configs()


def _log_trace_to_run_log(out_dir: Path) -> None:
    """The full traceback goes to the run's log file; the console gets one line."""
    with open(out_dir / f"{HydraConfig.get().job.name}.log", "a") as f:
        f.write(traceback.format_exc())


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def task(cfg: DictConfig) -> float:
    """One job: Hydra calls this once for a run, once per job for a multirun."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    single_run = HydraConfig.get().mode == RunMode.RUN
    try:
        config = to_config(cfg)
        final = train(config, out_dir, report_val_loss)
    except (UserError, RunDiverged) as e:
        if not single_run:
            e.sweep_dir = HydraConfig.get().sweep.dir  # for main()'s summary of the multirun
            raise  # the sweeper records the failed job and goes on
        _log_trace_to_run_log(out_dir)
        kind = "error" if isinstance(e, UserError) else rundir.DIVERGED
        print(f"{kind}: {e}", file=sys.stderr)
        sys.exit(2 if isinstance(e, UserError) else 1)
    print(f"{final['status']}: best_val_loss={final['best_val_loss']:.4f} "
          f"steps={final['steps']} wall_time_s={final['wall_time_s']:.1f} -> {out_dir}")
    return final["best_val_loss"]


def report_val_loss(step: int, row: dict) -> None:
    """The eval hook of every run: its val loss to its trial through the public job-side API
    (qknorm.sweep.trial; a no-op outside a sweep), stopping the run when the trial says so."""
    if trial.report(step, row["val_loss"]):
        raise RunPruned(step)


def main() -> None:
    """The command: Hydra's CLI, but a user mistake is one console line and exit code 2.

    Hydra prints its own errors in several lines plus a hint; with HYDRA_FULL_ERROR=1 it raises
    them instead, so we set it for the call and word the error ourselves. A user who sets
    HYDRA_FULL_ERROR=1 gets the full trace as usual.
    """
    wants_trace = os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        preflight(sys.argv[1:])
        os.environ["HYDRA_FULL_ERROR"] = "1"
        task()
    except KeyboardInterrupt:
        if wants_trace:
            raise
        exit_interrupted(INTERRUPTED_HINT)
    except Exception as e:
        if wants_trace:
            raise
        sweep_dir = getattr(e, "sweep_dir", None)
        if sweep_dir is not None:  # a multirun ran every job; some did not complete
            print(f"error: {multirun_summary(Path(sweep_dir), e)}", file=sys.stderr)
            sys.exit(1)
        line = one_line(e)
        if line is None:
            raise  # not a user mistake: a bug, whose trace is the useful thing to show
        exit_with(e if isinstance(e, UserError) else UserError(line))


def multirun_summary(sweep_dir: Path, first_error: BaseException) -> str:
    """One line: how many jobs ended how, the first failure, and where the records are."""
    statuses = [rundir.read_final(d)["status"] for d in sorted(sweep_dir.iterdir())
                if d.is_dir() and (d / rundir.FINAL_FILE).exists()]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in rundir.STATUSES if s in statuses)
    return (f"multirun finished with failed jobs ({counts}); first: {first_error}; "
            f"each job's final.json under {sweep_dir} has its status")


def preflight(argv: list[str]) -> None:
    """Compose the config, and for a basic-sweeper multirun validate every job, before any starts.

    A typo in the fifth value of a sweep then stops the command before the first job trains.
    Other sweepers (search=...) choose their values as they go: we check the fixed part. A
    single run's config is checked too, so a bad value leaves no run dir behind.
    """
    args = get_args_parser().parse_args(argv)
    if (args.help or args.hydra_help or args.cfg or args.info or args.shell_completion
            or args.experimental_rerun or args.config_path or args.config_name or args.config_dir):
        return  # Hydra's own commands, or a config tree we did not write: Hydra handles those
    overrides = OverridesParser.create().parse_overrides(args.overrides)
    fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        primary = compose("config", overrides=fixed, return_hydra_config=True)
        check_overrides(args.overrides, primary)
        multirun = args.multirun or str(primary.hydra.mode) in ("MULTIRUN", "RunMode.MULTIRUN")
        # The folder Hydra makes first (its log goes there): a file or a read-only folder on
        # its path is one line now, not a NotADirectoryError from Hydra's mkdir.
        if multirun:
            rundir.check_writable("hydra.sweep.dir", primary.hydra.sweep.dir)
        else:
            rundir.check_writable("hydra.run.dir", primary.hydra.run.dir)
        if not multirun:
            # A bad value leaves no run dir (Hydra makes one before the task starts). Mistakes
            # found in the corpus still do, with the trace in train.log: finding them here
            # would read and tokenize the corpus twice per run.
            config = to_config(compose("config", overrides=fixed))
            check_given_path(config.data)  # the one corpus mistake found without reading it
            device = resolve_device(config.device)  # the job runs in this process: CUDA may init
            memory.check_fits(config, device, resolve_compile(config.compile, device))
            return
        firsts = _first_values(overrides)
        given = {f.split("=", 1)[0] for f in [*fixed, *firsts]}
        replicates = OmegaConf.select(primary, "hydra.sweeper.replicates") or {}
        # A preset's replicates too, each key the config has (one it lacks is the sweeper's
        # check to name, as hydra.sweeper.replicates.KEY).
        firsts += [f"{k}={v[0]}" for k, v in replicates.items()
                   if k not in given and isinstance(v, Sequence) and len(v)
                   and OmegaConf.select(primary, k, default=_ABSENT) is not _ABSENT]
        jobs = [fixed + firsts]
        if _sweeper_class(primary.hydra.sweeper._target_) in BASIC_SWEEPERS:
            params = [f"{k}={v}" for k, v in (primary.hydra.sweeper.params or {}).items()]
            parsed = OverridesParser.create().parse_overrides([*params, *args.overrides])
            (jobs,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
            jobs = _launched_jobs(jobs, primary.hydra.sweeper._target_)
        launcher = str(OmegaConf.select(primary, "hydra.launcher._target_") or "")
        _check_jobs(jobs, here=not launcher.endswith("SlurmLauncher"))  # SLURM: other machines


_ABSENT = object()


def _first_values(overrides: list) -> list[str]:
    """`key=first` for each choice or range on the command line: every job of our sweeper gets
    one of its values, so the checked job does too (`data.n_folds=5 data.fold=0,1,2,3,4` must
    not be checked at the preset's data.fold=9; nor must a preset's replicates, added by the
    caller). An interval is left to the sweeper's checks."""
    firsts = []
    for o in overrides:
        if o.is_sweep_override() and not o.is_interval_sweep():
            first = next(iter(o.sweep_string_iterator()), None)
            if first is not None:
                firsts.append(f"{o.get_key_element()}={first}")
    return firsts


def _launched_jobs(jobs: list[list[str]], sweeper: str) -> list[list[str]]:
    """The jobs the sweeper will launch: ours skips repeats of an effective config, so only
    those are checked (a repeat never runs)."""
    if _sweeper_class(sweeper) != BASIC_SWEEPERS[1]:
        return jobs

    def task_config(job: list[str]) -> dict:
        return task_tree(compose("config", overrides=list(job))) or {"_job": list(job)}

    return unique_jobs(jobs, task_config)[0]


def _sweeper_class(target: str) -> str:
    return target.rpartition(".")[2]


def _check_jobs(jobs: list[list[str]], here: bool = True) -> None:
    """Compose each job's config and load its corpus and fold once; UserError names the job.
    here: the jobs run on this machine (not SLURM's nodes), so each must fit its memory."""
    checked_data: set[tuple] = set()
    for num, job in enumerate(jobs):
        try:
            config = to_config(compose("config", overrides=list(job)))
            if here:  # as the job checks itself at its start (train.setup), before any job runs
                device = resolve_device(config.device)
                memory.check_fits(config, device, resolve_compile(config.compile, device))
            data_key = (*vars(config.data).values(), config.model.block_size)
            if data_key not in checked_data:  # the corpus, its checksum, the fold sizes
                load_splits(config.data, config.model.block_size)
                checked_data.add(data_key)
        except UserError as e:
            raise UserError(f"{e} [multirun job #{num}: {' '.join(job)}]; "
                            "no job was started") from e


if __name__ == "__main__":
    main()
