"""Specification of the delta wire format: exact round trips, and only ``DeltaError`` on bad input.

``decode_delta`` is fed untrusted network bytes: whatever they are, it returns a valid
``Delta`` or raises ``DeltaError``, never anything else.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr.checkpoint.delta import (
    DELTA_FORMAT_VERSION,
    EXT_NESTING_MAX,
    TOMBSTONE,
    WITHOUT_WATERMARKS_VERSION,
    Delta,
    DeltaError,
    decode_delta,
    encode_delta,
)
from smr.checkpoint.delta_parts import split_delta
from smr.checkpoint.ids import MapperId, Seq
from smr.checkpoint.store import StateStore
from smr.checkpoint.watermarks import MapperStanding, WatermarkRecord
from smr.ring.ids import Slot

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
hashables = st.recursive(
    scalars, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=6
)
field_values = st.recursive(
    scalars | st.builds(bytearray, st.binary(max_size=4)),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3) | st.integers(-(2**63), 2**64 - 1), inner, max_size=3)
        | st.sets(hashables, max_size=3)
        | st.frozensets(hashables, max_size=3)
    ),
    max_leaves=10,
)
keys = st.text(max_size=6) | st.integers(-(2**63), 2**64 - 1)
slots = st.integers(0, 2**14 - 1).map(Slot)
seqs = st.integers(0, 2**64 - 1).map(Seq)
watermark_ms = st.integers(-(2**63), 2**63 - 1)
watermark_records = st.builds(
    WatermarkRecord,
    watermark_ms,
    st.dictionaries(
        st.text(max_size=5).map(MapperId),
        st.builds(MapperStanding, watermark_ms, st.booleans(), st.booleans()),
        max_size=3,
    ),
)
deltas = st.builds(
    Delta,
    st.dictionaries(
        slots,
        st.dictionaries(
            keys,
            st.dictionaries(st.text(max_size=4), field_values | st.just(TOMBSTONE), max_size=3),
            max_size=3,
        ),
        max_size=3,
    ),
    st.dictionaries(
        slots, st.dictionaries(st.text(max_size=5).map(MapperId), seqs, max_size=3), max_size=3
    ),
    st.just({}),
    st.dictionaries(slots, watermark_records, max_size=3),
)


def exact(value: Any) -> Any:
    """A comparable form that tells apart the types ``==`` conflates (list and tuple, set and
    frozenset, bytes and bytearray, 1 and 1.0 and True)."""
    if isinstance(value, dict):
        return ("dict", sorted(((exact(k), exact(v)) for k, v in value.items()), key=repr))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [exact(item) for item in value])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted((exact(item) for item in value), key=repr))
    return (type(value).__name__, value)


@settings(max_examples=300, deadline=None)
@given(deltas)
def test_decoding_an_encoded_delta_gives_back_exactly_the_same_delta(delta: Delta) -> None:
    decoded = decode_delta(encode_delta(delta))
    assert decoded == delta
    assert exact(decoded.states) == exact(delta.states)
    assert exact(decoded.hwms) == exact(delta.hwms)
    assert exact(decoded.watermarks) == exact(delta.watermarks)


def test_a_tombstone_travels_as_extension_type_1_with_no_data() -> None:
    delta = Delta({Slot(3): {"k": {"gone": TOMBSTONE}}}, {})
    encoded = encode_delta(delta)
    expected = msgpack.packb(
        [WITHOUT_WATERMARKS_VERSION, {3: {"k": {"gone": msgpack.ExtType(1, b"")}}}, {}, {}]
    )
    assert encoded == expected
    assert decode_delta(encoded).states[Slot(3)]["k"]["gone"] is TOMBSTONE


def test_the_version_comes_first_and_any_other_version_is_refused() -> None:
    encoded = encode_delta(Delta({}, {}, watermarks={Slot(0): WatermarkRecord(5, {})}))
    assert msgpack.unpackb(encoded, strict_map_key=False)[0] == DELTA_FORMAT_VERSION == 3
    for version in (0, 4, -1, "1", 1.0, True, None):
        with pytest.raises(DeltaError, match="version"):
            decode_delta(msgpack.packb([version, {}, {}, {}]))
    # A newer version is refused for its version even when its body is unreadable to us.
    with pytest.raises(DeltaError, match="version 4"):
        decode_delta(msgpack.packb([4, msgpack.ExtType(99, b"?"), [1, 2], "more"]))
    with pytest.raises(DeltaError, match="got \\[\\]"):
        decode_delta(msgpack.packb([]))


def test_retired_mappers_round_trip_and_a_version_1_delta_is_still_read() -> None:
    delta = Delta({}, {Slot(2): {MapperId("a"): Seq(4)}}, {MapperId("done"): Seq(99)})
    assert decode_delta(encode_delta(delta)) == delta
    old = decode_delta(msgpack.packb([1, {5: {"k": {"n": 1}}}, {5: {"m": 3}}]))
    assert old == Delta({Slot(5): {"k": {"n": 1}}}, {Slot(5): {MapperId("m"): Seq(3)}}, {})


def test_watermarks_travel_in_version_3_and_a_delta_without_them_is_version_2_as_before() -> None:
    """A windowed job's slot watermarks round-trip, the ends of time included; a delta
    without them is the very bytes version 2 wrote, which an older node reads."""
    records = {
        Slot(1): WatermarkRecord(-(2**63), {}),
        Slot(9): WatermarkRecord(
            2**63 - 1,
            {
                MapperId("a"): MapperStanding(-5, False, True),
                MapperId("b"): MapperStanding(7, True, False),
            },
        ),
    }
    delta = Delta({Slot(1): {"k": {"n": 1}}}, {Slot(1): {MapperId("a"): Seq(3)}}, {}, records)
    encoded = encode_delta(delta)
    assert msgpack.unpackb(encoded, strict_map_key=False)[0] == 3
    assert decode_delta(encoded) == delta
    assert decode_delta(encoded).watermarks[Slot(9)].mappers[MapperId("b")] == (7, True, False)
    plain = Delta({Slot(1): {"k": {"n": 1}}}, {Slot(1): {MapperId("a"): Seq(3)}})
    assert encode_delta(plain) == msgpack.packb([2, {1: {"k": {"n": 1}}}, {1: {"a": 3}}, {}])
    assert decode_delta(encode_delta(plain)).watermarks == {}


def test_an_oversize_delta_is_refused_before_it_is_decoded() -> None:
    encoded = encode_delta(Delta({Slot(0): {"k": {"blob": b"x" * 1000}}}, {}))
    with pytest.raises(DeltaError, match="exceeds the cap"):
        decode_delta(encoded, max_bytes=len(encoded) - 1)
    assert decode_delta(encoded, max_bytes=len(encoded)).key_count() == 1


def test_every_truncation_of_a_valid_delta_is_refused() -> None:
    delta = Delta(
        {Slot(1): {"k": {"a": 1, "l": [1, (2, "x")], "gone": TOMBSTONE}, 7: {"s": {3}}}},
        {Slot(1): {MapperId("m"): Seq(12)}},
    )
    encoded = encode_delta(delta)
    for length in range(len(encoded)):
        with pytest.raises(DeltaError):
            decode_delta(encoded[:length])


def test_trailing_bytes_after_a_delta_are_refused() -> None:
    with pytest.raises(DeltaError, match="trailing"):
        decode_delta(encode_delta(Delta({}, {})) + b"\x00")


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ([1, {}], "got 2"),
        ([2, {}, {}], "of 4 items, got 3"),
        ([2, {}, {}, []], "retired mappers must be a map"),
        ([2, {}, {}, {7: 1}], "retired mapper id 7 must be str"),
        ([2, {}, {}, {"m": -1}], "last seq of retired mapper 'm'"),
        ({"version": 1}, "array"),
        ([1, [], {}], "states must be a map"),
        ([1, {}, []], "hwms must be a map"),
        ([1, {-1: {}}, {}], "slot must be a non-negative int"),
        ([1, {"0": {}}, {}], "slot must be a non-negative int"),
        ([1, {True: {}}, {}], "slot must be a non-negative int"),
        ([1, {0: []}, {}], "state of slot 0 must be a map"),
        ([1, {0: {1.5: {}}}, {}], "must be str or int"),
        ([1, {0: {b"k": {}}}, {}], "must be str or int"),
        ([1, {0: {(1, 2): {}}}, {}], "must be str or int"),
        ([1, {0: {"k": 3}}, {}], "must be a map"),
        ([1, {0: {"k": {1: 2}}}, {}], "field 1 of key 'k' in slot 0 must be str"),
        ([1, {}, {0: {"m": -1}}], "seq of mapper 'm' in slot 0"),
        ([1, {}, {0: {"m": 1.0}}], "seq of mapper"),
        ([1, {}, {0: {"m": False}}], "seq of mapper"),
        ([1, {}, {0: {7: 1}}], "mapper id 7 in slot 0 must be str"),
        ([1, {}, {0: [1]}], "hwm vector of slot 0 must be a map"),
        ([1, {}, {"x": {}}], "slot must be a non-negative int"),
        ([1, {0: {"k": {"f": msgpack.ExtType(1, b"x")}}}, {}], "tombstone carries no data"),
        ([1, {0: {"k": {"f": msgpack.ExtType(42, b"")}}}, {}], "unknown extension type 42"),
        ([1, {0: {"k": {"f": msgpack.ExtType(2, msgpack.packb(5))}}}, {}], "must hold an array"),
        ([1, {0: {"k": {"f": msgpack.ExtType(2, b"\xc1")}}}, {}], "malformed"),
        ([1, {0: {"k": {"f": msgpack.ExtType(3, msgpack.packb([{}]))}}}, {}], "malformed"),
        ([3, {}, {}, {}], "of 5 items, got 4"),
        ([3, {}, {}, {}, []], "watermarks must be a map"),
        ([3, {}, {}, {}, {-1: [0, {}]}], "slot must be a non-negative int"),
        ([3, {}, {}, {}, {0: [0]}], "watermark of slot 0 must be"),
        ([3, {}, {}, {}, {0: [0, []]}], "watermark of slot 0 must be"),
        ([3, {}, {}, {}, {0: [1.5, {}]}], "watermark of slot 0 must be a 64-bit int"),
        ([3, {}, {}, {}, {0: [True, {}]}], "watermark of slot 0 must be a 64-bit int"),
        ([3, {}, {}, {}, {0: [2**63, {}]}], "watermark of slot 0 must be a 64-bit int"),
        ([3, {}, {}, {}, {0: [0, {7: [0, False, False]}]}], "mapper id 7 of slot 0"),
        ([3, {}, {}, {}, {0: [0, {"m": [0, False]}]}], "mapper 'm' of slot 0's watermark must"),
        ([3, {}, {}, {}, {0: [0, {"m": [0, 1, False]}]}], "mapper 'm' of slot 0's watermark"),
        ([3, {}, {}, {}, {0: [0, {"m": [0, False, 0]}]}], "mapper 'm' of slot 0's watermark"),
        ([3, {}, {}, {}, {0: [0, {"m": ["x", True, True]}]}], "watermark of mapper 'm' in slot"),
    ],
)
def test_a_malformed_structure_is_refused_with_a_clear_message(body: Any, complaint: str) -> None:
    with pytest.raises(DeltaError, match=complaint):
        decode_delta(msgpack.packb(body))


def test_nesting_too_deep_is_refused() -> None:
    deep_arrays = b"\x93\x01\x81\x00" + b"\x91" * 100_000 + b"\xc0"
    with pytest.raises(DeltaError):
        decode_delta(deep_arrays)
    nested: bytes = msgpack.packb([])
    for _ in range(5000):
        nested = msgpack.packb(msgpack.ExtType(2, msgpack.packb([msgpack.ExtType(2, nested)])))
    with pytest.raises(DeltaError):
        decode_delta(msgpack.packb([1, {0: {"k": {"f": msgpack.ExtType(2, nested)}}}, {}]))


def test_values_nest_lists_up_to_the_limit_and_no_deeper_on_both_sides() -> None:
    def nested_list(depth: int) -> Any:
        value: Any = "leaf"
        for _ in range(depth):
            value = [value]
        return value

    deepest = Delta({Slot(0): {"k": {"f": nested_list(EXT_NESTING_MAX)}}}, {})
    assert decode_delta(encode_delta(deepest)) == deepest
    too_deep = Delta({Slot(0): {"k": {"f": nested_list(EXT_NESTING_MAX + 1)}}}, {})
    with pytest.raises(DeltaError, match="deeper than"):
        encode_delta(too_deep)


def test_input_that_is_not_bytes_is_refused() -> None:
    with pytest.raises(DeltaError, match="must be bytes"):
        decode_delta("not bytes")  # type: ignore[arg-type]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_give_a_valid_delta_or_delta_error(data: bytes) -> None:
    _decode_or_refuse(data)


@settings(max_examples=300, deadline=None)
@given(deltas, st.data())
def test_corrupted_encodings_give_a_valid_delta_or_delta_error(
    delta: Delta, data: st.DataObject
) -> None:
    encoded = bytearray(encode_delta(delta))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(encoded) - 1))
        encoded[position] = data.draw(st.integers(0, 255))
    _decode_or_refuse(bytes(encoded))


def _decode_or_refuse(data: bytes) -> None:
    try:
        delta = decode_delta(data)
    except DeltaError:
        return
    # Accepted: then it must be well-formed all the way down.
    for slot, keys in delta.states.items():
        assert type(slot) is int and slot >= 0
        for key, fields in keys.items():
            assert isinstance(key, (str, int))
            assert all(type(name) is str for name in fields)
    for slot, vector in delta.hwms.items():
        assert type(slot) is int and slot >= 0
        assert all(type(m) is str and type(s) is int and s >= 0 for m, s in vector.items())
    for slot, record in delta.watermarks.items():
        assert type(slot) is int and slot >= 0 and type(record.current_ms) is int
        assert all(
            type(m) is str and type(s.watermark_ms) is int for m, s in record.mappers.items()
        )


def test_encoding_a_value_msgpack_cannot_carry_names_its_place() -> None:
    delta = Delta({Slot(2): {"word": {"ok": 1, "bad": object()}}}, {})
    with pytest.raises(DeltaError, match="field 'bad' of key 'word' in slot 2"):
        encode_delta(delta)
    with pytest.raises(DeltaError, match="field 'big'"):
        encode_delta(Delta({Slot(2): {"word": {"big": 2**64}}}, {}))


def test_the_tombstone_is_a_singleton_through_copy_and_pickle() -> None:
    assert copy.copy(TOMBSTONE) is TOMBSTONE
    assert copy.deepcopy([TOMBSTONE])[0] is TOMBSTONE
    assert pickle.loads(pickle.dumps(TOMBSTONE)) is TOMBSTONE
    assert type(TOMBSTONE)() is TOMBSTONE
    assert repr(TOMBSTONE) == "TOMBSTONE"


def test_delta_counts_keys_and_knows_when_it_is_empty() -> None:
    assert Delta({}, {}).is_empty()
    assert not Delta({}, {Slot(0): {MapperId("m"): Seq(1)}}).is_empty()
    delta = Delta({Slot(0): {"a": {"x": 1}, "b": {"x": TOMBSTONE}}, Slot(1): {"c": {}}}, {})
    assert delta.key_count() == 3


@given(
    deltas, st.dictionaries(st.text(max_size=3).map(MapperId), seqs, max_size=2), st.integers(1, 5)
)
def test_a_delta_split_into_parts_applies_as_the_whole_and_keeps_each_slot_whole(
    delta: Delta, retired: dict[MapperId, Seq], keys_per_part: int
) -> None:
    """Every slot in exactly one part with its states, its hwm vector and its watermark; the
    retired mappers in the last part only; the parts applied in order give what the whole
    gives."""
    delta = Delta(delta.states, delta.hwms, retired, delta.watermarks)
    parts = list(split_delta(delta, keys_per_part))
    assert parts and [last for _, last in parts] == [False] * (len(parts) - 1) + [True]
    seen: list[int] = []
    for part, last in parts:
        slots_of_part = part.slots()
        seen.extend(slots_of_part)
        for slot in slots_of_part:
            assert part.states.get(slot) == delta.states.get(slot)
            assert part.hwms.get(slot) == delta.hwms.get(slot)
            assert part.watermarks.get(slot) == delta.watermarks.get(slot)
        assert part.retired == (retired if last else {})
        if not last:
            assert part.key_count() + len(slots_of_part) >= keys_per_part
    assert sorted(seen) == sorted(delta.slots())
    whole, in_parts = StateStore(), StateStore()
    whole.apply_delta(decode_delta(encode_delta(delta)))
    for part, _ in parts:
        in_parts.apply_delta(decode_delta(encode_delta(part)))
    assert in_parts.snapshot(in_parts.slots() | whole.slots()) == whole.snapshot(
        in_parts.slots() | whole.slots()
    )


def test_split_delta_refuses_a_part_size_below_one() -> None:
    with pytest.raises(ValueError, match="keys_per_part must be >= 1"):
        next(split_delta(Delta(states={}, hwms={}), 0))
