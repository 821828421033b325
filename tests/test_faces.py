"""The layout's rules (docs/design.md, "Layout"), checked on the source by reading it, over both
trees: qknorm's (qknorm/, scripts/, hydra_plugins/) and the racing sweeper's own distribution
(plugins/hydra_racing_sweeper/: hydra_racing_sweeper/, hydra_plugins/). Each wing is used through
its face; qknorm, its scripts and tests reach the plugin only through its face
(hydra_racing_sweeper/__init__.py's __all__) and the race only through race/__init__.py's; a
module a face lists is used only for its own public names, and the race's modules only for
names the race's face lists; the plugin imports nothing of qknorm (nor torch); no underscored
module of ours is used across packages, the run does not import the sweeper, no docstring or
comment names a module that is not there, every module stands on a layer (LAYERS), no import
runs up a layer nor closes a circle (lazy and type-only imports counted), no function over 60
lines nor class over 250, and no test file imports another (tests/helpers/ holds what they
share). `python -m pytest tests/test_faces.py` runs them; `make test` (CI) with the rest.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

from tests.helpers import REPO

PLUGIN = REPO / "plugins" / "hydra_racing_sweeper"  # the sweeper's distribution
# (root, top-level folder): every module of ours, named from its root.
TREES = ((REPO, "qknorm"), (REPO, "scripts"), (REPO, "hydra_plugins"),
         (PLUGIN, "hydra_racing_sweeper"), (PLUGIN, "hydra_plugins"))
TOPS = ("qknorm", "scripts", "hydra_plugins", "hydra_racing_sweeper")
SWEEPER = "hydra_racing_sweeper"
# The plugin's Hydra module: Hydra finds it by the namespace package hydra_plugins.
SWEEPER_HYDRA = "hydra_plugins.hydra_racing_sweeper"
# The wings: packages whose __init__ names (__all__) what the rest may use.
WINGS = ("sweep", "report", "tracking", "bench", "research")
# The run: training needs none of the sweeper (a run is trained the same with or without it).
RUN = ("qknorm/train.py", "qknorm/pace.py", "qknorm/model.py", "qknorm/nn.py", "qknorm/norms.py",
       "qknorm/data.py", "qknorm/tokenizer.py", "qknorm/arch.py", "qknorm/angpt.py")
# tests/ may import the plugin's modules past its face: they test the plugin's internals (the
# study's attrs, the schedules, the specs), which move to plugins/hydra_racing_sweeper/tests/.
TESTS_MAY_REACH_PAST_THE_PLUGINS_FACE = True
# Past the plugin's face, what qknorm may import by path: its config schema, which Hydra's
# ConfigStore knows as hydra/sweeper=racing and qknorm_optuna extends (as Hydra's own sweepers'
# schemas are extended).
PAST_THE_FACE = {f"{SWEEPER_HYDRA}.config": "RacingSweeperConf"}


def source_files() -> list[Path]:
    return sorted(p for root, top in TREES for p in (root / top).rglob("*.py"))


def root_of(path: Path) -> Path:
    return PLUGIN if path.is_relative_to(PLUGIN) else REPO


def module_name(path: Path) -> str:
    parts = list(path.relative_to(root_of(path)).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str:
    """The package a file belongs to: its directory, dotted (scripts for scripts/)."""
    return ".".join(path.relative_to(root_of(path)).parent.parts)


def in_plugin(path: Path) -> bool:
    return path.is_relative_to(PLUGIN)


def imports(path: Path) -> list[tuple[str, str | None, int]]:
    """(module, name or None, line) for every import in the file, functions' included; a
    relative import resolved against the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package_of(path).split(".")
                base = ".".join([*pkg[: len(pkg) - node.level + 1], *([base] if base else [])])
            out += [(base, a.name, node.lineno) for a in node.names]
    return out


def is_module(dotted: str) -> bool:
    for root in (REPO, PLUGIN):
        base = root.joinpath(*dotted.split("."))
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def target_of(module: str, name: str | None) -> str:
    """What an import uses: the module it names (`from a import b`, b a module: a.b)."""
    return f"{module}.{name}" if name and is_module(f"{module}.{name}") else module


