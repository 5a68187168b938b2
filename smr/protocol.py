"""The wire protocol: versioned msgpack messages, validated on every decode
(docs/design/architecture.md#wire).

A message is one ZeroMQ frame (one frame, not three: a multipart send costs about twice a
single-part one on this transport, and small messages are dominated by per-send cost):

- byte 0: the :class:`Kind`;
- bytes 1-4: the header's length ``h``, unsigned big-endian;
- the next ``h`` bytes: the header, a msgpack map with at least ``"v"`` (the protocol
  version); its other fields depend on the kind;
- the rest: the body, whose meaning depends on the kind (empty for most control messages).

Each kind is a record, a small frozen dataclass (:class:`Batch`, :class:`Ack`, ...,
:class:`SnapshotEnd`) whose fields are the header's, with typed ids, plus ``body`` for the
kinds that carry one; the record's docstring and fields say what the message means.
:func:`decode` validates a message against its record (every field present with its type,
ints non-negative) and returns the record; :func:`encode` turns a record back into the frame.
:data:`Message` is the union of all records: handlers ``match`` on the record type and read
attributes, never header keys. Messages between nodes (:class:`PeerMessage`) all start with
the sender, its incarnation and its view's epoch; they are defined in
:mod:`smr.peer_messages`, the reads a program sends (dump pages, queries, output reads, a
mapper's history) in :mod:`smr.read_messages`, and the version, the kinds and the id types
in :mod:`smr.wire` (every name is importable from here).

A tuple batch keeps the channel fields (stream id, channel batch number, view epoch) and
the mapper id in the header and the tuples in the body, so the body is encoded once and the
same bytes fan out to the slot's primary and its secondaries, each behind its own small
header.

The body of a batch is columnar (:mod:`smr.batch_body`).

Every decode raises :class:`FrameError` (and nothing else) on malformed, oversize or
unknown-version input, so a node can count and drop a bad message without ever crashing.
"""

from __future__ import annotations

import dataclasses
import operator
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeAlias

import msgpack

from smr.checkpoint.ids import MapperId
from smr.peer_messages import (
    BeatAck,
    Checkpoint,
    CheckpointRequest,
    Gossip,
    Heartbeat,
    MoveAnswer,
    MoveCommit,
    MoveCopied,
    MoveDone,
    MovePropose,
    MoveSwitched,
    PeerMessage,
    PeerMessages,
    Probe,
    ProbeAck,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotEnd,
    SnapshotRequest,
    StateReply,
    StateRequest,
    Suspect,
    Vouch,
)
from smr.read_messages import (
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
from smr.ring.ids import Epoch, NodeId
from smr.wire import (
    FRAME_BYTES_MAX_DEFAULT,
    PROTOCOL_VERSION,
    ChannelNumber,
    FrameError,
    Kind,
    MoveNumber,
    RequestId,
    SnapshotNumber,
    StreamId,
)

# The records of every kind and the codec's vocabulary, importable from here (the peer
# records and the wire's fixed parts are defined by role in smr.peer_messages and smr.wire).
__all__ = [
    "FRAME_BYTES_MAX_DEFAULT",
    "PROTOCOL_VERSION",
    "Ack",
    "Batch",
    "BeatAck",
    "ChannelNumber",
    "Checkpoint",
    "CheckpointRequest",
    "DumpReply",
    "DumpRequest",
    "Error",
    "FrameError",
    "Gossip",
    "Heartbeat",
    "HistoryReply",
    "HistoryRequest",
    "JoinRequest",
    "Kind",
    "MapperDone",
    "Message",
    "MoveAnswer",
    "MoveCommit",
    "MoveCopied",
    "MoveDone",
    "MoveNumber",
    "MovePropose",
    "MoveReply",
    "MoveRequest",
    "MoveSwitched",
    "Nack",
    "NetRuleReply",
    "NetRuleRequest",
    "NotOwner",
    "Output",
    "OutputReply",
    "OutputRequest",
    "PeerMessage",
    "PeerMessages",
    "Ping",
    "Pong",
    "Probe",
    "ProbeAck",
    "QueryReply",
    "QueryRequest",
    "RecoverReply",
    "RecoverRequest",
    "RequestId",
    "SnapshotBegin",
    "SnapshotChunk",
    "SnapshotEnd",
    "SnapshotNumber",
    "SnapshotRequest",
    "StateReply",
    "StateRequest",
    "StatusReply",
    "StatusRequest",
    "StreamId",
    "Suspect",
    "ViewReply",
    "ViewRequest",
    "Vouch",
    "decode",
    "encode",
    "encode_raw",
    "header_of",
    "pack_body",
    "unpack_body",
    "unpack_msgpack",
]


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

_RECORDS: Final[tuple[type[Message], ...]] = typing.get_args(Message)


@dataclass(frozen=True, slots=True)
class _Field:
    """One header field of a record: its attribute, its key on the wire, and the Python
    types its value may have (those of the annotation, ids as their base types)."""

    attribute: str
    wire: str
    types: tuple[type, ...]


@dataclass(frozen=True, slots=True)
class _Schema:
    record: Callable[..., Message]
    fields: tuple[_Field, ...]
    has_body: bool
    # For encode: the header keys, "v" first, and a function that reads the record's
    # values in the same order after the version (attrgetter: no loop in Python).
    wire_keys: tuple[str, ...]
    wire_values: Callable[[Any], tuple[Any, ...]]


def _runtime_types(hint: Any) -> tuple[type, ...]:
    """The types a value of annotation ``hint`` has at run time (a NewType is its base)."""
    supertype = getattr(hint, "__supertype__", None)
    if supertype is not None:
        return _runtime_types(supertype)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _runtime_types(arg))
    return (type(None),) if hint is None else (hint,)


