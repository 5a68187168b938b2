"""Stand-ins for what the node's core hands a role (``smr.node.ports``), so that a role is
tested alone, through the narrow interface it receives."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from smr.node.ports import Seat
from smr.node.settings import NodeCounters, NodeSettings
from smr.ring.ids import Epoch, Incarnation, NodeId, Token
from smr.ring.moves import MoveRefused
from smr.ring.placement import Ring
from smr.ring.view import Member, Status, View
from smr.wire.codec import decode
from smr.wire.messages import Message
from smr.wire.peer import PeerMessage, PeerMessages

SLOT_BITS = 8


def two_node_seat(me: str = "a") -> Seat:
    """The seat of ``me`` in a view of two up nodes, a at token 0 and b at token 128."""
    view = View(
        [
            Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1),
            Member(NodeId("b"), 1, "tcp://b", Token(128), "", Status.UP, 1),
        ]
    )
    ring = Ring(view, SLOT_BITS)
    owner = NodeId(me) in ring.owners
    roles = bytes(ring.roles_of(NodeId(me), 0)) if owner else bytes(1 << SLOT_BITS)
    return Seat(NodeId(me), Incarnation(1), view, ring, roles, replicas_wire=me if owner else "")


class FakePeers:
    """Records what a role sends and answers; every sender counts as live."""

    def __init__(self) -> None:
        self.sent: list[tuple[NodeId, PeerMessages]] = []
        self.replies: list[tuple[bytes, Message]] = []
        self.bad_frames: list[tuple[bytes, str]] = []

    def send(self, peer: NodeId, message: PeerMessages) -> bool:
        self.sent.append((peer, message))
        return True

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None:
        self.replies.append((identity, decode(frames)))

    def is_live(self, message: PeerMessage, repair: bool = True) -> NodeId | None:
        return message.sender

    def bad_frame(self, identity: bytes, reason: str) -> None:
        self.bad_frames.append((identity, reason))


class FakeMoves:
    """The moves as the retirement and the balancer see them: busy or not, and the moves
    they started (``refusal``: every start refused with it)."""

    def __init__(self) -> None:
        self.busy = False
        self.started: list[tuple[float | None, float | None, bool]] = []
        self.refusal: str | None = None

    def start(
        self, keep_share: float | None, accept_below: float | None = None, passed_on: bool = False
    ) -> str:
        if self.refusal is not None:
            raise MoveRefused(self.refusal)
        self.started.append((keep_share, accept_below, passed_on))
        return f"keeping {keep_share}"


def three_node_view() -> View:
    """Three up nodes: a at token 0, b at 85, c at 170."""
    return View(
        [
            Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1),
            Member(NodeId("b"), 1, "tcp://b", Token(85), "", Status.UP, 1),
            Member(NodeId("c"), 1, "tcp://c", Token(170), "", Status.UP, 1),
        ]
    )


class FakeNode:
    """The node core as a role sees it through its protocol (``MembershipNode``,
    ``ControlNode``, ``MovesNode``, ...), in a few lines: its view (``set_view`` derives the
    ring, roles, predecessors and secondaries as the core does), a clock the test moves
    (``now``), settings, counters, and the peer messages sent and the answers given. The
    roles it asks (``membership``, ``replication``, ...) each test sets as small fakes."""

    def __init__(self, view: View, me: str = "a", replication: int = 1, **settings: Any) -> None:
        self.node_id = NodeId(me)
        self.incarnation = Incarnation(1)
        self.slot_bits = SLOT_BITS
        self.now = 0.0
        self.settings = NodeSettings(replication=replication, **settings)
        self.counters = NodeCounters()
        self.tuples_per_s = 0.0
        self.sent: list[tuple[NodeId, PeerMessages]] = []
        self.replies: list[tuple[bytes, Message]] = []
        # A job without windows: the checkpoint cycle closes none (smr.node.windows).
        self.reducer = SimpleNamespace(windows=None)
        self.set_view(view)

    def clock(self) -> float:
        return self.now

    def set_view(self, view: View) -> None:
        self.view = view
        self.ring = Ring(view, SLOT_BITS)
        r = self.settings.replication
        owner = self.node_id in self.ring.owners
        self.roles = bytes(self.ring.roles_of(self.node_id, r)) if owner else bytes(1 << SLOT_BITS)
        self.predecessors = self.ring.predecessors(self.node_id, r) if owner else ()
        self.secondaries = self.ring.replica_set_of(self.node_id, r)[1:] if owner else ()

    @property
    def stamp(self) -> tuple[NodeId, Incarnation, Epoch]:
        return self.node_id, self.incarnation, self.view.epoch

    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool:
        self.sent.append((peer, message))
        return True

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None:
        self.replies.append((identity, decode(frames)))

    def sent_of(self, kind: type) -> list[tuple[NodeId, Any]]:
        """The peer messages of ``kind`` sent, with their receivers."""
        return [(peer, message) for peer, message in self.sent if isinstance(message, kind)]
