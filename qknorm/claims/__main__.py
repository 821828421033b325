"""`python -m qknorm.claims check | render | show ID` (qknorm.claims): check every record and
page block (exit 1 naming each difference), rewrite the pages' blocks from the records, or print
what a record's runs give (every row and field, full precision) to write or fix a record."""

from __future__ import annotations

import argparse
from pathlib import Path

from qknorm.claims import check, kinds, page, printed, records
from qknorm.claims.inputs import Runs
from qknorm.errors import UserError, run_main


def _show(book: records.Book, rid: str) -> None:
    if not rid:
        raise UserError("show needs a record's id: python -m qknorm.claims show ID; the records "
                        f"are {', '.join(book.records)}")
    if rid not in book.records:
        raise UserError(f"no record {rid}; the records are {', '.join(book.records)}")
    for row, fields in kinds.compute(book.records[rid], Runs(book)).items():
        print(f"{row}: " + ", ".join(f"{k} {printed.full(v)}" for k, v in fields.items()))


def _render(book: records.Book, root: Path) -> int:
    """Rewrite every page's blocks from the records; nothing is written while any placeholder
    or block names nothing."""
    problems: list[str] = []
    pages = {rel: page.read(root / rel) for rel in records.PAGES}
    new = {rel: page.render_page(text, book, str(rel), problems) for rel, text in pages.items()}
    for line in problems:
        print(line)
    if problems:
        return 1
    for rel, text in pages.items():
        if new[rel] != text:
            (root / rel).write_text(new[rel])
            print(f"rendered {rel}: {', '.join(page.differing(text, new[rel]))}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m qknorm.claims", description=__doc__)
    parser.add_argument("command", choices=["check", "render", "show"])
    parser.add_argument("record", nargs="?", help="show: the record's id")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="the repository's root (default: the current directory)")
    args = parser.parse_args()
    book = records.load(args.root)
    if args.command == "show":
        _show(book, args.record or "")
        return 0
    if args.command == "render":
        return _render(book, args.root)
    problems, numbers = check.everything(book, args.root)
    for line in problems:
        print(line)
    print(f"claims: {len(book.records)} records, {numbers} printed values, {len(book.blocks)} "
          f"blocks: {'all agree with the runs' if not problems else f'{len(problems)} differ'}")
    return 1 if problems else 0


if __name__ == "__main__":
    run_main(main)