def _schema(record: type[Message]) -> _Schema:
    hints = typing.get_type_hints(record)
    fields = tuple(
        _Field(f.name, f.metadata.get("wire", f.name), _runtime_types(hints[f.name]))
        for f in dataclasses.fields(record)
        if f.name != "body"
    )
    read = operator.attrgetter(*(f.attribute for f in fields))
    wire_values = read if len(fields) > 1 else lambda message: (read(message),)
    wire_keys = ("v", *(f.wire for f in fields))
    return _Schema(record, fields, "body" in hints, wire_keys, wire_values)


# The header fields of each kind, in wire order, read off the records' annotations.
_SCHEMAS: Final[dict[Kind, _Schema]] = {record.kind: _schema(record) for record in _RECORDS}
assert set(_SCHEMAS) == set(Kind), "every kind has a record"

_HEADER_LENGTH_BYTES: Final = 4


def header_fields(kind: Kind) -> tuple[tuple[tuple[str, tuple[type, ...]], ...], bool]:
    """The header fields of ``kind`` as (wire name, the types its value may have), in wire
    order, and whether the kind carries a body: what a tool that builds messages field by
    field needs (the decoders' fuzzer)."""
    schema = _SCHEMAS[kind]
    return tuple((f.wire, f.types) for f in schema.fields), schema.has_body


def header_of(message: Message) -> dict[str, Any]:
    """The header fields of ``message`` as sent (wire names, without the version)."""
    return {f.wire: getattr(message, f.attribute) for f in _SCHEMAS[message.kind].fields}


def encode(message: Message) -> list[bytes]:
    """Encode a message as its frames (one)."""
    schema = _SCHEMAS[message.kind]
    values = (PROTOCOL_VERSION, *schema.wire_values(message))
    header = dict(zip(schema.wire_keys, values, strict=True))
    body: bytes = message.body if schema.has_body else b""  # type: ignore[union-attr]
    return _frame(message.kind, header, body)


def encode_raw(kind: Kind, header: dict[str, Any], body: bytes = b"") -> list[bytes]:
    """Encode a message from a header map (wire names; the protocol version is added): for
    tests that need a message no record can express (a missing field, a wrong type)."""
    return _frame(kind, {"v": PROTOCOL_VERSION, **header}, body)


def _frame(kind: Kind, header: dict[str, Any], body: bytes) -> list[bytes]:
    header_bytes: bytes = msgpack.packb(header, use_bin_type=True)
    prefix = bytes((kind,)) + len(header_bytes).to_bytes(_HEADER_LENGTH_BYTES, "big")
    return [b"".join((prefix, header_bytes, body))]


def decode(frames: Sequence[bytes], frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> Message:
    """Decode and validate a received message into the record of its kind.

    Guarantees: the kind is known, the header has the protocol version and every field of
    the kind's record with the record's type, and no int field is negative. Raises
    :class:`FrameError` otherwise. Header keys the record does not name are ignored, and so
    is the body of a kind that carries none.
    """
    if len(frames) != 1:
        raise FrameError(f"expected a message of 1 frame, got {len(frames)} frames")
    data = frames[0]
    if len(data) > frame_bytes_max:
        raise FrameError(f"message of {len(data)} bytes exceeds the cap of {frame_bytes_max}")
    header_start = 1 + _HEADER_LENGTH_BYTES
    if len(data) < header_start:
        raise FrameError(f"message of {len(data)} bytes is shorter than its fixed prefix")
    try:
        kind = Kind(data[0])
    except ValueError:
        raise FrameError(f"unknown message kind {data[0]}") from None
    header_end = header_start + int.from_bytes(data[1:header_start], "big")
    if header_end > len(data):
        raise FrameError(f"header runs past the end of the {len(data)}-byte message")
    header = unpack_msgpack(data[header_start:header_end], "header")
    if not isinstance(header, dict):
        raise FrameError(f"header must be a map, got {type(header).__name__}")
    version = header.get("v")
    if version != PROTOCOL_VERSION:
        raise FrameError(f"protocol version {version!r} is not {PROTOCOL_VERSION}")
    schema = _SCHEMAS[kind]
    values: list[Any] = []
    for f in schema.fields:
        value = header.get(f.wire)
        if type(value) not in f.types:
            raise FrameError(f"{kind.name} header field {f.wire!r} is {value!r}, not {f.types}")
        if type(value) is int and value < 0:
            raise FrameError(f"{kind.name} header field {f.wire!r} is negative: {value}")
        values.append(value)
    if schema.has_body:
        values.append(bytes(data[header_end:]))
    return schema.record(*values)


def unpack_msgpack(data: bytes, what: str) -> Any:
    """Decode msgpack (arrays as tuples); FrameError naming ``what`` if it is malformed."""
    try:
        return msgpack.unpackb(data, use_list=False, strict_map_key=False, raw=False)
    except Exception as error:  # msgpack raises several unrelated types on bad input
        raise FrameError(f"malformed {what}: {type(error).__name__}: {error}") from None


def pack_body(obj: Any) -> bytes:
    """Encode a control body (a status map, a view, a dump page) as msgpack."""
    body: bytes = msgpack.packb(obj, use_bin_type=True)
    return body


def unpack_body(data: bytes) -> Any:
    """Decode a control body; raises :class:`FrameError` if it is not valid msgpack."""
    return unpack_msgpack(data, "body")
