"""The code's references to the design resolve, and the citation rewrite
(``.ci/design_citations.py``) turns the old section numbers into such references: every
anchor it writes exists in docs/design/architecture.md, it handles each form a citation
takes, keeps lines within the line length, and changes nothing when run twice."""

from __future__ import annotations

import importlib.util
import py_compile
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN_PAGES = ROOT / "docs" / "design"
LINK = re.compile(r"docs/design/(?P<page>[\w-]+)\.md(?:#(?P<anchor>[\w-]+))?")


def load_rewrite() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "design_citations", ROOT / ".ci" / "design_citations.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def anchors_of(page: Path) -> set[str]:
    """The ids a page's headings get: an explicit ``{#id}``, else the heading's slug."""
    anchors = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"#+\s+(.*?)\s*(?:\{#(?P<id>[\w-]+)\})?\s*$", line)
        if not heading:
            continue
        if heading["id"]:
            anchors.add(heading["id"])
        else:
            text = re.sub(r"[^\w\s-]", "", heading.group(1).lower())
            anchors.add(re.sub(r"[\s]+", "-", text.strip()))
    return anchors


def test_every_anchor_the_rewrite_writes_is_on_the_architecture_page() -> None:
    rewrite = load_rewrite()
    defined = anchors_of(DESIGN_PAGES / "architecture.md")
    written = {
        *(anchor for anchor in rewrite.ANCHORS.values() if anchor),
        *rewrite.OVERRIDES.values(),
        *rewrite.STYLE_ANCHORS.values(),
    }
    assert written - defined == set()
    assert (DESIGN_PAGES / "invariants.md").exists()


def test_every_reference_to_docs_design_in_the_code_resolves() -> None:
    broken = []
    for folder in ("smr", "ring", "checkpoint", "tests", "bench"):
        for file in sorted((ROOT / folder).rglob("*.py")):
            for match in LINK.finditer(file.read_text(encoding="utf-8")):
                page = DESIGN_PAGES / f"{match['page']}.md"
                if not page.exists() or (
                    match["anchor"] and match["anchor"] not in anchors_of(page)
                ):
                    broken.append(f"{file.relative_to(ROOT)}: {match.group(0)}")
    # This file names the pattern, not a page.
    assert [line for line in broken if "test_design_citations" not in line] == []


# The old citations, spelled so that the rewrite, run over tests/, leaves this file alone.
SAMPLE = '''# A module of smr/, its old citations.
"""The wire protocol: versioned msgpack messages, validated on every decode (@ section 9).

A secondary of a slot range (@ sections 4-6) receives, from every mapper, the same tuple
batches as the range's primary. A key's state has two levels (@.md section 5) and the
timers are those of @ sections 5 and 6. The defaults are @'s, and the simulation is
the twin of STYLE% item 5.
"""


def f() -> None:
    """Where to split `rng` so that each part carries about half its load (@
    section 7): `split_at_load_share` with a lower part of one half."""
    # Loss beyond tolerance is refused, never folded into empty state (@ 6).
    # b and c fail together; d detects c, then b (@ section 6: up to r hops), which the
    # test below checks.
'''.replace("@", "DE" + "SIGN").replace("STYLE%", "ST" + "YLE")


def test_the_rewrite_handles_each_form_keeps_lines_short_and_is_idempotent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rewrite = load_rewrite()
    source = tmp_path / "smr" / "wire" / "messages.py"
    source.parent.mkdir(parents=True)
    source.write_text(SAMPLE, encoding="utf-8")
    assert rewrite.main(["--check", str(tmp_path)]) == 1
    assert source.read_text(encoding="utf-8") == SAMPLE

    assert rewrite.main([str(tmp_path)]) == 0
    text = source.read_text(encoding="utf-8")
    assert "DE" + "SIGN" not in text and "ST" + "YLE" not in text
    # The text as a reader reads it: lines joined, a comment's "#" dropped.
    flat = " ".join(re.sub(r"^\s*#", "", line).strip() for line in text.splitlines())
    for expected in (
        "(docs/design/architecture.md#wire)",  # section 9 of the old numbering, in wire/messages.py
        "(docs/design/architecture.md#data-path to #failures)",
        "(docs/design/architecture.md#state)",
        "docs/design/architecture.md#state and #failures",
        "The defaults are those of docs/design/architecture.md,",
        "the twin of docs/design/architecture.md#simulation.",
        "(docs/design/architecture.md#moves): `split_at_load_share`",
        "empty state (docs/design/architecture.md#failures).",
        "(docs/design/architecture.md#failures: up to r hops), which the test below checks.",
    ):
        assert expected in flat
    assert max(len(line) for line in text.splitlines()) <= rewrite.LINE_LENGTH_MAX
    # Comments wrapped stay comments, each on lines of its own; the module still compiles.
    comments = [line.strip() for line in text.splitlines() if line.lstrip().startswith("#")]
    assert comments[1:3] == [
        "# Loss beyond tolerance is refused, never folded into empty state",
        "# (docs/design/architecture.md#failures).",
    ]
    assert comments[3].startswith("# b and c fail together")
    py_compile.compile(str(source), doraise=True)

    capsys.readouterr()
    assert rewrite.main([str(tmp_path)]) == 0
    assert source.read_text(encoding="utf-8") == text
    assert "0 files rewritten" in capsys.readouterr().out
