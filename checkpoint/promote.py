"""Promote: turn a secondary's copies of a dead primary into primary state (DESIGN section 6).

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

from checkpoint.backup import BackedUpBatch, PeerReplica, TupleBackup, replay_plan
from checkpoint.ids import Key, Slot
from checkpoint.store import FAILURE_EXAMPLES_MAX, ReduceFn, StateStore

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
    the batch's ``tuple_count`` rows (``smr.protocol.Batch`` is one)."""

    @property
    def slots(self) -> Sequence[int]: ...

    @property
    def seqs(self) -> Sequence[int]: ...

    @property
    def keys(self) -> Sequence[Key]: ...

    @property
    def values(self) -> Sequence[Any]: ...


DecodeFn: TypeAlias = Callable[[BackedUpBatch], DecodedColumns]
"""``decode(batch)``: the columns of ``batch.body``, e.g. ``smr.protocol.decode_batch_body(
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
       the higher hwm of the two.
    2. Replay: for each copy with a backup, in order, for each batch of ``replay_plan(backup,
       slots)`` in arrival order, ``decode`` it, keep the tuples of ``slots`` and
       ``into.apply_batch`` them: every tuple at or below the hwm is skipped.
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
    # 1.
    for copy in copies:
        replica_store = copy.replica.store
        held = replica_store.slots() & wanted
        if by_reference:
            into.adopt(replica_store, held)
        else:
            into.apply_delta(replica_store.snapshot(held))
    # 2.
    outcome = PromoteOutcome()
    for copy in copies:
        if copy.backup is None:
            continue
        for batch in replay_plan(copy.backup, wanted):
            columns = decode(batch)
            batch_slots, seqs = columns.slots, columns.seqs
            keys, values = columns.keys, columns.values
            if not batch.last_seq_by_slot.keys() <= wanted:
                # The batch straddles the range: keep the tuples of the promoted slots only.
                rows = [row for row, slot in enumerate(batch_slots) if slot in wanted]
                outcome.outside += len(batch_slots) - len(rows)
                batch_slots = [batch_slots[row] for row in rows]
                seqs = [seqs[row] for row in rows]
                keys = [keys[row] for row in rows]
                values = [values[row] for row in rows]
            applied = into.apply_batch(batch.mapper, batch_slots, seqs, keys, values, reduce_fn)
            # 3.
            outcome.batches += 1
            outcome.replayed += applied.applied
            outcome.duplicates += applied.duplicates
            outcome.failed += applied.failed
            room = FAILURE_EXAMPLES_MAX - len(outcome.failures)
            outcome.failures.extend(applied.failures[:room])
    return outcome
