"""Master's slots in compiled tables (``smr._native.SlotTable``) against master in dicts, the
Python path: the same states, marks, deltas and snapshots for random batches of a count and
a sum, with duplicates, per-tuple replays, deletes, swaps, merges whole and in parts,
snapshots, promotions, dropped slots and a restart from a snapshot's bytes."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smr import agg, native
from smr.checkpoint.bulk import apply_folds
from smr.checkpoint.delta import TOMBSTONE, Delta, decode_delta, encode_delta
from smr.checkpoint.kernels import IN_FORCE
from smr.checkpoint.store import StateStore
from tests.checkpoint.test_store_stateful import StoreMachine
from tests.smr.test_native import python_kernels

pytestmark = pytest.mark.skipif(
    native.NATIVE is None, reason="smr._native is not built (SMR_NATIVE=off or no Rust build)"
)
NATIVE: Any = native.NATIVE


@contextmanager
def python_path() -> Iterator[None]:
    """The Python references and master in dicts for the body of the block."""
    saved = IN_FORCE.slot_table
    IN_FORCE.slot_table = None
    try:
        with python_kernels():
            yield
    finally:
        IN_FORCE.slot_table = saved


@contextmanager
def tables(field: str) -> Iterator[None]:
    """Stores made in the block hold master's slots in tables keyed for ``field``."""
    saved = IN_FORCE.slot_table
    assert native.keep_slots_compact(field)
    try:
        yield
    finally:
        IN_FORCE.slot_table = saved


KEYS = st.one_of(st.sampled_from(["a", "b", "c", "é", "日本", ""]), st.sampled_from([7, -1, 2**63]))
VALUES = st.one_of(
    st.integers(-5, 5),
    st.sampled_from([2**62, 2**63 - 1, 2**63, -(2**63)]),
    st.floats(-1, 1),
)
INT_VALUES = st.one_of(st.integers(-5, 5), st.sampled_from([2**62, 2**63 - 1, -(2**63), -(2**62)]))
"""Values a turn folded in one compiled call takes whole (no float, nothing past 64 bits)."""


def steps_of(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    """Random steps of a store's life, with batches of ``values``."""
    rows = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 12), KEYS, values), max_size=25)
    return st.lists(
        st.one_of(
            st.tuples(st.just("fold"), st.lists(st.tuples(st.sampled_from(["m1", "m2"]), rows))),
            st.tuples(st.just("per_tuple"), st.sampled_from(["m1", "m2"]), rows),
            st.tuples(st.just("delete"), st.integers(0, 3), KEYS),
            st.tuples(st.just("checkpoint"), st.one_of(st.none(), st.integers(1, 4))),
            st.tuples(st.just("snapshot"), st.sets(st.integers(0, 3))),
            st.tuples(st.just("promote"), st.sets(st.integers(0, 3))),
            st.tuples(st.just("drop"), st.sets(st.integers(0, 3), max_size=1)),
            st.tuples(st.just("restart")),
        ),
        max_size=12,
    )


STEPS = steps_of(VALUES)


def columns(mapper: str, rows: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    slots, seqs, keys, values = ([row[i] for row in rows] for i in range(4))
    return (mapper, slots, seqs, keys, values)


def seen(store: StateStore) -> Any:
    """Everything a reader, a checkpoint and a move can see of a store, as comparable text."""
    slots = sorted(store.slots())
    return repr(
        (
            sorted(map(repr, store.items())),
            store.key_count(),
            slots,
            [sorted(store.hwm_vector(slot).items()) for slot in slots],
            delta_of(store.snapshot(slots)),
        )
    )


def delta_of(delta: Delta) -> Any:
    decoded = decode_delta(encode_delta(delta))
    return repr(
        (
            sorted(
                (slot, sorted(map(repr, keys.items()))) for slot, keys in decoded.states.items()
            ),
            sorted((slot, sorted(v.items())) for slot, v in decoded.hwms.items()),
        )
    )


def run(steps: list[tuple[Any, ...]], aggregation: Any) -> list[Any]:
    """Drive a store (and a replica fed its deltas) through ``steps``; what was seen after
    each step, with each batch's outcome and each delta shipped."""
    store, replica = StateStore(), StateStore()
    trace: list[Any] = []
    reduce_fn = partial(aggregation, emit=None)
    for step in steps:
        kind = step[0]
        if kind == "fold":
            outcome = apply_folds(store, [columns(*batch) for batch in step[1]], aggregation)
            trace.append((outcome.applied, outcome.duplicates, outcome.failed))
        elif kind == "per_tuple":
            outcome = store.apply_batch(*columns(step[1], step[2]), reduce_fn)
            trace.append((outcome.applied, outcome.duplicates, outcome.failed))
        elif kind == "delete":
            store.delete(step[1], step[2])
        elif kind == "checkpoint":
            if store.inactive:
                store.merge_inactive(step[1])
            else:
                delta = store.swap()
                trace.append(delta_of(delta))
                replica.apply_delta(decode_delta(encode_delta(delta)))
        elif kind == "snapshot":
            copy = StateStore()
            copy.apply_delta(decode_delta(encode_delta(store.snapshot(step[1]))))
            trace.append(seen(copy))
        elif kind == "promote":
            store.adopt(replica, step[1])
        elif kind == "drop":
            store.drop_slots(step[1])
        else:  # restart: the store again from its snapshot's bytes, as from disk
            restored = StateStore()
            restored.apply_delta(decode_delta(encode_delta(store.snapshot(store.slots()))))
            assert seen(restored) == seen(store)
        trace.append(seen(store))
        trace.append(seen(replica))
    return trace


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS, st.sampled_from(["count", "sum"]))
def test_tables_leave_the_python_paths_states_marks_deltas_and_outcomes(steps, kind) -> None:
    aggregation = agg.fields(n=getattr(agg, kind)())
    assert aggregation.compact_field == "n"
    with tables("n"):
        compiled = run(steps, aggregation)
    with python_path():
        reference = run(steps, aggregation)
    assert compiled == reference


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps_of(INT_VALUES), st.sampled_from(["count", "sum"]), st.booleans())
def test_turns_folded_in_one_compiled_call_leave_the_python_paths_states_marks_and_outcomes(
    steps, kind, in_tables
) -> None:
    """Integer batches, which ``fold_turn`` takes whole (cut, marks, merge and fold in one
    call) unless a key is past 64 bits or a sum leaves the range (the general fold then
    takes the key): the trace of the Python path, master in tables or in dicts."""
    aggregation = agg.fields(n=getattr(agg, kind)())
    with tables("n") if in_tables else nullcontext():
        compiled = run(steps, aggregation)
    with python_path():
        reference = run(steps, aggregation)
    assert compiled == reference


