"""How many folds a difference of δ = 0.02 needs: power of the corrected t over K folds at our spread.

The power of the corrected resampled t over all K folds of a K-fold layout, at the fold-to-fold
spread σ of the per-fold Δ vs p = 2 measured on the committed grids.

`python -m qknorm.research.fold_power [NAME=RESULTS_CSV ...] [--sigma S ...] [--delta 0.02]
[--out docs/results/fold_power.json]`

The spread: for each results.csv (a grid of p × folds, one seed), the sd over folds of the
per-fold Δ_f = metric(p, f) − metric(baseline, f), per p; summarised over every non-baseline p
and over the p near the baseline (`--near`, default 1.5 2.5 3: p = 1 and ∞ are far from 2 and
their spread is not that of a small Δ). `--sigma` adds σ values by hand.

The power, for K in `--folds` (all K folds compared, k = K, so df = K − 1), per σ and δ:

- worse: the chance that a p whose true Δ is +δ gets a significant Δ > 0 from the two-sided
  corrected t (hydra_racing_sweeper.multitest.for_folds(K): t = mean(d) / sqrt(c s²), c = 1/K + 1/(K − 1))
  at α per comparison and at Holm's worst case α/m (m = `--comparisons`, 7: the grid's
  non-baseline p; Holm's smallest p faces α/m, the others a larger one). T is noncentral t,
  df K − 1, noncentrality δ / (σ sqrt(c)).
- level: the chance that a p whose true Δ is 0 gets the 90% corrected interval inside ±δ
  (TOST at 5%: hydra_racing_sweeper.multitest.tost_interval), integrated over the chi-square law of s.
- the plain paired t (c = 1/K) the same way, its "nominal" power: what a power calculation that
  takes the folds as independent would promise. It is not honest: under Nadeau & Bengio's
  correlation the plain t's size is above α (the column `plain size` gives it under their model).
- the half-width of the corrected 90% interval in units of σ: t_{0.95, K−1} sqrt(c).

The model behind the power (Nadeau & Bengio's correlated folds): qknorm/research/power.py. The
convention (`--hold s`, default): the measured s is taken as σ at every K. `--hold sigma` keeps
σ_f fixed instead: σ(K) = s sqrt((1 − 1/K) / (1 − 1/K0)), K0 the measured layout (at most 9%
more at K = 20 from K0 = 5); the script reports the recommended K under both.

Folds × seeds: seeds average within a fold before the corrected t over folds (hydra_racing_sweeper.multitest),
so m seeds shrink only the seed share φ of a fold's Δ variance: σ(m) = σ sqrt(1 − φ + φ/m). The
committed grids have one seed, so φ is not measured: `--seed-share` sets an assumed φ for an
illustrative table, labelled as an assumption.

The decision (`--target`, 0.8): the smallest K in 3..20 whose corrected t reaches the target for
both "worse at Δ = δ" (per comparison) and "level at Δ = 0" at the largest near-p median σ of
the grids given; and the cost of a grid there: mean wall_time_s of a results.csv's completed
runs × number of p × K / `--jobs` parallel jobs.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

from qknorm.report import format_p
from qknorm.research.power import factor, half_width, plain_size, power_level, power_worse

FOLDS = (3, 5, 8, 10, 15, 20)
SEARCH = range(3, 21)  # the K the decision searches


def row(n_folds: int, sigma: float, delta: float, alpha: float, comparisons: int) -> dict:
    """The power table's row for all n_folds folds of an n_folds-fold layout."""
    k = n_folds
    c, plain = factor(k, n_folds), factor(k, n_folds, corrected=False)
    return {"K": n_folds, "c": c, "half_width_90_over_sigma": half_width(k, c),
            "worse": power_worse(k, c, sigma, delta, alpha),
            "worse_holm_worst": power_worse(k, c, sigma, delta, alpha / comparisons),
            "level": power_level(k, c, sigma, delta),
            "plain_half_width_90_over_sigma": half_width(k, plain),
            "plain_nominal_worse": power_worse(k, plain, sigma, delta, alpha),
            "plain_nominal_level": power_level(k, plain, sigma, delta),
            "plain_size": plain_size(k, n_folds, alpha)}


