"""The taking side of a move (``smr.node.move_taking``) alone, through what it receives
(``MoveTakingNode``, ``TakingMoves``): the receiver says why it is not ready for a move (its
replica of the giver incomplete or short of the moving slots, its inbox full, or too busy
for a balancing move), and agrees to a proposal, holding a copy as the copy holder."""

from __future__ import annotations

from types import SimpleNamespace

from smr.node.move_taking import MoveTaking
from smr.ring.ids import Incarnation, NodeId, Slot
from smr.ring.moves import plan_move
from smr.ring.placement import SlotRange
from smr.wire.kinds import MoveNumber
from smr.wire.peer import MovePropose
from tests.smr.node.fakes import FakeNode, three_node_view

A, B, C = NodeId("a"), NodeId("b"), NodeId("c")
MOVING = SlotRange(Slot(40), 45, 256)


class FakeCopies:
    """The replication as the taking side asks it: which replicas are complete, and the
    copies it is asked to hold."""

    def __init__(self, complete: bool = True, covers: bool = True) -> None:
        self.complete, self.covers = complete, covers
        self.expected: list[tuple[NodeId, SlotRange]] = []

    def has_complete_replica(self, owner: NodeId, slots: SlotRange | None = None) -> bool:
        return self.complete and (slots is None or self.covers)

    def expect_copy(self, giver: NodeId, moving: SlotRange) -> None:
        self.expected.append((giver, moving))


def _taking(me: str, copies: FakeCopies, paused: bool = False, busy: float = 0.0) -> MoveTaking:
    node = FakeNode(three_node_view(), me=me)
    node.replication = copies  # type: ignore[attr-defined]
    node.ingest = SimpleNamespace(reading_paused=paused)  # type: ignore[attr-defined]
    node.utilization = lambda: busy  # type: ignore[attr-defined]
    moves = SimpleNamespace(joins=None, freeze=lambda slots: None)
    return MoveTaking(node, moves)  # type: ignore[arg-type]


def test_the_receiver_is_ready_only_with_a_complete_covering_replica_and_room() -> None:
    assert _taking("b", FakeCopies()).unready(A, MOVING, 0) is None
    assert "not complete" in str(_taking("b", FakeCopies(complete=False)).unready(A, MOVING, 0))
    assert "does not cover" in str(_taking("b", FakeCopies(covers=False)).unready(A, MOVING, 0))
    assert "overloaded" in str(_taking("b", FakeCopies(), paused=True).unready(A, MOVING, 0))


def test_a_busy_receiver_refuses_a_balancing_move_only() -> None:
    taking = _taking("b", FakeCopies(), busy=0.9)
    assert "busy itself" in str(taking.unready(A, MOVING, 800_000))
    assert taking.unready(A, MOVING, 950_000) is None
    assert taking.unready(A, MOVING, 0) is None  # not a balancing move


def test_the_copy_holder_agrees_by_holding_a_copy_of_the_moving_slots() -> None:
    copies = FakeCopies()
    taking = _taking("c", copies)
    node_view = three_node_view()
    plan = plan_move(FakeNode(node_view).ring, A, 1, MOVING.start)
    propose = MovePropose(
        A, Incarnation(1), node_view.epoch, MoveNumber(1), MOVING.start, 45, False, B, C, 0, False
    )
    taking.agree(A, propose, plan)
    assert copies.expected == [(A, plan.moving)]
    assert taking.holding is not None and taking.receiving is None
