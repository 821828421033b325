"""The tests every answer of the race and the search rests on: the replicate test (a paired t over
replicates, with Nadeau & Bengio's correction when the replicates are folds of one corpus), Holm's
multiple-comparison correction and the TOST's equivalence interval. The race
(hydra_racing_sweeper.race.looks), the search, the status lines and an app's report (qknorm's) all
call these: one place to change the test (and hydra_racing_sweeper.decision one place to turn a test
into a call). Plain Python (scipy.special at most): the sweeper must not pay for importing
scipy.stats or pandas (seconds at every start).

The replicate test. Differences d_1..d_k of two configurations over k replicates (the same fold,
or the same seed, for both) have the t statistic mean(d) / sqrt(c · s²) with k − 1 degrees of
freedom, s² the sample variance of d and c its variance factor:

- `paired` (c = 1/k): the plain paired t. Right for replicates that are independent: seeds on
  one split.
- `corrected` (c = 1/k + n_test/n_train): the corrected resampled t (Nadeau & Bengio 2003,
  Machine Learning 52; Bouckaert & Frank 2004). Right for folds of one corpus: the training sets
  of two folds of a k-fold layout share (k−2)/(k−1) of their text, so the per-fold differences
  are positively correlated and s²/k understates the variance of their mean (the k-fold paired t
  has an inflated type-I error, Dietterich 1998). n_test/n_train is the fold layout's (for
  contiguous K-fold 1/(K−1): 1/4 for 5 folds), whatever number k of its folds was compared.

Example: five folds of a 5-fold layout, Δ = [0.010, 0.004, 0.012, 0.006, 0.008]: the plain
paired t gives t = 5.66 (two-sided p = 0.0048), the corrected one t = 5.66 · sqrt(0.2 / 0.45)
= 3.77 (p = 0.0196): the interval is sqrt(0.45 / 0.2) = 1.5× as wide.

Note: the correction is a heuristic, not an exact test: it assumes the correlation of two
folds' differences is n_test/(n_test + n_train) (Nadeau & Bengio's ρ), which is not measured.
It is what the field uses (scikit-learn's model-comparison example, Optuna's terminator).
Folds × seeds: the seeds of a fold are averaged first, then the corrected test runs over folds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CORRECTED, PAIRED, AUTO = "corrected", "paired", "auto"
TESTS = (CORRECTED, PAIRED)  # what --test and hydra.sweeper.race.test take, besides auto


@dataclass(frozen=True)
class ReplicateTest:
    """The t-test over k replicates' differences: `ratio` = n_test/n_train of one fold (0: the
    plain paired t of independent replicates)."""

    name: str = PAIRED
    ratio: float = 0.0

    def factor(self, k: int) -> float:
        """The variance factor c: var(mean of k differences) = c · σ²."""
        return 1.0 / k + self.ratio

    def stderr(self, d: Sequence[float]) -> float:
        """sqrt(c · s²) for k >= 2 differences."""
        return statistics.stdev(d) * math.sqrt(self.factor(len(d)))

    def interval(self, d: Sequence[float], level: float) -> tuple[float, float]:
        """The two-sided `level` t-interval of mean(d) (k >= 2); without spread, the mean."""
        mean = statistics.fmean(d)
        if no_spread(d):
            return mean, mean
        from scipy.special import stdtrit  # Student t quantile; scipy.stats is slow to import

        half = float(stdtrit(len(d) - 1, 0.5 + level / 2)) * self.stderr(d)
        return mean - half, mean + half

    def p_greater(self, d: Sequence[float]) -> float:
        """One-sided p of H1: mean(d) > 0 (k >= 2, with spread)."""
        from scipy.special import stdtr  # Student t CDF

        return float(stdtr(len(d) - 1, -statistics.fmean(d) / self.stderr(d)))

    def p_two_sided(self, d: Sequence[float]) -> float:
        """Two-sided p of H1: mean(d) != 0 (k >= 2, with spread)."""
        from scipy.special import stdtr

        return float(2 * stdtr(len(d) - 1, -abs(statistics.fmean(d)) / self.stderr(d)))

    def label(self) -> str:
        """How tables and figures name it."""
        if self.name == CORRECTED:
            return (f"corrected resampled t (Nadeau & Bengio 2003: variance × (1/k + "
                    f"{_fraction(self.ratio)}), folds not independent)")
        return "paired t (replicates independent)"

    def short(self) -> str:
        """The label in a figure's title."""
        return (f"corrected t, n_test/n_train = {_fraction(self.ratio)}" if self.name == CORRECTED
                else "paired t")


