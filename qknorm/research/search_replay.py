"""Replay searches for the best p on a committed grid's runs: what each finds, what it claims,
and what it spends.

    python -m qknorm.research.search_replay docs/results/paper_gpu/qknorm/results.csv \
        --curves docs/results/paper_gpu/qknorm/curves.csv --budgets 26667,80000 --seeds 20 \
        --out search_replay.json

Searches, each on the grid's p (a categorical over its points, as `norm.p=choice(...)` gives):
- `tpe`, `gp`: Optuna's samplers; a trial's value is its p's mean best_val_loss over every fold.
- `tpe_median_pruned`: each fold's value reported as a step; after a fold, MedianPruner stops a
  trial whose mean so far is above the median of the completed trials' means, and the trial
  costs the folds it ran.
- `smac3`: SMAC3's own intensifier (qknorm.research.smac_replay), where `smac` is installed.
- `race`: search=p_race's rules over every p (race_sims.race; no seed, one answer).
- `race_search_tpe`, `race_search_gp`: the racing search (hydra_racing_sweeper.race.intensify via
  race_sims.race_search), in-fold stopping included when --curves is given.
A trial that repeats a p already run costs nothing. Each is scored against the grid's own answer
(grid_runs.judge: the corrected t of the grid's fold layout, Holm over the comparisons with the
grid's best p, alpha 0.05): per sampler and budget the JSON gives, over seeds, how often its best
p is one the grid shows worse, how often it is the grid's best, how often every p it calls worse
is worse on the grid, how often every p it calls level is within δ of the grid's best on the grid,
how often it calls at least half of the grid's worse p worse, and the steps it spent.

`--continuous FILE`: instead, the racing search, plain TPE and SMAC3 in the presets' own
continuous space (1/p in [0, 1]) on the landscapes of FILE, with a committed grid's noise
(qknorm.research.continuous: the file's format, the runs, the scoring); OUT.json holds one entry
per seed and method, and each method's counts are printed:

    python -m qknorm.research.search_replay --continuous FILE --budgets 26667 --seeds 20 \
        --out OUT.json

This needs no training: the runs are deterministic (seed, fold and p fix them), so a search that
proposes p would have spent exactly these runs at the grid's commit.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections import Counter
from pathlib import Path

import optuna
import yaml
from hydra_racing_sweeper import step_margins
from hydra_racing_sweeper.multitest import for_folds
from hydra_racing_sweeper.race import Rules
from omegaconf import OmegaConf

from qknorm import jsonfile
from qknorm.config import CONF_DIR
from qknorm.research import continuous, grid_runs, race_sims

SEARCHES = {  # name -> (sampler, pruner); the presets' settings (conf/search/p_tpe.yaml)
    "tpe": (lambda seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials=6), None),
    "tpe_median_pruned": (lambda seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials=6),
                          lambda: optuna.pruners.MedianPruner(n_startup_trials=2,
                                                              n_warmup_steps=1)),
    "gp": (lambda seed: optuna.samplers.GPSampler(seed=seed), None),
}
MAX_TRIALS = 64  # a search that keeps repeating p it has run stops here (repeats cost nothing)
# The grid replays' racing searches (race_search_tpe, race_search_gp) as their JSONs were made:
# TPE with 6 start-up trials (search=p_tpe's sampler until issue 53), GP with Optuna's defaults;
# fixed here, so a rerun compares the two samplers as committed whatever the preset's is now.
GRID_SAMPLER = {"name": "tpe", "n_startup_trials": 6}


def search(grid: dict[float, list[dict]], name: str, seed: int, budget: float) -> dict:
    """One search: trials until `budget` steps are spent (checked before each trial)."""
    make_sampler, make_pruner = SEARCHES[name]
    study = optuna.create_study(sampler=make_sampler(seed),
                                pruner=make_pruner() if make_pruner else optuna.pruners.NopPruner())
    choices = sorted(grid)
    best_p = min(grid, key=lambda p: statistics.fmean(r["value"] for r in grid[p]))
    spent = {"steps": 0, "core_s": 0.0}
    ran: dict[float, tuple[float, bool]] = {}  # p -> (its mean over the folds it ran, pruned)
    found_at = None
    for _ in range(MAX_TRIALS):
        trial = study.ask({"norm.p": optuna.distributions.CategoricalDistribution(choices)})
        p = trial.params["norm.p"]
        if p in ran:  # a repeat: told its original's outcome, no runs
            value, pruned = ran[p]
            study.tell(trial, None if pruned else value,
                       state=optuna.trial.TrialState.PRUNED if pruned else None)
            continue
        if spent["steps"] >= budget:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # not run: out of budget
            break
        value, pruned = _run(trial, grid[p], spent)
        ran[p] = (value, pruned)
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, value)
            if p == best_p and found_at is None:
                found_at = spent["steps"]
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = min(done, key=lambda t: t.value).params["norm.p"] if done else None
    return {"best_p": best, "found_grid_best": best == best_p, "distinct_p": len(ran),
            "steps": spent["steps"], "core_s": spent["core_s"], "steps_to_grid_best": found_at}


def _run(trial: optuna.Trial, runs: list[dict], spent: dict) -> tuple[float, bool]:
    """The p's folds one after another, each reported as a step; (mean so far, pruned)."""
    values = []
    for fold, run in enumerate(runs):
        values.append(run["value"])
        spent["steps"] += run["steps"]
        spent["core_s"] += run["core_s"]
        trial.report(statistics.fmean(values), fold)
        if fold < len(runs) - 1 and trial.should_prune():
            return statistics.fmean(values), True
    return statistics.fmean(values), False