def held(sigma: float, n_folds: int, measured_folds: int, hold: str) -> float:
    """σ at n_folds folds: the measured s (hold s) or the same per-fold σ_f (hold sigma)."""
    if hold == "s":
        return sigma
    return sigma * math.sqrt((1 - 1 / n_folds) / (1 - 1 / measured_folds))


def smallest(sigma: float, delta: float, alpha: float, comparisons: int, target: float,
             measured_folds: int, hold: str) -> dict[str, int | None]:
    """The smallest K in 3..20 whose power reaches target, per criterion (None: none does)."""
    found: dict[str, int | None] = dict.fromkeys(
        ("worse", "worse_holm_worst", "level", "worse_and_level", "worse_holm_worst_and_level"))
    for K in SEARCH:
        s = held(sigma, K, measured_folds, hold)
        c = factor(K, K)
        got = {"worse": power_worse(K, c, s, delta, alpha),
               "worse_holm_worst": power_worse(K, c, s, delta, alpha / comparisons),
               "level": power_level(K, c, s, delta)}
        got["worse_and_level"] = min(got["worse"], got["level"])
        got["worse_holm_worst_and_level"] = min(got["worse_holm_worst"], got["level"])
        for key, value in got.items():
            if found[key] is None and value >= target:
                found[key] = K
    return found


def seed_rows(sigma: float, delta: float, alpha: float, comparisons: int, share: float,
              n_folds: int, seeds: tuple[int, ...]) -> list[dict]:
    """Illustrative folds × seeds rows at an ASSUMED seed share φ of a fold's Δ variance:
    σ(m) = σ sqrt(1 − φ + φ/m), the corrected t over n_folds folds of seed means."""
    out = []
    for m in seeds:
        s = sigma * math.sqrt(1 - share + share / m)
        out.append({"K": n_folds, "seeds": m, "runs_per_p": n_folds * m, "sigma": s,
                    **{key: value for key, value in row(n_folds, s, delta, alpha, comparisons).items()
                       if key in ("worse", "worse_holm_worst", "level")}})
    return out


def measure(name: str, path: Path, metric: str, baseline: float, near: list[float]) -> dict:
    """The sd over folds of Δ_f vs the baseline p, per p, and the mean wall time of a run."""
    from qknorm.report import results  # pandas, only where a results.csv is measured
    from qknorm.rundir import COMPLETED

    table = results.read_csv(path, ("status", "norm.p", "data.fold", "seed", metric),
                             "pass a results.csv written by scripts/report.py")
    done = table[table["status"] == COMPLETED]
    rows = done.to_dict("records")
    if not rows:
        raise _user_error(f"{path} has no completed runs with norm.p, data.fold and {metric}")
    if len({r["seed"] for r in rows}) > 1:
        raise _user_error(f"{path} has several seeds; this reads one seed per fold")
    by_p: dict[float, dict[int, float]] = {}
    for r in rows:
        by_p.setdefault(float(r["norm.p"]), {})[int(r["data.fold"])] = float(r[metric])
    if baseline not in by_p:
        raise _user_error(f"{path} has no p = {baseline:g} to compare with")
    base = by_p[baseline]
    sd = {}
    for p, runs in sorted(by_p.items()):
        folds = sorted(set(runs) & set(base))
        if p != baseline and len(folds) >= 2:
            sd[p] = statistics.stdev(runs[f] - base[f] for f in folds)
    layouts = set(done["data.n_folds"].dropna())
    n_folds = int(layouts.pop()) if len(layouts) == 1 else len({r["data.fold"] for r in rows})

    def summary(ps: list[float]) -> dict:
        values = [sd[p] for p in ps]
        return {"p": [format_p(p) for p in ps], "median": statistics.median(values),
                "min": min(values), "max": max(values)}

    close = [p for p in sd if any(math.isclose(p, q) for q in near)]
    if not close:
        raise _user_error(f"{path} has none of the near p {near}")
    return {"name": name, "source": str(path), "metric": metric, "baseline": baseline,
            "n_folds": n_folds, "folds": len(base), "n_p": len(by_p),
            "sd_by_p": {format_p(p): v for p, v in sd.items()},
            "all": summary(list(sd)), "near": summary(close),
            "mean_wall_time_s": statistics.fmean(float(r["wall_time_s"]) for r in rows)}


