"""What a report figure drew, read back from its Axes (qknorm.report.plots tags its artists
with a gid), so the tests check the data on the figure, not the file."""

from __future__ import annotations

import numpy as np

from qknorm.report import plots


def run_dots(ax) -> np.ndarray:
    """(x, y) of every per-run dot on ax."""
    sets = [c.get_offsets() for c in ax.collections if c.get_gid() == plots.RUN_GID]
    return np.concatenate(sets) if sets else np.empty((0, 2))
