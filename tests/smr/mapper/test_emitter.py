"""The emitter: mapper switching (seqs restart from a base, only when drained), the check at
emit, and batches cut by bytes."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from smr.checkpoint.ids import MapperId
from smr.mapper.channels import encode_within
from smr.mapper.emitter import BATCH_BYTES_DEFAULT, SEQ_MAX, Emitter
from smr.ring.hashing import slot_of
from smr.ring.ids import Epoch, NodeId, Token
from smr.ring.view import Member, Status, View
from smr.values import EmitError
from smr.wire.codec import decode, encode
from smr.wire.messages import Ack, Batch
from tests.smr.links import AckingTransport, _AckingEnd

SLOT_BITS = 8


def _emitter() -> Emitter:
    view = View([Member(NodeId("a"), 1, "tcp://127.0.0.1:1", Token(0), "", Status.UP, 1)])
    # A batch size no test reaches: tuples stay open, so no socket is ever used.
    return Emitter(view, SLOT_BITS, MapperId("first"), batch_size=1_000_000)


def test_begin_mapper_gives_seqs_from_the_base_and_the_new_mapper_id() -> None:
    emitter = _emitter()
    emitter.begin_mapper(MapperId("q/3"), seq_base=7 << 32)
    emitter.emit("w", 1)
    emitter.emit("w", 1)
    (row_1, row_2) = emitter._batcher.open_rows(0)
    assert (row_1[0], row_1[1]) == (slot_of("w", SLOT_BITS), (7 << 32) + 1)
    assert row_2[1] == (7 << 32) + 2
    assert emitter.mapper_id == "q/3"


def test_begin_mapper_refuses_while_tuples_are_open() -> None:
    emitter = _emitter()
    emitter.emit("w", 1)
    with pytest.raises(RuntimeError, match="drain"):
        emitter.begin_mapper(MapperId("q/4"))
    assert emitter.mapper_id == "first"


@pytest.mark.parametrize("base", [-1, SEQ_MAX])
def test_begin_mapper_refuses_a_base_outside_the_seq_range(base: int) -> None:
    with pytest.raises(ValueError, match="seq_base"):
        _emitter().begin_mapper(MapperId("q/5"), seq_base=base)


def test_every_emitter_has_its_own_stream() -> None:
    assert _emitter().stream_id != _emitter().stream_id


def _acking_emitter(transport: AckingTransport, **options: Any) -> Emitter:
    view = View([Member(NodeId("a"), 1, "tcp://127.0.0.1:1", Token(0), "", Status.UP, 1)])
    return Emitter(view, SLOT_BITS, MapperId("m"), transport=transport, **options)


@pytest.mark.parametrize("combine", [None, lambda a, b: a + b])
def test_batches_are_cut_by_encoded_bytes_and_every_tuple_arrives(
    combine: Callable[[Any, Any], Any] | None,
) -> None:
    transport = AckingTransport()
    emitter = _acking_emitter(transport, combine=combine, batch_bytes=BATCH_BYTES_DEFAULT)
    record = "x" * 100_000
    for i in range(60):
        emitter.emit(f"k{i}", record)
    emitter.close()
    assert emitter.tuples_acked == 60
    assert len(transport.bodies) > 1
    assert max(len(body) for _, body in transport.bodies) <= BATCH_BYTES_DEFAULT
    assert sum(count for count, _ in transport.bodies) == 60


def test_a_bad_emit_raises_before_anything_is_emitted() -> None:
    transport = AckingTransport()
    emitter = _acking_emitter(transport)
    emitter.emit("w", 1)
    for key, value in [((1, 2), 1), (None, 1), (True, 1), ("w", {1}), ("w", 2**64)]:
        with pytest.raises(EmitError):
            emitter.emit(key, value)
    emitter.close()
    assert emitter.tuples_emitted == emitter.tuples_acked == 1


def test_rows_merged_by_a_reroute_are_split_into_bodies_within_twice_the_budget() -> None:
    rows = [(0, i + 1, "k", "x" * 1000, 0.0) for i in range(100)]
    parts = encode_within(rows, 10_000)
    assert [row for part, _ in parts for row in part] == rows
    assert all(len(body) <= 10_000 for _, body in parts)


def test_open_batches_go_at_the_first_emit_past_linger_ms_and_not_before() -> None:
    transport = AckingTransport()
    emitter = _acking_emitter(transport, linger_ms=30)
    emitter.emit("a", 1)
    emitter.emit("b", 1)
    assert transport.bodies == []
    time.sleep(0.05)
    emitter.emit("a", 1)  # past linger_ms since the first opened: everything open goes
    assert sum(count for count, _ in transport.bodies) == 3
    emitter.emit("c", 1)  # the first tuple of a new wait
    assert sum(count for count, _ in transport.bodies) == 3
    emitter.close()
    assert emitter.tuples_acked == emitter.tuples_sent == 4


def test_a_combining_emitter_never_closes_a_batch_by_time() -> None:
    # Combined rows take their seqs when their batch closes: time must not decide it.
    transport = AckingTransport()
    emitter = _acking_emitter(transport, combine=lambda a, b: a + b, linger_ms=1)
    emitter.emit("a", 1)
    time.sleep(0.01)
    emitter.emit("a", 1)
    emitter.emit("b", 1)
    assert transport.bodies == []
    emitter.close()
    assert sum(count for count, _ in transport.bodies) == 2


def test_without_linger_a_batch_waits_until_it_is_full_or_flushed() -> None:
    transport = AckingTransport()
    emitter = _acking_emitter(transport, linger_ms=None)
    emitter.emit("a", 1)
    time.sleep(0.03)
    emitter.emit("b", 1)
    assert transport.bodies == []
    emitter.flush()
    assert sum(count for count, _ in transport.bodies) == 2
    with pytest.raises(ValueError, match="linger_ms"):
        _acking_emitter(transport, linger_ms=-1)


def test_emit_many_checks_every_tuple_before_it_emits_any() -> None:
    transport = AckingTransport()
    emitter = _acking_emitter(transport)
    with pytest.raises(EmitError):
        emitter.emit_many(["a", "b", None], [1, 2, 3])
    with pytest.raises(ValueError, match="2 keys and 1 values"):
        emitter.emit_many(["a", "b"], [1])
    assert emitter.tuples_emitted == 0
    emitter.emit_many(["a", "b", "a"], [1, 2, 3])
    emitter.close()
    assert emitter.tuples_acked == 3


def test_a_combine_that_raises_is_a_bad_emit_not_a_crash() -> None:
    transport = AckingTransport()

    def fussy(a: Any, b: Any) -> Any:
        return a + b  # an int and a str: TypeError

    emitter = _acking_emitter(transport, combine=fussy)
    emitter.emit("a", 1)
    with pytest.raises(EmitError, match="combine raised TypeError"):
        emitter.emit("a", "x")
    emitter.close()
    assert emitter.tuples_emitted == emitter.tuples_acked == 1


class _SlowSecondEnd:
    """Node ``b``: its acks come one every other wait (node ``a`` acks at once, _AckingEnd)."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.held: list[list[bytes]] = []
        self.ready: list[list[bytes]] = []

    def send(self, frames: Sequence[bytes]) -> bool:
        message = decode(frames)
        assert isinstance(message, Batch)
        self.held.append(encode(Ack(message.stream, message.chan, Epoch(1))))
        return True

    def receive(self) -> list[bytes] | None:
        return self.ready.pop(0) if self.ready else None

    def close(self) -> None:
        pass