def face(wing: str) -> set[str]:
    return set(importlib.import_module(f"qknorm.{wing}").__all__)


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("wing", WINGS)
def test_every_wing_names_its_face(wing):
    package = importlib.import_module(f"qknorm.{wing}")
    assert isinstance(getattr(package, "__all__", None), list) and package.__all__, \
        f"qknorm/{wing}/__init__.py has no __all__: name what other packages may use"
    for name in package.__all__:  # every name the face promises is there
        assert is_module(f"qknorm.{wing}.{name}") or hasattr(package, name), (wing, name)


def test_no_import_reaches_past_a_wings_face():
    """From outside qknorm/<wing>/: `from qknorm.<wing> import X` with X in its __all__, or a
    module of the wing the face names (`from qknorm.<wing>.<module> import ...`); nothing else."""
    faces = {w: face(w) for w in WINGS}
    bad = []
    for path in source_files():
        inside = module_name(path)
        for module, name, line in imports(path):
            parts = module.split(".")
            if parts[0] != "qknorm" or len(parts) < 2 or parts[1] not in WINGS:
                continue
            wing = parts[1]
            if within(inside, f"qknorm.{wing}"):
                continue
            used = name if len(parts) == 2 else parts[2]
            if used is None or used not in faces[wing]:
                bad.append(f"{where(path, line)}: {module}{'.' + name if name else ''} is not "
                           f"in qknorm/{wing}/__init__.py's __all__")
    assert not bad, "imports past a face:\n" + "\n".join(bad)


def test_no_underscored_module_of_ours_is_used_from_another_package():
    bad = []
    for path in source_files():
        here = package_of(path)
        for module, name, line in imports(path):
            target = target_of(module, name)
            if here == "scripts" and not is_module(target) and is_module(f"scripts.{target}"):
                target = f"scripts.{target}"  # scripts/ is on sys.path when a script runs
            parts = target.split(".")
            if parts[0] not in TOPS:
                continue
            private = [i for i, part in enumerate(parts) if part.startswith("_")]
            if private and ".".join(parts[: private[0]]) != here:
                bad.append(f"{where(path, line)}: {target}")
    assert not bad, "underscored modules used across packages:\n" + "\n".join(bad)


def test_the_run_does_not_import_the_sweeper():
    bad = []
    for rel in RUN:
        path = REPO / rel
        for module, name, line in imports(path):
            if within(target_of(module, name), SWEEPER):
                bad.append(f"{where(path, line)}: {target_of(module, name)}")
    assert not bad, "the run imports the sweeper:\n" + "\n".join(bad)


def test_the_plugin_imports_nothing_of_qknorm_nor_torch():
    """The sweeper is its own distribution (no torch, no qknorm): what only qknorm knows reaches
    it through its task hook (qknorm/sweep/hook.py), never an import."""
    bad = [f"{where(path, line)}: {module}" for path in source_files() if in_plugin(path)
           for module, _, line in imports(path)
           if module.split(".")[0] in ("qknorm", "scripts", "torch")
           or within(module, "hydra_plugins.qknorm_sweeper")]
    assert not bad, "the plugin imports its client:\n" + "\n".join(bad)


def sweeper_face() -> tuple[set[str], set[str]]:
    """The plugin's face: the names its __all__ lists, and of them the modules it offers whole."""
    offered = set(importlib.import_module(SWEEPER).__all__)
    return offered, {n for n in offered if is_module(f"{SWEEPER}.{n}")}


def _past_the_sweepers_face(module: str, name: str | None, offered: set[str],
                            modules: set[str]) -> bool:
    if within(module, SWEEPER_HYDRA):
        return PAST_THE_FACE.get(module) != name
    if not within(module, SWEEPER):
        return False
    parts = module.split(".")
    if len(parts) == 1:  # from hydra_racing_sweeper import X; import hydra_racing_sweeper
        return name is not None and name not in offered
    if parts[1] not in modules:  # a module the face does not list
        return True
    if len(parts) == 2:  # from hydra_racing_sweeper.<module> import X: one of its public names
        return name is not None and not _offers(module, name)
    return parts[1] != "race"  # the race's rooms are the race face's test's (below)


def _offers(module: str, name: str) -> bool:
    """A module offers a name: in its __all__ if it has one, else any public name of it."""
    mod = importlib.import_module(module)
    return (name in mod.__all__ if hasattr(mod, "__all__")
            else not name.startswith("_") and hasattr(mod, name))


