"""The message records of the wire protocol (docs/design/protocol.md): one frozen dataclass per
kind (:class:`Batch`, :class:`Ack`, ...) whose fields are the header's, with typed ids, plus
``body`` for the kinds that carry one. :data:`Message` is the union of every record, the
messages between nodes (:mod:`smr.wire.peer`) and the reads (:mod:`smr.wire.reads`)
included: handlers ``match`` on the record type and read attributes, never header keys. The
frames are :mod:`smr.wire.codec`'s; the columnar batch body is :mod:`smr.wire.batch_body`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from smr.checkpoint.ids import MapperId
from smr.ring.ids import Epoch, NodeId
from smr.wire.kinds import (
    ChannelNumber,
    Kind,
    RequestId,
    StreamId,
)
from smr.wire.peer import (
    PeerMessages,
)
from smr.wire.reads import (
    DumpReply,
    DumpRequest,
    HistoryReply,
    HistoryRequest,
    Output,
    OutputReply,
    OutputRequest,
    QueryReply,
    QueryRequest,
)

# -- between emitters and nodes ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch of tuples from an emitter, on the channel of its stream to this node."""

    kind: ClassVar[Kind] = Kind.BATCH
    stream: StreamId
    """The sending emitter's id, which names the channel (one emitter may send for several
    mapper ids in turn, and a retried mapper comes back on a new stream)."""
    mapper: MapperId
    """The tuples' identity for dedup."""
    chan: ChannelNumber
    """This batch's number on the (stream, node) channel."""
    base: ChannelNumber
    """The oldest number the emitter still holds for that channel."""
    epoch: Epoch
    """The view epoch the emitter routed by."""
    replicas: str
    """The nodes the emitter sends this batch to (its replica set), comma-separated: a
    primary refuses a batch that does not go to every node of its own replica set (a node
    that joined it since, say), so that each tuple it applies is backed up on all of them."""
    n: int
    """How many tuples the body holds."""
    body: bytes
    """The tuples as columns (:func:`encode_batch_body`)."""


@dataclass(frozen=True, slots=True)
class Ack:
    """Every batch of the channel up to ``through`` is processed (applied or backed up)."""

    kind: ClassVar[Kind] = Kind.ACK
    stream: StreamId
    through: ChannelNumber
    epoch: Epoch
    """The node's view epoch: an emitter that sees a newer one asks for the view."""


@dataclass(frozen=True, slots=True)
class Nack:
    """Resend from batch ``expect``: a gap on the channel, or (``move_ended``) the end of a
    move this node refused batches for (done, called off, or settled at its receiver), so
    the tuples an emitter held back for it may go out again."""

    kind: ClassVar[Kind] = Kind.NACK
    stream: StreamId
    expect: ChannelNumber
    move_ended: bool


@dataclass(frozen=True, slots=True)
class NotOwner:
    """Batch ``chan`` was refused: some of its slots are not this node's by its view (the
    body, of epoch ``epoch``), or are being handed over in a move: then ``frozen_length``
    slots from ``frozen_start`` (wrapping) are refused until the move ends, and 0 slots
    otherwise. The channel does not advance; the emitter re-routes, holding back the
    tuples of frozen slots."""

    kind: ClassVar[Kind] = Kind.NOT_OWNER
    stream: StreamId
    chan: ChannelNumber
    epoch: Epoch
    frozen_start: int
    frozen_length: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Error:
    """A request (``req``) or a batch (``req`` None) was refused; ``message`` says why."""

    kind: ClassVar[Kind] = Kind.ERROR
    req: RequestId | None
    message: str


@dataclass(frozen=True, slots=True)
class MapperDone:
    """Mapper ``mapper`` has finished: every tuple it sent is acked by all the nodes of its
    set, and none will ever have a seq above ``last``. Answered by :class:`Pong`; the node
    retires the mapper after a lease (``smr.node.retirement``)."""

    kind: ClassVar[Kind] = Kind.MAPPER_DONE
    req: RequestId
    mapper: MapperId
    last: int


# -- control requests and their replies --------------------------------------------------------
# A request carries ``req``, an id its reply echoes, so a client can match replies.


@dataclass(frozen=True, slots=True)
class Ping:
    """Is a node there? Answered by :class:`Pong`."""

    kind: ClassVar[Kind] = Kind.PING
    req: RequestId


