"""The wire protocol: round trips, and every kind of bad input ends in FrameError only."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint.ids import MapperId
from smr.protocol import (
    PROTOCOL_VERSION,
    FrameError,
    Kind,
    StreamId,
    batch_header,
    decode,
    decode_batch_body,
    decode_batch_ids,
    encode,
    encode_batch_body,
)

SLOT_COUNT = 1 << 14


def test_batch_round_trip_keeps_every_column() -> None:
    frames = encode(
        Kind.BATCH,
        batch_header(StreamId("s1"), MapperId("m1"), 7, 3, 1, 3),
        encode_batch_body(
            [1, 2, 16383], [1, 1, 5], ["a", 7, "c"], [1, {"x": 1}, [1, 2]], [1.5, 2.5, 3.5]
        ),
    )
    message = decode(frames)
    assert message.kind == Kind.BATCH
    assert message.header == {
        "v": PROTOCOL_VERSION,
        "stream": "s1",
        "mapper": "m1",
        "chan": 7,
        "base": 3,
        "epoch": 1,
        "n": 3,
    }
    batch = decode_batch_body(message.body, 3, SLOT_COUNT)
    assert list(batch.slots) == [1, 2, 16383]
    assert list(batch.seqs) == [1, 1, 5]
    assert list(batch.keys) == ["a", 7, "c"]
    assert batch.values == (1, {"x": 1}, (1, 2))
    assert list(batch.ts) == [1.5, 2.5, 3.5]


@given(st.lists(st.binary(max_size=64), max_size=5))
def test_random_frames_raise_frame_error_only(frames: list[bytes]) -> None:
    with contextlib.suppress(FrameError):
        decode(frames)


@given(st.binary(max_size=512), st.integers(0, 50))
def test_random_batch_bodies_raise_frame_error_only(body: bytes, n: int) -> None:
    with contextlib.suppress(FrameError):
        decode_batch_body(body, n, SLOT_COUNT)


def test_every_truncation_of_a_valid_message_is_refused() -> None:
    body = encode_batch_body([1, 2], [1, 2], ["a", "b"], [1, 1], [0.0, 0.0])
    (frame,) = encode(Kind.BATCH, batch_header(StreamId("s"), MapperId("m"), 1, 1, 1, 2), body)
    for cut in range(len(frame) - len(body)):
        with pytest.raises(FrameError):
            decode([frame[:cut]])
    for cut in range(len(body)):
        with pytest.raises(FrameError):
            decode_batch_body(body[:cut], 2, SLOT_COUNT)


def test_oversize_message_is_refused_before_decoding() -> None:
    frames = encode(Kind.PING, {"req": 1}, b"x" * 2000)
    with pytest.raises(FrameError, match="exceeds the cap"):
        decode(frames, frame_bytes_max=1000)


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ({"v": 99, "req": 1}, "protocol version"),
        ({"req": 1}, "protocol version"),
        ({"v": PROTOCOL_VERSION}, "req"),
        ({"v": PROTOCOL_VERSION, "req": "1"}, "req"),
        ({"v": PROTOCOL_VERSION, "req": True}, "req"),
        ({"v": PROTOCOL_VERSION, "req": -1}, "negative"),
    ],
)
def test_bad_headers_are_refused_with_the_reason(header: dict[str, object], reason: str) -> None:
    packed = msgpack.packb(header)
    frame = bytes([Kind.PING]) + len(packed).to_bytes(4, "big") + packed
    with pytest.raises(FrameError, match=reason):
        decode([frame])


def test_unknown_kind_and_wrong_frame_count_are_refused() -> None:
    packed = msgpack.packb({"v": PROTOCOL_VERSION})
    with pytest.raises(FrameError, match="unknown message kind"):
        decode([b"\xff" + len(packed).to_bytes(4, "big") + packed])
    with pytest.raises(FrameError, match="expected a message of 1 frame"):
        decode([b"\x01", b""])
    with pytest.raises(FrameError, match="header runs past the end"):
        decode([b"\x0a\x00\x00\x10\x00" + packed])


@pytest.mark.parametrize(
    ("columns", "reason"),
    [
        (([70000], [1], ["a"], [1], [0.0]), "out of range"),
        (([1], [0], ["a"], [1], [0.0]), "start at 1"),
        (([1], [1], [1.5], [1], [0.0]), "keys must be str or int"),
        (([1], [1], [b"a"], [1], [0.0]), "keys must be str or int"),
    ],
)
def test_batch_body_validation_names_the_problem(columns: tuple, reason: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(FrameError, match=reason):
        decode_batch_body(encode_batch_body(*columns), 1, SLOT_COUNT)


@pytest.mark.parametrize("announced", [0, 1, 3, 100])
def test_batch_body_with_a_wrong_count_is_refused(announced: int) -> None:
    body = encode_batch_body([1, 2], [1, 1], ["a", "b"], [1, 1], [0.0, 0.0])
    with pytest.raises(FrameError):
        decode_batch_body(body, announced, SLOT_COUNT)


def test_ids_are_read_without_decoding_keys_and_values() -> None:
    body = encode_batch_body([5, 9, 5], [1, 1, 2], ["a", "b", "a"], [1, 1, 1], [0.0] * 3)
    slots, seqs = decode_batch_ids(body[:36], 3, SLOT_COUNT)
    assert list(slots) == [5, 9, 5] and list(seqs) == [1, 1, 2]
