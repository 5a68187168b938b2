"""The documentation's code blocks run as tests (Sybil): `pytest docs/PAGE.md`, and the pages
listed in TESTED run in `make test` and in the release smoke (.ci/release-smoke, from the
installed wheel).

- A ```sh block runs line by line in bash, in order, in a temporary directory of the page's
  own (a `cd` line changes it for the lines after); each line must exit 0.
- A ```text block right after it is the output of the block's last line: it must match.
- A ```python block runs in the page's namespace.
- `<!-- skip: next -->` before a block leaves it out (it shows what is not to be run here,
  such as installing the wheel).

Whatever a page started is stopped after it: every cluster under its directory is brought
down by its cluster.json (`smr cluster down`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

# The pages whose every block runs: each starts what it uses and needs only the wheel.
TESTED = ["getting-started.md"]
# `smr` and `python` are those of the interpreter running the tests (its environment's
# bin/ first on PATH), and nothing of a checkout is imported unless installed.
ENVIRONMENT = {
    **{key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "SMR_CLUSTER")},
    "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
}


def run_shell_block(example: Example) -> None:
    namespace = example.namespace
    for line in str(example.parsed).splitlines():
        command = line.split(" #", 1)[0].strip()
        if not command:
            continue
        if command.startswith("cd "):
            namespace["cwd"] = (namespace["cwd"] / command[3:].strip()).resolve()
            continue
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=namespace["cwd"],
            capture_output=True,
            text=True,
            timeout=120,
            env=ENVIRONMENT,
        )
        namespace["last_output"] = done.stdout
        assert done.returncode == 0, (
            f"{example.path}:{example.line}: `{command}` exited {done.returncode}:\n"
            f"{done.stdout}{done.stderr}"
        )


def check_output(example: Example) -> None:
    expected = str(example.parsed).strip()
    shown = example.namespace.get("last_output", "").strip()
    assert shown == expected, f"{example.path}:{example.line}: printed\n{shown}\nnot\n{expected}"


def setup(namespace: dict[str, Any]) -> None:
    namespace["cwd"] = Path(tempfile.mkdtemp(prefix="smr-docs-"))
    namespace["home"] = namespace["cwd"]


def teardown(namespace: dict[str, Any]) -> None:
    home: Path = namespace["home"]
    for spec in home.glob("**/cluster.json"):
        subprocess.run(
            [sys.executable, "-m", "smr", "cluster", "down", "--cluster", str(spec.parent)],
            capture_output=True,
            timeout=60,
        )
    shutil.rmtree(home, ignore_errors=True)


pytest_collect_file = Sybil(
    parsers=[
        SkipParser(),
        CodeBlockParser(language="sh", evaluator=run_shell_block),
        CodeBlockParser(language="text", evaluator=check_output),
        PythonCodeBlockParser(),
    ],
    filenames=TESTED,
    setup=setup,
    teardown=teardown,
).pytest()
