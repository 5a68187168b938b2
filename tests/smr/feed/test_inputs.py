"""``smr feed`` checks its inputs before it starts, saying what is wrong with each."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.feed.records import InputError, check_inputs


def test_a_directory_given_as_a_feed_input_is_called_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError) as error:
        check_inputs([str(tmp_path)])
    message = str(error.value)
    assert f"{str(tmp_path)!r} is a directory; smr feed takes files" in message
    assert "does not exist" not in message


def test_a_missing_feed_input_is_said_not_to_exist(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        check_inputs([str(tmp_path / "nope.txt")])
