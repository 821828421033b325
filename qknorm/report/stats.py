"""Statistics over completed runs (scipy.stats): per-p intervals, paired deltas vs a baseline p.

Everything here takes the runs DataFrame of qknorm.report.results and keeps only `completed` runs:
diverged, pruned, failed and incomplete runs are counted by `excluded` and never averaged.
Groups are the values of norm.p (plus norm.kind when several kinds were run, plus any key the
user names). Every interval and test is the replicate test of hydra_racing_sweeper.multitest, chosen by
`replicate_test`: over folds of one corpus the corrected resampled t, its replicates the folds
(the seeds of a fold averaged first); over seeds on one split the plain paired t, its replicates
the (seed, data.fold) pairs. A delta pairs runs with the same replicate, like with like.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from hydra_racing_sweeper import decision, multitest
from hydra_racing_sweeper.multitest import AUTO as AUTO_TEST
from hydra_racing_sweeper.multitest import CORRECTED, PAIRED_T, ReplicateTest, holm
from scipy import stats

from qknorm.config import P_KINDS
from qknorm.errors import UserError

# Re-exported: callers reach the run p, the baseline and p's labels as stats.<name>; they live
# in qknorm.report.baseline and qknorm.report.paxis.
from qknorm.report.paxis import format_p
from qknorm.rundir import COMPLETED, INCOMPLETE, REPLICATE_KEYS, STATUSES

ALPHA = 0.05  # the Δ table's level: a call at Holm p <= ALPHA; its intervals at 1 - ALPHA
CONFIDENCE = 1 - ALPHA
PAIR_KEYS = list(REPLICATE_KEYS)  # a replicate under the plain paired t: (seed, data.fold)
FOLD_KEYS = ["data.fold"]  # a replicate under the corrected t: a fold, its seeds averaged
# The equivalence verdict: TOST at 5%, i.e. the 90% t-interval of the replicate test inside ±δ.
TOST_ALPHA = ALPHA
# The Δ table's words for a comparison's outcome (hydra_racing_sweeper.decision, asked both ways).
WORSE, BETTER, UNDECIDED = decision.WORSE, decision.BETTER, "undecided"
LEVEL_WITHIN = f"{decision.LEVEL} within ±δ"
VERDICT_WORDS = {decision.LEVEL: LEVEL_WITHIN, decision.WORSE: WORSE, decision.BETTER: BETTER,
                 decision.NOT_SHOWN: UNDECIDED}


def completed(df: pd.DataFrame) -> pd.DataFrame:
    """Completed runs, each counted once: a run that repeats another's effective config, seed
    and fold (results.csv's duplicate_of) is the same deterministic run, not a replicate."""
    done = df["status"] == COMPLETED
    if "duplicate_of" in df.columns:
        done &= df["duplicate_of"].isna()
    return df[done]


def excluded(df: pd.DataFrame) -> dict[str, int]:
    """{status: count} of the runs statistics leave out, in a fixed order."""
    counts = df.loc[df["status"] != COMPLETED, "status"].value_counts()
    return {s: int(counts[s]) for s in (*STATUSES, INCOMPLETE) if s in counts}


def group_keys(df: pd.DataFrame, by: list[str] | tuple[str, ...] = ()) -> list[str]:
    kinds = ["norm.kind"] if df["norm.kind"].nunique(dropna=False) > 1 else []
    return kinds + ["norm.p"] + [k for k in by if k not in ("norm.p", "norm.kind")]


def replicate_test(runs: pd.DataFrame, option: str = AUTO_TEST,
                   n_folds: int | None = None) -> ReplicateTest:
    """The test the report's intervals and comparisons use (multitest.choose): `option` auto is
    the corrected t where the completed runs span several folds, the paired t where they share
    one (seeds). The fold layout is results.csv's data.n_folds, or `n_folds` (--n-folds) for a
    results.csv written before that column. UserError, one line, when it cannot be known."""
    done = completed(runs)
    folds_vary = done["data.fold"].nunique() > 1
    if n_folds is None and "data.n_folds" in done.columns and option != multitest.PAIRED:
        layouts = sorted(done["data.n_folds"].dropna().unique())
        if len(layouts) > 1:
            raise UserError(f"the runs use several fold layouts (data.n_folds = "
                            f"{', '.join(str(int(k)) for k in layouts)}); report one layout at "
                            "a time, or pass --test paired")
        n_folds = int(layouts[0]) if layouts else None
    try:
        return multitest.choose(option, folds_vary, n_folds, "--test")
    except ValueError as e:
        hint = (" with --n-folds K (results.csv predates its data.n_folds column)"
                if "not known" in str(e) else "")
        raise UserError(f"{e}{hint}") from None


def replicate_keys(test: ReplicateTest) -> list[str]:
    """What one replicate is under `test`: a fold (corrected: its seeds are averaged, folds are
    what the correction knows), or a (seed, data.fold) pair (paired)."""
    return FOLD_KEYS if test.name == CORRECTED else PAIR_KEYS


def pairing(test: ReplicateTest) -> str:
    """replicate_keys as tables and figures say it: data.fold, or (seed, data.fold)."""
    keys = replicate_keys(test)
    return keys[0] if len(keys) == 1 else f"({', '.join(keys)})"


def replicates(group: pd.DataFrame, metric: str, test: ReplicateTest = PAIRED_T
               ) -> tuple[pd.Series, int]:
    """A group's metric by replicate: by data.fold under the corrected test (the seeds of a fold
    averaged: folds are what the correction knows), by (seed, data.fold) under the paired one.
    Also the number of runs folded into another replicate's mean (said in notes)."""
    keys = replicate_keys(test)
    rows = group.dropna(subset=[metric])
    return rows.groupby(keys)[metric].mean(), int(rows.duplicated(keys).sum())


def t_interval(values, test: ReplicateTest = PAIRED_T) -> tuple[int, float, float, float, float]:
    """(n, mean, std, low, high): sample std (ddof=1) and the 95% t-interval of the mean of the
    replicate values under `test` (multitest: variance factor 1/n, or 1/n + n_test/n_train).

    std and the interval are NaN for n < 2: one run says nothing about spread.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return 0, math.nan, math.nan, math.nan, math.nan
    mean = float(x.mean())
    if n < 2:
        return 1, mean, math.nan, math.nan, math.nan
    low, high = test.interval(x.tolist(), CONFIDENCE)
    return n, mean, float(x.std(ddof=1)), low, high


def group_summary(df: pd.DataFrame, metrics: list[str], by: list[str] | tuple[str, ...] = (),
                  test: ReplicateTest = PAIRED_T) -> pd.DataFrame:
    """One row per group of completed runs: n (runs), then per metric the mean, std and 95%
    interval (ci_low, ci_high) over its replicates under `test` (`replicates`)."""
    done = completed(df)
    keys = group_keys(df, by)
    rows = []
    for values, group in done.groupby(keys, dropna=False, sort=True):
        row = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
        for metric in metrics:
            n, mean, std, low, high = t_interval(replicates(group, metric, test)[0], test)
            row["n"] = len(group)
            row.update({f"{metric}_mean": mean, f"{metric}_std": std,
                        f"{metric}_ci_low": low, f"{metric}_ci_high": high})
        rows.append(row)
    columns = keys + ["n"] + [f"{m}_{s}" for m in metrics for s in ("mean", "std", "ci_low",
                                                                     "ci_high")]
    return pd.DataFrame(rows, columns=columns)


def best(summary: pd.DataFrame, metric: str, by: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """The group with the lowest mean metric (one per combination of the `by` keys)."""
    ranked = summary.dropna(subset=[f"{metric}_mean"]).sort_values(f"{metric}_mean", kind="stable")
    by = [k for k in by if k in summary.columns and k not in ("norm.p", "norm.kind")]
    return ranked.groupby(by, dropna=False).head(1) if by else ranked.head(1)


@dataclass
class PairedTest:
    n: int
    mean: float
    ci_low: float
    ci_high: float
    t_pvalue: float
    wilcoxon_pvalue: float
    note: str
    d_z: float = math.nan  # Cohen's paired effect size, cohens_dz
    # The paired (1 - 2 TOST_ALPHA) = 90% t-interval of Δ: inside ±δ is TOST's equivalence.
    tost_low: float = math.nan
    tost_high: float = math.nan


def tost_interval(d, test: ReplicateTest = PAIRED_T) -> tuple[float, float]:
    """The 90% t-interval of mean(d) under `test` (multitest.tost_interval at TOST_ALPHA):
    inside ±δ is TOST's equivalence. NaN for fewer than 2 differences."""
    d = [float(x) for x in d]
    return multitest.tost_interval(d, TOST_ALPHA, test) if len(d) >= 2 else (math.nan, math.nan)


def outcome(holm_p: float, delta: float, low: float, high: float, equivalence: float,
            interval: tuple[float, float] | None = None) -> decision.Outcome:
    """One comparison's outcome (lower is better): hydra_racing_sweeper.decision asked both ways at ALPHA,
    from its Holm-adjusted two-sided t p (the delta table's family) and its 90% interval
    [low, high] (TOST at 5%, not corrected over the table's comparisons); `interval`: the 95%
    one, whose edge nearest 0 gives a difference's strength."""
    return decision.decide(**decision.both_ways(holm_p, delta), alpha=ALPHA, tost=(low, high),
                           equivalence=equivalence, interval=interval)


def verdict(holm_p: float, delta: float, low: float, high: float, equivalence: float) -> str:
    """The outcome in the Δ table's words (VERDICT_WORDS)."""
    return VERDICT_WORDS[outcome(holm_p, delta, low, high, equivalence).word]


def cohens_dz(d) -> float:
    """Cohen's d_z of paired differences: mean(d) / sd(d), sd with ddof=1 (Cohen 1988; Lakens 2013).

    NaN for fewer than 2 differences or when all are equal: there is no spread to scale by
    (the same cases paired_test gives no t-test).
    """
    d = np.asarray(d, dtype=float)
    if len(d) < 2 or multitest.no_spread(d):
        return math.nan
    return float(d.mean() / d.std(ddof=1))


def paired_test(x, base, test: ReplicateTest = PAIRED_T) -> PairedTest:
    """Delta x - base over pairs: mean, 95% interval and two-sided p of `test` (multitest: the
    corrected t over folds, the paired t over seeds), the Wilcoxon signed-rank p (which, like
    the plain t, treats the pairs as independent: over folds it is optimistic), d_z.

    Too few pairs is said in `note`, never an exception: 1 pair gives no test; with k non-zero
    differences the smallest two-sided Wilcoxon p-value is 2/2^k, so k < 6 cannot reach 0.05.
    """
    x, base = np.asarray(x, dtype=float), np.asarray(base, dtype=float)
    d = x - base
    n, mean, _, low, high = t_interval(d, test)
    t_p = w_p = math.nan
    notes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero variance: scipy warns and returns nan, said below
        if n < 2:
            notes.append(f"{n} pair(s): too few for a test")
        else:
            if multitest.no_spread(d):
                notes.append("all differences equal: no t-test")
            else:
                t_p = test.p_two_sided(d.tolist())
            nonzero = int(np.count_nonzero(d))
            if nonzero == 0:
                notes.append("all differences are zero: no Wilcoxon test")
            else:
                w_p = float(stats.wilcoxon(x, base).pvalue)
                if not decision.shown(2.0 / 2**nonzero, ALPHA):
                    notes.append(f"{nonzero} non-zero pairs: Wilcoxon cannot go below "
                                 f"p={2.0 / 2**nonzero:.3g}")
    return PairedTest(n, mean, low, high, t_p, w_p, "; ".join(notes), cohens_dz(d),
                      *tost_interval(d, test))


def paired_vs_baseline(df: pd.DataFrame, metric: str, baseline: float,
                       by: list[str] | tuple[str, ...] = (),
                       equivalence: float | None = None,
                       test: ReplicateTest = PAIRED_T) -> pd.DataFrame:
    """Delta (group - baseline p) of metric per group, paired by replicate (`replicates`: the
    fold under the corrected test, (seed, data.fold) under the paired one), tested by `test`.

    holm_pvalue corrects t_pvalue over the family of every row of this table (one metric, all
    groups, --by values included): the comparisons the table's reader scans for a difference.
    With `equivalence` (δ, the metric's units) each row also gets the 90% interval of Δ
    (tost_low, tost_high) and its `verdict`: worse / better / level within ±δ / undecided.
    """
    done = completed(df)
    keys = group_keys(df, by)
    extra = [k for k in keys if k not in ("norm.kind", "norm.p")]
    is_base = done["norm.kind"].isin(P_KINDS) & (done["norm.p"] == baseline)
    rows = []
    for values, group in done.groupby(keys, dropna=False, sort=True):
        row = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
        if group.index.isin(done.index[is_base]).all():
            continue  # the baseline itself
        base = done[is_base]
        for k in extra:  # compare within the same value of every other named key
            base = base[base[k] == row[k]]
        x, dx = replicates(group, metric, test)
        b, db = replicates(base, metric, test)
        common = x.index.intersection(b.index)
        result = paired_test(x[common].to_numpy(), b[common].to_numpy(), test)
        notes = [result.note] if result.note else []
        if dx or db:
            notes.append(f"{dx + db} run(s) share a {pairing(test)} with another: averaged")
        row.update({"n_pairs": result.n, "delta_mean": result.mean,
                    "delta_ci_low": result.ci_low, "delta_ci_high": result.ci_high,
                    "t_pvalue": result.t_pvalue, "wilcoxon_pvalue": result.wilcoxon_pvalue,
                    "d_z": result.d_z, "note": "; ".join(notes), "tost_low": result.tost_low,
                    "tost_high": result.tost_high})
        rows.append(row)
    columns = keys + ["n_pairs", "delta_mean", "delta_ci_low", "delta_ci_high", "t_pvalue",
                      "holm_pvalue", "wilcoxon_pvalue", "d_z", "note"]
    if equivalence is not None:
        columns += ["tost_low", "tost_high", "verdict"]
    table = pd.DataFrame(rows, columns=columns)
    table["holm_pvalue"] = holm(table["t_pvalue"])
    if equivalence is not None:
        table["verdict"] = [verdict(r.holm_pvalue, r.delta_mean, r.tost_low, r.tost_high,
                                    equivalence) for r in table.itertuples()]
    return table


ATTENTION = ("attn_entropy_frac", "attn_max_weight", "logit_std")  # the diagnostics table's


def at_step0(runs: pd.DataFrame, curves: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Each run's `columns` at step 0 (the untrained model, from its metrics.jsonl curve),
    aligned with `runs`' rows; NaN for a run whose curve has no step 0."""
    start = curves[curves["step"] == 0].groupby("run_dir")[columns].first()
    return runs[["run_dir"]].join(start, on="run_dir")[columns]


def attention_summary(runs: pd.DataFrame, curves: pd.DataFrame,
                      by: list[str] | tuple[str, ...] = (),
                      test: ReplicateTest = PAIRED_T) -> pd.DataFrame:
    """Per group of completed runs (the groups of group_summary on all runs, so the keys are
    the report's): each ATTENTION diagnostic's mean at step 0 (the untrained model, from the
    curves) and at the last eval (final.json), and gamma at the last eval. Groups where no run
    logged diagnostics (runs from before them) are left out; none left: an empty frame."""
    if completed(runs)[ATTENTION[0]].isna().all():
        return pd.DataFrame()
    start = at_step0(runs, curves, list(ATTENTION))
    frame = runs.assign(**{f"{name}_step0": start[name] for name in ATTENTION})
    metrics = [f"{name}_step0" for name in ATTENTION] + [*ATTENTION, "gamma"]
    table = group_summary(frame, metrics, by, test)
    return table[table[f"{ATTENTION[0]}_mean"].notna()].reset_index(drop=True)


def ranking_by_step(curves: pd.DataFrame, metric: str = "val_loss") -> pd.DataFrame:
    """Does the ranking of p settle? One row per eval step that every p reached: the p values
    ordered by their mean metric over completed runs (best first), and Kendall's tau between
    that step's means and the last step's (1: the final order already).

    `curves` is qknorm.report.results.collect_curves's frame. Runs without p (none, rms) are left out.
    """
    done = curves[(curves["status"] == COMPLETED) & curves["norm.kind"].isin(P_KINDS)]
    means = done.groupby(["step", "norm.p"])[metric].mean().unstack("norm.p").dropna()
    if means.shape[0] == 0 or means.shape[1] < 2:
        return pd.DataFrame(columns=["step", "order", "kendall_tau"])
    last = means.iloc[-1].to_numpy()
    rows = []
    for step, row in means.iterrows():
        order = " < ".join(format_p(p) for p in row.sort_values(kind="stable").index)
        tau = stats.kendalltau(row.to_numpy(), last).statistic
        rows.append({"step": int(step), "order": order, "kendall_tau": float(tau)})
    return pd.DataFrame(rows)


MIN_FIT_POINTS = 6  # a quadratic has 3 coefficients: 6 points leave 3 degrees of freedom


def quadratic_fit(x, y, grid) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Least squares y ~ a + b z + c z^2 (z = x standardised), evaluated on `grid`: (mean,
    low, high) with the 95% t-interval of the fitted mean, t(n-3) * s * sqrt(g (X'X)^-1 g').

    The report fits trial means against log p: a smooth trend with its uncertainty, not a model
    of the loss. None with fewer than MIN_FIT_POINTS points or fewer than 3 distinct x (the
    curve would be undetermined). Solved through QR, so nearly collinear x stay stable.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < MIN_FIT_POINTS or len(np.unique(x)) < 3:
        return None
    center, scale = x.mean(), x.std()

    def design(v):
        z = (np.asarray(v, dtype=float) - center) / scale
        return np.column_stack([np.ones_like(z), z, z * z])

    q, r = np.linalg.qr(design(x))
    coef = np.linalg.solve(r, q.T @ y)
    dof = len(x) - 3
    s = math.sqrt(float(np.sum((y - design(x) @ coef) ** 2)) / dof)
    g = design(grid)
    se = s * np.linalg.norm(np.linalg.solve(r.T, g.T), axis=0)  # ||R^-T g'|| = sqrt(g (X'X)^-1 g')
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof)) * se
    mean = g @ coef
    return mean, mean - half, mean + half


def trial_means(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One row per trial (the runs of one Optuna trial, or of one p outside a study): p, and
    the mean, min and max of its runs' metric."""
    keys = ["norm.p", "trial"] if "trial" in runs.columns else ["norm.p"]
    points = runs.groupby(keys, dropna=False, sort=True)[metric].agg(["mean", "min", "max"])
    return points.reset_index().rename(columns={"norm.p": "p"})


def fit_minimum(ps, values) -> dict | None:
    """Where the quadratic fit in log p of (ps, values) is lowest within the finite p run: p,
    the fitted mean there with its 95% interval, and `edge`: "smallest" or "largest" when that
    is an end of the range run (the minimum may lie beyond it), else "". None when
    quadratic_fit draws no curve."""
    ps, values = np.asarray(ps, dtype=float), np.asarray(values, dtype=float)
    finite = np.isfinite(ps)
    if not finite.any():
        return None
    grid = np.geomspace(ps[finite].min(), ps[finite].max(), 400)
    fit = quadratic_fit(np.log(ps[finite]), values[finite], np.log(grid))
    if fit is None:
        return None
    i = int(np.argmin(fit[0]))
    return {"p": float(grid[i]), "mean": float(fit[0][i]), "low": float(fit[1][i]),
            "high": float(fit[2][i]),
            "edge": "smallest" if i == 0 else "largest" if i == len(grid) - 1 else ""}


def fit_minima(df: pd.DataFrame, metric: str, by: list[str] | tuple[str, ...] = ()
               ) -> pd.DataFrame:
    """Per value of the `by` keys (one row without them): the number of trials of its completed
    Lp runs and fit_minimum of the trial means (p, mean, low, high, edge; NaN p: no fit)."""
    by = list(by)
    lp = completed(df)
    lp = lp[lp["norm.kind"].isin(P_KINDS) & lp[metric].notna()]
    rows = []
    for values, group in lp.groupby(by, dropna=False, sort=True) if by else [((), lp)]:
        values = values if isinstance(values, tuple) else (values,)
        trials = trial_means(group, metric)
        lowest = fit_minimum(trials["p"], trials["mean"]) or {}
        rows.append({**dict(zip(by, values)), "trials": len(trials), **lowest})
    return pd.DataFrame(rows, columns=[*by, "trials", "p", "mean", "low", "high", "edge"])
