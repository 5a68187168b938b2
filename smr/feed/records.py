"""``smr feed``: stream files or standard input through a job's ``map`` into the ring.

Each line (without its line ending) is one record. ``.gz`` files are read decompressed;
text is UTF-8, with undecodable bytes replaced (U+FFFD) rather than failing the feed. A
record's emits take effect only if all of them are good, and none is sent before: a record
is reported with its file and line, counted, and contributes nothing when

- its ``map`` raises;
- one of its emits cannot travel (a key that is not str or int, a value that does not
  encode, a tuple over the batch byte budget; :func:`smr.values.row_bytes`);
- it is longer than ``max_record_bytes``: it is never read whole, only skipped to the next
  newline, so one huge line cannot take the feeder's memory.

The feed goes on after each; its result counts them, and ``smr feed`` then exits 1.
"""

from __future__ import annotations

import gzip
import os
import select
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from smr.api import Job
from smr.mapper.emitter import Emitter
from smr.values import EmitError
from smr.windows.stamps import stamped_mapper

# Failed records (map raised, bad emit, too long) reported one by one; the rest are counted.
MAP_FAILURES_REPORTED_MAX: Final = 5
# A longer line is a failed record: read in pieces and skipped, never held whole.
MAX_RECORD_BYTES_DEFAULT: Final = 1 << 20
# What is read at once while skipping the rest of a line over the bound.
SKIP_READ_BYTES: Final = 1 << 16
# Records a job's map_batch gets at once: enough that its per-call costs (and, with
# aggregators, one fold per distinct key) are spread thin, few enough to stay small in memory.
MAP_BATCH_RECORDS: Final = 10_000
# Standard input that pauses this long gets its open batches sent, so a slow producer's
# tuples do not wait for a full batch.
STDIN_LINGER_MS: Final = 100


@dataclass
class FeedPosition:
    """How far a feed got: updated as it reads, reported when it stops early."""

    path: str = ""
    line: int = 0
    records: int = 0


@dataclass
class FeedResult:
    """What a feed did."""

    records: int
    tuples_emitted: int
    tuples_sent: int
    map_failures: int
    elapsed_s: float
    emit_failures: int = 0
    """Records dropped because one of their emits could not travel."""
    records_too_long: int = 0
    """Lines over ``max_record_bytes``, skipped."""

    @property
    def failed_records(self) -> int:
        """Records that contributed nothing: map raised, a bad emit, or too long."""
        return self.map_failures + self.emit_failures + self.records_too_long

    @property
    def tuples_per_s(self) -> float:
        return self.tuples_emitted / self.elapsed_s if self.elapsed_s > 0 else 0.0


class InputError(Exception):
    """An input file is missing or unreadable."""


def check_inputs(paths: Sequence[str]) -> None:
    """Fail early, naming the file, if any input is missing or unreadable."""
    for path in paths:
        if path == "-":
            continue
        if os.path.isdir(path):
            raise InputError(
                f"input {path!r} is a directory; smr feed takes files (pass {path}/* for its "
                "files, or stream the directory with smr spark-feed --input)"
            )
        if not os.path.isfile(path):
            raise InputError(f"input file {path!r} does not exist")
        if not os.access(path, os.R_OK):
            raise InputError(f"input file {path!r} is not readable")


def _decode(line: bytes) -> str:
    return line.decode("utf-8", errors="replace")


def _file_records(binary: IO[bytes], max_record_bytes: int) -> Iterator[str | None]:
    """Lines of a file as text; None for a line over ``max_record_bytes`` (its end skipped in
    pieces of ``SKIP_READ_BYTES``, so memory stays bounded whatever the line's length)."""
    readline = binary.readline
    while True:
        line = readline(max_record_bytes + 1)
        if not line:
            return
        if len(line) > max_record_bytes and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = readline(SKIP_READ_BYTES)
            yield None
        else:
            yield _decode(line)


