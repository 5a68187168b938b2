"""Applying tuples in bulk: the duplicate cut per slot, folds per key, a batch reduce.

The per-tuple path (``StateStore.apply_batch``) reads, copies, reduces and diffs one tuple at
a time. Here the same guarantees hold with work per batch or per key instead:

- :func:`consume` cuts duplicates with one comparison per slot of the batch (seqs of one
  ``(mapper, slot)`` increase within a batch, as the emitter sends them), in C-level passes
  (``dict``, ``map``) when no tuple is a duplicate, which is the common case.
- :func:`apply_folds` applies built-in aggregations (``smr.agg``): the fresh tuples of many
  batches are merged per key first, then each key's state is read and written once.
- :func:`apply_reduce_batch` hands a batch's fresh tuples, grouped by key, to a user's
  ``reduce_batch(keys, values, states)`` in one call; if it raises, nothing changes.

Both count every tuple once in a :class:`~checkpoint.store.BatchOutcome`, consume tuples
whose reduction failed (a deterministic failure is never retried forever), and write only
into the ``active`` fragment, like the per-tuple path, so checkpoints are unchanged.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, cast

from smr.checkpoint.apply import FAILURE_EXAMPLES_MAX, MUTABLE_TYPES, AppliedTo, BatchOutcome
from smr.checkpoint.delta import PLAIN_TYPES
from smr.checkpoint.hwm import fresh_rows
from smr.checkpoint.ids import Key, MapperId, Slot
from smr.checkpoint.kernels import IN_FORCE

Columns: TypeAlias = tuple[MapperId, Sequence[int], Sequence[int], Sequence[Key], Sequence[Any]]
"""One batch as ``(mapper, slots, seqs, keys, values)``."""


class EncodedColumns(Protocol):
    """A batch still in its wire bytes (``smr.wire.batch_body.EncodedBatch``), kept so for a
    fold that reads them (a lone count's or sum's, in one compiled call): ``body`` of
    ``count`` rows over ``slot_count`` slots, known valid; ``columns`` decodes it into
    ``(slots, seqs, keys, values)`` when a fold cannot read the bytes."""

    @property
    def body(self) -> bytes: ...

    @property
    def count(self) -> int: ...

    @property
    def slot_count(self) -> int: ...

    def columns(self) -> tuple[Sequence[int], Sequence[int], Sequence[Key], Sequence[Any]]: ...


BatchInBytes: TypeAlias = tuple[MapperId, EncodedColumns]
"""One batch as ``(mapper, its columns in their wire bytes)``."""

AnyBatch: TypeAlias = Columns | BatchInBytes
"""A batch decoded or in its wire bytes; :func:`as_columns` reads either as columns."""


def as_columns(batch: AnyBatch) -> Columns:
    """The batch's :data:`Columns` (an encoded one decoded)."""
    if len(batch) == 2:
        mapper, encoded = batch
        return (mapper, *encoded.columns())
    return batch


BatchReduceFn: TypeAlias = Callable[[list[Key], list[list[Any]], list[dict[str, Any]]], None]
"""``reduce_batch(keys, values, states)``: ``keys`` distinct, ``values[i]`` the values of
``keys[i]`` in arrival order, ``states[i]`` its state, a private dict it mutates."""


