"""qknorm.research.fold_power: the power of the corrected (and plain) t over K folds, checked against
formulas written out here and against a simulation of Nadeau & Bengio's correlated folds run
through hydra_racing_sweeper.multitest's own test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hydra_racing_sweeper import multitest
from scipy import integrate
from scipy.stats import chi2, nct, norm, t

from qknorm.research import fold_power, power


def worse_by_hand(df: int, nc: float, crit: float) -> float:
    """P(T > crit) for T = (Z + nc) / sqrt(V / df), V ~ chi²_df: integrated over V, no nct."""
    return integrate.quad(lambda v: norm.sf(crit * math.sqrt(v / df) - nc) * chi2.pdf(v, df),
                          0, np.inf)[0]


@pytest.mark.parametrize("k", [3, 5, 10])
def test_without_the_correction_it_is_the_one_sample_t_power(k):
    sigma, delta = 0.01, 0.012
    got = power.power_worse(k, power.factor(k, k, corrected=False), sigma, delta, 0.05)
    crit, nc = t.ppf(0.975, k - 1), delta * math.sqrt(k) / sigma
    assert got == pytest.approx(nct.sf(crit, k - 1, nc), rel=1e-9)
    assert got == pytest.approx(worse_by_hand(k - 1, nc, crit), abs=1e-6)


def test_ten_folds_at_sigma_001_and_delta_002_by_an_independent_formula():
    c = 1 / 10 + 1 / 9  # multitest.for_folds(10).factor(10)
    assert power.factor(10, 10) == pytest.approx(multitest.for_folds(10).factor(10))
    nc = 0.02 / (0.01 * math.sqrt(c))
    worse = power.power_worse(10, c, 0.01, 0.02, 0.05)
    assert worse == pytest.approx(worse_by_hand(9, nc, t.ppf(0.975, 9)), abs=1e-6)
    assert worse == pytest.approx(0.9709, abs=1e-4)
    holm = power.power_worse(10, c, 0.01, 0.02, 0.05 / 7)
    assert holm == pytest.approx(worse_by_hand(9, nc, t.ppf(1 - 0.05 / 14, 9)), abs=1e-6)
    assert holm < worse
    # level: |mean| + t_.95 sqrt(c) s <= δ, mean ~ N(0, c σ²), s² ~ σ² chi²_9 / 9; by a 2-D
    # integral over (mean / (σ√c), s / σ) instead of the script's 1-D one.
    q = t.ppf(0.95, 9)

    def chi2_9(v: float) -> float:  # written out: scipy.stats' pdf is slow per call
        return v**3.5 * math.exp(-v / 2) / (2**4.5 * math.gamma(4.5))

    by_hand = integrate.dblquad(  # z = mean / (σ√c), u = s/σ with density chi2_9(9u²) 18u
        lambda z, u: math.exp(-z * z / 2) / math.sqrt(2 * math.pi) * chi2_9(9 * u * u) * 18 * u,
        0, nc / q, lambda u: -(nc - q * u), lambda u: nc - q * u, epsabs=1e-8)[0]
    assert power.power_level(10, c, 0.01, 0.02) == pytest.approx(by_hand, abs=1e-6)
    assert by_hand == pytest.approx(0.9814, abs=1e-4)


def test_power_grows_with_the_folds_and_the_plain_t_promises_more():
    rows = [fold_power.row(K, 0.01, 0.02, 0.05, 7) for K in fold_power.FOLDS]
    for key in ("worse", "worse_holm_worst", "level"):
        assert all(a[key] < b[key] for a, b in zip(rows, rows[1:])), key
    assert all(a["half_width_90_over_sigma"] > b["half_width_90_over_sigma"]
               for a, b in zip(rows, rows[1:]))
    for r in rows:  # the plain t's interval is narrower, its nominal power higher, its size > α
        assert r["plain_half_width_90_over_sigma"] < r["half_width_90_over_sigma"]
        assert r["plain_nominal_worse"] > r["worse"] and r["plain_size"] > 0.05
    # K = 5: the plain t's real size is P(|t_4| > t_.975,4 / sqrt(5 (1/5 + 1/4))) = 0.138
    assert rows[1]["plain_size"] == pytest.approx(2 * t.sf(t.ppf(0.975, 4) / 1.5, 4))


def test_a_simulation_of_correlated_folds_through_multitests_test_agrees():
    """Nadeau & Bengio's model: each fold's Δ has sd σ_f, two folds' Δ correlation ρ = 1/K; the
    measured s estimates σ = σ_f sqrt(1 − ρ), the σ the script takes."""
    K, sigma, delta, n = 5, 0.0092, 0.02, 40_000
    rho = 1 / K
    sigma_f = sigma / math.sqrt(1 - rho)
    rng = np.random.default_rng(0)
    noise = (rng.normal(scale=sigma_f * math.sqrt(rho), size=(n, 1))
             + rng.normal(scale=sigma_f * math.sqrt(1 - rho), size=(n, K)))
    test = multitest.for_folds(K)
    c = test.factor(K)
    s = noise.std(axis=1, ddof=1)

    d = delta + noise  # a p truly worse by δ
    worse = np.mean(d.mean(axis=1) / (np.sqrt(c) * s) > t.ppf(0.975, K - 1))
    assert worse == pytest.approx(power.power_worse(K, c, sigma, delta, 0.05), abs=0.01)

    mean = noise.mean(axis=1)  # a p truly level: the 90% interval inside ±δ
    half = t.ppf(0.95, K - 1) * np.sqrt(c) * s
    level = np.mean((mean - half >= -delta) & (mean + half <= delta))
    assert level == pytest.approx(power.power_level(K, c, sigma, delta), abs=0.01)
    one = noise[0].tolist()  # the vectorised interval is multitest's
    assert multitest.tost_interval(one, 0.05, test)[1] == pytest.approx(mean[0] + half[0])

    plain = np.mean(np.abs(mean) / (s / math.sqrt(K)) > t.ppf(0.975, K - 1))
    assert plain == pytest.approx(power.plain_size(K, K, 0.05), abs=0.01)


def test_the_spread_and_the_cost_are_read_from_a_results_csv(tmp_path):
    path = tmp_path / "results.csv"
    rows = ["norm.p,seed,data.fold,status,best_val_loss,wall_time_s"]
    loss = {1.0: [1.5, 1.6, 1.4], 2.0: [1.0, 1.1, 0.9], 2.5: [1.01, 1.12, 0.93], 4.0: [9, 9, 9]}
    for p, values in loss.items():
        rows += [f"{p},0,{f},completed,{v},100" for f, v in enumerate(values)]
    rows.append("4.0,0,3,diverged,,50")  # not completed: not read
    path.write_text("\n".join(rows) + "\n")
    got = fold_power.measure("g", path, "best_val_loss", 2.0, [1.5, 2.5, 3.0])
    assert got["sd_by_p"]["2.5"] == pytest.approx(np.std([0.01, 0.02, 0.03], ddof=1))
    assert got["sd_by_p"]["1"] == pytest.approx(np.std([0.5, 0.5, 0.5], ddof=1), abs=1e-12)
    assert got["near"]["p"] == ["2.5"] and got["all"]["p"] == ["1", "2.5", "4"]
    assert got["n_folds"] == 3 and got["n_p"] == 4 and got["mean_wall_time_s"] == 100
    assert fold_power.hours(212.0, 8, 5, 2) == pytest.approx(212 * 40 / 2 / 3600)
