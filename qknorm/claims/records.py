"""The records' home, docs/results/records/: one YAML file per study, each with any of

  sources  name -> {dir, commit, command, hardware}: a committed report folder (its
           results.csv, and curves.csv where a record reads curves), relative to docs/results,
           and what made its runs
  records  id -> {kind, claim, the kind's settings, rows}: rows maps a row (a p, a look, a
           step) to its fields as the page prints them, each a quoted string ("0.0730",
           "+0.2200", "level within ±δ"), so its printed digits are part of the record
  blocks   name -> a markdown template: a page's block between `<!-- claims:NAME -->` and
           `<!-- /claims:NAME -->`, with {{ID ROW FIELD}} where a record's number goes

Names are unique across the files: a source, record or block is defined once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from qknorm.errors import UserError

RESULTS = Path("docs/results")  # the committed reports, relative to the repository's root
HOME = RESULTS / "records"
# The pages whose blocks are rendered, and whose numbers outside blocks tests/test_claims.py
# holds to its allow-list.
PAGES = (RESULTS / "README.md", Path("README.md"), Path("docs/search.md"),
         Path("docs/search_results.md"), Path("docs/race.md"), Path("docs/report.md"))
SOURCE_FIELDS = ("dir", "commit", "command", "hardware")
SECTIONS = ("sources", "records", "blocks")


@dataclass(frozen=True)
class Source:
    """Committed runs: a report folder under docs/results and what made them."""

    name: str
    dir: str
    commit: str
    command: str
    hardware: str


@dataclass(frozen=True)
class Record:
    """One claim: its kind, the kind's settings (`spec`: sources, metric, test, δ, ...), and
    rows -> fields -> the numbers as printed."""

    id: str
    kind: str
    claim: str
    spec: dict[str, Any]
    rows: dict[str, dict[str, str]]
    file: str


@dataclass
class Book:
    """Every source, record and block, and the folder their sources' dirs are relative to."""

    results: Path
    sources: dict[str, Source] = field(default_factory=dict)
    records: dict[str, Record] = field(default_factory=dict)
    blocks: dict[str, str] = field(default_factory=dict)

    def source(self, name: object, record: str) -> Source:
        if name not in self.sources:
            raise UserError(f"record {record}: source {name!r} is not defined; add it under "
                            f"`sources:` in a file of {HOME}")
        return self.sources[name]


def _printed(record: str, row: str, name: str, text: object) -> str:
    """A field as printed: a string, or an int (no digits to lose). A float would have lost
    its trailing zeros to YAML: quote it."""
    if isinstance(text, bool) or isinstance(text, float):
        raise UserError(f"record {record}, row {row}, {name}: {text!r} is not quoted; write "
                        f"it as printed, e.g. \"{text}\", so its digits are kept")
    if not isinstance(text, (str, int)):
        raise UserError(f"record {record}, row {row}, {name}: {text!r} is not a printed value")
    return str(text)


def _record(rid: str, entry: object, file: str) -> Record:
    if not isinstance(entry, dict) or "kind" not in entry:
        raise UserError(f"record {rid} ({file}) has no kind; give it kind: means, deltas, ...")
    rows = entry.get("rows") or {}
    if not isinstance(rows, dict) or not all(isinstance(v, dict) for v in rows.values()):
        raise UserError(f"record {rid} ({file}): rows must map a row to its fields")
    spec = {k: v for k, v in entry.items() if k not in ("kind", "claim", "rows")}
    printed = {str(r): {str(k): _printed(rid, str(r), str(k), v) for k, v in fields.items()}
               for r, fields in rows.items()}
    return Record(rid, str(entry["kind"]), str(entry.get("claim", "")), spec, printed, file)


def _source(name: str, entry: object, file: str) -> Source:
    missing = [k for k in SOURCE_FIELDS if not isinstance(entry, dict) or k not in entry]
    if missing:
        raise UserError(f"source {name} ({file}) has no {', '.join(missing)}; every source "
                        f"names its {', '.join(SOURCE_FIELDS)}")
    return Source(name, *(str(entry[k]) for k in SOURCE_FIELDS))


def _add(into: dict, name: str, item: object, file: str, where: dict[str, str]) -> None:
    if name in into:
        raise UserError(f"{name} is defined twice, in {where[name]} and {file}; keep one")
    into[name], where[name] = item, file


class _Loader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping: YAML keeps the last, so a row
    written again would hide the first unchecked."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        twice = sorted({str(k) for k in keys if keys.count(k) > 1})
        if twice:
            raise yaml.constructor.ConstructorError(
                None, None, f"{', '.join(twice)} given twice in one mapping", node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load(root: Path | str = ".") -> Book:
    """Every file of the records' home under the repository `root`, merged into one Book."""
    root = Path(root)
    home = root / HOME
    files = sorted(home.glob("*.yaml"))
    if not files:
        raise UserError(f"no records under {home}; run from the repository's root or pass --root")
    book, where = Book(root / RESULTS), {section: {} for section in SECTIONS}
    for path in files:
        try:
            data = yaml.load(path.read_text(), Loader=_Loader) or {}
        except yaml.YAMLError as e:
            raise UserError(f"{path} is not YAML: {e}".replace("\n", " ")) from None
        unknown = set(data) - set(SECTIONS) if isinstance(data, dict) else {"(not a mapping)"}
        if unknown:
            raise UserError(f"{path}: {', '.join(sorted(map(str, unknown)))} is not a section; "
                            f"a file has {', '.join(SECTIONS)}")
        for name, entry in (data.get("sources") or {}).items():
            _add(book.sources, str(name), _source(str(name), entry, path.name), path.name,
                 where["sources"])
        for rid, entry in (data.get("records") or {}).items():
            _add(book.records, str(rid), _record(str(rid), entry, path.name), path.name,
                 where["records"])
        for name, text in (data.get("blocks") or {}).items():
            _add(book.blocks, str(name), str(text), path.name, where["blocks"])
    return book
