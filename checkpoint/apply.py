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
from smr.checkpoint.hwm import cut, fresh_rows
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

_Fragment: TypeAlias = dict[int, dict[Key, dict[str, Any]]]
"""A fragment as the loop reads it (slots are ints)."""

Rows: TypeAlias = tuple[Sequence[int], Sequence[int], Sequence[Key], Sequence[Any]]
"""A batch's fresh rows as columns: ``(slots, seqs, keys, values)``."""

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

    def count_failure(self, key: Key, error: BaseException) -> None:
        """One more failed tuple; its ``(key, error)`` kept while fewer than
        ``FAILURE_EXAMPLES_MAX`` are."""
        self.failed += 1
        if len(self.failures) < FAILURE_EXAMPLES_MAX:
            self.failures.append((key, error))


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
    its docstring. Three named steps per batch, none per tuple: the duplicate cut, the rows
    reduced (compiled, :func:`_drive_rows`, or in Python, :func:`_reduce_rows`), the marks."""
    batch_size = len(slots)
    if not len(seqs) == len(keys) == len(values) == batch_size:
        raise ValueError(
            f"batch columns differ in length: {batch_size} slots, {len(seqs)} seqs, "
            f"{len(keys)} keys, {len(values)} values"
        )
    # 1. The duplicate cut, for the whole batch (the rule of checkpoint.hwm); the store takes
    # the new marks once the rows are reduced (or those reached: _marks_through).
    marks = store.hwm_marks(mapper)
    batch_cut = IN_FORCE.cut(marks, slots, seqs)
    slots, seqs, keys, values = fresh_rows(batch_cut.fresh, slots, seqs, keys, values)
    APPLYING[0] = mapper
    APPLYING[1] = APPLYING[2] = None
    reduce_rows = _reduce_rows if IN_FORCE.drive_reduce is None else _drive_rows
    try:
        outcome = reduce_rows(store, (slots, seqs, keys, values), reduce_fn)
    except BaseException:
        # Not an Exception (the process is ending): the tuples through the one being
        # reduced are consumed, as tuple by tuple, the rest are not.
        store.take_marks(mapper, _marks_through(marks, slots, seqs, APPLYING[1], APPLYING[2]))
        raise
    store.take_marks(mapper, batch_cut.marks)
    outcome.duplicates = batch_cut.duplicates
    outcome.applied = batch_size - outcome.duplicates - outcome.failed
    return outcome


def _drive_rows(store: AppliedTo, rows: Rows, reduce_fn: ReduceFn) -> BatchOutcome:
    """Steps 3-5 of ``apply_batch`` for the fresh rows in compiled code, calling
    ``reduce_fn`` straight (``checkpoint.kernels``), failures counted. The store is told
    what was written when the driver returns."""
    drive_reduce = IN_FORCE.drive_reduce
    assert drive_reduce is not None
    failed, failures, wrote_tombstone, holds_mutables = drive_reduce(
        (store.active, store.inactive if store.inactive else None, store.master),
        (store.has_tombstones, store.holds_mutables),
        rows,
        reduce_fn,
        APPLYING,
        (PLAIN_TYPES, MUTABLE_TYPES),
        (copy.deepcopy, NO_FIELDS, TOMBSTONE),
        FAILURE_EXAMPLES_MAX,
    )
    store.note_writes(wrote_tombstone, holds_mutables)
    return BatchOutcome(failed=failed, failures=failures)


def _reduce_rows(store: AppliedTo, rows: Rows, reduce_fn: ReduceFn) -> BatchOutcome:
    """Steps 3-5 of ``apply_batch`` for the fresh ``rows`` in Python, failures counted; the
    store is told what was written once, when the loop ends or is interrupted. The loop touches
    only locals and calls only ``reduce_fn`` on its common paths."""
    active = cast(_Fragment, store.active)
    active_get, master_get = active.get, cast(_Fragment, store.master).get
    # The inactive fragment lives only between swap and merge_inactive, so it is usually
    # empty: then one test per batch saves a lookup per tuple.
    inactive_get, has_inactive = cast(_Fragment, store.inactive).get, bool(store.inactive)
    tombstones_possible, holds_mutables = store.has_tombstones, store.holds_mutables
    wrote_tombstone = wrote_mutable = False
    plain_types, mutable_types, no_fields = PLAIN_TYPES, MUTABLE_TYPES, NO_FIELDS
    applying = APPLYING
    outcome = BatchOutcome()
    before: Mapping[str, Any]
    try:
        for slot, seq, key, value in zip(*rows, strict=False):  # Lengths checked: no tail lost.
            # 3. Read and snapshot: ``before`` may be a fragment's own dict, never the reducer's.
            active_keys = active_get(slot)
            active_fields = None if active_keys is None else active_keys.get(key)
            master_keys = master_get(slot)
            master_fields = None if master_keys is None else master_keys.get(key)
            if has_inactive and (inactive_keys := inactive_get(slot)) and key in inactive_keys:
                before = _merged(master_fields, inactive_keys[key], active_fields)
            elif active_fields is None:
                # Only master has the key, if anything: master is the snapshot itself,
                # since the reducer gets a copy and commit writes only to active.
                before = no_fields if master_fields is None else master_fields
            elif not tombstones_possible and (
                master_fields is None or master_fields.keys() <= active_fields.keys()
            ):
                # Active shadows every field master has: it alone is the merged state and
                # the snapshot; commit writes into it only fields it compared (step 5).
                before = active_fields
            else:
                before = _merged(master_fields, None, active_fields)
            before_count = len(before)
            state = before.copy()
            if holds_mutables:
                _copy_mutables(state)
            applying[1] = slot
            applying[2] = seq
            try:
                reduce_fn(key, value, state)
            except Exception as error:
                outcome.count_failure(key, error)  # 4. Its private state is dropped.
                continue
            # 5. Commit: write the changed fields into active, then tombstone the fields of
            # before that state lacks, found by counting the fields the two share.
            kept_count = 0
            for name, field_value in state.items():
                mutable = field_value.__class__ not in plain_types and isinstance(
                    field_value, mutable_types
                )
                if name in before:
                    kept_count += 1
                    try:
                        if not mutable and (
                            field_value is (old := before[name]) or field_value == old
                        ):
                            continue
                    except Exception:
                        pass  # An __eq__ that raises or an ambiguous truth: a change.
                if active_fields is None:
                    if active_keys is None:
                        active_keys = active[slot] = {}
                    active_fields = active_keys[key] = {}
                active_fields[name] = field_value
                if mutable and not holds_mutables:
                    holds_mutables = wrote_mutable = True
            if kept_count != before_count:
                _tombstone_dropped(active, slot, key, before, state)
                tombstones_possible = wrote_tombstone = True
    finally:
        store.note_writes(wrote_tombstone, wrote_mutable)
    return outcome


def _merged(
    master_fields: dict[str, Any] | None,
    inactive_fields: dict[str, Any] | None,
    active_fields: dict[str, Any] | None,
) -> dict[str, Any]:
    """A key's state merged from its fragments, field by field the newest (active, then
    inactive, then master), tombstoned fields left out: a new dict."""
    merged = {} if master_fields is None else master_fields.copy()
    if inactive_fields is not None:
        merged.update(inactive_fields)
    if active_fields is not None:
        merged.update(active_fields)
    for name in [name for name, value in merged.items() if value is TOMBSTONE]:
        del merged[name]
    return merged


def _copy_mutables(state: dict[str, Any]) -> None:
    """Deep-copy ``state``'s values of a mutable type in place: a reducer may mutate them,
    and they may be a fragment's own."""
    for name, field_value in state.items():
        if field_value.__class__ not in PLAIN_TYPES and isinstance(field_value, MUTABLE_TYPES):
            state[name] = copy.deepcopy(field_value)


def _tombstone_dropped(
    active: _Fragment,
    slot: int,
    key: Key,
    before: Mapping[str, Any],
    state: Mapping[str, Any],
) -> None:
    """Write a tombstone into ``active`` for each field of ``before`` that ``state`` lacks."""
    fields = active.setdefault(slot, {}).setdefault(key, {})
    for name in [name for name in before if name not in state]:
        fields[name] = TOMBSTONE


def _marks_through(
    marks: Mapping[Any, Any], slots: Sequence[int], seqs: Sequence[int], slot: Any, seq: Any
) -> dict[int, int]:
    """The new marks of the fresh rows ``slots``, ``seqs`` up to the row ``(slot, seq)``
    (none when that is None: no row was reached)."""
    for row, pair in enumerate(zip(slots, seqs, strict=True)):
        if pair == (slot, seq):
            return cut(marks, slots[: row + 1], seqs[: row + 1]).marks
    return {}
