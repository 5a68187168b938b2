"""The membership (``smr.node.membership``): alone, through what it receives, it merges a
newer view and refuses a forged one. Then a primary's read lease on one node driven
in-process (``ring.lease``, ``smr.node.control``): a node whose secondary has not echoed a
heartbeat sent within the failure timeout answers reads as a non-owner (a paused or cut-off
primary may have been taken over), counts it, and serves again once an echo renews the
lease; a secondary echoes the beats of a live primary only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from smr.node.core import NodeCore
from smr.node.membership import Membership
from smr.node.settings import NodeSettings
from smr.output.files import OutputSink
from smr.ring.hashing import slot_of
from smr.ring.ids import Epoch, Incarnation, NodeId, Slot, Token
from smr.ring.placement import Ring
from smr.ring.view import Member, Status, View
from smr.wire.codec import decode, encode, pack_body, unpack_body
from smr.wire.kinds import RequestId
from smr.wire.messages import Message
from smr.wire.peer import BeatAck, Gossip, Heartbeat
from smr.wire.reads import DumpReply, DumpRequest, QueryReply, QueryRequest
from tests.smr.links import CallbackLinks
from tests.smr.node.fakes import FakeNode, three_node_view
from tests.smr.node.test_core import JOB, SLOT_BITS

FAILURE_TIMEOUT_S = 0.5
VIEW = View(
    [
        Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1),
        Member(NodeId("b"), 1, "tcp://b", Token(128), "", Status.UP, 1),
    ]
)


class LeasedNode:
    """Node ``me`` of a two-node ring with ``r = 1``, a clock the test moves, and what it
    sends to its peer and replies to clients captured."""

    def __init__(self, tmp_path: Path, me: str = "a") -> None:
        self.now = 100.0
        self.sent: list[Message] = []
        self.replies: list[Message] = []
        self.core = NodeCore(
            NodeId(me),
            JOB,
            VIEW,
            SLOT_BITS,
            CallbackLinks(self._reply, self._send),
            OutputSink(me, tmp_path / f"{me}.jsonl", lambda frames: None),
            clock=lambda: self.now,
            settings=NodeSettings(
                replication=1, failure_timeout_ms=round(FAILURE_TIMEOUT_S * 1000)
            ),
        )
        ring = Ring(VIEW, SLOT_BITS)
        self.key = next(
            k for k in (f"k{i}" for i in range(500)) if ring.primary(slot_of(k, SLOT_BITS)) == me
        )

    def _reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        self.replies.append(decode(frames))
        return True

    def _send(self, node: NodeId, frames: Sequence[bytes]) -> bool:
        self.sent.append(decode(frames))
        return True

    def beats_sent(self) -> list[int]:
        return [m.beat for m in self.sent if isinstance(m, Heartbeat)]

    def query(self) -> dict[str, Any]:
        self.replies.clear()
        self.core.on_frames(b"client", encode(QueryRequest(RequestId(1), pack_body(self.key))))
        (reply,) = self.replies
        assert isinstance(reply, QueryReply)
        answer: dict[str, Any] = unpack_body(reply.body)
        return answer

    def dump_next(self) -> Slot | None:
        self.replies.clear()
        self.core.on_frames(b"client", encode(DumpRequest(RequestId(2), Slot(0), Slot(128), 100)))
        (reply,) = self.replies
        assert isinstance(reply, DumpReply)
        return reply.next_start

    def echo(self, beat: int, sender: str = "b", incarnation: int = 1) -> None:
        ack = BeatAck(NodeId(sender), Incarnation(incarnation), Epoch(VIEW.epoch), beat)
        self.core.on_frames(b"peer", encode(ack))


@pytest.fixture
def node(tmp_path: Path) -> LeasedNode:
    return LeasedNode(tmp_path)


def test_reads_wait_for_the_secondarys_echo_and_stop_when_the_lease_runs_out(
    node: LeasedNode,
) -> None:
    # No echo yet: the node may not answer as the primary.
    assert node.query()["owner"] is False
    assert node.dump_next() == 0
    node.core.tick()
    (beat,) = node.beats_sent()
    assert beat > 0
    node.now += 0.05
    node.echo(beat)
    assert node.query()["owner"] is True
    assert node.dump_next() is None
    assert node.core.status()["reads_unleased"] == 2
    # The lease runs from the beat's sending; past the failure timeout with no newer echo
    # (a pause, a cut), the node answers as a non-owner again.
    node.now += FAILURE_TIMEOUT_S - 0.05 - 0.001
    assert node.query()["owner"] is True
    node.now += 0.002
    assert node.query()["owner"] is False
    assert node.core.status()["reads_unleased"] == 3
    assert node.core.status()["read_lease_ms"] == 0


def test_an_echo_from_a_dead_or_former_incarnation_renews_nothing(node: LeasedNode) -> None:
    node.core.tick()
    (beat,) = node.beats_sent()
    node.echo(beat, incarnation=0)
    assert node.query()["owner"] is False


def test_a_secondary_echoes_a_live_primarys_beats_but_not_a_stalled_beat(
    tmp_path: Path,
) -> None:
    secondary = LeasedNode(tmp_path, me="b")
    primary = LeasedNode(tmp_path, me="a")
    primary.core.tick()
    (beat,) = [m for m in primary.sent if isinstance(m, Heartbeat)]
    secondary.core.on_frames(b"peer", encode(beat))
    assert [m for m in secondary.sent if isinstance(m, BeatAck)] == [
        BeatAck(NodeId("b"), Incarnation(1), Epoch(VIEW.epoch), beat.beat)
    ]
    # A beat from the heartbeat thread of a stalled loop (number 0) is not echoed.
    secondary.sent.clear()
    ((_, _, frames),) = [s for s in primary.core.membership.stalled_beats(900, False)]
    secondary.core.on_frames(b"peer", frames)
    assert not [m for m in secondary.sent if isinstance(m, BeatAck)]


# -- the membership alone, through what it receives (``MembershipNode``) --


def _membership_alone() -> tuple[FakeNode, Membership]:
    node = FakeNode(three_node_view())
    node.restart = SimpleNamespace(settling=False)  # type: ignore[attr-defined]
    return node, Membership(node)  # type: ignore[arg-type]


def test_the_membership_merges_a_newer_view_and_gossips_it() -> None:
    node, membership = _membership_alone()
    standby = Member(NodeId("d"), 1, "tcp://d", Token(40), "", Status.STANDBY, 1)
    newer = node.view.with_member(standby)
    assert membership.merge_view(newer)
    assert node.view.get(NodeId("d")) == standby
    assert node.sent_of(Gossip), "a view that brought news is gossiped"
    # The same view again brings nothing: not set, not gossiped again.
    sent = len(node.sent)
    assert not membership.merge_view(newer) and len(node.sent) == sent


def test_the_membership_refuses_a_forged_view_that_grows_a_neighbour_with_no_takeover() -> None:
    node, membership = _membership_alone()
    before = node.view
    # c marked dead with nobody on its token: b's range would reach over c's slots, whose
    # state b does not hold.
    forged = before.mark_dead(NodeId("c"))
    assert not membership.merge_view(forged)
    assert node.view is before
    assert node.counters.views_refused == 1
    assert not node.sent
