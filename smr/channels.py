"""An emitter's channels: the numbered stream of batches from one emitter to one node, and the
batches it holds until every node of their replica set acked them (DESIGN section 4, step 3).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from ring.ids import NodeId
from smr.batch_body import encode_batch_body
from smr.protocol import ChannelNumber
from smr.transport import ChannelEnd


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

    @property
    def base(self) -> ChannelNumber:
        """The oldest batch number still held (sent with every batch, see smr.node.ingest)."""
        return next(iter(self.unacked), self.next_chan)
