"""A slot's event-time watermark over the mappers that feed it
(docs/design/windows.md#a-slots-watermark).

Each mapper stamps what it sends with its own watermark (its largest event time minus its
out-of-orderness); :class:`SlotWatermark` keeps, per mapper, the highest stamp and when it was
last heard from on the node's clock, and computes the slot's watermark:

- the minimum over the mappers that hold it back: heard from within ``idle_timeout_ms`` and
  not finished;
- when there are none such and every known mapper finished, the end of time (every window
  closes);
- when there are none such otherwise (all idle), what it was;
- never lower than it was.

A slot's watermark travels with the slot
(docs/design/windows.md#the-slots-watermark-is-slot-state): :meth:`SlotWatermark.record` is
what a checkpoint carries of it, a :class:`WatermarkRecord` (the slot's watermark and each
mapper's, finished or not, idle or not, but not when each was last heard from: that is a
time of one node's clock), and :meth:`SlotWatermark.resumed` is the watermark a node that
gains the slot goes on from. :class:`WatermarkRecords` keeps a store's records, the ones
changed since the last swap, and merges what arrives by :func:`merge_records`.

Pure: the clock is an argument (``now_ms``), nothing is read from the machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from smr.checkpoint.ids import MapperId, Slot
from smr.checkpoint.windows import END_OF_TIME_MS, START_OF_TIME_MS

__all__ = [
    "MapperStanding",
    "MapperWatermark",
    "SlotWatermark",
    "WatermarkRecord",
    "WatermarkRecords",
    "merge_records",
    "records_from_wire",
]

# The 64-bit range a watermark travels in (START_OF_TIME_MS and END_OF_TIME_MS its ends).
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


class MapperStanding(NamedTuple):
    """One mapper's part of a :class:`WatermarkRecord`: its watermark, whether it finished,
    whether it was idle when the record was taken."""

    watermark_ms: int
    finished: bool
    idle: bool


class WatermarkRecord(NamedTuple):
    """A slot's watermark as its checkpoints carry it: ``current_ms``, the watermark every
    tuple applied since the checkpoint was judged against, and each mapper's
    :class:`MapperStanding`. On the wire, ``[current_ms, {mapper: [watermark_ms, finished,
    idle]}]`` (``checkpoint.delta``)."""

    current_ms: int
    mappers: Mapping[MapperId, MapperStanding]


def merge_records(one: WatermarkRecord, other: WatermarkRecord) -> WatermarkRecord:
    """Both records in one, each part the later of the two: the higher watermarks, a mapper
    finished in either finished, idle only if idle in both (a mapper counted active holds
    the watermark back, which only delays closes). Order does not matter: a replica applying
    an older delta after a newer one, or two copies of a slot promoted together, never go
    back."""
    mappers = dict(one.mappers)
    for mapper, standing in other.mappers.items():
        known = mappers.get(mapper)
        if known is not None:
            standing = MapperStanding(
                max(standing.watermark_ms, known.watermark_ms),
                standing.finished or known.finished,
                standing.idle and known.idle,
            )
        mappers[mapper] = standing
    return WatermarkRecord(max(one.current_ms, other.current_ms), mappers)


@dataclass
class MapperWatermark:
    """One mapper's standing in a slot: its highest watermark, the node clock's time it was
    last heard from, and whether it said it finished."""

    watermark_ms: int
    heard_ms: int
    finished: bool = False


class SlotWatermark:
    """The watermark of one slot, from its mappers' stamps.

    Guarantees: :meth:`current_ms` never decreases; it never exceeds the lowest stamp of a
    mapper that is neither idle nor finished unless it already had (a mapper that appears late
    or wakes up behind cannot reopen closed windows: its old tuples are late); a finished
    mapper never holds it back again."""

    def __init__(self, idle_timeout_ms: int) -> None:
        if idle_timeout_ms < 1:
            raise ValueError(f"idle_timeout_ms must be at least 1, not {idle_timeout_ms}")
        self.idle_timeout_ms = idle_timeout_ms
        self._mappers: dict[MapperId, MapperWatermark] = {}
        self._current_ms = START_OF_TIME_MS

    def heard(self, mapper: MapperId, watermark_ms: int, now_ms: int) -> None:
        """``mapper`` sent something stamped ``watermark_ms`` at ``now_ms``: it is not idle,
        and its watermark rises to the stamp if the stamp is higher. A finished mapper stays
        finished (a resend after its end changes nothing)."""
        known = self._mappers.get(mapper)
        if known is None:
            self._mappers[mapper] = MapperWatermark(watermark_ms, now_ms)
            return
        if known.finished:
            return
        known.watermark_ms = max(known.watermark_ms, watermark_ms)
        known.heard_ms = max(known.heard_ms, now_ms)

    def knows(self, mapper: MapperId) -> bool:
        """Whether ``mapper`` was heard from, or said it finished, here."""
        return mapper in self._mappers

    def running(self) -> list[MapperId]:
        """The mappers known here that have not said they finished (no copy of their
        standings: the checkpoint cycle asks this of every slot)."""
        return [mapper for mapper, m in self._mappers.items() if not m.finished]

    def finished(self, mapper: MapperId, now_ms: int) -> None:
        """``mapper`` said it finished: it never holds the watermark back again."""
        known = self._mappers.setdefault(mapper, MapperWatermark(START_OF_TIME_MS, now_ms))
        known.finished = True
        known.heard_ms = max(known.heard_ms, now_ms)

    def is_idle(self, mapper: MapperId, now_ms: int) -> bool:
        """Whether ``mapper`` has not been heard from for ``idle_timeout_ms``."""
        known = self._mappers[mapper]
        return now_ms - known.heard_ms >= self.idle_timeout_ms

    def advance(self, now_ms: int) -> int:
        """Recompute the slot's watermark at ``now_ms`` (rules in the module docstring) and
        return it."""
        holding = [
            m.watermark_ms
            for m in self._mappers.values()
            if not m.finished and now_ms - m.heard_ms < self.idle_timeout_ms
        ]
        if holding:
            candidate = min(holding)
        elif self._mappers and all(m.finished for m in self._mappers.values()):
            candidate = END_OF_TIME_MS
        else:
            candidate = self._current_ms
        self._current_ms = max(self._current_ms, candidate)
        return self._current_ms

    def hold_at_least(self, watermark_ms: int) -> None:
        """Raise the watermark to ``watermark_ms`` if it is lower: what a node that gains a
        slot learns from the windows it finds already closed there (the watermark had
        reached their last instant)."""
        self._current_ms = max(self._current_ms, watermark_ms)

    @property
    def current_ms(self) -> int:
        """The watermark as of the last :meth:`advance`."""
        return self._current_ms

    def record(self, now_ms: int) -> WatermarkRecord:
        """What a checkpoint carries of this watermark at ``now_ms``
        (:class:`WatermarkRecord`): it changes only when the watermark, a mapper's
        watermark, finish or idleness does."""
        return WatermarkRecord(
            self._current_ms,
            {
                mapper: MapperStanding(m.watermark_ms, m.finished, self.is_idle(mapper, now_ms))
                for mapper, m in self._mappers.items()
            },
        )

    @classmethod
    def resumed(cls, idle_timeout_ms: int, record: WatermarkRecord, now_ms: int) -> SlotWatermark:
        """The watermark a node that gains the slot goes on from at ``now_ms``: ``record``'s,
        each mapper idle as it was there and, if it was not, taken as heard from at
        ``now_ms`` (when it was last heard from is a time of the old owner's clock). So an
        active mapper holds this watermark back for up to one ``idle_timeout_ms`` longer
        than it would have there: closes may come later, and no tuple's verdict changes,
        since the watermark never goes back."""
        resumed = cls(idle_timeout_ms)
        resumed.resume(record, now_ms)
        return resumed

    def resume(self, record: WatermarkRecord, now_ms: int) -> None:
        """:meth:`resumed`, on a watermark that knows no mapper yet."""
        assert not self._mappers, "resume a watermark that knows no mapper"
        self._current_ms = max(self._current_ms, record.current_ms)
        for mapper, standing in record.mappers.items():
            heard_ms = now_ms - self.idle_timeout_ms if standing.idle else now_ms
            self._mappers[mapper] = MapperWatermark(
                standing.watermark_ms, heard_ms, standing.finished
            )

    def mappers(self) -> dict[MapperId, MapperWatermark]:
        """A copy of every mapper's standing (for status and for checkpointing)."""
        return {
            mapper: MapperWatermark(m.watermark_ms, m.heard_ms, m.finished)
            for mapper, m in self._mappers.items()
        }


class WatermarkRecords:
    """The :class:`WatermarkRecord` of each slot of one store, and the slots whose record
    changed since the last swap (their records go into the next delta). A record only ever
    rises (:func:`merge_records`)."""

    def __init__(self) -> None:
        self._records: dict[Slot, WatermarkRecord] = {}
        self._dirty: set[Slot] = set()

    def of(self, slot: Slot) -> WatermarkRecord | None:
        """``slot``'s record, or None if it has none."""
        return self._records.get(slot)

    def slots(self) -> set[Slot]:
        """Every slot with a record."""
        return set(self._records)

    def note(self, slot: Slot, record: WatermarkRecord) -> None:
        """A primary's slot watermark after a cycle: kept (merged), the slot dirty."""
        known = self._records.get(slot)
        merged = record if known is None else merge_records(known, record)
        if merged != known:
            self._records[slot] = merged
            self._dirty.add(slot)

    def take_dirty(self) -> dict[Slot, WatermarkRecord]:
        """For a swap: the records of the dirty slots; the dirty set starts again empty."""
        dirty = {slot: self._records[slot] for slot in self._dirty if slot in self._records}
        self._dirty = set()
        return dirty

    def merge(self, records: Mapping[Slot, WatermarkRecord]) -> None:
        """Keep the later of each record and a delta's (marks nothing dirty)."""
        for slot, record in records.items():
            known = self._records.get(slot)
            self._records[slot] = record if known is None else merge_records(known, record)

    def merge_from(
        self, records_of: Callable[[Slot], WatermarkRecord | None], slots: Iterable[Slot]
    ) -> None:
        """:meth:`merge` the records ``records_of(slot)`` gives of ``slots`` (another
        store's, ``StateStore.watermark``)."""
        self.merge({slot: mark for slot in slots if (mark := records_of(slot)) is not None})

    def of_slots(self, slots: Iterable[Slot]) -> dict[Slot, WatermarkRecord]:
        """``{slot: record}`` of those of ``slots`` that have one."""
        return {slot: self._records[slot] for slot in slots if slot in self._records}

    def drop_slots(self, dropped: Iterable[Slot]) -> None:
        """Forget the records of ``dropped``."""
        for slot in dropped:
            self._records.pop(slot, None)
            self._dirty.discard(slot)


def records_from_wire(watermarks: Any) -> dict[Slot, WatermarkRecord]:
    """The records a decoded delta carries (``checkpoint.delta``); ``ValueError`` naming the
    part unless ``watermarks`` is slot (int >= 0) -> ``[watermark_ms, {mapper id (str):
    [watermark_ms, finished, idle]}]``, every watermark a 64-bit int, ``finished`` and
    ``idle`` bools, arrays as msgpack decodes them (tuples)."""
    if type(watermarks) is not dict:
        raise ValueError(f"delta watermarks must be a map, got {type(watermarks).__name__}")
    records: dict[Slot, WatermarkRecord] = {}
    for slot, record in watermarks.items():
        if type(slot) is not int or slot < 0:
            raise ValueError(f"slot must be a non-negative int, got {slot!r}")
        if type(record) is not tuple or len(record) != 2 or type(record[1]) is not dict:
            raise ValueError(
                f"watermark of slot {slot} must be [watermark_ms, {{mapper: [watermark_ms, "
                f"finished, idle]}}], got {record!r:.80}"
            )
        _check_watermark(record[0], f"watermark of slot {slot}")
        mappers: dict[MapperId, MapperStanding] = {}
        for mapper, standing in record[1].items():
            if type(mapper) is not str:
                raise ValueError(f"mapper id {mapper!r} of slot {slot}'s watermark must be str")
            if type(standing) is not tuple or tuple(map(type, standing[1:])) != (bool, bool):
                raise ValueError(
                    f"mapper {mapper!r} of slot {slot}'s watermark must be [watermark_ms, "
                    f"finished, idle], got {standing!r:.80}"
                )
            _check_watermark(standing[0], f"watermark of mapper {mapper!r} in slot {slot}")
            mappers[MapperId(mapper)] = MapperStanding(*standing)
        records[Slot(slot)] = WatermarkRecord(record[0], mappers)
    return records


def _check_watermark(value: Any, what: str) -> None:
    if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{what} must be a 64-bit int of milliseconds, got {value!r:.80}")
