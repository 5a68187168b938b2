"""The wire protocol: versioned msgpack messages, validated on every decode (DESIGN section 9).

A message is one ZeroMQ frame (one frame, not three: a multipart send costs about twice a
single-part one on this transport, and small messages are dominated by per-send cost):

- byte 0: the :class:`Kind`;
- bytes 1-4: the header's length ``h``, unsigned big-endian;
- the next ``h`` bytes: the header, a msgpack map with at least ``"v"`` (the protocol
  version); its other fields depend on the kind and are checked against :data:`HEADER_SCHEMA`;
- the rest: the body, whose meaning depends on the kind (empty for most control messages).

A tuple batch keeps the channel fields (stream id, channel sequence number, view epoch) and
the mapper id in the header and the tuples in the body, so the body is encoded once and the
same bytes fan out to the slot's primary and its secondaries, each behind its own small
header.

The body of a batch is columnar: ``n`` little-endian ``uint32`` slots, ``n`` ``uint64``
seqs and ``n`` ``float64`` timestamps (fixed width, so their types need no per-tuple check
and a secondary reads slots and seqs without decoding the rest), then msgpack
``[keys, values]``. A tuple's identity is ``(mapper id, slot, seq)`` (DESIGN section 1).

Every decode raises :class:`FrameError` (and nothing else) on malformed, oversize or
unknown-version input, so a node can count and drop a bad message without ever crashing.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, NewType

import msgpack

from checkpoint.ids import MapperId, Seq
from ring.ids import Slot

PROTOCOL_VERSION: Final = 3

StreamId = NewType("StreamId", str)
"""One emitter's channels to the nodes: batch numbers and acks are per (stream, node)."""

# A frame larger than this is refused before decoding: 1000-tuple batches of word counts are
# about 30 KiB, a dump page of 10 000 small states about 400 KiB; 16 MiB leaves room for big
# values without letting one peer make a node allocate without bound.
FRAME_BYTES_MAX_DEFAULT: Final = 16 * 1024 * 1024

_LITTLE_ENDIAN = sys.byteorder == "little"


class Kind(IntEnum):
    """The message kinds; a reply is usually its request's kind plus one."""

    BATCH = 1
    ACK = 2
    NACK = 3
    NOT_OWNER = 4
    ERROR = 5
    PING = 10
    PONG = 11
    VIEW_REQUEST = 12
    VIEW = 13
    STATUS_REQUEST = 14
    STATUS = 15
    DUMP_REQUEST = 16
    DUMP = 17
    QUERY_REQUEST = 18
    QUERY = 19
    # Between nodes; every peer message names its sender and the sender's incarnation.
    HEARTBEAT = 40
    GOSSIP = 41
    PROBE = 42
    PROBE_ACK = 43
    CHECKPOINT = 44
    SNAPSHOT_REQUEST = 45
    SNAPSHOT_BEGIN = 46
    SNAPSHOT_CHUNK = 47
    SNAPSHOT_END = 48
    CHECKPOINT_REQUEST = 49
    OUTPUT = 30


class FrameError(ValueError):
    """A message that is malformed, oversize, of an unknown kind or of another version."""