class BulkAppliedTo(AppliedTo, Protocol):
    """What bulk apply asks of the store besides the hot path's (``StateStore`` offers it):
    a key's merged fields to fold into (``merged``: the store's values, not to be mutated),
    a key's state as a private copy (``read``), and a key's change (``commit``)."""

    def merged(self, slot: Slot, key: Key) -> dict[str, Any] | None: ...

    def read(self, slot: Slot, key: Key) -> dict[str, Any]: ...

    def commit(
        self, slot: Slot, key: Key, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> None: ...


class KeyFold(Protocol):
    """A reduction applied per key with many tuples at once (``smr.agg.Aggregation``).

    ``merge`` combines two partial values of one key (associative, in arrival order);
    ``fold_key(fields, partial)`` returns the new values of the fields it owns, given the
    key's current fields (None when the key has none); it must not mutate ``fields``.
    ``owned`` names those fields; ``mutable_values`` says whether a value it writes may be
    of a mutable type (then reads deep-copy it, as for a reducer's); ``additive`` that
    partials are numbers merged by ``+`` and ``fold_key`` adds them to the one owned field,
    within the 64-bit range (both then run inline); ``new_keys_take_partial``, if it has
    one and it is true, that ``fold_key(None, partial)`` is ``{owned field: partial}`` for
    an int within that range or a float (then a new key skips ``fold_key``)."""

    owned: frozenset[str]
    mutable_values: bool
    additive: bool

    def merge(self, a: Any, b: Any) -> Any: ...

    def fold_key(self, fields: Mapping[str, Any] | None, partial: Any) -> dict[str, Any]: ...


def consume(
    store: AppliedTo, mapper: MapperId, slots: Sequence[int], seqs: Sequence[int]
) -> tuple[int, list[int] | None]:
    """The duplicate cut for one batch: raise the hwms past its tuples and return
    ``(duplicates, fresh)``, ``fresh`` None when every tuple is fresh, else the rows to apply.

    The rule is :func:`checkpoint.hwm.cut`'s (or its compiled twin's: ``checkpoint.kernels``);
    the store takes the new marks (its slots marked dirty for the next checkpoint).
    """
    outcome = IN_FORCE.cut(store.hwm_marks(mapper), slots, seqs)
    store.take_marks(mapper, outcome.marks)
    return outcome.duplicates, outcome.fresh


def _fresh_columns(
    store: AppliedTo, columns: Columns
) -> tuple[int, Sequence[int], Sequence[Key], Sequence[Any]]:
    """``(duplicates, slots, keys, values)`` of the batch's fresh tuples (see ``consume``)."""
    mapper, slots, seqs, keys, values = columns
    duplicates, fresh = consume(store, mapper, slots, seqs)
    slots, keys, values = fresh_rows(fresh, slots, keys, values)
    return duplicates, slots, keys, values


@dataclass(slots=True)
class _Partials:
    """The fresh tuples of many batches merged per key (step 2 of :func:`apply_folds`): each
    key's partial and slot, the fresh keys batch by batch (to count a failed key's tuples),
    and the tuples seen and cut."""

    by_key: dict[Key, Any] = field(default_factory=dict)
    slot_of: dict[Key, int] = field(default_factory=dict)
    fresh_keys: list[Sequence[Key]] = field(default_factory=list)
    total: int = 0
    duplicates: int = 0
    rows_of_keys: list[int] | None = None
    """The fresh rows of each key of ``by_key``, in its order, when the compiled merge made
    the partials (then ``fresh_keys`` stays empty)."""

    def failed_rows(self, failed: set[Key]) -> int:
        """How many fresh tuples the keys ``failed`` had."""
        if self.rows_of_keys is not None:
            rows = dict(zip(self.by_key, self.rows_of_keys, strict=True))
            return sum(rows[key] for key in failed)
        return sum(1 for keys in self.fresh_keys for key in keys if key in failed)


def apply_folds(store: BulkAppliedTo, batches: Iterable[AnyBatch], fold: KeyFold) -> BatchOutcome:
    """Apply ``batches`` (in order, decoded or in their wire bytes) through ``fold``: each
    key's state is written once.

    1. Per batch, the duplicate cut (:func:`consume`).
    2. The fresh tuples of all the batches are merged per key, in arrival order (``+``
       when the fold is ``additive``, else ``fold.merge``; a first batch whose keys are
       distinct costs one ``dict`` call): :func:`_merge_partials`.
    3. Per key: its current fields (``active`` alone when it holds every owned field, else
       the merged fragments), ``fold.fold_key``, and the new fields written into
       ``active``. A key whose fold raises keeps its state; its tuples count as failed:
       :func:`_fold_partials`.

    A count's or a sum's turn runs the three steps in one compiled call when it is in
    force (:func:`_apply_compiled`), reading batches kept in their wire bytes straight from
    them; any other turn is decoded and takes the Python steps.

    The caller must not let a checkpoint swap run between the batches it passes.
    """
    batches = list(batches)
    partials = _apply_compiled(store, batches, fold)
    if partials is not None:
        failed_keys = _fold_general(store, partials, fold)
    else:
        partials = _merge_partials(store, map(as_columns, batches), fold)
        failed_keys = _fold_partials(store, partials, fold)
    outcome = BatchOutcome(duplicates=partials.duplicates)
    if failed_keys:
        outcome.failed = partials.failed_rows({key for key, _ in failed_keys})
        outcome.failures = failed_keys[:FAILURE_EXAMPLES_MAX]
    outcome.applied = partials.total - outcome.duplicates - outcome.failed
    return outcome


def _apply_compiled(store: AppliedTo, batches: list[AnyBatch], fold: KeyFold) -> _Partials | None:
    """Steps 1-3 of :func:`apply_folds` for a count or a sum (one owned field, no
    tombstones in ``active``) in one compiled call (``checkpoint.kernels.IN_FORCE``'s
    ``fold_turn_bodies`` when every batch is in its wire bytes, read with no Python object
    made per row, else ``fold_turn`` of the decoded columns: every batch cut, the store
    taking each mapper's new marks, the partials merged per key, the common case of the
    fold); the same marks, state and counts as the Python steps. Returns the keys left to
    the general fold (step 3's other cases), or None, with nothing written, when the
    compiled call is not in force or leaves the batches to the Python steps (a key or a
    value it does not take)."""
    fold_turn = IN_FORCE.fold_turn
    if (
        fold_turn is None
        or not batches
        or not fold.additive
        or len(fold.owned) != 1
        or store.has_tombstones
    ):
        return None
    mappers: dict[MapperId, int] = {}
    marks: list[dict[Slot, int]] = []

    def take_marks(raised: list[dict[int, int]]) -> None:
        for mapper, of_mapper in zip(mappers, raised, strict=True):
            store.take_marks(mapper, of_mapper)

    (name,) = fold.owned
    older = [fragment for fragment in (store.inactive, store.master) if fragment]
    into = (take_marks, store.active, older, name, bool(getattr(fold, "new_keys_take_partial", 0)))
    encoded = cast(list[BatchInBytes], [batch for batch in batches if len(batch) == 2])
    slot_counts = {of_batch.slot_count for _, of_batch in encoded}
    fold_turn_bodies = IN_FORCE.fold_turn_bodies
    if fold_turn_bodies is not None and len(encoded) == len(batches) and len(slot_counts) == 1:
        bodies = [
            (mappers.setdefault(mapper, len(mappers)), of_batch.body, of_batch.count)
            for mapper, of_batch in encoded
        ]
        _read_marks(store, mappers, marks)
        with _collector_paused():
            done = fold_turn_bodies(marks, bodies, *slot_counts, *into)
    else:
        rows = [
            (mappers.setdefault(mapper, len(mappers)), slots, seqs, keys, values)
            for mapper, slots, seqs, keys, values in map(as_columns, batches)
        ]
        _read_marks(store, mappers, marks)
        with _collector_paused():
            done = fold_turn(marks, rows, *into)
    if done is None:
        return None
    general, slot_of, rows_of_keys, total, duplicates = done
    return _Partials(general, slot_of, [], total, duplicates, rows_of_keys)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block (a compiled fold that makes a
    dict per key and no cycle): the collections its allocations would have set off many
    times, each walking the store's tracked dicts, run once after it, if at all."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _read_marks(
    store: AppliedTo, mappers: Iterable[MapperId], marks: list[dict[Slot, int]]
) -> None:
    """Append each mapper's marks, as the store's own dict when it is one (read only)."""
    for mapper in mappers:
        of_mapper = store.hwm_marks(mapper)
        marks.append(of_mapper if of_mapper.__class__ is dict else dict(of_mapper))


