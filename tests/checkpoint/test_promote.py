"""Specification of ``checkpoint.promote``: a secondary's copies of a dead primary become
primary state, each tuple applied exactly once, and nothing outside the taken slots changes.

The properties run a primary and its secondary (``tests.checkpoint.replication``) through
random emits, resends, checkpoints and snapshots over lagging channels, kill the primary, and
promote the secondary's replica and backup into a node store that already holds slots of its
own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr.checkpoint.backup import BackedUpBatch, TupleBackup, replay_plan
from smr.checkpoint.delta import Delta
from smr.checkpoint.ids import Key, MapperId, Seq
from smr.checkpoint.promote import PrimaryCopy, PromoteOutcome, promote
from smr.checkpoint.replica import PeerReplica
from smr.checkpoint.store import FAILURE_EXAMPLES_MAX, StateStore
from smr.ring.ids import Slot
from tests.checkpoint.replication import (
    M1,
    M2,
    MAPPERS,
    OPERATION_KINDS,
    SLOT_COUNT,
    Operation,
    Replication,
    count_words,
    decode_body,
    make_batch,
    state_of,
    words,
)

ALL_SLOTS = [Slot(slot) for slot in range(SLOT_COUNT)]
OWN_MAPPER = MapperId("own-mapper")
S0, S1 = Slot(0), Slot(1)


@dataclass(frozen=True)
class Columns:
    """A decoded body, as ``promote`` wants it (the tests' stand-in for smr's ``Batch``)."""

    slots: list[int]
    seqs: list[int]
    keys: list[Key]
    values: list[Any]


def decode(batch: BackedUpBatch) -> Columns:
    return Columns(*decode_body(batch.body))


def exactly_once(
    batches: Iterable[BackedUpBatch], slots: Iterable[Slot]
) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """Plain Python: every distinct tuple of ``batches`` in ``slots`` counted once, as
    ``state_of`` shows a store (a count of 0 is no state; the hwm is the highest seq)."""
    wanted = set(slots)
    counts: dict[tuple[Slot, Key], int] = {}
    hwms: dict[Slot, dict[MapperId, Seq]] = {}
    for batch in batches:
        for slot, seq, key, value in zip(*decode_body(batch.body), strict=True):
            if slot in wanted:
                counts[slot, key] = counts.get((slot, key), 0) + value
                vector = hwms.setdefault(slot, {})
                vector[batch.mapper] = max(vector.get(batch.mapper, Seq(0)), seq)
    states = {slot_key: {"count": count} for slot_key, count in counts.items() if count}
    return states, hwms


def node_store(own_slots: Iterable[Slot]) -> StateStore:
    """The taking-over node's store: a count of its own in each of ``own_slots``, from a
    mapper of its own, one write merged and one still unmerged in ``active``."""
    store = StateStore()
    for seq, slot in enumerate(own_slots, start=1):
        store.apply_batch(OWN_MAPPER, [slot], [seq], ["own"], [seq], count_words)
        store.swap()
        store.merge_inactive()
        store.apply_batch(OWN_MAPPER, [slot], [seq + 100], ["own"], [1], count_words)
    return store


# Operations as in test_backup, plus the primary re-sending its whole state as a snapshot.
operation_or_snapshot = st.tuples(
    st.sampled_from([*OPERATION_KINDS, "snapshot"]),
    st.sampled_from(MAPPERS),
    words,
    st.integers(0, 100),
)


@dataclass
class Takeover:
    """A run up to the kill, then the promotion of its secondary's copy into a node store,
    with what each side held just before the promotion."""

    replication: Replication
    taken: set[Slot]
    by_reference: bool
    into: StateStore
    outcome: PromoteOutcome
    plan: list[BackedUpBatch]
    into_before: tuple[dict[Any, Any], dict[Any, Any]]
    replica_before: tuple[dict[Any, Any], dict[Any, Any]]
    backup_before: list[BackedUpBatch]

    @property
    def others(self) -> list[Slot]:
        """The slots not taken over: the node's own."""
        return [slot for slot in ALL_SLOTS if slot not in self.taken]


