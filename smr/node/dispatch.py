"""Which role serves each kind of message a node receives: the dispatch of
:meth:`smr.node.core.NodeCore.on_frames`, once the message is decoded (and not held while
the node settles after a restart)."""

from __future__ import annotations

from typing import Protocol

from smr.node.checkpoints import CheckpointCycle
from smr.node.control import Control
from smr.node.handoff import Handoff
from smr.node.ingest import Ingest
from smr.node.membership import Membership
from smr.node.moves import Moves
from smr.node.recovery import Recovery
from smr.node.reducer import Reducer
from smr.node.replication import Replication
from smr.node.retirement import Retirement
from smr.node.snapshots import Snapshots
from smr.output.files import OutputSink
from smr.wire.messages import (
    Batch,
    JoinRequest,
    MapperDone,
    Message,
    MoveRequest,
    Ping,
    RecoverRequest,
    StatusRequest,
    ViewReply,
    ViewRequest,
)
from smr.wire.peer import (
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
from smr.wire.reads import DumpRequest, HistoryRequest, OutputRequest, QueryRequest


class Serving(Protocol):
    """The roles that serve messages (``smr.node.core.NodeCore``'s), and the count of a
    message no role serves."""

    @property
    def ingest(self) -> Ingest: ...
    @property
    def control(self) -> Control: ...
    @property
    def output(self) -> OutputSink: ...
    @property
    def retirement(self) -> Retirement: ...
    @property
    def reducer(self) -> Reducer: ...
    @property
    def membership(self) -> Membership: ...
    @property
    def recovery(self) -> Recovery: ...
    @property
    def handoff(self) -> Handoff: ...
    @property
    def moves(self) -> Moves: ...
    @property
    def replication(self) -> Replication: ...
    @property
    def checkpoints(self) -> CheckpointCycle: ...
    @property
    def snapshots(self) -> Snapshots: ...
    def bad_frame(self, identity: bytes, reason: str) -> None: ...


def dispatch(node: Serving, identity: bytes, message: Message) -> None:
    """Pass ``message`` from ``identity`` to the role that serves its kind; a kind no node
    serves is a bad frame."""
    match message:
        case Batch():
            node.ingest.receive(identity, message)
        case Ping():
            node.control.on_ping(identity, message)
        case MapperDone():
            # The mapper's tuples were all acked before its notice: their output goes to
            # the file before the answer, so it is there when the mapper's feed ends.
            node.output.flush()
            if node.retirement.on_mapper_done(identity, message):
                node.reducer.writer_finished(message.mapper)
        case ViewRequest():
            node.control.on_view_request(identity, message)
        case StatusRequest():
            node.control.on_status_request(identity, message)
        case DumpRequest():
            node.control.on_dump_request(identity, message)
        case QueryRequest():
            node.control.on_query_request(identity, message)
        case HistoryRequest():
            node.control.on_history_request(identity, message)
        case OutputRequest():
            node.control.on_output_request(identity, message)
        case RecoverRequest():
            node.control.on_recover_request(identity, message)
        case MoveRequest():
            node.control.on_move_request(identity, message)
        case JoinRequest():
            node.control.on_join_request(identity, message)
        case Heartbeat():
            node.membership.on_heartbeat(identity, message)
        case BeatAck():
            node.membership.on_beat_ack(identity, message)
        case Gossip():
            node.membership.on_gossip(identity, message)
        case ViewReply():
            node.membership.on_view_push(identity, message)
        case Probe():
            node.recovery.on_probe(identity, message)
        case ProbeAck():
            node.recovery.on_probe_ack(identity, message)
        case Suspect():
            node.recovery.on_suspect(identity, message)
        case Vouch():
            node.recovery.on_vouch(identity, message)
        case StateRequest():
            node.handoff.on_request(identity, message)
        case StateReply():
            node.handoff.on_reply(identity, message)
        case MovePropose():
            node.moves.on_propose(identity, message)
        case MoveAnswer():
            node.moves.on_answer(identity, message)
        case MoveCopied():
            node.moves.on_copied(identity, message)
        case MoveCommit():
            node.moves.on_commit(identity, message)
        case MoveDone():
            node.moves.on_done(identity, message)
        case MoveSwitched():
            node.moves.on_switched(identity, message)
        case Checkpoint():
            node.replication.on_checkpoint(identity, message)
        case CheckpointRequest():
            node.checkpoints.on_checkpoint_request(identity, message)
        case SnapshotRequest():
            node.snapshots.on_request(identity, message)
        case SnapshotBegin():
            node.snapshots.on_begin(identity, message)
        case SnapshotChunk():
            node.snapshots.on_chunk(identity, message)
        case SnapshotEnd():
            node.snapshots.on_end(identity, message)
        case _:
            node.bad_frame(identity, f"{message.kind.name} is not a request a node serves")