def _open_records(path: str, max_record_bytes: int) -> tuple[Iterator[str | None], IO[bytes]]:
    """The file's records (see ``_file_records``), and the raw file whose position measures
    progress."""
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    binary: IO[bytes] = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw  # type: ignore[assignment]
    return _file_records(binary, max_record_bytes), raw


def _stdin_records(on_idle: Callable[[], None], max_record_bytes: int) -> Iterator[str | None]:
    """Lines of standard input as text, None for one over ``max_record_bytes`` (dropped as
    it arrives, never held whole); ``on_idle`` runs whenever input pauses."""
    fd = sys.stdin.fileno()
    pending = b""
    skipping = False  # inside a line already reported too long
    while True:
        ready, _, _ = select.select([fd], [], [], STDIN_LINGER_MS / 1000)
        if not ready:
            on_idle()
            continue
        chunk = os.read(fd, SKIP_READ_BYTES)
        if not chunk:
            if pending and not skipping:
                yield _decode(pending)
            return
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if skipping:
                skipping = False  # the end of the long line
            elif len(line) > max_record_bytes:
                yield None
            else:
                yield _decode(line)
        if len(pending) > max_record_bytes:
            if not skipping:
                yield None
            skipping = True
            pending = b""


def feed(
    job: Job,
    emitter: Emitter,
    paths: Sequence[str],
    report: Callable[[str], None],
    progress: Callable[[int], None] | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES_DEFAULT,
    position: FeedPosition | None = None,
    *,
    finished: bool = False,
) -> FeedResult:
    """Run ``job.map`` over every line of ``paths`` and emit into ``emitter``, then wait
    until every tuple is acked (``emitter.close``). ``progress`` gets bytes read so far;
    ``position``, if given, holds the file and line of the last record read. ``finished``:
    the mapper id is the feed's own (never given to other tuples), so the nodes are told it
    finished and retire its dedup memory (``smr.mapper.finish``).

    Per record: 1. read it (bounded); 2. run ``map``, collecting its emits; 3. only if
    ``map`` returned, hand them to the emitter, which checks them all before it emits any
    (``Emitter.emit_record``). A job with ``map_batch`` takes ``MAP_BATCH_RECORDS`` records
    at a time (fewer at the end of a file, or when standard input pauses) through steps 2
    and 3 together: they all contribute, or, if ``map_batch`` raises or one of their
    tuples cannot travel, none does and each counts as failed."""
    started = time.monotonic()
    feeding = _Feeding(job, emitter, report, position or FeedPosition(), max_record_bytes)
    done_bytes = 0
    for path in paths:
        raw: IO[bytes] | None = None
        if path == "-":
            lines = _stdin_records(feeding.on_idle, max_record_bytes)
        else:
            lines, raw = _open_records(path, max_record_bytes)
        feeding.position.path = path
        try:
            feeding.feed_lines(path, lines, raw, done_bytes, progress)
        finally:
            if raw is not None:
                done_bytes += raw.tell()
                raw.close()
        if progress is not None:
            progress(done_bytes)
    unreported = feeding.reported - MAP_FAILURES_REPORTED_MAX
    if unreported > 0:
        report(f"... {unreported} more failures")
    emitter.close(finished=finished)
    return FeedResult(
        feeding.records,
        emitter.tuples_emitted + feeding.folded_away,
        emitter.tuples_sent,
        feeding.counts["map"],
        time.monotonic() - started,
        emit_failures=feeding.counts["emit"],
        records_too_long=feeding.counts["long"],
    )


