"""What the package installs: the distribution smr-ring, nothing at the top level but smr
(the repository's ring/ and checkpoint/ as smr.ring and smr.checkpoint), and uvloop only
where it installs. The built wheel itself is checked by the release smoke
(.ci/release-smoke)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import smr
from smr.node.loop import new_event_loop

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_distribution_is_smr_ring_and_its_hints_name_it() -> None:
    assert PYPROJECT["project"]["name"] == "smr-ring"
    assert smr.__version__ == PYPROJECT["project"]["version"]
    from smr.spark.setup import INSTALL_HINT

    assert INSTALL_HINT == "pip install 'smr-ring[spark]'"


def test_every_package_folder_is_listed_and_ring_and_checkpoint_install_under_smr() -> None:
    setuptools = PYPROJECT["tool"]["setuptools"]
    folders = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "smr").glob("**/__init__.py")
    } | {"smr.ring", "smr.checkpoint"}
    assert set(setuptools["packages"]) == folders
    assert all(package.startswith("smr") for package in setuptools["packages"])
    assert setuptools["package-dir"] == {"smr.ring": "ring", "smr.checkpoint": "checkpoint"}


@pytest.mark.parametrize("name", ["ring", "checkpoint"])
def test_the_installed_package_has_no_top_level_ring_or_checkpoint(
    name: str, tmp_path: Path
) -> None:
    # From a directory that is not the checkout: only what is installed is importable.
    done = subprocess.run(
        [sys.executable, "-c", f"import smr.{name}\nimport {name}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"ModuleNotFoundError: No module named '{name}'"


def test_uvloop_is_a_dependency_only_where_it_installs() -> None:
    uvloop = [d for d in PYPROJECT["project"]["dependencies"] if d.startswith("uvloop")]
    assert uvloop == ["uvloop>=0.19; sys_platform != 'win32'"]


def test_without_uvloop_the_node_runs_on_asyncios_own_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    loop = new_event_loop()
    try:
        assert type(loop).__module__.startswith("asyncio")
        assert loop.run_until_complete(asyncio.sleep(0, result=7)) == 7
    finally:
        loop.close()
    monkeypatch.undo()
    with_uvloop = new_event_loop()
    try:
        assert type(with_uvloop).__module__.startswith("uvloop")
    finally:
        with_uvloop.close()


@pytest.mark.parametrize("package", ["smr", "smr.spark"])
def test_a_facades_stub_types_exactly_the_names_it_loads(package: str) -> None:
    # The facade loads its names on first use from homes named as strings; the stub beside
    # it gives their types. A name in one and not the other would load untyped, or be typed
    # and fail at run time.
    import ast
    import importlib

    facade = importlib.import_module(package)
    stub_path = Path(facade.__file__).with_suffix(".pyi")
    stub = ast.parse(stub_path.read_text(encoding="utf-8"))
    typed = {
        alias.asname or alias.name
        for node in stub.body
        if isinstance(node, ast.ImportFrom) and node.module != "typing"
        for alias in node.names
    }
    loaded = set(facade.__all__) - {"__version__"}
    assert typed == loaded
    for name in sorted(typed):
        assert getattr(facade, name) is not None, name
