"""Replication of tuples and state at a secondary (docs/design/architecture.md#state).

A node keeps, per primary whose slots it backs up, a :class:`PeerReplica` (the primary's
state as of its last checkpoint applied here) and a :class:`TupleBackup` (the raw batches
since). A checkpoint applied evicts every backed-up batch it covers (exact eviction: by hwm,
no clock). The primary's side, its numbered deltas, is :mod:`smr.node.checkpoints`; the
copies of dead or moved ranges, :mod:`smr.node.orphans` and :mod:`smr.node.move_copies`;
snapshots (full copies after a range change or a gap), :mod:`smr.node.snapshots`.
"""

from __future__ import annotations

from typing import Final, Protocol

from smr.checkpoint.backup import BackedUpBatch, TupleBackup
from smr.checkpoint.delta import (
    DeltaError,
    decode_delta,
)
from smr.checkpoint.ids import CheckpointNumber, MapperId
from smr.checkpoint.promote import PrimaryCopy
from smr.checkpoint.replica import CheckpointGap, PeerReplica
from smr.checkpoint.store import StateStore
from smr.node.disk import DiskState
from smr.node.move_copies import IncomingCopy
from smr.node.orphans import Orphan, Orphans, moved_name
from smr.node.ports import MoveCopies, NodeBasics, SnapshotReceiving, ViewGossip
from smr.output.files import OutputSink
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import Ring, SlotRange
from smr.ring.view import Status, View
from smr.wire.kinds import FrameError
from smr.wire.peer import Checkpoint, CheckpointRequest, PeerMessages, SnapshotRequest


class MoveCopyTargets(MoveCopies, Protocol):
    """What the replication asks of the moves (``smr.node.moves``, step 3): where a copy of
    moving slots goes, and how it went."""

    def copy_failed(self, giver: NodeId, reason: str) -> None: ...
    def copy_target(self) -> tuple[NodeId, ...]: ...


class ReplicationNode(NodeBasics, Protocol):
    """What the replication uses of the node (``smr.node.core.NodeCore``)."""

    @property
    def predecessors(self) -> tuple[NodeId, ...]: ...
    @property
    def secondaries(self) -> tuple[NodeId, ...]: ...
    @property
    def store(self) -> StateStore: ...
    @property
    def output(self) -> OutputSink: ...
    @property
    def disk(self) -> DiskState | None: ...
    @property
    def membership(self) -> ViewGossip: ...
    @property
    def snapshots(self) -> SnapshotReceiving: ...
    @property
    def moves(self) -> MoveCopyTargets: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...


# A secondary asks its primaries for an early checkpoint once its tuple backup holds this
# share of backup_bytes_max: early enough that the checkpoint's eviction usually comes before
# the bound, where batches are refused and the mappers slow down.
EARLY_CHECKPOINT_AT_FRACTION: Final = 0.75
# Backed-up batches scanned per step of an eviction (a batch of 1000 tuples spans about as
# many slots: some 50 us each, so a step stays near a millisecond).
EVICT_SCANS_PER_STEP: Final = 20


