"""Promote: turn a secondary's copies of a dead primary into primary state
(docs/design/architecture.md#failures).

A secondary holds, for each primary it backs up, a ``PeerReplica`` (the primary's state as of
its last checkpoint applied here) and a ``TupleBackup`` (the batches no checkpoint covers yet).
When the primary dies, the node taking over its range calls ``promote`` once with every copy it
holds of that range, oldest first: the orphan copies of nodes the dead one had absorbed and was
still re-replicating, then the dead node's own. ``promote`` adopts the replicas' state of the
range's slots and replays the backed-up batches past their hwms, so that the taking-over node
holds what the dead primary held, each tuple applied exactly once.

The batch bodies stay opaque here: the caller passes ``decode``, since the wire codec lives in
``smr``. Pure logic: no I/O, nothing from ``smr``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from smr.checkpoint.backup import BackedUpBatch, TupleBackup, replay_plan
from smr.checkpoint.ids import Key, Slot
from smr.checkpoint.replica import PeerReplica
from smr.checkpoint.store import FAILURE_EXAMPLES_MAX, ReduceFn, StateStore

__all__ = [
    "Copy",
    "DecodeFn",
    "DecodedColumns",
    "PrimaryCopy",
    "PromoteOutcome",
    "promote",
]


class DecodedColumns(Protocol):
    """The tuples of a decoded batch body as columns: row ``i`` is the tuple of slot
    ``slots[i]`` with seq ``seqs[i]`` and payload ``(keys[i], values[i])``, all four columns of
    the batch's ``tuple_count`` rows (``smr.wire.messages.Batch`` is one)."""

    @property
    def slots(self) -> Sequence[int]: ...

    @property
    def seqs(self) -> Sequence[int]: ...

    @property
    def keys(self) -> Sequence[Key]: ...

    @property
    def values(self) -> Sequence[Any]: ...


DecodeFn: TypeAlias = Callable[[BackedUpBatch], DecodedColumns]
"""``decode(batch)``: the columns of ``batch.body``, e.g. ``smr.wire.batch_body.decode_batch_body(
batch.body, batch.tuple_count, slot_count)``."""


class Copy(Protocol):
    """What a secondary holds of one primary: its replica and its tuple backup (None: no
    batch was ever backed up). ``PrimaryCopy`` is one; so is any object with these two."""

    @property
    def replica(self) -> PeerReplica: ...

    @property
    def backup(self) -> TupleBackup | None: ...


@dataclass(frozen=True, slots=True)
class PrimaryCopy:
    """A ``Copy``: a secondary's replica of one primary and its backup of that primary's
    tuples (None: nothing backed up)."""

    replica: PeerReplica
    backup: TupleBackup | None = None


@dataclass(slots=True)
class PromoteOutcome:
    """What ``promote`` did; every tuple of every replayed batch is counted exactly once.

    ``replayed + duplicates + failed + outside`` equals the sum of ``tuple_count`` over the
    ``batches`` replayed. ``failures`` holds up to ``FAILURE_EXAMPLES_MAX`` examples
    ``(key, exception)`` of the ``failed`` tuples, in replay order, for the log.
    """

    batches: int = 0
    """Backed-up batches replayed: those with at least one tuple in the promoted slots."""
    replayed: int = 0
    """Tuples applied to state: past the hwm, and the reducer returned normally."""
    duplicates: int = 0
    """Tuples at or below the hwm (the promoted state already holds them): skipped."""
    failed: int = 0
    """Tuples past the hwm whose reducer raised: consumed without effect on state."""
    outside: int = 0
    """Tuples of slots other than the promoted ones, in the replayed batches: not applied."""
    failures: list[tuple[Key, BaseException]] = field(default_factory=list)
    """Up to ``FAILURE_EXAMPLES_MAX`` examples of the failed tuples: ``(key, exception)``."""


