"""The channels on their own: batches are numbered from 1 per channel; a batch is done once,
when every node of its set acked it; a window holds ``window_batches``; a re-route takes a
batch and every later one off every channel; a send the socket refuses holds back the later
batches until they are sent again; a pump reads every reply and counts its depth."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from smr.checkpoint.ids import MapperId
from smr.mapper.channels import Channel, Channels, DeliveryError, OutBatch, Row
from smr.ring.ids import Epoch, NodeId
from smr.wire.codec import decode, encode
from smr.wire.kinds import ChannelNumber
from smr.wire.messages import Ack, Batch
from tests.smr.links import RecordingTransport

EPOCH = Epoch(3)
N0, N1 = NodeId("n0"), NodeId("n1")


def _batch(*seqs: int, replica_set: tuple[NodeId, ...] = (N0,)) -> OutBatch:
    rows: list[Row] = [(0, seq, "k", 1, 0.0) for seq in seqs]
    batch = OutBatch(rows, b"body", replica_set)
    batch.waiting_for.update(replica_set)
    return batch


def _channels(
    transport: Any = None, acked: list[Sequence[Row]] | None = None
) -> tuple[Channels, Any]:
    transport = transport or RecordingTransport()
    done = acked if acked is not None else []
    channels = Channels(transport, MapperId("m"), 2, lambda: 0.0, done.append)
    return channels, transport


def test_put_numbers_the_batches_of_each_channel_from_one_and_sends_them() -> None:
    channels, transport = _channels()
    n0 = channels.to(N0, "sim://n0")
    n1 = channels.to(N1, "sim://n1")
    for _ in range(2):
        channels.put(n0, _batch(1), EPOCH)
    channels.put(n1, _batch(2), EPOCH)
    sent = [m for m in transport.ends["sim://n0"].sent if isinstance(m, Batch)]
    assert [m.chan for m in sent] == [1, 2]
    assert all(m.mapper == "m" and m.epoch == EPOCH for m in sent)
    assert list(n1.unacked) == [1]
    assert channels.unacked_batches() == 3


def test_a_node_without_an_address_is_a_delivery_error() -> None:
    channels, _ = _channels()
    with pytest.raises(DeliveryError, match="no address"):
        channels.to(N0, None)


def test_a_batch_is_done_once_when_every_node_of_its_set_acked_it() -> None:
    acked: list[Sequence[Row]] = []
    channels, _ = _channels(acked=acked)
    n0, n1 = channels.to(N0, "sim://n0"), channels.to(N1, "sim://n1")
    batch = _batch(1, 2, replica_set=(N0, N1))
    channels.put(n0, batch, EPOCH)
    channels.put(n1, batch, EPOCH)
    channels.on_ack(n0, ChannelNumber(1))
    assert acked == [] and channels.tuples_acked == 0
    channels.on_ack(n1, ChannelNumber(1))
    channels.on_ack(n1, ChannelNumber(1))  # an ack again: nothing more
    assert acked == [batch.rows] and channels.tuples_acked == 2
    assert channels.unacked_batches() == 0


def test_a_window_holds_window_batches() -> None:
    channels, _ = _channels()
    n0 = channels.to(N0, "sim://n0")
    channels.put(n0, _batch(1), EPOCH)
    assert not channels.window_full(n0)
    channels.put(n0, _batch(2), EPOCH)
    assert channels.window_full(n0)


def test_take_off_takes_a_batch_and_every_later_one_off_every_channel() -> None:
    channels, _ = _channels()
    n0, n1 = channels.to(N0, "sim://n0"), channels.to(N1, "sim://n1")
    first, shared, later = _batch(1), _batch(2, replica_set=(N0, N1)), _batch(3, replica_set=(N1,))
    channels.put(n0, first, EPOCH)
    channels.put(n0, shared, EPOCH)
    channels.put(n1, shared, EPOCH)
    channels.put(n1, later, EPOCH)
    taken = channels.take_off([shared])
    assert {id(b) for b in taken} == {id(shared), id(later)}
    assert all(b.rerouted and not b.waiting_for for b in taken)
    assert list(n0.unacked.values()) == [first] and not n1.unacked
    assert channels.in_flight() == [first]


class _FullEnd:
    """A channel end whose socket refuses sends while ``full`` is set."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.full = True
        self.sent: list[int] = []

    def send(self, frames: Sequence[bytes]) -> bool:
        if self.full:
            return False
        message = decode(frames)
        assert isinstance(message, Batch)
        self.sent.append(message.chan)
        return True

    def receive(self) -> list[bytes] | None:
        return None

    def close(self) -> None:
        pass


class _FullTransport:
    def __init__(self) -> None:
        self.end = _FullEnd("sim://n0")

    def open(self, addr: str, send_queue_messages_max: int) -> _FullEnd:
        return self.end

    def wait_any(self, ends: Sequence[Any], timeout_ms: int) -> list[Any]:
        return []


def test_a_send_the_socket_refused_holds_back_the_later_ones_until_sent_again() -> None:
    transport = _FullTransport()
    channels, _ = _channels(transport)
    n0 = channels.to(N0, "sim://n0")
    channels.put(n0, _batch(1), EPOCH)
    transport.end.full = False
    channels.put(n0, _batch(2), EPOCH)
    assert transport.end.sent == [] and n0.unsent_from == 1  # order kept: 2 waits for 1
    channels.resend_from(n0, ChannelNumber(0), EPOCH)
    assert transport.end.sent == [1, 2] and channels.resends == 1


class _ReplyingTransport(RecordingTransport):
    """Every end has one ack waiting for batch 1."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: dict[str, list[list[bytes]]] = {}

    def open(self, addr: str, send_queue_messages_max: int) -> Any:
        end = super().open(addr, send_queue_messages_max)
        replies = self.replies.setdefault(addr, [])
        end.receive = lambda: replies.pop(0) if replies else None  # type: ignore[method-assign]
        return end

    def wait_any(self, ends: Sequence[Any], timeout_ms: int) -> list[Any]:
        return [end for end in ends if self.replies.get(end.addr)]


def test_pump_hands_every_reply_on_then_retries_counting_its_depth() -> None:
    transport = _ReplyingTransport()
    channels, _ = _channels(transport)
    n0 = channels.to(N0, "sim://n0")
    transport.replies["sim://n0"] += [encode(Ack(channels.stream_id, ChannelNumber(1), EPOCH))] * 2
    replies: list[tuple[Channel, int]] = []
    depths: list[int] = []
    channels.pump(
        0,
        lambda channel, frames: replies.append((channel, channels.pump_depth)),
        lambda read: depths.append(channels.pump_depth),
    )
    assert replies == [(n0, 1), (n0, 1)] and depths == [1]
    assert channels.pump_depth == 0


def test_a_retried_drain_counts_silence_from_its_own_start() -> None:
    now = [5.0]
    channels = Channels(RecordingTransport(), MapperId("m"), 2, lambda: now[0])
    channels.retry_failed_delivery()
    assert channels.stall_counted_from == float("-inf")
    channels.note_delivery_failed()
    now[0] = 9.0
    channels.retry_failed_delivery()
    assert channels.stall_counted_from == 9.0 and not channels.delivery_failed