def test_qknorm_uses_the_sweeper_through_its_face():
    """From qknorm/, scripts/, qknorm's hydra_plugins/ (and tests/, but for their allowance):
    `from hydra_racing_sweeper import X` with X in its __all__, or a public name of a module it
    lists whole (`from hydra_racing_sweeper.multitest import holm`); of the plugin's Hydra module,
    PAST_THE_FACE only."""
    offered, modules = sweeper_face()
    files = [p for p in source_files() if not in_plugin(p)]
    if not TESTS_MAY_REACH_PAST_THE_PLUGINS_FACE:
        files += sorted((REPO / "tests").rglob("*.py"))
    bad = [f"{where(path, line)}: {module}{'.' + name if name else ''}"
           for path in files for module, name, line in imports(path)
           if _past_the_sweepers_face(module, name, offered, modules)]
    assert not bad, "imports past hydra_racing_sweeper/__init__.py's __all__:\n" + "\n".join(bad)


def namespace_uses(path: Path) -> list[tuple[str, str, int]]:
    """(module, attribute, line): each `m.x` where m names a module of ours the file imported
    (`from a import m`, `import a.m as m`), and x is a name in that module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if is_module(f"{node.module}.{a.name}"):
                    bound[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and is_module(a.name):
                    bound[a.asname] = a.name
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in bound and within(bound[node.value.id], SWEEPER)):
            module = bound[node.value.id]
            if hasattr(importlib.import_module(module), node.attr):  # not a local of that name
                out.append((module, node.attr, node.lineno))
    return out


def test_the_sweepers_modules_are_used_for_what_they_offer():
    """A module of the plugin used as a namespace (`readback.answer_rows`, `multitest.holm`,
    `driver.race_turn`) from outside it: only for a name it offers, and a module of the race
    only for a name the race's face lists (its __all__: one idea, one name)."""
    race = set(importlib.import_module(RACE).__all__)
    bad = []
    for path in [*source_files(), *sorted((REPO / "tests").rglob("*.py"))]:
        here = module_name(path)
        for module, attr, line in namespace_uses(path):
            if within(here, module) or (within(module, RACE) and within(here, RACE)):
                continue
            if within(module, RACE) and module != RACE:
                ok = attr in race
            else:
                ok = _offers(module, attr) or _tests_may_reach(path)
            if not ok:
                bad.append(f"{where(path, line)}: {module}.{attr}")
    assert not bad, "names used past a face through a module:\n" + "\n".join(bad)


def _tests_may_reach(path: Path) -> bool:
    return TESTS_MAY_REACH_PAST_THE_PLUGINS_FACE and path.is_relative_to(REPO / "tests")


# A dotted module of ours, or a path to one, written in a docstring or comment (a path of the
# plugin's, hydra_racing_sweeper/cost.py, resolves under plugins/hydra_racing_sweeper/).
NAMED = re.compile(r"(?<![\w.])(?:qknorm|hydra_racing_sweeper)(?:\.[a-z_][a-z0-9_]*)+"
                   r"|(?<![\w/.])(?:qknorm|hydra_racing_sweeper)(?:/[a-z_][a-z0-9_]*)+\.py\b")
NOT_MODULES = {"qknorm.key", "qknorm.level"}  # MLflow tag names (qknorm/tracking/mlflow.py)


def test_docstrings_and_comments_name_modules_that_exist():
    """`hydra_racing_sweeper.job`, `qknorm/report/results.py`, `qknorm.report.stats.paired_test`: the
    longest prefix that is a module must be one, and what follows it a name in it."""
    bad = []
    for path in source_files():
        text = path.read_text()
        for m in NAMED.finditer(text):
            named = m.group(0)
            if named in NOT_MODULES:
                continue
            if named.endswith(".py"):
                ok = (REPO / named).is_file() or (PLUGIN / named).is_file()
            else:
                parts = named.split(".")
                k = max((i for i in range(1, len(parts) + 1) if is_module(".".join(parts[:i]))),
                        default=0)
                ok = k >= len(parts) - 1 and (k == len(parts) or _has_name(parts[:k], parts[k]))
            if not ok:
                bad.append(f"{where(path, text.count(chr(10), 0, m.start()) + 1)}: {named}")
    assert not bad, "names of modules that are not there:\n" + "\n".join(bad)


