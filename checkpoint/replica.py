"""A secondary's replica of one primary's state, fed by numbered checkpoints and snapshots
(docs/design/architecture.md#state); the tuples beside it are in ``checkpoint.backup``.

Pure logic: no I/O, nothing from ``smr``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from smr.checkpoint.delta import Delta
from smr.checkpoint.ids import CheckpointNumber, MapperId, Seq, Slot
from smr.checkpoint.store import StateStore

__all__ = ["CheckpointGap", "PeerReplica"]

_SEQ_NONE: Final = Seq(0)


# The checkpoint a replica is at before any: the empty state of a new cluster.
BEFORE_FIRST_CHECKPOINT: Final = CheckpointNumber(0)


class CheckpointGap(Exception):
    """A checkpoint number was skipped: the replica needs a full snapshot."""

    def __init__(
        self, expected: int, received: int, expected_part: int = 0, received_part: int = 0
    ) -> None:
        if received == expected:
            missing = (
                f"part {received_part} of checkpoint {received} arrived while part "
                f"{expected_part} was expected; parts {expected_part}..{received_part - 1} "
                "are missing"
            )
        else:
            missing = (
                f"checkpoint {received} arrived while checkpoint {expected} was expected; "
                f"checkpoints {expected}..{received - 1} are missing"
            )
        super().__init__(
            f"{missing}, so the replica needs a full snapshot: ask the primary for one"
        )
        self.expected = expected
        self.received = received


class PeerReplica:
    """A secondary's copy of one primary's state, fed by numbered checkpoints and snapshots.

    The channel primary -> secondary is ordered, and the primary sends checkpoint ``n``
    before any snapshot chunk it reads after its ``n``-th swap. Protocol:

    1. Fresh replica: ``needs_snapshot`` is True; checkpoints are ignored (return False) until
       a snapshot begins.
    2. ``begin_snapshot(as_of)``: ``as_of`` is the number of the last checkpoint the primary
       had swapped when it started reading the snapshot. The current state is kept: chunks
       replace their slots one by one, and a slot not chunked yet keeps its older, whole
       state (checkpoints apply on top of it), so a replica whose primary dies in the middle
       of re-replicating is still promotable.
    3. ``apply_snapshot_chunk(chunk)``: a chunk is the full merged state and full hwm vectors
       of some slots: those slots are replaced entirely (``store.drop_slots`` of the chunk's
       slots, then ``store.apply_delta(chunk)``).
    4. Checkpoints numbered ``as_of + 1, as_of + 2, ...`` may arrive interleaved with chunks;
       each is applied in order. Field values in deltas are absolute, never increments, so a
       newer delta applied on top of an older chunk is correct, and a chunk replaces what
       older deltas wrote to its slots.
    5. ``end_snapshot()``: the replica is complete; ``needs_snapshot`` becomes False.
    6. From then on ``apply_checkpoint(number, delta, part, last)`` requires the next part:
       part 0 of ``last_checkpoint + 1`` or the one after the last part applied; otherwise
       it raises ``CheckpointGap`` and sets ``needs_snapshot`` (the node answers by asking
       the primary for a snapshot). What was applied already is a duplicate: ignored,
       returns False. Each part carries whole slots (state and hwm vector together), so
       between two parts every slot is still at one checkpoint: the one before or this one.

    A gap also aborts a snapshot in progress (its chunks and its end, still in flight, are
    ignored until the next ``begin_snapshot``). After a gap with no snapshot begun,
    ``is_complete`` stays True: the state is stale, not partial, and the tuple backup evicted
    against it still holds every batch past it, so promoting it and replaying the backup stays
    exact. A snapshot in progress keeps ``is_complete`` as it was: each slot is either
    replaced by its chunk or still whole from before. (One case stays inexact: a snapshot
    begun right after a gap, promoted before the chunk of a slot whose deltas were missed.)
    Slots a chunk never mentions (a range that moved away) keep stale state: whoever
    promotes a replica takes only the slots of the dead primary's range.
    """

    def __init__(
        self,
        *,
        needs_snapshot: bool = True,
        complete: bool = False,
        last_checkpoint: CheckpointNumber = BEFORE_FIRST_CHECKPOINT,
    ) -> None:
        """A new replica needs a snapshot; :meth:`of_empty_start` and :meth:`split_off`
        make others."""
        self.store = StateStore()
        """The replica's state, in ``master`` only. ``begin_snapshot`` replaces it with a
        fresh store: reach it through the replica, do not keep it."""
        self.needs_snapshot = needs_snapshot
        """True until a snapshot ends, and again after a gap: checkpoints are ignored then."""
        self.last_checkpoint = last_checkpoint
        """Number of the last applied checkpoint (``as_of`` right after ``begin_snapshot``)."""
        self._next_part = 0
        """The part of checkpoint ``last_checkpoint + 1`` expected next."""
        self._snapshot_in_progress = False
        self._is_complete = complete

    @classmethod
    def of_empty_start(cls) -> PeerReplica:
        """The replica of a primary that starts empty with a new cluster: complete at
        checkpoint 0 (the empty state), so that it applies checkpoints from 1 on. A fresh
        replica ignores checkpoints until a snapshot begins, and a snapshot that then
        begins past checkpoint 1 leaves it covering nothing until it ends."""
        return cls(needs_snapshot=False, complete=True)

    @property
    def snapshot_in_progress(self) -> bool:
        """True between ``begin_snapshot`` and ``end_snapshot`` (or a gap that aborts it)."""
        return self._snapshot_in_progress

    @property
    def is_complete(self) -> bool:
        """True when a snapshot ended and none has begun since: every slot's state and hwm
        vector are then the primary's at one moment (its checkpoint ``last_checkpoint``; for
        a slot of a part of the next one applied already, that one; for a slot whose chunk
        was read later, that read), so promoting the store and replaying the tuple backup is
        exact. Only then may the replica be promoted."""
        return self._is_complete

    def hwm(self, mapper: MapperId, slot: Slot) -> Seq:
        """The highest seq of ``mapper`` in ``slot`` that the replica's state holds (0 if
        none): ``marks(mapper)``'s mark of ``slot``, else its floor. Looks the store up at
        each call, so ``replica.hwm`` stays valid as an ``HwmFn`` when ``begin_snapshot``
        replaces the store."""
        marks, floor = self.marks(mapper)
        return marks.get(slot, floor)

    def marks(self, mapper: MapperId) -> tuple[Mapping[Slot, Seq], Seq]:
        """``(marks, floor)``: ``mapper``'s hwm of each slot the replica's state holds a mark
        for (the store's own dict: read it, do not keep it past the next write), and the seq
        that covers every other slot: once the primary retired the mapper (its state held
        all of the mapper's tuples then, and the replica applied that state first), its last
        seq, else 0. One call per batch lets the tuple backup's eviction look each slot up
        in the dict (``checkpoint.backup``)."""
        store = self.store
        return store.hwm_marks(mapper), store.retired_last(mapper) or _SEQ_NONE

    def apply_checkpoint(
        self, number: CheckpointNumber, delta: Delta, part: int = 0, last: bool = True
    ) -> bool:
        """Steps 1, 4 and 6: apply part ``part`` of checkpoint ``number`` (``last``: its
        final part, ``checkpoint.delta.split_delta``) if it is the next one; True if applied.

        ``last_checkpoint`` becomes ``number`` once its last part is applied. Returns False,
        changing nothing, when no snapshot has begun since the replica was created or hit a
        gap (step 1), or for a duplicate (a checkpoint ``<= last_checkpoint``, or a part
        already applied). Raises ``CheckpointGap`` when a checkpoint or a part is skipped,
        after setting ``needs_snapshot`` and aborting any snapshot in progress.
        """
        # 1. No snapshot to build on (fresh, or after a gap): the node has asked for one.
        if self.needs_snapshot and not self._snapshot_in_progress:
            return False
        # 6. A duplicate, or older than the snapshot being built (which already holds it).
        if number <= self.last_checkpoint or (
            number == self.last_checkpoint + 1 and part < self._next_part
        ):
            return False
        # 6. A gap: what was skipped is lost, so only a snapshot can repair the replica.
        if number != self.last_checkpoint + 1 or part != self._next_part:
            expected_part, self._next_part = self._next_part, 0
            self.needs_snapshot = True
            self._snapshot_in_progress = False
            raise CheckpointGap(self.last_checkpoint + 1, number, expected_part, part)
        # 4. and 6. The next part, during a snapshot or after it.
        self.store.apply_delta(delta)
        if last:
            self.last_checkpoint = number
            self._next_part = 0
        else:
            self._next_part = part + 1
        return True

    def begin_snapshot(self, as_of: CheckpointNumber) -> None:
        """Step 2: expect chunks, then checkpoints from ``as_of + 1``; the state is kept.

        Also restarts a snapshot already in progress (the primary began a new one).
        """
        if as_of < 0:
            raise ValueError(f"snapshot as_of must be a checkpoint number >= 0, got {as_of}")
        # The state is kept (step 2): chunks replace it slot by slot.
        self.last_checkpoint = as_of
        self._next_part = 0
        self.needs_snapshot = True
        self._snapshot_in_progress = True

    def abort_snapshot(self) -> None:
        """The snapshot in progress lost a chunk: ignore the rest of it (its chunks and end
        still in flight, and checkpoints) until the next ``begin_snapshot``.

        The replica is no longer complete: the slots of the lost chunk kept their older
        state while the checkpoints applied since ``begin_snapshot`` raised their hwm past
        it (so the tuple backup was evicted against state the replica does not hold). Only
        a new snapshot makes it complete again.
        """
        if not self._snapshot_in_progress:
            return
        self._snapshot_in_progress = False
        self.needs_snapshot = True
        self._is_complete = False

    def apply_snapshot_chunk(self, chunk: Delta) -> None:
        """Step 3: replace the state and hwms of the chunk's slots by the chunk's.

        The chunk's slots are those it has state, an hwm vector or a watermark for. A slot
        the primary holds nothing for appears in no chunk; whatever older checkpoints wrote
        to it is then undone by the later ones, applied in order, so the replica converges
        all the same.
        Ignored outside a snapshot: it belongs to one a gap aborted.
        """
        if not self._snapshot_in_progress:
            return
        self.store.drop_slots(chunk.slots())
        self.store.apply_delta(chunk)

    def end_snapshot(self) -> None:
        """Step 5: the replica is complete; checkpoints from ``last_checkpoint + 1`` follow.

        Ignored outside a snapshot: it ends one a gap aborted.
        """
        if not self._snapshot_in_progress:
            return
        self._snapshot_in_progress = False
        self.needs_snapshot = False
        self._is_complete = True

    def split_off(self, slots: Iterable[Slot]) -> PeerReplica:
        """Move ``slots`` out of this replica into a new one (a range that moved to another
        primary): their state and hwms move by reference, and the new replica is complete
        exactly when this one is. It takes no checkpoints: it is a copy kept as it is, until
        the new primary re-replicates the range (``smr.node.replication.Orphan``)."""
        wanted = set(slots) & self.store.slots()
        copy = PeerReplica(
            needs_snapshot=False, complete=self._is_complete, last_checkpoint=self.last_checkpoint
        )
        copy.store.adopt(self.store, wanted)
        return copy
