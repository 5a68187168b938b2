"""A copy holder's copy of a move's slots (``smr.node.move_copies``): it covers the moved
slots, once the move is done, only if it applied the move's final checkpoint."""

from __future__ import annotations

from smr.checkpoint.ids import CheckpointNumber
from smr.checkpoint.replica import PeerReplica
from smr.node.move_copies import IncomingCopy
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import SlotRange

B = NodeId("b")
MOVING = SlotRange(Slot(16), 8, 256)


def _complete_at(number: int) -> PeerReplica:
    replica = PeerReplica()
    replica.begin_snapshot(CheckpointNumber(number))
    replica.end_snapshot()
    return replica


def test_a_copy_covers_the_moved_slots_only_through_the_final_checkpoint() -> None:
    assert IncomingCopy(MOVING, _complete_at(3)).as_orphan(B).covered is None  # no commit
    behind = IncomingCopy(MOVING, _complete_at(3), final=CheckpointNumber(4))
    assert behind.as_orphan(B).covered is None  # the final checkpoint not applied
    whole = IncomingCopy(MOVING, _complete_at(4), final=CheckpointNumber(4))
    orphan = whole.as_orphan(B)
    assert orphan.covered == MOVING and orphan.absorber == B
    assert (
        IncomingCopy(MOVING, PeerReplica(), final=CheckpointNumber(0)).as_orphan(B).covered is None
    )
