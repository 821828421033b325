"""`python tests/helpers/pop_trials.py URL START N`: wait until time.time() >= START, then ask
study "s" at URL (opened as the sweeper opens it, specs.open_storage) for N trials, printing
their numbers. Two of these started with one START pop the study's enqueued (WAITING) trials
at the same moment, as two sweepers resuming a killed sweep pop its retries."""

from __future__ import annotations

import sys
import time

import optuna
from hydra_racing_sweeper import specs

if __name__ == "__main__":
    url, start, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="s", storage=specs.open_storage(url))
    while time.time() < start:
        pass  # spin, not sleep: both processes leave the line within microseconds
    print(" ".join(str(study.ask().number) for _ in range(n)))
