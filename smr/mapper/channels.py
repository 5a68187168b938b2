"""An emitter's channels: the numbered stream of batches from one emitter to one node, and the
batches it holds until every node of their replica set acked them
(docs/design/architecture.md#data-path, step 3). :class:`Channels` owns them all: their
windows, their acks, the reading of replies and the give-up accounting.
"""

from __future__ import annotations

import math
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from smr.checkpoint.ids import MapperId
from smr.ring.ids import Epoch, NodeId
from smr.transport.links import ChannelEnd, MapperTransport
from smr.wire.batch_body import encode_batch_body
from smr.wire.codec import encode
from smr.wire.kinds import ChannelNumber, StreamId
from smr.wire.messages import Batch


class DeliveryError(Exception):
    """Tuples could not be delivered: a node stopped answering or refused a batch."""


Row = tuple[int, int, Any, Any, float]  # slot, seq, key, value, ts


def slot_and_seq(row: Row) -> tuple[int, int]:
    """The slot and seq of a row (the key a batch's rows are sorted by)."""
    return row[0], row[1]


def encode_within(rows: list[Row], body_bytes_max: int) -> list[tuple[list[Row], bytes]]:
    """Encode ``rows`` as one batch body, or, if that comes out over ``body_bytes_max`` bytes,
    as consecutive halves (recursively), so each part fits in a frame. The emitter cuts
    batches by estimated bytes, so a split happens only after a re-route merged batches or
    a ``combine`` grew its values; a single row over the bound stays one part."""
    slots, seqs, keys, values, ts = zip(*rows, strict=True)
    body = encode_batch_body(slots, seqs, keys, values, ts)
    if len(body) <= body_bytes_max or len(rows) == 1:
        return [(rows, body)]
    half = len(rows) // 2
    return encode_within(rows[:half], body_bytes_max) + encode_within(rows[half:], body_bytes_max)


@dataclass
class OutBatch:
    """A closed batch: its rows (kept for re-routing), its encoded body and who still owes
    an ack."""

    rows: list[Row]
    body: bytes
    replica_set: tuple[NodeId, ...] = ()
    waiting_for: set[NodeId] = field(default_factory=set)
    rerouted: bool = False

    @property
    def replicas_wire(self) -> str:
        """The replica set as a batch message names it (``Batch.replicas``)."""
        return ",".join(self.replica_set)


FIRST_CHANNEL_NUMBER: Final = ChannelNumber(1)


@dataclass
class Channel:
    """The stream of batches from this mapper to one node, numbered from 1."""

    node: NodeId
    outbox: ChannelEnd
    next_chan: ChannelNumber = FIRST_CHANNEL_NUMBER
    unacked: OrderedDict[ChannelNumber, OutBatch] = field(default_factory=OrderedDict)
    unsent_from: ChannelNumber | None = None  # first batch number a send failed for, if any
    progress_at: float = 0.0
    resent_at: float = 0.0
    # Where the last go-back-N started, and the batch a NACK asked for while the rate limit
    # kept it from starting another (answered when the limit ends; see smr.mapper.resend).
    resent_from: ChannelNumber = FIRST_CHANNEL_NUMBER
    nack_waiting: ChannelNumber | None = None
    # The node has taken every batch below this number (a NOT_OWNER or NACK for a batch
    # says so: it is the one the node expected).
    processed_below: ChannelNumber = FIRST_CHANNEL_NUMBER

    @property
    def base(self) -> ChannelNumber:
        """The oldest batch number the node may still need (sent with every batch, see
        smr.node.ingest): the oldest one held that is not below `processed_below`. Past the
        batches re-routed off this channel it skips the hole they leave, so the node does
        not wait for them (held ones below it were taken already and are only not acked)."""
        for number in self.unacked:
            if number >= self.processed_below:
                return number
        return self.next_chan

    def taken_below(self, chan: ChannelNumber) -> None:
        """The node said it expects batch ``chan``: it took every batch below it."""
        self.processed_below = max(self.processed_below, chan)

    def transmit(
        self, chan: ChannelNumber, stream: StreamId, mapper: MapperId, epoch: Epoch
    ) -> None:
        """Send batch ``chan`` as ``mapper`` on ``stream``, routed by a view of ``epoch``,
        unless an earlier batch still waits to be sent (order matters)."""
        if self.unsent_from is not None:
            return
        batch = self.unacked[chan]
        message = Batch(
            stream,
            mapper,
            chan,
            self.base,
            epoch,
            batch.replicas_wire,
            len(batch.rows),
            batch.body,
        )
        if not self.outbox.send(encode(message)):
            self.unsent_from = chan


