"""The wire protocol: round trips, and every kind of bad input ends in FrameError only."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smr.checkpoint.ids import CheckpointNumber, MapperId
from smr.ring.ids import Epoch, Incarnation, NodeId, Slot
from smr.wire.batch_body import decode_batch_body, decode_batch_ids, encode_batch_body
from smr.wire.codec import decode, encode, encode_raw, header_of
from smr.wire.kinds import (
    PROTOCOL_VERSION,
    ChannelNumber,
    FrameError,
    Kind,
    RequestId,
    SnapshotNumber,
    StreamId,
)
from smr.wire.messages import Batch, Error, Message, Ping, RecoverReply, RecoverRequest
from smr.wire.peer import BeatAck, Checkpoint, Heartbeat, SnapshotBegin, Suspect, Vouch
from smr.wire.reads import DumpReply, HistoryReply, HistoryRequest

SLOT_COUNT = 1 << 14


def _batch(chan: int, base: int, epoch: int, n: int, body: bytes) -> Batch:
    return Batch(
        StreamId("s1"),
        MapperId("m1"),
        ChannelNumber(chan),
        ChannelNumber(base),
        Epoch(epoch),
        "n1,n2",
        n,
        body,
    )


def test_batch_round_trip_keeps_every_field_and_column() -> None:
    body = encode_batch_body(
        [1, 2, 16383], [1, 1, 5], ["a", 7, "c"], [1, {"x": 1}, [1, 2]], [1.5, 2.5, 3.5]
    )
    message = decode(encode(_batch(7, 3, 1, 3, body)))
    assert message == _batch(7, 3, 1, 3, body)
    assert isinstance(message, Batch) and message.kind is Kind.BATCH
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
    (frame,) = encode(_batch(1, 1, 1, 2, body))
    for cut in range(len(frame) - len(body)):
        with pytest.raises(FrameError):
            decode([frame[:cut]])
    for cut in range(len(body)):
        with pytest.raises(FrameError):
            decode_batch_body(body[:cut], 2, SLOT_COUNT)


PEER = (NodeId("n1"), Incarnation(2), Epoch(9))
RECORDS: list[Message] = [
    Ping(RequestId(4)),
    Error(None, "no"),
    DumpReply(RequestId(1), None, None, b"page"),
    DumpReply(RequestId(1), Slot(17), None, b""),
    DumpReply(RequestId(1), Slot(17), Slot(40), b""),
    Checkpoint(*PEER, CheckpointNumber(3), 2, False, b"delta"),
    SnapshotBegin(*PEER, CheckpointNumber(3), SnapshotNumber(1), Slot(16), 32),
    RecoverRequest(RequestId(5)),
    RecoverReply(RequestId(5), 12),
    Heartbeat(
        *PEER,
        busy=True,
        stuck=False,
        stalled_ms=250,
        inbox_tuples=9,
        applied_per_s=7,
        cpu_percent=55,
        beat=12,
        body=b"view",
    ),
    BeatAck(*PEER, 12),
    Suspect(*PEER, NodeId("n0"), Incarnation(1), RequestId(6)),
    Vouch(*PEER, NodeId("n0"), RequestId(6)),
    HistoryRequest(RequestId(7), MapperId("ingest")),
    HistoryReply(RequestId(7), Slot(16), 32, slots=5, seq_max=900, last=None, lost=0),
    HistoryReply(RequestId(7), Slot(0), 0, slots=0, seq_max=0, last=1200, lost=3),
]


@pytest.mark.parametrize("message", RECORDS, ids=lambda m: type(m).__name__)
def test_every_record_round_trips(message: Message) -> None:
    assert decode(encode(message)) == message


def test_records_keep_the_wire_names_and_order_of_their_fields() -> None:
    """Typed records changed no byte on the wire: peer fields are "from", "inc", "epoch"
    first, a dump page's continuation is "next"."""
    checkpoint = Checkpoint(*PEER, CheckpointNumber(3), 2, False, b"delta")
    header = {"from": "n1", "inc": 2, "epoch": 9, "number": 3, "part": 2, "last": False}
    assert header_of(checkpoint) == header
    assert encode(checkpoint) == encode_raw(Kind.CHECKPOINT, header, b"delta")
    batch = _batch(7, 3, 1, 0, b"")
    expected = {
        "stream": "s1",
        "mapper": "m1",
        "chan": 7,
        "base": 3,
        "epoch": 1,
        "replicas": "n1,n2",
        "n": 0,
    }
    assert list(header_of(batch).items()) == list(expected.items())
    assert encode(batch) == encode_raw(Kind.BATCH, expected)
    assert header_of(DumpReply(RequestId(1), None, None, b"")) == {
        "req": 1,
        "next": None,
        "lost": None,
    }


def test_a_body_sent_with_a_kind_that_carries_none_is_ignored() -> None:
    assert decode(encode_raw(Kind.PING, {"req": 1}, b"stray")) == Ping(RequestId(1))


def test_oversize_message_is_refused_before_decoding() -> None:
    frames = encode_raw(Kind.PING, {"req": 1}, b"x" * 2000)
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