def preset(name: str) -> dict:
    """conf/search/NAME.yaml's hydra.sweeper keys: the replays race and search as the presets
    do (p_race's race; p_tpe's race and sampler)."""
    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "search" / f"{name}.yaml")
                                  ).get("hydra", {}).get("sweeper", {})


def _at_paper_cpu(race: dict) -> dict:
    """The preset's race with its rungs (fractions of train.max_iters) as {step: margin} for the
    committed grids' runs, paper_cpu's: {500: 0.1, 1000: 0.04} at 2000 steps, an eval every 250."""
    train = OmegaConf.load(CONF_DIR / "experiment" / "paper_cpu.yaml").train
    return {**race, "rungs": step_margins(race, train.max_iters, train.eval_interval)}


def settings(sets: list[str]) -> dict:
    """search=p_tpe's hydra.sweeper keys with --set KEY=VALUE (a YAML value) over them, e.g.
    race.explore=0.8: the racing search replayed under settings other than the preset's. Its
    rungs resolved as SEARCH's are; UserError names a key the preset lacks."""
    from omegaconf.errors import OmegaConfBaseException

    from qknorm.errors import UserError

    conf = OmegaConf.create(preset("p_tpe"))
    OmegaConf.set_struct(conf, True)  # a key the preset lacks is refused, not added
    for item in sets:
        key, eq, value = item.partition("=")
        try:
            if not eq:
                raise ValueError(item)
            OmegaConf.update(conf, key, yaml.safe_load(value), merge=False)
        except (OmegaConfBaseException, ValueError):
            raise UserError(f"--set {item}: give KEY=VALUE with KEY one of search=p_tpe's "
                            "hydra.sweeper keys, e.g. race.explore=0.8 or n_jobs=1") from None
    out = OmegaConf.to_container(conf)
    out["race"] = _at_paper_cpu(out["race"])
    return out


RACE, SEARCH = preset("p_race"), settings([])
RACE["race"] = _at_paper_cpu(RACE["race"])


def run_all(grid: dict, budget: float, seeds: int,
            search_min: int = SEARCH["race"]["min_replicates"],
            only: tuple[str, ...] = (), smac_seeds: int | None = None) -> dict[str, list[dict]]:
    """Every search's outcomes at one budget: {name: [outcome per seed]} (`only`: just those
    racing searches, by sampler, and the race: the two the racing engine runs)."""
    k, race = grid_runs.n_folds(grid), RACE["race"]
    rules = Rules(k, race["min_replicates"], race["alpha"], race["equivalence"], for_folds(k))
    search_race = SEARCH["race"]
    search_rules = Rules(k, search_min, search_race["alpha"], search_race["equivalence"],
                         for_folds(k))
    out: dict[str, list[dict]] = {}
    if not only:
        out = {name: [search(grid, name, s, budget) for s in range(seeds)] for name in SEARCHES}
        try:
            from qknorm.research.smac_replay import smac_search
            out["smac3"] = [smac_search(grid, s, budget)  # slow: ~8 s a search here
                            for s in range(seeds if smac_seeds is None else smac_seeds)]
        except ImportError:  # smac is not installed: the JSON says so
            out["smac3"] = []
    # the race is deterministic: one answer, as many times as seeds
    out["race"] = [race_sims.race(grid, budget, rules, race["rungs"], race["baseline"])] * seeds
    initial = _initial(search_race, grid)
    for s in only or ("tpe", "gp"):
        out[f"race_search_{s}"] = [race_sims.race_search(grid, s, seed, budget, search_rules,
                                                         search_race["rungs"], GRID_SAMPLER,
                                                         search_race["explore"], initial)
                                   for seed in range(seeds)]
    return out


