"""Checksummed records: how a node's state files hold their snapshots and checkpoints.

A record is a header, then its payload:

1. 4 bytes, the magic ``SMR1``;
2. 8 bytes, the payload's length (big-endian);
3. 4 bytes, the CRC-32 of the payload (big-endian);
4. the payload.

A file is a sequence of records. Reading one never trusts it: a wrong magic, a length past the
end of the file (a write cut short) or a checksum that does not match (bytes changed) raises
``RecordError`` naming the offset, so a damaged file is reported, never loaded.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

MAGIC: Final = b"SMR1"
_HEADER: Final = struct.Struct(">4sQI")
HEADER_BYTES: Final = _HEADER.size
"""Bytes of a record's header."""


class RecordError(ValueError):
    """A record file is damaged: cut short, or its bytes changed; the message says where."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


def encode_record(payload: bytes) -> bytes:
    """``payload`` as one record (header, then payload)."""
    return _HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def decode_records(data: bytes) -> list[bytes]:
    """The payloads of the records ``data`` holds, in order; ``RecordError`` at the first
    damaged one (nothing after it is read: a record's length is only known from its header)."""
    payloads = []
    offset = 0
    view = memoryview(data)
    while offset < len(data):
        if len(data) - offset < HEADER_BYTES:
            raise RecordError(offset, f"a record header cut short ({len(data) - offset} bytes)")
        magic, length, crc = _HEADER.unpack_from(data, offset)
        if magic != MAGIC:
            raise RecordError(offset, f"not a record (magic {bytes(magic)!r})")
        start = offset + HEADER_BYTES
        if start + length > len(data):
            raise RecordError(
                offset, f"a record of {length} bytes cut short at {len(data) - start} bytes"
            )
        payload = bytes(view[start : start + length])
        if zlib.crc32(payload) != crc:
            raise RecordError(offset, "checksum mismatch: the record's bytes changed")
        payloads.append(payload)
        offset = start + length
    return payloads