def promote(
    into: StateStore,
    copies: Sequence[Copy],
    slots: Collection[Slot],
    decode: DecodeFn,
    reduce_fn: ReduceFn,
    *,
    by_reference: bool = True,
) -> PromoteOutcome:
    """Make ``into`` hold, for ``slots``, what the dead primary held: replicas, then replay.

    ``copies`` are a secondary's copies of the dead primary's range, oldest first (orphan
    copies of the nodes it had absorbed, then its own). ``slots`` are the dead primary's range;
    ``into`` should hold nothing of them yet.

    1. State: for each copy in order, put its replica's state and hwm vectors of ``slots``
       into ``into``. By reference (``StateStore.adopt``): a slot moves as one dict, so the
       cost grows with the slots, not the keys, and the replica holds nothing of ``slots``
       afterwards (it is spent: discard it, with its backup). By copy
       (``by_reference=False``): ``into.apply_delta`` of the replica's ``snapshot``, and the
       replica is left as it was (for a checker that only asks what a takeover would give).
       A slot that two copies hold gets the newer copy's fields on top of the older's and
       the higher hwm of the two. A mapper retired in a copy (``StateStore.retire``) counts
       as applied up to its last seq in that copy's slots, wherever a backup has batches of
       it to replay; retirements are kept, the hwms of retired mappers too (the node drops
       them once nothing replays into the store).
    2. Replay: for each copy with a backup, in order, for each batch of ``replay_plan(backup,
       slots)`` in arrival order, ``decode`` it, keep the tuples of ``slots`` and
       ``into.apply_batch`` them: every tuple at or below the hwm is skipped. When more than
       one copy has batches to replay, their tuples are applied together in seq order per
       ``(mapper, slot)`` instead (``_replay_merged``: arrival order is seq order within one
       backup only).
    3. Report the counts and the reducer failures.

    Guarantee: if each replica is complete (``PeerReplica.is_complete``) and its backup was
    evicted only against that replica's hwms, then afterwards the state and hwm vectors of
    ``slots`` in ``into`` equal the dead primary's after every tuple the copies received (in
    a replica or a backup), each applied exactly once: a batch's tuples are in its replica's
    state exactly up to the hwm, and arrival order is seq order per ``(mapper, slot)``.
    Nothing else changes: ``into``'s other slots, the replicas' other slots (and, by copy,
    the replicas entirely) and the backups stay as they were. The reducer's emits for the
    replayed tuples go wherever ``reduce_fn`` sends them.

    An exception from ``decode`` propagates, and so does one from the reducer that is not an
    ``Exception`` (see ``StateStore.apply_batch``); what was promoted before it stays in
    ``into``.
    """
    wanted: AbstractSet[Slot] = slots if isinstance(slots, AbstractSet) else frozenset(slots)
    backups = [copy.backup for copy in copies if copy.backup is not None]
    plans = [replay_plan(backup, wanted) for backup in backups]
    replayed_mappers = {batch.mapper for plan in plans for batch in plan}
    # 1.
    for copy in copies:
        replica_store = copy.replica.store
        held = replica_store.slots() & wanted
        # A mapper the copy's primary retired has all its tuples in the copy's state: where
        # another copy's backup still holds some, they must count as applied in this copy's
        # slots, as the retired hwms would have said (taken before adopt empties the copy).
        covered = [
            (mapper, last, held)
            for mapper, last in replica_store.retired.items()
            if mapper in replayed_mappers
        ]
        if by_reference:
            into.adopt(replica_store, held)
        else:
            into.apply_delta(replica_store.snapshot(held), forget_retired=False)
        for mapper, last, covered_slots in covered:
            for slot in covered_slots:
                into.raise_hwm(mapper, slot, last)
    # 2.
    outcome = PromoteOutcome()
    if sum(1 for plan in plans if plan) > 1:
        _replay_merged(into, plans, wanted, decode, reduce_fn, outcome)
        return outcome
    for plan in plans:
        for batch in plan:
            mapper, batch_slots, seqs, keys, values = _rows_of(batch, wanted, decode, outcome)
            _apply(into, mapper, batch_slots, seqs, keys, values, reduce_fn, outcome)
    return outcome


Rows: TypeAlias = tuple[Any, list[int], list[int], list[Key], list[Any]]


def _rows_of(
    batch: BackedUpBatch, wanted: AbstractSet[Slot], decode: DecodeFn, outcome: PromoteOutcome
) -> Rows:
    """The tuples of ``batch`` in the promoted slots, as ``(mapper, slots, seqs, keys,
    values)``; the others are counted as ``outside``."""
    columns = decode(batch)
    batch_slots, seqs = list(columns.slots), list(columns.seqs)
    keys, values = list(columns.keys), list(columns.values)
    # Filtered by the body's own slots, not by the summary: a summary cut to one range
    # (``TupleBackup.split_off``) no longer names every slot of the body.
    rows = [row for row, slot in enumerate(batch_slots) if slot in wanted]
    if len(rows) < len(batch_slots):
        # The batch straddles the range: keep the tuples of the promoted slots only.
        outcome.outside += len(batch_slots) - len(rows)
        batch_slots = [batch_slots[row] for row in rows]
        seqs = [seqs[row] for row in rows]
        keys = [keys[row] for row in rows]
        values = [values[row] for row in rows]
    return batch.mapper, batch_slots, seqs, keys, values


def _apply(
    into: StateStore,
    mapper: Any,
    batch_slots: list[int],
    seqs: list[int],
    keys: list[Key],
    values: list[Any],
    reduce_fn: ReduceFn,
    outcome: PromoteOutcome,
) -> None:
    applied = into.apply_batch(mapper, batch_slots, seqs, keys, values, reduce_fn)
    # 3.
    outcome.batches += 1
    outcome.replayed += applied.applied
    outcome.duplicates += applied.duplicates
    outcome.failed += applied.failed
    room = FAILURE_EXAMPLES_MAX - len(outcome.failures)
    outcome.failures.extend(applied.failures[:room])


def _replay_merged(
    into: StateStore,
    plans: Sequence[Sequence[BackedUpBatch]],
    wanted: AbstractSet[Slot],
    decode: DecodeFn,
    reduce_fn: ReduceFn,
    outcome: PromoteOutcome,
) -> None:
    """Replay the batches of several copies in seq order per ``(mapper, slot)``.

    Arrival order is seq order within one backup, not across backups: a batch that straddled
    two ranges may sit in an older copy's backup with seqs above those of batches the newer
    copy holds for the same slot (the secondary filed it under the primary its view named).
    Replayed copy after copy, that tuple would raise the slot's hwm first and the older tuples
    would be skipped as duplicates: lost. So the tuples of all copies are applied together,
    each mapper's sorted by slot and seq (a tuple held twice applies once: the hwm skips the
    second).
    """
    by_mapper: dict[Any, list[tuple[int, int, int, Key, Any]]] = {}
    order = 0
    batches = 0
    for plan in plans:
        for batch in plan:
            batches += 1
            mapper, batch_slots, seqs, keys, values = _rows_of(batch, wanted, decode, outcome)
            rows = by_mapper.setdefault(mapper, [])
            for slot, seq, key, value in zip(batch_slots, seqs, keys, values, strict=True):
                rows.append((slot, seq, order, key, value))
                order += 1
    for mapper, rows in by_mapper.items():
        rows.sort(key=lambda row: row[:3])
        _apply(
            into,
            mapper,
            [row[0] for row in rows],
            [row[1] for row in rows],
            [row[3] for row in rows],
            [row[4] for row in rows],
            reduce_fn,
            outcome,
        )
    outcome.batches = batches