def _initial(race: dict, grid: dict) -> tuple[float, ...]:
    """The preset's initial design (race.initial: values of norm.p, as written) as p, less the
    p the grid did not run, each dropped with one line on stderr, as the live sweeper drops a
    point its space cannot propose (a replay searches a choice of the grid's p)."""
    initial = [float(p) for p in race.get("initial") or ()]
    ran = ", ".join(f"{q:g}" for q in sorted(grid))
    for p in initial:
        if p not in grid:
            print(f"race.initial: p={p:g} is not a p of this grid ({ran}): dropped",
                  file=sys.stderr)
    return tuple(p for p in initial if p in grid)


def score(outcomes: list[dict], truth: grid_runs.GridAnswer, delta: float) -> dict:
    """Over seeds: how often the search's answer agrees with the grid's (counts of seeds)."""
    if not outcomes:
        return {"seeds": 0, "note": "not run: smac is not installed"}
    worse = [set(o.get("worse", ())) for o in outcomes]
    level = [set(o.get("level", ())) for o in outcomes]
    half = len(truth.worse) / 2
    return {"seeds": len(outcomes),
            "best_not_grid_worse": sum(o["best_p"] not in truth.worse for o in outcomes),
            "best_is_grid_best": sum(o["best_p"] == truth.best for o in outcomes),
            "best_p": dict(sorted(Counter(str(o["best_p"]) for o in outcomes).items())),
            "worse_all_grid_worse": sum(w <= truth.worse for w in worse),
            "level_all_within_delta": sum(all(truth.delta[p] <= delta for p in lv)
                                          for lv in level),
            "calls_half_of_grid_worse": sum(len(w & truth.worse) >= half for w in worse),
            "steps_median": statistics.median(o["steps"] for o in outcomes),
            "steps_max": max(o["steps"] for o in outcomes),
            "distinct_p_median": statistics.median(o["distinct_p"] for o in outcomes)}


def landscapes_main(path: Path, budgets: list[float], seeds: int, only: tuple[str, ...],
                    smac_seeds: int | None = None) -> dict:
    """Every search on every landscape of `path` (qknorm.research.landscapes), each scored
    against that landscape's own grid answer (grid_runs.judge)."""
    from qknorm.research import landscapes

    out: dict = {"landscapes": {}}
    for name, grid in landscapes.load_landscapes(path).items():
        truth = grid_runs.judge(grid, equivalence=RACE["race"]["equivalence"])
        scores: dict = {}
        for b in budgets:
            for search_name, outcomes in run_all(grid, b, seeds, only=only,
                                                 smac_seeds=smac_seeds).items():
                scores.setdefault(search_name, {})[str(int(b))] = score(
                    outcomes, truth, RACE["race"]["equivalence"])
        out["landscapes"][name] = {"best": truth.best, "worse": sorted(truth.worse),
                                   "searches": scores}
        print(name, file=sys.stderr, flush=True)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, nargs="?", default=None,
                    help="a grid's results.csv (every p on every fold)")
    ap.add_argument("--landscapes", type=Path, default=None,
                    help="instead of one grid, every landscape of this JSON "
                         "(python -m qknorm.research.landscapes writes it; its curves included)")
    ap.add_argument("--continuous", type=Path, default=None,
                    help="instead of a grid, the landscapes over 1/p in this JSON "
                         "(qknorm.research.continuous's format): racing, tpe and smac3 in the "
                         "presets' own continuous space; --out gets one entry per seed")
    ap.add_argument("--methods", default="racing,tpe,smac3",
                    help="with --continuous: which of racing,tpe,smac3 to run (default: all)")
    ap.add_argument("--curves", type=Path, default=None,
                    help="the same report's curves.csv: in-fold stopping for the race and the "
                         "racing search (without it, runs are only judged between folds)")
    ap.add_argument("--budgets", default="26667,80000",
                    help="training-step budgets, comma-separated (default: a third of "
                         "paper_cpu's 80,000, and all of it)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="with --continuous: seeds FIRST..FIRST+SEEDS-1 (default 0), e.g. 20 "
                         "for seeds the rules were not chosen on")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="with --continuous: the racing search under this search=p_tpe key "
                         "instead of the preset's, e.g. race.explore=0.8 (repeatable)")
    ap.add_argument("--names", default="",
                    help="with --continuous: only these landscapes of the file, comma-separated")
    ap.add_argument("--search-min-replicates", type=int,
                    default=SEARCH["race"]["min_replicates"],
                    help="the racing search's min_replicates (default: search=p_tpe's)")
    ap.add_argument("--only", default="", help="comma-separated samplers: only those racing "
                                               "searches (e.g. tpe) and the race, no plain "
                                               "search")
    ap.add_argument("--smac-seeds", type=int, default=None,
                    help="seeds for SMAC3 (default: --seeds); it takes ~8 s a search")
    ap.add_argument("--out", type=Path, default=None, help="JSON out (default: stdout)")
    ap.add_argument("--update", action="store_true",
                    help="with --continuous and --out: the methods run now replace theirs in "
                         "--out's JSON, the others are kept (so a rule change reruns racing "
                         "alone). With --only and --out: rerun the racing searches and the race into "
                         "--out's JSON, keeping its plain searches (they do not run the racing "
                         "engine); a racing search of another sampler there is dropped, since "
                         "it ran older rules")
    return ap


