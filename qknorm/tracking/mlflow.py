"""tracker=mlflow: finished run dirs exported to MLflow, after the fact, by one writer.

    python -m qknorm.tracking.mlflow DIR [--uri sqlite:///outputs/mlflow.db] [--experiment NAME]

With `tracker=mlflow` the command's launching process runs the same export once its jobs are
done (`ExportCallback`, a Hydra callback: conf/tracker/mlflow.yaml). Jobs never talk to MLflow:
parallel jobs, SLURM jobs and sweepers on other machines never contend for its store, and a run
dir is exported the same way whether the sweep just ended or is a year old.

The layout (docs/trackers.md): one parent run per sweep, one child per trial, one grandchild per
replicate (fold, seed; qknorm/tracking/runs.py places a run dir in that tree) with the run dir's
config as params, every metrics.jsonl row as metrics at its step, final.json's numbers as
`final/<key>`, tags (status, git_sha, p, run_dir) and the run dir's files as artifacts. A single
run (no multirun) is one top-level run. Every run is tagged `qknorm.key`; an export skips what
the store already has, so a rerun adds only what is new. Run dirs without final.json (still
running, or killed) are left for a later export. Exports to one SQLite or file store take turns
(a lock file beside it): two sweeps that end together never meet in the store.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from qknorm import rundir
from qknorm.config import P_KINDS, TrackerConfig, missing_package
from qknorm.errors import UserError, exit_with, first_line
from qknorm.tracking.runs import Job, read_jobs
from qknorm.tracking.store import artifact_root, check_store, quiet_mlflow, store_lock
from qknorm.tracking.tensorboard import FINAL_PREFIX, scalar

log = logging.getLogger(__name__)

DEFAULT_URI = TrackerConfig.uri
KEY_TAG = "qknorm.key"  # what an MLflow run stands for: how an export knows it has it already
LEVEL_TAG = "qknorm.level"  # sweep | trial | run
ARTIFACTS = (rundir.FINAL_FILE, rundir.METRICS_FILE, "train.log", rundir.CONFIG_FILE,
             rundir.OVERRIDES_FILE)
SWEEP_ARTIFACTS = ("optimization_results.yaml", "trials.csv", "multirun.yaml")
# final.json's status -> the MLflow run status it shows as (the `status` tag keeps ours)
RUN_STATUS = {rundir.COMPLETED: "FINISHED", rundir.PRUNED: "KILLED", rundir.DIVERGED: "FAILED",
              rundir.FAILED: "FAILED"}
MAX_METRICS, MAX_PARAMS = 1000, 100  # MLflow's log_batch limits


@dataclass
class Summary:
    exported: int = 0  # replicate (or single) runs created
    present: int = 0  # already in the store: skipped
    incomplete: int = 0  # no final.json yet: left for a later export
    experiments: set[str] = field(default_factory=set)

    def line(self, uri: str) -> str:
        return (f"mlflow: {self.exported} run(s) exported, {self.present} already there, "
                f"{self.incomplete} without final.json left out -> {uri} "
                f"(experiment {', '.join(sorted(self.experiments)) or '-'})")


# ---------------------------------------------------------------------------------------------
# writing

def _param(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


class Exporter:
    """One export: the store's qknorm runs are read once per experiment, then what is missing
    is created."""

    def __init__(self, uri: str):
        from mlflow import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.runs: dict[str, dict[str, Any]] = {}  # experiment id -> {qknorm.key: run}

    def experiment_id(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        root = artifact_root(self.uri)
        location = None
        if root is not None:
            location = (root / re.sub(r"[^A-Za-z0-9._-]", "_", name)).as_uri()
        return self.client.create_experiment(name, artifact_location=location)

    def existing(self, experiment_id: str) -> dict[str, Any]:
        if experiment_id not in self.runs:
            found, token = {}, None
            while True:
                page = self.client.search_runs([experiment_id], max_results=1000, page_token=token)
                for run in page:
                    key = run.data.tags.get(KEY_TAG)
                    if key is not None:
                        found.setdefault(key, run)
                token = page.token
                if not token:
                    break
            self.runs[experiment_id] = found
        return self.runs[experiment_id]

    def create(self, experiment_id: str, key: str, level: str, name: str, start_ms: int,
               parent_id: str | None, tags: dict[str, str]) -> str:
        tags = {KEY_TAG: key, LEVEL_TAG: level, **tags}
        if parent_id is not None:
            tags["mlflow.parentRunId"] = parent_id
        run = self.client.create_run(experiment_id, start_time=start_ms, tags=tags, run_name=name)
        self.existing(experiment_id)[key] = run
        return run.info.run_id

    def export(self, jobs: list[Job], summary: Summary) -> None:
        for job in jobs:
            experiment_id = self.experiment_id(job.experiment)
            summary.experiments.add(job.experiment)
            have = self.existing(experiment_id)
            run_key = f"run:{job.run_dir}"
            if run_key in have:
                summary.present += 1
                continue
            parent_id = None
            if job.sweep is not None:
                parent_id = self._ensure(experiment_id, job.sweep, "sweep", None, job)
                parent_id = self._ensure(experiment_id, job.trial, "trial", parent_id, job)
            self._write_run(experiment_id, run_key, job, parent_id)
            summary.exported += 1
        self._settle(jobs)

    def _ensure(self, experiment_id: str, key_name: tuple[str, str], level: str,
                parent_id: str | None, job: Job) -> str:
        key, name = key_name
        run = self.existing(experiment_id).get(key)
        if run is not None:
            return run.info.run_id
        tags = {"sweep_dir": str(job.run_dir.parent)} if level == "sweep" else {}
        run_id = self.create(experiment_id, key, level, name, job.start_ms, parent_id, tags)
        if level == "trial":
            params = [(o.split("=", 1)[0].lstrip("+~"), o.split("=", 1)[1]) for o in
                      job.trial_overrides if "=" in o]
            self._log(run_id, params=params)
        return run_id

    def _write_run(self, experiment_id: str, key: str, job: Job, parent_id: str | None) -> None:
        from mlflow.entities import Metric

        f, c = job.final, job.config
        tags = {"status": str(f["status"]), "git_sha": str(f.get("git_sha") or "unknown"),
                "run_dir": str(job.run_dir), "norm": str(c.get("norm.kind"))}
        if c.get("norm.kind") in P_KINDS:
            tags["p"] = _param(c.get("norm.p"))
        if c.get("optuna.trial") is not None:
            tags["trial"] = str(c["optuna.trial"])
        if f.get("error"):
            tags["error"] = first_line(str(f["error"]))[:5000]
        name = ",".join(job.replicate) or job.run_dir.name
        run_id = self.create(experiment_id, key, "run", name, job.start_ms, parent_id, tags)
        metrics = []
        for row in job.metrics:
            step = int(row["step"])
            elapsed = scalar(row.get("elapsed_s"))
            at = job.start_ms + (int(1000 * elapsed) if elapsed is not None and math.isfinite(elapsed)
                                 else 0)
            metrics += [Metric(k, v, at, step) for k, v in ((k, scalar(x)) for k, x in row.items())
                        if k != "step" and v is not None]
        last = int(f.get("steps") or 0)
        metrics += [Metric(FINAL_PREFIX + k, v, job.end_ms, last)
                    for k, v in ((k, scalar(x)) for k, x in f.items()) if v is not None]
        self._log(run_id, params=[(k, _param(v)) for k, v in c.items()], metrics=metrics)
        for name in ARTIFACTS:
            path = job.run_dir / name
            if path.is_file():
                self.client.log_artifact(run_id, str(path), Path(name).parent.as_posix()
                                         if "/" in name else None)
        self.client.set_terminated(run_id, RUN_STATUS[f["status"]], end_time=job.end_ms)

    def _log(self, run_id: str, params=(), metrics=()) -> None:
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in params]
        for i in range(0, len(params), MAX_PARAMS):
            self.client.log_batch(run_id, params=params[i:i + MAX_PARAMS])
        for i in range(0, len(metrics), MAX_METRICS):
            self.client.log_batch(run_id, metrics=list(metrics[i:i + MAX_METRICS]))

    def _settle(self, jobs: list[Job]) -> None:
        """Trials and sweeps that got runs: status from their runs, end time, the sweep's files."""
        trials: dict[tuple[str, str], list[Job]] = {}
        sweeps: dict[tuple[str, str], list[Job]] = {}
        for job in jobs:
            if job.sweep is not None:
                experiment_id = self.experiment_id(job.experiment)
                trials.setdefault((experiment_id, job.trial[0]), []).append(job)
                sweeps.setdefault((experiment_id, job.sweep[0]), []).append(job)
        for (experiment_id, key), members in trials.items():
            run = self.existing(experiment_id)[key]
            statuses = [j.final["status"] for j in members]
            status = next((s for s in (rundir.FAILED, rundir.DIVERGED, rundir.PRUNED)
                           if s in statuses), rundir.COMPLETED)
            if run.data.tags.get("status") == status and run.data.tags.get("replicates") == str(
                    len(members)):
                continue  # nothing new
            run_id = run.info.run_id
            self.client.set_tag(run_id, "status", status)
            self.client.set_tag(run_id, "replicates", str(len(members)))
            run.data.tags.update(status=status, replicates=str(len(members)))
            self.client.set_terminated(run_id, RUN_STATUS[status],
                                       end_time=max(j.end_ms for j in members))
        for (experiment_id, key), members in sweeps.items():
            run_id = self.existing(experiment_id)[key].info.run_id
            for sweep_dir in sorted({j.run_dir.parent for j in members}):
                for name in SWEEP_ARTIFACTS:
                    if (sweep_dir / name).is_file():
                        self.client.log_artifact(run_id, str(sweep_dir / name), sweep_dir.name)
            self.client.set_terminated(run_id, "FINISHED", end_time=max(j.end_ms for j in members))


