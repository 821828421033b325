"""Every record recomputed from its runs and every page block compared with its render: the
differences, each in one line naming the record (or block) and both values."""

from __future__ import annotations

from pathlib import Path

from qknorm.claims import kinds, page, printed
from qknorm.claims.inputs import Runs
from qknorm.claims.records import PAGES, Book, Record


def sources(book: Book, runs: Runs) -> list[str]:
    """Each source's commit against the git_sha its runs recorded (a prefix of each; several
    commits: space-separated)."""
    problems = []
    for source in book.sources.values():
        frame = runs.runs(source.name, Record(source.name, "", "", {}, {}, "sources"))
        shas = {str(s) for s in frame["git_sha"].dropna().unique()}
        commits = source.commit.split()
        stray = sorted(s[:7] for s in shas if not any(s.startswith(c) for c in commits))
        if stray:
            problems.append(f"source {source.name}: commit {source.commit}, but its runs "
                            f"recorded {', '.join(stray)}")
    return problems


def record(rec: Record, runs: Runs) -> list[str]:
    """The record's printed values that its runs no longer give."""
    computed = kinds.compute(rec, runs)
    problems = []
    for row, fields in rec.rows.items():
        got = computed.get(row)
        if got is None:
            problems.append(f"{rec.id} [{row}]: the runs give no such row (they give "
                            f"{', '.join(computed)})")
            continue
        for name, text in fields.items():
            if name not in got:
                problems.append(f"{rec.id} [{row}] {name}: not a field of kind {rec.kind} "
                                f"({', '.join(got)})")
            elif not printed.agrees(text, got[name]):
                problems.append(f"{rec.id} [{row}] {name}: the record says {text}, the runs "
                                f"give {printed.full(got[name], text)} ({rec.file})")
    return problems


def pages(book: Book, root: Path) -> list[str]:
    """Each page's blocks against their render, every template used once, and no template
    typing a comparative word of its own (page.typed_comparatives)."""
    problems: list[str] = []
    used: list[str] = []
    for rel in PAGES:
        text = page.read(root / rel)
        used += page.names(text)
        rendered = page.render_page(text, book, str(rel), problems)
        problems += [f"{rel}: block {name} differs from what its records "
                     f"({', '.join(page.records_of(book.blocks.get(name, '')))}) give, its "
                     "words or its numbers; run `python -m qknorm.claims render`"
                     for name in page.differing(text, rendered)]
    problems += [f"block {name} types {', '.join(words)}: a comparative word in a block is "
                 "rendered from its record's test (a call, verdict or tally field), or reworded"
                 for name, words in ((n, page.typed_comparatives(t)) for n, t in book.blocks.items())
                 if words]
    problems += [f"block {name} is on no page; mark it with <!-- claims:{name} --> or "
                 "remove it" for name in book.blocks if name not in used]
    problems += [f"block {name} is marked {used.count(name)} times; mark it once"
                 for name in sorted(set(used)) if used.count(name) > 1]
    return problems


def everything(book: Book, root: Path) -> tuple[list[str], int]:
    """(every difference, how many printed values were checked)."""
    runs = Runs(book)
    problems = sources(book, runs)
    for rec in book.records.values():
        problems += record(rec, runs)
    problems += pages(book, root)
    return problems, sum(len(f) for r in book.records.values() for f in r.rows.values())
