"""User values are checked where they enter: at emit (key, value, size) and after reduce
(the state). Whatever Python value comes, nothing crashes, every rejected value is refused
with the checker's own error and counted, and every accepted value round-trips."""

from __future__ import annotations

import datetime
import decimal
import math
from collections import OrderedDict, deque
from enum import IntEnum
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smr.api import Job
from smr.checkpoint.delta import decode_delta, encode_delta
from smr.checkpoint.ids import MapperId
from smr.checkpoint.store import StateStore
from smr.mapper.emitter import Emitter
from smr.node.reducer import Reducer
from smr.output.files import OutputSink
from smr.ring.ids import NodeId, Token
from smr.ring.view import Member, Status, View
from smr.values import EmitError, StateValueError, check_state, row_bytes
from smr.wire.batch_body import decode_batch_body
from smr.wire.codec import pack_body, unpack_body
from tests.smr.links import AckingTransport

SLOT_BITS = 6
BATCH_BYTES = 64 * 1024


class Colour(IntEnum):
    RED = 1


class Opaque:
    def __repr__(self) -> str:
        raise RuntimeError("a repr that raises")


# Every kind of Python value a map or a reduce might produce: scalars of every type (ints
# past 64 bits, NaN, text with lone surrogates), containers msgpack knows and those it does
# not, and objects of other types.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=12),
    st.binary(max_size=12),
    st.binary(max_size=12).map(bytearray),
    st.complex_numbers(allow_nan=False),
    st.decimals(allow_nan=False),
    st.builds(Opaque),
    st.sampled_from(
        [
            Colour.RED,
            datetime.date(2024, 1, 1),
            object(),
            Ellipsis,
            int,
            deque([1]),
            OrderedDict(a=1),
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.frozensets(st.integers(-5, 5) | st.text(max_size=3), max_size=4),
        st.sets(st.integers(-5, 5), max_size=4),
        st.dictionaries(st.text(max_size=4) | st.integers(-5, 5), inner, max_size=4),
    ),
    max_leaves=12,
)