def in_flight(channels: Iterable[Channel]) -> list[OutBatch]:
    """The batches still unacked on ``channels`` and not re-routed, each once."""
    seen: dict[int, OutBatch] = {}
    for channel in channels:
        for batch in channel.unacked.values():
            if not batch.rerouted:
                seen[id(batch)] = batch
    return list(seen.values())


def with_later_batches(channels: Iterable[Channel], moved: list[OutBatch]) -> list[OutBatch]:
    """``moved`` and every batch after one of them on one of ``channels``, to a fixpoint.

    A batch sent after a re-routed one on the same channel may hold tuples of the same
    slots (a range that moved splits a primary's batches: some of their slots changed
    hands, others did not). Left on the channel it would reach the node before the
    re-routed tuples, whose lower seqs the node's hwm would then drop as duplicates.
    Re-routed together, their rows go out again sorted by slot and seq.
    """
    every = list(channels)
    chosen = {id(batch): batch for batch in moved}
    changed = bool(chosen)
    while changed:
        changed = False
        for channel in every:
            after_moved = False
            for held in channel.unacked.values():
                if id(held) in chosen:
                    after_moved = True
                elif after_moved and not held.rerouted:
                    chosen[id(held)] = held
                    changed = True
    return list(chosen.values())


def release_through(channel: Channel, through: ChannelNumber) -> tuple[bool, list[OutBatch]]:
    """Take the batches up to ``through`` off ``channel`` (the node acked them): whether any
    was released, and those now acked by every node of their set (and not re-routed)."""
    released = False
    done: list[OutBatch] = []
    while channel.unacked:
        chan, batch = next(iter(channel.unacked.items()))
        if chan > through:
            break
        del channel.unacked[chan]
        released = True
        batch.waiting_for.discard(channel.node)
        if not batch.waiting_for and not batch.rerouted:
            done.append(batch)
    return released, done


