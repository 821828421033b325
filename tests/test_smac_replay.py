"""SMAC3's intensifier replayed on a synthetic grid (qknorm.research.smac_replay)."""

from __future__ import annotations

import pytest

pytest.importorskip("smac", reason="smac (SMAC3 2.x) comes with the replay extra: pip install -e .[replay]")

from qknorm.research.smac_replay import smac_search  # noqa: E402

PS = [1.0, 1.5, 2.0, 3.0, float("inf")]
FOLD_OFFSETS = [0.03, -0.02, 0.05, -0.04, 0.0]


class Run(dict):
    """A recorded run that notes when it is charged (smac_search reads core_s only then)."""

    def __init__(self, charged: list, key: tuple, **kw):
        super().__init__(**kw)
        self._charged, self._key = charged, key

    def __getitem__(self, name):
        if name == "core_s":
            self._charged.append(self._key)
        return super().__getitem__(name)


def make_grid(charged: list) -> dict[float, list[dict]]:
    """p=2 best by 0.1 on every fold; each run's steps distinct, so the sum names the runs charged."""
    return {p: [Run(charged, (p, k), value=2.0 + (0.0 if p == 2.0 else 0.1 + 0.05 * i) + off,
                    steps=2000 + 100 * k + 10 * i, core_s=100.0)
                for k, off in enumerate(FOLD_OFFSETS)] for i, p in enumerate(PS)}


@pytest.mark.parametrize("seed", [0, 1])
def test_full_budget_finds_best_and_charges_its_runs(seed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    charged: list = []
    grid = make_grid(charged)
    budget = sum(r["steps"] for runs in grid.values() for r in runs)  # the whole grid
    out = smac_search(grid, seed=seed, budget=budget)
    assert out["best_p"] == 2.0
    assert len(charged) == len(set(charged)) == out["runs"]  # each (p, fold) charged once
    assert out["steps"] == sum(grid[p][k]["steps"] for p, k in charged)
    assert out["core_s"] == 100.0 * out["runs"]
    assert out["distinct_p"] == len({p for p, _ in charged}) == 5  # SMAC stops when the space is exhausted
    assert out["incumbent_folds"] == 3  # the facade's intensifier: max_config_calls=3
    assert 5 + 2 <= out["runs"] < 25  # the incumbent's 3 folds, every other p at least 1
    assert list(tmp_path.iterdir()) == []  # no smac3_output left behind


def test_deterministic_in_seed():
    grid = make_grid([])
    assert smac_search(grid, seed=3, budget=40000) == smac_search(grid, seed=3, budget=40000)


def test_one_run_budget_stops_after_one_run():
    charged: list = []
    grid = make_grid(charged)
    out = smac_search(grid, seed=0, budget=2000)  # every run costs at least 2000: spent after the first
    assert out["runs"] == 1 == len(charged) == out["distinct_p"] == out["incumbent_folds"]
    (p, k), = charged
    assert out["steps"] == grid[p][k]["steps"] and out["best_p"] == p
