"""SMR_NATIVE chooses the path once per process: auto, on, off; anything else is refused."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import smr.native as n; from smr.checkpoint.kernels import IN_FORCE; "
    "print(n.NATIVE is not None, IN_FORCE.compiled)"
)


def run(mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SMR_NATIVE": mode}
    return subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )


def test_off_runs_the_python_path_and_installs_nothing() -> None:
    assert run("off").stdout.split() == ["False", "False"]


def test_on_and_auto_agree_on_whether_the_compiled_module_is_there() -> None:
    auto = run("auto")
    on = run("on")
    if auto.stdout.split() == ["True", "True"]:
        assert on.stdout.split() == ["True", "True"]
    else:
        assert "does not import" in auto.stderr
        assert on.returncode != 0 and "SMR_NATIVE=on" in on.stderr


def test_an_unknown_mode_is_refused_with_the_choices() -> None:
    result = run("fast")
    assert result.returncode != 0
    assert "SMR_NATIVE must be one of auto, on, off, not 'fast'" in result.stderr
