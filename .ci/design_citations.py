#!/usr/bin/env python3
"""Rewrite the code's citations of the old design numbering into links to docs/design/.

The code cited the design by section number ("DESIGN section 5", "DESIGN.md section 5",
"DESIGN sections 4-6", "DESIGN 6", "DESIGN's", "STYLE item 6"); the design now lives in
``docs/design/architecture.md`` with stable anchors, and each citation becomes
``docs/design/architecture.md#<anchor>`` (section 13, the invariants:
``docs/design/invariants.md``). A citation may be broken across two lines of a docstring or
a comment. A line the rewrite makes longer than the line length is wrapped: the words past it
move to the next line of the same paragraph, or, when they end a sentence or the paragraph, to
a new line with the same indentation.

usage: design_citations.py [--check] [ROOT]

Rewrites the .py files under ROOT's smr/, ring/, checkpoint/, tests/ and bench/ (ROOT: the
current directory), prints the citations found before and after, and names every citation it
could not rewrite. With --check it only counts and names them. Exit 1 if any citation is left.
Running it twice changes nothing the second time.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

FOLDERS = ("smr", "ring", "checkpoint", "tests", "bench")
LINE_LENGTH_MAX = 100
PAGE = "docs/design/architecture.md"

# Section number of the old numbering -> anchor on PAGE (None: the invariants page). The
# sections after 14 described work not yet done; a citation of one becomes the page itself.
ANCHORS: dict[int, str | None] = {
    1: "words",
    2: "layout",
    3: "view",
    4: "data-path",
    5: "state",
    6: "failures",
    7: "moves",
    8: "autoscaling",
    9: "mappers",
    10: "wire",
    11: "deployment",
    12: "operations",
    13: None,
    14: "edges",
}

# Citations whose number was of an older numbering, or that a more precise anchor serves:
# (path, section) -> anchor.
OVERRIDES: dict[tuple[str, int], str] = {
    ("smr/wire/messages.py", 9): "wire",
    ("smr/wire/peer.py", 9): "wire",
    ("smr/wire/reads.py", 9): "wire",
    ("smr/spark/query.py", 8): "spark",
    ("smr/spark/checkpoint.py", 9): "spark",
    ("smr/faults/scenarios.py", 10): "faults-as-data",
}

# The style notes' items cited in the code, by number -> anchor.
STYLE_ANCHORS = {5: "simulation", 6: "faults-as-data"}

# A citation's words may be split by a line break (then indentation, and a comment's "#").
GAP = r"(?:[ \t]+|[ \t]*\n[ \t]*(?:#[ \t]*)?)"
SECTIONS = re.compile(
    rf"DESIGN(?:\.md)?{GAP}(?:sections?{GAP})?(?P<first>\d+)"
    rf"(?:(?P<joint>{GAP}and{GAP}|{GAP}?[-–]{GAP}?|,{GAP}|{GAP}to{GAP})(?P<last>\d+)\b)?"
    rf"(?P<style>,{GAP}STYLE{GAP}item{GAP}\d+)?"
)
STYLE_ITEM = re.compile(rf"STYLE{GAP}item{GAP}(?P<item>\d+)")
POSSESSIVE = re.compile(
    r"(?P<opening>\"\"\"|^|[.:]\s)?DESIGN's(?P<definition>\sdefinition)?", re.MULTILINE
)
LEFT = re.compile(r"\bDESIGN\b|\bSTYLE item\b")


def target(path: str, section: int) -> str:
    """The link that replaces a citation of `section` in the file at `path`."""
    anchor = OVERRIDES.get((path, section), ANCHORS.get(section, ""))
    if anchor is None:
        return "docs/design/invariants.md"
    return f"{PAGE}#{anchor}" if anchor else PAGE


def rewrite_citations(path: str, text: str) -> str:
    """`text` with every citation it holds rewritten (lines not yet wrapped)."""

    def sections(match: re.Match[str]) -> str:
        first = int(match["first"])
        link = target(path, first)
        if match["last"] is None:
            return link
        last = int(match["last"])
        joint = " and " if "and" in match["joint"] or "," in match["joint"] else " to "
        other = target(path, last)
        return link + joint + ("#" + other.split("#", 1)[1] if "#" in other else other)

    def style(match: re.Match[str]) -> str:
        return f"{PAGE}#{STYLE_ANCHORS.get(int(match['item']), '')}".rstrip("#")

    def possessive(match: re.Match[str]) -> str:
        opening = match["opening"] or ""
        capital = opening == '"""' or opening.startswith((".", ":"))
        if match["definition"]:  # the definition of a word: the words' table
            return f"{opening}{'T' if capital else 't'}he definition in {PAGE}#words"
        return f"{opening}{'T' if capital else 't'}hose of {PAGE}"

    text = SECTIONS.sub(sections, text)
    text = STYLE_ITEM.sub(style, text)
    return POSSESSIVE.sub(possessive, text)


