"""The pages' marked blocks, rendered from the records. A block is

    <!-- claims:NAME -->
    ...what the template NAME renders to...
    <!-- /claims:NAME -->

and its template (a records file's `blocks:`) is markdown with {{ID ROW FIELD}} where record
ID's printed value goes, optionally with filters: {{ID ROW FIELD | 3}} quotes it with 3
decimals, `| u` writes its minus as − (prose), `| abs` drops its sign. Text outside the blocks
is the page's own; a number in a block is typed once, in its record.
"""

from __future__ import annotations

import re
from pathlib import Path

from qknorm.claims import printed
from qknorm.claims.records import Book

BLOCK = re.compile(r"(?P<open><!-- claims:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)"
                   r"(?P<close><!-- /claims:(?P=name) -->)", re.S)
PLACE = re.compile(r"\{\{\s*(?P<id>[^\s|}]+)\s+(?P<row>[^\s|}]+)\s+(?P<field>[^\s|}]+)"
                   r"(?P<filters>(?:\s*\|\s*[^\s|}]+)*)\s*\}\}")


def _filtered(text: str, filters: str) -> str | None:
    for f in (x.strip() for x in filters.split("|") if x.strip()):
        if f.isdigit():
            text = printed.quote(text, int(f))
        elif f == "u":
            text = text.replace("-", "−", 1) if text.startswith("-") else text
        elif f == "abs":
            text = text.lstrip("+-−")
        else:
            return None
    return text


def render(template: str, book: Book, where: str, problems: list[str]) -> str:
    """The template with every placeholder replaced by its record's printed value; a
    placeholder that names nothing is left as it is and said in `problems`."""
    def one(m: re.Match) -> str:
        record = book.records.get(m["id"])
        fields = record.rows.get(m["row"]) if record else None
        if fields is None or m["field"] not in fields:
            what = ("no record " + m["id"] if record is None else
                    f"record {m['id']} has no row {m['row']}" if fields is None else
                    f"record {m['id']}, row {m['row']}, has no field {m['field']}")
            problems.append(f"{where}: {m.group(0)}: {what}")
            return m.group(0)
        text = _filtered(fields[m["field"]], m["filters"])
        if text is None:
            problems.append(f"{where}: {m.group(0)}: a filter is not a digit count, u or abs")
            return m.group(0)
        return text

    return PLACE.sub(one, template)


def read(path: Path) -> str:
    """A page's text; a page the checkout lacks has no blocks (a repository in a test)."""
    return path.read_text() if path.is_file() else ""


def records_of(template: str) -> list[str]:
    """The records a template places, in order of first use."""
    return list(dict.fromkeys(m["id"] for m in PLACE.finditer(template)))


def names(text: str) -> list[str]:
    """The blocks a page marks, in its order."""
    return [m["name"] for m in BLOCK.finditer(text)]


def render_page(text: str, book: Book, page: str, problems: list[str]) -> str:
    """The page with every marked block rendered from its template (a block without one is
    left as it is and said in `problems`)."""
    def one(m: re.Match) -> str:
        if m["name"] not in book.blocks:
            problems.append(f"{page}: block {m['name']} has no template under `blocks:`")
            return m.group(0)
        body = render(book.blocks[m["name"]], book, f"block {m['name']}", problems)
        return m["open"] + body.rstrip("\n") + "\n" + m["close"]

    return BLOCK.sub(one, text)


def differing(text: str, rendered: str) -> list[str]:
    """The blocks whose text differs between a page and its render."""
    new = {m["name"]: m["body"] for m in BLOCK.finditer(rendered)}
    return [m["name"] for m in BLOCK.finditer(text) if new.get(m["name"]) != m["body"]]


# A number a page prints: a sign, digits (thousands commas), decimals, an exponent, a percent;
# not inside a word, a path or a name (4df2bdc, cpu_w64, lr_width/clip1, 1e-3's exponent).
NUMBER = re.compile(r"(?<![\w./\-−+])[+\-−]?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?%?(?![\w/])")
_NOT_PROSE = re.compile(r"```.*?```|`[^`\n]*`|\]\([^)]*\)|<!--.*?-->|<[^>\n]*>", re.S)


# The comparative words (issue 56): inside a block each is rendered from a record's test (a
# placeholder's value), never typed; outside the blocks a page types none about a result
# (issue 66: untyped). A word in backticks names the word, as a definition does.
COMPARATIVES = ("more", "less", "lower", "higher", "worse", "better", "level", "same", "never",
                "every", "alone", "shown", "marginal", "undecided")
_COMPARATIVE = re.compile(r"\b(?:" + "|".join(COMPARATIVES) + r")\b", re.I)
_NAMED = re.compile(r"`[^`\n]*`|\]\([^)]*\)")


def typed_comparatives(template: str) -> list[str]:
    """The comparative words a block's template types itself, outside its placeholders and its
    backticks (and link targets): each is a result the template states, not its record's test."""
    text = _NAMED.sub(" ", PLACE.sub(" ", template))
    return [m.group(0).lower() for m in _COMPARATIVE.finditer(text)]


def unrecorded(text: str, allow: list[str] = ()) -> list[tuple[int, str]]:
    """(line, number) for each number of a page outside its claims blocks, its code (fenced or
    inline), its link targets and comments, and outside every `allow` pattern (a reviewed
    default, version or config value, matched on its line)."""
    return [(i, m.group(0).rstrip(",")) for i, line in _prose_lines(text, allow)
            for m in NUMBER.finditer(line)]


def untyped(text: str, allow: list[str] = ()) -> list[tuple[int, str]]:
    """(line, word) for each comparative word (COMPARATIVES) of a page outside its claims
    blocks, its code and backticks (a word named, as a rule's definition names it), its link
    targets and comments, and outside every `allow` pattern (a reviewed phrase of a rule, such
    as "lower is better"): a result the page types instead of rendering it from a record."""
    return [(i, m.group(0).lower()) for i, line in _prose_lines(text, allow)
            for m in _COMPARATIVE.finditer(line)]


def _prose_lines(text: str, allow: list[str]) -> list[tuple[int, str]]:
    """A page's lines with its blocks, code, link targets and comments blanked (line numbers
    kept) and every `allow` pattern taken out."""
    def blank(m: re.Match) -> str:
        return "\n" * m.group(0).count("\n")

    prose = _NOT_PROSE.sub(blank, BLOCK.sub(blank, text))
    out = []
    for i, line in enumerate(prose.split("\n"), start=1):
        for pattern in allow:
            line = re.sub(pattern, " ", line)
        out.append((i, line))
    return out