def _has_name(module: list[str], name: str) -> bool:
    return hasattr(importlib.import_module(".".join(module)), name)


# The layers, lowest first: a module imports from its own layer or from one below, never from
# one above. A package named here is one room, all its files on that layer; every module of
# both trees must be on one. The plugin's own (PLUGIN_LAYERS) lie below all of qknorm's: the
# sweeper is a library its client stands on, and imports nothing of it.
H = SWEEPER
PLUGIN_LAYERS = [
    (f"{H}.errors", f"{H}.units", f"{H}.decision", f"{H}.multitest", f"{H}.identity",
     f"{H}.space"),  # the ground floor: plain Python, no Optuna
    (f"{H}.race",),  # the race's pure rules: no Optuna, nothing of the plugin but the floor
    (f"{H}.rundir", f"{H}.study", f"{H}.cost", f"{H}.task", f"{H}.slurm", f"{H}.specs",
     f"{H}.records", f"{H}.raceplan", f"{H}.question"),  # the study's record, specs, run dirs
    (f"{H}.readback", f"{H}.outputs", f"{H}.job", f"{H}.trial"),  # read back; the job side
    (f"{H}.plan", f"{H}.launcher", f"{H}.progress"),
    (f"{H}.schedule", f"{H}.racing"),
    (f"{H}.race_schedule", f"{H}.search_schedule"),
    (f"{H}.sweep",),
    (H, SWEEPER_HYDRA),  # the face (its names load lazily) and the Hydra plugin module on top
]
LAYERS = [
    *PLUGIN_LAYERS,
    ("qknorm.errors", "qknorm.nn", "qknorm.hooks", "qknorm.ticker", "qknorm.jsonfile"),
    ("qknorm.config",),
    ("qknorm.effective", "qknorm.rundir", "qknorm.norms", "qknorm.tokenizer", "qknorm.data"),
    ("qknorm.model", "qknorm.angpt", "qknorm.arch", "qknorm.diagnostics", "qknorm.tracking",
     "qknorm.memory", "qknorm.overrides"),
    ("qknorm.train", "qknorm.sample", "qknorm.pace"),  # the run
    ("qknorm.sweep",),
    ("qknorm.report", "qknorm.status", "qknorm.cli", "hydra_plugins.qknorm_sweeper"),
    ("qknorm.bench",),
    ("qknorm.research",),
    ("qknorm.claims", "scripts", "qknorm"),  # qknorm: the package's own __init__
]
# Imports that run up a layer today, each with the change that takes it away. An entry whose
# import is gone fails too: strike it.
KNOWN_UP: dict[tuple[str, str], str] = {}
ROOMS_OF_ONE_MODULE = ("qknorm", H)  # a name here is its __init__ only, not the package


def layer_of(module: str) -> int | None:
    """The layer that names the module, or a package above it (qknorm and hydra_racing_sweeper
    name only their __init__)."""
    found = [(len(prefix), i) for i, layer in enumerate(LAYERS) for prefix in layer
             if module == prefix or prefix not in ROOMS_OF_ONE_MODULE
             and module.startswith(prefix + ".")]
    return max(found)[1] if found else None