def updated(old: dict, new: dict) -> dict:
    """`old` (a JSON this module wrote) with the race and every racing search replaced by
    `new`'s: those `new` ran are taken, the others dropped (listed under "dropped"); new's
    command is added under "updated"."""
    def merge(old_searches: dict, new_searches: dict) -> dict:
        kept = {k: v for k, v in old_searches.items() if not _engine(k)}
        return {**kept, **new_searches}

    out = {**old, "updated": [*old.get("updated", []), new["command"]]}
    if "landscapes" in old:
        out["landscapes"] = {name: {**e, "searches": merge(e["searches"],
                                                           new["landscapes"][name]["searches"])}
                             for name, e in old["landscapes"].items()}
        searches = [e["searches"] for e in old["landscapes"].values()]
    else:
        out["searches"], searches = merge(old["searches"], new["searches"]), [old["searches"]]
    ran = {k for e in ([new["searches"]] if "searches" in new else
                       [e["searches"] for e in new["landscapes"].values()]) for k in e}
    out["dropped"] = sorted((set(old.get("dropped", []))  # an earlier update's too
                             | {k for e in searches for k in e if _engine(k)}) - ran)
    return out


def _engine(search: str) -> bool:
    """The race and the racing searches: what the racing engine runs."""
    return search == "race" or search.startswith("race_search_")


def _write(out: dict, path: Path | None, indent: int = 2) -> int:
    if path:
        jsonfile.write(path, out, indent)
    print(json.dumps(out, indent=indent, default=str))
    return 0



def _listed(command) -> list[str]:
    return [] if command is None else [command] if isinstance(command, str) else list(command)


def _continuous_inputs(args: argparse.Namespace, budgets: list[float]) -> tuple:
    """A --continuous run's methods, δ, landscapes (those --names, else all) and racing-search
    settings (--set over the preset); UserError naming what is wrong."""
    from qknorm.errors import UserError

    methods = tuple(m for m in args.methods.split(",") if m)
    if len(budgets) != 1 or not set(methods) <= set(continuous.METHODS) or not methods:
        raise UserError(f"--continuous takes one budget (got --budgets={args.budgets}) and "
                        f"--methods from {','.join(continuous.METHODS)} (got {args.methods!r})")
    delta, shapes = continuous.read(args.continuous)
    names = [n for n in args.names.split(",") if n]
    unknown = sorted(set(names) - {s.name for s in shapes})
    if unknown:
        raise UserError(f"--names={args.names}: {', '.join(unknown)} not in {args.continuous}; "
                        f"pick from {', '.join(s.name for s in shapes)}")
    return (methods, delta, [s for s in shapes if not names or s.name in names],
            settings(args.set))


