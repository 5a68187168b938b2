"""Where reducers' emits go: a JSON-lines file per node, a publish stream, and optionally a
PostgreSQL table (``smr.output.table``).

Each record is one line ``{"node": ID, "key": K, "value": V, "origin": [MAPPER, SLOT, SEQ,
I]}``: the origin names the tuple whose reduce call emitted it (its mapper, slot and seq)
and which of that call's emits it is. A tuple is applied once, but after a takeover the new
primary replays the tuples its predecessor applied since its last checkpoint, and their
emits come again, under the same origins: readers drop the repeats by origin
(:class:`Repeats`), and the table sink never writes them.

The file is the complete record of a node's output: appended, flushed every tick, on
shutdown, before a finished mapper's notice is answered (so a feed's output is in the files
when ``smr feed`` exits), and before each checkpoint leaves the node
(:meth:`OutputSink.make_durable`), so a record whose state change a checkpoint carries is
never lost with its node. The publish
stream (``smr tail``) carries the same lines for watching and, by PUB's contract, skips
messages for subscribers that fall behind. Every line is strict JSON, values in their JSON
form (:func:`smr.values.json_form`: bytes as base64, no ``NaN``), which :func:`parse_line`
reverses.

A node reads its own file for a subscriber, and the file of another node that its disk
holds beside its own (a local cluster's directory, a volume the nodes share), so that what a
dead node wrote can still be read (:meth:`OutputSink.read_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from smr.output.records import Emitted, Repeats, parse_line, record_line
from smr.ring.ids import NodeId
from smr.wire.codec import encode
from smr.wire.reads import Output

if TYPE_CHECKING:
    from smr.output.table import TableSink

"""One emitted record: ``(key, value, mapper, slot, seq, index)``, the last four its origin."""
"""``(mapper, slot, seq, index)``: the tuple a record was emitted for, and which emit of it."""

# Lines kept in memory before a forced write; the file's own buffer does the rest.
PENDING_LINES_MAX: Final = 10_000
# A read of the file (``smr.connect``'s subscribe) returns at most this much, or one line.
READ_BYTES_MAX: Final = 1 << 20


class OutputGone(Exception):
    """A read asked for an offset past the end of the output file (a file that was replaced
    or truncated since the reader's position was taken)."""


class OutputMissing(Exception):
    """A read asked for the output file of a node that this node's disk does not hold (the
    nodes do not share a directory), or named a node no file can be named after."""


def output_path(directory: Path, node_id: str) -> Path:
    """The output file of node ``node_id`` in ``directory``: ``ID.jsonl``. OutputMissing
    for an id that is not a plain file name (a path, a hidden name)."""
    if not node_id or node_id.startswith(".") or any(c in node_id for c in "/\\\0"):
        raise OutputMissing(f"no output file is named after node {node_id!r}")
    return directory / f"{node_id}.jsonl"


def read_lines(path: Path, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
    """The whole lines of ``path`` from byte ``offset``, about ``max_bytes`` of them (at
    least one line if there is one, capped at ``READ_BYTES_MAX``; none for 0), the offset
    after them, and the file's size. A line not yet ended (being written, or torn by a kill)
    is not read. OutputGone if ``offset`` is past the end of the file."""
    with open(path, "rb") as file:
        size = file.seek(0, 2)
        if offset > size:
            raise OutputGone(
                f"output offset {offset} is past the end of {path.name} ({size} bytes)"
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


class OutputSink:
    """Collects emitted records and writes them to file and stream, and to the table sink
    if the cluster has one."""

    def __init__(
        self,
        node_id: str,
        path: Path,
        publish: Callable[[Sequence[bytes]], None],
        table: TableSink | None = None,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._node_id = node_id
        self._file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held open
        if self._file.tell() and not _ends_with_newline(path):
            # A node killed mid-write left a torn line: end it, so the next line is whole.
            self._file.write("\n")
        self._publish = publish
        self._pending: list[str] = []
        self.records_written = 0
        self.table = table

    def extend(self, records: Sequence[Emitted]) -> None:
        """Add records, each a line of :func:`record_line`."""
        node = self._node_id
        pending = self._pending
        for key, value, mapper, slot, seq, index in records:
            pending.append(
                record_line(
                    {"node": node, "key": key, "value": value, "origin": [mapper, slot, seq, index]}
                )
            )
        if self.table is not None:
            self.table.add(records)
        if len(self._pending) >= PENDING_LINES_MAX:
            self.flush()

    @property
    def held(self) -> bool:
        """True while the table sink holds more records than it may: the node applies no
        more batches until a commit succeeds (backpressure, never a drop)."""
        return self.table is not None and self.table.backlogged

    def make_durable(self) -> bool:
        """Before a checkpoint leaves the node: the pending lines written to the file, and
        the table's records committed. False if the table could not commit (its records are
        kept, and the checkpoint must wait: it would carry state changes whose output exists
        only in this process)."""
        self.flush()
        if self.table is None:
            return True
        return self.table.commit()

    def flush(self) -> None:
        """Write pending lines to the file and the stream, and flush the file; begin a
        commit of the table's records in the background (also of records that came while
        the last one ran: so they follow within a tick, not at the next checkpoint)."""
        if self._pending:
            text = "\n".join(self._pending) + "\n"
            self._file.write(text)
            self._file.flush()
            self._publish(encode(Output(NodeId(self._node_id), len(self._pending), text.encode())))
            self.records_written += len(self._pending)
            self._pending.clear()
        if self.table is not None:
            self.table.start_commit()

    def read(self, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """This node's output lines from byte ``offset`` (:func:`read_lines`). Lines still
        pending are not read: they are written within a tick."""
        return read_lines(self.path, offset, max_bytes)

    def read_of(self, node_id: str, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """The output lines of node ``node_id`` from byte ``offset``, from its file beside
        this node's own (:func:`read_lines`): what a node that died wrote, for a subscriber
        that cannot reach it. OutputMissing if this node's disk holds no such file."""
        if node_id == self._node_id:
            return self.read(offset, max_bytes)
        path = output_path(self.path.parent, node_id)
        try:
            return read_lines(path, offset, max_bytes)
        except FileNotFoundError:
            raise OutputMissing(
                f"this node's disk holds no output file of {node_id} ({path.parent} has none)"
            ) from None

    def close(self) -> bool:
        """Flush and close the file; commit what the table holds. False if the table did
        not take it (logged)."""
        self.flush()
        self._file.close()
        if self.table is None:
            return True
        committed = self.table.commit()
        self.table.close()
        return committed


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as file:
        file.seek(-1, 2)
        return file.read(1) == b"\n"


class OutputFiles:
    """The records of the output files ``directory/*.jsonl`` (a local cluster's
    ``DIR/output``: its dead nodes' files too), read as an iterator, file by file in name
    order, each origin once. Once iterated, :attr:`repeats` counts the repeats dropped and
    :attr:`torn` the torn lines skipped (a node killed while writing: not records, and
    their tuples' records come again from the node that replayed them)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._repeats = Repeats()
        self.torn = 0

    @property
    def repeats(self) -> int:
        """Records dropped because their origin was read before."""
        return self._repeats.repeats

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for path in sorted(self.directory.glob("*.jsonl")):
            with open(path, encoding="utf-8", errors="replace") as file:
                for line in file:
                    record = parse_line(line)
                    if record is None:
                        self.torn += line.strip() != ""
                    elif not self._repeats.is_repeat(record.get("origin")):
                        yield record
