"""One store's dedup memory: the ``(mapper, slot)`` high-water marks, the slots whose mark rose
since the last swap (their vectors go into the next delta), and the finished mappers it
retired. The rule that a tuple at or below its mark is a repeat is :mod:`checkpoint.hwm`'s;
this part keeps the marks it is applied to, and only ever raises one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final, cast

from smr.checkpoint.hwm import is_repeat, raise_marks, raise_vectors
from smr.checkpoint.ids import MapperId, Seq, Slot

_NO_MARKS: Final[Mapping[Slot, Seq]] = MappingProxyType({})


class Marks:
    """The marks of one ``StateStore`` (which asks them through the methods below)."""

    def __init__(self) -> None:
        # Mapper-major, since apply_batch checks one mapper's hwms for a whole batch.
        self._hwm: dict[MapperId, dict[Slot, Seq]] = {}
        # Slots whose hwm rose since the last swap: their vectors go into the next delta.
        self._dirty_slots: set[Slot] = set()
        # Finished mappers whose hwms this store has let go of (see ``retire``), and those
        # retired since the last swap, which go into the next delta.
        self._retired: dict[MapperId, Seq] = {}
        self._retired_dirty: dict[MapperId, Seq] = {}

    def slots(self) -> set[Slot]:
        """Every slot with a mark."""
        return {slot for hwm_of_slot in self._hwm.values() for slot in hwm_of_slot}

    def entries(self) -> int:
        """How many ``(mapper, slot)`` marks are held: one per slot each mapper wrote to."""
        return sum(len(hwm_of_slot) for hwm_of_slot in self._hwm.values())

    @property
    def retired(self) -> Mapping[MapperId, Seq]:
        """``{mapper: last seq}`` of the retired mappers (read-only)."""
        return MappingProxyType(self._retired)

    def retired_last(self, mapper: MapperId) -> Seq | None:
        """The last seq of ``mapper`` if it was retired, else None."""
        return self._retired.get(mapper)

    def retire(self, mapper: MapperId, last: Seq, *, forget_hwms: bool = True) -> int:
        """``StateStore.retire``: record that ``mapper`` finished at ``last`` and, with
        ``forget_hwms``, drop its marks at or below ``last``; how many went."""
        if last > self._retired.get(mapper, -1):
            self._retired[mapper] = last
            self._retired_dirty[mapper] = last
        if not forget_hwms:
            return 0
        hwm_of_slot = self._hwm.pop(mapper, None)
        if not hwm_of_slot:
            return 0
        # A seq past ``last`` breaks the mapper's word: keep it rather than guess.
        kept = {slot: seq for slot, seq in hwm_of_slot.items() if seq > last}
        if kept:
            self._hwm[mapper] = kept
        # The replicas may hold these hwms (a promotion brought them back and a checkpoint
        # shipped them): the next delta tells them to drop them again.
        self._retired_dirty[mapper] = self._retired[mapper]
        return len(hwm_of_slot) - len(kept)

    def forget_retired(self) -> int:
        """Drop the marks that retired mappers still have; how many went."""
        retired = self._retired
        return sum(
            self.retire(mapper, retired[mapper])
            for mapper in [m for m in self._hwm if m in retired]
        )

    def hwm(self, mapper: MapperId, slot: Slot) -> Seq:
        """The highest seq of ``mapper`` applied to ``slot``; 0 if none."""
        hwm_of_slot = self._hwm.get(mapper)
        return Seq(0) if hwm_of_slot is None else hwm_of_slot.get(slot, Seq(0))

    def vector(self, slot: Slot) -> dict[MapperId, Seq]:
        """``{mapper: hwm}`` of ``slot`` for every mapper with a tuple applied there."""
        return {
            mapper: hwm_of_slot[slot]
            for mapper, hwm_of_slot in self._hwm.items()
            if slot in hwm_of_slot
        }

    def of_mapper(self, mapper: MapperId) -> Mapping[Slot, Seq]:
        """``{slot: hwm}`` of ``mapper`` (read-only)."""
        return MappingProxyType(self._hwm.get(mapper, {}))

    def marks(self, mapper: MapperId) -> Mapping[Slot, Seq]:
        """``{slot: hwm}`` of ``mapper``, the own dict (no copy, no proxy: the duplicate cut
        reads it per tuple); a caller must not keep it past its next write."""
        return self._hwm.get(mapper, _NO_MARKS)

    def take(self, mapper: MapperId, marks: Mapping[int, int]) -> None:
        """Set ``mapper``'s marks of ``marks``' slots (a :class:`~checkpoint.hwm.Cut`'s, which
        only raise them) and mark those slots dirty."""
        if marks:
            hwm_of_slot = cast(dict[int, int], self._hwm.setdefault(mapper, {}))
            hwm_of_slot.update(marks)
            self._dirty_slots.update(cast(Mapping[Slot, Seq], marks))

    def raise_one(self, mapper: MapperId, slot: Slot, seq: Seq) -> None:
        """Raise ``mapper``'s mark in ``slot`` to ``seq`` (never lowers it); the slot dirty."""
        self._dirty_slots.update(raise_marks(self._hwm.setdefault(mapper, {}), {slot: seq}))

    def is_duplicate(self, mapper: MapperId, slot: Slot, seq: Seq) -> bool:
        """True when the tuple ``(mapper, slot, seq)`` was already applied (or consumed)."""
        return is_repeat(seq, self.hwm(mapper, slot))

    def take_dirty(self) -> tuple[dict[Slot, dict[MapperId, Seq]], dict[MapperId, Seq]]:
        """For a swap: the full vectors of the dirty slots and the mappers retired since the
        last swap; both start again empty."""
        vectors = self.vectors(self._dirty_slots)
        self._dirty_slots = set()
        retired, self._retired_dirty = self._retired_dirty, {}
        return vectors, retired

    def raise_vectors(self, vectors: Mapping[Slot, Mapping[MapperId, Seq]]) -> None:
        """Keep the larger of each mark and a delta's (marks nothing dirty)."""
        raise_vectors(self._hwm, vectors)

    def adopt(
        self, retired: Mapping[MapperId, Seq], vectors: Mapping[Slot, Mapping[MapperId, Seq]]
    ) -> None:
        """Take another store's retired mappers (the marks here kept) and its marks of some
        slots (``vectors``, as :meth:`vectors` gives them), keeping the larger of each."""
        for mapper, last in retired.items():
            self.retire(mapper, last, forget_hwms=False)
        raise_vectors(self._hwm, vectors)

    def drop_slots(self, dropped: Iterable[Slot]) -> None:
        """Forget every mark of ``dropped``."""
        dropped = set(dropped)
        for mapper in list(self._hwm):
            hwm_of_slot = self._hwm[mapper]
            for slot in dropped:
                hwm_of_slot.pop(slot, None)
            if not hwm_of_slot:
                del self._hwm[mapper]
        self._dirty_slots -= dropped

    def vectors(self, slots: set[Slot]) -> dict[Slot, dict[MapperId, Seq]]:
        """``{slot: vector(slot)}`` for ``slots``, in time proportional to the output."""
        vectors: dict[Slot, dict[MapperId, Seq]] = {}
        for mapper, hwm_of_slot in self._hwm.items():
            # Walk the smaller side: a mapper may have touched few slots, or many.
            if len(hwm_of_slot) <= len(slots):
                found = [(slot, seq) for slot, seq in hwm_of_slot.items() if slot in slots]
            else:
                found = [(slot, hwm_of_slot[slot]) for slot in slots if slot in hwm_of_slot]
            for slot, seq in found:
                vector = vectors.get(slot)
                if vector is None:
                    vectors[slot] = {mapper: seq}
                else:
                    vector[mapper] = seq
        return vectors
