"""The documentation site builds strictly and shows every command and every public name,
generated from the code: a command or a function added without a page of its own still
appears, and one that fails to render fails here."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from smr.cli.root import main_group

REPO = Path(__file__).resolve().parents[2]
# The modules of the public API, each with a page of its own under reference/api/.
PUBLIC_MODULES = {
    "smr.api": "api",
    "smr.agg": "agg",
    "smr.connection": "connection",
    "smr.aio": "aio",
    "smr.testing": "testing",
    "smr.windows": "windows",
    "smr.spark": "spark",
}
# smr.values is the engine's; users meet only its two errors.
VALUES_PUBLIC = ("EmitError", "StateValueError")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def command_paths(group: click.Group, prefix: str = "smr") -> Iterator[str]:
    for name, command in group.commands.items():
        path = f"{prefix} {name}"
        yield path
        if isinstance(command, click.Group):
            yield from command_paths(command, path)


def public_names(module_name: str) -> list[str]:
    """``__all__``, or the classes and functions the module defines without a leading _."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module_name
    ]


def test_every_command_has_its_section_in_the_cli_reference(site: Path) -> None:
    page = (site / "reference" / "cli.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)
    missing = [path for path in command_paths(main_group) if path not in text]
    assert not missing, missing
    assert "smr init" in text and "--version" in text


@pytest.mark.parametrize("module_name", sorted(PUBLIC_MODULES))
def test_every_public_name_has_its_entry_in_the_api_reference(site: Path, module_name: str) -> None:
    page = (site / "reference" / "api" / f"{PUBLIC_MODULES[module_name]}.html").read_text()
    missing = [
        name for name in public_names(module_name) if f'id="{module_name}.{name}"' not in page
    ]
    assert not missing, missing


def test_the_package_page_and_the_errors_users_meet(site: Path) -> None:
    import smr

    package = (site / "reference" / "api" / "smr.html").read_text()
    assert all(name in package for name in smr.__all__)
    values = (site / "reference" / "api" / "values.html").read_text()
    assert all(f'id="smr.values.{name}"' in values for name in VALUES_PUBLIC)


def test_getting_started_runs_as_a_test_and_its_blocks_fit_under_the_copy_button() -> None:
    guide = (REPO / "docs" / "getting-started.md").read_text()
    blocks = re.findall(r"(<!-- skip: next -->\n)?```sh\n(.*?)```", guide, re.DOTALL)
    run = [line for skipped, body in blocks if not skipped for line in body.splitlines()]
    assert run[0] == "smr --version"
    assert any(line.startswith("smr init ") for line in run)
    assert run[-1].startswith("smr cluster down")
    # Sybil runs the page (docs/conftest.py): in `make test`, and from the wheel in the
    # release smoke.
    conftest = (REPO / "docs" / "conftest.py").read_text()
    assert 'TESTED = ["getting-started.md"' in conftest
    # No line of a block runs under the copy button: short, no trailing comment.
    for body in re.findall(r"```\w+\n(.*?)```", guide, re.DOTALL):
        for line in body.splitlines():
            assert len(line) <= 76 and " # " not in line, line


# The pages with Mermaid diagrams (```mermaid blocks).
DIAGRAM_PAGES = [
    f"concepts/{name}.html"
    for name in ("ring", "backup-and-checkpoints", "failures", "life-of-a-tuple", "moves", "zones")
]


def test_the_diagrams_are_drawn_at_build_time_not_left_as_mermaid_source(site: Path) -> None:
    for name in DIAGRAM_PAGES:
        page = (site / name).read_text()
        assert "<svg" in page, name
        # Mermaid's source as a page would show it: the block, its arrows (escaped).
        assert 'class="mermaid"' not in page, name
        assert "--&gt;" not in page and "-&gt;&gt;" not in page, name


def test_the_site_opened_from_disk_needs_no_network(site: Path) -> None:
    # Search reads its index from a script (Material's offline plugin), its worker runs
    # through our shim, and no page loads a script from another host.
    assert (site / "search" / "search_index.js").read_text().startswith("var __index = ")
    assert (site / "javascripts" / "file-worker.js").is_file()
    for page in [site / "index.html", *(site / name for name in DIAGRAM_PAGES)]:
        scripts = re.findall(r'<script src="([^"]+)"', page.read_text())
        assert scripts and not [src for src in scripts if "://" in src], (page, scripts)
        assert any(src.endswith("javascripts/file-worker.js") for src in scripts), page
