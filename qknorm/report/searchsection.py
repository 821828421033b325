"""summary.md's section for a racing search (search=p_tpe): its answer (the rows of
hydra_racing_sweeper.readback.answer_rows, the same the sweeper's last line and qknorm.status give), and
where a quadratic fit of the proposals' fold-adjusted values in log p puts the minimiser.

The fit: each proposal that completed a fold has a fold-adjusted value (the best's mean plus its
mean paired difference to the best on the folds both ran: the value the sampler was told); the
quadratic in log p through them (stats.quadratic_fit, the report's loss_vs_p curve) is lowest at
p*, and its 95% band says where else the minimum may lie: the p whose fitted mean's interval
reaches below the upper end of the interval at p*. It assumes the values scatter independently
with one variance around a parabola in log p; they do not quite (a value over more folds is
less noisy, and proposals share folds), so the range is a reading aid, not a confidence
interval of p*; the answer's verdicts carry the claims.
"""

from __future__ import annotations

import math

import numpy as np
from hydra_racing_sweeper import readback
from hydra_racing_sweeper.race import verdicts
from hydra_racing_sweeper.units import num

from qknorm.report import paxis, stats
from qknorm.report.tables import markdown_table, pval


def fit_points(rows: list[dict]) -> list[tuple[float, float]]:
    """(p, fold-adjusted value) of the best and of every proposal judged against it, at finite
    p: a proposal still racing has no Δ yet, so it is not a point ([] without a best)."""
    best = next((r for r in rows if r["answer"] == verdicts.BEST), None)
    if best is None:
        return []
    points = [(readback.p_of(r), best["mean"] + (r["delta"] or 0.0)) for r in rows
              if r is best or r["delta"] is not None]
    return [(p, v) for p, v in points if p is not None and math.isfinite(p)]


def minimiser(rows: list[dict]) -> dict | None:
    """p*, its fitted mean with the 95% interval, and the range of p whose fitted interval
    reaches below that interval's upper end; None without a fit (too few finite p)."""
    points = fit_points(rows)
    ps = np.array([p for p, _ in points], dtype=float)
    values = np.array([v for _, v in points], dtype=float)
    if len(ps) < 3:
        return None
    grid = np.geomspace(ps.min(), ps.max(), 400)
    fit = stats.quadratic_fit(np.log(ps), values, np.log(grid))
    if fit is None:
        return None
    mean, low, high = fit
    i = int(np.argmin(mean))
    near = grid[low <= high[i]]
    return {"p": float(grid[i]), "mean": float(mean[i]), "low": float(low[i]),
            "high": float(high[i]), "p_low": float(near.min()), "p_high": float(near.max()),
            "points": len(ps)}


def section(rows: list[dict], settings: dict, name: str) -> list[str]:
    delta = settings.get("equivalence")
    header = ["proposal", "answer", "replicates run", "mean", "Δ vs best", "90% interval of Δ",
              "Holm-adjusted p", "training steps"]
    table = [[readback.short(r), r["answer"] + (" (stopped at a rung)" if r["stopped"]
                                                else ""), str(r["n"]),
              num(r["mean"]) if r["mean"] is not None else "-",
              f"{r['delta']:+.4f}" if r["delta"] is not None else "-",
              f"[{r['low']:+.4f}, {r['high']:+.4f}]" if r["low"] is not None else "-",
              pval(r["p_adjusted"]) if r["p_adjusted"] is not None else "-",
              f"{r['steps']:,}"] for r in rows]
    out = [f"## Search: study {name}", "", *readback.answer_lines(rows, settings), "",
           "A search that races its proposals (docs/search.md): each proposal ran the "
           "incumbent's first replicate, and on while it led (taking the incumbent's place once "
           "its mean over all of the incumbent's was lower); once the proposals ended, the close ones ran on "
           "until level or worse. Δ on one replicate is shown untested. The answer compares "
           "every proposal with the best once more on the replicates both ran "
           f"({_test(settings)}): `level` where the "
           f"{1 - 2 * settings['alpha']:.0%} interval of Δ lies inside ±{delta:g} (TOST), "
           f"`worse` where the Holm-adjusted one-sided p <= {settings['alpha']:g} (Holm over "
           "the comparisons with the best), else `undecided` (a run stopped at a rung is "
           "undecided: the margin rule saves compute, it tests nothing)."
           if delta is not None else "", "", markdown_table(header, table), ""]
    fit = minimiser(rows)
    best = next((r for r in rows if r["answer"] == verdicts.BEST), None)
    if fit is not None:
        out += [f"Minimiser (a quadratic in log p through the {fit['points']} proposals' "
                f"fold-adjusted values): lowest at p = {paxis.format_p(fit['p'], 3)}, fitted "
                f"mean {num(fit['mean'])} [{num(fit['low'])}, {num(fit['high'])}] (95%); the "
                f"fitted mean's interval reaches below {num(fit['high'])} for p in "
                f"[{paxis.format_p(fit['p_low'], 3)}, {paxis.format_p(fit['p_high'], 3)}]. A "
                "reading aid, not the answer: the fit takes the values as independent with one "
                "variance (docs/search.md)"
                + (f"; the search's answer is {readback.short(best)}"
                   f"{readback.range_words(rows)}." if best is not None else "."), ""]
    else:
        points = fit_points(rows)
        out += [f"Minimiser: no quadratic fit: {len(points)} of the {len(rows)} proposals have a "
                f"fold-adjusted value at a finite p, at {len({p for p, _ in points})} distinct p "
                "(the best, and those judged against it; one still racing has none yet); it "
                f"needs {stats.MIN_FIT_POINTS} at 3 or more distinct p.", ""]
    return out


def _test(settings: dict) -> str:
    if settings.get("test") == "corrected":
        return f"the corrected resampled t, n_test/n_train = {settings['ratio']:.3g}"
    return "the paired t"
