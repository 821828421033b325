"""The layout's rules (docs/design.md, "Layout"), checked on the source by reading it: each wing
is used through its face, no underscored module of ours is used across packages, the run does
not import the sweep wing, no docstring or comment names a module that is not there, every
module stands on a layer (LAYERS), no import runs up a layer nor closes a circle (lazy and
type-only imports counted), no function over 60 lines nor class over 250, and no test file
imports another (tests/helpers/ holds what they share).
`python -m pytest tests/test_faces.py` runs them; `make test` (CI) runs them with the rest.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

from tests.helpers import REPO

SOURCES = ("qknorm", "scripts", "hydra_plugins")
# The wings: packages whose __init__ names (__all__) what the rest may use.
WINGS = ("sweep", "report", "tracking", "bench", "research")
# The run: training needs none of the sweep wing (a run is trained the same with or without it).
RUN = ("qknorm/train.py", "qknorm/pace.py", "qknorm/model.py", "qknorm/nn.py", "qknorm/norms.py",
       "qknorm/data.py", "qknorm/tokenizer.py", "qknorm/arch.py", "qknorm/angpt.py")


def source_files() -> list[Path]:
    return sorted(p for top in SOURCES for p in (REPO / top).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str:
    """The package a file belongs to: its directory, dotted (scripts for scripts/)."""
    return ".".join(path.relative_to(REPO).parent.parts)


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
    base = REPO.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def face(wing: str) -> set[str]:
    return set(importlib.import_module(f"qknorm.{wing}").__all__)


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


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
            if inside == f"qknorm.{wing}" or inside.startswith(f"qknorm.{wing}."):
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
            target = f"{module}.{name}" if name and is_module(f"{module}.{name}") else module
            if here == "scripts" and not is_module(target) and is_module(f"scripts.{target}"):
                target = f"scripts.{target}"  # scripts/ is on sys.path when a script runs
            parts = target.split(".")
            if parts[0] not in ("qknorm", "hydra_plugins", "scripts"):
                continue
            private = [i for i, part in enumerate(parts) if part.startswith("_")]
            if private and ".".join(parts[: private[0]]) != here:
                bad.append(f"{where(path, line)}: {target}")
    assert not bad, "underscored modules used across packages:\n" + "\n".join(bad)


def test_the_run_does_not_import_the_sweep_wing():
    bad = []
    for rel in RUN:
        path = REPO / rel
        for module, name, line in imports(path):
            target = f"{module}.{name}" if name else module
            if (target + ".").startswith("hydra_racing_sweeper."):
                bad.append(f"{where(path, line)}: {target}")
    assert not bad, "the run imports the sweep wing:\n" + "\n".join(bad)


# A dotted qknorm module, or a path to one, written in a docstring or comment.
NAMED = re.compile(r"\bqknorm(?:\.[a-z_][a-z0-9_]*)+|\bqknorm(?:/[a-z_][a-z0-9_]*)+\.py\b")
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
                ok = (REPO / named).is_file()
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


# The layers, lowest first (docs/design.md's module maps): a module imports from its own layer
# or from one below, never from one above. A package named here is one room, all its files on
# that layer; every module of qknorm/, hydra_plugins/ and scripts/ must be on one.
LAYERS = [
    ("qknorm.errors", "qknorm.nn", "qknorm.hooks", "qknorm.ticker", "qknorm.jsonfile"),
    ("qknorm.config",),
    ("qknorm.effective", "qknorm.rundir", "qknorm.norms", "qknorm.tokenizer", "qknorm.data"),
    ("qknorm.model", "qknorm.angpt", "qknorm.arch", "qknorm.diagnostics", "qknorm.tracking",
     "qknorm.memory", "qknorm.overrides"),
    ("qknorm.train", "qknorm.sample", "qknorm.pace"),  # the run
    ("hydra_racing_sweeper.race",),  # the race's pure rules: below the rest of the sweep wing
    ("qknorm.sweep",),
    ("qknorm.report", "qknorm.status", "qknorm.cli", "hydra_plugins"),
    ("qknorm.bench",),
    ("qknorm.research",),
    ("qknorm.claims", "scripts", "qknorm"),  # qknorm: the package's own __init__
]
# Imports that run up a layer today, each with the change that takes it away. An entry whose
# import is gone fails too: strike it.
KNOWN_UP: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> int | None:
    """The layer that names the module, or a package above it (qknorm names only its __init__)."""
    found = [(len(prefix), i) for i, layer in enumerate(LAYERS) for prefix in layer
             if module == prefix or prefix != "qknorm" and module.startswith(prefix + ".")]
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
            if module.split(".")[0] not in SOURCES:
                continue
            target = f"{module}.{name}" if name and is_module(f"{module}.{name}") else module
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


RACE = "hydra_racing_sweeper.race"


def test_the_race_imports_nothing_of_the_sweep_wing_outside_it():
    """qknorm/sweep/race/ is the race's pure rules: no Optuna, and nothing of qknorm.sweep but
    its own modules (the schedules that adapt it to a study import it, never the reverse)."""
    bad = []
    for path in sorted((REPO / "qknorm/sweep/race").rglob("*.py")):
        for module, name, line in imports(path):
            target = f"{module}.{name}" if name and is_module(f"{module}.{name}") else module
            if module.split(".")[0] == "optuna" or (
                    (target + ".").startswith("hydra_racing_sweeper.")
                    and not (target + ".").startswith(RACE + ".")):
                bad.append(f"{where(path, line)}: {target}")
    assert not bad, "the race imports outside its layer:\n" + "\n".join(bad)


def test_the_race_is_used_through_its_face():
    """From outside qknorm/sweep/race/: `from hydra_racing_sweeper.race import X` with X in its __all__
    (a name, or one of the modules it names as a namespace), as Optuna's users write
    `optuna.pruners.MedianPruner`; no module of it imported by path."""
    offered = set(importlib.import_module(RACE).__all__)
    bad = []
    for path in [*source_files(), *sorted((REPO / "tests").rglob("*.py"))]:
        if module_name(path).startswith(RACE):
            continue
        for module, name, line in imports(path):
            if module == RACE and name in offered:
                continue
            if (module + ".").startswith(RACE + "."):
                bad.append(f"{where(path, line)}: {module}{'.' + name if name else ''}")
    assert not bad, "imports past qknorm/sweep/race/__init__.py:\n" + "\n".join(bad)


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
    for path in sorted(p for top in ("qknorm", "hydra_plugins") for p in (REPO / top).rglob("*.py")):
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