def continuation_prefix(line: str) -> str:
    """The indentation (and a comment's "# ") that a wrapped part of `line` starts with."""
    comment = re.match(r"[ \t]*#[ \t]?", line)
    if comment and not line.lstrip().startswith('"'):
        return comment.group(0)
    item = re.match(r"([ \t]*)(?:\d+[a-z]?\.|[a-z]\.|[-*])[ \t]+", line)
    if item:
        return " " * len(item.group(0))
    return re.match(r"[ \t]*", line).group(0)  # type: ignore[union-attr]


def continues_paragraph(line: str, prefix: str) -> bool:
    """Whether `line` goes on the paragraph whose wrapped part starts with `prefix`."""
    if not line.startswith(prefix) or not line[len(prefix) :].strip():
        return False
    rest = line[len(prefix) :]
    if rest[0].isspace() or rest.startswith(('"""', "#")):
        return False
    return not re.match(r"(?:\d+[a-z]?\.|[a-z]\.|[-*])\s", rest)


def wrap_long_lines(text: str) -> str:
    """`text` with each too long line that holds a link to docs/design/ wrapped."""
    lines = text.split("\n")
    index = 0
    carried = False  # the line at index received words from the line before it
    while index < len(lines):
        line = lines[index]
        if len(line) <= LINE_LENGTH_MAX or ("docs/design/" not in line and not carried):
            index += 1
            carried = False
            continue
        prefix = continuation_prefix(line)
        cut = line.rfind(" ", len(prefix) + 1, LINE_LENGTH_MAX + 1)
        if cut <= len(prefix):
            index += 1
            carried = False
            continue
        head, tail = line[:cut].rstrip(), line[cut + 1 :]
        following = lines[index + 1] if index + 1 < len(lines) else ""
        lines[index] = head
        # A tail that ends a sentence gets a line of its own: the next line may begin
        # another comment, or a paragraph of its own.
        ends_sentence = tail.rstrip().endswith((".", ":", "!", "?"))
        if '"""' not in tail and not ends_sentence and continues_paragraph(following, prefix):
            lines[index + 1] = prefix + tail + " " + following[len(prefix) :]
        else:
            lines.insert(index + 1, prefix + tail)
        index += 1
        carried = True
    return "\n".join(lines)


def count_citations(text: str) -> int:
    """How many citations of the old numbering `text` holds."""
    return len(LEFT.findall(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="count and name, change nothing")
    parser.add_argument("root", nargs="?", default=".", type=Path)
    options = parser.parse_args(argv)
    before = after = changed = 0
    for folder in FOLDERS:
        for file in sorted((options.root / folder).rglob("*.py")):
            path = file.relative_to(options.root).as_posix()
            text = file.read_text(encoding="utf-8")
            before += count_citations(text)
            new = text if options.check else wrap_long_lines(rewrite_citations(path, text))
            if new != text:
                file.write_text(new, encoding="utf-8")
                changed += 1
            for number, line in enumerate(new.split("\n"), 1):
                if LEFT.search(line):
                    print(f"{path}:{number}: not rewritten: {line.strip()}")
                    after += len(LEFT.findall(line))
    print(f"citations: {before} before, {after} after; {changed} files rewritten")
    return 1 if after else 0


if __name__ == "__main__":
    sys.exit(main())