class Replication:
    """A node's replicas and tuple backups of its predecessors (its own checkpoint cycle is
    :mod:`smr.node.checkpoints`'s).

    Guarantees: a backed-up batch is held until a checkpoint applied here covers it; the
    backup never grows past ``backup_bytes_max`` (batches past it are not accepted, so the
    mappers resend later); a checkpoint number skipped makes the replica ask for a snapshot
    instead of applying a later delta on a hole.
    """

    def __init__(self, node: ReplicationNode) -> None:
        self._node = node
        # As a secondary: a replica of each predecessor's state and its backed-up batches.
        self.replicas: dict[NodeId, PeerReplica] = {}
        self.backups: dict[NodeId, TupleBackup] = {}
        # Per predecessor, the range its last complete snapshot to us copied: every slot of
        # it (with state or not) has a copy here. What a takeover finds outside it is lost.
        self.covered: dict[NodeId, SlotRange] = {}
        # Copies of dead predecessors whose ranges a live predecessor absorbed and is still
        # re-replicating to us (see forget_former_predecessors), and of ranges that moved to
        # a predecessor (split_moved, copy_to_orphan), by a name of their own.
        self.orphans = Orphans()
        # As a move's copy holder: the copy of the moving slots, by giver.
        self.incoming: dict[NodeId, IncomingCopy] = {}
        # Early checkpoints: when each primary was last asked for one.
        self._checkpoint_asked_at: dict[NodeId, float] = {}
        # As a secondary: checkpoint parts applied this turn (smr.node.turn.turn_is_full).
        self.parts_this_turn = 0
        # As a secondary: the primaries whose backup is being evicted a step per turn
        # (after their checkpoint's last part), in the order their checkpoints ended.
        self._evicting: dict[NodeId, None] = {}

    def cover_initial_ranges(self) -> None:
        """At a cluster's start, count each predecessor's range as covered, by a replica
        complete at checkpoint 0: its state starts empty, every batch it applies reaches
        this node too (an emitter holds a batch until all ``r + 1`` nodes acked it, and
        re-routes it on a takeover), and each of its checkpoints from 1 on applies to the
        replica in order (a skipped one is a gap: the replica asks for a snapshot), so the
        replica and the backup evicted against it are a full copy of that range from the
        start, also while its first snapshot is under way (a replica that ignored
        checkpoint 1 would cover nothing from a snapshot begun past it until its end)."""
        node = self._node
        for predecessor in node.predecessors:
            initial = node.ring.range_of(predecessor)
            if initial is not None:
                self.covered[predecessor] = initial
                self.replicas[predecessor] = PeerReplica.of_empty_start()

    @property
    def applied_this_turn(self) -> bool:
        """True if a checkpoint part was applied this turn (the turn reads no more)."""
        return self.parts_this_turn > 0

    def end_turn(self) -> None:
        """The turn ended: the next may read messages again."""
        self.parts_this_turn = 0

    def reset(self) -> None:
        """Drop every replica, backup and orphan copy (fencing)."""
        self._evicting.clear()
        self.replicas.clear()
        self.backups.clear()
        self.covered.clear()
        self.orphans.clear()
        self.incoming.clear()

    # -- what other roles ask ------------------------------------------------------------

    def surrender(self, dead: NodeId) -> list[Orphan]:
        """Give up every copy of ``dead`` kept here, for its takeover: the orphan copies of
        the nodes it had absorbed (older, by name), then its own replica, backup and
        covered range (newer); none of them is kept here any more."""
        copies = self.orphans.surrender(dead)
        replica = self.replicas.pop(dead, None)
        covered = self.covered.pop(dead, None)
        backup = self.backups.pop(dead, None)
        copies.append(Orphan(dead, replica or PeerReplica(), backup, covered))
        return copies

    def has_complete_replica(self, owner: NodeId, slots: SlotRange | None = None) -> bool:
        """Whether the replica of ``owner`` kept here is complete (no snapshot under way)
        and, given ``slots``, its last complete snapshot covered them."""
        replica = self.replicas.get(owner)
        if replica is None or not replica.is_complete or replica.snapshot_in_progress:
            return False
        if slots is None:
            return True
        covered = self.covered.get(owner)
        return covered is not None and covered.covers(slots)

    def last_checkpoint_of(self, owner: NodeId) -> CheckpointNumber | None:
        """The last checkpoint of ``owner`` the complete replica kept here applied; None
        without a complete replica."""
        replica = self.replicas.get(owner)
        if replica is None or not replica.is_complete:
            return None
        return replica.last_checkpoint

    def caught_up_with(self, owners: tuple[NodeId, ...]) -> bool:
        """Whether the replica of every one of ``owners`` is kept here, complete, and
        neither waits for nor receives a snapshot (a joiner, step 4 of a join)."""
        for owner in owners:
            replica = self.replicas.get(owner)
            if (
                replica is None
                or not replica.is_complete
                or replica.needs_snapshot
                or replica.snapshot_in_progress
            ):
                return False
        return True

    def replica_checkpoint(self, owner: NodeId) -> CheckpointNumber | None:
        """The last checkpoint the replica of ``owner`` kept here applied, complete or not;
        None without a replica."""
        replica = self.replicas.get(owner)
        return None if replica is None else replica.last_checkpoint

    def split_off(self, giver: NodeId, slots: set[Slot]) -> PrimaryCopy:
        """Take the slots ``slots`` of the replica and backup of ``giver`` out of them, as a
        copy to promote (a move's receiver, step 6b); the replica must be kept here."""
        replica = self.replicas[giver]
        backup = self.backups.get(giver)
        return PrimaryCopy(replica.split_off(slots), backup.split_off(slots) if backup else None)

    def incoming_copy(self, giver: NodeId) -> IncomingCopy | None:
        """The copy held here for a move of ``giver``'s, if any."""
        return self.incoming.get(giver)

    def snapshot_target(self, sender: NodeId, predecessor: bool) -> PeerReplica | None:
        """The replica a snapshot beginning from ``sender`` goes to: the replica of a
        predecessor (made if new), else the copy held for a move of ``sender``'s, else None
        (the snapshot is ignored)."""
        if predecessor:
            return self.replicas.setdefault(sender, PeerReplica())
        copy = self.incoming.get(sender)
        return copy.replica if copy is not None else None

    def note_covered(self, sender: NodeId, copied: SlotRange) -> None:
        """A snapshot from predecessor ``sender`` of ``copied`` ended: every slot of it has a
        copy here; the orphan copies it supersedes and the batches it covers go."""
        self.covered[sender] = copied
        self.forget_orphans_of(sender)
        self.evict_covered(sender)

    def forget_coverage(self, sender: NodeId) -> None:
        """The replica of ``sender`` covers nothing until its next snapshot ends (a snapshot
        skipped checkpoints, or lost a part)."""
        self.covered.pop(sender, None)

    def copies(self) -> list[tuple[NodeId, PeerReplica]]:
        """Every replica kept here, by primary, and the copies held for moves, by giver."""
        return [
            *self.replicas.items(),
            *((giver, copy.replica) for giver, copy in self.incoming.items()),
        ]

    @property
    def backup_bytes(self) -> int:
        """Raw batch bytes held for all primaries together."""
        return sum(b.bytes_held for b in self.backups.values())

    def hwm_entries(self) -> int:
        """The ``(mapper, slot)`` high-water marks the copies held here keep (replicas,
        orphans, incoming move copies)."""
        replicas = [
            *self.replicas.values(),
            *self.orphans.replicas(),
            *(copy.replica for copy in self.incoming.values()),
        ]
        return sum(replica.store.hwm_entries() for replica in replicas)

    # -- secondary: tuple backup and replicas -----------------------------------------------

    def back_up(
        self, mapper: MapperId, body: bytes, tuple_count: int, last_seq_by_slot: dict[int, int]
    ) -> bool:
        """Keep a batch (its raw body, its tuple count, and each slot's highest seq in it)
        for its primary until a checkpoint covers it; True if kept (the caller then advances
        the channel and acks it in channel order).

        The bound (docs/design/architecture.md#state), in two steps:

        1. From ``EARLY_CHECKPOINT_AT_FRACTION`` of ``backup_bytes_max``, ask each primary
           whose batches are held here for an early checkpoint (at most once per heartbeat
           interval each): its eviction makes room before the bound is reached.
        2. At ``backup_bytes_max`` the batch is not accepted (the channel does not advance
           and no ack is sent): the mapper resends later, by when checkpoints will have
           evicted older batches. Nothing is dropped.
        """
        node = self._node
        primary = node.ring.primary(Slot(next(iter(last_seq_by_slot))))
        held_bytes = self.backup_bytes
        bound_bytes = node.settings.backup_bytes_max
        # 1.
        if held_bytes >= EARLY_CHECKPOINT_AT_FRACTION * bound_bytes:
            self._ask_early_checkpoints()
        # 2.
        if held_bytes >= bound_bytes:
            node.counters.backup_refused_full += 1
            return False
        replica = self.replica(primary)
        backed_up = BackedUpBatch(mapper, body, tuple_count, last_seq_by_slot)  # type: ignore[arg-type]
        self.backups.setdefault(primary, TupleBackup()).add(backed_up, replica.hwm)
        node.counters.backup_batches += 1
        return True

    def _ask_early_checkpoints(self) -> None:
        """Ask every primary with batches held here for a checkpoint now (rate-limited)."""
        node = self._node
        now = node.clock()
        interval_s = node.settings.heartbeat_interval_ms / 1000
        for primary, backup in self.backups.items():
            if backup.batch_count == 0:
                continue
            if now - self._checkpoint_asked_at.get(primary, -1e9) < interval_s:
                continue
            self._checkpoint_asked_at[primary] = now
            node.counters.checkpoints_requested += 1
            node.peer_send(primary, CheckpointRequest(*node.stamp))

    def replica_of(self, sender: NodeId) -> PeerReplica | None:
        """The replica snapshots from ``sender`` go to: of a predecessor, or the copy held
        for a move of ``sender``'s; None if neither."""
        if sender in self._node.predecessors:
            return self.replicas.get(sender)
        copy = self.incoming.get(sender)
        return copy.replica if copy is not None else None

    def replica(self, primary: NodeId) -> PeerReplica:
        """The replica of ``primary`` kept here; a new one asks it for a snapshot."""
        replica = self.replicas.get(primary)
        if replica is None:
            replica = self.replicas[primary] = PeerReplica()
            self._node.peer_send(primary, SnapshotRequest(*self._node.stamp))
        return replica

    def on_checkpoint(self, identity: bytes, message: Checkpoint) -> None:
        """A secondary applies a part of a primary's checkpoint; after the last part, it
        evicts what the checkpoint covers."""
        node = self._node
        sender = node.membership.from_live_peer(message)
        if sender is None:
            return
        if message.part < 0:
            raise FrameError(f"checkpoint from {sender}: part {message.part} is negative")
        if sender not in node.predecessors:
            if sender in self.incoming:
                self._apply_to_copy(sender, message)
            return
        try:
            delta = decode_delta(message.body)
        except DeltaError as error:
            raise FrameError(f"checkpoint from {sender}: {error}") from None
        self.parts_this_turn += 1
        replica = self.replica(sender)
        try:
            applied = replica.apply_checkpoint(message.number, delta, message.part, message.last)
        except CheckpointGap:
            node.peer_send(sender, SnapshotRequest(*node.stamp))
            return
        if applied and message.last:
            node.counters.checkpoints_applied += 1
            # What it covers is evicted a step per turn (step_eviction): a whole pass over
            # a second's batches is a pause of milliseconds.
            self._evicting[sender] = None
            node.moves.joining().progress()

    def _apply_to_copy(self, giver: NodeId, message: Checkpoint) -> None:
        """A checkpoint of a move's giver, for the copy held here: its part about the moving
        slots is applied; the giver hears how far the copy is (``Moves.copied``)."""
        node = self._node
        incoming = self.incoming[giver]
        try:
            complete = incoming.apply_checkpoint(message)
        except CheckpointGap as gap:
            node.moves.copy_failed(giver, f"the copy missed a checkpoint ({gap})")
            return
        if complete:
            node.moves.copied(giver, incoming.replica.last_checkpoint)

    def expect_copy(self, giver: NodeId, moving: SlotRange) -> None:
        """Hold a copy of ``moving`` for a move of ``giver``'s (its snapshot comes next)."""
        self.incoming[giver] = IncomingCopy(moving, PeerReplica())

    def note_final(self, giver: NodeId, final: CheckpointNumber) -> None:
        """The move's commit names its final checkpoint (see ``IncomingCopy``)."""
        incoming = self.incoming.get(giver)
        if incoming is not None:
            incoming.final = final

    def drop_copy(self, giver: NodeId) -> None:
        """Forget the copy held for a move of ``giver``'s that was called off."""
        if self.incoming.pop(giver, None) is not None:
            self._node.snapshots.forget_receiving(giver)

    def copy_to_orphan(self, giver: NodeId, receiver: NodeId) -> None:
        """The move is done: the copy held becomes an orphan copy absorbed by ``receiver``
        (kept until the receiver's snapshot reaches this node, promoted if it dies first). It
        covers the moved slots only if it holds the move's final checkpoint."""
        incoming = self.incoming.pop(giver, None)
        if incoming is None:
            return
        self._node.snapshots.forget_receiving(giver)
        name = moved_name(giver, receiver, incoming.moving)
        self.orphans.keep(name, incoming.as_orphan(receiver))

    def split_moved(self, old_ring: Ring, view: View) -> None:
        """After a view change: of each live predecessor whose range shrank (a move, a leave),
        split the slots it no longer owns off its replica and backup. If their new primary is
        another predecessor of this node, the split-off part is kept as an orphan copy
        absorbed by it (until its snapshot reaches this node): the moved slots keep ``r + 1``
        copies while it re-replicates. If it is this node, the promotion already took them;
        otherwise this node holds no copy of them any more."""
        node = self._node
        ring = node.ring
        for name in list(self.replicas):
            member = view.get(name)
            before = old_ring.range_of(name)
            if member is None or member.status is Status.DEAD or before is None:
                continue
            after = ring.range_of(name)
            kept = 0 if after is None else after.length
            if kept >= before.length or (after is not None and after.start != before.start):
                continue
            moved = SlotRange(
                Slot((before.start + kept) % before.slot_count),
                before.length - kept,
                before.slot_count,
            )
            slots = set(moved.slots())
            replica = self.replicas[name].split_off(slots)
            backup = self.backups.get(name)
            moved_backup = backup.split_off(slots) if backup is not None else None
            if not ring.owners:
                continue
            absorber = ring.primary(moved.start)
            if absorber == node.node_id or absorber not in node.predecessors:
                continue
            covered_before = self.covered.get(name)
            covered = moved if covered_before is not None and covered_before.covers(moved) else None
            orphan = Orphan(absorber, replica, moved_backup, covered)
            self.orphans.keep(moved_name(name, absorber, moved), orphan)

    def evict_covered(self, primary: NodeId) -> None:
        """Drop the batches backed up for ``primary`` that its replica's hwm covers, in its
        own backup and in the superseded orphan copies it absorbed (``Orphans.evict``)."""
        hwm = self.replicas[primary].hwm
        backup = self.backups.get(primary)
        if backup is not None:
            backup.evict_covered(hwm)
        self.orphans.evict(primary, hwm)

    @property
    def evicting(self) -> bool:
        """Whether a backup waits for the rest of its eviction (``step_eviction``)."""
        return bool(self._evicting)

    def step_eviction(self) -> None:
        """One step of the evictions under way, for the first primary in line: at most
        ``EVICT_SCANS_PER_STEP`` batches of its backup scanned (``TupleBackup.evict_some``);
        once a pass went through the whole backup, its orphan copies are evicted too and it
        leaves the line. A primary no longer a predecessor leaves the line at once."""
        for primary in list(self._evicting):
            replica = self.replicas.get(primary)
            if replica is None:
                del self._evicting[primary]
                continue
            backup = self.backups.get(primary)
            if backup is None or backup.evict_some(replica.hwm, EVICT_SCANS_PER_STEP):
                self.orphans.evict(primary, replica.hwm)
                del self._evicting[primary]
            return

    def forget_former_predecessors(self, view: View) -> None:
        """After a view change: forget replicas and backups of nodes that are no longer
        predecessors. A predecessor that died and whose range another predecessor absorbed
        stays as an orphan copy until that node's snapshot to us ends: until then it is the
        only copy of that range we hold."""
        node = self._node
        for name in list(self.replicas):
            if name not in node.predecessors:
                replica = self.replicas.pop(name)
                node.snapshots.forget_receiving(name)
                backup = self.backups.pop(name, None)
                covered = self.covered.pop(name, None)
                member = view.get(name)
                if member is not None and member.status is Status.DEAD and node.ring.owners:
                    absorber = node.ring.primary(Slot(member.token))
                    if absorber in node.predecessors:
                        self.orphans.keep(name, Orphan(absorber, replica, backup, covered))
        self.orphans.keep_only_absorbed_by(node.predecessors)

    def forget_orphans_of(self, absorber: NodeId) -> None:
        """``absorber``'s snapshot to us is complete: the orphan copies it re-replicated are
        superseded (``Orphans.supersede``)."""
        self.orphans.supersede(absorber)
