"""An emitter's channels: the numbered stream of batches from one emitter to one node, and the
batches it holds until every node of their replica set acked them
(docs/design/architecture.md#data-path, step 3).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from smr.checkpoint.ids import MapperId
from smr.ring.ids import Epoch, NodeId
from smr.transport.links import ChannelEnd
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
    # kept it from starting another (answered when the limit ends; see Emitter._resend).
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