def _merge_partials(store: AppliedTo, batches: Iterable[Columns], fold: KeyFold) -> _Partials:
    """Steps 1 and 2 of :func:`apply_folds`: each batch cut, its fresh tuples merged per key."""
    partials = _Partials()
    grouped = partials.by_key
    merge = fold.merge
    additive = fold.additive
    for columns in batches:
        partials.total += len(columns[3])
        duplicates, slots, keys, values = _fresh_columns(store, columns)
        partials.duplicates += duplicates
        partials.fresh_keys.append(keys)
        partials.slot_of.update(zip(keys, slots, strict=True))
        if not grouped:
            grouped = dict(zip(keys, values, strict=True))
            if len(grouped) == len(keys):
                continue
            grouped = {}
        if additive:
            IN_FORCE.group_add(grouped, keys, values)
        else:
            get = grouped.get
            for key, value in zip(keys, values, strict=True):
                old = get(key, _ABSENT)
                grouped[key] = value if old is _ABSENT else merge(old, value)
    partials.by_key = grouped
    return partials


def _fold_partials(
    store: BulkAppliedTo, partials: _Partials, fold: KeyFold
) -> list[tuple[Key, BaseException]]:
    """Step 3 of :func:`apply_folds`: each key's partial folded into its state in
    ``active``; the keys whose fold raised, with the exception, in order."""
    owned = fold.owned
    if fold.additive and len(owned) == 1 and not store.has_tombstones:
        # The common case first: a key that holds the one owned field takes the sum, in
        # place when active holds it, else into a new active entry (the field read from
        # inactive, then master: a read takes the newest fragment field by field); new
        # keys and a sum past 64 bits go the general way.
        (name,) = owned
        older = [fragment for fragment in (store.inactive, store.master) if fragment]
        new_keys_take_partial = bool(getattr(fold, "new_keys_take_partial", False))
        active = cast(dict[int, dict[Key, dict[str, Any]]], store.active)
        general = IN_FORCE.fold_additive(
            partials.by_key, partials.slot_of, active, older, name, new_keys_take_partial
        )
        partials = _Partials(general, partials.slot_of)
    return _fold_general(store, partials, fold)


