"""What the training loop calls back, so that what runs a job can watch it without the run
knowing who: `EvalHook`, called after every eval with the step and that eval's metrics.jsonl row.

The Optuna sweeper's jobs pass one (qknorm.sweep.eval_hook: report to the trial, stop when
pruned or at a race's rung); a run on its own passes none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EvalHook = Callable[[int, dict[str, Any]], None]
