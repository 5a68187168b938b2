"""``smr feed`` in-process: a record with a bad emit is dropped whole and counted like a map
error; a line over the record bound is skipped without being read whole."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from smr.api import Job
from smr.checkpoint.ids import MapperId
from smr.feed.records import _file_records, feed
from smr.mapper.emitter import Emitter
from smr.ring.ids import NodeId, Token
from smr.ring.view import Member, Status, View
from smr.wire.batch_body import decode_batch_body
from tests.smr.links import AckingTransport

SLOT_BITS = 6


def _split_with_bad_emits(line: str, emit: Any) -> None:
    for word in line.split():
        if word == "TUPLEKEY":
            emit((1, 2), 1)
        elif word == "SETVALUE":
            emit("w", {1})
        elif word == "MAPFAIL":
            raise RuntimeError("marker")
        else:
            emit(word, 1)


def _run(
    tmp_path: Path, text: str, job: Job | None = None, **options: Any
) -> tuple[Any, list[str], list[Any]]:
    """Feed ``text`` through ``job`` (the bad-emit job by default) into an acking emitter;
    the result, the reports and every key sent."""
    path = tmp_path / "in.txt"
    path.write_text(text)
    transport = AckingTransport()
    view = View([Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1)])
    emitter = Emitter(view, SLOT_BITS, MapperId("m"), transport=transport)
    job = job or Job("bad", map=_split_with_bad_emits, reduce=lambda k, v, s, e: None)
    reports: list[str] = []
    result = feed(job, emitter, [str(path)], reports.append, **options)
    keys = []
    for count, body in transport.bodies:
        keys.extend(decode_batch_body(body, count, 1 << SLOT_BITS).keys)
    return result, reports, keys


def test_a_record_with_a_bad_emit_is_dropped_whole_and_reported_with_its_line(
    tmp_path: Path,
) -> None:
    result, reports, keys = _run(tmp_path, "a b\nc TUPLEKEY d\ne SETVALUE\nf MAPFAIL\ng\n")
    assert sorted(keys) == ["a", "b", "g"]
    assert (result.records, result.emit_failures, result.map_failures) == (5, 2, 1)
    assert result.failed_records == 3
    assert reports[0].startswith(f"bad emit at {tmp_path / 'in.txt'}:2: key (1, 2) is a tuple")
    assert reports[1].startswith(f"bad emit at {tmp_path / 'in.txt'}:3: value {{1}}")


def test_a_line_over_the_bound_is_skipped_and_counted(tmp_path: Path) -> None:
    result, reports, keys = _run(tmp_path, "a\n" + "x" * 5000 + "\nb\n", max_record_bytes=100)
    assert sorted(keys) == ["a", "b"]
    assert (result.records, result.records_too_long) == (3, 1)
    assert reports == [
        f"record at {tmp_path / 'in.txt'}:2 is longer than 100 bytes (--max-record-bytes): skipped"
    ]


class _CountingReads(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.largest_read = 0

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        self.largest_read = max(self.largest_read, len(line))
        return line


def test_a_long_line_is_never_read_whole() -> None:
    data = _CountingReads(b"a\n" + b"y" * 3_000_000 + b"\nb\r\nlast")
    records = list(_file_records(data, 1000))
    assert records == ["a\n", None, "b\r\n", "last"]
    assert data.largest_read <= 1 << 16


def _split_many(lines: list[str]) -> tuple[list[Any], list[int]]:
    if any("MAPFAIL" in line for line in lines):
        raise RuntimeError("marker")
    keys: list[Any] = [(1, 2) if w == "TUPLEKEY" else w for line in lines for w in line.split()]
    return keys, [1] * len(keys)


def _run_batched(
    tmp_path: Path, text: str, monkeypatch: Any, chunk: int
) -> tuple[Any, list[str], list[Any]]:
    monkeypatch.setattr("smr.feed.records.MAP_BATCH_RECORDS", chunk)
    job = Job("many", map_batch=_split_many, reduce=lambda k, v, s, e: None)
    return _run(tmp_path, text, job, max_record_bytes=100)


def test_map_batch_takes_records_in_chunks_and_a_failed_chunk_fails_all_its_records(
    tmp_path: Path, monkeypatch: Any
) -> None:
    text = "a b\nc\n" + "x" * 500 + "\nd MAPFAIL\ne\nf TUPLEKEY\ng\nh\n"
    result, reports, keys = _run_batched(tmp_path, text, monkeypatch, chunk=2)
    # Chunks of two records (the long line is skipped and in none): [a b, c], [d MAPFAIL, e]
    # (map_batch raised), [f TUPLEKEY, g] (a key that cannot travel), [h].
    assert sorted(keys) == ["a", "b", "c", "h"]
    assert (result.records, result.records_too_long) == (8, 1)
    assert (result.map_failures, result.emit_failures) == (2, 2)
    assert result.tuples_emitted == 4
    path = tmp_path / "in.txt"
    assert f"map_batch failed at {path}:4-5: RuntimeError: marker" in reports
    assert any(r.startswith(f"bad emit in the records at {path}:6-7: key (1, 2)") for r in reports)


def test_a_fast_word_count_feed_reports_the_words_before_folding(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from examples.wordcount import fast

    monkeypatch.setattr("smr.feed.records.MAP_BATCH_RECORDS", 3)
    path = tmp_path / "in.txt"
    path.write_text("the cat the\nthe hat\na cat\nthe end\n")
    transport = AckingTransport()
    view = View([Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1)])
    emitter = Emitter(view, SLOT_BITS, MapperId("m"), transport=transport, combine=fast.combine)
    result = feed(fast, emitter, [str(path)], lambda line: None)
    sent: dict[str, int] = {}
    for count, body in transport.bodies:
        columns = decode_batch_body(body, count, 1 << SLOT_BITS)
        for key, value in zip(columns.keys, columns.values, strict=True):
            sent[key] = sent.get(key, 0) + value
    assert sent == {"the": 4, "cat": 2, "hat": 1, "a": 1, "end": 1}
    assert result.tuples_emitted == 9
    assert result.tuples_sent < 9