def _user_error(message: str) -> Exception:
    from qknorm.errors import UserError

    return UserError(message)


def hours(wall_s: float, n_p: int, n_folds: int, jobs: int) -> float:
    """Wall hours of a grid: n_p × n_folds runs of wall_s each, `jobs` at a time."""
    return wall_s * n_p * n_folds / jobs / 3600


def table(rows: list[dict]) -> str:
    """The power table in markdown."""
    lines = ["| K | c = 1/K + 1/(K−1) | 90% half-width / σ | worse at Δ = δ, α = 0.05 | "
             "worse, Holm worst case | level at Δ = 0 (TOST 5%) | plain t: half-width / σ | "
             "plain t nominal: worse | plain t nominal: level | plain t real size |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['K']} | {r['c']:.3f} | {r['half_width_90_over_sigma']:.2f} | "
                     f"{r['worse']:.2f} | {r['worse_holm_worst']:.2f} | {r['level']:.2f} | "
                     f"{r['plain_half_width_90_over_sigma']:.2f} | {r['plain_nominal_worse']:.2f} | "
                     f"{r['plain_nominal_level']:.2f} | {r['plain_size']:.3f} |")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="*", metavar="NAME=RESULTS_CSV",
                        help="grids to measure σ on (NAME= optional: the csv's folder name)")
    parser.add_argument("--sigma", type=float, nargs="*", default=[],
                        help="σ values (sd of the per-fold Δ) to tabulate besides the measured ones")
    parser.add_argument("--delta", type=float, default=0.02, help="δ, the metric's units (0.02)")
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided level per comparison")
    parser.add_argument("--comparisons", type=int, default=7,
                        help="m of Holm's worst case alpha/m (7: the grid's non-baseline p)")
    parser.add_argument("--folds", type=int, nargs="*", default=list(FOLDS), help="K to tabulate")
    parser.add_argument("--metric", default="best_val_loss")
    parser.add_argument("--baseline", type=float, default=2.0)
    parser.add_argument("--near", type=float, nargs="*", default=[1.5, 2.5, 3.0],
                        help="the p whose spread decides (near the baseline)")
    parser.add_argument("--hold", choices=["s", "sigma"], default="s",
                        help="across K keep the measured s (default) or the per-fold σ_f")
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, for the cost")
    parser.add_argument("--seed-share", type=float, default=None, metavar="PHI",
                        help="an ASSUMED share of a fold's Δ variance that seeds average out, for "
                        "an illustrative folds × seeds table (not measured)")
    parser.add_argument("--out", type=Path, default=None, help="write everything as JSON here")
    args = parser.parse_args()
    if args.delta <= 0 or not 0 < args.alpha < 1 or any(s <= 0 for s in args.sigma):
        raise _user_error("--delta and --sigma must be > 0 and --alpha in (0, 1)")
    if any(K < 3 for K in args.folds) or (args.seed_share is not None and not 0 <= args.seed_share <= 1):
        raise _user_error("--folds must be >= 3 and --seed-share in [0, 1]")
    if not args.results and not args.sigma:
        raise _user_error("give a results.csv to measure σ on or --sigma")
    return args


def measure_grids(args: argparse.Namespace) -> list[dict]:
    grids = []
    for item in args.results:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = Path(item).parent.name, item
        grids.append(measure(name, Path(path), args.metric, args.baseline, args.near))
    return grids


