"""The exchange of restored views at a restart from disk (``smr.node.restart``): a restored
node tells every member its view, holds pings, reads and batches until it has heard the
other owners (or the settle time passed), and a node revived from an older disk fences on
the newer view its peers restored, never serving its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from smr.api import Job
from smr.checkpoint.store import StateStore
from smr.node.core import NodeCore
from smr.node.restart import RestartExchange
from smr.node.settings import NodeSettings
from smr.ring.hashing import even_tokens
from smr.ring.ids import Incarnation, NodeId, Slot
from smr.ring.view import Member, Status, View, successor_takes_over
from smr.sim.nodes import MemoryOutput
from smr.wire.codec import decode, encode, pack_body
from smr.wire.kinds import RequestId
from smr.wire.messages import Message, Ping, Pong
from smr.wire.peer import Gossip
from tests.smr.links import CallbackLinks

SLOT_BITS = 8
N0, N1, N2 = NodeId("n0"), NodeId("n1"), NodeId("n2")
SETTLE_3_S = NodeSettings(restart_settle_ms=3000)
LEFT_OUT_N2 = NodeSettings(restart_settle_ms=3000, restart_left_out=frozenset({"n2"}))


def _count(key: Any, value: Any, state: dict[str, Any], emit: Any) -> None:
    state["count"] = state.get("count", 0) + value


JOB = Job("count", map=lambda record, emit: None, reduce=_count)
VIEW = View(
    Member(NodeId(f"n{i}"), Incarnation(1), f"sim://n{i}", token, "", Status.UP, 1)
    for i, token in enumerate(even_tokens(3, SLOT_BITS))
)


def test_the_exchange_tells_every_member_once_and_settles_on_hearing_the_owners() -> None:
    exchange = RestartExchange(N0, SETTLE_3_S, restored=True)
    assert exchange.settling
    view = successor_takes_over(VIEW, N1)  # n1 dead: n2 took it over
    assert exchange.peers_to_tell(0.0, view) == [N1, N2]  # the dead one too
    assert exchange.peers_to_tell(0.1, view) == []
    exchange.heard(N1, 0.1, view)
    assert exchange.settling  # n1 is dead: n2, the other owner, is awaited
    exchange.heard(N2, 0.2, view)
    assert not exchange.settling


def test_the_exchange_settles_at_its_bound_without_an_owner_that_never_answers() -> None:
    exchange = RestartExchange(N0, SETTLE_3_S, restored=True)
    exchange.peers_to_tell(10.0, VIEW)
    exchange.heard(N1, 10.5, VIEW)
    exchange.settle_if_done(12.9, VIEW)
    assert exchange.settling
    exchange.settle_if_done(13.0, VIEW)
    assert not exchange.settling


def test_a_crashed_node_waits_for_every_owner_but_those_left_out() -> None:
    # Crashed (no clean stop): an owner not heard may have taken it over; no bound.
    exchange = RestartExchange(N0, SETTLE_3_S, restored=True, crashed=True)
    exchange.peers_to_tell(10.0, VIEW)
    exchange.heard(N1, 10.5, VIEW)
    exchange.settle_if_done(60.0, VIEW)
    assert exchange.settling
    exchange.heard(N2, 61.0, VIEW)
    assert not exchange.settling and exchange.take_settled() and not exchange.take_settled()
    assert exchange.left_out_takers([N1]) == []  # nobody left out: nothing to doubt
    # n2 left out of the restart: settled without it, and doubting, if it was a taker.
    left = RestartExchange(N0, LEFT_OUT_N2, restored=True, crashed=True)
    left.peers_to_tell(10.0, VIEW)
    assert not left.take_settled()  # not settled yet
    left.heard(N1, 10.5, VIEW)
    assert not left.settling and left.take_settled()
    assert left.left_out == {N2} and left.left_out_takers([N1, N2]) == [N2]
    # A clean stop: no taker served past it, nothing to doubt; the bound applies.
    clean = RestartExchange(N0, LEFT_OUT_N2, restored=True)
    clean.peers_to_tell(10.0, VIEW)
    clean.heard(N1, 10.5, VIEW)
    assert not clean.settling and clean.left_out_takers([N2]) == []
    # A node that started empty has nothing to settle.
    assert not RestartExchange(N0, SETTLE_3_S, restored=False).take_settled()


def test_a_node_that_started_empty_never_settles() -> None:
    exchange = RestartExchange(N0, SETTLE_3_S, restored=False)
    assert not exchange.settling and exchange.peers_to_tell(0.0, VIEW) == []


class _Node:
    """One NodeCore with its sends and replies recorded, on a hand-moved clock."""

    def __init__(
        self,
        node_id: NodeId,
        view: View,
        store: StateStore | None,
        crashed: bool = False,
        left_out: frozenset[str] = frozenset(),
    ) -> None:
        self.now = 0.0
        self.sent: list[tuple[NodeId, Message]] = []
        self.replies: list[Message] = []
        self.core = NodeCore(
            node_id,
            JOB,
            view,
            SLOT_BITS,
            CallbackLinks(self._reply, self._send),
            MemoryOutput(node_id),
            clock=lambda: self.now,
            settings=NodeSettings(replication=1, restart_left_out=left_out),
            store=store,
            restored_from_crash=crashed,
        )

    def _reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        self.replies.append(decode(frames))
        return True

    def _send(self, node: NodeId, frames: Sequence[bytes]) -> bool:
        self.sent.append((node, decode(frames)))
        return True

    def ping(self) -> bool:
        """Whether a ping is answered now."""
        before = len(self.replies)
        self.core.on_frames(b"client", encode(Ping(RequestId(1))))
        return any(isinstance(reply, Pong) for reply in self.replies[before:])


def _store_with_a_key() -> StateStore:
    store = StateStore()
    store.commit(Slot(0), "stale", {}, {"count": 1})
    return store


def test_a_revived_node_answers_nothing_until_it_hears_a_newer_view_and_then_fences() -> None:
    # n1 was killed and taken over by n2; at the restart it comes back from its older disk,
    # holding the view in which it is up.
    revived = _Node(N1, VIEW, _store_with_a_key())
    assert not revived.ping()
    revived.now = 0.1
    revived.core.tick()
    assert sorted(peer for peer, message in revived.sent if isinstance(message, Gossip)) == [
        N0,
        N2,
    ]
    assert not revived.ping() and revived.core.restart.settling
    newer = successor_takes_over(VIEW, N1)
    gossip = Gossip(N2, Incarnation(1), newer.epoch, pack_body(newer.to_wire()))
    revived.core.on_frames(b"n2", encode(gossip))
    assert revived.core.counters.fenced == 1
    assert revived.core.store.key_count() == 0  # its older state is served by nobody
    assert revived.core.ring.range_of(N1) is None


def test_a_restored_node_answers_once_every_other_owner_was_heard() -> None:
    node = _Node(N0, VIEW, _store_with_a_key())
    node.now = 0.1
    node.core.tick()
    body = pack_body(VIEW.to_wire())
    for peer in (N1, N2):
        assert not node.ping()
        gossip = Gossip(peer, Incarnation(1), VIEW.epoch, body)
        node.core.on_frames(peer.encode(), encode(gossip))
    assert node.ping() and not node.core.restart.settling
    assert node.core.counters.held_while_settling == 2


def test_a_crashed_node_whose_taker_was_left_out_counts_what_it_holds_lost() -> None:
    # n0 crashed before the stop; n1, which holds its copy (r = 1) and so would have taken
    # it over, is left out of the restart: n0 cannot know whether n1 served past its disk.
    node = _Node(N0, VIEW, _store_with_a_key(), crashed=True, left_out=frozenset({"n1"}))
    node.now = 0.1
    node.core.tick()
    gossip = Gossip(N2, Incarnation(1), VIEW.epoch, pack_body(VIEW.to_wire()))
    node.core.on_frames(N2.encode(), encode(gossip))
    assert not node.core.restart.settling
    node.core.tick()
    assert node.core.ledger.is_lost(Slot(0))
    assert node.core.store.get(Slot(0), "stale") == {"count": 1}  # kept, not served
    # Had it stopped cleanly, nothing served past its disk: it serves what it restored.
    clean = _Node(N0, VIEW, _store_with_a_key(), left_out=frozenset({"n1"}))
    clean.now = 0.1
    clean.core.tick()
    clean.core.on_frames(N2.encode(), encode(gossip))
    clean.core.tick()
    assert not clean.core.restart.settling and not clean.core.ledger.is_lost(Slot(0))


def test_a_node_that_started_empty_answers_at_once() -> None:
    assert _Node(N0, VIEW, None).ping()
