"""What a generation must hold (``checkpoint.manifest``): a whole generation verifies, one
with more checkpoints appended than its manifest says too, and any cut, removal or changed
byte of a file it describes is named, never taken for a whole state."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smr.checkpoint.manifest import (
    FileFacts,
    Manifest,
    ManifestError,
    decode_log_entry,
    encode_log_entry,
    log_shortfall,
    numbering_shortfall,
    snapshot_shortfall,
)
from smr.checkpoint.records import decode_records, encode_record

checkpoints = st.lists(st.lists(st.binary(max_size=40), max_size=3), max_size=6)


def generation(
    snapshot: bytes, entries: list[list[bytes]], first: int = 1
) -> tuple[Manifest, bytes, list[int]]:
    """A manifest built as a node builds it (a checkpoint at a time), its log, and the
    entries' record boundaries (the bytes before each, and the log's length)."""
    manifest = Manifest(7, 0, first - 1, FileFacts.of(snapshot), FileFacts.of(b""))
    log = b""
    boundaries = [0]
    for number, parts in enumerate(entries, start=first):
        record = encode_record(encode_log_entry(number, parts))
        manifest = manifest.with_checkpoint(record, number, b"view %d" % number)
        log += record
        boundaries.append(len(log))
    return manifest, log, boundaries


@given(st.binary(min_size=1, max_size=200), checkpoints, st.integers(1, 10**6))
def test_a_whole_generation_verifies(
    snapshot: bytes, entries: list[list[bytes]], first: int
) -> None:
    manifest, log, _ = generation(snapshot, entries, first)
    assert manifest.checkpoints == len(entries)
    assert manifest.last_checkpoint == first - 1 + len(entries)
    assert snapshot_shortfall(manifest.snapshot, snapshot) is None
    assert log_shortfall(manifest, log) is None
    decoded = [decode_log_entry(payload) for payload in decode_records(log)]
    assert [parts for _, parts in decoded] == entries
    assert numbering_shortfall(manifest, first, [number for number, _ in decoded]) is None
    assert Manifest.decode(manifest.encode()) == manifest


@given(st.binary(min_size=1, max_size=100), checkpoints, checkpoints.filter(bool))
def test_checkpoints_appended_after_the_manifest_still_verify(
    snapshot: bytes, entries: list[list[bytes]], more: list[list[bytes]]
) -> None:
    manifest, _, _ = generation(snapshot, entries)
    _, longer, _ = generation(snapshot, entries + more)
    assert log_shortfall(manifest, longer) is None
    numbers = [decode_log_entry(payload)[0] for payload in decode_records(longer)]
    assert numbering_shortfall(manifest, 1, numbers) is None


@given(st.binary(min_size=1, max_size=100), checkpoints.filter(bool), st.data())
def test_any_cut_or_removal_of_the_log_is_named(
    snapshot: bytes, entries: list[list[bytes]], data: st.DataObject
) -> None:
    manifest, log, boundaries = generation(snapshot, entries)
    assert log_shortfall(manifest, None) == (
        f"is missing: it held {len(entries)} checkpoints ({len(log)} bytes)"
    )
    cut = data.draw(st.integers(0, len(log) - 1))
    said = log_shortfall(manifest, log[:cut])
    whole = sum(1 for end in boundaries[1:] if end <= cut)
    assert (
        said == f"holds {whole} of {len(entries)} checkpoints (cut after byte {cut} of {len(log)})"
    )


@given(st.binary(min_size=1, max_size=100), checkpoints.filter(bool), st.data())
def test_any_changed_byte_of_a_described_file_is_named(
    snapshot: bytes, entries: list[list[bytes]], data: st.DataObject
) -> None:
    manifest, log, _ = generation(snapshot, entries)
    changed = bytearray(log)
    changed[data.draw(st.integers(0, len(log) - 1))] ^= data.draw(st.integers(1, 255))
    assert "checksum" in (log_shortfall(manifest, bytes(changed)) or "")
    changed = bytearray(snapshot)
    changed[data.draw(st.integers(0, len(snapshot) - 1))] ^= data.draw(st.integers(1, 255))
    assert "checksum" in (snapshot_shortfall(manifest.snapshot, bytes(changed)) or "")


@given(st.binary(min_size=1, max_size=100), st.data())
def test_any_cut_or_removal_of_the_snapshot_is_named(snapshot: bytes, data: st.DataObject) -> None:
    facts = FileFacts.of(snapshot)
    assert (
        snapshot_shortfall(facts, None)
        == f"is missing (the manifest describes {len(snapshot)} bytes)"
    )
    cut = data.draw(st.integers(0, len(snapshot) - 1))
    assert snapshot_shortfall(facts, snapshot[:cut]) == (
        f"holds {cut} bytes, its manifest says {len(snapshot)}"
    )


@given(checkpoints.filter(lambda entries: len(entries) >= 2), st.data())
def test_an_entry_missing_from_the_middle_is_named(
    entries: list[list[bytes]], data: st.DataObject
) -> None:
    manifest, _, _ = generation(b"s", entries)
    numbers = list(range(1, len(entries) + 1))
    del numbers[data.draw(st.integers(0, len(numbers) - 2))]
    assert "expected" in (numbering_shortfall(manifest, 1, numbers) or "")
    assert numbering_shortfall(manifest, 1, list(range(1, len(entries)))) == (
        f"holds {len(entries) - 1} of {len(entries)} checkpoints"
    )


def test_an_empty_log_described_empty_lacks_nothing() -> None:
    manifest, _, _ = generation(b"snapshot", [])
    assert log_shortfall(manifest, None) is None
    assert log_shortfall(manifest, b"") is None


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"format": 99}',
        b'{"format": 1, "generation": -1, "checkpoints": 0, "last_checkpoint": 0, '
        b'"snapshot": [1, 2], "log": [0, 0]}',
        b'{"format": 1, "generation": 1, "checkpoints": true, "last_checkpoint": 0, '
        b'"snapshot": [1, 2], "log": [0, 0]}',
    ],
)
def test_what_is_not_a_manifest_is_refused(data: bytes) -> None:
    with pytest.raises(ManifestError):
        Manifest.decode(data)


@pytest.mark.parametrize("payload", [b"\xc1", encode_record(b"x"), b"\x92\x01\x91\x01"])
def test_what_is_not_a_log_entry_is_refused(payload: bytes) -> None:
    with pytest.raises(ManifestError, match="not a log entry"):
        decode_log_entry(payload)


def test_a_manifest_records_the_view_of_its_last_checkpoint_and_reads_format_1() -> None:
    manifest, _, _ = generation(b"snapshot", [[b"a"], [b"b"]])
    assert manifest.view == b"view 2"
    assert Manifest.decode(manifest.encode()).view == b"view 2"
    # A manifest written before views were recorded (format 1) reads, with no view.
    old = b'{"format": 1, "generation": 3, "checkpoints": 0, "last_checkpoint": 4, ' + (
        b'"snapshot": [10, 5], "log": [0, 0]}'
    )
    assert Manifest.decode(old) == Manifest(3, 0, 4, FileFacts(10, 5), FileFacts(0, 0))
    with pytest.raises(ManifestError, match="view"):
        Manifest.decode(old.replace(b"}", b', "view": 7}'))


def test_a_manifest_says_whether_its_node_stopped_cleanly_and_reads_without_the_mark() -> None:
    manifest, _, _ = generation(b"snapshot", [[b"a"]])
    assert not manifest.stopped
    stopped = replace(manifest, stopped=True)
    assert Manifest.decode(stopped.encode()) == stopped
    # The next checkpoint's manifest clears it: the node served past the stop.
    assert not stopped.with_checkpoint(b"record", manifest.last_checkpoint + 1, b"v").stopped
    # Written before the mark existed: read as not stopped (a restart doubts it, never
    # trusts it).
    old = b'{"format": 2, "generation": 3, "checkpoints": 0, "last_checkpoint": 4, ' + (
        b'"snapshot": [10, 5], "log": [0, 0], "view": ""}'
    )
    assert not Manifest.decode(old).stopped
    with pytest.raises(ManifestError, match="stopped"):
        Manifest.decode(old.replace(b"}", b', "stopped": 1}'))
