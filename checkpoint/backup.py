"""What a secondary holds for one primary beside its replica (``checkpoint.replica``): a backup
of its tuples.

A secondary of a slot range (docs/design/architecture.md#data-path to #failures) receives, from
every mapper, the same tuple batches as the range's primary, and from the primary its numbered
incremental checkpoints. The life of a backed-up batch:

1. The node receives a batch body, builds a ``BackedUpBatch`` (the body untouched, since
   decoding every tuple is costly, PERF-NOTES, plus a summary: its tuple count and the highest
   seq of each slot in it) and calls ``TupleBackup.add(batch, replica.hwm)``. A batch that the
   replica's state already covers (its checkpoint overtook it) is not stored.
2. Each checkpoint goes to ``PeerReplica.apply_checkpoint`` (``checkpoint.replica``), which
   merges it into the replica's ``StateStore``; the node then calls
   ``TupleBackup.evict_covered(replica.hwm)``, which drops exactly the batches whose every
   tuple the replica's state now holds.
3. On takeover the node promotes the replica's state (``replica.store.snapshot(slots)`` applied
   to a fresh ``StateStore``), then replays ``replay_plan(backup, slots)`` through
   ``StateStore.apply_batch``, whose hwm dedup skips every tuple the promoted state already
   holds: each tuple reaches the promoted state exactly once. ``checkpoint.promote`` does both.

Why eviction by hwm is exact: checkpoints are applied in order, so after checkpoint ``n`` the
replica's state of every slot equals the primary's at its ``n``-th swap, and its hwm vectors
equal the primary's then. Seqs of one ``(mapper, slot)`` are applied in increasing order, so
``seq <= hwm(mapper, slot)`` means the tuple's effect is in the replica's state. A batch all of
whose tuples are covered is therefore never needed again, and a batch with one uncovered tuple
is kept whole. Eviction consults the replica's full hwm (kept by its ``StateStore``), never
only the latest delta, because a checkpoint may cover a batch that has not arrived yet.

Pure logic: no I/O, nothing from ``smr``.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from types import MethodType
from typing import Final, TypeAlias, cast

from smr.checkpoint.hwm import first_uncovered, is_repeat
from smr.checkpoint.ids import MapperId, Seq, Slot
from smr.checkpoint.replica import PeerReplica

__all__ = [
    "SUMMARY_BYTES_PER_SLOT",
    "BackedUpBatch",
    "BackupFull",
    "HwmFn",
    "TupleBackup",
    "replay_plan",
]

HwmFn: TypeAlias = Callable[[MapperId, Slot], Seq]
"""``hwm(mapper, slot)``: the highest seq of ``mapper`` in ``slot`` that the replica's state
holds (0 if none), typically the bound method ``PeerReplica.hwm``."""


class _Lookup(dict[MapperId, tuple[Mapping[Slot, Seq], Seq]]):
    """A replica's ``marks(mapper)`` (its marks and their floor), asked once per mapper for
    one pass over the batches (the replica is not written during it) and then found by a
    dict lookup per batch (see ``_lookup_of``)."""

    def __init__(self, replica: PeerReplica) -> None:
        super().__init__()
        self.replica = replica

    def __missing__(self, mapper: MapperId) -> tuple[Mapping[Slot, Seq], Seq]:
        found = self[mapper] = self.replica.marks(mapper)
        return found


SUMMARY_BYTES_PER_SLOT: Final = 96
"""Memory estimate of one slot of a batch's summary (``last_seq_by_slot``), in bytes. Measured
on CPython 3.11, 64-bit: a dict of n int -> int takes 31-47 bytes per entry (``sys.getsizeof``,
n from 10 to 1000), and the slot and seq are two 28-byte int objects of their own; 87-103 bytes
in all. With a few hundred slots per batch the summary is as big as a body of ~1000 tuples
(~18 bytes each), so ignoring it would halve the real use of ``bytes_held``."""


@dataclass(frozen=True, slots=True)
class BackedUpBatch:
    """One tuple batch as a secondary keeps it: the raw body and a summary for eviction.

    ``body`` is the batch body exactly as received (decoded only on takeover). ``tuple_count``
    is the number of tuples in it, ``last_seq_by_slot`` the highest seq of each slot present in
    it (one entry per slot, so ``len(last_seq_by_slot) <= tuple_count``), or of those of one
    range only once the backup was split by range (``TupleBackup.split_off``): the body may
    then hold tuples of slots the summary does not name, which are another primary's. All
    tuples come from ``mapper``. The summary is trusted, not checked against the body: the
    node computes it when it builds the batch. Do not mutate ``last_seq_by_slot`` once the
    batch is built.
    """

    mapper: MapperId
    body: bytes
    tuple_count: int
    last_seq_by_slot: Mapping[Slot, Seq]

    def __post_init__(self) -> None:
        # O(1) checks only: a batch is built per received frame, on the hot path.
        slot_count = len(self.last_seq_by_slot)
        if self.tuple_count < slot_count or (self.tuple_count > 0) != (slot_count > 0):
            raise ValueError(
                f"batch of mapper {self.mapper!r} claims {self.tuple_count} tuples in "
                f"{slot_count} slots; every tuple has a slot and every slot at least one tuple, "
                "so build the summary from the batch's own columns"
            )

    @property
    def size_bytes(self) -> int:
        """Memory the batch holds, in bytes: ``len(body)`` plus ``SUMMARY_BYTES_PER_SLOT``
        per slot of the summary. The fixed cost of the objects themselves (a few hundred bytes
        per batch) is left out: it is small next to a body of a hundred tuples or more."""
        return len(self.body) + SUMMARY_BYTES_PER_SLOT * len(self.last_seq_by_slot)


class BackupFull(Exception):
    """Storing a batch would take a ``TupleBackup`` past its ``backup_bytes_max``; nothing was
    stored. The node must not ack the batch (the mapper keeps it and resends it later, so
    nothing acked is lost) and should ask the primary for an early checkpoint, whose eviction
    makes room (docs/design/architecture.md#state)."""

    def __init__(self, batch_bytes: int, bytes_held: int, backup_bytes_max: int) -> None:
        super().__init__(
            f"tuple backup full: a batch of {batch_bytes} bytes on top of the {bytes_held} "
            f"bytes held would exceed backup_bytes_max={backup_bytes_max}; withhold the ack "
            "and ask the primary for an early checkpoint, or raise backup_bytes_max"
        )
        self.batch_bytes = batch_bytes
        self.bytes_held = bytes_held
        self.backup_bytes_max = backup_bytes_max


class _Held:
    """A stored batch and its blocker: a ``(slot, seq)`` of it found uncovered the last time
    it was checked. Rechecking the blocker first makes a pass over batches that are still
    uncovered cost one hwm lookup each, instead of one per slot."""

    __slots__ = ("batch", "blocker_seq", "blocker_slot")

    def __init__(self, batch: BackedUpBatch, blocker_slot: Slot, blocker_seq: Seq) -> None:
        self.batch = batch
        self.blocker_slot = blocker_slot
        self.blocker_seq = blocker_seq


class TupleBackup:
    """The batches a secondary holds for ONE primary, in arrival order, until covered.

    Guarantees:

    - ``add`` stores a batch unless the given hwm already covers every tuple of it.
    - ``evict_covered(hwm)`` drops exactly the batches whose every tuple ``hwm`` covers
      (``last_seq_by_slot[slot] <= hwm(mapper, slot)`` for each slot), whatever ``hwm`` held
      at earlier calls: no coverage result is cached from one call to the next.
      ``evict_some(hwm, scans_max)`` drops only covered batches, scanning at most
      ``scans_max`` of them; passes of it until one says it was whole leave what
      ``evict_covered(hwm)`` leaves.
    - ``batches()`` lists the held batches in arrival order. Batches of one mapper are added in
      its channel order, which is seq order in each slot: replay relies on that, since a tuple
      replayed after a higher seq of its ``(mapper, slot)`` would be dropped as a duplicate.
    - ``bytes_held``, ``batch_count`` and ``tuple_count`` are always the sums of
      ``size_bytes``, 1 and ``tuple_count`` over the held batches.

    Bound: with ``backup_bytes_max`` set, ``add`` refuses (raises ``BackupFull``, stores
    nothing) a batch that would take ``bytes_held`` past it, unless the backup is empty (a
    batch bigger than the bound alone is still stored, or it could never be). So
    ``bytes_held`` never exceeds ``max(backup_bytes_max, size of the largest batch)``. With
    ``None`` (the default) the backup does not bound itself and the node must watch
    ``bytes_held``.

    Cost: ``add`` of a batch that is not yet covered, and a pass of ``evict_covered`` over a
    batch still uncovered, take one hwm lookup each (its blocker); a batch is scanned slot by
    slot only when its blocker is covered, which for a primary that applies a batch in one go
    happens about once, when the batch is evicted. Pass ``replica.hwm`` (a ``PeerReplica``'s
    bound method) as ``hwm``: lookups then read the replica's hwm dicts directly, with the
    same answers and about 4x faster (measured ~150 ns per slot against ~600 ns for a call
    through the method and the store, 1500 batches of 300 slots, cold caches).
    """

    def __init__(self, *, backup_bytes_max: int | None = None) -> None:
        if backup_bytes_max is not None and backup_bytes_max <= 0:
            raise ValueError(f"backup_bytes_max must be positive or None, got {backup_bytes_max}")
        self.backup_bytes_max: Final = backup_bytes_max
        """The bound on ``bytes_held`` that ``add`` enforces, in bytes; None: no bound."""
        # Arrival order; eviction rebuilds the list, which costs what the pass costs anyway.
        self._held: list[_Held] = []
        self._bytes_held = 0
        self._tuple_count = 0

    @property
    def bytes_held(self) -> int:
        """Sum of ``size_bytes`` over the held batches."""
        return self._bytes_held

    @property
    def batch_count(self) -> int:
        """Number of held batches."""
        return len(self._held)

    @property
    def tuple_count(self) -> int:
        """Sum of ``tuple_count`` over the held batches."""
        return self._tuple_count

    def add(self, batch: BackedUpBatch, hwm: HwmFn) -> bool:
        """Hold ``batch`` until it is covered; False (nothing stored) if already covered.

        1. Look for a tuple of the batch that ``hwm`` does not cover; stop at the first one.
        2. None: the replica's state already holds every tuple (a checkpoint overtook the
           batch); store nothing and return False.
        3. With a bound, refuse the batch (``BackupFull``, nothing stored) if it does not fit.
        4. Append it, with the uncovered slot as its blocker, and return True.
        """
        # 1.
        blocker = _first_uncovered(batch, hwm, _lookup_of(hwm))
        # 2.
        if blocker is None:
            return False
        # 3.
        size_bytes = batch.size_bytes
        bound = self.backup_bytes_max
        if bound is not None and self._held and self._bytes_held + size_bytes > bound:
            raise BackupFull(size_bytes, self._bytes_held, bound)
        # 4.
        self._held.append(_Held(batch, blocker[0], blocker[1]))
        self._bytes_held += size_bytes
        self._tuple_count += batch.tuple_count
        return True

    def evict_covered(self, hwm: HwmFn) -> int:
        """Drop every batch whose every tuple ``hwm`` covers; return how many were dropped.
        A pass of ``evict_some`` with no bound on its scans."""
        return self._evict(hwm, None)[0]

    def evict_some(self, hwm: HwmFn, scans_max: int) -> bool:
        """A bounded pass of ``evict_covered``: it stops once ``scans_max`` batches were
        scanned slot by slot (step 2), keeping the rest unchecked for a later pass; True if
        it went through every held batch. Every batch it drops is covered, as in
        ``evict_covered``: a pass cut short only keeps covered batches a little longer."""
        return self._evict(hwm, scans_max)[1]

    def _evict(self, hwm: HwmFn, scans_max: int | None) -> tuple[int, bool]:
        """``(dropped, whole)``: for each held batch, in arrival order, until ``scans_max``
        scans (the rest kept as they are):

        1. Recheck its blocker: still uncovered, so keep the batch (one lookup).
        2. Otherwise scan all its slots for an uncovered one, the ones covered before
           included (nothing is assumed about ``hwm`` from an earlier call, so the result is
           exact for this one): found, it becomes the blocker and the batch stays; none, the
           batch is evicted.
        """
        lookup = _lookup_of(hwm)
        kept: list[_Held] = []
        evicted_bytes = evicted_tuples = 0
        scans_left = len(self._held) if scans_max is None else scans_max
        whole = True
        held_all = self._held
        for index, held in enumerate(held_all):
            batch = held.batch
            # 1.
            if lookup is None:
                covered_seq = hwm(batch.mapper, held.blocker_slot)
            else:
                marks, floor = lookup[batch.mapper]
                covered_seq = marks.get(held.blocker_slot, floor)
            if not is_repeat(held.blocker_seq, covered_seq):
                kept.append(held)
                continue
            if scans_left == 0:
                kept.extend(held_all[index:])
                whole = False
                break
            # 2.
            scans_left -= 1
            blocker = _first_uncovered(batch, hwm, lookup)
            if blocker is None:
                evicted_bytes += batch.size_bytes
                evicted_tuples += batch.tuple_count
            else:
                held.blocker_slot, held.blocker_seq = blocker
                kept.append(held)
        evicted = len(held_all) - len(kept)
        self._held = kept
        self._bytes_held -= evicted_bytes
        self._tuple_count -= evicted_tuples
        return evicted, whole

    def split_off(self, slots: AbstractSet[int]) -> TupleBackup:
        """Move ``slots`` out of this backup into a new one (a range that moved to another
        primary, whose checkpoints will cover it from now on).

        The new backup holds every batch with a tuple of ``slots``, its summary cut to those
        slots; this one keeps every batch with a tuple of another slot, its summary cut to
        those (a batch with both is in each: the body is shared, and each replays only its
        own slots). So each backup is evicted by the checkpoints of the one primary its
        slots belong to, and arrival order is kept in both. Unbounded, like a backup held
        for a dead primary.
        """
        moved = TupleBackup()
        kept: list[_Held] = []
        self._bytes_held = self._tuple_count = 0
        for held in self._held:
            batch = held.batch
            summary = batch.last_seq_by_slot
            if slots.isdisjoint(summary):
                kept.append(held)
                self._bytes_held += batch.size_bytes
                self._tuple_count += batch.tuple_count
                continue
            inside = {slot: seq for slot, seq in summary.items() if slot in slots}
            moved.hold(_cut(batch, inside))
            if len(inside) < len(summary):
                outside = {slot: seq for slot, seq in summary.items() if slot not in slots}
                self._held_append(_cut(batch, outside), kept)
        self._held = kept
        return moved

    def hold(self, batch: BackedUpBatch) -> None:
        """Keep ``batch`` with no check of its marks or of the bound (a range moved here
        from another backup: :meth:`split_off`)."""
        self._held_append(batch, self._held)

    def _held_append(self, batch: BackedUpBatch, held: list[_Held]) -> None:
        # Any (slot, seq) of the summary will do as the blocker: eviction rechecks it.
        slot, seq = next(iter(batch.last_seq_by_slot.items()))
        held.append(_Held(batch, slot, seq))
        self._bytes_held += batch.size_bytes
        self._tuple_count += batch.tuple_count

    def batches(self) -> list[BackedUpBatch]:
        """The held batches in arrival order (per mapper and slot, seq order); a new list."""
        return [held.batch for held in self._held]

    def clear(self) -> None:
        """Forget every batch (e.g. when the primary is gone and its range was taken over)."""
        self._held = []
        self._bytes_held = 0
        self._tuple_count = 0


def _cut(batch: BackedUpBatch, summary: Mapping[Slot, Seq]) -> BackedUpBatch:
    """``batch`` with its summary cut to ``summary`` (some of its slots). Its tuple count
    stays the body's: a count only, used for sizes and replay accounting."""
    return BackedUpBatch(batch.mapper, batch.body, batch.tuple_count, summary)


def _first_uncovered(
    batch: BackedUpBatch, hwm: HwmFn, lookup: _Lookup | None
) -> tuple[Slot, Seq] | None:
    """A ``(slot, last seq)`` of ``batch`` that ``hwm`` does not cover, or None if all are.

    ``lookup``, when given, holds the same answers as ``hwm`` (see ``_lookup_of``):
    a dict lookup per slot instead of a call chain, ~4x faster.
    """
    summary = batch.last_seq_by_slot
    mapper = batch.mapper
    if lookup is None:
        for slot, seq in summary.items():
            if not is_repeat(seq, hwm(mapper, slot)):
                return slot, seq
        return None
    marks, floor = lookup[mapper]
    return first_uncovered(summary, marks, floor)


def _lookup_of(hwm: HwmFn) -> _Lookup | None:
    """The replica's marks by mapper, when ``hwm`` is ``PeerReplica.hwm`` bound to a replica
    (not an override); otherwise None, and ``hwm`` must be called."""
    if isinstance(hwm, MethodType) and hwm.__func__ is PeerReplica.hwm:
        return _Lookup(cast(PeerReplica, hwm.__self__))
    return None


def replay_plan(backup: TupleBackup, slots: Container[int]) -> list[BackedUpBatch]:
    """The batches to replay when taking over ``slots``: every held batch with at least one
    slot in ``slots``, in arrival order.

    Replaying them through ``StateStore.apply_batch`` on the promoted replica state, after
    filtering out tuples of other slots (the node's part), applies each tuple missing from that
    state exactly once: the hwm dedup skips the tuples it already holds, and arrival order is
    seq order per ``(mapper, slot)``.
    """
    held = backup.batches()
    if isinstance(slots, AbstractSet):
        # Disjointness runs in C, which matters for thousands of batches.
        return [batch for batch in held if not slots.isdisjoint(batch.last_seq_by_slot)]
    return [batch for batch in held if any(slot in slots for slot in batch.last_seq_by_slot)]
