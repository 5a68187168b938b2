"""What the core hands its roles (``smr.node.ports``): the seat is replaced, never changed,
on every view change, and the core's own fields read it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from smr.node.ports import Seat
from smr.ring.ids import Incarnation, NodeId, Token
from smr.ring.view import Member, Status
from smr.wire.codec import encode
from smr.wire.kinds import RequestId
from smr.wire.messages import Pong
from smr.wire.peer import Gossip, Probe
from tests.smr.node.fakes import two_node_seat
from tests.smr.node.secondary import Secondary
from tests.smr.node.test_core import Harness


def test_a_seat_is_frozen_and_knows_its_stamp_and_whether_it_owns() -> None:
    seat = two_node_seat()
    assert seat.stamp == (NodeId("a"), Incarnation(1), seat.view.epoch)
    assert seat.owner and not two_node_seat("c").owner
    with pytest.raises(dataclasses.FrozenInstanceError):
        seat.view = seat.view  # type: ignore[misc]


def test_the_core_makes_a_new_seat_on_a_view_change_and_reads_its_fields_from_it(
    tmp_path: Path,
) -> None:
    core = Secondary(tmp_path).core
    before = core.seat()
    assert isinstance(before, Seat) and before.secondaries == (NodeId("b"),)
    assert (core.node_id, core.view, core.ring, core.secondaries) == (
        before.node_id,
        before.view,
        before.ring,
        before.secondaries,
    )
    assert core.replicas_wire == "a,b"
    joiner = Member(NodeId("c"), 1, "tcp://c", Token(64), "", Status.UP, 1)
    core.set_view(core.view.with_member(joiner))
    after = core.seat()
    assert after is not before and before.view.get(NodeId("c")) is None
    assert after.view.get(NodeId("c")) is not None and after.view is core.view
    assert after.ring.range_of(NodeId("a")) != before.ring.range_of(NodeId("a"))
    assert core.ring is after.ring and core.predecessors == after.predecessors


def test_the_peers_handed_out_send_through_the_core_and_count_what_they_drop(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path)
    core = harness.core
    assert not core.peers.send(NodeId("z"), Probe(*core.seat().stamp, RequestId(1)))
    assert core.counters.peer_messages_dropped == 1
    core.peers.reply(b"x", encode(Pong(RequestId(2), NodeId("a"))))
    assert harness.replies == [(b"x", Pong(RequestId(2), NodeId("a")))]
    core.peers.bad_frame(b"x", "garbled")
    assert core.counters.bad_frames == 1


def test_a_view_adopted_through_the_view_changes_is_routed_by_and_gossiped(
    tmp_path: Path,
) -> None:
    node = Secondary(tmp_path)
    core = node.core
    joiner = Member(NodeId("c"), 1, "tcp://c", Token(64), "", Status.UP, 1)
    view = core.view.with_member(joiner)
    core.view_changes.adopt(view)
    assert core.view is view and core.seat().view is view
    gossiped = [peer for peer, message in node.sent if isinstance(message, Gossip)]
    assert gossiped and set(gossiped) <= {NodeId("b"), NodeId("c")}
