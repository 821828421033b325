"""What the training loop calls back, so that what runs a job can watch it without the run
knowing who: `EvalHook`, called after every eval with the step and that eval's metrics.jsonl row.

qknorm.cli passes one to every run (report_val_loss: the val loss to its trial through the
job-side API qknorm.sweep.trial, a no-op outside a sweep, stopping when the trial says so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EvalHook = Callable[[int, dict[str, Any]], None]
