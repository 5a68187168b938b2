"""The high-water-mark rule, in one place: a tuple at or below its ``(mapper, slot)`` mark
is a repeat, and a mark only ever rises.

:func:`cut` says which tuples of one mapper's batch are new against that mapper's marks, and
what the marks become; :func:`is_repeat` is the rule for one tuple; :func:`raise_marks` and
:func:`raise_vectors` merge marks learned elsewhere (a delta, a moved range) by keeping the
larger. Pure functions over plain mappings: the store, bulk apply, the tuple backup and the
replica call them, and ``smr.native`` holds a compiled twin of :func:`cut`, held to this one
by property tests.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import gt
from typing import Any, Final, TypeVar

S = TypeVar("S", bound=int)
Q = TypeVar("Q", bound=int)
M = TypeVar("M", bound=str)

NO_MARK: Final = 0
"""The mark of a ``(mapper, slot)`` with nothing applied: seqs start at 1."""


@dataclass(frozen=True, slots=True)
class Cut:
    """The outcome of :func:`cut` for one batch.

    ``fresh`` is None when every row is new, else the new rows' indices in order;
    ``marks`` maps each slot with a new row to its new mark (the slots whose marks rose, so
    exactly the slots a checkpoint must carry); ``duplicates`` counts the other rows.
    """

    fresh: list[int] | None
    marks: dict[int, int]
    duplicates: int


def is_repeat(seq: int, mark: int) -> bool:
    """True when a tuple numbered ``seq`` is covered by the mark ``mark`` (already applied)."""
    return seq <= mark


def cut(marks: Mapping[S, Q], slots: Sequence[S], seqs: Sequence[Q]) -> Cut:
    """Which rows of a batch (``slots[i]``, ``seqs[i]``) are new against ``marks``
    (slot -> mark, :data:`NO_MARK` where absent), and the marks after applying them.

    Guarantee: row ``i`` is new exactly when its seq is above its slot's mark as it stands
    after rows ``0 .. i-1`` (the rule applied tuple by tuple: a resend inside one batch, as
    a takeover's replay of several backups makes, counts once), and a slot's mark becomes
    the highest seq of its new rows. A batch with one row per slot, each above its mark, is
    taken whole in C-level passes.
    """
    count = len(slots)
    if len(seqs) != count:
        raise ValueError(f"batch columns differ in length: {count} slots, {len(seqs)} seqs")
    if all(map(gt, seqs, map(marks.get, slots, repeat(NO_MARK)))):
        last = dict(zip(slots, seqs, strict=True))
        if len(last) == count:
            return Cut(None, last, 0)  # type: ignore[arg-type]
    raised: dict[int, int] = {}
    fresh: list[int] = []
    for row, (slot, seq) in enumerate(zip(slots, seqs, strict=True)):
        mark: int | None = raised.get(slot)
        if mark is None:
            mark = marks.get(slot, NO_MARK)
        if seq > mark:
            raised[slot] = seq
            fresh.append(row)
    if len(fresh) == count:
        return Cut(None, raised, 0)
    return Cut(fresh, raised, count - len(fresh))


def fresh_rows(fresh: list[int] | None, *columns: Sequence[Any]) -> tuple[Sequence[Any], ...]:
    """The rows ``fresh`` (a :class:`Cut`'s) of each of a batch's ``columns``: the columns
    themselves when ``fresh`` is None (every row new)."""
    if fresh is None:
        return columns
    return tuple([column[row] for row in fresh] for column in columns)


def raise_marks(marks: MutableMapping[S, Q], learned: Mapping[S, Q]) -> list[S]:
    """Raise each mark of ``marks`` to the one ``learned`` has where that is larger (never
    lowers one); return the slots whose marks rose."""
    rose = []
    for slot, seq in learned.items():
        if seq > marks.get(slot, NO_MARK):
            marks[slot] = seq
            rose.append(slot)
    return rose


def raise_vectors(marks_by_mapper: dict[M, dict[S, Q]], vectors: Mapping[S, Mapping[M, Q]]) -> None:
    """Raise ``marks_by_mapper`` (mapper -> slot -> mark) by ``vectors`` (slot -> mapper ->
    mark, a delta's shape), keeping the larger of each pair."""
    for slot, vector in vectors.items():
        for mapper, seq in vector.items():
            of_mapper = marks_by_mapper.get(mapper)
            if of_mapper is None:
                of_mapper = marks_by_mapper[mapper] = {}
            if seq > of_mapper.get(slot, NO_MARK):
                of_mapper[slot] = seq


def first_uncovered(
    last_seq_by_slot: Mapping[S, Q], marks: Mapping[S, Q], floor: int = NO_MARK
) -> tuple[S, Q] | None:
    """A ``(slot, seq)`` of ``last_seq_by_slot`` that ``marks`` does not cover (a slot
    without a mark counts as marked at ``floor``), or None when every one is a repeat."""
    mark_of = marks.get
    for slot, seq in last_seq_by_slot.items():
        if seq > mark_of(slot, floor):
            return slot, seq
    return None