def sigma_list(args: argparse.Namespace, grids: list[dict]) -> tuple[list[dict], dict]:
    """The σ values tabulated, and the one that decides (the largest near-p median)."""
    sigmas = [{"label": f"{g['name']}, near-p median", "sigma": g["near"]["median"]} for g in grids]
    decide = max(sigmas, key=lambda s: s["sigma"]) if grids else None
    if grids:  # the spread's upper end near p = 2: how fragile the decision is
        worst = max(grids, key=lambda g: g["near"]["max"])
        sigmas.append({"label": f"{worst['name']}, near-p max", "sigma": worst["near"]["max"]})
    sigmas += [{"label": f"{g['name']}, all-p median", "sigma": g["all"]["median"]} for g in grids]
    sigmas += [{"label": "given", "sigma": s} for s in args.sigma]
    return sigmas, decide or sigmas[0]


def print_spread(grids: list[dict]) -> None:
    if not grids:
        return
    print("| grid | p | sd of per-fold Δ vs p = 2 | median (range) |\n|---|---|---|---|")
    for g in grids:
        for key in ("all", "near"):
            s = g[key]
            print(f"| {g['name']} ({g['folds']} folds of {g['n_folds']}) | {key}: "
                  f"{', '.join(s['p'])} | "
                  + ", ".join(f"{g['sd_by_p'][p]:.4f}" for p in s["p"])
                  + f" | {s['median']:.4f} ({s['min']:.4f}–{s['max']:.4f}) |")
    print()


def power_tables(args: argparse.Namespace, sigmas: list[dict], measured_folds: int) -> None:
    """Per σ, the power rows over K and the smallest K reaching the target (into `sigmas`)."""
    for s in sigmas:
        s["rows"] = [row(K, held(s["sigma"], K, measured_folds, args.hold), args.delta, args.alpha,
                         args.comparisons) for K in args.folds]
        s["smallest_K"] = smallest(s["sigma"], args.delta, args.alpha, args.comparisons,
                                   args.target, measured_folds, args.hold)
        s["smallest_K_other_hold"] = smallest(s["sigma"], args.delta, args.alpha,
                                              args.comparisons, args.target, measured_folds,
                                              "sigma" if args.hold == "s" else "s")
        print(f"### σ = {s['sigma']:.4f} ({s['label']}), δ/σ = {args.delta / s['sigma']:.2f}\n")
        print(table(s["rows"]))
        found = s["smallest_K"]
        print(f"\nsmallest K (3..20) reaching {args.target:g}: worse {found['worse']}, worse with "
              f"Holm worst case {found['worse_holm_worst']}, level {found['level']}, worse and "
              f"level {found['worse_and_level']}, worse (Holm worst case) and level "
              f"{found['worse_holm_worst_and_level']} (hold {args.hold}); the last two with "
              f"hold {'sigma' if args.hold == 's' else 's'}: "
              f"{s['smallest_K_other_hold']['worse_and_level']}, "
              f"{s['smallest_K_other_hold']['worse_holm_worst_and_level']}\n")


def decide_k(args: argparse.Namespace, decide: dict) -> dict:
    decision = {"sigma_label": decide["label"], "sigma": decide["sigma"],
                "K": decide["smallest_K"]["worse_and_level"],
                "K_holm_worst": decide["smallest_K"]["worse_holm_worst_and_level"],
                "K_other_hold": decide["smallest_K_other_hold"]["worse_and_level"],
                "K_holm_worst_other_hold": decide["smallest_K_other_hold"]["worse_holm_worst_and_level"]}
    print(f"decision: at σ = {decide['sigma']:.4f} ({decide['label']}, the largest near-p median), "
          f"the smallest K with power >= {args.target:g} for both worse at Δ = δ and level at Δ = 0: "
          f"{decision['K']} per comparison (α = {args.alpha:g}), {decision['K_holm_worst']} with "
          f"Holm's worst case (α/{args.comparisons})")
    return decision