# Header fields per kind: name -> accepted Python types. ``"v"`` is checked for every kind.
# Control requests carry ``req``, an id the reply echoes, so a client can match replies.
_INT = (int,)
_STR = (str,)
_OPT_INT = (int, type(None))
_PEER: Final[dict[str, tuple[type, ...]]] = {"from": _STR, "inc": _INT, "epoch": _INT}
HEADER_SCHEMA: Final[dict[Kind, dict[str, tuple[type, ...]]]] = {
    # stream: the sending emitter's id, which names the channel (one emitter may send for
    # several mapper ids in turn, and a retried mapper comes back on a new stream); mapper:
    # the tuples' identity for dedup; chan: this batch's number on the (stream, node)
    # channel; base: the oldest number the emitter still holds for that channel; epoch: the
    # view epoch the emitter routed by.
    Kind.BATCH: {
        "stream": _STR,
        "mapper": _STR,
        "chan": _INT,
        "base": _INT,
        "epoch": _INT,
        "n": _INT,
    },
    Kind.ACK: {"stream": _STR, "through": _INT, "epoch": _INT},
    Kind.NACK: {"stream": _STR, "expect": _INT},
    Kind.NOT_OWNER: {"stream": _STR, "chan": _INT, "epoch": _INT},
    Kind.ERROR: {"req": _OPT_INT, "message": _STR},
    Kind.PING: {"req": _INT},
    Kind.PONG: {"req": _INT, "node": _STR},
    Kind.VIEW_REQUEST: {"req": _INT},
    # A VIEW answers a VIEW_REQUEST; sent to a node unasked, it is merged into the node's view
    # (an emitter sends its newer view to a node that refused a batch by an older one).
    Kind.VIEW: {"req": _INT, "epoch": _INT},
    Kind.STATUS_REQUEST: {"req": _INT},
    Kind.STATUS: {"req": _INT},
    Kind.DUMP_REQUEST: {"req": _INT, "start": _INT, "max_keys": _INT},
    Kind.DUMP: {"req": _INT, "next": _OPT_INT},
    Kind.QUERY_REQUEST: {"req": _INT},
    Kind.QUERY: {"req": _INT},
    Kind.OUTPUT: {"node": _STR, "n": _INT},
    # Peer messages: the sender, its incarnation, and the epoch of its view, so that any
    # message between nodes shows which of the two holds the older view (the node with the
    # newer one sends it over: view repair works both ways, whatever the message).
    # HEARTBEAT's body is the sender's view (piggybacked gossip, DESIGN section 3).
    Kind.HEARTBEAT: _PEER,
    Kind.GOSSIP: _PEER,
    Kind.PROBE: {**_PEER, "req": _INT},
    Kind.PROBE_ACK: {**_PEER, "req": _INT},
    # number: the primary's checkpoint counter (per incarnation), so gaps show.
    Kind.CHECKPOINT: {**_PEER, "number": _INT},
    # A secondary whose tuple backup nears its bound asks the primary to checkpoint now.
    Kind.CHECKPOINT_REQUEST: _PEER,
    Kind.SNAPSHOT_REQUEST: _PEER,
    # as_of: the last checkpoint number swapped before the snapshot was read; snap: the
    # snapshot's number (per sending incarnation), which its chunks and end repeat; index:
    # a chunk's place in its snapshot, from 0; chunks: how many chunks the snapshot had. A
    # receiver that misses a chunk sees it (an index skipped, or a count short at the end).
    Kind.SNAPSHOT_BEGIN: {**_PEER, "as_of": _INT, "snap": _INT},
    Kind.SNAPSHOT_CHUNK: {**_PEER, "snap": _INT, "index": _INT},
    Kind.SNAPSHOT_END: {**_PEER, "snap": _INT, "chunks": _INT},
}


@dataclass(frozen=True, slots=True)
class Message:
    """One decoded, validated message."""

    kind: Kind
    header: dict[str, Any]
    body: bytes


_HEADER_LENGTH_BYTES: Final = 4


def encode(kind: Kind, header: dict[str, Any], body: bytes = b"") -> list[bytes]:
    """Encode a message as its frames (one); ``header`` gets the protocol version added."""
    header_bytes: bytes = msgpack.packb({"v": PROTOCOL_VERSION, **header}, use_bin_type=True)
    prefix = bytes((kind,)) + len(header_bytes).to_bytes(_HEADER_LENGTH_BYTES, "big")
    return [b"".join((prefix, header_bytes, body))]