@dataclass(frozen=True, slots=True)
class Pong:
    """The answer to a :class:`Ping`, with the id of the node that answered."""

    kind: ClassVar[Kind] = Kind.PONG
    req: RequestId
    node: NodeId


@dataclass(frozen=True, slots=True)
class ViewRequest:
    """Asks a node for its view; answered by :class:`ViewReply`."""

    kind: ClassVar[Kind] = Kind.VIEW_REQUEST
    req: RequestId


@dataclass(frozen=True, slots=True)
class ViewReply:
    """A view (the body) of epoch ``epoch``. It answers a :class:`ViewRequest`; sent to a
    node unasked, it is merged into the node's view (an emitter sends its newer view to a
    node that refused a batch by an older one)."""

    kind: ClassVar[Kind] = Kind.VIEW
    req: RequestId
    epoch: Epoch
    body: bytes


@dataclass(frozen=True, slots=True)
class StatusRequest:
    """Asks a node for its status map; answered by :class:`StatusReply`."""

    kind: ClassVar[Kind] = Kind.STATUS_REQUEST
    req: RequestId


@dataclass(frozen=True, slots=True)
class StatusReply:
    """A node's status map (the body, msgpack)."""

    kind: ClassVar[Kind] = Kind.STATUS
    req: RequestId
    body: bytes


@dataclass(frozen=True, slots=True)
class RecoverRequest:
    """An operator accepts the loss of the slots whose state was lost beyond the replication
    factor (``smr recover --accept-loss``); answered by :class:`RecoverReply`."""

    kind: ClassVar[Kind] = Kind.RECOVER_REQUEST
    req: RequestId


@dataclass(frozen=True, slots=True)
class RecoverReply:
    """How many lost slots this node brought back, empty (``accepted``)."""

    kind: ClassVar[Kind] = Kind.RECOVER
    req: RequestId
    accepted: int


@dataclass(frozen=True, slots=True)
class MoveRequest:
    """An operator asks this node to move the top ``fraction_ppm`` millionths of its range
    (by load: the split is at that share of its range's load) to its clockwise neighbour,
    or its whole range when ``leave`` (``smr move``, ``smr scale in``); answered at once by
    :class:`MoveReply`, before the move ends (``smr status`` shows it)."""

    kind: ClassVar[Kind] = Kind.MOVE_REQUEST
    req: RequestId
    fraction_ppm: int
    leave: bool


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """An operator asks this node, on standby, to join the ring beside ``beside`` (``smr
    scale out``); answered at once by :class:`MoveReply`, before the join ends."""

    kind: ClassVar[Kind] = Kind.JOIN_REQUEST
    req: RequestId
    beside: str


@dataclass(frozen=True, slots=True)
class MoveReply:
    """Whether the move asked for started (``started``), and what it moves or why not."""

    kind: ClassVar[Kind] = Kind.MOVE
    req: RequestId
    started: bool
    text: str


@dataclass(frozen=True, slots=True)
class NetRuleRequest:
    """Fault injection (``smr fault``, emulated): a rule on this node's messages to its peers
    (the body: ``smr.transport.netfilter.pack_rule``), answered by :class:`NetRuleReply`.
    Served by the node process's loop, not its core (the simulation has a network of its
    own)."""

    kind: ClassVar[Kind] = Kind.NET_RULE_REQUEST
    req: RequestId
    body: bytes


@dataclass(frozen=True, slots=True)
class NetRuleReply:
    """The rule set, in words (a bad rule gets an ERROR)."""

    kind: ClassVar[Kind] = Kind.NET_RULE
    req: RequestId
    text: str


Message: TypeAlias = (
    Batch
    | Ack
    | Nack
    | NotOwner
    | Error
    | MapperDone
    | Ping
    | Pong
    | ViewRequest
    | ViewReply
    | StatusRequest
    | StatusReply
    | DumpRequest
    | DumpReply
    | QueryRequest
    | QueryReply
    | RecoverRequest
    | RecoverReply
    | MoveRequest
    | MoveReply
    | JoinRequest
    | NetRuleRequest
    | NetRuleReply
    | Output
    | OutputRequest
    | OutputReply
    | HistoryRequest
    | HistoryReply
    | PeerMessages
)
"""One decoded, validated message: a record of one of the kinds."""