class Channels:
    """The emitter's channels, one per node, opened on first use, named by the emitter's own
    random stream id; their windows and acks.

    Guarantees: a batch stays in a channel's window until its node acks it or a re-route
    takes it off (:meth:`take_off`); on a channel, batches go out in number order (one a
    full socket kept back holds back the later ones until a retry); a batch counts as done,
    once, when every node of its replica set acked it.
    """

    def __init__(
        self,
        transport: MapperTransport,
        mapper_id: MapperId,
        window_batches: int,
        clock: Callable[[], float],
        on_acked: Callable[[Sequence[Row]], None] | None = None,
    ) -> None:
        self.stream_id = StreamId(uuid.uuid4().hex)
        self.mapper_id = mapper_id
        """The mapper the batches are sent as (resends included): see :meth:`send_as`."""
        self.window_batches = window_batches
        self._transport = transport
        self._clock = clock
        # Told the rows of every batch once all its nodes acked it (rows hold their emit time).
        self._on_acked = on_acked
        self._by_node: dict[NodeId, Channel] = {}
        self._pump_depth = 0
        self.tuples_acked = 0
        self.resends = 0
        self.stall_counted_from = -math.inf
        """Silence before this does not count towards giving up (:mod:`smr.mapper.resend`);
        a drain after a :class:`DeliveryError` moves it to its own start."""
        self.delivery_failed = False

    def send_as(self, mapper_id: MapperId) -> None:
        """Send the following batches (and resends) as ``mapper_id``."""
        self.mapper_id = mapper_id

    def to(self, node: NodeId, addr: str | None) -> Channel:
        """The channel to ``node``, opened to ``addr`` if there is none yet."""
        channel = self._by_node.get(node)
        if channel is None:
            if addr is None:
                raise DeliveryError(f"node {node} has no address in the view")
            channel = Channel(node, self._transport.open(addr, 2 * self.window_batches + 8))
            channel.progress_at = self._clock()
            self._by_node[node] = channel
        return channel

    def get(self, node: NodeId) -> Channel | None:
        """The channel to ``node``, if one is open."""
        return self._by_node.get(node)

    def all(self) -> list[Channel]:
        """Every open channel."""
        return list(self._by_node.values())

    def window_full(self, channel: Channel) -> bool:
        """Whether ``channel`` holds ``window_batches`` unacked batches (no room for one more)."""
        return len(channel.unacked) >= self.window_batches

    def unacked_batches(self) -> int:
        """Batches sent and not yet acked, counted once per channel they are on."""
        return sum(len(c.unacked) for c in self._by_node.values())

    def in_flight(self) -> list[OutBatch]:
        """The batches still unacked and not re-routed, each once."""
        return in_flight(self._by_node.values())

    def put(self, channel: Channel, batch: OutBatch, epoch: Epoch) -> None:
        """Give ``batch`` the next number of ``channel`` and send it (routed by ``epoch``)."""
        chan = channel.next_chan
        channel.next_chan = ChannelNumber(chan + 1)
        channel.unacked[chan] = batch
        channel.transmit(chan, self.stream_id, self.mapper_id, epoch)

    def transmit_from(self, channel: Channel, start: ChannelNumber, epoch: Epoch) -> None:
        """Send again every unacked batch of ``channel`` from number ``start``."""
        for chan in list(channel.unacked):
            if chan >= start:
                channel.transmit(chan, self.stream_id, self.mapper_id, epoch)

    def resend_from(self, channel: Channel, start: ChannelNumber, epoch: Epoch) -> None:
        """Go back N: forget a send a full socket kept back, and send every unacked batch of
        ``channel`` from ``start`` again (counted in ``resends``)."""
        self.resends += 1
        channel.unsent_from = None
        self.transmit_from(channel, start, epoch)

    def take_off(self, batches: list[OutBatch]) -> list[OutBatch]:
        """Take ``batches``, and every batch after one of them on any channel
        (:func:`with_later_batches`), off every channel, marked re-routed: those batches."""
        taken = with_later_batches(self._by_node.values(), batches)
        for batch in taken:
            batch.rerouted = True
            for node in list(batch.waiting_for):
                other = self._by_node.get(node)
                if other is None:
                    continue  # a node of its set whose channel the batch never reached
                for number, held in list(other.unacked.items()):
                    if held is batch:
                        del other.unacked[number]
            batch.waiting_for.clear()
        return taken

    def on_ack(self, channel: Channel, through: ChannelNumber) -> None:
        """``channel``'s node acked every batch up to ``through``: release them; a batch
        acked by every node of its set is done (``tuples_acked``, ``on_acked``)."""
        released, done = release_through(channel, through)
        for batch in done:
            self.tuples_acked += len(batch.rows)
            if self._on_acked is not None:
                self._on_acked(batch.rows)
        if released:
            channel.progress_at = self._clock()
            if channel.nack_waiting is not None and through >= channel.nack_waiting:
                channel.nack_waiting = None

    @property
    def pump_depth(self) -> int:
        """How many :meth:`pump` calls are under way (a re-route sends from inside one)."""
        return self._pump_depth

    def pump(
        self,
        timeout_ms: int,
        on_reply: Callable[[Channel, list[bytes]], None],
        after: Callable[[list[Channel]], None],
    ) -> None:
        """Wait up to ``timeout_ms`` for replies, hand each to ``on_reply``, then call
        ``after`` with the channels read (the retries), counted in ``pump_depth``."""
        channels = list(self._by_node.values())
        self._pump_depth += 1
        try:
            if self._transport.wait_any([c.outbox for c in channels], timeout_ms):
                for channel in channels:
                    while (frames := channel.outbox.receive()) is not None:
                        on_reply(channel, frames)
            after(channels)
        finally:
            self._pump_depth -= 1

    def note_delivery_failed(self) -> None:
        """A :class:`DeliveryError` was raised: the next drain counts silence afresh."""
        self.delivery_failed = True

    def retry_failed_delivery(self) -> None:
        """A drain after a :class:`DeliveryError`: count silence from now on only."""
        if self.delivery_failed:
            self.delivery_failed = False
            self.stall_counted_from = self._clock()

    def close(self) -> None:
        """Close every channel at once; what they held is forgotten."""
        for channel in self._by_node.values():
            channel.outbox.close()
        self._by_node.clear()
