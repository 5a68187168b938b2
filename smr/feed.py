"""``smr feed``: stream files or standard input through a job's ``map`` into the ring.

Each line (without its line ending) is one record. ``.gz`` files are read decompressed;
text is UTF-8, with undecodable bytes replaced (U+FFFD) rather than failing the feed. A
record's emits take effect only if its ``map`` returns normally: a record whose ``map``
raises is reported with its file and line, counted, and contributes nothing.
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
import select
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from smr.api import Job
from smr.emitter import Emitter

# Map failures reported one by one; the rest are only counted.
MAP_FAILURES_REPORTED_MAX: Final = 5
# Standard input that pauses this long gets its open batches sent, so a slow producer's
# tuples do not wait for a full batch.
STDIN_LINGER_MS: Final = 100


@dataclass
class FeedResult:
    """What a feed did."""

    records: int
    tuples_emitted: int
    tuples_sent: int
    map_failures: int
    elapsed_s: float

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


def _open_text(path: str) -> tuple[IO[str], IO[bytes]]:
    """The file as text, and the raw file whose position measures progress."""
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    binary: IO[bytes] = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw  # type: ignore[assignment]
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace"), raw


def _stdin_lines(on_idle: Callable[[], None]) -> Iterator[str]:
    """Lines of standard input; ``on_idle`` runs whenever input pauses."""
    fd = sys.stdin.fileno()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    newlines = io.IncrementalNewlineDecoder(None, translate=True)
    pending = ""
    while True:
        ready, _, _ = select.select([fd], [], [], STDIN_LINGER_MS / 1000)
        if not ready:
            on_idle()
            continue
        chunk = os.read(fd, 1 << 16)
        pending += newlines.decode(utf8.decode(chunk, final=not chunk), final=not chunk)
        *lines, pending = pending.split("\n")
        yield from lines
        if not chunk:
            if pending:
                yield pending
            return


def feed(
    job: Job,
    emitter: Emitter,
    paths: Sequence[str],
    report: Callable[[str], None],
    progress: Callable[[int], None] | None = None,
) -> FeedResult:
    """Run ``job.map`` over every line of ``paths`` and emit into ``emitter``, then wait
    until every tuple is acked (``emitter.close``). ``progress`` gets bytes read so far."""
    started = time.monotonic()
    records = 0
    failures = 0
    pairs: list[tuple[Any, Any]] = []
    collect = pairs.append
    emit = emitter.emit
    user_map = job.map

    def collect_pair(key: Any, value: Any) -> None:
        collect((key, value))

    done_bytes = 0
    for path in paths:
        raw: IO[bytes] | None = None
        if path == "-":
            lines: Iterator[str] | IO[str] = _stdin_lines(emitter.flush)
        else:
            lines, raw = _open_text(path)
        try:
            for number, line in enumerate(lines, 1):
                records += 1
                try:
                    user_map(line.rstrip("\r\n"), collect_pair)
                except Exception as error:
                    failures += 1
                    if failures <= MAP_FAILURES_REPORTED_MAX:
                        report(f"map failed at {path}:{number}: {type(error).__name__}: {error}")
                    pairs.clear()
                    continue
                for key, value in pairs:
                    emit(key, value)
                pairs.clear()
                if progress is not None and raw is not None and number % 4096 == 0:
                    progress(done_bytes + raw.tell())
        finally:
            if raw is not None:
                done_bytes += raw.tell()
                raw.close()
        if progress is not None:
            progress(done_bytes)
    if failures > MAP_FAILURES_REPORTED_MAX:
        report(f"... {failures - MAP_FAILURES_REPORTED_MAX} more map failures")
    emitter.close()
    return FeedResult(
        records, emitter.tuples_emitted, emitter.tuples_sent, failures, time.monotonic() - started
    )


def total_bytes(paths: Sequence[str]) -> int | None:
    """The bytes ``feed`` will read from ``paths`` (None when standard input is among them)."""
    if "-" in paths:
        return None
    return sum(Path(p).stat().st_size for p in paths)
