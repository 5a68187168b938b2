"""The joins (``smr.node.joins``) alone, through what they receive (``JoinsNode``,
``JoiningMoves``): a standby node asks an owner to join beside it, its view first; a node
that is not on standby, takes part in a move, or names a node owning nothing is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from smr.node.joins import Joins
from smr.ring.ids import NodeId, Token
from smr.ring.moves import MoveRefused
from smr.ring.view import Member, Status, View
from smr.wire.peer import Gossip, MovePropose
from tests.smr.node.fakes import FakeNode, three_node_view

B = NodeId("b")


def _joins(status: Status = Status.STANDBY, busy: bool = False) -> tuple[FakeNode, Joins]:
    owners = [m for m in three_node_view().members.values() if m.node_id != "a"]
    view = View([*owners, Member(NodeId("a"), 1, "tcp://a", Token(0), "", status, 2)])
    node = FakeNode(view)
    node.membership = SimpleNamespace(view_body=lambda: b"view")  # type: ignore[attr-defined]
    moves = SimpleNamespace(busy=busy)
    return node, Joins(node, moves)  # type: ignore[arg-type]


def test_a_standby_node_asks_to_join_its_view_first() -> None:
    node, joins = _joins()
    assert joins.request(B) == "a asked to join beside b"
    (to_gossip, gossip), (to_ask, ask) = node.sent
    assert (to_gossip, to_ask) == (B, B)
    assert isinstance(gossip, Gossip) and isinstance(ask, MovePropose)
    # "May I join beside you": the joiner named as receiver and copy holder, no range.
    assert (ask.receiver, ask.copy_holder, ask.range_length) == ("a", "a", 0)
    assert joins.asked == (B, 0.0)


@pytest.mark.parametrize(
    ("status", "busy", "beside", "why"),
    [
        (Status.UP, False, B, "only a standby node joins"),
        (Status.STANDBY, True, B, "already takes part"),
        (Status.STANDBY, False, NodeId("z"), "owns no range"),
    ],
)
def test_a_join_request_is_refused_saying_why(
    status: Status, busy: bool, beside: NodeId, why: str
) -> None:
    node, joins = _joins(status, busy)
    with pytest.raises(MoveRefused, match=why):
        joins.request(beside)
    assert not node.sent and joins.asked is None
