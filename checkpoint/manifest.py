"""What a generation of a node's state files must hold, so that a restore knows it is whole.

A generation (``smr.node.disk``) is a snapshot and the log of checkpoints taken since. A log
cut at a record boundary, emptied or removed, or a snapshot removed, still reads as whole
records: only a description written after them can tell what is missing. The *manifest* is
that description, written last:

- the generation, the number of checkpoints its log holds and the number of the last one;
- for the snapshot and the log, the length in bytes and the CRC-32 of those bytes;
- the view the node held at that checkpoint (opaque bytes here: ``smr.node.disk`` packs and
  unpacks it), so that a restart knows the ring as the node last knew it, not only as it was
  when its own range last changed and the snapshot was written
  (docs/design/architecture.md#restart);
- whether the node stopped cleanly after that checkpoint (``stopped``): one that crashed
  may have been taken over while it was down, one that stopped served nothing past it.

Checkpoints are numbered on the node's disk, one after the other across generations: the
snapshot's header says the number of the last checkpoint folded into it, and each entry of
the log carries its number (``encode_log_entry``), so an entry lost from the middle shows too.

The log only grows: a checkpoint is appended and synced before the manifest describing it
is written, so a crash between the two leaves a log longer than its manifest says, and the
bytes it describes (a prefix) still match. Anything shorter, or other, is damage: `shortfall`
names it and a restore refuses (never a state restored in part).

Pure logic: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from smr.checkpoint.records import RecordError, decode_records

MANIFEST_FORMAT: Final = 2
"""The format of a manifest: 2 records the view; 1 (read, never written) does not. A
manifest of another format is refused."""

_FORMATS_READ: Final = (1, MANIFEST_FORMAT)


class ManifestError(ValueError):
    """A manifest or a log entry that cannot be read; the message says why."""


@dataclass(frozen=True)
class FileFacts:
    """A file as its manifest describes it."""

    length_bytes: int
    crc32: int

    @classmethod
    def of(cls, data: bytes) -> FileFacts:
        """The facts of ``data``, the whole file."""
        return cls(len(data), zlib.crc32(data))

    def grown_by(self, data: bytes) -> FileFacts:
        """The facts of this file with ``data`` appended (the checksum runs on, the file is
        never read again)."""
        return FileFacts(self.length_bytes + len(data), zlib.crc32(data, self.crc32))


@dataclass(frozen=True)
class Manifest:
    """What generation ``generation`` holds (module docstring)."""

    generation: int
    checkpoints: int
    """Checkpoints its log holds."""
    last_checkpoint: int
    """The number of the last of them (the snapshot's own number when the log is empty)."""
    snapshot: FileFacts
    log: FileFacts
    view: bytes = b""
    """The view the node held at its last checkpoint, packed (empty: format 1, none)."""
    stopped: bool = False
    """The node stopped cleanly after its last checkpoint (its stop writes it; the first
    checkpoint after a restart clears it). False where the field is absent."""

    def encode(self) -> bytes:
        """The manifest as bytes (JSON; a file holds it in a checksummed record)."""
        return json.dumps(
            {
                "format": MANIFEST_FORMAT,
                "generation": self.generation,
                "checkpoints": self.checkpoints,
                "last_checkpoint": self.last_checkpoint,
                "snapshot": [self.snapshot.length_bytes, self.snapshot.crc32],
                "log": [self.log.length_bytes, self.log.crc32],
                "view": base64.b64encode(self.view).decode(),
                "stopped": self.stopped,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        """The manifest ``encode`` wrote; ManifestError if it is not one."""
        try:
            fields = json.loads(data)
            if fields["format"] not in _FORMATS_READ:
                raise ManifestError(
                    f"format {fields['format']!r}, this node reads {MANIFEST_FORMAT}"
                )
            view = fields.get("view", "")
            if not isinstance(view, str):
                raise ValueError(f"its view is {view!r:.40}")
            stopped = fields.get("stopped", False)
            if not isinstance(stopped, bool):
                raise ValueError(f"its stopped is {stopped!r:.40}")
            manifest = cls(
                _count(fields["generation"]),
                _count(fields["checkpoints"]),
                _count(fields["last_checkpoint"]),
                FileFacts(*map(_count, fields["snapshot"])),
                FileFacts(*map(_count, fields["log"])),
                base64.b64decode(view, validate=True),
                stopped,
            )
        except (ValueError, KeyError, TypeError, binascii.Error) as error:
            raise ManifestError(f"not a manifest: {error}") from error
        return manifest

    def with_checkpoint(self, entry_record: bytes, number: int, view: bytes) -> Manifest:
        """This manifest after checkpoint ``number`` was appended to the log as
        ``entry_record`` (the record's bytes), taken while the node held ``view``."""
        return Manifest(
            self.generation,
            self.checkpoints + 1,
            number,
            self.snapshot,
            self.log.grown_by(entry_record),
            view,
        )


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{value!r} is not a count")
    return value


def encode_log_entry(number: int, parts: Sequence[bytes]) -> bytes:
    """One checkpoint as a log entry (a record's payload): its number and its parts, the
    encoded deltas a checkpoint ships to the secondaries."""
    entry: bytes = msgpack.packb([number, list(parts)], use_bin_type=True)
    return entry


def decode_log_entry(payload: bytes) -> tuple[int, list[bytes]]:
    """The number and parts of a log entry; ManifestError if it is not one."""
    try:
        number, parts = msgpack.unpackb(payload, raw=False)
        if not isinstance(parts, list) or not all(isinstance(p, bytes) for p in parts):
            raise ValueError("its parts are not a list of bytes")
        return _count(number), parts
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise ManifestError(f"not a log entry: {error}") from error


def snapshot_shortfall(facts: FileFacts, data: bytes | None) -> str | None:
    """What the snapshot ``data`` (None: the file is missing) lacks of what its manifest
    describes; None when it is exactly that."""
    if data is None:
        return f"is missing (the manifest describes {facts.length_bytes} bytes)"
    if len(data) != facts.length_bytes:
        return f"holds {len(data)} bytes, its manifest says {facts.length_bytes}"
    if zlib.crc32(data) != facts.crc32:
        return "does not match its manifest's checksum"
    return None


def log_shortfall(manifest: Manifest, data: bytes | None) -> str | None:
    """What the log ``data`` (None: the file is missing) lacks of what ``manifest``
    describes; None when its first bytes are exactly those described (it may hold more:
    checkpoints appended after the manifest was written)."""
    described = manifest.log
    if described.length_bytes == 0:
        return None  # nothing described: a missing or empty log lacks nothing
    if data is None:
        return (
            f"is missing: it held {manifest.checkpoints} checkpoints "
            f"({described.length_bytes} bytes)"
        )
    if len(data) < described.length_bytes:
        return (
            f"holds {_whole_records(data)} of {manifest.checkpoints} checkpoints "
            f"(cut after byte {len(data)} of {described.length_bytes})"
        )
    if zlib.crc32(memoryview(data)[: described.length_bytes]) != described.crc32:
        return f"does not match its manifest's checksum in its first {described.length_bytes} bytes"
    return None


def numbering_shortfall(manifest: Manifest, first: int, numbers: Sequence[int]) -> str | None:
    """What is wrong with the numbers of a log's entries, in order (the snapshot's number
    plus one is ``first``): None when they follow one another from ``first`` and the
    manifest's last checkpoint is among them where it says."""
    for index, number in enumerate(numbers):
        if number != first + index:
            return f"entry {index + 1} is checkpoint {number}, expected {first + index}"
    if len(numbers) < manifest.checkpoints:
        return f"holds {len(numbers)} of {manifest.checkpoints} checkpoints"
    expected_last = first - 1 + manifest.checkpoints
    if manifest.last_checkpoint != expected_last:
        return (
            f"its manifest says checkpoint {manifest.last_checkpoint} is its last, "
            f"the log has {expected_last} there"
        )
    return None


def _whole_records(data: bytes) -> int:
    """How many whole records ``data`` starts with."""
    try:
        return len(decode_records(data))
    except RecordError as error:
        return len(decode_records(data[: error.offset]))
