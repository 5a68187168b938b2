"""The giver's record and checks (``smr.node.giving``): a move in words, whether the ring
still plans it (the receiver and copy holder it names), and whether the giver's own range
still covers the moving slots."""

from __future__ import annotations

from smr.node.giving import describe, holds, still_planned
from smr.ring.ids import NodeId, Slot, Token
from smr.ring.moves import plan_move
from smr.ring.placement import Ring, SlotRange
from smr.ring.view import Member, Status
from tests.smr.node.fakes import SLOT_BITS, three_node_view

A = NodeId("a")


def test_a_move_is_still_planned_until_the_ring_names_other_nodes() -> None:
    view = three_node_view()
    ring = Ring(view, SLOT_BITS)
    plan = plan_move(ring, A, 1, Slot(40))
    assert still_planned(ring, 1, plan)
    assert describe(plan) == "a gives slots [40, 85) (45 slots) to b, c holding a copy"
    # A node joins between b and c: the copy holder (the second owner clockwise) changes.
    joined = view.with_member(Member(NodeId("d"), 1, "tcp://d", Token(120), "", Status.UP, 1))
    assert not still_planned(Ring(joined, SLOT_BITS), 1, plan)


def test_the_giver_holds_the_moving_slots_only_inside_its_own_range() -> None:
    ring = Ring(three_node_view(), SLOT_BITS)
    assert holds(ring, A, SlotRange(Slot(40), 45, 256))
    assert not holds(ring, A, SlotRange(Slot(80), 10, 256))
    assert not holds(ring, NodeId("gone"), SlotRange(Slot(0), 1, 256))