def export(root: Path | str, uri: str = DEFAULT_URI, experiment: str | None = None) -> Summary:
    """Export the finished run dirs under root to the MLflow store at uri; skip what it has."""
    missing = missing_package("mlflow")
    if missing is not None:
        raise UserError(missing.replace("tracker=mlflow needs", "the MLflow export needs"))
    jobs, incomplete = read_jobs(Path(root), experiment)
    summary = Summary(incomplete=incomplete)
    quiet_mlflow()
    with store_lock(uri):
        try:
            exporter = Exporter(uri)
            exporter.export(jobs, summary)
        except Exception as e:
            from mlflow.exceptions import MlflowException

            if isinstance(e, MlflowException):
                raise UserError(f"MLflow store {uri!r}: {first_line(e)}; check --uri / "
                                "tracker.uri (e.g. sqlite:///outputs/mlflow.db)") from e
            raise
    return summary


# ---------------------------------------------------------------------------------------------
# the Hydra callback (conf/tracker/mlflow.yaml) and the command

class ExportCallback(Callback):
    """Exports the command's run dirs once its jobs are done, in the launching process.

    Hydra calls on_multirun_end / on_run_end only when every job returned; a sweep with failed
    jobs ends by raising instead, so the export is also registered with atexit at the start and
    runs once, whichever comes first."""

    def __init__(self) -> None:
        self._pending: tuple[str, str, str | None] | None = None

    def _start(self, directory: str, config: DictConfig) -> None:
        if missing_package("mlflow") is not None:
            return  # the config's validation says so, in one line, before any job
        tracker = config.tracker
        try:
            check_store(str(tracker.uri))  # before any job trains
        except UserError as e:
            exit_with(e)
        self._pending = (directory, str(tracker.uri), tracker.experiment)
        atexit.register(self._export)

    def _export(self) -> bool:
        """Export once; False when the store failed (the runs stay on disk, and the line says
        where and the command that exports them)."""
        if self._pending is None:
            return True
        directory, uri, experiment = self._pending
        self._pending = None
        if not Path(directory).is_dir():
            return True  # the command stopped before any job (its own error says why)
        try:
            summary = export(directory, uri, experiment)
            if summary.exported or summary.present:  # not after a run that never started
                print(summary.line(uri), file=sys.stderr)
            return True
        except Exception as e:  # the runs are on disk: say how to export them later
            print(f"error: mlflow export of {directory} failed ({first_line(e)}); the runs are "
                  f"in {directory}: run python -m qknorm.tracking.mlflow {directory} --uri {uri}",
                  file=sys.stderr)
            return False

    def _end(self) -> None:
        """The jobs are done: export, and exit non-zero if the store failed at the end."""
        if not self._export():
            raise SystemExit(1)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start(str(config.hydra.sweep.dir), config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end()

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start(str(config.hydra.run.dir), config)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end()


def tree(uri: str, experiment: str) -> list[str]:
    """The experiment's qknorm runs as an indented tree: name, level, status and key numbers."""
    from mlflow import MlflowClient

    quiet_mlflow()
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise UserError(f"no experiment {experiment!r} at {uri}; export a sweep first")
    runs = [r for r in client.search_runs([found.experiment_id], max_results=1000)
            if KEY_TAG in r.data.tags]
    children: dict[str | None, list] = {}
    for run in runs:
        children.setdefault(run.data.tags.get("mlflow.parentRunId"), []).append(run)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for run in sorted(children.get(parent, []), key=lambda r: (r.info.start_time, r.info.run_name)):
            t, m = run.data.tags, run.data.metrics
            best = m.get(FINAL_PREFIX + "best_val_loss")
            lines.append("  " * depth + f"{run.info.run_name} [{t[LEVEL_TAG]}] {run.info.status}"
                         + (f" status={t['status']}" if "status" in t else "")
                         + (f" best_val_loss={best:.4f}" if best is not None else "")
                         + (f" evals={len(client.get_metric_history(run.info.run_id, 'val_loss'))}"
                            if t[LEVEL_TAG] == "run" else ""))
            walk(run.info.run_id, depth + 1)

    walk(None, 0)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m qknorm.tracking.mlflow",
        description="Export run dirs (a sweep dir, a run dir, or outputs/) to MLflow: one parent "
                    "run per sweep, a child per trial, its replicates under it. Idempotent.")
    parser.add_argument("dir", type=Path, help="a sweep dir, a run dir, or a folder of them")
    parser.add_argument("--uri", default=DEFAULT_URI,
                        help=f"MLflow tracking URI (default {DEFAULT_URI}, from the working dir)")
    parser.add_argument("--experiment", default=None,
                        help="experiment name (default: each run's config `name`)")
    parser.add_argument("--tree", action="store_true",
                        help="then print each experiment's runs as a parent/child tree")
    args = parser.parse_args(argv)
    try:
        summary = export(args.dir, args.uri, args.experiment)
        print(summary.line(args.uri))
        for name in sorted(summary.experiments) if args.tree else ():
            print(f"experiment {name}:", *tree(args.uri, name), sep="\n")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
