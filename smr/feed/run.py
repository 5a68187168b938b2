"""``smr feed`` from start to end: identity, counters, the feed itself, and what it says.

A feed is resumable: its mapper id is derived from the cluster's incarnation, the job and the
inputs (each file's resolved path, size and modification time), see :func:`feed_mapper_id`.
The seqs of a ``(mapper id, slot)`` are given in emit order, so the same input sends the same
tuple identities again, and the nodes drop every tuple at or below their hwm as a duplicate:
running an interrupted feed again delivers exactly the rest, and running a finished one
delivers nothing new. Standard input cannot be read twice, so a feed of it gets a random id.

A feed given ``--mapper-id`` names a stream of its own: if that id already delivered tuples
the feed is refused before it sends anything (``smr.client.history``), unless ``--resume``
says it continues that stream from its start (the nodes then drop what they already have).
Standard input cannot resume, so it is refused whenever its id was used.

With the job's ``combine``, seqs go to combined rows when a batch closes, and which keys
share a batch depends on which node owns each slot. A feed that ran before while the ring's
owners were not what they are now (or changed during that run) would send the same seqs
with other contents: resuming it could count tuples twice or not at all. Each run records
the owners it saw (``CLUSTER/feeds/ID.json``); such a rerun is refused, loudly, with what to
do (:func:`check_combine_resumable`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smr.api import Job
from smr.checkpoint.ids import MapperId
from smr.client.control import Client, NodeUnreachable
from smr.client.history import MapperIdReused
from smr.client.seeds import ClusterRef
from smr.connection import Cluster
from smr.feed.records import FeedPosition, FeedResult, feed, total_bytes
from smr.mapper.channels import DeliveryError
from smr.mapper.emitter import Emitter
from smr.ring.view import View
from smr.wording import counted


class FeedNotResumable(Exception):
    """A rerun of a feed could not deliver exactly the rest; the message says what to do."""


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


def _owners(view: View) -> list[list[Any]]:
    return [[m.node_id, m.incarnation, m.token] for m in view.owners()]


def check_combine_resumable(record_path: Path, view: View) -> None:
    """Refuse a rerun of a combining feed whose earlier run saw other owners than ``view``
    has, or saw them change (FeedNotResumable); a first run passes."""
    try:
        record = json.loads(record_path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        record = {}
    if record.get("owners") == _owners(view) and not record.get("ring_changed", True):
        return
    raise FeedNotResumable(
        "this feed ran before with the job's combine while the ring's owners changed: its "
        "combined rows would carry the same identities with other contents, so running it "
        "again could count tuples twice or not at all. Run it with --no-combine and a new "
        "--mapper-id to feed it all again (what the earlier run applied stays counted), or "
        f"check the counts first ('smr dump'); the record of the earlier run is {record_path}"
    )


def _record_run(record_path: Path, owners_at_start: list[list[Any]], emitter: Emitter) -> None:
    record_path.parent.mkdir(parents=True, exist_ok=True)
    changed = emitter.view_changes > 0 or _owners(emitter.view) != owners_at_start
    record_path.write_text(json.dumps({"owners": owners_at_start, "ring_changed": changed}))


@dataclass
class NodeCounters:
    """Tuples the nodes applied and dropped as duplicates, summed over the nodes that
    answered (``nodes``)."""

    applied: int
    duplicate: int
    nodes: frozenset[str]
    ring_changes: int = 0
    """Takeovers and moves, summed: while the ring changes, tuples are applied by replays
    and by nodes that joined, which these counters do not add up."""


def node_counters(client: Client, addrs: dict[str, str]) -> NodeCounters:
    """The nodes' ``tuples_applied`` and ``tuples_duplicate`` counters, summed."""
    applied = duplicate = ring_changes = 0
    answered = set()
    statuses = client.status_each(list(addrs.values()))
    for node_id, addr in addrs.items():
        status = statuses.get(addr)
        if status is None or isinstance(status, NodeUnreachable):
            continue
        applied += int(status.get("tuples_applied", 0))
        duplicate += int(status.get("tuples_duplicate", 0))
        ring_changes += sum(
            int(status.get(name, 0)) for name in ("takeovers", "moves_given", "moves_received")
        )
        answered.add(node_id)
    return NodeCounters(applied, duplicate, frozenset(answered), ring_changes)


