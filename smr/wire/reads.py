"""The messages that read a cluster (docs/design/architecture.md#wire): state by slot range or by
key, the reducers' output, by offset or as a published stream, and what the nodes hold of a mapper
id. Encoded and decoded by :mod:`smr.wire`, like every message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from smr.checkpoint.ids import MapperId
from smr.ring.ids import NodeId, Slot
from smr.wire.kinds import Kind, RequestId


@dataclass(frozen=True, slots=True)
class DumpRequest:
    """Asks for a page of the states of slots ``[start, end)``, of about ``max_keys`` keys;
    answered by :class:`DumpReply`. The node serves slots in order from ``start`` while it
    is their primary, and stops at the first it is not, or that is lost: a reader learns
    from the reply exactly which slots it read, asks the rest of the new owner, and is told
    which slots have no state to read."""

    kind: ClassVar[Kind] = Kind.DUMP_REQUEST
    req: RequestId
    start: Slot
    end: Slot
    max_keys: int


@dataclass(frozen=True, slots=True)
class DumpReply:
    """A page of ``[slot, key, state]`` entries (the body) holding every key of the slots
    from the request's ``start`` up to ``next_start``: each slot whole, never split."""

    kind: ClassVar[Kind] = Kind.DUMP
    req: RequestId
    next_start: Slot | None = field(metadata={"wire": "next"})
    """The first slot not served: the page was full there, or the node is not its primary
    (equal to ``start`` when it is not even that one's); None when every slot up to ``end``
    was served."""
    lost_until: Slot | None = field(metadata={"wire": "lost"})
    """When ``next_start`` is a slot this node is primary of but whose state is lost
    (``checkpoint.loss``), the end of the run of such slots: ``[next_start, lost_until)``
    are lost, served by no node until an operator accepts the loss. None otherwise."""
    body: bytes


@dataclass(frozen=True, slots=True)
class QueryRequest:
    """Asks for the state of one key, or of a list of keys (the body, msgpack); answered by
    :class:`QueryReply`."""

    kind: ClassVar[Kind] = Kind.QUERY_REQUEST
    req: RequestId
    body: bytes


@dataclass(frozen=True, slots=True)
class QueryReply:
    """``{"owner": bool, "slot": int, "state": dict | None, "lost": bool}`` per key asked
    (the body, msgpack): one map for one key, a list in the order asked for a list.
    ``lost``: the node is the key's primary but the slot's state is lost (``state`` is
    then None, and says nothing of the key)."""

    kind: ClassVar[Kind] = Kind.QUERY
    req: RequestId
    body: bytes


@dataclass(frozen=True, slots=True)
class OutputRequest:
    """Asks for the node's output records from byte ``offset`` of its output file, at most
    about ``max_bytes`` of them; answered by :class:`OutputReply`. With ``of``, the records
    of that node, from its file on the answering node's disk (ERROR if it holds none): how a
    subscriber reads what a node that died wrote."""

    kind: ClassVar[Kind] = Kind.OUTPUT_REQUEST
    req: RequestId
    offset: int
    max_bytes: int
    of: NodeId | None = None


@dataclass(frozen=True, slots=True)
class OutputReply:
    """Whole output lines (the body, UTF-8 JSON lines) from the request's offset up to
    ``next_offset``, where the next read starts; ``size`` is the file's size then (a
    request of 0 bytes reads no line and learns where the output ends)."""

    kind: ClassVar[Kind] = Kind.OUTPUT_LINES
    req: RequestId
    next_offset: int = field(metadata={"wire": "next"})
    size: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Output:
    """``n`` lines the reducers of node ``node`` emitted (the body, UTF-8), published."""

    kind: ClassVar[Kind] = Kind.OUTPUT
    node: NodeId
    n: int
    body: bytes


@dataclass(frozen=True, slots=True)
class HistoryRequest:
    """Asks what the node holds of mapper ``mapper`` in the slots it is primary of, by its
    own view; answered by :class:`HistoryReply` (``smr.client.history``)."""

    kind: ClassVar[Kind] = Kind.MAPPER_HISTORY_REQUEST
    req: RequestId
    mapper: MapperId


@dataclass(frozen=True, slots=True)
class HistoryReply:
    """What the node holds of the mapper asked for, in its range: the ``length`` slots from
    ``start`` it is primary of (0: it owns none)."""

    kind: ClassVar[Kind] = Kind.MAPPER_HISTORY
    req: RequestId
    start: Slot
    length: int
    slots: int
    """How many slots of the range hold a hwm of the mapper: a tuple of it was applied."""
    seq_max: int
    """The highest of those hwms (0 if none)."""
    last: int | None
    """The mapper's last seq if it finished (its lease runs here, or it was retired), else
    None (``smr.node.retirement``)."""
    lost: int
    """How many slots of the range are lost: their hwms went with their state, so what the
    mapper delivered there is not known."""
