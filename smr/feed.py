"""``smr feed``: stream files or standard input through a job's ``map`` into the ring.

Each line (without its line ending) is one record. ``.gz`` files are read decompressed;
text is UTF-8, with undecodable bytes replaced (U+FFFD) rather than failing the feed. A
record's emits take effect only if its ``map`` returns normally: a record whose ``map``
raises is reported with its file and line, counted, and contributes nothing.

A feed is resumable: its mapper id is derived from the cluster's incarnation, the job and the
inputs (each file's resolved path, size and modification time), see :func:`feed_mapper_id`.
The seqs of a ``(mapper id, slot)`` are given in emit order, so the same input sends the same
tuple identities again, and the nodes drop every tuple at or below their hwm as a duplicate:
running an interrupted feed again delivers exactly the rest, and running a finished one
delivers nothing new. Standard input cannot be read twice, so a feed of it gets a random id.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import json
import os
import select
import shlex
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from checkpoint.ids import MapperId
from smr.api import Job, load_job
from smr.channels import DeliveryError
from smr.client import Client, NodeUnreachable, fetch_view
from smr.emitter import Emitter
from smr.spec import read_spec

# Map failures reported one by one; the rest are only counted.
MAP_FAILURES_REPORTED_MAX: Final = 5
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
    position: FeedPosition | None = None,
) -> FeedResult:
    """Run ``job.map`` over every line of ``paths`` and emit into ``emitter``, then wait
    until every tuple is acked (``emitter.close``). ``progress`` gets bytes read so far;
    ``position``, if given, holds the file and line of the last record read."""
    started = time.monotonic()
    position = position if position is not None else FeedPosition()
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
        position.path = path
        try:
            for number, line in enumerate(lines, 1):
                records += 1
                position.line = number
                position.records = records
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


def feed_mapper_id(
    incarnation: str | None,
    job_ref: str,
    paths: Sequence[str],
    combine_batch_size: int | None = None,
) -> MapperId:
    """The mapper id of a feed: the same for the same cluster life, job and inputs.

    Inputs are named by resolved path, size and modification time (nanoseconds), so a file
    that changed is a new input and gets a new id. With ``combine``, a batch's seqs are given
    to combined rows when the batch closes, so the batch size (``combine_batch_size``) is part
    of the identity too; without it, seqs follow the emit order alone. Standard input (``-``)
    cannot be read again: a feed of it gets a random id.
    """
    if "-" in paths:
        return MapperId(f"feed-{uuid.uuid4().hex[:16]}")
    inputs = []
    for path in paths:
        stat = os.stat(path)
        inputs.append([str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns])
    identity = {
        "incarnation": incarnation,
        "job": job_ref,
        "inputs": inputs,
        "combine_batch_size": combine_batch_size,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return MapperId(f"feed-{digest[:16]}")


@dataclass
class NodeCounters:
    """Tuples the nodes applied and dropped as duplicates, summed over the nodes that
    answered (``nodes``)."""

    applied: int
    duplicate: int
    nodes: frozenset[str]


def node_counters(client: Client, addrs: dict[str, str]) -> NodeCounters:
    """The nodes' ``tuples_applied`` and ``tuples_duplicate`` counters, summed."""
    applied = duplicate = 0
    answered = set()
    for node_id, addr in addrs.items():
        try:
            status = client.status(addr)
        except NodeUnreachable:
            continue
        applied += int(status.get("tuples_applied", 0))
        duplicate += int(status.get("tuples_duplicate", 0))
        answered.add(node_id)
    return NodeCounters(applied, duplicate, frozenset(answered))


def duplicates_line(before: NodeCounters, after: NodeCounters) -> str | None:
    """What the nodes did with this feed's tuples, from their counters before and after.

    The counters are the whole node's: another feed running at the same time is counted
    too, and a node that stopped answering takes its counts with it (then say so).
    """
    if before.nodes != after.nodes:
        return None
    applied = after.applied - before.applied
    duplicate = after.duplicate - before.duplicate
    if duplicate <= 0:
        return None
    if applied == 0:
        return (
            f"nothing new: the nodes already had all {duplicate:,} tuples "
            "(this feed had run to the end before)"
        )
    return (
        f"the nodes already had {duplicate:,} of the tuples sent (from an earlier run of "
        f"this feed, or resent) and applied {applied:,} new ones"
    )


