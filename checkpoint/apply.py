"""The store's hot path: one batch of one mapper's tuples reduced into state
(``StateStore.apply_batch``, whose docstring says what it guarantees), and the outcome it
reports. A module of its own because it is the one loop every tuple goes through, and long."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeAlias, cast

from smr.checkpoint.delta import PLAIN_TYPES, TOMBSTONE
from smr.checkpoint.hwm import cut
from smr.checkpoint.ids import Fragment, Key, MapperId, Seq, Slot
from smr.checkpoint.kernels import IN_FORCE

ReduceFn: TypeAlias = Callable[[Key, Any, dict[str, Any]], None]
"""``reduce_fn(key, value, state)``: folds one value into ``state``, a dict it may mutate."""

FAILURE_EXAMPLES_MAX: Final = 100
"""Failed tuples kept as examples per batch: enough to diagnose a bad reducer, while a reducer
that fails on every tuple cannot make one outcome hold a whole batch of tracebacks."""

MUTABLE_TYPES: Final = (list, dict, set, bytearray)
"""Values of these types may be mutated in place by a reducer: they are deep-copied on read,
and always count as changed on commit, since a caller's "before" may share them with "after"
(and comparing big containers would cost more than shipping them)."""

NO_FIELDS: Final[MappingProxyType[str, Any]] = MappingProxyType({})
"""The "before" of a key with no state: an empty mapping that nobody can mutate."""

APPLYING: Final[list[Any]] = [None, 0, 0]
"""``[mapper, slot, seq]`` of the tuple whose ``reduce_fn`` call is running, and only during
that call: a reduce that emits names each record by the tuple it came from (its origin), so
a replay of the same tuple after a takeover emits the same names (``smr.output``). One list
for the process, since one thread applies and a call never nests in another."""


@dataclass(slots=True)
class BatchOutcome:
    """What ``StateStore.apply_batch`` did with a batch; every tuple is counted exactly once.

    ``applied + duplicates + failed`` equals the batch size. ``failures`` holds up to
    ``FAILURE_EXAMPLES_MAX`` examples ``(key, exception)`` of the ``failed`` tuples, in order.
    """

    applied: int = 0
    duplicates: int = 0
    failed: int = 0
    failures: list[tuple[Key, BaseException]] = field(default_factory=list)


class AppliedTo(Protocol):
    """What the hot path asks of the store it applies to (``StateStore`` offers it): the
    three fragments, the marks of one mapper, and two named writes once per batch.

    ``hwm_marks(mapper)`` is the store's own dict (read per tuple, never kept past the
    batch); ``take_marks`` sets the marks a :class:`~checkpoint.hwm.Cut` gave;
    ``note_writes`` records that a writer put a tombstone or a mutable value into
    ``active``; ``has_tombstones`` and ``holds_mutables`` say whether reads must look for
    either.
    """

    active: Fragment
    inactive: Fragment
    master: Fragment

    @property
    def has_tombstones(self) -> bool: ...

    @property
    def holds_mutables(self) -> bool: ...

    def hwm_marks(self, mapper: MapperId) -> Mapping[Slot, Seq]: ...

    def take_marks(self, mapper: MapperId, marks: Mapping[int, int]) -> None: ...

    def note_writes(self, wrote_tombstone: bool, holds_mutables: bool) -> None: ...


def apply_tuples(
    store: AppliedTo,
    mapper: MapperId,
    slots: Sequence[int],
    seqs: Sequence[int],
    keys: Sequence[Key],
    values: Sequence[Any],
    reduce_fn: ReduceFn,
) -> BatchOutcome:
    """``store.apply_batch(mapper, slots, seqs, keys, values, reduce_fn)``: the steps are in
    its docstring. Everything the loop touches is bound to locals first."""

    batch_size = len(slots)
    if not len(seqs) == len(keys) == len(values) == batch_size:
        raise ValueError(
            f"batch columns differ in length: {batch_size} slots, {len(seqs)} seqs, "
            f"{len(keys)} keys, {len(values)} values"
        )
    # 1. The duplicate cut, for the whole batch (the rule of checkpoint.hwm); the store takes
    # the new marks once the loop is done (or those reached: _marks_through).
    marks = store.hwm_marks(mapper)
    batch_cut = IN_FORCE.cut(marks, slots, seqs)
    if batch_cut.fresh is not None:
        fresh = batch_cut.fresh
        slots = [slots[row] for row in fresh]
        seqs = [seqs[row] for row in fresh]
        keys = [keys[row] for row in fresh]
        values = [values[row] for row in fresh]
    active = cast(dict[int, dict[Key, dict[str, Any]]], store.active)
    active_get = active.get
    # The inactive fragment lives only between swap and merge_inactive, so it is usually
    # empty: then one test per batch saves a lookup per tuple.
    inactive_get = cast(dict[int, dict[Key, dict[str, Any]]], store.inactive).get
    has_inactive = bool(store.inactive)
    master_get = cast(dict[int, dict[Key, dict[str, Any]]], store.master).get
    tombstones_possible = store.has_tombstones
    holds_mutables = store.holds_mutables
    # What the loop writes, told to the store once the batch is done (or interrupted).
    wrote_tombstone = False
    wrote_mutable = False
    plain_types = PLAIN_TYPES
    mutable_types = MUTABLE_TYPES
    deepcopy = copy.deepcopy
    no_fields = NO_FIELDS
    tombstone = TOMBSTONE
    applying = APPLYING
    applying[0] = mapper
    applying[1] = applying[2] = None
    failed = 0
    failures: list[tuple[Key, BaseException]] = []
    before: dict[str, Any] | MappingProxyType[str, Any] | None

    drive_reduce = IN_FORCE.drive_reduce
    if drive_reduce is not None:
        # Steps 3-5 in compiled code, calling reduce_fn straight (checkpoint.kernels).
        try:
            failed, failures, wrote_tombstone, holds_mutables = drive_reduce(
                (active, store.inactive if has_inactive else None, store.master),
                (tombstones_possible, holds_mutables),
                (slots, seqs, keys, values),
                reduce_fn,
                applying,
                (plain_types, mutable_types),
                (deepcopy, no_fields, tombstone),
                FAILURE_EXAMPLES_MAX,
            )
        except BaseException:
            store.take_marks(mapper, _marks_through(marks, slots, seqs, applying[1], applying[2]))
            raise
        store.note_writes(wrote_tombstone, holds_mutables)
        store.take_marks(mapper, batch_cut.marks)
        return BatchOutcome(
            batch_size - batch_cut.duplicates - failed, batch_cut.duplicates, failed, failures
        )
    try:
        # Lengths were checked above, so zip cannot silently drop a tail.
        for slot, seq, key, value in zip(slots, seqs, keys, values, strict=False):
            # 3. Read (active, then inactive, then master) and snapshot. The snapshot may be
            # a fragment's own dict, never the dict handed to the reducer.
            active_keys = active_get(slot)
            active_fields = None if active_keys is None else active_keys.get(key)
            if has_inactive:
                inactive_keys = inactive_get(slot)
                inactive_fields = None if inactive_keys is None else inactive_keys.get(key)
            else:
                inactive_fields = None
            master_keys = master_get(slot)
            master_fields = None if master_keys is None else master_keys.get(key)
            if inactive_fields is None:
                if active_fields is None:
                    # Only master has the key, if anything: master is the snapshot itself,
                    # since the reducer gets a copy and commit writes only to active.
                    before = no_fields if master_fields is None else master_fields
                elif not tombstones_possible and (
                    master_fields is None or master_fields.keys() <= active_fields.keys()
                ):
                    # Active shadows every field master has: it alone is the merged state,
                    # and is the snapshot too. Commit writes into this same dict only fields
                    # it has already compared (see step 5).
                    before = active_fields
                else:
                    before = None
            else:
                before = None
            if before is None:
                merged = {} if master_fields is None else master_fields.copy()
                if inactive_fields is not None:
                    merged.update(inactive_fields)
                if active_fields is not None:
                    merged.update(active_fields)
                if tombstones_possible:
                    for name in [name for name, v in merged.items() if v is tombstone]:
                        del merged[name]
                before = merged
            state = before.copy()
            if holds_mutables:
                for name, field_value in state.items():
                    if field_value.__class__ not in plain_types and isinstance(
                        field_value, mutable_types
                    ):
                        state[name] = deepcopy(field_value)
            applying[1] = slot
            applying[2] = seq
            try:
                reduce_fn(key, value, state)
            except Exception as error:
                # 4. The reducer failed: drop its private state, keep an example.
                failed += 1
                if len(failures) < FAILURE_EXAMPLES_MAX:
                    failures.append((key, error))
                continue
            # 5. Commit: write the changed fields into active, then tombstone the fields of
            # before that state lacks, found by counting the fields the two share.
            before_count = len(before)
            kept_count = 0
            for name, field_value in state.items():
                if name in before:
                    kept_count += 1
                    if field_value.__class__ in plain_types:
                        # Plain values compare without raising.
                        old = before[name]
                        if field_value is old or field_value == old:
                            continue
                    elif not isinstance(field_value, mutable_types):
                        try:
                            old = before[name]
                            if field_value is old or field_value == old:
                                continue
                        except Exception:
                            pass  # An __eq__ that raises or an ambiguous truth: a change.
                if active_fields is None:
                    if active_keys is None:
                        active_keys = active[slot] = {}
                    active_fields = active_keys[key] = {}
                active_fields[name] = field_value
                if (
                    not holds_mutables
                    and field_value.__class__ not in plain_types
                    and isinstance(field_value, mutable_types)
                ):
                    holds_mutables = wrote_mutable = True
            if kept_count != before_count:
                for name in [name for name in before if name not in state]:
                    if active_fields is None:
                        if active_keys is None:
                            active_keys = active[slot] = {}
                        active_fields = active_keys[key] = {}
                    active_fields[name] = tombstone
                    tombstones_possible = wrote_tombstone = True

    except BaseException:
        # Not an Exception (the process is ending): the tuples through the one being
        # reduced are consumed, as tuple by tuple, the rest are not.
        store.note_writes(wrote_tombstone, wrote_mutable)
        store.take_marks(mapper, _marks_through(marks, slots, seqs, applying[1], applying[2]))
        raise
    store.note_writes(wrote_tombstone, wrote_mutable)
    store.take_marks(mapper, batch_cut.marks)

    duplicates = batch_cut.duplicates
    applied = batch_size - duplicates - failed
    return BatchOutcome(applied, duplicates, failed, failures)


def _marks_through(
    marks: Mapping[Any, Any], slots: Sequence[int], seqs: Sequence[int], slot: Any, seq: Any
) -> dict[int, int]:
    """The new marks of the fresh rows ``slots``, ``seqs`` up to the row ``(slot, seq)``
    (none when that is None: no row was reached)."""
    for row, pair in enumerate(zip(slots, seqs, strict=True)):
        if pair == (slot, seq):
            return cut(marks, slots[: row + 1], seqs[: row + 1]).marks
    return {}