class _Feeding:
    """One feed's records through the job's map into the emitter: the failed records counted
    by kind (``map``, ``emit``, ``long``) and the first ones reported, the pairs of the
    record being mapped, and with ``map_batch`` the records waiting to be mapped together."""

    def __init__(
        self,
        job: Job,
        emitter: Emitter,
        report: Callable[[str], None],
        position: FeedPosition,
        max_record_bytes: int,
    ) -> None:
        self.emitter = emitter
        self.report = report
        self.position = position
        self.max_record_bytes = max_record_bytes
        # A windowed job's values travel stamped with event time and the watermark.
        self.user_map = stamped_mapper(job) if job.windowed else job.mapper()
        self.batch_map = None if job.windowed else job.batch_mapper()
        self.records = 0
        self.counts = {"map": 0, "emit": 0, "long": 0}
        self.reported = 0
        self.pairs: list[tuple[Any, Any]] = []
        # With map_batch: records waiting to be mapped together, with the line the first
        # came from; tuples map_batch produced that its aggregators folded before they
        # reached the emitter.
        self.chunk: list[str] = []
        self.chunk_start = FeedPosition()
        self.folded_away = 0

    def failed(self, kind: str, message: str, records_failed: int = 1) -> None:
        """Count ``records_failed`` records of ``kind``; report the first few; drop the pairs
        of the record being mapped."""
        self.counts[kind] += records_failed
        self.reported += 1
        if self.reported <= MAP_FAILURES_REPORTED_MAX:
            self.report(message)
        self.pairs.clear()

    def map_chunk(self) -> None:
        """Map the waiting records with ``map_batch`` and emit all their tuples, or none."""
        chunk = self.chunk
        if not chunk:
            return
        assert self.batch_map is not None
        where = f"{self.chunk_start.path}:{self.chunk_start.line}-{self.position.line}"
        try:
            keys, values, produced = self.batch_map(chunk)
        except Exception as error:
            message = f"map_batch failed at {where}: {type(error).__name__}: {error}"
            self.failed("map", message, len(chunk))
        else:
            try:
                self.emitter.emit_many(keys, values)
                self.folded_away += produced - len(keys)
            except EmitError as error:
                self.failed("emit", f"bad emit in the records at {where}: {error}", len(chunk))
        chunk.clear()

    def on_idle(self) -> None:
        """Input paused: map the waiting records and send the open batches."""
        self.map_chunk()
        self.emitter.flush()

    def feed_lines(
        self,
        path: str,
        lines: Iterator[str | None],
        raw: IO[bytes] | None,
        done_bytes: int,
        progress: Callable[[int], None] | None,
    ) -> None:
        """Steps 1-3 for each record of one input, ``raw`` its file (None for standard
        input) after ``done_bytes`` of the inputs before it; the records waiting for
        ``map_batch`` mapped at its end."""
        position, pairs, chunk, batch_map = self.position, self.pairs, self.chunk, self.batch_map
        collect, user_map, emit_record = pairs.append, self.user_map, self.emitter.emit_record

        def collect_pair(key: Any, value: Any) -> None:
            collect((key, value))

        for number, line in enumerate(lines, 1):
            self.records += 1
            position.line = number
            position.records = self.records
            if line is None:
                self.failed(
                    "long",
                    f"record at {path}:{number} is longer than {self.max_record_bytes} bytes "
                    "(--max-record-bytes): skipped",
                )
                continue
            if batch_map is not None:
                if not chunk:
                    self.chunk_start.path, self.chunk_start.line = path, number
                chunk.append(line.rstrip("\r\n"))
                if len(chunk) >= MAP_BATCH_RECORDS:
                    self.map_chunk()
                continue
            try:
                user_map(line.rstrip("\r\n"), collect_pair)
            except Exception as error:
                self.failed(
                    "map", f"map failed at {path}:{number}: {type(error).__name__}: {error}"
                )
                continue
            try:
                emit_record(pairs)
            except EmitError as error:
                self.failed("emit", f"bad emit at {path}:{number}: {error}")
                continue
            pairs.clear()
            if progress is not None and raw is not None and number % 4096 == 0:
                progress(done_bytes + raw.tell())
        self.map_chunk()


def total_bytes(paths: Sequence[str]) -> int | None:
    """The bytes ``feed`` will read from ``paths`` (None when standard input is among them)."""
    if "-" in paths:
        return None
    return sum(Path(p).stat().st_size for p in paths)
