"""The copy of a move's moving slots that its copy holder keeps (``smr.node.moves``, step 3):
a snapshot of them, then the giver's checkpoints cut to them; once the move is done, an
orphan copy absorbed by the receiver (:mod:`smr.node.orphans`)."""

from __future__ import annotations

from dataclasses import dataclass

from smr.checkpoint.delta import DeltaError, decode_delta
from smr.checkpoint.delta_parts import restrict_delta
from smr.checkpoint.ids import CheckpointNumber
from smr.checkpoint.replica import PeerReplica
from smr.node.orphans import Orphan
from smr.ring.ids import NodeId
from smr.ring.placement import SlotRange
from smr.wire.kinds import FrameError
from smr.wire.peer import Checkpoint


@dataclass
class IncomingCopy:
    """A copy of the moving slots of ``giver``'s range, held for a move (``smr.node.moves``,
    step 3): a snapshot of them, then the giver's checkpoints cut to them. It counts as a
    copy of the moved slots only if it applied the move's final checkpoint (``final``,
    known from the commit)."""

    moving: SlotRange
    replica: PeerReplica
    final: CheckpointNumber | None = None

    def apply_checkpoint(self, message: Checkpoint) -> bool:
        """Apply the part of a checkpoint of the giver's about the moving slots; True when
        it was the last part and the copy is complete through it. Raises ``CheckpointGap``
        when the copy missed a checkpoint, ``FrameError`` when the part cannot be read."""
        try:
            delta = decode_delta(message.body)
        except DeltaError as error:
            raise FrameError(f"checkpoint from {message.sender}: {error}") from None
        applied = self.replica.apply_checkpoint(
            message.number,
            restrict_delta(delta, _SlotsOf(self.moving)),
            message.part,
            message.last,
        )
        return applied and message.last and self.replica.is_complete

    def as_orphan(self, receiver: NodeId) -> Orphan:
        """The copy, once the move is done, as an orphan copy absorbed by ``receiver``: it
        covers the moved slots only if it holds the move's final checkpoint."""
        replica = self.replica
        final = self.final
        complete = (
            final is not None
            and replica.is_complete
            and not replica.needs_snapshot
            and replica.last_checkpoint >= final
        )
        return Orphan(receiver, replica, None, self.moving if complete else None)


class _SlotsOf:
    """A slot range as a container (``slot in _SlotsOf(range)``)."""

    __slots__ = ("_range",)

    def __init__(self, slot_range: SlotRange) -> None:
        self._range = slot_range

    def __contains__(self, slot: object) -> bool:
        return isinstance(slot, int) and self._range.contains(slot)