def decode(frames: Sequence[bytes], frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> Message:
    """Decode and validate a received message.

    Guarantees: the result's kind is known, its header has the protocol version and every
    field its kind requires with the right type. Raises :class:`FrameError` otherwise.
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
    header = _unpack(data[header_start:header_end], "header")
    if not isinstance(header, dict):
        raise FrameError(f"header must be a map, got {type(header).__name__}")
    version = header.get("v")
    if version != PROTOCOL_VERSION:
        raise FrameError(f"protocol version {version!r} is not {PROTOCOL_VERSION}")
    for name, types in HEADER_SCHEMA[kind].items():
        value = header.get(name)
        if type(value) not in types:
            raise FrameError(f"{kind.name} header field {name!r} is {value!r}, not {types}")
        if type(value) is int and value < 0:
            raise FrameError(f"{kind.name} header field {name!r} is negative: {value}")
    return Message(kind, header, bytes(data[header_end:]))


def _unpack(data: bytes, what: str) -> Any:
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
    return _unpack(data, "body")


# -- tuple batches -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    """The tuples of one batch as columns; row ``i`` is tuple ``(keys[i], values[i], ts[i])``
    of slot ``slots[i]`` with sequence number ``seqs[i]``."""

    slots: Sequence[Slot]
    seqs: Sequence[Seq]
    keys: Sequence[str | int]
    values: Sequence[Any]
    ts: Sequence[float]

    def __len__(self) -> int:
        return len(self.keys)


def encode_batch_body(
    slots: Sequence[int],
    seqs: Sequence[int],
    keys: Sequence[str | int],
    values: Sequence[Any],
    ts: Sequence[float],
) -> bytes:
    """Encode the columns of a batch once; the same bytes go to every replica."""
    slot_array = array("I", slots)
    seq_array = array("Q", seqs)
    ts_array = array("d", ts)
    if not _LITTLE_ENDIAN:
        for column in (slot_array, seq_array, ts_array):
            column.byteswap()
    payload: bytes = msgpack.packb([list(keys), list(values)], use_bin_type=True)
    return b"".join((slot_array.tobytes(), seq_array.tobytes(), ts_array.tobytes(), payload))


def decode_batch_ids(body: bytes, count: int, slot_count: int) -> tuple[array[int], array[int]]:
    """Only the slots and seqs of a batch body, without decoding keys and values.

    A secondary backs a batch up by its raw bytes and needs just these two columns to know
    when a checkpoint covers it. Raises :class:`FrameError` if the columns are malformed.
    """
    if len(body) < 12 * count:
        raise FrameError(f"batch body of {len(body)} bytes is too short for {count} tuples")
    slots = array("I")
    seqs = array("Q")
    slots.frombytes(body[: 4 * count])
    seqs.frombytes(body[4 * count : 12 * count])
    if not _LITTLE_ENDIAN:
        slots.byteswap()
        seqs.byteswap()
    if count:
        if max(slots) >= slot_count:
            raise FrameError(f"slot {max(slots)} out of range (slot count {slot_count})")
        if min(seqs) < 1:
            raise FrameError("sequence numbers start at 1")
    return slots, seqs


def decode_batch_body(body: bytes, count: int, slot_count: int) -> Batch:
    """Decode and validate a batch body.

    Layout: ``count`` little-endian ``uint32`` slots, ``count`` ``uint64`` seqs, ``count``
    ``float64`` timestamps, then msgpack ``[keys, values]``.

    Guarantees: every column has ``count`` rows, every slot is ``< slot_count``, every seq
    ``>= 1``, every key a ``str`` or an ``int``. Raises :class:`FrameError` otherwise.
    """
    if len(body) < 20 * count:
        raise FrameError(f"batch body of {len(body)} bytes is too short for {count} tuples")
    slots, seqs = decode_batch_ids(body, count, slot_count)
    ts = array("d")
    ts.frombytes(body[12 * count : 20 * count])
    if not _LITTLE_ENDIAN:
        ts.byteswap()
    columns = _unpack(body[20 * count :], "batch body")
    if not isinstance(columns, tuple) or len(columns) != 2:
        raise FrameError("batch body must end with [keys, values]")
    keys, values = columns
    if not (isinstance(keys, tuple) and isinstance(values, tuple)):
        raise FrameError("batch keys and values must be arrays")
    if len(keys) != count or len(values) != count:
        raise FrameError(f"batch columns do not all hold the announced {count} tuples")
    if count:
        key_types = set(map(type, keys))
        if not key_types <= {str, int}:
            bad = sorted(t.__name__ for t in key_types - {str, int})
            raise FrameError(f"keys must be str or int, got {', '.join(bad)}")
    return Batch(slots, seqs, keys, values, ts)  # type: ignore[arg-type]


def batch_header(
    stream: StreamId, mapper: MapperId, chan: int, base: int, epoch: int, n: int
) -> dict[str, Any]:
    """The per-channel header of a batch (see :data:`HEADER_SCHEMA`)."""
    return {"stream": stream, "mapper": mapper, "chan": chan, "base": base, "epoch": epoch, "n": n}
