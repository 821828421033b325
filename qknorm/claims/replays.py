"""Records over the committed JSONs of the research replays and simulations, so the tables of
docs/search_results.md and docs/race.md are recomputed from the files they print, by the
functions that print them (qknorm.research.replay_table; its `--record ID` writes a block's
template):

  replay      a grid or landscapes replay (`file`, at `budget`): per grid or landscape (row
              NAME) its answer, best and n_worse; per search (row NAME/SEARCH) its counts over
              seeds: seeds, best_not_grid_worse, best_is_grid_best, worse_all_grid_worse,
              level_all_within_delta, steps_median, distinct_p_median
  continuous  search_replay --continuous's OUT.json (`file`) over its landscapes (`landscapes`):
              per landscape and method (row LANDSCAPE/METHOD) seeds, best_within_delta,
              best_within_half, worse_true, level_within_delta, steps_median, steps_max
  candidate   a racing-search candidate's continuous replays (`files`, over `landscapes`), summed
              over every landscape (row all): best within δ and δ/2, and the landscapes short of
              issue 53's bar against SMAC3's entries (`smac3`; null for a noise SMAC3 did not run)
  error_rates race_level_error_rates' JSON (`file`): per cell (row K/ρ/k/WORLD/δσ, ρ to two
              decimals, δσ `off` or its value) each rate of each test, TEST_RATE (paired_any_worse,
              corrected_mean_blocks_run: the rate's name with underscores)
  power       fold_power's JSON (`file`, the σ of label `sigma`): per grid (row grid/NAME) the
              spread of its per-fold Δ, near_median/min/max and all_median/min/max; per K (row
              K) that σ's row of power and sizes and each grid's hours (`cost`); row
              decision: σ, δ/σ, the smallest K, with Holm's worst case, a run's seconds; per
              σ (row sigma/GRID/WHICH, its label: sigma/qknorm/near-p_max) its smallest K; per
              seeds (row seeds/KxM) the power at m seeds

A replay is the run these records read: rerunning one (its command is in the JSON) and
committing it is what changes their numbers, as a sweep's results.csv does for the others.
"""

from __future__ import annotations

from qknorm.claims.inputs import Rows, Runs, setting
from qknorm.claims.records import Record
from qknorm.errors import UserError
from qknorm.research import replay_table


def grid(record: Record, runs: Runs) -> Rows:
    return replay_table.grid_rows(runs.file(record, "a replay's JSON"),
                                  str(setting(record, "budget")))


def continuous(record: Record, runs: Runs) -> Rows:
    return replay_table.continuous_rows(runs.file(record, "a replay's JSON"),
                                        runs.book.results / str(setting(record, "landscapes")))


def candidate(record: Record, runs: Runs) -> Rows:
    """A racing-search candidate's continuous replays (`files`, one per landscapes file of
    `landscapes`, in order) summed over every landscape (row all): seeds, landscapes, best
    within δ and δ/2, and the landscapes short of issue 53's bar (continuous.short_of_bar)
    against SMAC3's entries in `smac3` (replay JSONs over the same seeds; null where SMAC3 was not
    run for that landscapes file: its landscapes are held to the within-δ and call counts), q/
    and c/ for the qknorm and calibrated noise, none (printed "-": a string "-" would never agree
    with a record's "-", which reads as missing), and the noises of those landscapes."""
    from qknorm.research import continuous as c

    files, lands = setting(record, "files"), setting(record, "landscapes")
    smac_files = setting(record, "smac3", [])
    lists = all(isinstance(x, list) for x in (files, lands, smac_files))
    if not lists or len(files) != len(lands) or len(smac_files) not in (0, len(lands)):
        raise UserError(f"record {record.id}: files, landscapes (and smac3) are lists of one "
                        "file each, in the same order")

    def counts(names: list, method: str) -> dict[str, dict]:  # landscape -> method's counts
        out: dict[str, dict] = {}
        for name, land in zip(names, lands if names else [], strict=True):
            if name is None:  # SMAC3 not run on this file's landscapes
                continue
            rows = replay_table.continuous_rows(runs.file(record, "a replay's JSON", name),
                                                runs.book.results / land)
            out |= {k.removesuffix(f"/{method}"): v for k, v in rows.items()
                    if k.endswith(f"/{method}")}
        return out

    racing, smac3 = counts(files, "racing"), counts(smac_files, "smac3")
    short = c.short_of_bar(racing, smac3)
    return {"all": {"seeds": max(v["seeds"] for v in racing.values()),
                    "landscapes": len(racing),
                    "best_within_delta": sum(v["best_within_delta"] for v in racing.values()),
                    "best_within_half": sum(v["best_within_half"] for v in racing.values()),
                    "short": ", ".join(n.replace("qknorm/", "q/").replace("calibrated/", "c/")
                                       for n in short) or None,
                    "short_noises": ", ".join(sorted({n.split("/")[0] for n in short})) or None}}


def error_rates(record: Record, runs: Runs) -> Rows:
    rows: Rows = {}
    for r in runs.file(record, "race_level_error_rates' JSON")["rows"]:
        d = "off" if r["delta/sigma"] is None else f"{r['delta/sigma']:g}"
        cell = rows.setdefault(f"{r['folds']}/{r['rho']:.2f}/{r['k']}/{r['world']}/{d}", {})
        cell.update({f"{r['test']}_{name.replace(' ', '_')}": value for name, value in r.items()
                     if isinstance(value, float) and name not in ("rho", "delta/sigma")})
    return rows


def power(record: Record, runs: Runs) -> Rows:
    data = runs.file(record, "fold_power's JSON")
    label = str(setting(record, "sigma"))
    chosen = [s for s in data["sigmas"] if s["label"] == label]
    if not chosen:
        raise UserError(f"record {record.id}: no σ labelled {label!r} in {setting(record, 'file')}"
                        f" (it has {', '.join(s['label'] for s in data['sigmas'])})")
    rows: Rows = {f"grid/{g['name']}": {f"{part}_{k}": g[part][k] for part in ("near", "all")
                                        for k in ("median", "min", "max")} for g in data["grids"]}
    hours = {c["K"]: c for c in data["cost"]}
    for r in chosen[0]["rows"]:
        rows[str(r["K"])] = {k: v for k, v in r.items() if k != "K"} | {
            "runs": hours[r["K"]]["runs"], "hours": hours[r["K"]]["qknorm"],
            "hours_calibrated": hours[r["K"]]["calibrated"]}
    first = data["cost"][0]  # hours = a run's seconds × runs / jobs / 3600
    rows["decision"] = {k: v for k, v in data["decision"].items() if k != "sigma_label"} | {
        "delta_over_sigma": data["delta"] / data["decision"]["sigma"],
        "run_s": first["qknorm"] * 3600 * data["jobs"] / first["runs"]}
    for s in data["sigmas"]:
        slug = s["label"].replace(", ", "/").replace(" ", "_")  # a row names no space
        rows[f"sigma/{slug}"] = {"sigma": s["sigma"]} | {
            f"K_{k}": "-" if v is None else v for k, v in s["smallest_K"].items()}
    for r in data["seeds"]["rows"]:
        rows[f"seeds/{r['K']}x{r['seeds']}"] = {k: v for k, v in r.items()
                                                 if k not in ("K", "seeds")}
    return rows
