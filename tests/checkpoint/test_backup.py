"""Specification of ``checkpoint.backup``: the tuple backup with exact eviction, the peer replica
fed by numbered checkpoints and snapshots, and the replay plan of a takeover.

The central property (``test_promoted_replica_plus_replay_equals_the_primary_at_the_kill``)
runs a primary, a secondary and lagging channels between them, kills the primary at a random
point, and checks that promotion plus replay reproduces the primary exactly (exactly-once).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Container

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr.checkpoint.backup import (
    SUMMARY_BYTES_PER_SLOT,
    BackedUpBatch,
    BackupFull,
    HwmFn,
    TupleBackup,
    replay_plan,
)
from smr.checkpoint.delta import Delta, decode_delta, encode_delta
from smr.checkpoint.ids import CheckpointNumber, Key, MapperId, Seq
from smr.checkpoint.replica import CheckpointGap, PeerReplica
from smr.checkpoint.store import StateStore
from smr.ring.ids import Slot
from tests.checkpoint.replication import (
    M1,
    M2,
    MAPPERS,
    SLOT_COUNT,
    Operation,
    Primary,
    Replication,
    assert_totals_match,
    count_words,
    decode_body,
    is_covered,
    make_batch,
    operation,
    operations,
    state_of,
)

S0, S1, S2, S3 = Slot(0), Slot(1), Slot(2), Slot(3)


# --------------------------------------------------------------------- batches and bodies


def summary_batch(mapper: MapperId, last_seq_by_slot: dict[Slot, Seq]) -> BackedUpBatch:
    """A batch of one tuple per slot, at the given seqs (for tests that look at summaries)."""
    return make_batch(
        mapper, [(slot, seq, f"key-{slot}", 1) for slot, seq in last_seq_by_slot.items()]
    )


def hwm_from(table: dict[tuple[MapperId, Slot], int]) -> HwmFn:
    return lambda mapper, slot: Seq(table.get((mapper, slot), 0))


def replica_with_hwms(table: dict[tuple[MapperId, Slot], int]) -> PeerReplica:
    """A complete replica whose hwms are exactly ``table`` (and which holds no state)."""
    hwms: dict[Slot, dict[MapperId, Seq]] = {}
    for (mapper, slot), seq in table.items():
        if seq > 0:
            hwms.setdefault(slot, {})[mapper] = Seq(seq)
    replica = PeerReplica()
    replica.begin_snapshot(as_of=0)
    replica.apply_snapshot_chunk(Delta(states={}, hwms=hwms))
    replica.end_snapshot()
    return replica


# ----------------------------------------------------------------------- BackedUpBatch


def test_size_is_the_body_plus_a_fixed_overhead_per_slot() -> None:
    batch = make_batch(M1, [(0, 1, "a", 1), (0, 2, "b", 1), (3, 1, "c", 1)])
    assert batch.last_seq_by_slot == {S0: 2, S3: 1}
    assert batch.size_bytes == len(batch.body) + 2 * SUMMARY_BYTES_PER_SLOT


@pytest.mark.parametrize(
    ("tuple_count", "last_seq_by_slot"), [(1, {S0: 1, S1: 1}), (0, {S0: 1}), (2, {}), (-1, {})]
)
def test_a_summary_that_contradicts_the_tuple_count_is_refused(
    tuple_count: int, last_seq_by_slot: dict[Slot, Seq]
) -> None:
    with pytest.raises(ValueError, match="tuples in"):
        BackedUpBatch(M1, b"", tuple_count, last_seq_by_slot)


# ------------------------------------------------------------------------- TupleBackup


def test_a_batch_covered_before_it_arrives_is_not_stored() -> None:
    backup = TupleBackup()
    # The checkpoint covering the batch reached the secondary before the batch did.
    replica = replica_with_hwms({(M1, S0): 5, (M1, S1): 3})
    batch = summary_batch(M1, {S0: Seq(5), S1: Seq(2)})
    assert backup.add(batch, replica.hwm) is False
    assert backup.add(batch, hwm_from({(M1, S0): 5, (M1, S1): 3})) is False
    assert backup.batches() == []
    assert (backup.batch_count, backup.tuple_count, backup.bytes_held) == (0, 0, 0)


def test_a_partially_covered_batch_is_held_whole_until_every_slot_is_covered() -> None:
    backup = TupleBackup()
    batch = summary_batch(M1, {S0: Seq(5), S1: Seq(2), S2: Seq(7)})
    assert backup.add(batch, hwm_from({(M1, S0): 5})) is True
    assert backup.evict_covered(hwm_from({(M1, S0): 5, (M1, S1): 2})) == 0
    assert backup.batches() == [batch]
    assert backup.evict_covered(hwm_from({(M1, S0): 5, (M1, S1): 2, (M1, S2): 6})) == 0
    # Another mapper's hwm covers nothing of M1's tuples.
    assert backup.evict_covered(hwm_from({(M1, S0): 5, (M1, S1): 2, (M2, S2): 9})) == 0
    assert backup.evict_covered(hwm_from({(M1, S0): 9, (M1, S1): 9, (M1, S2): 7})) == 1
    assert backup.batches() == []
    assert_totals_match(backup)


def test_eviction_takes_a_later_batch_before_an_earlier_one_and_keeps_arrival_order() -> None:
    backup = TupleBackup()
    first = summary_batch(M1, {S0: Seq(1)})
    second = summary_batch(M2, {S1: Seq(1)})
    third = summary_batch(M1, {S2: Seq(1)})
    for batch in (first, second, third):
        assert backup.add(batch, hwm_from({}))
    assert backup.evict_covered(hwm_from({(M2, S1): 1})) == 1
    assert backup.batches() == [first, third]


# Batches: mapper index and the slots of its tuples; seqs are assigned per (mapper, slot).
batch_specs = st.lists(
    st.tuples(
        st.integers(0, len(MAPPERS) - 1),
        st.lists(st.integers(0, SLOT_COUNT - 1), min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=25,
)


def build_batches(specs: list[tuple[int, list[int]]]) -> list[BackedUpBatch]:
    next_seq: dict[tuple[MapperId, int], int] = {}
    batches = []
    for mapper_index, slots in specs:
        mapper = MAPPERS[mapper_index]
        rows = []
        for slot in slots:
            seq = next_seq[mapper, slot] = next_seq.get((mapper, slot), 0) + 1
            rows.append((slot, seq, f"k{slot}", 1))
        batches.append(make_batch(mapper, rows))
    return batches


hwm_tables = st.dictionaries(
    st.tuples(st.sampled_from(MAPPERS), st.integers(0, SLOT_COUNT - 1).map(Slot)),
    st.integers(0, 8),
    max_size=len(MAPPERS) * SLOT_COUNT,
)


@settings(max_examples=150, deadline=None)
@given(
    specs=batch_specs,
    steps=st.lists(st.tuples(st.booleans(), hwm_tables), min_size=1, max_size=30),
    through_replica=st.booleans(),
)
def test_eviction_is_exact_whatever_the_hwm_did_before(
    specs: list[tuple[int, list[int]]],
    steps: list[tuple[bool, dict[tuple[MapperId, Slot], int]]],
    through_replica: bool,
) -> None:
    """Steps add the next batch or evict, each against a random hwm (not even monotone), given
    as a plain function or as a replica's bound ``hwm`` (the fast path): ``add`` stores exactly
    the uncovered batches, eviction drops exactly the covered ones, and the totals add up."""
    pending = build_batches(specs)
    backup = TupleBackup()
    arrived: list[BackedUpBatch] = []
    for is_add, table in steps:
        hwm = replica_with_hwms(table).hwm if through_replica else hwm_from(table)
        reference = hwm_from(table)
        before = backup.batches()
        if is_add and pending:
            batch = pending.pop(0)
            stored = backup.add(batch, hwm)
            assert stored is not is_covered(batch, reference)
            assert backup.batches() == ([*before, batch] if stored else before)
            arrived.append(batch)
        else:
            evicted = backup.evict_covered(hwm)
            after = backup.batches()
            assert evicted == len(before) - len(after)
            assert all(not is_covered(batch, reference) for batch in after)
            after_ids = {id(batch) for batch in after}
            gone = [batch for batch in before if id(batch) not in after_ids]
            assert all(is_covered(batch, reference) for batch in gone)
        # Held batches are a subsequence of the arrivals, in arrival order.
        order = {id(batch): index for index, batch in enumerate(arrived)}
        positions = [order[id(batch)] for batch in backup.batches()]
        assert positions == sorted(positions)
        assert_totals_match(backup)


@settings(max_examples=200, deadline=None)
@given(
    specs=batch_specs,
    first=hwm_tables,
    then=hwm_tables,
    scans_max=st.integers(1, 4),
    through_replica=st.booleans(),
)
def test_an_eviction_in_bounded_steps_drops_only_covered_batches_and_ends_where_a_whole_pass_does(
    specs: list[tuple[int, list[int]]],
    first: dict[tuple[MapperId, Slot], int],
    then: dict[tuple[MapperId, Slot], int],
    scans_max: int,
    through_replica: bool,
) -> None:
    """Blockers set by a first pass against one hwm, then bounded passes against another:
    each pass scans at most ``scans_max`` batches and drops only covered ones, a pass says
    it was whole only at the end, and the batches left are those a whole pass leaves."""
    batches = build_batches(specs)
    whole, stepped = TupleBackup(), TupleBackup()
    nothing = hwm_from({})
    for batch in batches:
        whole.add(batch, nothing)
        stepped.add(batch, nothing)
    whole.evict_covered(hwm_from(first))
    stepped.evict_covered(hwm_from(first))
    hwm = replica_with_hwms(then).hwm if through_replica else hwm_from(then)
    reference = hwm_from(then)
    whole.evict_covered(hwm)
    passes_max = len(batches) + 1
    for _ in range(passes_max):
        before = stepped.batches()
        done = stepped.evict_some(hwm, scans_max)
        after_ids = {id(batch) for batch in stepped.batches()}
        gone = [batch for batch in before if id(batch) not in after_ids]
        assert len(gone) <= scans_max
        assert all(is_covered(batch, reference) for batch in gone)
        assert_totals_match(stepped)
        if done:
            break
    assert done, f"no whole pass after {passes_max} passes of {len(batches)} batches"
    assert stepped.batches() == whole.batches()


@settings(max_examples=100, deadline=None)
@given(specs=batch_specs, moved=st.sets(st.integers(0, SLOT_COUNT - 1).map(Slot)))
def test_split_off_puts_each_slot_of_each_batch_on_exactly_one_side(
    specs: list[tuple[int, list[int]]], moved: set[Slot]
) -> None:
    backup = TupleBackup()
    batches = build_batches(specs)
    for batch in batches:
        backup.add(batch, hwm_from({}))
    split = backup.split_off(moved)

    def cut(keep: Callable[[Slot], bool]) -> list[tuple[bytes, dict[Slot, Seq]]]:
        return [
            (batch.body, {s: q for s, q in batch.last_seq_by_slot.items() if keep(s)})
            for batch in batches
            if any(keep(s) for s in batch.last_seq_by_slot)
        ]

    def held(side: TupleBackup) -> list[tuple[bytes, dict[Slot, Seq]]]:
        return [(batch.body, dict(batch.last_seq_by_slot)) for batch in side.batches()]

    assert held(split) == cut(lambda slot: slot in moved)
    assert held(backup) == cut(lambda slot: slot not in moved)
    assert_totals_match(backup)
    assert_totals_match(split)


def test_a_split_off_batch_is_evicted_by_the_hwm_of_its_own_slots_only() -> None:
    backup = TupleBackup()
    straddling = summary_batch(M1, {S1: Seq(2), S2: Seq(1)})
    backup.add(straddling, hwm_from({}))
    moved = backup.split_off({S2})
    # The new primary of slot 2 covers it: its side goes, this side stays for slot 1.
    assert moved.evict_covered(hwm_from({(M1, S2): Seq(1)})) == 1
    assert backup.evict_covered(hwm_from({(M1, S2): Seq(9)})) == 0
    assert backup.evict_covered(hwm_from({(M1, S1): Seq(2)})) == 1


def test_a_replica_split_off_carries_its_slots_state_and_hwms_and_completeness() -> None:
    replica = PeerReplica()
    replica.begin_snapshot(as_of=CheckpointNumber(3))
    replica.apply_snapshot_chunk(
        Delta(
            states={S0: {"a": {"count": 1}}, S1: {"b": {"count": 2}}},
            hwms={S0: {M1: Seq(4)}, S1: {M1: Seq(5)}},
        )
    )
    replica.end_snapshot()
    part = replica.split_off([S1])
    assert part.is_complete and part.last_checkpoint == 3
    assert (part.hwm(M1, S1), part.hwm(M1, S0)) == (5, 0)
    assert (replica.hwm(M1, S1), replica.hwm(M1, S0)) == (0, 4)
    assert part.store.slots() == {S1} and replica.store.slots() == {S0}


@settings(max_examples=100, deadline=None)
@given(
    specs=batch_specs,
    taken=st.sets(st.integers(0, SLOT_COUNT - 1).map(Slot)),
    as_set=st.booleans(),
)
def test_replay_plan_is_every_held_batch_touching_the_slots_in_arrival_order(
    specs: list[tuple[int, list[int]]], taken: set[Slot], as_set: bool
) -> None:
    backup = TupleBackup()
    for batch in build_batches(specs):
        backup.add(batch, hwm_from({}))
    slots: Container[Slot] = taken if as_set else tuple(taken)
    assert replay_plan(backup, slots) == [
        batch for batch in backup.batches() if set(batch.last_seq_by_slot) & taken
    ]


def test_clear_forgets_every_batch() -> None:
    backup = TupleBackup()
    backup.add(summary_batch(M1, {S0: Seq(1)}), hwm_from({}))
    backup.clear()
    assert backup.batches() == []
    assert (backup.batch_count, backup.tuple_count, backup.bytes_held) == (0, 0, 0)


def test_a_full_backup_refuses_a_batch_and_stores_nothing_until_eviction_makes_room() -> None:
    first = summary_batch(M1, {S0: Seq(1)})
    second = summary_batch(M1, {S0: Seq(2)})
    backup = TupleBackup(backup_bytes_max=first.size_bytes + second.size_bytes - 1)
    assert backup.add(first, hwm_from({}))
    with pytest.raises(BackupFull, match="backup_bytes_max") as refused:
        backup.add(second, hwm_from({}))
    assert refused.value.bytes_held == first.size_bytes
    assert backup.batches() == [first]
    # A covered batch is answered False, full or not: it needs no room.
    assert backup.add(second, hwm_from({(M1, S0): 2})) is False
    assert backup.evict_covered(hwm_from({(M1, S0): 1})) == 1
    assert backup.add(second, hwm_from({(M1, S0): 1}))
    assert backup.batches() == [second]


def test_an_empty_backup_takes_a_batch_bigger_than_its_bound() -> None:
    batch = summary_batch(M1, {S0: Seq(1)})
    backup = TupleBackup(backup_bytes_max=1)
    assert backup.add(batch, hwm_from({}))
    assert backup.bytes_held == batch.size_bytes
    with pytest.raises(ValueError, match="backup_bytes_max"):
        TupleBackup(backup_bytes_max=0)


# ------------------------------------------------------------------------- PeerReplica


def delta_of(slot: Slot, key: Key, count: int, mapper: MapperId, seq: int) -> Delta:
    return Delta(states={slot: {key: {"count": count}}}, hwms={slot: {mapper: Seq(seq)}})


def test_a_fresh_replica_needs_a_snapshot_and_ignores_checkpoints_until_one_begins() -> None:
    replica = PeerReplica()
    assert replica.needs_snapshot
    assert not replica.is_complete
    assert replica.apply_checkpoint(1, delta_of(S0, "a", 1, M1, 1)) is False
    assert replica.apply_checkpoint(7, delta_of(S0, "a", 1, M1, 1)) is False  # no gap raised
    assert replica.store.read(S0, "a") == {}
    assert replica.hwm(M1, S0) == 0


def test_checkpoints_after_a_snapshot_apply_in_order_and_a_duplicate_is_ignored() -> None:
    replica = PeerReplica()
    replica.begin_snapshot(as_of=4)
    assert replica.last_checkpoint == 4
    replica.end_snapshot()
    assert not replica.needs_snapshot
    assert replica.is_complete
    assert replica.apply_checkpoint(4, delta_of(S0, "a", 9, M1, 9)) is False
    assert replica.apply_checkpoint(5, delta_of(S0, "a", 1, M1, 1)) is True
    assert replica.apply_checkpoint(5, delta_of(S0, "a", 9, M1, 9)) is False
    assert replica.apply_checkpoint(3, delta_of(S0, "a", 9, M1, 9)) is False
    assert replica.last_checkpoint == 5
    assert replica.store.read(S0, "a") == {"count": 1}
    assert replica.hwm(M1, S0) == 1


def test_a_skipped_checkpoint_number_raises_a_gap_and_sets_needs_snapshot() -> None:
    replica = PeerReplica()
    replica.begin_snapshot(as_of=0)
    replica.end_snapshot()
    replica.apply_checkpoint(1, delta_of(S0, "a", 1, M1, 1))
    with pytest.raises(CheckpointGap, match="checkpoint 2 was expected") as gap:
        replica.apply_checkpoint(3, delta_of(S0, "a", 3, M1, 3))
    assert (gap.value.expected, gap.value.received) == (2, 3)
    assert replica.needs_snapshot
    # The state is stale, not partial: still the primary's as of checkpoint 1.
    assert replica.is_complete
    assert replica.last_checkpoint == 1
    assert replica.store.read(S0, "a") == {"count": 1}
    # Until a snapshot begins, checkpoints are ignored, the next number included.
    assert replica.apply_checkpoint(2, delta_of(S0, "a", 2, M1, 2)) is False
    assert replica.store.read(S0, "a") == {"count": 1}


def test_the_parts_of_a_checkpoint_apply_in_order_and_a_skipped_part_is_a_gap() -> None:
    replica = PeerReplica()
    replica.begin_snapshot(as_of=0)
    replica.end_snapshot()
    # Part 0 of checkpoint 1: its slot is at checkpoint 1 now, the checkpoint is not whole.
    assert replica.apply_checkpoint(1, delta_of(S0, "a", 1, M1, 1), 0, False) is True
    assert replica.last_checkpoint == 0
    assert (replica.store.read(S0, "a"), replica.hwm(M1, S0)) == ({"count": 1}, 1)
    assert replica.apply_checkpoint(1, delta_of(S0, "a", 9, M1, 9), 0, False) is False
    assert replica.apply_checkpoint(1, delta_of(S1, "b", 2, M1, 2), 1, True) is True
    assert replica.last_checkpoint == 1
    assert replica.apply_checkpoint(1, delta_of(S1, "b", 9, M1, 9), 1, True) is False
    assert replica.store.read(S1, "b") == {"count": 2}
    # Part 1 of checkpoint 2 without its part 0: a gap, named by part.
    with pytest.raises(CheckpointGap, match="part 1 of checkpoint 2 arrived while part 0 was"):
        replica.apply_checkpoint(2, delta_of(S0, "a", 3, M1, 3), 1, True)
    assert replica.needs_snapshot
    assert replica.store.read(S0, "a") == {"count": 1}
    # A snapshot starts the count of parts afresh.
    replica.begin_snapshot(as_of=2)
    assert replica.apply_checkpoint(3, delta_of(S0, "a", 4, M1, 4), 0, True) is True
    assert replica.last_checkpoint == 3


def test_a_gap_aborts_a_snapshot_and_its_late_chunks_and_end_are_ignored() -> None:
    replica = PeerReplica()
    replica.begin_snapshot(as_of=2)
    assert replica.snapshot_in_progress
    replica.apply_snapshot_chunk(delta_of(S0, "a", 1, M1, 1))
    with pytest.raises(CheckpointGap):
        replica.apply_checkpoint(4, delta_of(S0, "a", 2, M1, 2))
    assert not replica.snapshot_in_progress
    replica.apply_snapshot_chunk(delta_of(S1, "b", 1, M1, 1))
    replica.end_snapshot()
    assert replica.needs_snapshot
    assert not replica.is_complete
    assert replica.store.read(S1, "b") == {}
    # A new snapshot replaces the slots it sends and keeps the rest.
    replica.begin_snapshot(as_of=5)
    replica.apply_snapshot_chunk(delta_of(S1, "b", 4, M1, 4))
    replica.end_snapshot()
    assert replica.is_complete
    assert state_of(replica.store, [S0, S1]) == (
        {(S0, "a"): {"count": 1}, (S1, "b"): {"count": 4}},
        {S0: {M1: 1}, S1: {M1: 4}},
    )


def test_an_aborted_snapshot_leaves_the_replica_incomplete_until_a_new_one_ends() -> None:
    replica = PeerReplica()
    replica.begin_snapshot(as_of=0)
    replica.end_snapshot()
    assert replica.is_complete
    replica.begin_snapshot(as_of=3)
    replica.apply_snapshot_chunk(delta_of(S0, "a", 3, M1, 3))
    replica.abort_snapshot()  # the chunk of S1 went missing
    assert not replica.snapshot_in_progress
    assert replica.needs_snapshot
    assert not replica.is_complete
    # The rest of the aborted snapshot, and checkpoints, are ignored.
    replica.apply_snapshot_chunk(delta_of(S1, "b", 3, M1, 3))
    assert replica.apply_checkpoint(4, delta_of(S1, "b", 4, M1, 4)) is False
    replica.end_snapshot()
    assert not replica.is_complete
    assert replica.store.read(S1, "b") == {}
    replica.begin_snapshot(as_of=5)
    replica.apply_snapshot_chunk(delta_of(S1, "b", 5, M1, 5))
    replica.end_snapshot()
    assert replica.is_complete
    assert replica.store.read(S1, "b") == {"count": 5}


def test_begin_snapshot_keeps_the_state_and_a_chunk_replaces_its_slots_entirely() -> None:
    replica = PeerReplica()
    replica.begin_snapshot(as_of=0)
    replica.apply_snapshot_chunk(
        Delta(
            states={S0: {"a": {"count": 1}, "b": {"count": 2}}, S1: {"c": {"count": 3}}},
            hwms={S0: {M1: Seq(2)}, S1: {M2: Seq(1)}},
        )
    )
    replica.end_snapshot()
    before = state_of(replica.store, [S0, S1])
    replica.begin_snapshot(as_of=3)
    # Still whole (and promotable) until chunks replace slots.
    assert state_of(replica.store, [S0, S1]) == before
    assert replica.is_complete
    replica.apply_checkpoint(4, delta_of(S0, "stale", 1, M2, 7))
    # The chunk of S0 drops what checkpoint 4 wrote there and puts the primary's S0 instead.
    replica.apply_snapshot_chunk(delta_of(S0, "a", 5, M1, 5))
    replica.end_snapshot()
    assert state_of(replica.store, [S0, S1]) == (
        {(S0, "a"): {"count": 5}, (S1, "c"): {"count": 3}},
        {S0: {M1: 5}, S1: {M2: 1}},
    )
    assert replica.hwm(M2, S0) == 0
    with pytest.raises(ValueError, match="as_of"):
        replica.begin_snapshot(as_of=-1)


# ---------------------------------------------------------- a primary and its channels


@settings(max_examples=300, deadline=None)
@given(
    operations=operations,
    taken=st.sets(st.integers(0, SLOT_COUNT - 1).map(Slot), min_size=1),
    taken_as_set=st.booleans(),
)
def test_promoted_replica_plus_replay_equals_the_primary_at_the_kill(
    operations: list[Operation],
    taken: set[Slot],
    taken_as_set: bool,
) -> None:
    """Exactly-once takeover. The mappers send every batch to the primary at once and to the
    secondary over a lagging channel (so a checkpoint may overtake a batch); mappers resend
    old batches (duplicates); checkpoints travel over their own lagging channel and each one
    applied is followed by an eviction. At the kill, in-flight checkpoints die with the
    primary and the mappers resend every batch the secondary has not got. Promotion plus the
    replay of the taken-over slots must then equal the primary's state of those slots."""
    replication = Replication()
    for step in operations:
        replication.run(step)
    replication.kill()
    primary, replica, backup = replication.primary, replication.replica, replication.backup
    assert replica.is_complete

    promoted = StateStore()
    promoted.apply_delta(replica.store.snapshot(taken))
    slots_container: Container[Slot] = taken if taken_as_set else sorted(taken)
    for batch in replay_plan(backup, slots_container):
        columns = decode_body(batch.body)
        # The node's part: keep only the tuples of the taken-over slots.
        rows = [row for row in zip(*columns, strict=True) if row[0] in taken]
        assert rows, "the plan holds only batches with a tuple in the taken slots"
        slots, seqs, keys, values = (list(column) for column in zip(*rows, strict=True))
        promoted.apply_batch(batch.mapper, slots, seqs, keys, values, count_words)

    assert state_of(promoted, taken) == state_of(primary.store, taken)


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(operation, max_size=20),
    during=st.lists(operation, max_size=30),
    after=st.lists(operation, max_size=20),
    chunk_count=st.integers(1, SLOT_COUNT),
)
def test_snapshot_with_interleaved_checkpoints_reproduces_the_primary(
    before: list[Operation],
    during: list[Operation],
    after: list[Operation],
    chunk_count: int,
) -> None:
    """A fresh replica ignores checkpoints until the snapshot begins; the primary reads the
    snapshot in ``chunk_count`` chunks (its merged state, active writes included) spread over
    the ``during`` operations, sending checkpoints between them on the same ordered channel.
    After the snapshot's end and one more checkpoint, the replica equals the primary, and
    eviction through ``replica.hwm`` agrees with the store's hwms at every step."""
    primary = Primary()
    replica = PeerReplica()
    channel: list[Callable[[], None]] = []

    def run(ops: list[Operation], chunks: list[list[Slot]] | None = None) -> None:
        pending = list(chunks or [])
        spacing = max(1, len(ops) // (len(pending) + 1))
        for index, step in enumerate(ops):
            if pending and index % spacing == spacing - 1:
                send_chunk(pending.pop(0))
            if step[0] == "emit":
                primary.apply(primary.new_batch(step[1], step[2]))
            elif step[0] == "checkpoint":
                number, encoded = primary.checkpoint()
                channel.append(functools.partial(apply_checkpoint, number, encoded))
        for slots in pending:
            send_chunk(slots)

    def send_chunk(slots: list[Slot]) -> None:
        encoded = encode_delta(primary.store.snapshot(slots))
        channel.append(lambda: replica.apply_snapshot_chunk(decode_delta(encoded)))

    def apply_checkpoint(number: int, encoded: bytes) -> None:
        applied = replica.apply_checkpoint(number, decode_delta(encoded))
        assert applied is not (replica.needs_snapshot and not replica.snapshot_in_progress)

    all_slots = [Slot(slot) for slot in range(SLOT_COUNT)]
    chunks = [all_slots[index::chunk_count] for index in range(chunk_count)]
    run(before)
    as_of = primary.checkpoints_swapped
    channel.append(lambda: replica.begin_snapshot(as_of))
    run(during, chunks)
    channel.append(replica.end_snapshot)
    run(after)
    final_number, final_encoded = primary.checkpoint()
    channel.append(lambda: apply_checkpoint(final_number, final_encoded))

    for message in channel:
        message()
        assert_fast_eviction_agrees_with_the_store(replica)

    assert replica.is_complete
    assert not replica.needs_snapshot
    assert replica.last_checkpoint == primary.checkpoints_swapped
    assert state_of(replica.store, all_slots) == state_of(primary.store, all_slots)


def assert_fast_eviction_agrees_with_the_store(replica: PeerReplica) -> None:
    """Batches at each (mapper, slot)'s hwm and one past it: eviction through the replica's
    bound ``hwm`` (its own copy of the hwms) drops exactly those the store's hwm covers."""
    backup = TupleBackup()
    for mapper in MAPPERS:
        for slot in map(Slot, range(SLOT_COUNT)):
            covered = replica.store.hwm(mapper, slot)
            for seq in (covered, covered + 1):
                if seq > 0:
                    # Held whatever the replica covers: against an hwm of 0 everywhere.
                    assert backup.add(summary_batch(mapper, {slot: Seq(seq)}), hwm_from({}))
    expected = [
        batch
        for batch in backup.batches()
        if not is_covered(batch, lambda mapper, slot: replica.store.hwm(mapper, slot))
    ]
    backup.evict_covered(replica.hwm)
    assert backup.batches() == expected