def resume_command(
    cluster_dir: Path, job_ref: str, options: Sequence[str], paths: Sequence[str]
) -> str:
    """The command that runs this feed again (it then delivers only what is missing)."""
    words = ["smr", "feed", "--cluster", str(cluster_dir), "--job", job_ref, *options, *paths]
    return shlex.join(words)


def run(
    cluster_dir: Path,
    job_ref: str,
    paths: Sequence[str],
    *,
    options: Sequence[str],
    batch_size: int,
    window_batches: int,
    combine: bool,
    mapper_id: MapperId | None,
    show_progress: bool,
    say: Callable[[str], None],
    report: Callable[[str], None],
) -> int:
    """``smr feed``: feed ``paths`` into the cluster and return the exit code.

    1. Check the job, the inputs and the cluster; derive the mapper id (:func:`feed_mapper_id`)
       unless given.
    2. Read the nodes' counters, feed until every tuple is acked, read them again: the
       difference says how much of the input the nodes already had (a rerun).
    3. Stopped early (SIGINT, SIGTERM, a node that cannot be reached): drop the emitter,
       say how far the feed got and the command that resumes it, and return 2.
    """
    # 1.
    job = load_job(job_ref)
    check_inputs(paths)
    spec = read_spec(cluster_dir)
    view = fetch_view(spec.seeds)
    if mapper_id is None:
        mapper_id = feed_mapper_id(
            spec.incarnation, job_ref, paths, batch_size if combine and job.combine else None
        )
    emitter = Emitter(
        view,
        spec.slot_bits,
        mapper_id,
        replication=spec.replication,
        combine=job.combine if combine else None,
        batch_size=batch_size,
        window_batches=window_batches,
    )
    addrs = {str(m.node_id): m.addr for m in view.members.values()}
    client = Client(timeout_ms=1000)
    position = FeedPosition()
    previous_sigterm = signal.signal(signal.SIGTERM, _interrupt)
    try:
        # 2.
        before = node_counters(client, addrs)
        try:
            if show_progress:
                from rich.progress import Progress

                with Progress(transient=True) as bar:
                    task = bar.add_task("feeding", total=total_bytes(paths))
                    result = feed(
                        job,
                        emitter,
                        paths,
                        report,
                        lambda done: bar.update(task, completed=done),
                        position,
                    )
            else:
                result = feed(job, emitter, paths, report, position=position)
        except (KeyboardInterrupt, DeliveryError) as error:
            # 3.
            reason = "interrupted" if isinstance(error, KeyboardInterrupt) else str(error)
            emitter.abort()
            where = f"{position.path}:{position.line}" if position.path else "the start"
            report(
                f"smr: error: feed stopped ({reason}) after reading through {where} "
                f"({position.records:,} records); {emitter.tuples_acked:,} of "
                f"{emitter.tuples_sent:,} tuples sent were acked"
            )
            if "-" in paths:
                report("standard input cannot be resumed: feed the rest again by other means")
            else:
                report(
                    "to resume (the nodes drop what they already have), run the same command: "
                    + resume_command(cluster_dir, job_ref, options, paths)
                )
            return 2
        after = node_counters(client, addrs)
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        client.close()
    say(
        f"fed {result.tuples_emitted} tuples from {result.records} records "
        f"({result.tuples_sent} sent after combine) in {result.elapsed_s:.2f} s: "
        f"{result.tuples_per_s:,.0f} tuples/s"
    )
    line = duplicates_line(before, after)
    if line is not None:
        say(line)
    if result.map_failures:
        report(f"smr: {result.map_failures} records failed in map")
        return 1
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