def take_over(
    operations: list[Operation], resends: list[int], taken: set[Slot], by_reference: bool
) -> Takeover:
    """Run ``operations``, kill the primary, let the mappers resend the ``resends``-th sent
    batches once more (the secondary may then hold a batch twice), and promote."""
    replication = Replication()
    for step in operations:
        replication.run(step)
    replication.kill()
    replica, backup = replication.replica, replication.backup
    for index in resends:
        if replication.sent:
            backup.add(replication.sent[index % len(replication.sent)], replica.hwm)
    assert replica.is_complete
    into = node_store(slot for slot in ALL_SLOTS if slot not in taken)
    into_before = state_of(into, ALL_SLOTS)
    replica_before = state_of(replica.store, ALL_SLOTS)
    backup_before = backup.batches()
    plan = replay_plan(backup, taken)
    copies = [PrimaryCopy(replica, backup)]
    outcome = promote(into, copies, taken, decode, count_words, by_reference=by_reference)
    return Takeover(
        replication,
        taken,
        by_reference,
        into,
        outcome,
        plan,
        into_before,
        replica_before,
        backup_before,
    )


takeover_arguments = given(
    operations=st.lists(operation_or_snapshot, min_size=10, max_size=80),
    resends=st.lists(st.integers(0, 100), max_size=3),
    taken=st.sets(st.sampled_from(ALL_SLOTS), min_size=1),
    by_reference=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@takeover_arguments
def test_promote_then_replay_applies_every_tuple_exactly_once_whatever_the_checkpoints(
    operations: list[Operation], resends: list[int], taken: set[Slot], by_reference: bool
) -> None:
    """Wherever the primary swapped, shipped or snapshotted, whatever the secondary had
    evicted, and with batches resent before and after the kill: the taken slots hold the
    primary's state and hwm vectors, which are plain Python's count of each tuple once."""
    takeover = take_over(operations, resends, taken, by_reference)
    slots = sorted(taken)
    primary = takeover.replication.primary
    assert state_of(takeover.into, slots) == state_of(primary.store, slots)
    assert state_of(takeover.into, slots) == exactly_once(takeover.replication.sent, slots)
    assert takeover.outcome.failed == 0


@settings(max_examples=100, deadline=None)
@takeover_arguments
def test_promote_touches_only_the_taken_slots(
    operations: list[Operation], resends: list[int], taken: set[Slot], by_reference: bool
) -> None:
    """The node's own slots keep their state and hwms (tuples of other slots in a replayed
    batch are not applied); the backup is left as it was; the replica is left as it was when
    copied, and loses exactly the taken slots when adopted by reference."""
    takeover = take_over(operations, resends, taken, by_reference)
    replica = takeover.replication.replica
    others = takeover.others
    assert state_of(takeover.into, others) == takeover.into_before
    assert takeover.replication.backup.batches() == takeover.backup_before
    if not by_reference:
        assert state_of(replica.store, ALL_SLOTS) == takeover.replica_before
    else:
        assert replica.store.slots().isdisjoint(taken)
        states, hwms = takeover.replica_before
        assert state_of(replica.store, others) == (
            {slot_key: state for slot_key, state in states.items() if slot_key[0] in others},
            {slot: vector for slot, vector in hwms.items() if slot in others},
        )


@settings(max_examples=100, deadline=None)
@takeover_arguments
def test_the_outcome_counts_every_tuple_of_the_replay_plan_once(
    operations: list[Operation], resends: list[int], taken: set[Slot], by_reference: bool
) -> None:
    takeover = take_over(operations, resends, taken, by_reference)
    outcome, plan = takeover.outcome, takeover.plan
    assert outcome.batches == len(plan)
    assert outcome.replayed + outcome.duplicates + outcome.failed + outcome.outside == sum(
        batch.tuple_count for batch in plan
    )
    assert outcome.outside == sum(
        1 for batch in plan for slot in decode(batch).slots if slot not in taken
    )


def test_a_batch_held_twice_is_replayed_once_and_counted_as_duplicates_the_second_time() -> None:
    replica = PeerReplica()
    replica.begin_snapshot(as_of=0)
    replica.end_snapshot()
    backup = TupleBackup()
    batch = make_batch(M1, [(0, 1, "a", 1), (0, 2, "a", 1), (1, 1, "b", 1)])
    assert backup.add(batch, replica.hwm)
    assert backup.add(batch, replica.hwm)  # resent before the first copy was acked
    into = StateStore()
    outcome = promote(into, [PrimaryCopy(replica, backup)], {S0, S1}, decode, count_words)
    assert (outcome.batches, outcome.replayed, outcome.duplicates) == (2, 3, 3)
    assert state_of(into, [S0, S1]) == (
        {(S0, "a"): {"count": 2}, (S1, "b"): {"count": 1}},
        {S0: {M1: 2}, S1: {M1: 1}},
    )


def test_older_copies_go_first_and_a_newer_replica_hwm_skips_their_covered_tuples() -> None:
    """An orphan copy (older) and the dead node's own copy (newer) both hold slot 0: the
    newer fields and the higher hwm win, and the older backup's tuples that the newer hwm
    covers are not applied again."""
    older = replica_of(Delta(states={S0: {"a": {"count": 1}}}, hwms={S0: {M1: Seq(1)}}))
    older_backup = TupleBackup()
    older_backup.add(make_batch(M1, [(0, 2, "a", 1), (0, 3, "a", 1)]), older.hwm)
    newer = replica_of(
        Delta(
            states={S0: {"a": {"count": 2}}, S1: {"b": {"count": 5}}},
            hwms={S0: {M1: Seq(2)}, S1: {M2: Seq(5)}},
        )
    )
    newer_backup = TupleBackup()
    newer_backup.add(make_batch(M2, [(1, 6, "b", 1)]), newer.hwm)
    into = StateStore()
    outcome = promote(
        into,
        [PrimaryCopy(older, older_backup), PrimaryCopy(newer, newer_backup)],
        [S0, S1],
        decode,
        count_words,
    )
    assert (outcome.replayed, outcome.duplicates) == (2, 1)
    assert state_of(into, [S0, S1]) == (
        {(S0, "a"): {"count": 3}, (S1, "b"): {"count": 6}},
        {S0: {M1: 3}, S1: {M2: 6}},
    )


def replica_of(delta: Delta) -> PeerReplica:
    """A complete replica holding exactly ``delta`` (as one snapshot chunk)."""
    replica = PeerReplica()
    replica.begin_snapshot(as_of=0)
    replica.apply_snapshot_chunk(delta)
    replica.end_snapshot()
    return replica


def test_by_reference_moves_a_slot_as_one_dict_and_by_copy_leaves_the_replica_whole() -> None:
    delta = Delta(states={S0: {"a": {"count": 1}}}, hwms={S0: {M1: Seq(1)}})
    adopted, copied = replica_of(delta), replica_of(delta)
    held = adopted.store.master[S0]
    by_reference, by_copy = StateStore(), StateStore()
    promote(by_reference, [PrimaryCopy(adopted)], [S0], decode, count_words)
    promote(by_copy, [PrimaryCopy(copied)], [S0], decode, count_words, by_reference=False)
    assert by_reference.master[S0] is held
    assert adopted.store.slots() == set()
    assert state_of(by_copy, [S0]) == state_of(by_reference, [S0])
    assert state_of(copied.store, [S0]) == state_of(by_reference, [S0])
    assert by_copy.master[S0] is not copied.store.master[S0]


def test_reducer_failures_are_counted_and_kept_as_examples_up_to_the_limit() -> None:
    replica = replica_of(Delta(states={}, hwms={}))
    backup = TupleBackup()
    tuple_count = FAILURE_EXAMPLES_MAX + 5
    for seq in range(1, tuple_count + 1):
        backup.add(make_batch(M1, [(0, seq, f"bad-{seq}", 1)]), replica.hwm)

    def reduce_fn(key: Key, value: Any, state: dict[str, Any]) -> None:
        raise ValueError(f"cannot reduce {key}")

    outcome = promote(StateStore(), [PrimaryCopy(replica, backup)], [S0], decode, reduce_fn)
    assert (outcome.batches, outcome.failed, outcome.replayed) == (tuple_count, tuple_count, 0)
    assert len(outcome.failures) == FAILURE_EXAMPLES_MAX
    assert outcome.failures[0][0] == "bad-1"
    assert isinstance(outcome.failures[0][1], ValueError)


def test_an_error_from_decode_propagates() -> None:
    replica = replica_of(Delta(states={}, hwms={}))
    backup = TupleBackup()
    backup.add(make_batch(M1, [(0, 1, "a", 1)]), replica.hwm)

    def broken(batch: BackedUpBatch) -> Columns:
        raise ValueError("truncated body")

    with pytest.raises(ValueError, match="truncated body"):
        promote(StateStore(), [PrimaryCopy(replica, backup)], [S0], broken, count_words)


def test_a_later_seq_in_an_older_copy_does_not_shadow_earlier_seqs_in_a_newer_copy() -> None:
    """A batch that straddled two ranges was filed under the older copy's primary, with seq 3
    of slot 0, while the newer copy holds seqs 1 and 2 of slot 0: replayed copy after copy,
    seq 3 would raise the hwm first and seqs 1 and 2 would be skipped (found by the seed
    sweep). Every tuple must count once."""
    empty = replica_of(Delta(states={}, hwms={}))
    older_backup = TupleBackup()
    older_backup.add(make_batch(M1, [(1, 7, "b", 1), (0, 3, "a", 1)]), empty.hwm)
    newer = replica_of(Delta(states={}, hwms={}))
    newer_backup = TupleBackup()
    newer_backup.add(make_batch(M1, [(0, 1, "a", 1), (0, 2, "a", 1)]), newer.hwm)
    newer_backup.add(make_batch(M1, [(0, 3, "a", 1)]), newer.hwm)  # the same tuple, resent
    into = StateStore()
    outcome = promote(
        into,
        [PrimaryCopy(empty, older_backup), PrimaryCopy(newer, newer_backup)],
        [S0, S1],
        decode,
        count_words,
    )
    assert (outcome.batches, outcome.replayed, outcome.duplicates) == (3, 4, 1)
    assert state_of(into, [S0, S1]) == (
        {(S0, "a"): {"count": 3}, (S1, "b"): {"count": 1}},
        {S0: {M1: 3}, S1: {M1: 7}},
    )


def test_a_range_split_off_a_copy_promotes_only_its_own_slots_from_the_shared_bodies() -> None:
    """A move splits a secondary's copy by range (``split_off``): a batch with tuples on
    both sides is in both backups with its summary cut, and promoting one side applies only
    that side's tuples, read from the body, not from the cut summary."""
    replica = replica_of(
        Delta(
            states={S0: {"a": {"count": 1}}, S1: {"b": {"count": 1}}},
            hwms={S0: {M1: Seq(1)}, S1: {M1: Seq(1)}},
        )
    )
    backup = TupleBackup()
    backup.add(make_batch(M1, [(0, 2, "a", 1), (1, 2, "b", 1)]), replica.hwm)
    moved = PrimaryCopy(replica.split_off([S1]), backup.split_off({S1}))
    into = StateStore()
    outcome = promote(into, [moved], {S1}, decode, count_words)
    assert (outcome.replayed, outcome.outside) == (1, 1)
    assert state_of(into, [S0, S1]) == ({(S1, "b"): {"count": 2}}, {S1: {M1: 2}})
    # What stays is the other side, whole: promoting it gives slot 0 alone.
    rest = StateStore()
    promote(rest, [PrimaryCopy(replica, backup)], {S0}, decode, count_words)
    assert state_of(rest, [S0, S1]) == ({(S0, "a"): {"count": 2}}, {S0: {M1: 2}})
