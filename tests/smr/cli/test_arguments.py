"""Bad command-line values are one line naming the flag and the value, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.cli.root import main, main_group


def test_a_non_integer_key_with_int_key_names_the_key_and_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["query", "--cluster", str(tmp_path), "--int-key", "abc"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("smr: error: Invalid value for KEY: 'abc' is not an integer")
    assert "--int-key" in err[0] and "int()" not in err[0]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["cluster", "up", "--dir", "x", "--job", "j", "--nodes", "three"], ["--nodes", "three"]),
        (["cluster", "up", "--dir", "x", "--job", "j", "--nodes", "0"], ["--nodes", "0"]),
        (["feed", "--cluster", "x", "--batch-size", "1k", "f"], ["--batch-size", "1k"]),
        (["tail", "--cluster", "x", "--count", "-1"], ["--count", "-1"]),
        (["cluster", "down", "--dir", "x", "--grace-s", "soon"], ["--grace-s", "soon"]),
        (["cluster", "up", "--dir", "x", "--job", "j", "--rate-cap", "0"], ["--rate-cap", "0"]),
        (["cluster", "up", "--dir", "x", "--job", "j", "--rate-cap", "fast"], ["--rate-cap"]),
        (["autoscale", "run", "--cluster", "x", "--policy", "hpa"], ["--policy", "hpa"]),
    ],
)
def test_a_bad_numeric_flag_names_the_flag_and_the_value(
    args: list[str], fragments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("smr: error: ")
    for fragment in fragments:
        assert fragment in err[0]


def test_top_level_help_promises_only_what_the_engine_does_today(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--help"])
    out = capsys.readouterr().out
    assert "fault-tolerant" in out
    # Ranges move and nodes join and leave while a job runs: the commands it names exist.
    assert "smr move" in out and "smr scale out" in out and "smr scale in" in out
    assert "move" in main_group.commands and "scale" in main_group.commands
    assert {"in", "out"} <= set(main_group.commands["scale"].commands)  # type: ignore[attr-defined]
