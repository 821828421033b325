"""tracker=tensorboard: each run writes TensorBoard event files into its own run dir.

`tensorboard --logdir <sweep dir>` then shows every run of the sweep (a run is a directory with
event files), and parallel jobs never share a file. The files mirror metrics.jsonl: one scalar per
key and eval step, under the key's own name (val_loss, attn_entropy_l0, ...); at the end the run's
config and status as hparams, and final.json's numbers as `final/<key>` scalars at its last step.

Resume: the event files are rebuilt from metrics.jsonl when the run starts -- the old files are
deleted and the rows metrics.jsonl keeps (train.py drops those after the checkpoint) are written
again. A resumed run's events are therefore exactly its metrics.jsonl, for any reader, with no
duplicate step and no reliance on TensorBoard's purge of orphaned steps.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from qknorm import rundir
from qknorm.config import Config
from qknorm.effective import flatten

log = logging.getLogger(__name__)

EVENT_FILE_PREFIX = "events.out.tfevents."
FINAL_PREFIX = "final/"  # final.json's numbers, apart from the per-eval curves of the same names
FINAL_SKIP = ("seed", "fold")  # already hparams (seed, data.fold)
HPARAM_SKIP = ("tracker.", "optuna.storage")  # where things go, not what ran


def scalar(value: Any) -> float | None:
    """A metrics.jsonl or final.json value as a float (nan/inf are written as strings); None
    for what is not a number (status, git_sha, a missing value)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def hparam(value: Any) -> float | str:
    """A config value as TensorBoard's hparams hold it: a number or a string."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return float(value)
    return "null" if value is None else str(value)


class TensorBoardRun:
    """The event files of one run dir; `log` after each metrics.jsonl row, `close` at the end."""

    def __init__(self, cfg: Config, out_dir: Path):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.cfg, self.out_dir = cfg, Path(out_dir)
        for old in self.out_dir.glob(EVENT_FILE_PREFIX + "*"):
            old.unlink()
        self.writer = SummaryWriter(log_dir=str(self.out_dir))
        rows = rundir.read_metrics(self.out_dir)
        for row in rows:
            self._write(row)
        if rows:
            log.info("tensorboard: %d evals of metrics.jsonl rewritten as events", len(rows))
        self.writer.flush()

    def _write(self, row: dict[str, Any]) -> None:
        step = int(row["step"])
        for key, value in row.items():
            number = scalar(value)
            if key != "step" and number is not None:
                self.writer.add_scalar(key, number, step)

    def log(self, row: dict[str, Any]) -> None:
        self._write(row)
        self.writer.flush()  # evals are rare: a killed run keeps every eval it logged

    def close(self, final: dict[str, Any]) -> None:
        from torch.utils.tensorboard.summary import hparams

        config = flatten(OmegaConf.to_container(OmegaConf.structured(self.cfg)))
        params = {k: hparam(v) for k, v in config.items() if not k.startswith(HPARAM_SKIP)}
        params["status"] = str(final.get("status"))
        numbers = {FINAL_PREFIX + k: scalar(v) for k, v in final.items() if k not in FINAL_SKIP}
        numbers = {k: v for k, v in numbers.items() if v is not None}
        step = int(final.get("steps") or 0)
        for summary in hparams(params, numbers):
            self.writer.file_writer.add_summary(summary, step)
        for key, value in numbers.items():
            self.writer.add_scalar(key, value, step)
        self.writer.close()

