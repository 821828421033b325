"""The race's error-rate simulation (qknorm.research.race_level_error_rates): its correlated folds are
what it says they are, and on them the plain paired t drops level candidates more often than
the corrected resampled t."""

from __future__ import annotations

import numpy as np
import pytest
from hydra_racing_sweeper.multitest import PAIRED_T, for_folds

from qknorm.research import race_level_error_rates


@pytest.fixture(scope="module")
def sim():
    return race_level_error_rates


@pytest.mark.parametrize("rho", [0.0, 0.2])
def test_paired_differences_have_sd_one_and_correlation_rho_between_folds(sim, rho):
    runs = sim.draw(np.random.default_rng(7), np.array([0.5, 0.0]), 5, rho, 40_000)
    d = runs[:, 0, :] - runs[:, 1, :]  # races x folds; the block effect (sd 3) cancels
    c = np.cov(d.T)
    assert d.mean() == pytest.approx(0.5, abs=0.02)
    assert np.diag(c) == pytest.approx(np.ones(5), abs=0.03)
    off = c[~np.eye(5, dtype=bool)]
    assert off.mean() == pytest.approx(rho, abs=0.01)  # ρ = 0: independent folds
    assert off.max() - off.min() < 0.06  # equicorrelated
    assert runs[:, 0, :].std() == pytest.approx(np.sqrt(9.5), rel=0.02)  # sd 3 + sd sqrt(1/2)


def test_on_correlated_folds_the_plain_race_drops_level_candidates_more_often(sim):
    K = 5
    plain, corrected = (sim.simulate(4, K, 1 / K, test, None, 0.0, 300, seed=3)
                        for test in (PAIRED_T, for_folds(K)))
    assert plain["any worse"] > corrected["any worse"] + 0.1
    assert plain["mean blocks run"] < corrected["mean blocks run"]


def test_the_corrected_t_has_its_size_at_one_look_of_two_candidates(sim):
    """k = 2 at ρ = 1/K: the corrected t is exact for one pair, and the first look tests the
    one behind the leader: a one-sided test at alpha of |Δ|, wrong in 2 alpha of races."""
    K = 5
    r = sim.simulate(2, K, 1 / K, for_folds(K), None, 0.0, 1000, seed=4)
    assert r["first look any worse"] == pytest.approx(2 * sim.ALPHA, abs=0.03)
    plain = sim.simulate(2, K, 1 / K, PAIRED_T, None, 0.0, 1000, seed=4)
    assert plain["first look any worse"] > r["first look any worse"] + 0.03