def continuous_main(args: argparse.Namespace, budgets: list[float], command: str,
                    cli: bool = False) -> int:
    """--continuous: every method on every landscape of the file (or those --names), seeds
    --first-seed onwards, at the budget (one: OUT.json has no budget key); OUT.json as
    qknorm.research.continuous says, and each method's counts printed."""
    from qknorm.errors import UserError

    try:
        methods, delta, shapes, search = _continuous_inputs(args, budgets)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if cli and "smac3" in methods and os.environ.get("PYTHONHASHSEED") != "0":
        # SMAC3 2.4's answer depends on Python's str hash (its instances are str keys whose
        # order it iterates): the same seed gave three answers in three processes. Pinned
        # here, so the command alone reproduces OUT.json.
        os.execve(sys.executable, [sys.executable, "-m", "qknorm.research.search_replay",
                                   *sys.argv[1:]], {**os.environ, "PYTHONHASHSEED": "0"})
    budget, plain = budgets[0], preset("p_tpe_plain")
    race = search["race"]
    rules = Rules(5, race["min_replicates"], race["alpha"], race["equivalence"], for_folds(5))
    old = (jsonfile.read(args.out) if args.update and args.out is not None
           and args.out.is_file() else {"landscapes": {}})
    out: dict = {"command": command, "delta": delta, "landscapes": {}}
    if args.update:  # the earlier commands, then this one; landscapes not run now are kept
        out["command"] = [*_listed(old.get("command")), command]
        out["landscapes"] = dict(old["landscapes"])
    for shape in shapes:
        noise = continuous.noise(shape.noise)
        lands = [continuous.Landscape(shape, noise, s)
                 for s in range(args.first_seed, args.first_seed + args.seeds)]
        runs = {"racing": lambda land: continuous.racing(land, budget, search, rules,
                                                         race["rungs"]),
                "tpe": lambda land: continuous.plain_tpe(land, budget, plain),
                "smac3": lambda land: continuous.smac(land, budget)}
        entries = {m: [continuous.entry(land.seed, runs[m](land)) for land in lands]
                   for m in methods}
        kept = old["landscapes"].get(shape.name, {})  # --update: the methods not run now
        out["landscapes"][shape.name] = {m: entries[m] if m in entries else kept[m]
                                         for m in continuous.METHODS if m in entries or m in kept}
        for m in methods:
            c = continuous.counts(shape, delta, entries[m])
            print(f"{shape.name:24s} {m:7s} " + " ".join(f"{k}={v:g}" for k, v in c.items()),
                  file=sys.stderr, flush=True)
        if args.out:  # as it goes: a long run can be read before it ends
            jsonfile.write(args.out, out)
    if not args.out:
        print(json.dumps(out, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command = "python -m qknorm.research.search_replay " + " ".join(argv or sys.argv[1:])
    try:
        budgets = [float(b) for b in args.budgets.split(",")]
    except ValueError:
        print(f"error: --budgets={args.budgets} must be numbers, e.g. 26667,80000",
              file=sys.stderr)
        return 2
    if args.seeds < 1 or any(not (b > 0 and math.isfinite(b)) for b in budgets):
        print(f"error: --seeds={args.seeds} and --budgets={args.budgets} must be > 0",
              file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    only = tuple(x for x in args.only.split(",") if x)
    if args.continuous is not None:
        return continuous_main(args, budgets, command, cli=argv is None)
    if args.set or args.names or args.first_seed:
        print(f"error: --set, --names and --first-seed (got {args.set or args.names or args.first_seed!r}) "
              "go with --continuous FILE; a grid's replay takes --search-min-replicates",
              file=sys.stderr)
        return 2
    if args.update and not (only and args.out is not None and args.out.is_file()):
        print(f"error: --update reruns racing searches into an existing --out JSON; give "
              f"--only (e.g. tpe) and --out FILE that exists (got --only={args.only!r}, "
              f"--out={args.out})", file=sys.stderr)
        return 2
    old = jsonfile.read(args.out) if args.update else None
    if args.landscapes is not None or args.results is None:
        if args.landscapes is None:
            print("error: give a grid's results.csv or --landscapes JSON", file=sys.stderr)
            return 2
        out = {"command": command,
               **landscapes_main(args.landscapes, budgets, args.seeds, only, args.smac_seeds)}
        return _write(out if old is None else updated(old, out), args.out, indent=1)
    grid = grid_runs.load(args.results, args.curves)
    truth = grid_runs.judge(grid, equivalence=RACE["race"]["equivalence"])
    runs = [r for rs in grid.values() for r in rs]
    out = {"command": command,
           "grid": {"p": sorted(grid), "runs": len(runs), "steps": sum(r["steps"] for r in runs),
                    "core_s": sum(r["core_s"] for r in runs), "curves": args.curves is not None,
                    "best": truth.best, "worse": sorted(truth.worse),
                    "delta": {str(p): d for p, d in sorted(truth.delta.items())}},
           "settings": {"min_blocks": RACE["race"]["min_replicates"],
                        "alpha": RACE["race"]["alpha"],
                        "equivalence": RACE["race"]["equivalence"],
                        "rungs": RACE["race"]["rungs"], "baseline": RACE["race"]["baseline"],
                        "search_min_blocks": args.search_min_replicates,
                        "sampler": "TPE n_startup_trials=6 / GP, Optuna defaults"},
           "searches": {}}
    for b in budgets:
        for name, outcomes in run_all(grid, b, args.seeds, args.search_min_replicates,
                                      only).items():
            out["searches"].setdefault(name, {})[str(int(b))] = score(
                outcomes, truth, RACE["race"]["equivalence"])
    return _write(out if old is None else updated(old, out), args.out)


if __name__ == "__main__":
    sys.exit(main())
