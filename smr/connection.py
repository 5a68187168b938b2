"""``smr.connect``: feed a cluster from any program, read its state while it streams, and
follow its output.

::

    import smr

    with smr.connect("clusters/demo") as cluster:       # or "host:port,host:port"
        cluster.emit_many((word, 1) for word in words)
        position = cluster.flush()                       # every tuple acked by r + 1 nodes
        print(cluster.get("whale"))                      # {"count": 1687}
        for key, state in cluster.scan(prefix="wh"):
            ...

A :class:`Cluster` writes like ``smr feed`` (the same emitter: routing, batching,
backpressure, the same checks of keys and values) and reads from each key's primary, the
only node whose state for the key is current. Every call that talks to nodes asks them in
parallel and gives up after ``timeout_s`` with :class:`Unreachable`; reads wait that long
for a takeover or a move to finish before they give up. ``smr feed``, ``smr dump``,
``smr query`` and ``smr status`` are built on it.

Exactly once across restarts (a named stream resumed from the position :meth:`Cluster.flush`
returned; a reused id refused with :class:`MapperIdReused`) and reads that never serve a
lost slot as empty (:class:`SlotsLost`, or ``allow_lost=True``) are described in the
programs guide (``docs/guide/programs.md``) and on each method.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from smr.api import Job, load_job
from smr.checkpoint.ids import MapperId
from smr.client import seeds
from smr.client import status as status_view
from smr.client.control import (
    Client,
    LostSlotsSkipped,
    NodeUnreachable,
    SlotsLost,
    cluster_view,
)
from smr.client.history import HistoryUnknown, MapperIdReused, mapper_history
from smr.client.reads import StateReader, Unreachable, checked_key
from smr.client.seeds import ClusterRef
from smr.client.subscription import OutputRecord, Subscription
from smr.mapper.channels import DeliveryError
from smr.mapper.emitter import (
    BATCH_SIZE_DEFAULT,
    LINGER_MS_DEFAULT,
    WINDOW_BATCHES_DEFAULT,
    Emitter,
)
from smr.ring.hashing import slot_of
from smr.ring.ids import Slot
from smr.ring.placement import Ring
from smr.ring.view import Status, View
from smr.transport.security import load_keys
from smr.transport.zeromq import use_keys, use_keys_of
from smr.values import EmitError
from smr.windows import refuse_in_cluster
from smr.windows.stamps import Stamper

__all__ = [
    "Cluster",
    "DeliveryError",
    "EmitError",
    "HistoryUnknown",
    "LostSlotsSkipped",
    "MapperIdReused",
    "OutputRecord",
    "SlotsLost",
    "Subscription",
    "Unreachable",
    "connect",
]

log = logging.getLogger("smr.connection")

TIMEOUT_S_DEFAULT: Final = 5.0
# One request waits at most this long: a dead node refuses connections at once, a paused
# one is given up on after it, and the call retries (another node, a newer view) until its
# own timeout.
REQUEST_TIMEOUT_MS: Final = 1000
# Pairs of an iterator checked and emitted together by emit_many.
EMIT_CHUNK_PAIRS: Final = 10_000


def connect(
    cluster: str | os.PathLike[str] | Sequence[str],
    *,
    job: Job | str | None = None,
    mapper_id: str | None = None,
    position: int | None = None,
    timeout_s: float = TIMEOUT_S_DEFAULT,
    batch_size: int = BATCH_SIZE_DEFAULT,
    window_batches: int = WINDOW_BATCHES_DEFAULT,
    linger_ms: float | None = LINGER_MS_DEFAULT,
    keys: str | os.PathLike[str] | None = None,
) -> Cluster:
    """A connection to ``cluster``: a cluster directory (holding ``cluster.json``), seed
    addresses as ``"host:port,host:port"``, or a list of ``"host:port"``.

    ``keys`` is the folder of keys to reach a secured cluster with (as ``smr keys
    add-client`` writes one); by default the cluster directory's ``keys/``, else the folder
    ``$SMR_KEYS`` names, else none. Keys hold for the whole process: every connection of a
    program uses the last ones chosen.

    ``job`` (a :class:`smr.Job` or a ``module:attribute`` reference) gives the ``combine`` that
    writes apply, or, for a windowed job (tumbling or hopping), the window whose watermark the
    writes carry: each :meth:`Cluster.emit` then takes its ``event_time``. ``mapper_id`` names
    the stream this program writes (default: a new random one) and ``position`` is where it
    resumes (a value :meth:`Cluster.flush` returned, 0 for its start; only 0 with ``combine``).
    A ``mapper_id`` without a ``position`` starts a new stream: the first write raises
    :class:`MapperIdReused` if the id already delivered tuples. The seeds are asked for the
    ring now: :class:`smr.spec.ClusterError` if none answers, ValueError for a bad argument.
    """
    if position is not None and (type(position) is not int or position < 0):
        raise ValueError(f"position must be an int of at least 0, not {position!r}")
    if isinstance(job, str):
        job = load_job(job)
    if job is not None:
        refuse_in_cluster(job)
    if position and job is not None and job.combine is not None:
        raise ValueError(
            "a connection with the job's combine starts at position 0: combined tuples' "
            "identities depend on how they were batched, so a resumed stream could not match"
        )
    if isinstance(cluster, os.PathLike):
        cluster = os.fspath(cluster)
    elif not isinstance(cluster, str):
        cluster = ",".join(cluster)
    if keys is not None:
        use_keys(load_keys(Path(keys)))
    else:
        use_keys_of(cluster)
    ref = seeds.resolve(cluster, timeout_ms=round(timeout_s * 1000))
    return Cluster(
        ref,
        job=job,
        mapper_id=mapper_id,
        position=position,
        timeout_s=timeout_s,
        batch_size=batch_size,
        window_batches=window_batches,
        linger_ms=linger_ms,
    )


class Cluster:
    """A program's connection to a cluster: write tuples, read state, follow output.

    Not thread-safe: use one from one thread at a time (``smr.aio`` runs one on a thread of
    its own). Closing it (or leaving its ``with`` block) flushes what was emitted and
    releases its sockets.
    """

    def __init__(
        self,
        ref: ClusterRef,
        *,
        job: Job | None = None,
        mapper_id: str | None = None,
        position: int | None = None,
        timeout_s: float = TIMEOUT_S_DEFAULT,
        batch_size: int = BATCH_SIZE_DEFAULT,
        batch_bytes: int | None = None,
        window_batches: int = WINDOW_BATCHES_DEFAULT,
        linger_ms: float | None = LINGER_MS_DEFAULT,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s}")
        self.ref = ref
        self.spec = ref.spec
        self.timeout_s = timeout_s
        self.mapper_id = MapperId(mapper_id or f"client-{uuid.uuid4().hex[:16]}")
        # A random id is never used again: close tells the nodes it finished.
        self._finish_on_close = not mapper_id
        # A named stream without a position is new: its id must have no history.
        self._new_named_stream = bool(mapper_id) and position is None
        self._job = job
        # A windowed job's writes travel stamped (smr.windows.stamps); its combine is unused.
        self._stamper = Stamper(job) if job is not None and job.windowed else None
        self._start_position = position or 0
        self._emitter_options: dict[str, Any] = {
            "batch_size": batch_size,
            "window_batches": window_batches,
            "linger_ms": linger_ms,
        }
        if batch_bytes is not None:
            self._emitter_options["batch_bytes"] = batch_bytes
        self._emitter: Emitter | None = None
        self._client = Client(timeout_ms=min(REQUEST_TIMEOUT_MS, round(timeout_s * 1000)))
        self._view: View | None = None
        self._view_at = 0.0
        self._closed = False
        self._reads = StateReader(self._client, self.view, self.spec.slot_bits, timeout_s)

    # -- the ring ------------------------------------------------------------------------------

    def view(self, refresh: bool = False) -> View:
        """The ring's view as the nodes last told it (asked again with ``refresh``)."""
        if self._view is None or refresh:
            addrs = list(self.spec.seeds)
            if self._view is not None:
                addrs += [
                    m.addr
                    for m in self._view.members.values()
                    if m.status is not Status.DEAD and m.addr not in addrs
                ]
            try:
                view = cluster_view(self._client, addrs)
            except NodeUnreachable as error:
                raise Unreachable(str(error)) from None
            self._view = view if self._view is None else self._view.merge(view)
            self._view_at = time.monotonic()
        return self._view

    def owner_of(self, key: str | int) -> tuple[str, int]:
        """The node that is primary of ``key`` by the current view, and the key's slot."""
        slot = slot_of(checked_key(key), self.spec.slot_bits)
        return str(Ring(self.view(), self.spec.slot_bits).primary(Slot(slot))), slot

    def status(self) -> list[dict[str, Any]]:
        """Every node's status row, as ``smr status --json`` shows it (a node that does not
        answer has a row saying so)."""
        return status_view.collect(self.spec, self._client)

    # -- writing -------------------------------------------------------------------------------

    def writer(self) -> Emitter:
        """The emitter this connection writes through (made at the first write, once a new
        named stream's id proved unused: :class:`MapperIdReused` if it delivered tuples
        before, :class:`HistoryUnknown` if that cannot be told within ``timeout_s``). A
        windowed job's writer asks every owner first in any case, which registers it with
        their windows: :class:`HistoryUnknown` if not every owner answers."""
        if self._closed:
            raise RuntimeError("this connection is closed")
        if self._emitter is None:
            # A windowed job's writer asks too, whatever its id: the ask registers it with
            # every owner's windows before its first tuple (smr.node.windows).
            if self._new_named_stream or self._stamper is not None:
                history = mapper_history(
                    self._client, self.view, self.spec.slot_bits, self.mapper_id, self.timeout_s
                )
                if history.used and self._new_named_stream:
                    raise MapperIdReused(history)
                self._new_named_stream = False
            combine = self._job.combine if self._job is not None and self._stamper is None else None
            emitter = Emitter(
                self.view(),
                self.spec.slot_bits,
                self.mapper_id,
                replication=self.spec.replication,
                combine=combine,
                **self._emitter_options,
            )
            if self._start_position:
                emitter.begin_mapper(self.mapper_id, seq_base=self._start_position)
            self._emitter = emitter
        return self._emitter

    def emit(self, key: str | int, value: Any, *, event_time: int | None = None) -> None:
        """Send one tuple. A key or value that cannot travel raises
        :class:`smr.values.EmitError` at once, and nothing is sent. Blocks while the nodes
        are a full window behind (backpressure); delivery is confirmed by :meth:`flush`.
        With a windowed job, ``event_time`` (an int of milliseconds) is the tuple's event
        time, and the tuple carries this connection's watermark (the largest event time it
        sent minus the window's ``out_of_orderness_ms``, minus 1); ValueError without one,
        TypeError with one and no windowed job."""
        stamper = self._stamper
        if stamper is not None:
            if event_time is None:
                raise ValueError("a windowed job's tuple needs its event_time= (int ms)")
            value = stamper.stamp(value, event_time)
        elif event_time is not None:
            raise TypeError("event_time= needs a windowed job: smr.connect(..., job=...)")
        self.writer().emit(key, value)

    def emit_many(self, pairs: Iterable[tuple[str | int, Any]]) -> None:
        """Send ``(key, value)`` pairs, in order. A sequence is checked whole before any pair
        is sent (all or none); an iterator is checked and sent ``EMIT_CHUNK_PAIRS`` at a
        time, and an EmitError says how many of its pairs went before the bad one's chunk.
        A windowed job's tuples go one by one, with their event time (:meth:`emit`)."""
        if self._stamper is not None:
            raise TypeError("a windowed job's tuples each take an event_time: use emit()")
        emit_many = self.writer().emit_many
        if isinstance(pairs, Sequence):
            chunks: Iterable[Sequence[tuple[Any, Any]]] = [pairs]
        else:
            chunks = _chunks(pairs, EMIT_CHUNK_PAIRS)
        sent = 0
        for chunk in chunks:
            if not chunk:
                continue
            try:
                keys, values = zip(*chunk, strict=True)
            except (TypeError, ValueError):
                raise EmitError("emit_many takes (key, value) pairs") from None
            try:
                emit_many(keys, values)
            except EmitError as error:
                if sent:
                    raise EmitError(f"{error} (after {sent} pairs were sent)") from None
                raise
            sent += len(chunk)

    def flush(self, timeout: float | None = None) -> int:
        """Send every tuple emitted so far and wait until each is acked by all the ``r + 1``
        nodes of its replica set; :class:`smr.mapper.channels.DeliveryError` if that cannot happen
        (within ``timeout`` seconds, if given). Returns the stream's position: the count of
        tuples emitted under this mapper id (with ``position`` given at connect, counted
        from there), the value to resume from."""
        if self._emitter is not None:
            self._emitter.drain(timeout)
        return self.position

    @property
    def position(self) -> int:
        """Where the stream is: the tuples emitted so far, from the connect position."""
        if self._emitter is None:
            return self._start_position
        if not self._emitter.combines:
            return self._emitter.position
        return self._emitter.tuples_emitted

    # -- reading -------------------------------------------------------------------------------

    def get(self, key: str | int, *, allow_lost: bool = False) -> dict[str, Any] | None:
        """The state of ``key`` (a dict of fields), or None if it has none, read from its
        primary: the state as of one apply turn (no half-applied tuple, none applied twice),
        holding every tuple a returned :meth:`flush` covered, also after a takeover.
        :class:`SlotsLost` if the key's slot is lost, unless ``allow_lost`` (see
        :meth:`get_many`)."""
        return self.get_many([key], allow_lost=allow_lost)[key]

    def get_many(
        self, keys: Iterable[str | int], *, allow_lost: bool = False
    ) -> dict[str | int, dict[str, Any] | None]:
        """The state of each key (None for a key without one), asking every primary for its
        keys at once. Keys whose node does not answer, or is no longer their primary, are
        asked again by a fresher view until ``timeout_s``; then :class:`Unreachable`.

        A key whose slot is lost raises :class:`SlotsLost` naming every such slot and key;
        with ``allow_lost``, it reads as None, and the call warns
        (:class:`LostSlotsSkipped`) and names its slots in :attr:`skipped_lost_slots`."""
        return self._reads.get_many(keys, allow_lost=allow_lost)

    def scan(
        self, prefix: str | None = None, *, allow_lost: bool = False
    ) -> Iterator[tuple[str | int, dict[str, Any]]]:
        """Every ``(key, state)``, slot by slot, a page at a time from each slot's primary
        (with ``prefix``, only the string keys that start with it). Each slot is read whole
        from one node that was its primary, so a takeover or a move mid-scan repeats no key
        and misses none; a slot whose primary cannot be reached within ``timeout_s`` raises
        :class:`Unreachable`.

        Reaching a lost slot raises :class:`SlotsLost` naming the run of lost slots there
        (keys of earlier pages may have been yielded); with ``allow_lost``, the scan goes
        on past them, and at its end warns (:class:`LostSlotsSkipped`) and names every lost
        slot it left out in :attr:`skipped_lost_slots`."""
        return self._reads.scan(prefix, allow_lost=allow_lost)

    @property
    def skipped_lost_slots(self) -> frozenset[int]:
        """The lost slots the last read with ``allow_lost=True`` left out (empty if none)."""
        return self._reads.skipped_lost_slots

    # -- output --------------------------------------------------------------------------------

    def subscribe(
        self, position: Mapping[str, int] | str = "end", idle_timeout_s: float | None = None
    ) -> Subscription:
        """The records reducers emit, as ``smr tail`` shows them, from ``position``: "end"
        (from now), "start" (everything each node's output holds), or a
        :attr:`Subscription.position` taken earlier (node -> byte offset). Every record a
        node wrote is returned, or its node named in :attr:`Subscription.unread_of_dead`
        (see :class:`Subscription`)."""
        return Subscription(self.view, self._client, position, idle_timeout_s)

    # -- the end -------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Flush (see :meth:`flush`) and release every socket, also when flushing fails.
        Without a ``mapper_id`` of the program's own, the nodes are then told the writer
        finished, and retire its dedup memory after a lease (``smr.mapper.finish``)."""
        if self._closed:
            return
        try:
            if self._emitter is not None:
                self._emitter.close(timeout, finished=self._finish_on_close)
        finally:
            self._closed = True
            self._client.close()

    def abort(self) -> None:
        """Release every socket at once, without waiting for unacked tuples (a program
        with a ``mapper_id`` resumes them from its last flushed position)."""
        if self._emitter is not None:
            self._emitter.abort()
        self._closed = True
        self._client.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Leaving on an error must not wait out a flush: the error says what went wrong.
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _chunks(pairs: Iterable[tuple[Any, Any]], size: int) -> Iterator[list[tuple[Any, Any]]]:
    iterator = iter(pairs)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk
