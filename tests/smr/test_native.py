"""The compiled hot path (smr._native) against its Python references: the same bytes, the
same columns, the same errors, the same cut, merges and registers for random input."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smr import agg, native
from smr.checkpoint import kernels
from smr.checkpoint.bulk import apply_folds
from smr.checkpoint.delta import Delta
from smr.checkpoint.hwm import cut
from smr.checkpoint.kernels import IN_FORCE, group_add
from smr.checkpoint.store import StateStore
from smr.wire.batch_body import (
    decode_batch_body,
    decode_batch_body_python,
    encode_batch_body,
    encode_batch_body_python,
    ids_problem_python,
)
from smr.wire.kinds import FrameError

pytestmark = pytest.mark.skipif(
    native.NATIVE is None, reason="smr._native is not built (SMR_NATIVE=off or no Rust build)"
)
NATIVE: Any = native.NATIVE
SLOT_COUNT = 64

KEYS = st.one_of(st.text(max_size=8), st.integers(min_value=-(2**63), max_value=2**64 - 1))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.binary(max_size=40),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.tuples(inner, inner),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.integers(-(2**63), 2**64 - 1)), inner, max_size=6
        ),
    ),
    max_leaves=10,
)


@st.composite
def columns(draw: st.DrawFn, values: st.SearchStrategy[Any] = VALUES) -> tuple[list, ...]:
    count = draw(st.integers(min_value=0, max_value=12))
    return (
        draw(st.lists(st.integers(0, SLOT_COUNT - 1), min_size=count, max_size=count)),
        draw(st.lists(st.integers(1, 2**64 - 1), min_size=count, max_size=count)),
        draw(st.lists(KEYS, min_size=count, max_size=count)),
        draw(st.lists(values, min_size=count, max_size=count)),
        draw(st.lists(st.floats(), min_size=count, max_size=count)),
    )


def outcome(call: Callable[[], Any]) -> Any:
    """What a call answers, or the type of what it raises; repr makes nan equal to nan and
    tells a tuple from a list, an int from a bool."""
    try:
        return repr(call())
    except Exception as error:
        return type(error)


@settings(
    max_examples=150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(columns())
def test_encode_gives_the_reference_bytes(batch) -> None:
    assert outcome(lambda: encode_batch_body(*batch)) == outcome(
        lambda: encode_batch_body_python(*batch)
    )


@given(
    columns(
        st.one_of(
            st.integers(min_value=2**64, max_value=2**70),
            st.integers(max_value=-(2**63) - 1),
            st.just(bytearray(b"ab")),
            st.just("\ud800"),
            st.just({1, 2}),
            st.just(True),
        )
    )
)
def test_encode_of_what_it_leaves_to_the_reference_answers_as_the_reference(batch) -> None:
    assert outcome(lambda: encode_batch_body(*batch)) == outcome(
        lambda: encode_batch_body_python(*batch)
    )


@settings(
    max_examples=150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(columns(), st.data())
def test_decode_gives_the_reference_columns_and_errors(batch, data) -> None:
    body = encode_batch_body_python(*batch)
    count = len(batch[0])
    assert outcome(lambda: decode_batch_body(body, count, SLOT_COUNT)) == outcome(
        lambda: decode_batch_body_python(body, count, SLOT_COUNT)
    )
    # Damaged: cut short, a byte changed, a wrong count, a smaller slot count.
    cut_at = data.draw(st.integers(0, len(body)))
    flip_at = data.draw(st.integers(0, max(len(body) - 1, 0)))
    flipped = bytearray(body)
    if flipped:
        flipped[flip_at] = data.draw(st.integers(0, 255))
    for damaged, n, slots in (
        (body[:cut_at], count, SLOT_COUNT),
        (bytes(flipped), count, SLOT_COUNT),
        (body, count + data.draw(st.integers(-2, 2)), SLOT_COUNT),
        (body, count, data.draw(st.integers(1, SLOT_COUNT))),
    ):
        if n < 0:
            continue
        compiled = outcome(lambda d=damaged, n=n, s=slots: decode_batch_body(d, n, s))
        reference = outcome(lambda d=damaged, n=n, s=slots: decode_batch_body_python(d, n, s))
        assert compiled == reference


def test_decode_names_what_is_malformed() -> None:
    body = encode_batch_body([1], [1], [1.5], [1], [0.0])
    with pytest.raises(FrameError, match="keys must be str or int, got float"):
        decode_batch_body(body, 1, SLOT_COUNT)
    with pytest.raises(FrameError, match="too short"):
        decode_batch_body(body[:10], 1, SLOT_COUNT)


def test_decode_leaves_ext_types_to_the_reference() -> None:
    import msgpack

    ext = msgpack.ExtType(5, b"xyz")
    body = encode_batch_body_python([1], [1], ["k"], [ext], [0.0])
    assert decode_batch_body(body, 1, SLOT_COUNT).values == (ext,)


MARKS = st.dictionaries(st.integers(0, 7), st.integers(1, 30), max_size=8)
ROWS = st.lists(st.tuples(st.integers(0, 7), st.integers(1, 30)), max_size=60)


@given(
    st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)), max_size=20),
    st.sampled_from([1, 64, 2**32]),
)
def test_the_compiled_check_of_slots_and_seqs_names_the_reference_problem(rows, slot_count) -> None:
    slots = [slot for slot, _ in rows]
    seqs = [seq for _, seq in rows]
    body = encode_batch_body_python(slots, seqs, [], [], [0.0] * len(rows))
    expected = ids_problem_python(slots, seqs, slot_count)
    assert NATIVE.ids_problem(body, len(rows), slot_count) == expected


FOLD_VALUES = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([-(2**63), 2**63 - 1, 2**63, 2**64 - 1, 0]),
    st.floats(),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(columns(FOLD_VALUES), st.data())
def test_the_compiled_fold_reads_a_body_whole_exactly_when_its_decode_gives_int64_values(
    batch, data
) -> None:
    """``body_folds`` (the intake's test for keeping a count's batch in its bytes) says yes
    exactly when the reference decodes the body, its keys ``str`` or ``int``, its values
    ``int`` within [-2**63, 2**63): never for a malformed body (damaged, cut short, a
    count it does not hold), a bool, a float, a value past 64 signed bits."""
    body = encode_batch_body_python(*batch)
    count = len(batch[0])
    damage = data.draw(st.sampled_from(["none", "byte", "cut", "extra", "count"]))
    if damage == "byte" and body:
        at = data.draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([data.draw(st.integers(0, 255))]) + body[at + 1 :]
    elif damage == "cut" and body:
        body = body[: data.draw(st.integers(0, len(body) - 1))]
    elif damage == "extra":
        body += b"\x00"
    elif damage == "count":
        count = data.draw(st.integers(0, 14))
    folds = NATIVE.body_folds(body, count, SLOT_COUNT)
    try:
        decoded = decode_batch_body_python(body, count, SLOT_COUNT)
    except FrameError:
        assert not folds
        return
    readable = all(key.__class__ in (str, int) for key in decoded.keys) and all(
        value.__class__ is int and -(2**63) <= value < 2**63 for value in decoded.values
    )
    assert folds == readable


@settings(max_examples=500)
@given(MARKS, ROWS)
def test_cut_gives_the_reference_cut_for_any_batch(marks, rows) -> None:
    slots = [slot for slot, _ in rows]
    seqs = [seq for _, seq in rows]
    assert native.native_cut(marks, slots, seqs) == cut(marks, slots, seqs)


NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.booleans())


@given(st.lists(st.tuples(st.sampled_from("abcdef"), NUMBERS), max_size=60), st.booleans())
def test_group_add_and_group_pick_merge_as_the_reference(pairs, largest) -> None:
    keys = [key for key, _ in pairs]
    values = [value for _, value in pairs]
    compiled: dict[str, Any] = {"a": 3}
    reference: dict[str, Any] = {"a": 3}
    NATIVE.group_add(compiled, keys, values)
    group_add(reference, keys, values)
    assert repr(compiled) == repr(reference)
    compiled, reference = {}, {}
    NATIVE.group_pick(compiled, keys, values, largest)
    for key, value in pairs:
        better = key in reference and (
            value > reference[key] if largest else value < reference[key]
        )
        if key not in reference or better:
            reference[key] = value
    assert repr(compiled) == repr(reference)


@given(st.integers(4, 16), st.lists(st.integers(0, 2**64 - 1), max_size=200))
def test_hll_registers_rise_as_the_reference_fold_raises_them(precision, hashes) -> None:
    from smr import agg

    aggregator = agg.approx_distinct(precision=precision)
    out: dict[str, Any] = {}
    aggregator.fold_fields("d", None, tuple(hashes), out)
    registers = bytearray(1 << precision)
    NATIVE.hll_add(registers, hashes, precision)
    assert bytes(registers) == out["d.hll"]
    assert agg.hll_estimate(registers) == out["d"]


def test_all_numbers_says_whether_a_sum_can_take_the_values() -> None:
    assert NATIVE.all_numbers([1, 2.5, True, -(2**80)])
    assert not NATIVE.all_numbers([1, "2"])


@contextmanager
def python_kernels() -> Iterator[None]:
    """checkpoint's hot loops on their Python references for the body of the block."""
    saved = (
        IN_FORCE.cut,
        IN_FORCE.group_add,
        IN_FORCE.fold_additive,
        IN_FORCE.drive_reduce,
        IN_FORCE.fold_turn,
        IN_FORCE.fold_turn_bodies,
    )
    IN_FORCE.cut, IN_FORCE.group_add = cut, group_add
    IN_FORCE.fold_additive, IN_FORCE.drive_reduce = kernels.fold_additive, None
    IN_FORCE.fold_turn = IN_FORCE.fold_turn_bodies = None
    try:
        yield
    finally:
        (
            IN_FORCE.cut,
            IN_FORCE.group_add,
            IN_FORCE.fold_additive,
            IN_FORCE.drive_reduce,
            IN_FORCE.fold_turn,
            IN_FORCE.fold_turn_bodies,
        ) = saved


