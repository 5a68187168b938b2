"""One Spark task's work on a worker, without pyspark: the worker's emitter (cached per process
and cluster, so its sockets outlive the task), and steps 2-4 of a micro-batch
(docs/design/architecture.md#spark) for one partition: begin mapper ``Q/p`` with seqs above
the batch's base, map (and fold) in record order, drain."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from smr.api import Job, JobLoadError, load_job
from smr.checkpoint.ids import MapperId
from smr.client.control import NodeUnreachable, fetch_view
from smr.mapper.emitter import Emitter
from smr.transport.security import Keys
from smr.transport.zeromq import use_keys

# Seqs of batch b start above b << SEQ_BATCH_SHIFT: room for 2**32 tuples per task.
SEQ_BATCH_SHIFT: Final = 32

# Records folded together before their combined tuples are emitted (see step 3 above):
# bounds the fold's memory by the keys of this many records.
COMBINE_RECORDS: Final = 20_000

# Where the worker-side check of a query's settings gives up on the cluster.
VIEW_TIMEOUT_MS: Final = 2000


@dataclass(frozen=True)
class FeedSettings:
    """Everything a Spark task needs to emit, as plain values (it travels to the workers)."""

    query: str
    job_ref: str
    job_cwd: str
    addrs: tuple[str, ...]
    slot_bits: int
    replication: int
    combine: bool
    batch_size: int
    window_batches: int
    single_column: bool
    arrow: bool = False
    """Tasks get the records as Arrow batches (``mapInArrow``): for a job with
    ``map_batch``, which takes many records at once anyway."""
    keys: tuple[bytes, bytes, bytes] | None = field(default=None, repr=False)
    """A secured cluster's public key and the driver's client pair, which the workers reach
    the nodes with (they travel inside Spark's tasks, and never into a repr); None: no
    keys."""


# One emitter and job per cluster and job in each Python worker process (Spark reuses
# workers across tasks, so sockets and routing caches outlive a task).
_worker_emitters: dict[FeedSettings, tuple[Emitter, Job]] = {}


def _worker_job(settings: FeedSettings) -> Job:
    if settings.job_cwd not in sys.path:
        sys.path.append(settings.job_cwd)
    return load_job(settings.job_ref)


def worker_problem(settings: FeedSettings) -> str | None:
    """Why a task could not feed, or None: the job must import and the cluster answer."""
    _worker_keys(settings)
    try:
        _worker_job(settings)
    except JobLoadError as error:
        return (
            f"the Spark workers cannot load the job: {error} (a worker's sys.path is "
            f"{sys.path[:4]}...; put the job's module on PYTHONPATH or ship it with "
            "spark.submit.pyFiles)"
        )
    try:
        fetch_view(settings.addrs, timeout_ms=VIEW_TIMEOUT_MS)
    except NodeUnreachable as error:
        return f"the Spark workers cannot reach the cluster: {error}"
    return None


def _worker_keys(settings: FeedSettings) -> None:
    """A worker's sockets use the driver's keys (none if the cluster has none)."""
    if settings.keys is None:
        use_keys(None)
        return
    cluster_public, client_public, client_secret = settings.keys
    use_keys(Keys(Path("(from the driver)"), cluster_public, client_public, client_secret))


def _worker_emitter(settings: FeedSettings) -> tuple[Emitter, Job]:
    cached = _worker_emitters.get(settings)
    if cached is None:
        _worker_keys(settings)
        job = _worker_job(settings)
        view = fetch_view(settings.addrs)
        emitter = Emitter(
            view,
            settings.slot_bits,
            MapperId(f"{settings.query}/unassigned"),
            replication=settings.replication,
            batch_size=settings.batch_size,
            window_batches=settings.window_batches,
        )
        cached = _worker_emitters[settings] = (emitter, job)
    return cached


def emit_records(
    settings: FeedSettings, batch_id: int, partition: int, records_in: Iterator[Any]
) -> tuple[int, int]:
    """Steps 2-4 for partition ``partition`` of batch ``batch_id``; returns the records and
    the tuples ``map`` made (before folding)."""
    emitter, job = _worker_emitter(settings)
    # 2. Begin mapper Q/p with seqs above the batch's base.
    emitter.begin_mapper(
        MapperId(f"{settings.query}/{partition}"), seq_base=batch_id << SEQ_BATCH_SHIFT
    )
    try:
        # 3. Map (and fold) in record order.
        if job.map_batch is not None:
            records, tuples = _map_batches(job, records_in, emitter.emit_many)
        elif settings.combine and job.combine is not None:
            records, tuples = map_combined(job, records_in, emitter.emit)
        else:
            emitted_before = emitter.tuples_emitted
            records = _map_plain(job, records_in, emitter.emit)
            tuples = emitter.tuples_emitted - emitted_before
        # 4. Drain: everything acked by its whole replica set.
        emitter.drain()
    except BaseException:
        del _worker_emitters[settings]
        emitter.abort()
        raise
    return records, tuples


def _map_plain(job: Job, records: Iterator[Any], emit: Callable[[Any, Any], None]) -> int:
    """Run ``map`` over ``records``; return how many there were."""
    count = 0
    user_map = job.mapper()
    for count, record in enumerate(records, 1):  # noqa: B007 - the last count is the total
        user_map(record, emit)
    return count


def _map_batches(
    job: Job, records: Iterator[Any], emit_many: Callable[[Any, Any], None]
) -> tuple[int, int]:
    """Run ``map_batch`` over chunks of :data:`COMBINE_RECORDS` records in order (with
    aggregators, folded per key within each); return the records and the tuples emitted."""
    batch_map = job.batch_mapper()
    assert batch_map is not None
    count = emitted = 0
    chunk: list[Any] = []
    for count, record in enumerate(records, 1):  # noqa: B007 - the last count is the total
        chunk.append(record)
        if len(chunk) >= COMBINE_RECORDS:
            emitted += _emit_all(batch_map(chunk), emit_many)
            chunk.clear()
    if chunk:
        emitted += _emit_all(batch_map(chunk), emit_many)
    return count, emitted


def _emit_all(columns: tuple[Any, Any, int], emit_many: Callable[[Any, Any], None]) -> int:
    """Emit what ``Job.batch_mapper`` returned; return how many tuples ``map_batch`` made."""
    keys, values, produced = columns
    emit_many(keys, values)
    return produced


def map_combined(
    job: Job, records: Iterator[Any], emit: Callable[[Any, Any], None]
) -> tuple[int, int]:
    """Run ``map`` over ``records`` folding per chunk (step 3); return the records and the
    tuples ``map`` emitted."""
    combine = job.combine
    assert combine is not None
    folded: dict[Any, Any] = {}
    emitted = 0

    def fold(key: Any, value: Any) -> None:
        nonlocal emitted
        emitted += 1
        if key in folded:
            folded[key] = combine(folded[key], value)
        else:
            folded[key] = value

    count = 0
    user_map = job.mapper()
    for count, record in enumerate(records, 1):
        user_map(record, fold)
        if count % COMBINE_RECORDS == 0:
            for key, value in folded.items():
                emit(key, value)
            folded.clear()
    for key, value in folded.items():
        emit(key, value)
    return count, emitted
