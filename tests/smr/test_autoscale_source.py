"""The source's figures for the autoscale controller (smr.autoscale.source): written whole,
read back while fresh, and a file that is not a report is a clear error."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from smr.autoscale.observe import SourceReport
from smr.autoscale.source import SOURCE_FILE, read_source, write_source


def test_figures_written_are_read_back_while_fresh(tmp_path: Path) -> None:
    assert read_source(tmp_path) is None  # no source writes: the nodes' figures alone
    write_source(tmp_path, 1234.5, 678)
    assert read_source(tmp_path) == SourceReport(1234.5, 678)
    assert sorted(p.name for p in tmp_path.iterdir()) == [SOURCE_FILE]  # no temporary left


def test_a_stale_report_is_not_used(tmp_path: Path) -> None:
    body = {"offered_per_s": 10.0, "backlog_tuples": 5, "at_unix_s": time.time() - 60}
    (tmp_path / SOURCE_FILE).write_text(json.dumps(body))
    assert read_source(tmp_path) is None
    assert read_source(tmp_path, age_s_max=120) == SourceReport(10.0, 5)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[1, 2]",
        '{"offered_per_s": 1.0}',
        '{"offered_per_s": "fast", "backlog_tuples": 1, "at_unix_s": 0}',
        '{"offered_per_s": -1.0, "backlog_tuples": 1, "at_unix_s": 1e12}',
        '{"offered_per_s": NaN, "backlog_tuples": 1, "at_unix_s": 1e12}',
        '{"offered_per_s": 1.0, "backlog_tuples": -5, "at_unix_s": 1e12}',
    ],
)
def test_a_file_that_is_not_a_report_is_a_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / SOURCE_FILE).write_text(text)
    with pytest.raises(ValueError, match=SOURCE_FILE):
        read_source(tmp_path)


@pytest.mark.parametrize(("offered", "backlog"), [(-1.0, 0), (float("nan"), 0), (1.0, -1)])
def test_wrong_figures_are_refused_and_nothing_is_written(
    tmp_path: Path, offered: float, backlog: int
) -> None:
    with pytest.raises(ValueError, match="finite and >= 0"):
        write_source(tmp_path, offered, backlog)
    assert not os.listdir(tmp_path)