def duplicates_line(before: NodeCounters, after: NodeCounters) -> str | None:
    """What the nodes did with this feed's tuples, from their counters before and after.

    The counters are the whole node's: another feed running at the same time is counted
    too, and a node that stopped answering takes its counts with it, as a ring that changed
    moves them (then say nothing).
    """
    if before.nodes != after.nodes or before.ring_changes != after.ring_changes:
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
    cluster_arg: str, job_ref: str, options: Sequence[str], paths: Sequence[str]
) -> str:
    """The command that runs this feed again (it then delivers only what is missing)."""
    words = ["smr", "feed", "--cluster", cluster_arg, "--job", job_ref, *options, *paths]
    return shlex.join(words)


@dataclass(frozen=True)
class FeedOptions:
    """How to feed: what ``smr feed``'s flags say."""

    batch_size: int
    batch_bytes: int
    max_record_bytes: int
    window_batches: int
    combine: bool
    mapper_id: MapperId | None
    resume: bool
    """With ``mapper_id``: the feed continues that stream from its start (``--resume``)."""
    show_progress: bool
    flags: tuple[str, ...]
    """The flags to repeat in the command that resumes the feed."""


def run(
    cluster: ClusterRef,
    job_ref: str,
    job: Job,
    paths: Sequence[str],
    options: FeedOptions,
    say: Callable[[str], None],
    report: Callable[[str], None],
) -> int:
    """``smr feed``: feed ``paths`` into ``cluster`` and return the exit code (its records
    go in the cluster's state directory).

    1. Derive the mapper id (:func:`feed_mapper_id`) unless given; with ``combine``, refuse
       a rerun whose earlier run saw other owners (:func:`check_combine_resumable`). A
       given id that already delivered tuples is refused unless the feed resumes it
       (:func:`open_writer`).
    2. Read the nodes' counters, feed until every tuple is acked, read them again: the
       difference says how much of the input the nodes already had (a rerun).
    3. Stopped early (SIGINT, SIGTERM, a node that cannot be reached): drop the emitter,
       say how far the feed got and the command that resumes it, and return 2.
    4. Say what was fed; return 1 if any record failed (map, a bad emit, too long).
    """
    # 1.
    spec = cluster.spec
    # A windowed job's combine would fold values of different windows together.
    combine = options.combine and job.combine is not None and not job.windowed
    mapper_id = options.mapper_id or feed_mapper_id(
        spec.incarnation, job_ref, paths, options.batch_size if combine else None
    )
    connection = _connection(cluster, job if combine else None, mapper_id, options)
    view = connection.view()
    record_path = cluster.state_dir / "feeds" / f"{mapper_id}.json"
    if combine and "-" not in paths:
        check_combine_resumable(record_path, view)
    emitter = open_writer(connection, "-" in paths)
    owners_at_start = _owners(view)
    addrs = {str(m.node_id): m.addr for m in view.members.values()}
    client = Client(timeout_ms=1000)
    position = FeedPosition()
    previous_sigterm = signal.signal(signal.SIGTERM, _interrupt)
    try:
        # 2.
        before = node_counters(client, addrs)
        try:
            result = _feed_with_progress(job, emitter, paths, report, options, position)
        except (KeyboardInterrupt, DeliveryError) as error:
            # 3.
            connection.abort()
            if combine:
                _record_run(record_path, owners_at_start, emitter)
            resume = (
                None if "-" in paths else resume_command(cluster.arg, job_ref, options.flags, paths)
            )
            _report_stopped(report, error, position, emitter, resume)
            return 2
        if combine:
            _record_run(record_path, owners_at_start, emitter)
        after = node_counters(client, addrs)
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        client.close()
        connection.abort()  # every tuple was acked, or the feed stops here anyway
    # 4.
    return _say_fed(say, report, result, duplicates_line(before, after), options.max_record_bytes)


