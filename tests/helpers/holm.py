"""Holm's step-down written out, for expected values that do not come from hydra_racing_sweeper.multitest."""

from __future__ import annotations


def holm_by_hand(p: dict) -> dict:
    """Each key's Holm-adjusted p over the family `p` (key -> raw p): the i-th smallest times
    (m - i), never below the one before it, at most 1."""
    adjusted, running = {}, 0.0
    for i, key in enumerate(sorted(p, key=p.get)):
        running = max(running, min(1.0, (len(p) - i) * p[key]))
        adjusted[key] = running
    return adjusted