def test_a_turn_of_int_batches_is_folded_in_one_compiled_call_and_others_are_not() -> None:
    calls: list[bool] = []
    fold_turn = IN_FORCE.fold_turn
    assert fold_turn is not None

    def spy(*args: Any) -> Any:
        done = fold_turn(*args)
        calls.append(done is not None)
        return done

    store = StateStore()
    IN_FORCE.fold_turn = spy
    try:
        count = agg.fields(n=agg.count())
        ints = ("m", [0, 0, 1], [1, 2, 1], ["a", "a", 7], [2, 3, 4])
        outcome = apply_folds(store, [ints, ("m", [0], [2], ["a"], [5])], count)
        assert (outcome.applied, outcome.duplicates) == (3, 1)
        apply_folds(store, [("m", [2], [1], ["c"], [0.5])], agg.fields(n=agg.sum()))
    finally:
        IN_FORCE.fold_turn = fold_turn
    assert calls == [True, False]
    assert sorted(map(repr, store.items())) == [
        "(0, 'a', {'n': 5})",
        "(1, 7, {'n': 4})",
        "(2, 'c', {'n': 0.5})",
    ]
    assert dict(store.hwms_of("m")) == {0: 2, 1: 1, 2: 1}


def test_a_table_answers_as_the_dict_it_stands_for() -> None:
    table = NATIVE.SlotTable("n", TOMBSTONE)
    table.merge(
        {"a": {"n": 1}, 7: {"n": 2}, "b": {"n": 1.5}, "c": {"n": 3, "x": 1}, "é": {"n": -4}}
    )
    expected = {"a": {"n": 1}, 7: {"n": 2}, "b": {"n": 1.5}, "c": {"n": 3, "x": 1}, "é": {"n": -4}}
    assert table.to_dict() == expected
    assert dict(table.items()) == expected
    assert sorted(map(repr, table)) == sorted(map(repr, expected))
    assert len(table) == 5 and "a" in table and "z" not in table
    assert table.compact_len() == 2  # "a", "é"; "b" a float, "c" two fields, 7 not a str
    table.merge({"a": {"n": TOMBSTONE}, "c": {"x": TOMBSTONE}, "b": {"n": 2**63}})
    assert table.get("a") is None
    assert table.to_dict() == {7: {"n": 2}, "b": {"n": 2**63}, "c": {"n": 3}, "é": {"n": -4}}
    assert table.compact_len() == 2  # "c" came back, "b" is past the i64 range
    assert table.pop("c") == {"n": 3} and "c" not in table
    table.merge({"c": {"n": 5}})
    assert table["c"] == {"n": 5}


def test_a_count_or_a_sum_names_its_field_and_nothing_else_does() -> None:
    assert agg.fields(words=agg.count()).compact_field == "words"
    assert agg.fields(total=agg.sum()).compact_field == "total"
    assert agg.fields(low=agg.min()).compact_field is None
    assert agg.fields(n=agg.count(), total=agg.sum()).compact_field is None


@pytest.mark.slow
def test_a_million_key_count_costs_under_half_a_python_dicts_bytes_per_key() -> None:
    keys = [f"word{i}" for i in range(1_000_000)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    plain = {f"word{i}": 300 + i % 1000 for i in range(1_000_000)}
    dict_bytes = tracemalloc.get_traced_memory()[0] - before
    del plain
    table = NATIVE.SlotTable("n", TOMBSTONE)
    table.merge({key: {"n": 300 + i % 1000} for i, key in enumerate(keys)})
    tracemalloc.stop()
    assert len(table) == 1_000_000
    assert table.compact_nbytes() <= 0.5 * dict_bytes


class TableStoreMachine(StoreMachine):
    """The store's stateful specification with master's slots in tables keyed for the
    field ``a`` (its int states compact, the rest beside them)."""

    def __init__(self) -> None:
        self._saved_slot_table = IN_FORCE.slot_table
        native.keep_slots_compact("a")
        super().__init__()

    def teardown(self) -> None:
        IN_FORCE.slot_table = self._saved_slot_table


TableStoreMachine.TestCase.settings = StoreMachine.TestCase.settings
TestStoreWithTablesAgainstModel = TableStoreMachine.TestCase
