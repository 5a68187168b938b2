"""The messages between nodes (docs/design/architecture.md#wire): each a record built on
:class:`PeerMessage`, which names the sender, its incarnation and its view's epoch. Encoded and
decoded by :mod:`smr.wire`, like every message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, TypeAlias

from smr.checkpoint.ids import CheckpointNumber
from smr.ring.ids import Epoch, Incarnation, NodeId, Slot
from smr.wire.kinds import Kind, MoveNumber, RequestId, SnapshotNumber


@dataclass(frozen=True, slots=True)
class PeerMessage:
    """What every message between nodes starts with: its sender, the sender's incarnation,
    and the epoch of its view, so that any message between nodes shows which of the two
    holds the older view (the node with the newer one sends it over: view repair works both
    ways, whatever the message)."""

    sender: NodeId = field(metadata={"wire": "from"})
    incarnation: Incarnation = field(metadata={"wire": "inc"})
    epoch: Epoch


@dataclass(frozen=True, slots=True)
class Heartbeat(PeerMessage):
    """A primary's sign of life to its secondaries, with its load; the body is its view
    (piggybacked gossip, docs/design/architecture.md#view).

    The load (docs/design/architecture.md#failures, "slow is not dead"): ``busy``, its loop is
    behind its work (tuples wait past one turn's budget, or a reduce call holds the loop: the beat
    then comes from the node's heartbeat thread); ``stalled_ms``, how long the loop has not read
    messages; ``stuck``, stalled past the node's stuck threshold; ``inbox_tuples``, tuples
    accepted and not applied yet; ``applied_per_s``, its recent apply rate; ``cpu_percent``,
    its process's CPU share (100 per core). ``beat``: the number of this beat in the
    sender's incarnation, which each secondary echoes in a :class:`BeatAck` (the sender's
    read lease, docs/design/architecture.md#read-lease); 0 for a beat sent while the loop is
    stalled, which is not echoed.
    """

    kind: ClassVar[Kind] = Kind.HEARTBEAT
    busy: bool
    stuck: bool
    stalled_ms: int
    inbox_tuples: int
    applied_per_s: int
    cpu_percent: int
    beat: int
    body: bytes


@dataclass(frozen=True, slots=True)
class BeatAck(PeerMessage):
    """A secondary heard heartbeat ``beat`` of the receiver, which its view holds live: it
    will not declare the receiver dead on silence before ``failure_timeout_ms`` past that
    beat's sending."""

    kind: ClassVar[Kind] = Kind.BEAT_ACK
    beat: int


@dataclass(frozen=True, slots=True)
class Gossip(PeerMessage):
    """The sender's view (the body), to be merged."""

    kind: ClassVar[Kind] = Kind.GOSSIP
    body: bytes


@dataclass(frozen=True, slots=True)
class Probe(PeerMessage):
    """Are you alive? Answered at once by a :class:`ProbeAck` with the same ``req``."""

    kind: ClassVar[Kind] = Kind.PROBE
    req: RequestId


@dataclass(frozen=True, slots=True)
class ProbeAck(PeerMessage):
    """The answer to the :class:`Probe` numbered ``req``."""

    kind: ClassVar[Kind] = Kind.PROBE_ACK
    req: RequestId


@dataclass(frozen=True, slots=True)
class Suspect(PeerMessage):
    """The sender suspects ``subject`` (incarnation ``subject_incarnation``): it answered no
    probe (``ring.failure``, step 2c). Sent to the subject, which refutes with a
    :class:`ProbeAck` of ``req`` if it is alive, and to the other owners, which probe the
    subject on the sender's behalf and send a :class:`Vouch` if it answers them."""

    kind: ClassVar[Kind] = Kind.SUSPECT
    subject: NodeId
    subject_incarnation: Incarnation
    req: RequestId


@dataclass(frozen=True, slots=True)
class Vouch(PeerMessage):
    """The sender heard from ``subject`` when asked to by the :class:`Suspect` ``req``: the
    suspicion is unfounded."""

    kind: ClassVar[Kind] = Kind.VOUCH
    subject: NodeId
    req: RequestId


@dataclass(frozen=True, slots=True)
class StateRequest(PeerMessage):
    """The sender took over a range of the receiver's and found some of its slots with no
    copy (lost beyond tolerance), but the receiver is back: it was declared dead while alive
    and may still hold their state. The body is the list of slots asked for (msgpack)."""

    kind: ClassVar[Kind] = Kind.STATE_REQUEST
    req: RequestId
    body: bytes


@dataclass(frozen=True, slots=True)
class StateReply(PeerMessage):
    """The answer to :class:`StateRequest` ``req``: the state the sender held as incarnation
    ``copy_of`` when it was fenced. The body is a msgpack map: ``slots``, the slots answered
    (a slot with no keys is answered too), and ``delta``, their snapshot (an encoded
    ``checkpoint.delta.Delta``)."""

    kind: ClassVar[Kind] = Kind.STATE_REPLY
    req: RequestId
    copy_of: Incarnation
    body: bytes


@dataclass(frozen=True, slots=True)
class Checkpoint(PeerMessage):
    """One part of a primary's checkpoint delta (the body) for a secondary to apply: a big
    checkpoint travels as several parts of whole slots (``checkpoint.delta.split_delta``)."""

    kind: ClassVar[Kind] = Kind.CHECKPOINT
    number: CheckpointNumber
    """The primary's checkpoint counter (per incarnation), so gaps show."""
    part: int
    """The part's index within the checkpoint, from 0, so a missing part shows too."""
    last: bool
    """True on the checkpoint's final part: it is whole once this one is applied."""
    body: bytes


@dataclass(frozen=True, slots=True)
class CheckpointRequest(PeerMessage):
    """A secondary whose tuple backup nears its bound asks the primary to checkpoint now."""

    kind: ClassVar[Kind] = Kind.CHECKPOINT_REQUEST


@dataclass(frozen=True, slots=True)
class SnapshotRequest(PeerMessage):
    """A secondary asks its primary for a full snapshot of the primary's range."""

    kind: ClassVar[Kind] = Kind.SNAPSHOT_REQUEST


@dataclass(frozen=True, slots=True)
class SnapshotBegin(PeerMessage):
    """A snapshot starts; its chunks follow, then its :class:`SnapshotEnd`."""

    kind: ClassVar[Kind] = Kind.SNAPSHOT_BEGIN
    as_of: CheckpointNumber
    """The last checkpoint number swapped before the snapshot was read."""
    snap: SnapshotNumber
    """The snapshot's number, which its chunks and end repeat."""
    range_start: Slot
    """The first slot of the range the snapshot copies (the sender's range when it began)."""
    range_length: int
    """How many slots that range has (0: none). A receiver whose snapshot ends holds a copy
    of every slot of it, including the slots with no state, which no chunk names."""


@dataclass(frozen=True, slots=True)
class SnapshotChunk(PeerMessage):
    """Chunk ``index`` (from 0) of snapshot ``snap``: full states and hwms of whole slots
    (the body, a delta). A receiver that misses a chunk sees an index skipped."""

    kind: ClassVar[Kind] = Kind.SNAPSHOT_CHUNK
    snap: SnapshotNumber
    index: int
    body: bytes


@dataclass(frozen=True, slots=True)
class SnapshotEnd(PeerMessage):
    """Snapshot ``snap`` is complete after ``chunks`` chunks (a receiver that counted fewer
    missed one)."""

    kind: ClassVar[Kind] = Kind.SNAPSHOT_END
    snap: SnapshotNumber
    chunks: int


@dataclass(frozen=True, slots=True)
class MovePropose(PeerMessage):
    """Step 1 of a move (``smr.node.moves``): the sender, the giver, proposes to move the
    ``range_length`` slots from ``range_start`` (the top of its range; all of it when
    ``leave``) to ``receiver``, its clockwise neighbour, with ``copy_holder`` getting a copy
    first. Sent to the receiver (accept or refuse) and to the copy holder (get ready)."""

    kind: ClassVar[Kind] = Kind.MOVE_PROPOSE
    move: MoveNumber
    range_start: Slot
    range_length: int
    leave: bool
    receiver: NodeId
    copy_holder: NodeId
    accept_below_ppm: int
    """A balancing move (``smr.node.balance``): the receiver accepts only while its
    utilisation, in millionths, is below this; 0 for any other move."""
    passed_on: bool
    """A balancing move its giver started because it was itself too busy to take one: its
    receiver, if busy too, does not pass it on further."""


@dataclass(frozen=True, slots=True)
class MoveAnswer(PeerMessage):
    """Step 2: the receiver or the copy holder accepts move ``move``, or refuses it
    (``reason`` says why)."""

    kind: ClassVar[Kind] = Kind.MOVE_ANSWER
    move: MoveNumber
    accepted: bool
    reason: str


@dataclass(frozen=True, slots=True)
class MoveCopied(PeerMessage):
    """The copy holder holds a complete copy of the moving slots, through the giver's
    checkpoint ``through`` (sent when its copy completes, and after each checkpoint
    applied to it while the move lasts)."""

    kind: ClassVar[Kind] = Kind.MOVE_COPIED
    move: MoveNumber
    through: CheckpointNumber


@dataclass(frozen=True, slots=True)
class MoveCommit(PeerMessage):
    """The giver stopped applying the moving slots (``range_start``, ``range_length``); its
    checkpoint ``final`` holds their last changes: the receiver may promote them and switch
    (to the copy holder: its copy counts once it holds ``final``)."""

    kind: ClassVar[Kind] = Kind.MOVE_COMMIT
    move: MoveNumber
    final: CheckpointNumber
    range_start: Slot
    range_length: int


@dataclass(frozen=True, slots=True)
class MoveDone(PeerMessage):
    """The end of move ``move``: ``switched``, the receiver serves the slots now (its view
    says so); otherwise the move was called off (``reason``) and the giver serves them
    still. From the giver to the copy holder, the same news; from a receiver's secondary to
    the receiver, ``switched`` confirms it sees the receiver's new view."""

    kind: ClassVar[Kind] = Kind.MOVE_DONE
    move: MoveNumber
    switched: bool
    reason: str


@dataclass(frozen=True, slots=True)
class MoveSwitched(PeerMessage):
    """The receiver of move ``move`` switched: its entry in the view is at ``version`` (or
    later) now. Sent to its secondaries, which answer with a :class:`MoveDone` (switched)
    once their view holds that entry."""

    kind: ClassVar[Kind] = Kind.MOVE_SWITCHED
    move: MoveNumber
    version: int


PeerMessages: TypeAlias = (
    Heartbeat
    | BeatAck
    | Gossip
    | Probe
    | ProbeAck
    | Suspect
    | Vouch
    | StateRequest
    | StateReply
    | Checkpoint
    | CheckpointRequest
    | SnapshotRequest
    | SnapshotBegin
    | SnapshotChunk
    | SnapshotEnd
    | MovePropose
    | MoveAnswer
    | MoveCopied
    | MoveCommit
    | MoveDone
    | MoveSwitched
)
"""Every message between nodes: the records built on :class:`PeerMessage`."""