class _SlowSecondTransport:
    def __init__(self) -> None:
        self.ends: dict[str, Any] = {}
        self.waits = 0

    def open(self, addr: str, send_queue_messages_max: int) -> Any:
        end = _SlowSecondEnd(addr) if addr.endswith(":2") else _AckingEnd(addr, [])
        return self.ends.setdefault(addr, end)

    def wait_any(self, ends: Sequence[Any], timeout_ms: int) -> list[Any]:
        self.waits += 1
        for end in ends:
            if isinstance(end, _SlowSecondEnd) and end.held and self.waits % 2 == 0:
                end.ready.append(end.held.pop(0))
        return [
            end for end in ends if (end.ready if isinstance(end, _SlowSecondEnd) else end._replies)
        ]


def test_a_batch_counts_as_acked_once_and_only_when_every_node_of_its_set_acked() -> None:
    # Node a acks at once, b one wait later, and each window holds one batch: the emitter
    # reads a's ack of a batch while it waits for room on b's channel for the same batch.
    # The batch must not count as acked then (b has not even got it), nor twice after.
    view = View(
        [
            Member(NodeId("a"), 1, "tcp://127.0.0.1:1", Token(0), "", Status.UP, 1),
            Member(NodeId("b"), 1, "tcp://127.0.0.1:2", Token(128), "", Status.UP, 1),
        ]
    )
    acked_rows: list[Any] = []
    emitter = Emitter(
        view,
        SLOT_BITS,
        MapperId("m"),
        transport=_SlowSecondTransport(),
        replication=1,
        window_batches=1,
        batch_size=10,
        on_acked=acked_rows.extend,
    )
    keys = [f"k{i}" for i in range(2000) if slot_of(f"k{i}", SLOT_BITS) < 128][:200]
    for key in keys:
        emitter.emit(key, 1)
    emitter.close()
    assert emitter.tuples_sent == len(keys)
    assert emitter.tuples_acked == len(keys)
    assert sorted(row[1] for row in acked_rows) == list(range(1, len(keys) + 1))