def _report_stopped(
    report: Callable[[str], None],
    error: BaseException,
    position: FeedPosition,
    emitter: Emitter,
    resume: str | None,
) -> None:
    """Step 3 of :func:`run`: how far a stopped feed got, and the command that resumes it
    (``resume``; None for standard input, which cannot be resumed)."""
    reason = "interrupted" if isinstance(error, KeyboardInterrupt) else str(error)
    where = f"{position.path}:{position.line}" if position.path else "the start"
    report(
        f"smr: error: feed stopped ({reason}) after reading through {where} "
        f"({position.records:,} records); {emitter.tuples_acked:,} of "
        f"{emitter.tuples_sent:,} tuples sent were acked"
    )
    if resume is None:
        report("standard input cannot be resumed: feed the rest again by other means")
    else:
        report("to resume (the nodes drop what they already have), run the same command: " + resume)


def _say_fed(
    say: Callable[[str], None],
    report: Callable[[str], None],
    result: FeedResult,
    duplicates: str | None,
    max_record_bytes: int,
) -> int:
    """Step 4 of :func:`run`: what was fed (and ``duplicates``, the line saying what the
    nodes already had, if any); the exit code, 1 when a record failed."""
    say(
        f"fed {counted(result.tuples_emitted, 'tuple')} from {counted(result.records, 'record')} "
        f"({result.tuples_sent:,} sent after combine) in {result.elapsed_s:.2f} s: "
        f"{result.tuples_per_s:,.0f} tuples/s"
    )
    if duplicates is not None:
        say(duplicates)
    if result.failed_records:
        report(
            f"smr: {counted(result.failed_records, 'record')} failed and were skipped: "
            f"{result.map_failures:,} in map, {result.emit_failures:,} with a bad emit, "
            f"{result.records_too_long:,} longer than {max_record_bytes:,} bytes"
        )
        return 1
    return 0


def _connection(
    cluster: ClusterRef, job: Job | None, mapper_id: MapperId, options: FeedOptions
) -> Cluster:
    """The connection the feed writes through, as any program does (smr.connection). A
    derived id names the input itself, so the feed resumes it (position 0: the nodes drop
    what they have); a given one starts a new stream unless ``--resume`` says otherwise."""
    new_stream = options.mapper_id is not None and not options.resume
    return Cluster(
        cluster,
        job=job,
        mapper_id=mapper_id,
        position=None if new_stream else 0,
        batch_size=options.batch_size,
        batch_bytes=options.batch_bytes,
        window_batches=options.window_batches,
    )


def open_writer(connection: Cluster, from_stdin: bool) -> Emitter:
    """The connection's emitter; a new stream under a used id is refused with what to do
    (MapperIdReused), and nothing is sent."""
    try:
        return connection.writer()
    except MapperIdReused as used:
        connection.abort()
        if from_stdin:
            advice = (
                "standard input cannot resume it: use a new id (or none: a feed of standard "
                "input gets a random one)"
            )
        else:
            advice = "pass --resume to continue it, or use a new id"
        raise MapperIdReused(used.history, advice) from None
    except BaseException:
        connection.abort()
        raise


def _feed_with_progress(
    job: Job,
    emitter: Emitter,
    paths: Sequence[str],
    report: Callable[[str], None],
    options: FeedOptions,
    position: FeedPosition,
) -> FeedResult:
    if not options.show_progress:
        return feed(
            job,
            emitter,
            paths,
            report,
            None,
            options.max_record_bytes,
            position,
            finished=options.mapper_id is None,
        )
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("feeding", total=total_bytes(paths))
        return feed(
            job,
            emitter,
            paths,
            report,
            lambda done: bar.update(task, completed=done),
            options.max_record_bytes,
            position,
            finished=options.mapper_id is None,
        )


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
