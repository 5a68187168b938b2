"""Resends on their own, over channels and a router: go-back-N at most once per stall (a NACK
past where the last one started is news and is answered at once); a stalled channel asks
the other nodes for their view, then goes back N; silence past the give-up time raises
``DeliveryError`` naming the node, counted from a retried drain's start at the earliest."""

from __future__ import annotations

import pytest

from smr.checkpoint.ids import MapperId
from smr.mapper.batcher import Batcher
from smr.mapper.channels import Channel, Channels, DeliveryError
from smr.mapper.resend import Timing, resend, retry
from smr.mapper.router import Router
from smr.ring.hashing import even_tokens, slot_of
from smr.ring.ids import NodeId
from smr.ring.placement import Ring
from smr.ring.view import Member, Status, View
from smr.wire.kinds import ChannelNumber
from smr.wire.messages import Batch, ViewRequest
from tests.smr.links import RecordingTransport

SLOT_BITS = 8
TIMING = Timing(resend_after_s=1.0, view_check_after_s=0.2, give_up_after_s=30.0)


class Setup:
    """Two nodes, r = 0; four one-tuple batches sent to n0, none acked."""

    def __init__(self) -> None:
        view = View(
            Member(NodeId(f"n{i}"), 1, f"sim://n{i}", token, "", Status.UP, 1)
            for i, token in enumerate(even_tokens(2, SLOT_BITS))
        )
        self.now = [100.0]
        self.transport = RecordingTransport()
        self.channels = Channels(self.transport, MapperId("m"), 16, self.clock)
        batcher = Batcher(SLOT_BITS, 1, 1 << 20, None, None, lambda d, r: self.router.send(d, r))
        self.router = Router(view, 0, batcher, self.channels, lambda ms: None, self.clock, 1.0)
        ring = Ring(view, SLOT_BITS)
        words = (f"w{i}" for i in range(10_000))
        for word in [w for w in words if ring.primary(slot_of(w, SLOT_BITS)) == "n0"][:4]:
            batcher.emit(word, 1)
        channel = self.channels.get(NodeId("n0"))
        assert channel is not None
        self.channel: Channel = channel

    def clock(self) -> float:
        return self.now[0]

    def sent(self, node: str = "n0") -> list[int]:
        """The numbers of the batches sent to ``node``, in order."""
        end = self.transport.ends.get(f"sim://{node}")
        return [m.chan for m in (end.sent if end else []) if isinstance(m, Batch)]

    def asked(self, node: str) -> int:
        """How many view requests ``node`` was sent."""
        end = self.transport.ends.get(f"sim://{node}")
        return sum(isinstance(m, ViewRequest) for m in (end.sent if end else []))

    def retry(self) -> None:
        retry(self.channels, self.router, TIMING, self.clock, self.channels.all())


def test_a_nack_goes_back_n_once_per_stall_and_a_later_one_is_news() -> None:
    setup = Setup()
    resend(setup.channels, setup.router, TIMING, setup.now[0], setup.channel, ChannelNumber(2))
    assert setup.sent()[4:] == [2, 3, 4]
    resend(setup.channels, setup.router, TIMING, setup.now[0], setup.channel, ChannelNumber(2))
    assert len(setup.sent()) == 7 and setup.channel.nack_waiting == 2  # answered later
    resend(setup.channels, setup.router, TIMING, setup.now[0], setup.channel, ChannelNumber(3))
    assert setup.sent()[7:] == [3, 4] and setup.channels.resends == 2


def test_a_nack_the_limit_skipped_is_answered_when_the_limit_ends() -> None:
    setup = Setup()
    resend(setup.channels, setup.router, TIMING, setup.now[0], setup.channel, ChannelNumber(3))
    resend(setup.channels, setup.router, TIMING, setup.now[0], setup.channel, ChannelNumber(2))
    setup.now[0] += TIMING.resend_after_s / 4
    setup.retry()
    assert setup.sent()[6:] == [2, 3, 4] and setup.channel.nack_waiting is None


def test_a_stalled_channel_asks_the_others_for_their_view_then_goes_back_n() -> None:
    setup = Setup()
    setup.now[0] += TIMING.view_check_after_s
    setup.retry()
    assert setup.asked("n1") == 1 and len(setup.sent()) == 4
    setup.now[0] += TIMING.resend_after_s
    setup.retry()
    assert setup.sent()[4:] == [1, 2, 3, 4]


def test_silence_past_the_give_up_time_names_the_node() -> None:
    setup = Setup()
    setup.now[0] += TIMING.give_up_after_s
    with pytest.raises(DeliveryError, match="node n0 at sim://n0 acknowledged nothing"):
        setup.retry()
    assert setup.channels.delivery_failed


def test_a_retried_drain_counts_silence_from_its_own_start() -> None:
    setup = Setup()
    setup.now[0] += TIMING.give_up_after_s
    setup.channels.note_delivery_failed()
    setup.channels.retry_failed_delivery()  # a drain again: its own give-up time
    setup.now[0] += TIMING.give_up_after_s / 2
    setup.retry()
    setup.now[0] += TIMING.give_up_after_s / 2
    with pytest.raises(DeliveryError):
        setup.retry()
