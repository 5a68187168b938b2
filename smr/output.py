"""Where reducers' emits go: a JSON-lines file per node and a publish stream.

Each record is one line ``{"node": ID, "key": K, "value": V}``. The file is the complete
record of a node's output (appended, flushed every tick and on shutdown); the publish stream
(``smr tail``) carries the same lines for watching and, by PUB's contract, skips messages for
subscribers that fall behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Final

from ring.ids import NodeId
from smr.protocol import Output, encode

# Lines kept in memory before a forced write; the file's own buffer does the rest.
PENDING_LINES_MAX: Final = 10_000
# A read of the file (``smr.connect``'s subscribe) returns at most this much, or one line.
READ_BYTES_MAX: Final = 1 << 20


class OutputGone(Exception):
    """A read asked for an offset past the end of the output file (a file that was replaced
    or truncated since the reader's position was taken)."""


class OutputSink:
    """Collects emitted ``(key, value)`` records and writes them to file and stream."""

    def __init__(
        self, node_id: str, path: Path, publish: Callable[[Sequence[bytes]], None]
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._node_id = node_id
        self._file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held open
        self._publish = publish
        self._pending: list[str] = []
        self.records_written = 0

    def extend(self, records: Sequence[tuple[Any, Any]]) -> None:
        """Add records; values that JSON cannot encode are written as their ``str()``."""
        node = self._node_id
        for key, value in records:
            self._pending.append(
                json.dumps({"node": node, "key": key, "value": value}, default=str)
            )
        if len(self._pending) >= PENDING_LINES_MAX:
            self.flush()

    def flush(self) -> None:
        """Write pending lines to the file and the stream, and flush the file."""
        if not self._pending:
            return
        text = "\n".join(self._pending) + "\n"
        self._file.write(text)
        self._file.flush()
        self._publish(encode(Output(NodeId(self._node_id), len(self._pending), text.encode())))
        self.records_written += len(self._pending)
        self._pending.clear()

    def read(self, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """The whole lines written from byte ``offset`` of the file, about ``max_bytes`` of
        them (at least one line if there is one, capped at ``READ_BYTES_MAX``; none for 0),
        the offset after them, and the file's size. Lines still pending are not read: they
        are written within a tick. OutputGone if ``offset`` is past the end of the file."""
        with open(self.path, "rb") as file:
            size = file.seek(0, 2)
            if offset > size:
                raise OutputGone(
                    f"output offset {offset} is past the end of {self.path.name} ({size} bytes)"
                )
            if max_bytes <= 0:
                return b"", offset, size
            max_bytes = min(max_bytes, READ_BYTES_MAX)
            file.seek(offset)
            data = file.read(max_bytes)
            end = data.rfind(b"\n") + 1
            while end == 0 and len(data) < size - offset:
                # A line longer than max_bytes: read on to its end.
                more = file.read(max_bytes)
                data += more
                end = data.rfind(b"\n") + 1
        return data[:end], offset + end, size

    def close(self) -> None:
        """Flush and close the file."""
        self.flush()
        self._file.close()
