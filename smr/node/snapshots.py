"""Snapshots: a full copy of a primary's range sent to a secondary in numbered chunks, after
a range change, a new secondary, or a checkpoint gap (docs/design/architecture.md#state).

Sending (:meth:`Snapshots._steps`, one chunk per step of the receive loop, so a large range
never holds the loop for long) and receiving (begin, chunks, end: a missing part aborts the
snapshot and asks for a new one, so a replica never completes with a hole) are both here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Final, Protocol

from smr.checkpoint.delta import DeltaError, decode_delta, encode_delta
from smr.checkpoint.ids import CheckpointNumber
from smr.checkpoint.replica import PeerReplica
from smr.checkpoint.store import StateStore
from smr.node.ports import MoveCopies, NodeBasics, ViewGossip
from smr.output.files import OutputSink
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import Role, SlotRange
from smr.wire.kinds import FrameError, SnapshotNumber
from smr.wire.peer import (
    PeerMessages,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotEnd,
    SnapshotRequest,
)


class SnapshotReplicas(Protocol):
    """What the snapshots ask of the replication (``smr.node.replication``): the replicas a
    snapshot fills, their coverage, and the checkpoint a snapshot is cut at."""

    def incoming_copy(self, giver: NodeId) -> object | None: ...
    def snapshot_target(self, sender: NodeId, predecessor: bool) -> PeerReplica | None: ...
    def replica_of(self, sender: NodeId) -> PeerReplica | None: ...
    def note_covered(self, sender: NodeId, copied: SlotRange) -> None: ...
    def forget_coverage(self, sender: NodeId) -> None: ...
    def copies(self) -> list[tuple[NodeId, PeerReplica]]: ...


class SnapshotCut(Protocol):
    """What a snapshot asks of the checkpoint cycle (``smr.node.checkpoints``): the one in
    flight finished, and its number (the snapshot is cut at it)."""

    def last_checkpoint_number(self) -> CheckpointNumber: ...
    def finish_shipping(self) -> None: ...


class IntakePosition(Protocol):
    """What a snapshot asks of the intake (``smr.node.ingest``)."""

    def position(self) -> tuple[int, int]: ...


class SnapshotsNode(NodeBasics, Protocol):
    """What the snapshots use of the node (``smr.node.core.NodeCore``)."""

    @property
    def roles(self) -> bytes: ...
    @property
    def predecessors(self) -> tuple[NodeId, ...]: ...
    @property
    def secondaries(self) -> tuple[NodeId, ...]: ...
    @property
    def store(self) -> StateStore: ...
    @property
    def output(self) -> OutputSink: ...
    @property
    def ingest(self) -> IntakePosition: ...
    @property
    def membership(self) -> ViewGossip: ...
    @property
    def replication(self) -> SnapshotReplicas: ...
    @property
    def checkpoints(self) -> SnapshotCut: ...
    @property
    def moves(self) -> MoveCopies: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...


# A replica still incomplete after this long asks its primary for a snapshot again.
SNAPSHOT_RETRY_S: Final = 2.0


class Snapshots:
    """The snapshots a node sends (as a primary) and receives (as a secondary).

    Guarantees: a replica completes only when every chunk of one snapshot arrived in order;
    a part the peer link refuses is sent again later, never skipped; a replica still
    incomplete asks again every ``SNAPSHOT_RETRY_S``.
    """

    def __init__(self, node: SnapshotsNode) -> None:
        self._node = node
        self._jobs: dict[NodeId, Iterator[None]] = {}
        # The snapshots waiting for batches accepted before them to be applied (step 0).
        self._awaiting_apply: set[NodeId] = set()
        # Snapshot chunks applied since the receive loop last yielded (smr.node.turn.turn_is_full).
        self.chunks_this_turn = 0
        # The number of the last snapshot this node began sending, and per primary the one
        # being received here with the index of the next chunk expected.
        self._snapshot_ids = SnapshotNumber(0)
        self._receiving: dict[NodeId, tuple[SnapshotNumber, int]] = {}
        # Per primary, the number of the last snapshot whose begin arrived here, and of the
        # last one found to have lost its begin (asked again once).
        self._begun: dict[NodeId, SnapshotNumber] = {}
        self._begin_missed: dict[NodeId, SnapshotNumber] = {}
        # Per primary, the range the snapshot being received copies (see on_end).
        self._receiving_range: dict[NodeId, SlotRange] = {}
        self._asked_at: dict[NodeId, float] = {}
        # The copy holder of the move this node gives, and the range it copies (a snapshot
        # job to a node that is no secondary: smr.node.moves, step 3).
        self._copy: tuple[NodeId, SlotRange] | None = None
        # The longest a snapshot chunk held the event loop, in ms of wall time: a step of a
        # snapshot being sent (choosing, reading, encoding and sending one chunk), or
        # decoding and applying a received one. Wall time even under a simulated clock: it
        # measures the work itself (and is left out of the simulation's fingerprint).
        self.stall_ms_max = 0.0

    @property
    def applied_this_turn(self) -> bool:
        """True if a snapshot chunk was applied this turn (the turn reads no more)."""
        return self.chunks_this_turn > 0

    def end_turn(self) -> None:
        """The turn ended: the next may read messages again."""
        self.chunks_this_turn = 0

    def reset(self) -> None:
        """Drop every snapshot being sent or received (fencing)."""
        self._jobs.clear()
        self._awaiting_apply.clear()
        self._copy = None
        self._receiving.clear()
        self._receiving_range.clear()
        self._begun.clear()
        self._begin_missed.clear()

    @property
    def sending(self) -> int:
        """How many snapshots are being sent to secondaries (a move's copy is not one)."""
        secondaries = self._node.secondaries
        return sum(1 for target in self._jobs if target in secondaries)

    def forget_receiving(self, primary: NodeId) -> None:
        """Stop receiving the snapshot from ``primary`` (no longer a predecessor, or taken over)."""
        self._receiving.pop(primary, None)
        self._receiving_range.pop(primary, None)
        self._begun.pop(primary, None)
        self._begin_missed.pop(primary, None)

    def follow_secondaries(self, secondaries: tuple[NodeId, ...], changed_range: bool) -> None:
        """After a view change: send each secondary a snapshot of this node's range if the
        range changed or the secondary is new (re-replication), and stop sending to nodes
        that are no longer secondaries."""
        node = self._node
        for secondary in secondaries:
            if changed_range or secondary not in node.secondaries:
                self._jobs[secondary] = self._steps(secondary)
        copy_holder = self._copy[0] if self._copy is not None else None
        for secondary in list(self._jobs):
            if secondary not in secondaries and secondary != copy_holder:
                del self._jobs[secondary]

    def start_copy(self, holder: NodeId, moving: SlotRange) -> None:
        """Send a move's copy holder a snapshot of the moving slots (``smr.node.moves``)."""
        self._copy = (holder, moving)
        self._jobs[holder] = self._steps(holder, moving)

    def stop_copy(self, holder: NodeId) -> None:
        """The move is over: stop sending its copy (if still under way)."""
        if self._copy is not None and self._copy[0] == holder:
            self._copy = None
            if holder not in self._node.secondaries:
                self._jobs.pop(holder, None)

    # -- sending, as a primary ------------------------------------------------------------

    def on_request(self, identity: bytes, message: SnapshotRequest) -> None:
        """A secondary asks for a snapshot: start one (a pending one starts over)."""
        node = self._node
        sender = node.membership.from_live_peer(message)
        if sender is not None and sender in node.secondaries:
            self._jobs[sender] = self._steps(sender)
        elif sender is not None and self._copy is not None and self._copy[0] == sender:
            self._jobs[sender] = self._steps(sender, self._copy[1])

    def _steps(self, secondary: NodeId, only: SlotRange | None = None) -> Iterator[None]:
        """Send ``secondary`` a full snapshot of this node's range (or of the part ``only``
        of it, a move's copy), one chunk per step.

        0. Wait until every batch accepted before the snapshot began is applied.
        1. SNAPSHOT_BEGIN with ``as_of``, the last checkpoint number already swapped,
           ``snap``, this snapshot's number, and this node's range: once the snapshot ends,
           the secondary holds a copy of every slot of it (``Replication.covered``).
        2. One SNAPSHOT_CHUNK per ``snapshot_chunk_keys`` keys, numbered from 0: the full
           merged state and hwm vectors of whole slots, read when the chunk is sent, once
           the output is durable (``OutputSink.make_durable``: the chunk may carry state
           changes no checkpoint carried yet, and a secondary that promotes it never
           replays their tuples); checkpoints keep flowing in between, on the same ordered
           channel, and the secondary applies them on top.
        3. SNAPSHOT_END with the number of chunks sent.

        A part the peer link refuses (its queue is full) is sent again on a later step, read
        afresh, never skipped: the secondary must not complete a snapshot with a hole. A
        part lost after it left (a connection reset) shows at the secondary as a skipped
        index or a short count: it aborts the snapshot and asks for a new one.
        """
        node = self._node
        # 0. Batches accepted before now may have gone to the old replica set only (a new
        #    secondary was not in it): they are applied before the snapshot is read, so
        #    that it holds them; every later one went to the secondary too (Ingest step 5).
        accepted, _taken = node.ingest.position()
        while node.ingest.position()[1] < accepted:
            # Only applying moves this on: no work of its own (a capped node sleeps until
            # its cap lets batches through, instead of turning in place).
            self._awaiting_apply.add(secondary)
            yield
        self._awaiting_apply.discard(secondary)
        self._snapshot_ids = snap = SnapshotNumber(self._snapshot_ids + 1)
        chunks_sent = 0
        # 1. A checkpoint in flight is shipped whole first: the secondary then applies every
        #    part of checkpoint ``as_of`` before the snapshot begins.
        node.checkpoints.finish_shipping()
        while not node.peer_send(
            secondary,
            SnapshotBegin(
                *node.stamp,
                node.checkpoints.last_checkpoint_number(),
                snap,
                *(self._own_range() if only is None else (only.start, only.length)),
            ),
        ):
            yield
        yield
        # 2.
        roles = node.roles
        owned = sorted(
            s
            for s in node.store.slots()
            if roles[s] == Role.PRIMARY and (only is None or only.contains(s))
        )
        chunk: list[Slot] = []
        keys = 0
        for slot in owned:
            chunk.append(slot)
            keys += sum(1 for _ in node.store.items([slot]))
            if keys >= node.settings.snapshot_chunk_keys:
                while not self._send_chunk(secondary, chunk, snap, chunks_sent):
                    yield
                chunks_sent += 1
                chunk, keys = [], 0
                yield
        if chunk:
            while not self._send_chunk(secondary, chunk, snap, chunks_sent):
                yield
            chunks_sent += 1
        # 3.
        while not node.peer_send(secondary, SnapshotEnd(*node.stamp, snap, chunks_sent)):
            yield
        node.counters.snapshots_sent += 1

    def _own_range(self) -> tuple[Slot, int]:
        """This node's range as (first slot, length), (0, 0) when it owns none."""
        own = self._node.ring.range_of(self._node.node_id)
        return (own.start, own.length) if own is not None else (Slot(0), 0)

    def _send_chunk(
        self, secondary: NodeId, slots: list[Slot], snap: SnapshotNumber, index: int
    ) -> bool:
        node = self._node
        if not node.output.make_durable():
            return False  # the output table refused: sent on a later step
        roles = node.roles
        current = [s for s in slots if roles[s] == Role.PRIMARY]
        body = encode_delta(node.store.snapshot(current))
        return node.peer_send(secondary, SnapshotChunk(*node.stamp, snap, index, body))

    @property
    def has_work(self) -> bool:
        """True while snapshot chunks wait to be sent."""
        return bool(self._jobs)

    @property
    def can_send_now(self) -> bool:
        """True while a snapshot can send its next chunk now: not while every snapshot
        waits for batches to be applied first (step 0), which only applying moves on."""
        return any(secondary not in self._awaiting_apply for secondary in self._jobs)

    def step(self) -> None:
        """Send one snapshot chunk per pending snapshot (each step, from choosing the chunk's
        slots to sending it, counts towards ``stall_ms_max``)."""
        for secondary, job in list(self._jobs.items()):
            started = time.perf_counter()
            try:
                next(job)
            except StopIteration:
                if self._jobs.get(secondary) is job:
                    del self._jobs[secondary]
            self._note_stall(started)

    def report(self) -> dict[str, float]:
        """What ``smr status`` shows of snapshots: the longest a step held the loop."""
        return {
            "snapshot_stall_ms_max": round(self.stall_ms_max, 3),
            "snapshot_stall_s_max": self.stall_ms_max / 1000,
        }

    def _note_stall(self, started: float) -> None:
        stall_ms = (time.perf_counter() - started) * 1000
        if stall_ms > self.stall_ms_max:
            self.stall_ms_max = stall_ms

    # -- receiving, as a secondary --------------------------------------------------------

    def on_begin(self, identity: bytes, message: SnapshotBegin) -> None:
        """Receiving a snapshot: 1. begin it, expecting chunk 0 of snapshot ``snap``."""
        node = self._node
        sender = node.membership.from_live_peer(message)
        if sender is None:
            return
        # A predecessor's snapshots go to its replica, even if this node also holds a copy
        # for a move of that node's (it became a predecessor since: a death between).
        predecessor = sender in node.predecessors
        if not predecessor and node.replication.incoming_copy(sender) is None:
            return
        try:
            copied = SlotRange(message.range_start, message.range_length, node.ring.slot_count)
        except ValueError as error:
            raise FrameError(f"snapshot from {sender}: {error}") from None
        replica = node.replication.snapshot_target(sender, predecessor)
        if replica is None:
            return
        if not replica.is_complete and message.as_of > replica.last_checkpoint:
            # The snapshot skips checkpoints this replica never applied, and from now on
            # later ones apply and evict backed-up batches while chunks are still
            # missing: the replica covers nothing until the snapshot ends. (With nothing
            # skipped, every change since the primary's empty start arrives as a
            # checkpoint or a backed-up batch: the coverage holds.)
            node.replication.forget_coverage(sender)
        replica.begin_snapshot(message.as_of)
        self._begun[sender] = max(message.snap, self._begun.get(sender, SnapshotNumber(0)))
        self._receiving[sender] = (message.snap, 0)
        self._receiving_range[sender] = copied
        self._asked_at[sender] = node.clock()

    def on_chunk(self, identity: bytes, message: SnapshotChunk) -> None:
        """2. Apply chunk ``index`` if it is the next one of the snapshot being received; a
        chunk of another (older, aborted) snapshot is ignored; a skipped index aborts."""
        being_received = self._being_received(message)
        if being_received is None:
            return
        sender, replica, receiving = being_received
        if message.index != receiving[1]:
            self._lost_a_part(sender, replica)
            return
        started = time.perf_counter()
        try:
            chunk = decode_delta(message.body)
        except DeltaError as error:
            raise FrameError(f"snapshot chunk from {sender}: {error}") from None
        replica.apply_snapshot_chunk(chunk)
        self.chunks_this_turn += 1
        self._note_stall(started)
        self._receiving[sender] = (receiving[0], receiving[1] + 1)
        # A snapshot still arriving is not lost: put off asking again.
        self._asked_at[sender] = self._node.clock()

    def on_end(self, identity: bytes, message: SnapshotEnd) -> None:
        """3. Complete the replica if every chunk of the snapshot arrived; else abort."""
        being_received = self._being_received(message)
        if being_received is None:
            return
        sender, replica, receiving = being_received
        if message.chunks != receiving[1]:
            self._lost_a_part(sender, replica)
            return
        del self._receiving[sender]
        replica.end_snapshot()
        node = self._node
        copied = self._receiving_range.pop(sender)
        node.counters.snapshots_received += 1
        if sender not in node.predecessors and node.replication.incoming_copy(sender) is not None:
            node.moves.copied(sender, replica.last_checkpoint)
            return
        node.replication.note_covered(sender, copied)
        node.moves.joining().progress()

    def _being_received(
        self, message: SnapshotChunk | SnapshotEnd
    ) -> tuple[NodeId, PeerReplica, tuple[SnapshotNumber, int]] | None:
        """The sender, its replica here and ``(snapshot number, next chunk index)`` when
        ``message`` belongs to the snapshot being received from a live peer; else None (a
        part of another, older or aborted, snapshot is ignored)."""
        node = self._node
        sender = node.membership.from_live_peer(message)
        replica = node.replication.replica_of(sender) if sender is not None else None
        if replica is None or sender is None:
            return None
        receiving = self._receiving.get(sender)
        if receiving is None or receiving[0] != message.snap:
            self._check_begin_missed(sender, message.snap)
            return None
        return sender, replica, receiving

    def _check_begin_missed(self, sender: NodeId, snap: SnapshotNumber) -> None:
        """A part of snapshot ``snap`` arrived that this node never saw begin. An older one
        (aborted, superseded) is ignored; a newer one lost its begin on the way: this
        replica is no copy of the primary's range as it is now (a range that grew in a
        takeover, say), so ask for a new snapshot, once per snapshot lost."""
        if snap <= self._begun.get(sender, SnapshotNumber(0)):
            return
        if self._begin_missed.get(sender) == snap:
            return
        node = self._node
        self._begin_missed[sender] = snap
        node.counters.snapshot_chunks_missing += 1
        self._asked_at[sender] = node.clock()
        node.peer_send(sender, SnapshotRequest(*node.stamp))

    def _lost_a_part(self, sender: NodeId, replica: PeerReplica) -> None:
        """A chunk of the snapshot from ``sender`` never arrived: abort it (the replica must
        not be promoted or completed with a hole) and ask for a new one at once."""
        node = self._node
        node.counters.snapshot_chunks_missing += 1
        replica.abort_snapshot()
        # Slots of the lost chunk keep stale state under raised hwms: nothing is covered.
        node.replication.forget_coverage(sender)
        del self._receiving[sender]
        self._asked_at[sender] = node.clock()
        node.peer_send(sender, SnapshotRequest(*node.stamp))

    def rerequest(self, now: float) -> None:
        """Ask again for a snapshot a replica still lacks (its request, begin or end may have
        been lost with a broken connection) once ``SNAPSHOT_RETRY_S`` passed without a
        request or any part of a snapshot from that primary."""
        node = self._node
        for primary, replica in node.replication.copies():
            if replica.is_complete and not replica.needs_snapshot:
                continue
            if now - self._asked_at.get(primary, -1e9) >= SNAPSHOT_RETRY_S:
                self._asked_at[primary] = now
                node.peer_send(primary, SnapshotRequest(*node.stamp))
