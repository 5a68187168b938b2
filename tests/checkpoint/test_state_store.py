"""Specification of ``checkpoint.store.StateStore``: reads, commits, dedup, the checkpoint cycle.

(File names in tests/checkpoint are unique across tests/, since tests/ is not a package.)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr.checkpoint.delta import TOMBSTONE, Delta, decode_delta, encode_delta
from smr.checkpoint.ids import Key, MapperId, Seq
from smr.checkpoint.store import FAILURE_EXAMPLES_MAX, StateStore
from smr.ring.ids import Slot

M1 = MapperId("mapper-1")
M2 = MapperId("mapper-2")
S0 = Slot(0)
S1 = Slot(1)


def count_words(key: Key, value: Any, state: dict[str, Any]) -> None:
    state["count"] = state.get("count", 0) + value


def put(store: StateStore, slot: Slot, key: Key, **fields: Any) -> None:
    """Set fields of a key through the public read/commit path."""
    state = store.read(slot, key)
    before = dict(state)
    state.update(fields)
    store.commit(slot, key, before, state)


def checkpoint(store: StateStore) -> Delta:
    delta = store.swap()
    store.merge_inactive()
    return delta


# ---------------------------------------------------------------------------------- reads


def test_read_of_an_absent_key_is_an_empty_dict_and_get_is_none() -> None:
    store = StateStore()
    assert store.read(S0, "nothing") == {}
    assert store.get(S0, "nothing") is None


def test_reads_take_each_field_from_the_newest_fragment_that_has_it() -> None:
    store = StateStore()
    put(store, S0, "k", a=1, b=1, c=1)
    checkpoint(store)  # a, b, c in master
    put(store, S0, "k", b=2)
    store.swap()  # b=2 in inactive
    put(store, S0, "k", c=3)  # c=3 in active
    assert store.master[S0]["k"] == {"a": 1, "b": 1, "c": 1}
    assert store.inactive[S0]["k"] == {"b": 2}
    assert store.active[S0]["k"] == {"c": 3}
    assert store.read(S0, "k") == {"a": 1, "b": 2, "c": 3}


def test_read_hides_tombstoned_fields_and_a_key_without_live_fields_is_absent() -> None:
    store = StateStore()
    put(store, S0, "k", a=1, b=2)
    checkpoint(store)
    state = store.read(S0, "k")
    store.commit(S0, "k", state, {"a": 1})
    assert store.active[S0]["k"] == {"b": TOMBSTONE}
    assert store.read(S0, "k") == {"a": 1}
    store.delete(S0, "k")
    assert store.get(S0, "k") is None
    assert list(store.items()) == []
    assert store.key_count() == 0


def test_read_returns_a_copy_whose_mutation_cannot_alter_the_store() -> None:
    store = StateStore()
    put(store, S0, "k", items=[1, [2]], tags={"x"}, raw=bytearray(b"ab"), sub={"n": [1]})
    checkpoint(store)
    state = store.read(S0, "k")
    state["items"].append(3)
    state["items"][1].append(4)
    state["tags"].add("y")
    state["raw"].extend(b"cd")
    state["sub"]["n"].append(2)
    state["new"] = 1
    assert store.read(S0, "k") == {
        "items": [1, [2]],
        "tags": {"x"},
        "raw": bytearray(b"ab"),
        "sub": {"n": [1]},
    }


# -------------------------------------------------------------------------------- commits


def test_commit_writes_only_the_fields_that_changed() -> None:
    store = StateStore()
    put(store, S0, "k", a=1, b="x", c=(1, 2))
    checkpoint(store)
    state = store.read(S0, "k")
    before = dict(state)
    state["a"] = 2
    state["c"] = (1, 2)  # equal, though a different object: unchanged
    store.commit(S0, "k", before, state)
    assert store.active[S0]["k"] == {"a": 2}


def test_commit_counts_a_mutable_value_as_changed_even_when_equal() -> None:
    store = StateStore()
    put(store, S0, "k", items=[1])
    checkpoint(store)
    state = store.read(S0, "k")
    before = dict(state)
    state["items"].append(2)  # the snapshot shares the list, so equality cannot tell
    store.commit(S0, "k", before, state)
    assert store.active[S0]["k"] == {"items": [1, 2]}


def test_commit_keeps_a_private_copy_of_mutable_values() -> None:
    store = StateStore()
    after: dict[str, Any] = {"items": [1]}
    store.commit(S0, "k", {}, after)
    after["items"].append(2)
    assert store.read(S0, "k") == {"items": [1]}


def test_commit_counts_a_value_whose_equality_raises_as_changed() -> None:
    class Incomparable:
        def __eq__(self, other: object) -> bool:
            raise TypeError("no comparison")

        __hash__ = object.__hash__

    store = StateStore()
    old, new = Incomparable(), Incomparable()
    store.commit(S0, "k", {"v": old}, {"v": new})
    assert store.active[S0]["k"]["v"] is new


# --------------------------------------------------------------------- apply_batch, dedup


def test_apply_batch_reduces_every_new_tuple_in_order() -> None:
    store = StateStore()
    outcome = store.apply_batch(M1, [0, 0, 1], [1, 2, 1], ["a", "a", "b"], [1, 2, 5], count_words)
    assert (outcome.applied, outcome.duplicates, outcome.failed) == (3, 0, 0)
    assert store.read(S0, "a") == {"count": 3}
    assert store.read(S1, "b") == {"count": 5}
    assert store.hwm(M1, S0) == 2
    assert store.hwm(M1, S1) == 1


def test_reapplying_a_batch_changes_nothing_and_counts_every_tuple_as_duplicate() -> None:
    store = StateStore()
    batch = ([0, 0, 1, 1], [1, 2, 1, 3], ["a", "b", "a", "c"], [1, 1, 1, 1])
    store.apply_batch(M1, *batch, count_words)
    checkpoint(store)
    expected = list(store.items())
    outcome = store.apply_batch(M1, *batch, count_words)
    assert (outcome.applied, outcome.duplicates, outcome.failed) == (0, 4, 0)
    assert list(store.items()) == expected
    assert store.active == {}
    assert store.swap().is_empty()


def test_hwm_is_kept_per_mapper_and_per_slot() -> None:
    store = StateStore()
    store.apply_batch(M1, [0], [5], ["a"], [1], count_words)
    # Same seq from another mapper, and from the same mapper on another slot: both new.
    outcome = store.apply_batch(M2, [0], [5], ["a"], [1], count_words)
    assert outcome.applied == 1
    outcome = store.apply_batch(M1, [1], [5], ["a"], [1], count_words)
    assert outcome.applied == 1
    outcome = store.apply_batch(M1, [0, 0], [4, 6], ["a", "a"], [1, 1], count_words)
    assert (outcome.applied, outcome.duplicates) == (1, 1)
    assert store.hwm_vector(S0) == {M1: 6, M2: 5}
    assert store.hwm_vector(S1) == {M1: 5}
    assert store.is_duplicate(M1, S0, Seq(6))
    assert not store.is_duplicate(M1, S0, Seq(7))
    assert store.hwm(M2, S1) == 0
    assert store.read(S0, "a") == {"count": 3}


def test_a_tuple_is_a_duplicate_of_an_earlier_one_in_the_same_batch() -> None:
    store = StateStore()
    outcome = store.apply_batch(M1, [0, 0, 0], [1, 1, 2], ["a", "a", "a"], [1, 1, 1], count_words)
    assert (outcome.applied, outcome.duplicates) == (2, 1)
    assert store.read(S0, "a") == {"count": 2}


def test_a_failing_reducer_consumes_its_tuple_and_leaves_no_trace_in_state() -> None:
    def fail_on_odd(key: Key, value: Any, state: dict[str, Any]) -> None:
        state["count"] = state.get("count", 0) + value
        state.pop("keep", None)
        if value % 2:
            raise ValueError(f"odd value {value}")

    store = StateStore()
    put(store, S0, "a", keep=1)
    outcome = store.apply_batch(M1, [0, 0, 0], [1, 2, 3], ["a", "a", "new"], [2, 3, 5], fail_on_odd)
    assert (outcome.applied, outcome.duplicates, outcome.failed) == (1, 0, 2)
    assert [(key, str(error)) for key, error in outcome.failures] == [
        ("a", "odd value 3"),
        ("new", "odd value 5"),
    ]
    assert store.read(S0, "a") == {"count": 2}
    assert store.get(S0, "new") is None
    # Consumed: a resend of the failed tuples is a duplicate, never retried.
    outcome = store.apply_batch(M1, [0, 0], [2, 3], ["a", "new"], [3, 5], fail_on_odd)
    assert outcome.duplicates == 2


def test_failures_keep_at_most_the_example_limit_but_count_all() -> None:
    def always_fail(key: Key, value: Any, state: dict[str, Any]) -> None:
        raise RuntimeError("broken reducer")

    store = StateStore()
    size = FAILURE_EXAMPLES_MAX + 50
    outcome = store.apply_batch(
        M1, [0] * size, list(range(1, size + 1)), ["k"] * size, [1] * size, always_fail
    )
    assert outcome.failed == size
    assert len(outcome.failures) == FAILURE_EXAMPLES_MAX
    assert list(store.items()) == []


def test_a_base_exception_from_the_reducer_propagates_after_earlier_tuples_applied() -> None:
    def interrupt_on_second(key: Key, value: Any, state: dict[str, Any]) -> None:
        state["count"] = state.get("count", 0) + 1
        if value == 2:
            raise KeyboardInterrupt

    store = StateStore()
    with pytest.raises(KeyboardInterrupt):
        store.apply_batch(M1, [0, 0, 0], [1, 2, 3], ["a", "a", "a"], [1, 2, 3], interrupt_on_second)
    assert store.read(S0, "a") == {"count": 1}
    assert store.hwm(M1, S0) == 2


def test_apply_batch_rejects_columns_of_different_lengths() -> None:
    store = StateStore()
    with pytest.raises(ValueError, match="differ in length"):
        store.apply_batch(M1, [0, 0], [1], ["a", "b"], [1, 1], count_words)
    assert store.hwm(M1, S0) == 0


@pytest.mark.parametrize("in_master", [True, False], ids=["key-in-master", "key-in-active"])
def test_in_place_list_mutation_by_a_reducer_is_captured_as_a_change(in_master: bool) -> None:
    def append(key: Key, value: Any, state: dict[str, Any]) -> None:
        state.setdefault("seen", []).append(value)

    store = StateStore()
    store.apply_batch(M1, [0], [1], ["k"], ["x"], append)
    if in_master:
        checkpoint(store)
    store.apply_batch(M1, [0], [2], ["k"], ["y"], append)
    assert store.read(S0, "k") == {"seen": ["x", "y"]}
    delta = checkpoint(store)
    assert delta.states[S0]["k"] == {"seen": ["x", "y"]}
    assert store.master[S0]["k"] == {"seen": ["x", "y"]}


@pytest.mark.parametrize("where", ["master", "inactive", "active"])
def test_in_place_mutation_then_raise_cannot_corrupt_any_fragment(where: str) -> None:
    def append_then_fail(key: Key, value: Any, state: dict[str, Any]) -> None:
        state["seen"].append(value)
        state["tally"].update([value])
        state["seen_set"].add(value)
        raise ValueError("after mutating")

    store = StateStore()
    put(store, S0, "k", seen=["x"], tally=Counter(["x"]), seen_set={"x"})
    if where == "master":
        checkpoint(store)
    elif where == "inactive":
        store.swap()
    outcome = store.apply_batch(M1, [0], [1], ["k"], ["y"], append_then_fail)
    assert outcome.failed == 1
    expected = {"seen": ["x"], "tally": Counter(["x"]), "seen_set": {"x"}}
    assert store.read(S0, "k") == expected
    fragment = {"master": store.master, "inactive": store.inactive, "active": store.active}[where]
    assert fragment[S0]["k"] == expected


def test_in_place_mutation_of_a_dict_subclass_is_captured_as_a_change() -> None:
    def tally(key: Key, value: Any, state: dict[str, Any]) -> None:
        state.setdefault("tally", Counter()).update([value])

    store = StateStore()
    store.apply_batch(M1, [0, 0], [1, 2], ["k", "k"], ["x", "x"], tally)
    checkpoint(store)
    store.apply_batch(M1, [0], [3], ["k"], ["y"], tally)
    assert store.read(S0, "k") == {"tally": Counter({"x": 2, "y": 1})}


def test_a_reducer_that_deletes_a_field_leaves_a_tombstone_that_ships() -> None:
    def drop_a(key: Key, value: Any, state: dict[str, Any]) -> None:
        del state["a"]

    store = StateStore()
    put(store, S0, "k", a=1, b=2)
    checkpoint(store)
    store.apply_batch(M1, [0], [1], ["k"], [None], drop_a)
    delta = store.swap()
    assert delta.states == {S0: {"k": {"a": TOMBSTONE}}}
    store.merge_inactive()
    assert store.master == {S0: {"k": {"b": 2}}}


# ------------------------------------------------------------------------ checkpoint cycle


def test_swap_ships_changed_fields_and_full_hwm_vectors_of_dirty_slots_only() -> None:
    store = StateStore()
    store.apply_batch(M1, [0, 1], [1, 1], ["a", "b"], [1, 1], count_words)
    store.apply_batch(M2, [0], [1], ["a"], [1], count_words)
    checkpoint(store)
    store.apply_batch(M1, [0], [2], ["a"], [1], count_words)
    delta = store.swap()
    assert delta.states == {S0: {"a": {"count": 3}}}
    # Slot 0's full vector (M2 did not move), and nothing of slot 1, whose hwm did not move.
    assert delta.hwms == {S0: {M1: 2, M2: 1}}
    store.merge_inactive()
    assert checkpoint(store).is_empty()


def test_swap_refuses_while_the_previous_inactive_fragment_is_unmerged() -> None:
    store = StateStore()
    put(store, S0, "k", a=1)
    store.swap()
    put(store, S0, "k", a=2)
    with pytest.raises(RuntimeError, match="merge_inactive"):
        store.swap()
    store.merge_inactive()
    assert store.swap().states == {S0: {"k": {"a": 2}}}


def test_swap_with_an_empty_inactive_fragment_needs_no_merge() -> None:
    store = StateStore()
    assert store.swap().is_empty()
    assert store.swap().is_empty()


def test_a_delta_handed_out_is_never_mutated_by_the_store() -> None:
    store = StateStore()
    store.apply_batch(M1, [0, 1], [1, 1], ["a", "b"], [1, 1], count_words)
    delta = store.swap()
    frozen = decode_delta(encode_delta(delta))
    store.apply_batch(M1, [0, 1], [2, 2], ["a", "b"], [1, 1], count_words)
    store.merge_inactive()
    store.apply_batch(M1, [0], [3], ["a"], [1], count_words)
    checkpoint(store)
    store.delete(S0, "a")
    store.drop_slots([S1])
    checkpoint(store)
    assert delta == frozen


def test_merge_inactive_drops_tombstoned_fields_empty_keys_and_empty_slots() -> None:
    store = StateStore()
    put(store, S0, "gone", a=1)
    put(store, S0, "stays", a=1, b=2)
    put(store, S1, "gone", a=1)
    checkpoint(store)
    store.delete(S0, "gone")
    store.delete(S1, "gone")
    store.commit(S0, "stays", {"a": 1, "b": 2}, {"a": 1})
    checkpoint(store)
    assert store.master == {S0: {"stays": {"a": 1}}}
    assert store.inactive == {}


def test_reads_are_the_same_before_and_after_each_checkpoint_step() -> None:
    store = StateStore()
    store.apply_batch(M1, [0, 0, 1], [1, 2, 1], ["a", "b", "c"], [1, 1, 1], count_words)
    checkpoint(store)
    store.apply_batch(M1, [0, 1], [3, 2], ["a", "c"], [1, 1], count_words)
    store.delete(S0, "b")
    expected = sorted(store.items(), key=repr)
    store.swap()
    assert sorted(store.items(), key=repr) == expected
    store.merge_inactive()
    assert sorted(store.items(), key=repr) == expected


# ------------------------------------------------------------------------ replica, handoff


def test_apply_delta_merges_fields_and_tombstones_into_master() -> None:
    replica = StateStore()
    replica.apply_delta(Delta({S0: {"k": {"a": 1, "b": 2}, "j": {"a": 1}}}, {}))
    replica.apply_delta(Delta({S0: {"k": {"a": TOMBSTONE}, "j": {"a": TOMBSTONE}}}, {}))
    assert replica.master == {S0: {"k": {"b": 2}}}
    assert replica.active == {} and replica.inactive == {}


def test_apply_delta_never_lowers_a_hwm() -> None:
    replica = StateStore()
    replica.apply_delta(Delta({}, {S0: {M1: Seq(5), M2: Seq(1)}}))
    replica.apply_delta(Delta({}, {S0: {M1: Seq(3), M2: Seq(4)}}))
    assert replica.hwm_vector(S0) == {M1: 5, M2: 4}


def test_a_replica_of_a_delta_holding_lists_returns_deep_copies() -> None:
    replica = StateStore()
    replica.apply_delta(decode_delta(encode_delta(Delta({S0: {"k": {"l": [1]}}}, {}))))
    replica.read(S0, "k")["l"].append(2)
    assert replica.read(S0, "k") == {"l": [1]}
    outcome = replica.apply_batch(M1, [0], [1], ["k"], [3], lambda k, v, s: s["l"].append(v))
    assert outcome.applied == 1
    assert replica.read(S0, "k") == {"l": [1, 3]}


def test_snapshot_applied_to_an_empty_store_reproduces_those_slots_exactly() -> None:
    source = StateStore()
    source.apply_batch(M1, [0, 1, 2], [1, 1, 1], ["a", "b", "c"], [1, 2, 3], count_words)
    source.apply_batch(M2, [1], [7], ["b"], [1], count_words)
    checkpoint(source)
    put(source, S1, "b", extra=(1, "x"))
    source.swap()  # some state in inactive, some in active, some in master
    source.delete(S0, "a")
    source.apply_batch(M1, [1], [2], ["d"], [1], count_words)
    target = StateStore()
    target.apply_delta(decode_delta(encode_delta(source.snapshot([S0, S1]))))
    assert sorted(target.items(), key=repr) == sorted(source.items([S0, S1]), key=repr)
    for slot in (S0, S1):
        assert target.hwm_vector(slot) == source.hwm_vector(slot)
    assert target.slots() == {S0, S1}
    assert all(
        value is not TOMBSTONE
        for keys in target.master.values()
        for fields in keys.values()
        for value in fields.values()
    )


def test_drop_slots_forgets_state_and_hwms_of_those_slots_only() -> None:
    store = StateStore()
    store.apply_batch(M1, [0, 1], [1, 1], ["a", "b"], [1, 1], count_words)
    checkpoint(store)
    store.apply_batch(M1, [0, 1], [2, 2], ["a", "b"], [1, 1], count_words)
    delta = store.swap()
    store.apply_batch(M1, [0], [3], ["a"], [1], count_words)
    store.drop_slots([S0])
    assert store.slots() == {S1}
    assert store.get(S0, "a") is None
    assert store.hwm(M1, S0) == 0
    assert store.read(S1, "b") == {"count": 2}
    assert S0 in delta.states  # the delta already handed out keeps what it shipped
    store.merge_inactive()
    assert store.swap().hwms == {}


def test_items_key_count_and_slots_describe_live_state() -> None:
    store = StateStore()
    store.apply_batch(M1, [0, 0, 1], [1, 2, 1], ["a", 7, "b"], [1, 1, 1], count_words)
    checkpoint(store)
    store.delete(S1, "b")
    store.apply_batch(M1, [2], [1], ["c"], [1], count_words)
    assert sorted(store.items(), key=repr) == sorted(
        [(S0, "a", {"count": 1}), (S0, 7, {"count": 1}), (Slot(2), "c", {"count": 1})], key=repr
    )
    assert list(store.items([S1])) == []
    assert store.key_count() == 3
    assert store.slots() == {S0, S1, Slot(2)}


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", 1]), st.integers(-5, 5)),
        max_size=60,
    )
)
def test_word_count_equals_a_plain_python_count_across_checkpoints(
    tuples: list[tuple[int, Key, int]],
) -> None:
    store = StateStore()
    seqs: dict[int, int] = {}
    expected: dict[tuple[int, Key], int] = {}
    for index, (slot, key, value) in enumerate(tuples):
        seqs[slot] = seqs.get(slot, 0) + 1
        store.apply_batch(M1, [slot], [seqs[slot]], [key], [value], count_words)
        expected[slot, key] = expected.get((slot, key), 0) + value
        if index % 7 == 3:
            checkpoint(store)
    assert {(slot, key): state["count"] for slot, key, state in store.items()} == expected


def _fed(mapper: MapperId, words_by_slot: dict[int, list[str]]) -> StateStore:
    """A store that counted ``words_by_slot`` (seqs from 1 per slot), then checkpointed."""
    store = StateStore()
    for slot, words in words_by_slot.items():
        seqs = list(range(1, len(words) + 1))
        store.apply_batch(mapper, [slot] * len(words), seqs, words, [1] * len(words), count_words)
    return store


def _replica_and_node(
    replica_slots: dict[int, list[str]], node_slots: dict[int, list[str]]
) -> tuple[StateStore, StateStore]:
    """A primary's replica (built from its checkpoints) and a node store with its own slots,
    one unmerged write among them."""
    replica = StateStore()
    replica.apply_delta(checkpoint(_fed(M1, replica_slots)))
    node = _fed(M2, node_slots)
    checkpoint(node)
    put(node, Slot(next(iter(node_slots), 0)), "unmerged", n=1)
    return replica, node


def _view(store: StateStore) -> tuple[dict[Any, Any], dict[Any, Any]]:
    slots = sorted(store.slots())
    states = {(slot, key): state for slot, key, state in store.items(slots)}
    hwms = {s: store.hwm_vector(s) for s in slots}
    return states, hwms


slot_words = st.dictionaries(
    st.integers(0, 7),
    st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=5),
    max_size=5,
)


@given(replica_slots=slot_words, node_slots=slot_words, taken=st.sets(st.integers(0, 7)))
def test_adopt_equals_applying_a_snapshot_and_empties_the_replica_of_those_slots(
    replica_slots: dict[int, list[str]], node_slots: dict[int, list[str]], taken: set[int]
) -> None:
    replica, node = _replica_and_node(replica_slots, node_slots)
    expected_replica, expected_node = _replica_and_node(replica_slots, node_slots)
    wanted = [Slot(s) for s in taken]
    expected_node.apply_delta(expected_replica.snapshot(wanted))
    node.adopt(replica, wanted)
    assert _view(node) == _view(expected_node)
    assert replica.slots().isdisjoint(wanted)


def test_adopt_moves_a_slot_the_node_does_not_hold_by_reference() -> None:
    replica, node = _replica_and_node({3: ["a", "b"]}, {1: ["c"]})
    moved = replica.master[Slot(3)]
    node.adopt(replica, [Slot(3)])
    assert node.master[Slot(3)] is moved
    assert node.get(Slot(3), "a") == {"count": 1}
    assert node.hwm(M1, Slot(3)) == 2
