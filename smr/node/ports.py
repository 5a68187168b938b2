"""What the node's core hands its roles (docs/design/layout.md#node-context), and what one role
asks of another, as small protocols: a role module imports this module, never the core's or
another role's, so the roles form no import circle with the core.

Guarantee: a :class:`Seat` is never changed once made; the core makes the next one whenever
the view, the ring or the incarnation changes, so a role that reads ``seat()`` sees this
node's place as of now, and one that kept a seat sees the place it decided on.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from smr.checkpoint.ids import CheckpointNumber, MapperId
from smr.checkpoint.promote import Copy, PrimaryCopy
from smr.node.settings import NodeCounters, NodeSettings
from smr.ring.ids import Epoch, Incarnation, NodeId, Slot
from smr.ring.placement import Ring, SlotRange
from smr.ring.view import View
from smr.wire.kinds import ChannelNumber, StreamId
from smr.wire.peer import PeerMessage, PeerMessages


@dataclass(frozen=True)
class Seat:
    """This node's place in the cluster: its id and incarnation, the view it routes by, the
    ring of that view, its role per slot, the nodes it backs up (``predecessors``) and those
    that back it up (``secondaries``), and its replica set as batches name theirs
    (``replicas_wire``; "" if it owns nothing)."""

    node_id: NodeId
    incarnation: Incarnation
    view: View
    ring: Ring
    roles: bytes = field(default=b"", repr=False)
    predecessors: tuple[NodeId, ...] = ()
    secondaries: tuple[NodeId, ...] = ()
    replicas_wire: str = ""
    owner: bool = field(init=False)
    """Whether this node owns a range of the ring (a joiner or a standby node owns none)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "owner", self.node_id in self.ring.owners)

    @property
    def stamp(self) -> tuple[NodeId, Incarnation, Epoch]:
        """What every peer message from this node starts with (``PeerMessage``)."""
        return self.node_id, self.incarnation, self.view.epoch

    def sent_to_all(self, replicas: str) -> bool:
        """Whether a batch sent to ``replicas`` (``Batch.replicas``) went to every node of
        this primary's replica set: a feeder that does not know of a new secondary yet
        (a joiner) must learn of it before this node applies its tuples."""
        mine = self.replicas_wire
        if replicas == mine:
            return True
        return set(mine.split(",")) <= set(replicas.split(","))


class Backlog(NamedTuple):
    """What a heartbeat and ``smr status`` say of a node's inbox (``Ingest.backlog``): the
    tuples queued in it, and whether the last apply turn left batches (its budget spent)."""

    tuples: int
    behind: bool


SeatFn = Callable[[], Seat]
"""The node's seat as of now (``NodeCore.seat``)."""

Clock = Callable[[], float]
"""Monotonic seconds."""


class Peers(Protocol):
    """Messages to and from the other nodes and the clients."""

    def send(self, peer: NodeId, message: PeerMessages) -> bool:
        """Send a peer message (begun with ``Seat.stamp``); False (counted) if ``peer`` is not
        in the view or its link refused it."""
        ...

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None:
        """Answer the sender ``identity`` (a lost answer is counted; the sender retries)."""
        ...

    def is_live(self, message: PeerMessage, repair: bool = True) -> NodeId | None:
        """The sender of ``message`` if it is a live incarnation in the view, else None (and
        the sender is sent the view); see ``Membership.from_live_peer``."""
        ...

    def bad_frame(self, identity: bytes, reason: str) -> None:
        """Count a malformed message from ``identity``, logged at most once a second."""
        ...


class ViewChanges(Protocol):
    """The one way a role changes the view."""

    def adopt(self, view: View) -> None:
        """Route by ``view`` from now on (``NodeCore.set_view``) and gossip it."""
        ...


class MoveState(Protocol):
    """What the retirement and the balancer ask of the moves (``smr.node.moves``)."""

    @property
    def busy(self) -> bool:
        """Whether this node takes part in a move (giving, receiving, holding a copy)."""
        ...

    def start(
        self, keep_share: float | None, accept_below: float | None = None, passed_on: bool = False
    ) -> str:
        """Start a move keeping ``keep_share`` of the load (``Moves.start``); what moves, or
        ``MoveRefused`` saying why none can start."""
        ...


class SecondaryFollowing(Protocol):
    """What the handoff asks of the snapshots (``smr.node.snapshots``)."""

    def follow_secondaries(self, secondaries: tuple[NodeId, ...], changed_range: bool) -> None:
        """Send each of ``secondaries`` a snapshot of this node's range if it changed or the
        secondary is new (re-replication)."""
        ...


@dataclass(frozen=True)
class Verdict:
    """Intake's answer to a batch of a finished mapper (``Retirement.admit``): acked as
    duplicates (``refusal`` None), or refused with ``refusal``, a seq past the mapper's last."""

    refusal: str | None = None


class FinishedMappers(Protocol):
    """What intake asks of the retirement (``smr.node.retirement``, step 4)."""

    def admit(self, mapper: MapperId, seqs: Sequence[int]) -> Verdict | None:
        """None if ``mapper`` has not finished (intake goes on), else the verdict, counted."""
        ...