@functools.cache
def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module of ours it imports: the first line}, every import counted: at the top,
    inside a function (made when it runs) and under TYPE_CHECKING alike. A lazy or type-only
    import is still a dependency: a loop of them is a circle a reader has to untangle."""
    graph: dict[str, dict[str, int]] = {}
    for path in source_files():
        here, deps = module_name(path), {}
        for module, name, line in imports(path):
            if package_of(path) == "scripts" and not is_module(module) and is_module(f"scripts.{module}"):
                module = f"scripts.{module}"  # scripts/ is on sys.path when a script runs
            if module.split(".")[0] not in TOPS:
                continue
            target = target_of(module, name)
            if target != here:
                deps.setdefault(target, line)
        graph[here] = deps
    return graph


def test_every_module_stands_on_a_layer():
    unplaced = [m for m in import_graph() if layer_of(m) is None]
    assert not unplaced, f"modules on no layer: {unplaced}; add each to LAYERS in this file"


def test_no_import_runs_up_a_layer():
    graph, up = import_graph(), []
    for here, deps in graph.items():
        for there, line in deps.items():
            low, high = layer_of(here), layer_of(there)  # None: on no layer, said above
            if low is not None and high is not None and high > low:
                up.append((here, there, line))
    bad = [f"{h} (layer {layer_of(h)}) line {n} imports {t} (layer {layer_of(t)})"
           for h, t, n in up if (h, t) not in KNOWN_UP]
    assert not bad, "imports that run up a layer:\n" + "\n".join(bad)
    stale = set(KNOWN_UP) - {(h, t) for h, t, _ in up}
    assert not stale, f"KNOWN_UP names imports that no longer run up: {sorted(stale)}; strike them"


RACE = f"{SWEEPER}.race"
# What the race may import of the plugin outside race/: its ground floor (plain Python).
RACE_FLOOR = (f"{H}.errors", f"{H}.decision", f"{H}.multitest")


def test_the_race_imports_nothing_of_the_plugin_outside_it():
    """hydra_racing_sweeper/race/ is the race's pure rules: no Optuna, and nothing of the plugin
    but its own modules and the ground floor (RACE_FLOOR); the schedules that adapt it to a study
    import it, never the reverse."""
    bad = []
    for path in sorted((PLUGIN / SWEEPER / "race").rglob("*.py")):
        for module, name, line in imports(path):
            target = target_of(module, name)
            if module.split(".")[0] == "optuna" or (
                    within(target, SWEEPER) and not within(target, RACE)
                    and not any(within(target, floor) for floor in RACE_FLOOR)):
                bad.append(f"{where(path, line)}: {target}")
    assert not bad, "the race imports outside its layer:\n" + "\n".join(bad)


def test_the_race_is_used_through_its_face():
    """From outside hydra_racing_sweeper/race/ (the plugin's other modules, qknorm, scripts and
    tests): `from hydra_racing_sweeper.race import X` with X in its __all__ (a name, or one of
    the modules it names as a namespace), as Optuna's users write `optuna.pruners.MedianPruner`;
    no module of it imported by path."""
    offered = set(importlib.import_module(RACE).__all__)
    bad = []
    for path in [*source_files(), *sorted((REPO / "tests").rglob("*.py"))]:
        if within(module_name(path), RACE) and in_plugin(path):
            continue
        for module, name, line in imports(path):
            if module == RACE and name in offered:
                continue
            if within(module, RACE):
                bad.append(f"{where(path, line)}: {module}{'.' + name if name else ''}")
    assert not bad, "imports past hydra_racing_sweeper/race/__init__.py:\n" + "\n".join(bad)


def test_no_import_circle():
    """No loop of imports between modules of ours, lazy and type-only imports included."""
    graph = import_graph()
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            loop = path[path.index(node):] + [node]
            raise AssertionError("import circle: " + " -> ".join(
                f"{a} (line {graph[a][b]})" for a, b in zip(loop, loop[1:])) + f" -> {node}")
        if node in done or node not in graph:
            return
        for dep in sorted(graph[node]):
            visit(dep, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])


# Lines, decorators and docstring included. A module has no limit: it is split by concern, not
# by a count (a count moved tracking's missing_package out of config.py and made an import circle).
MAX_FUNCTION, MAX_CLASS = 60, 250


def test_no_function_over_60_lines_nor_class_over_250():
    bad = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text())):
            limit = (MAX_CLASS if isinstance(node, ast.ClassDef) else MAX_FUNCTION
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None)
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                bad.append(f"{where(path, node.lineno)}: {node.name}, "
                           f"{node.end_lineno - node.lineno + 1} lines (at most {limit})")
    assert not bad, "too long:\n" + "\n".join(bad)


def test_test_modules_share_code_through_helpers_only():
    """Nothing under tests/ imports a test module (tests/test_*.py) or conftest.py, at the top
    or inside a function: shared code lives in tests/helpers/, fixtures come by name from
    conftest.py. Importing a test module runs it a second time under another name (its
    module-level setup, its imports) and ties one test file's layout to another's."""
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for module, name, line in imports(path):
            parts = [*module.split("."), *([name] if name else [])]
            if parts[0] == "tests" and any(p.startswith("test_") or p == "conftest"
                                           for p in parts[1:]):
                offenders.append(f"{where(path, line)} imports {'.'.join(parts)}")
    assert not offenders, "move what they share into tests/helpers/:\n" + "\n".join(offenders)
