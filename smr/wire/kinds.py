"""The wire's fixed parts: the protocol version, the message kinds, the id types the records
use, the frame cap and the one error a decode raises. The records and the codec are in
:mod:`smr.wire` (messages to and from nodes) and :mod:`smr.wire.peer` (messages between
nodes)."""

from __future__ import annotations

from enum import IntEnum, unique
from typing import Final, NewType

PROTOCOL_VERSION: Final = 9

StreamId = NewType("StreamId", str)
"""One emitter's channels to the nodes: batch numbers and acks are per (stream, node)."""

ChannelNumber = NewType("ChannelNumber", int)
"""A batch's number on its (stream, node) channel, from 1; acks and nacks name these."""

RequestId = NewType("RequestId", int)
"""The id of a request, echoed by its reply, so that a client matches replies to requests."""

MoveNumber = NewType("MoveNumber", int)
"""A move's number, per giving incarnation, from 1: every message of one move repeats it."""

SnapshotNumber = NewType("SnapshotNumber", int)
"""A snapshot's number, per sending incarnation, from 1; its chunks and its end repeat it."""

# A frame larger than this is refused before decoding: 1000-tuple batches of word counts are
# about 30 KiB, a dump page of 10 000 small states about 400 KiB; 16 MiB leaves room for big
# values without letting one peer make a node allocate without bound.
FRAME_BYTES_MAX_DEFAULT: Final = 16 * 1024 * 1024


@unique  # two kinds given one number would be one kind, in silence
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
    RECOVER_REQUEST = 20
    RECOVER = 21
    MOVE_REQUEST = 22
    MOVE = 23
    JOIN_REQUEST = 24
    NET_RULE_REQUEST = 25
    NET_RULE = 26
    OUTPUT_REQUEST = 27
    OUTPUT_LINES = 28
    MAPPER_DONE = 29
    MAPPER_HISTORY_REQUEST = 31
    MAPPER_HISTORY = 32
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
    SUSPECT = 50
    VOUCH = 51
    STATE_REQUEST = 52
    STATE_REPLY = 53
    MOVE_PROPOSE = 54
    MOVE_ANSWER = 55
    MOVE_COPIED = 56
    MOVE_COMMIT = 57
    MOVE_DONE = 58
    MOVE_SWITCHED = 59
    BEAT_ACK = 60
    OUTPUT = 30


class FrameError(ValueError):
    """A message that is malformed, oversize, of an unknown kind or of another version."""