PAIRED_T = ReplicateTest()


def _fraction(ratio: float) -> str:
    inverse = 1 / ratio if ratio else math.inf
    return f"1/{inverse:.0f}" if abs(inverse - round(inverse)) < 1e-9 else f"{ratio:.4g}"


def fold_ratio(n_folds: int) -> float:
    """n_test/n_train of one fold of contiguous n_folds-fold cross-validation (the folds of one corpus,
    cut in order): 1/(n_folds − 1)."""
    return 1.0 / (n_folds - 1)


def for_folds(n_folds: int) -> ReplicateTest:
    """The corrected test over folds of an n_folds-fold layout."""
    return ReplicateTest(CORRECTED, fold_ratio(n_folds))


def choose(option: str, folds_vary: bool, n_folds: int | None, where: str) -> ReplicateTest:
    """The test for replicates: `option` auto picks corrected where the compared replicates span
    several folds (they share training text), paired where they are seeds on one split.
    `n_folds`: the fold layout's (data.n_folds); `where` names the option in an error. A
    ValueError says what is wrong in one line (callers raise it as their UserError)."""
    if option not in (AUTO, *TESTS):
        raise ValueError(f"{where}={option} is not a test; use auto, corrected or paired")
    if option == PAIRED or (option == AUTO and not folds_vary):
        return PAIRED_T
    if not folds_vary:
        raise ValueError(f"{where}=corrected: the replicates are one data.fold (seeds on one "
                         "split are independent); use paired or auto")
    if n_folds is None or n_folds < 2:
        raise ValueError(f"{where}={option}: the fold layout (data.n_folds) is not known; "
                         "pass it (the sweep's data.n_folds)")
    return for_folds(n_folds)


def no_spread(d: Sequence[float]) -> bool:
    """Differences that are all equal up to rounding (rounding noise is not variance)."""
    return max(d) - min(d) <= 1e-12 * max(1.0, abs(statistics.fmean(d)))


def tost_interval(d: Sequence[float], alpha: float,
                  test: ReplicateTest = PAIRED_T) -> tuple[float, float]:
    """The (1 - 2 alpha) t-interval of mean(d) under `test` (n >= 2 differences): it lies
    inside [-δ, +δ] exactly when both one-sided tests at alpha (H0: mean <= -δ, H0: mean >= δ)
    reject, i.e. the TOST's equivalence at alpha (Schuirmann 1987). Without spread it is the
    mean itself."""
    return test.interval(d, 1 - 2 * alpha)


def holm(pvalues: Iterable[float]) -> list[float]:
    """Holm–Bonferroni step-down adjusted p-values, in the input's order.

    Sorted ascending, the i-th smallest of m becomes (m - i + 1) p_(i), made non-decreasing
    (a larger p never gets a smaller adjusted p) and capped at 1. Rejecting where the adjusted
    p <= alpha controls the family-wise error rate at alpha under any dependence between the
    tests. NaN p-values (too few pairs: no test) stay NaN and are not counted in m: a
    comparison that was never tested cannot be a false rejection.
    """
    p = [float(x) for x in pvalues]
    tested = sorted((i for i, x in enumerate(p) if not math.isnan(x)), key=lambda i: p[i])
    adjusted, running = [math.nan] * len(p), 0.0
    for rank, i in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p[i]))
        adjusted[i] = running
    return adjusted