def _fold_general(
    store: BulkAppliedTo, partials: _Partials, fold: KeyFold
) -> list[tuple[Key, BaseException]]:
    """Step 3 of :func:`apply_folds` for each key of ``partials``, by ``fold.fold_key``:
    the keys whose fold raised, with the exception, in order."""
    grouped, slot_of = partials.by_key, partials.slot_of
    active = cast(dict[int, dict[Key, dict[str, Any]]], store.active)
    active_get = active.get
    owned = fold.owned
    fold_key = fold.fold_key
    tombstones_possible = store.has_tombstones
    failed_keys: list[tuple[Key, BaseException]] = []
    mutables = fold.mutable_values
    holds_mutables = store.holds_mutables
    for key, partial in grouped.items():
        slot = slot_of[key]
        active_keys = active_get(slot)
        fields = None if active_keys is None else active_keys.get(key)
        current: Mapping[str, Any] | None = fields
        if fields is None or tombstones_possible or not owned <= fields.keys():
            current = store.merged(slot, key)  # type: ignore[arg-type]
        try:
            written = fold_key(current, partial)
        except Exception as error:
            failed_keys.append((key, error))
            continue
        if mutables and not holds_mutables:
            holds_mutables = any(
                value.__class__ not in PLAIN_TYPES and isinstance(value, MUTABLE_TYPES)
                for value in written.values()
            )
            if holds_mutables:
                store.note_writes(False, True)
        if fields is not None:
            fields.update(written)
        elif active_keys is not None:
            active_keys[key] = written
        else:
            active[slot] = {key: written}
    return failed_keys


def apply_reduce_batch(
    store: BulkAppliedTo, columns: Columns, reduce_batch: BatchReduceFn
) -> BatchOutcome:
    """Apply one batch through a user's ``reduce_batch`` in one call.

    1. The duplicate cut (:func:`consume`).
    2. Group the fresh tuples by key (first appearance order; values in arrival order).
    3. Read each key's state as a private dict (``StateStore.read``), keep a copy of it.
    4. Call ``reduce_batch(keys, values, states)``. If it raises, no state changes and
       every fresh tuple counts as failed (one example, the exception).
    5. Otherwise commit each key's change (``StateStore.commit``: only the changed fields).
    """
    outcome = BatchOutcome()
    # 1.
    duplicates, slots, keys, values = _fresh_columns(store, columns)
    outcome.duplicates = duplicates
    if not keys:
        return outcome
    # 2.
    slot_of: dict[Key, int] = dict(zip(keys, slots, strict=True))
    grouped: dict[Key, list[Any]] = {}
    for key, value in zip(keys, values, strict=True):
        bucket = grouped.get(key)
        if bucket is None:
            grouped[key] = [value]
        else:
            bucket.append(value)
    # 3.
    group_keys = list(grouped)
    read = store.read
    states = [read(slot_of[key], key) for key in group_keys]  # type: ignore[arg-type]
    befores = [dict(state) for state in states]
    # 4.
    try:
        reduce_batch(group_keys, list(grouped.values()), states)
    except Exception as error:
        outcome.failed = len(keys)
        outcome.failures = [(group_keys[0], error)]
        return outcome
    # 5.
    commit = store.commit
    for key, before, state in zip(group_keys, befores, states, strict=True):
        commit(slot_of[key], key, before, state)  # type: ignore[arg-type]
    outcome.applied = len(keys)
    return outcome


class _Absent:
    """No partial merged for the key yet (None may be a partial)."""


_ABSENT = _Absent()
