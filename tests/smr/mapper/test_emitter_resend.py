"""Go-back-N in the emitter: a NACK makes it send a channel's batches again from the one the
node expects, once per stall (the NACKs of a pipelined window do not each start one); a NACK
past where the last go-back-N started is answered at once, and one the limit skipped is
answered when the limit ends, so a full window never waits for the resend timer. A drain
that failed may be retried, and the retry waits its own time."""

from __future__ import annotations

import pytest

from smr.checkpoint.ids import MapperId
from smr.mapper.channels import DeliveryError
from smr.mapper.emitter import Emitter
from smr.ring.hashing import even_tokens, slot_of
from smr.ring.ids import NodeId
from smr.ring.placement import Ring
from smr.ring.view import Member, Status, View
from smr.wire.codec import encode
from smr.wire.kinds import ChannelNumber
from smr.wire.messages import Ack, Batch, Nack
from tests.smr.links import OutageTransport, RecordingTransport

SLOT_BITS = 8
BATCHES = 6


class Setup:
    """Three nodes, r = 1; ``BATCHES`` one-tuple batches sent to n0 (and its copy holder),
    none acked."""

    def __init__(self) -> None:
        view = View(
            Member(NodeId(f"n{i}"), 1, f"sim://n{i}", token, "", Status.UP, 1)
            for i, token in enumerate(even_tokens(3, SLOT_BITS))
        )
        ring = Ring(view, SLOT_BITS)
        self.epoch = view.epoch
        self.now = [100.0]
        self.transport = RecordingTransport()
        self.emitter = Emitter(
            view,
            SLOT_BITS,
            MapperId("m"),
            replication=1,
            batch_size=1,
            window_batches=BATCHES,
            clock=lambda: self.now[0],
            transport=self.transport,
        )
        words = (f"w{i}" for i in range(10_000))
        for word in [w for w in words if ring.primary(slot_of(w, SLOT_BITS)) == "n0"][:BATCHES]:
            self.emitter.emit(word, 1)
        self.channel = self.emitter._channels.get(NodeId("n0"))
        assert list(self.channel.unacked) == list(range(1, BATCHES + 1))

    def sent(self) -> list[int]:
        """The batch numbers sent to n0 so far, in order."""
        end = self.transport.ends["sim://n0"]
        return [m.chan for m in end.sent if isinstance(m, Batch)]

    def nack(self, expect: int) -> None:
        message = Nack(self.emitter.stream_id, ChannelNumber(expect), False)
        self.emitter._on_reply(self.channel, encode(message))

    def ack(self, through: int) -> None:
        message = Ack(self.emitter.stream_id, ChannelNumber(through), self.epoch)
        self.emitter._on_reply(self.channel, encode(message))

    def later(self, seconds: float) -> None:
        self.now[0] += seconds
        self.emitter.pump(0)


def test_the_nacks_of_one_window_start_one_go_back_n() -> None:
    setup = Setup()
    first = len(setup.sent())
    setup.nack(2)
    assert setup.sent()[first:] == [2, 3, 4, 5, 6]
    for _ in range(4):  # the later batches of the window reached the node out of order too
        setup.nack(2)
    assert len(setup.sent()) == first + 5
    setup.ack(6)  # the batches sent again were taken: nothing waits, nothing more is sent
    setup.later(setup.emitter.resend_after_s / 2)
    assert len(setup.sent()) == first + 5


def test_a_nack_past_the_last_go_back_n_is_answered_at_once() -> None:
    setup = Setup()
    setup.nack(2)
    before = len(setup.sent())
    # The node took 2 and 3 and stopped at 4 (it dropped what came next): the window is
    # full, so no new batch would prompt another NACK; waiting for the limit would stall.
    setup.later(0.01)
    setup.nack(4)
    assert setup.sent()[before:] == [4, 5, 6]


def test_a_nack_the_limit_skipped_is_answered_when_the_limit_ends() -> None:
    setup = Setup()
    setup.nack(2)
    before = len(setup.sent())
    setup.later(0.01)
    setup.nack(2)  # not news: 2 went out again a moment ago
    assert len(setup.sent()) == before
    setup.later(setup.emitter.resend_after_s / 8)
    assert len(setup.sent()) == before
    setup.later(setup.emitter.resend_after_s / 8)  # a quarter of the resend interval
    assert setup.sent()[before:] == [2, 3, 4, 5, 6]
    setup.later(setup.emitter.resend_after_s / 2)  # once: the NACK was answered
    assert len(setup.sent()) == before + 5


def test_a_flush_retried_after_the_nodes_came_back_waits_its_own_time() -> None:
    view = View(
        Member(NodeId(f"n{i}"), 1, f"sim://n{i}", token, "", Status.UP, 1)
        for i, token in enumerate(even_tokens(3, SLOT_BITS))
    )
    now = [100.0]
    transport = OutageTransport(now)
    emitter = Emitter(
        view, SLOT_BITS, MapperId("m"), replication=1, clock=lambda: now[0], transport=transport
    )
    transport.up[0] = False  # every node stops answering
    emitter.emit("whale", 1)
    with pytest.raises(DeliveryError, match="held back after 20 s"):
        emitter.drain(20)
    now[0] += 15  # 35 s of silence in all, past the 30 s give-up time; then they are back
    transport.up[0] = True
    emitter.drain(20)  # before, this raised at once: "acknowledged nothing for 35 s"
    assert emitter.unacked_batches == 0 and emitter.tuples_acked == 1
    # A retry while they are still away waits its own 20 s too, then says so again.
    transport.up[0] = False
    emitter.emit("whale", 1)
    with pytest.raises(DeliveryError, match="held back after 20 s"):
        emitter.drain(20)
    retried_at = now[0]
    with pytest.raises(DeliveryError, match="held back after 20 s"):
        emitter.drain(20)
    assert now[0] - retried_at >= 20
