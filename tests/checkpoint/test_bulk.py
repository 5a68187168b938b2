"""Specification of ``checkpoint.bulk``: the duplicate cut, folds per key, a batch reduce.

Each bulk path must leave the store exactly as the per-tuple path (``StateStore.apply_batch``)
leaves it for the same deliveries: resends, overlaps and checkpoints in between included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from smr.checkpoint.bulk import Columns, apply_folds, apply_reduce_batch, consume
from smr.checkpoint.ids import Key, MapperId
from smr.checkpoint.store import StateStore

SLOTS = 4
KEYS = ["a", "b", "c", "d", "e", "f", 7, 11]


def slot_of(key: Key) -> int:
    return len(str(key)) % SLOTS if isinstance(key, int) else ord(key) % SLOTS


class Add:
    """A fold that adds numbers into field ``n`` (as ``smr.agg.count`` does)."""

    owned = frozenset({"n"})
    mutable_values = False

    def __init__(self, additive: bool = True) -> None:
        self.additive = additive

    def merge(self, a: Any, b: Any) -> Any:
        return a + b

    def fold_key(self, fields: Mapping[str, Any] | None, partial: Any) -> dict[str, Any]:
        if partial < 0:
            raise ValueError("negative")
        return {"n": (fields or {}).get("n", 0) + partial}


def add_reduce(key: Key, value: Any, state: dict[str, Any]) -> None:
    if value < 0:
        raise ValueError("negative")
    state["n"] = state.get("n", 0) + value


def add_reduce_batch(
    keys: list[Key], values: list[list[Any]], states: list[dict[str, Any]]
) -> None:
    for state, key_values in zip(states, values, strict=True):
        state["n"] = state.get("n", 0) + sum(key_values)


@st.composite
def deliveries(draw: st.DrawFn) -> list[Columns]:
    """Batches of two mappers with seqs increasing per (mapper, slot), then delivered with
    resends (a batch again, or a later one overlapping an earlier)."""
    batches: list[Columns] = []
    for mapper in (MapperId("m1"), MapperId("m2")):
        seqs = [0] * SLOTS
        for _ in range(draw(st.integers(1, 4))):
            keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=12))
            values = draw(st.lists(st.integers(1, 5), min_size=len(keys), max_size=len(keys)))
            slots, batch_seqs = [], []
            for key in keys:
                slot = slot_of(key)
                seqs[slot] += 1
                slots.append(slot)
                batch_seqs.append(seqs[slot])
            batches.append((mapper, slots, batch_seqs, keys, values))
    order = draw(st.permutations(range(len(batches))))
    delivered = [batches[i] for i in order]
    # Per mapper, batches must stay in order among themselves (a channel's order) except
    # for resends: put them back in order, then add resends anywhere.
    by_mapper = {m: [b for b in batches if b[0] == m] for m in ("m1", "m2")}
    delivered = [by_mapper[b[0]].pop(0) for b in delivered]
    for _ in range(draw(st.integers(0, 3))):
        again = draw(st.sampled_from(batches))
        delivered.insert(draw(st.integers(0, len(delivered))), again)
    return delivered


def per_tuple(batches: list[Columns], checkpoint_after: set[int]) -> StateStore:
    store = StateStore()
    for index, (mapper, slots, seqs, keys, values) in enumerate(batches):
        store.apply_batch(mapper, slots, seqs, keys, values, add_reduce)
        if index in checkpoint_after:
            store.swap()
            store.merge_inactive()
    return store


def snapshot_of(store: StateStore) -> tuple[dict[Any, Any], dict[Any, Any]]:
    states = {(slot, key): state for slot, key, state in store.items()}
    return states, {slot: store.hwm_vector(slot) for slot in store.slots()}


@settings(max_examples=300, deadline=None)
@given(
    batches=deliveries(),
    turn=st.integers(1, 5),
    checkpoints=st.sets(st.integers(0, 12)),
    merge_keys=st.none() | st.integers(1, 3),
)
def test_folds_leave_the_store_as_the_per_tuple_path_does(
    batches: list[Columns], turn: int, checkpoints: set[int], merge_keys: int | None
) -> None:
    """Also while a checkpoint is merged in steps across turns (``merge_keys``): keys then
    hold their state in master, inactive and active at once."""
    expected = per_tuple(batches, set())
    for additive in (True, False):
        store = StateStore()
        for start in range(0, len(batches), turn):
            outcome = apply_folds(store, batches[start : start + turn], Add(additive))
            assert outcome.applied + outcome.duplicates == sum(
                len(b[3]) for b in batches[start : start + turn]
            )
            if store.inactive and merge_keys is not None:
                store.merge_inactive(merge_keys)
            if start in checkpoints:
                store.merge_inactive()
                store.swap()
                store.merge_inactive(merge_keys)
        assert snapshot_of(store) == snapshot_of(expected)


@settings(max_examples=300, deadline=None)
@given(batches=deliveries(), checkpoints=st.sets(st.integers(0, 12)))
def test_reduce_batch_leaves_the_store_as_the_per_tuple_path_does(
    batches: list[Columns], checkpoints: set[int]
) -> None:
    store = StateStore()
    for index, columns in enumerate(batches):
        apply_reduce_batch(store, columns, add_reduce_batch)
        if index in checkpoints:
            store.swap()
            store.merge_inactive()
    assert snapshot_of(store) == snapshot_of(per_tuple(batches, checkpoints))


def test_consume_cuts_a_resend_overlapping_what_was_applied() -> None:
    store = StateStore()
    m = MapperId("m")
    assert consume(store, m, [0, 1, 0], [1, 1, 2]) == (0, None)
    # Slot 0 is applied through 2, slot 1 through 1: only the new tuples are fresh.
    assert consume(store, m, [0, 0, 1, 1], [2, 3, 1, 2]) == (2, [1, 3])
    assert store.hwm(m, 0) == 3
    assert store.hwm(m, 1) == 2
    assert store.swap().hwms == {0: {m: 3}, 1: {m: 2}}


def test_a_fold_that_raises_leaves_its_key_unchanged_and_counts_its_tuples() -> None:
    store = StateStore()
    m = MapperId("m")
    ok = (m, [slot_of("a"), slot_of("b")], [1, 1], ["a", "b"], [2, 3])
    bad = (m, [slot_of("a"), slot_of("b"), slot_of("b")], [2, 2, 3], ["a", "b", "b"], [1, -9, 1])
    assert apply_folds(store, [ok], Add()).applied == 2
    outcome = apply_folds(store, [bad], Add(additive=False))
    assert (outcome.applied, outcome.failed) == (1, 2)
    assert [key for key, _ in outcome.failures] == ["b"]
    assert store.get(slot_of("a"), "a") == {"n": 3}
    assert store.get(slot_of("b"), "b") == {"n": 3}
    # The failed tuples are consumed: a resend does not retry them.
    assert apply_folds(store, [bad], Add(additive=False)).duplicates == 3


def test_a_reduce_batch_that_raises_changes_nothing_and_counts_every_fresh_tuple() -> None:
    store = StateStore()
    m = MapperId("m")
    apply_reduce_batch(store, (m, [slot_of("a")], [1], ["a"], [5]), add_reduce_batch)

    def failing(keys: list[Key], values: list[list[Any]], states: list[dict[str, Any]]) -> None:
        states[0]["n"] = 1000
        raise RuntimeError("no")

    columns = (m, [slot_of("a"), slot_of("a"), slot_of("b")], [1, 2, 1], ["a", "a", "b"], [1, 1, 1])
    outcome = apply_reduce_batch(store, columns, failing)
    assert (outcome.applied, outcome.duplicates, outcome.failed) == (0, 1, 2)
    assert isinstance(outcome.failures[0][1], RuntimeError)
    assert store.get(slot_of("a"), "a") == {"n": 5}
    assert store.get(slot_of("b"), "b") is None


def test_reduce_batch_gets_each_key_once_with_its_values_in_order() -> None:
    store = StateStore()
    m = MapperId("m")
    seen: list[tuple[list[Key], list[list[Any]]]] = []

    def record(keys: list[Key], values: list[list[Any]], states: list[dict[str, Any]]) -> None:
        seen.append((list(keys), [list(v) for v in values]))

    slots = [slot_of(k) for k in ["a", "b", "a", "a"]]
    apply_reduce_batch(store, (m, slots, [1, 1, 2, 3], ["a", "b", "a", "a"], [1, 2, 3, 4]), record)
    assert seen == [(["a", "b"], [[1, 3, 4], [2]])]