def grid_cost(args: argparse.Namespace, grids: list[dict], measured_folds: int,
              decision: dict) -> list[dict]:
    cost: list[dict] = []
    if not grids:
        return cost
    ks = sorted({measured_folds, *args.folds,
                 *(k for k in (decision["K"], decision["K_holm_worst"]) if k)})
    print("\n| K | runs | " + " | ".join(f"{g['name']}: hours" for g in grids) + " |\n|---|---|"
          + "---|" * len(grids))
    for K in ks:
        entry = {"K": K, "runs": grids[0]["n_p"] * K}
        for g in grids:
            entry[g["name"]] = hours(g["mean_wall_time_s"], g["n_p"], K, args.jobs)
        cost.append(entry)
        print(f"| {K} | {entry['runs']} | "
              + " | ".join(f"{entry[g['name']]:.2f}" for g in grids) + " |")
    print("\nhours = mean wall_time_s of a completed run ("
          + ", ".join(f"{g['name']} {g['mean_wall_time_s']:.1f} s" for g in grids)
          + f") × {grids[0]['n_p']} p × K / {args.jobs} jobs / 3600")
    return cost


def seed_table(args: argparse.Namespace, decide: dict, measured_folds: int) -> dict:
    seeds = {"formula": "σ(m) = σ sqrt(1 − φ + φ/m), φ = the seed share of a fold's Δ variance",
             "measured": False, "note": "the committed grids have one seed: φ is not measured"}
    if args.seed_share is None:
        return seeds
    seeds["assumed_seed_share"] = args.seed_share
    seeds["rows"] = seed_rows(decide["sigma"], args.delta, args.alpha, args.comparisons,
                              args.seed_share, measured_folds, (1, 2, 3))
    print(f"\nASSUMED seed share φ = {args.seed_share:g} (not measured), σ = "
          f"{decide['sigma']:.4f}, K = {measured_folds}:\n\n| K | seeds | runs per p | σ(m) | "
          "worse | worse, Holm worst case | level |\n|---|---|---|---|---|---|---|")
    for r in seeds["rows"]:
        print(f"| {r['K']} | {r['seeds']} | {r['runs_per_p']} | {r['sigma']:.4f} | "
              f"{r['worse']:.2f} | {r['worse_holm_worst']:.2f} | {r['level']:.2f} |")
    return seeds


def main() -> None:
    args = parse_args()
    grids = measure_grids(args)
    measured_folds = grids[0]["n_folds"] if grids else 5
    sigmas, decide = sigma_list(args, grids)
    print(f"δ = {args.delta:g}; corrected t over all K folds of a K-fold layout (df K − 1); "
          f"worse: two-sided at α = {args.alpha:g}, Holm worst case α/{args.comparisons} = "
          f"{args.alpha / args.comparisons:.4f}; level: 90% interval inside ±δ; hold = {args.hold}\n")
    print_spread(grids)
    power_tables(args, sigmas, measured_folds)
    decision = decide_k(args, decide)
    cost = grid_cost(args, grids, measured_folds, decision)
    seeds = seed_table(args, decide, measured_folds)
    if args.out:
        command = "python -m qknorm.research.fold_power " + shlex.join(sys.argv[1:])
        args.out.write_text(json.dumps(
            {"question": __doc__.splitlines()[0], "command": command, "delta": args.delta,
             "alpha": args.alpha, "comparisons": args.comparisons, "tost_alpha": 0.05,
             "target": args.target, "hold": args.hold, "measured_folds": measured_folds,
             "grids": grids, "sigmas": sigmas, "decision": decision, "cost": cost,
             "jobs": args.jobs, "seeds": seeds}, indent=1) + "\n")


if __name__ == "__main__":
    from qknorm.errors import run_main  # here, not above: tests import this module without hydra

    run_main(main)
