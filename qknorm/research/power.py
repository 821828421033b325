"""The power of the corrected resampled t over K folds, and the plain t's real size, under
Nadeau & Bengio's model of correlated folds (qknorm/research/fold_power.py tabulates them).

The model (Nadeau & Bengio): each fold's Δ has variance σ_f², two folds' Δ are correlated by
ρ = n_test/n = 1/K. Then E[s²] = (1 − ρ) σ_f² and var(mean Δ) = c (1 − ρ) σ_f², so with
σ := sqrt(1 − ρ) σ_f, what the measured s estimates, T = mean(d) / sqrt(c s²) is exactly
noncentral t (df k − 1, noncentrality δ / (σ sqrt(c))) for a true mean δ.
"""

from __future__ import annotations

import math


def factor(k: int, n_folds: int, corrected: bool = True) -> float:
    """The variance factor c of the replicate test over k folds of an n_folds-fold layout:
    1/k + 1/(n_folds − 1) corrected (hydra_racing_sweeper.multitest.for_folds), 1/k plain."""
    return 1.0 / k + (1.0 / (n_folds - 1) if corrected else 0.0)


def power_worse(k: int, c: float, sigma: float, delta: float, alpha: float) -> float:
    """P(the two-sided t at alpha over k differences calls mean > 0 significant) when the true
    mean is delta: T ~ noncentral t (df k − 1, nc delta / (sigma sqrt(c))). The other tail (a
    significant Δ < 0) is not a "worse" and is left out."""
    from scipy.stats import nct, t

    crit = t.ppf(1 - alpha / 2, k - 1)
    return float(nct.sf(crit, k - 1, delta / (sigma * math.sqrt(c))))


def power_level(k: int, c: float, sigma: float, delta: float, alpha: float = 0.05,
                mean: float = 0.0) -> float:
    """P(the (1 − 2 alpha) t-interval of mean(d) lies inside ±delta) when d's true mean is
    `mean`, mean(d) ~ N(mean, c sigma²) and s² ~ sigma² chi²_{k−1}/(k − 1), independent: given s
    the interval is inside when |mean(d)| <= delta − t sqrt(c) s, integrated over s."""
    from scipy import integrate
    from scipy.special import ndtr  # the normal CDF; scipy.stats' pdf/cdf are slow per call
    from scipy.stats import t

    df, crit, scale = k - 1, t.ppf(1 - alpha, k - 1), sigma * math.sqrt(c)
    top = df * (delta / (crit * scale)) ** 2  # chi² value where the room delta − t√c s is 0
    log_norm = (df / 2) * math.log(2) + math.lgamma(df / 2)

    def inside(v: float) -> float:
        if v <= 0:
            return 0.0
        room = delta - crit * scale * math.sqrt(v / df)
        density = math.exp((df / 2 - 1) * math.log(v) - v / 2 - log_norm)  # chi²_df pdf
        return float(ndtr((room - mean) / scale) - ndtr((-room - mean) / scale)) * density

    value, _ = integrate.quad(inside, 0.0, top, limit=200)
    return float(value)


def plain_size(k: int, n_folds: int, alpha: float) -> float:
    """The two-sided plain paired t's real type-I error over k folds when the folds' Δ are
    correlated as Nadeau & Bengio assume (ρ = 1/n_folds): T_plain = T_corrected · sqrt(k c)."""
    from scipy.stats import t

    inflation = math.sqrt(k * factor(k, n_folds))
    return float(2 * t.sf(t.ppf(1 - alpha / 2, k - 1) / inflation, k - 1))


def half_width(k: int, c: float, level: float = 0.90) -> float:
    """The half-width of the two-sided `level` t-interval of mean(d), in units of s."""
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, k - 1) * math.sqrt(c))
