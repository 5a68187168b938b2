"""Output files as readers see them: each origin once, torn lines of killed nodes skipped and
counted, and a node that starts again on a torn file writes whole lines after it."""

from __future__ import annotations

import json
from pathlib import Path

from smr.output.files import OutputFiles, OutputSink
from smr.output.records import Repeats


def _line(node: str, key: str, value: int, origin: list[object] | None) -> str:
    record: dict[str, object] = {"node": node, "key": key, "value": value}
    if origin is not None:
        record["origin"] = origin
    return json.dumps(record) + "\n"


def test_each_origin_is_read_once_across_files(tmp_path: Path) -> None:
    (tmp_path / "n0.jsonl").write_text(
        _line("n0", "a", 1, ["m", 3, 7, 0]) + _line("n0", "b", 2, ["m", 3, 8, 0])
    )
    # n1 took over and replayed seq 8 (the same origin), then went on; a line of an old
    # file without origins is always new.
    (tmp_path / "n1.jsonl").write_text(
        _line("n1", "b", 2, ["m", 3, 8, 0])
        + _line("n1", "b", 5, ["m", 3, 8, 1])
        + _line("n1", "c", 1, None)
    )
    files = OutputFiles(tmp_path)
    records = list(files)
    assert [(r["key"], r["value"]) for r in records] == [("a", 1), ("b", 2), ("b", 5), ("c", 1)]
    assert (files.repeats, files.torn) == (1, 0)


def test_torn_lines_are_skipped_counted_and_ended_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "n0.jsonl"
    path.write_text(_line("n0", "a", 1, ["m", 0, 1, 0]) + '{"node": "n0", "key": "b", "va')
    files = OutputFiles(tmp_path)
    assert [r["key"] for r in files] == ["a"] and files.torn == 1
    # The node starts again on the same file: its first line does not join the torn one.
    sink = OutputSink("n0", path, lambda frames: None)
    sink.extend([("c", 3, "m", 0, 2, 0)])
    assert sink.close()
    files = OutputFiles(tmp_path)
    assert [r["key"] for r in files] == ["a", "c"] and files.torn == 1


def test_repeats_remember_origins_as_values_not_as_lists() -> None:
    repeats = Repeats()
    assert not repeats.is_repeat(["m", 1, 2, 0])
    assert repeats.is_repeat(("m", 1, 2, 0))
    assert not repeats.is_repeat(None) and not repeats.is_repeat(None)
    assert repeats.repeats == 1