class MoveAdmission(Protocol):
    """What intake asks of the moves (``smr.node.moves``, step 4)."""

    def admission(
        self, identity: bytes, stream: StreamId, slots: Collection[int]
    ) -> tuple[int, int] | None:
        """None if no slot of ``slots`` is frozen here; else the batch is refused, noted, and
        this is the frozen range as (first slot, length)."""
        ...


class TupleBackup(Protocol):
    """What intake asks of the replication (``smr.node.replication``)."""

    def back_up(
        self, mapper: MapperId, body: bytes, tuple_count: int, last_seq_by_slot: dict[int, int]
    ) -> bool:
        """Keep a batch for its primary until a checkpoint covers it; True if kept."""
        ...


class CoreSide(Protocol):
    """What the core's ``Peers`` and ``ViewChanges`` are made of (``smr.node.core.NodeCore``)."""

    @property
    def membership(self) -> ViewGossip: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...
    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None: ...
    def bad_frame(self, identity: bytes, reason: str) -> None: ...
    def set_view(self, view: View) -> None: ...


class CorePeers:
    """The core's :class:`smr.node.ports.Peers`: its links, counted, and the membership's
    check of a sender."""

    def __init__(self, core: CoreSide) -> None:
        self._core = core

    def send(self, peer: NodeId, message: PeerMessages) -> bool:
        return self._core.peer_send(peer, message)

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None:
        self._core.reply(identity, frames)

    def is_live(self, message: PeerMessage, repair: bool = True) -> NodeId | None:
        return self._core.membership.from_live_peer(message, repair)

    def bad_frame(self, identity: bytes, reason: str) -> None:
        self._core.bad_frame(identity, reason)


class CoreViewChanges:
    """The core's :class:`smr.node.ports.ViewChanges`: set the view, then gossip it."""

    def __init__(self, core: CoreSide) -> None:
        self._core = core

    def adopt(self, view: View) -> None:
        self._core.set_view(view)
        self._core.membership.gossip()


class ViewGossip(Protocol):
    """What the roles ask of the membership (``smr.node.membership``): who sent a message,
    and the view told to the peers."""

    def from_live_peer(self, message: PeerMessage, repair: bool = True) -> NodeId | None:
        """The sender of ``message`` if it is a live incarnation in the view, else None (and
        the sender is sent the view)."""
        ...

    def gossip(self) -> None:
        """Send this node's view to its ring neighbours."""
        ...

    def view_body(self) -> bytes:
        """This node's view, packed for a message."""
        ...


class JoinProgress(Protocol):
    """What a copy's progress asks of the joins (``smr.node.joins``, step 4)."""

    def progress(self) -> None:
        """Tell the giver how far the joiner's copy is, once it caught up."""
        ...


class MoveCopies(Protocol):
    """What the snapshots and the replication tell the moves (``smr.node.moves``, step 3) of
    a copy of moving slots."""

    def copied(self, giver: NodeId, through: CheckpointNumber) -> None:
        """This node's copy of ``giver``'s moving slots is complete through ``through``."""
        ...

    def joining(self) -> JoinProgress:
        """The joins part of the moves."""
        ...


class TakenCopies(Protocol):
    """What the taking side (``smr.node.move_taking``) and the moves ask of the replication
    (``smr.node.replication``): the copy of the moving slots, and the replica they are split
    off."""

    def has_complete_replica(self, owner: NodeId, slots: SlotRange | None = None) -> bool: ...
    def expect_copy(self, giver: NodeId, moving: SlotRange) -> None: ...
    def note_final(self, giver: NodeId, final: CheckpointNumber) -> None: ...
    def drop_copy(self, giver: NodeId) -> None: ...
    def copy_to_orphan(self, giver: NodeId, receiver: NodeId) -> None: ...
    def last_checkpoint_of(self, owner: NodeId) -> CheckpointNumber | None: ...
    def split_off(self, giver: NodeId, slots: set[Slot]) -> PrimaryCopy: ...


class Promotion(Protocol):
    """What the receiver (``smr.node.move_taking``) asks of the recovery
    (``smr.node.recovery``)."""

    def promote_slots(self, copies: Sequence[Copy], slots: Collection[Slot]) -> int: ...
    def crashed(self, peer: NodeId) -> bool: ...


class TakingIntake(Protocol):
    """What the receiver (``smr.node.move_taking``) asks of the intake (``smr.node.ingest``);
    the giver asks more (``smr.node.giving.GivingIntake``)."""

    @property
    def reading_paused(self) -> bool: ...
    def expected(self, stream: StreamId) -> ChannelNumber: ...


class SnapshotReceiving(Protocol):
    """What the replication and the recovery ask of the snapshots (``smr.node.snapshots``)."""

    def forget_receiving(self, primary: NodeId) -> None:
        """Drop the snapshot being received from ``primary``, if any."""
        ...


class NodeBasics(Protocol):
    """What most roles see of the node (each role's protocol adds what else it uses): its
    id, view and ring, the stamp of its peer messages, its clock, settings and counters."""

    @property
    def node_id(self) -> NodeId: ...
    @property
    def view(self) -> View: ...
    @property
    def ring(self) -> Ring: ...
    @property
    def stamp(self) -> tuple[NodeId, Incarnation, Epoch]: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def settings(self) -> NodeSettings: ...
    @property
    def counters(self) -> NodeCounters: ...