BATCH_ROWS = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.integers(1, 12),
        st.sampled_from(["a", "b", "c", 7]),
        st.one_of(st.integers(-5, 5), st.just(2**63), st.floats(-1, 1)),
    ),
    max_size=25,
)


def state_of(store: StateStore) -> Any:
    return repr(
        (
            sorted(map(repr, store.items())),
            sorted((m, repr(dict(store.hwms_of(m)))) for m in ("m1", "m2")),
        )
    )


def drive(
    turns: list[list[tuple[str, list]]],
    fold: Any,
    per_tuple: bool,
    outcomes: list[Any] | None = None,
) -> StateStore:
    """Apply the turns (each a list of (mapper, rows)) to a store seeded with a master
    fragment, with checkpoint swaps and merges between turns; the per-tuple reduce or the folds."""
    store = StateStore()
    store.apply_delta(
        Delta(states={1: {"a": {"n": 10}}, 2: {"b": {"n": None}}, 3: {"c": {"x": 1}}}, hwms={})
    )
    for turn in turns:
        batches = []
        for mapper, rows in turn:
            slots, seqs, keys, values = (list(column) for column in zip(*rows, strict=True))
            batches.append((mapper, slots, seqs, keys, values))
        if per_tuple:
            reduce_fn = fold if outcomes is not None else (lambda k, v, s: fold(k, v, s, None))
            for batch in batches:
                outcome = store.apply_batch(*batch, reduce_fn)
                if outcomes is not None:
                    examples = [(k, repr(e)) for k, e in outcome.failures]
                    outcomes.append((outcome.applied, outcome.duplicates, outcome.failed, examples))
        else:
            apply_folds(store, batches, fold)
        # A checkpoint swap, its merge a turn later: an inactive fragment lives between.
        if store.inactive:
            store.merge_inactive()
        else:
            store.swap()
    return store


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(["m1", "m2"]), BATCH_ROWS.filter(bool)), max_size=3),
        max_size=4,
    ),
    st.booleans(),
)
def test_folds_and_per_tuple_apply_leave_the_reference_state(turns, per_tuple) -> None:
    fold = agg.fields(n=agg.sum())
    compiled = drive(turns, fold, per_tuple)
    with python_kernels():
        reference = drive(turns, fold, per_tuple)
    assert state_of(compiled) == state_of(reference)


@settings(max_examples=200)
@given(
    st.sampled_from(["sum", "min", "max", "count", "mean"]),
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", 3]),
            st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.booleans()),
        ),
        max_size=40,
    ),
)
def test_the_mapper_side_combine_gives_the_reference_partials(kind, pairs) -> None:
    aggregation = agg.fields(v=getattr(agg, kind)())
    keys = [key for key, _ in pairs]
    values = [value for _, value in pairs]
    compiled = aggregation.lift_many(keys, values)
    aggregation._compiled_combine = None  # the reference: lift and merge in Python
    assert repr(aggregation.lift_many(keys, values)) == repr(compiled)


def test_the_mapper_side_combine_refuses_what_the_reference_refuses() -> None:
    with pytest.raises(agg.AggregateError, match="sum\\(\\) takes numbers"):
        agg.fields(v=agg.sum()).lift_many(["a", "b"], [1, "x"])


def untidy_reduce(key: Any, value: Any, state: dict[str, Any]) -> None:
    """A reduce that does what reducers do: adds, fails, deletes fields, keeps a list."""
    if isinstance(value, float) and value < -0.5:
        raise ValueError(f"negative {value}")
    state["n"] = state.get("n", 0) + value
    if value == 3:
        del state["n"]
    if value == 2:
        state["seen"] = [*state.get("seen", []), key]
    if value == -5:
        state.clear()


class Interrupt(BaseException):
    """Not an Exception: it ends the batch (as a KeyboardInterrupt would)."""


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from(["m1", "m2"]), BATCH_ROWS.filter(bool)), max_size=3),
        max_size=4,
    ),
)
def test_the_compiled_driver_leaves_the_reference_state_and_failures(turns) -> None:
    failures: dict[bool, list[Any]] = {True: [], False: []}

    def run(compiled: bool) -> StateStore:
        def reduce_fn(key: Any, value: Any, state: dict[str, Any]) -> None:
            untidy_reduce(key, value, state)

        store = drive(turns, reduce_fn, per_tuple=True, outcomes=failures[compiled])
        return store

    compiled = run(True)
    with python_kernels():
        reference = run(False)
    assert state_of(compiled) == state_of(reference)
    assert failures[True] == failures[False]


def test_an_interrupt_out_of_the_compiled_driver_leaves_the_tuples_after_it_unconsumed() -> None:
    def reduce_fn(key: Any, value: Any, state: dict[str, Any]) -> None:
        if value == 9:
            raise Interrupt
        state["n"] = state.get("n", 0) + value

    for kernels_in_force in (nullcontext, python_kernels):
        store = StateStore()
        with kernels_in_force(), pytest.raises(Interrupt):
            store.apply_batch("m", [0, 0, 0], [1, 2, 3], ["a", "a", "a"], [1, 9, 1], reduce_fn)
        assert dict(store.hwms_of("m")) == {0: 2}
        assert list(store.items()) == [(0, "a", {"n": 1})]


SLOT_OF_KEY = {"a": 1, "b": 2, "c": 3, "d": 0, 7: 1}  # a key lives in one slot
INT_ROWS = st.lists(
    st.tuples(st.sampled_from(list(SLOT_OF_KEY)), st.integers(1, 12), st.integers(-5, 5)).map(
        lambda row: (SLOT_OF_KEY[row[0]], row[1], row[0], row[2])
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(st.tuples(st.sampled_from(["m1", "m2"]), INT_ROWS), max_size=3), max_size=4),
    st.booleans(),
)
def test_new_keys_folded_in_bulk_reach_the_state_of_the_per_tuple_path(turns, compiled) -> None:
    """A count's or a sum's new keys skip the general fold in bulk (new_keys_take_partial):
    the state is the one tuple-by-tuple application of the same reduce reaches."""
    fold = agg.fields(n=agg.sum())
    with nullcontext() if compiled else python_kernels():
        bulk = drive(turns, fold, per_tuple=False)
        per_tuple = drive(turns, fold, per_tuple=True)
    assert state_of(bulk) == state_of(per_tuple)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(st.tuples(st.sampled_from(["m1", "m2"]), INT_ROWS), max_size=3), max_size=4)
)
def test_a_turn_folded_in_one_compiled_call_counts_and_names_the_reference_failures(turns) -> None:
    """Keys whose state a sum cannot take (a str, a None) are left by ``fold_turn`` to the
    general fold, which fails them: the same tuples counted applied, duplicate and failed,
    the same examples, the same state and marks as on the Python path."""

    def run() -> Any:
        store = StateStore()
        store.apply_delta(Delta(states={1: {"a": {"n": "x"}}, 2: {"b": {"n": None}}}, hwms={}))
        seen = []
        for turn in turns:
            batches = [
                (mapper, *(list(column) for column in zip(*rows, strict=True)))
                for mapper, rows in turn
            ]
            outcome = apply_folds(store, batches, agg.fields(n=agg.sum()))
            examples = [(key, repr(error)) for key, error in outcome.failures]
            seen.append((outcome.applied, outcome.duplicates, outcome.failed, examples))
            if store.inactive:
                store.merge_inactive()
            else:
                seen.append(repr(store.swap().hwms))
        return seen, state_of(store)

    compiled = run()
    with python_kernels():
        reference = run()
    assert compiled == reference
