"""The moves at the giver (``smr.node.moves``) alone, through what they receive
(``MovesNode``): a move is proposed to its receiver and copy holder, a node takes part in one
move at a time, a refusal calls the move off, and a move called off unfreezes and tells the
others."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.load import LoadMeter
from smr.node.moves import Moves
from smr.ring.ids import Incarnation, NodeId
from smr.ring.moves import MoveRefused
from smr.wire.peer import MoveAnswer, MoveDone, MovePropose
from tests.smr.node.fakes import FakeNode, three_node_view

B, C = NodeId("b"), NodeId("c")


class FakeSnapshots:
    def __init__(self) -> None:
        self.copies_stopped: list[NodeId] = []

    def start_copy(self, holder: NodeId, moving: object) -> None:
        pass

    def stop_copy(self, holder: NodeId) -> None:
        self.copies_stopped.append(holder)


def _moves_alone() -> tuple[FakeNode, Moves, FakeSnapshots]:
    node = FakeNode(three_node_view())
    snapshots = FakeSnapshots()
    node.load = LoadMeter(node.clock)  # type: ignore[attr-defined]
    node.store = StateStore()  # type: ignore[attr-defined]
    node.ledger = LossLedger()  # type: ignore[attr-defined]
    node.balancer = None  # type: ignore[attr-defined]
    node.snapshots = snapshots  # type: ignore[attr-defined]
    node.membership = SimpleNamespace(  # type: ignore[attr-defined]
        from_live_peer=lambda message, repair=True: message.sender
    )
    node.ingest = SimpleNamespace(  # type: ignore[attr-defined]
        restart_stall_record=lambda: None, expected=lambda stream: 0
    )
    return node, Moves(node), snapshots  # type: ignore[arg-type]


def test_a_move_is_proposed_to_its_receiver_and_copy_holder() -> None:
    node, moves, _snapshots = _moves_alone()
    what = moves.start(0.5)
    assert "a gives" in what and moves.busy
    proposals = node.sent_of(MovePropose)
    assert [peer for peer, _ in proposals] == [B, C]
    (_, propose), _ = proposals
    assert (propose.receiver, propose.copy_holder, propose.leave) == (B, C, False)
    # The top of a's range [0, 85) moves; the rest stays.
    assert propose.range_start + propose.range_length == 85 and propose.range_start > 0


def test_a_node_takes_part_in_one_move_at_a_time() -> None:
    _node, moves, _snapshots = _moves_alone()
    moves.start(0.5)
    with pytest.raises(MoveRefused, match="already takes part"):
        moves.start(0.5)


def test_a_refusal_calls_the_move_off_and_tells_the_others() -> None:
    node, moves, snapshots = _moves_alone()
    moves.start(0.5)
    giving = moves.giving
    assert giving is not None
    refusal = MoveAnswer(B, Incarnation(1), node.view.epoch, giving.number, False, "busy")
    moves.on_answer(b"b", refusal)
    assert moves.giving is None and not moves.busy and not moves.frozen
    assert snapshots.copies_stopped == [C]
    # Both are told the move is off (not switched).
    assert [(peer, done.switched) for peer, done in node.sent_of(MoveDone)] == [
        (B, False),
        (C, False),
    ]
    assert node.counters.moves_called_off == 1
    assert "called off" in moves.report()["recent"][-1]["outcome"]