def _normal(value: Any) -> Any:
    """What a value looks like after msgpack (arrays as tuples, bytes for bytearray, an int
    for an IntEnum), with NaN replaced so that equality means "the same value"."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    if isinstance(value, dict):
        return {_normal(k): _normal(v) for k, v in value.items()}
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    return value


def _emitter(transport: AckingTransport) -> Emitter:
    view = View([Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1)])
    return Emitter(
        view, SLOT_BITS, MapperId("m"), batch_size=7, batch_bytes=BATCH_BYTES, transport=transport
    )


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(values, values), max_size=12))
def test_every_emit_is_sent_and_round_trips_or_is_refused_with_nothing_sent(
    pairs: list[tuple[Any, Any]],
) -> None:
    transport = AckingTransport()
    emitter = _emitter(transport)
    accepted: list[tuple[Any, Any]] = []
    refused = 0
    for key, value in pairs:
        before = emitter.tuples_emitted
        try:
            emitter.emit(key, value)
        except EmitError as error:
            refused += 1
            assert str(error)
            assert emitter.tuples_emitted == before
            continue
        accepted.append((key, value))
    emitter.close()
    assert refused + len(accepted) == len(pairs)
    assert emitter.tuples_acked == len(accepted)
    sent = []
    for count, body in transport.bodies:
        columns = decode_batch_body(body, count, 1 << SLOT_BITS)
        sent.extend(zip(columns.keys, columns.values, strict=True))
    # One mapper, one node: the tuples of each key arrive in emit order.
    for key in {k for k, _ in accepted}:
        assert [_normal(v) for k, v in sent if k == key] == [
            _normal(v) for k, v in accepted if k == key
        ]
    assert len(sent) == len(accepted)


@given(values, values)
def test_emit_check_refuses_with_its_own_error_or_gives_a_size_bound(key: Any, value: Any) -> None:
    try:
        size = row_bytes(key, value, BATCH_BYTES)
    except EmitError:
        assert not (type(key) in (str, int) and _packs(key) and _packs(value))
        return
    assert type(key) in (str, int)
    assert 20 + len(msgpack.packb(key)) + len(msgpack.packb(value)) <= size <= BATCH_BYTES


def _packs(value: Any) -> bool:
    try:
        msgpack.unpackb(msgpack.packb(value), strict_map_key=False)
    except Exception:
        return False
    return True


@pytest.mark.parametrize(
    "key",
    [(1, 2), None, 1.5, b"k", True, False, 2**64, -(2**63) - 1, "\ud800", Colour.RED],
)
def test_keys_other_than_str_and_int_in_range_are_refused_naming_the_key(key: Any) -> None:
    with pytest.raises(EmitError, match="key"):
        row_bytes(key, 1, BATCH_BYTES)


@pytest.mark.parametrize("value", [{1}, frozenset(), 2**64, "\udc80", object(), 1j])
def test_values_msgpack_cannot_carry_are_refused_naming_the_type(value: Any) -> None:
    with pytest.raises(EmitError, match="value"):
        row_bytes("k", value, BATCH_BYTES)


def test_a_tuple_over_the_batch_budget_is_refused_naming_the_flag() -> None:
    with pytest.raises(EmitError, match="--batch-bytes"):
        row_bytes("k", "x" * BATCH_BYTES, BATCH_BYTES)


field_names = st.one_of(
    st.text(st.characters(codec=None, exclude_categories=()), max_size=6),
    st.integers(-3, 3),
    st.none(),
    st.binary(max_size=3),
)


@pytest.mark.slow  # 400 examples, about 10 s
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(field_names, values, max_size=4), max_size=8))
def test_every_state_reduce_leaves_is_stored_and_round_trips_or_is_a_counted_failure(
    tmp_path_factory: Any, states: list[dict[Any, Any]]
) -> None:
    def reduce(key: Any, index: int, state: dict[str, Any], emit: Any) -> None:
        state.clear()
        state.update(states[index])

    job = Job("values", map=lambda record, emit: None, reduce=reduce)
    out: Path = tmp_path_factory.mktemp("out") / "a.jsonl"
    reducer = Reducer(job, OutputSink("a", out, lambda frames: None), lambda: 0.0)
    store = StateStore()
    keys = [f"k{i}" for i in range(len(states))]
    outcome = store.apply_batch(
        MapperId("m"),
        [0] * len(states),
        list(range(1, len(states) + 1)),
        keys,
        list(range(len(states))),
        reducer.reduce_fn,
    )
    accepted = []
    for key, state in zip(keys, states, strict=True):
        try:
            check_state(state)
        except StateValueError:
            assert store.get(0, key) is None  # rolled back
            continue
        accepted.append(key)
        assert _normal(store.read(0, key)) == _normal({k: v for k, v in state.items()})
    assert outcome.failed == len(states) - len(accepted)
    assert all(isinstance(error, StateValueError) for _, error in outcome.failures)
    # Whatever was accepted checkpoints and reads back.
    delta = store.swap()
    decoded = decode_delta(encode_delta(delta))
    for key in accepted:
        fields = decoded.states.get(0, {}).get(key, {})
        assert _normal(fields) == _normal(store.read(0, key))
        assert _normal(unpack_body(pack_body(store.read(0, key)))) == _normal(fields)


def _nested_lists(depth: int) -> list[Any]:
    value: list[Any] = [1]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "state",
    [
        {"seen": {1, 2}},
        {"seen": frozenset()},
        {"count": 2**64},
        {"name": "\ud800"},
        {"obj": object()},
        {1: "field name not a str"},
        {"deep": _nested_lists(40)},
    ],
)
def test_states_that_cannot_be_checkpointed_or_read_back_are_refused(
    state: dict[Any, Any],
) -> None:
    with pytest.raises(StateValueError):
        check_state(state)


def test_plain_states_pass() -> None:
    check_state({"count": 3, "mean": 0.5, "name": "été", "raw": b"\x00", "none": None})
    check_state({"pairs": [(1, "a")], "by": {"x": [1.0]}, "buf": bytearray(b"ab")})


def test_decimal_is_refused_at_emit() -> None:
    with pytest.raises(EmitError):
        row_bytes("k", decimal.Decimal("1.5"), BATCH_BYTES)
