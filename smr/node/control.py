"""Control requests from clients and the CLI: ping, view, status, dump, query, output and
a mapper's history.

Each answer echoes the request's ``req`` id. Reads serve only slots this node is primary
of in its own view, and only while it holds its read lease (``ring.lease``): a node paused
or cut off long enough to have been taken over answers as a non-owner, and the reader asks
again by a fresher view. So a client that follows the view reads each key from one node,
and never from a primary that may have been superseded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import psutil

from smr.checkpoint.ids import MapperId
from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.disk import DiskState
from smr.node.handoff import Handoff
from smr.node.ingest import Ingest
from smr.node.load import LoadMeter
from smr.node.ports import NodeBasics
from smr.node.restart import RestartExchange
from smr.node.retirement import Retirement
from smr.output.files import OutputGone, OutputMissing, OutputSink
from smr.ring.hashing import slot_of
from smr.ring.ids import Incarnation, NodeId, Slot
from smr.ring.moves import MoveRefused
from smr.ring.placement import Role, SlotRange
from smr.ring.view import Status
from smr.ring.zones import one_zone_ranges
from smr.wire.codec import encode, pack_body, unpack_body
from smr.wire.kinds import FrameError, RequestId
from smr.wire.messages import (
    Error,
    JoinRequest,
    MoveReply,
    MoveRequest,
    Ping,
    Pong,
    RecoverReply,
    RecoverRequest,
    StatusReply,
    StatusRequest,
    ViewReply,
    ViewRequest,
)
from smr.wire.reads import (
    DumpReply,
    DumpRequest,
    HistoryReply,
    HistoryRequest,
    OutputReply,
    OutputRequest,
    QueryReply,
    QueryRequest,
)


class ReadLeases(Protocol):
    """What the control asks of the membership (``smr.node.membership``)."""

    def holds_read_lease(self) -> bool: ...
    def read_lease_ms(self) -> int | None: ...
    def peer_loads(self, now: float) -> dict[NodeId, Any]: ...


class JoinRequests(Protocol):
    """What an operator's join request asks of the joins (``smr.node.joins``)."""

    def request(self, beside: NodeId) -> str: ...


class OperatorMoves(Protocol):
    """What the control asks of the moves (``smr.node.moves``)."""

    def start(
        self, keep_share: float | None, accept_below: float | None = None, passed_on: bool = False
    ) -> str: ...
    def report(self) -> dict[str, Any]: ...
    def joining(self) -> JoinRequests: ...


class ReplicationReport(Protocol):
    """What the status asks of the replication (``smr.node.replication``)."""

    @property
    def backup_bytes(self) -> int: ...
    def hwm_entries(self) -> int: ...


class CheckpointAge(Protocol):
    """What the status asks of the checkpoint cycle (``smr.node.checkpoints``)."""

    def checkpoint_age_s(self, now: float) -> float | None: ...


class RecoveryReport(Protocol):
    """What the status asks of the recovery (``smr.node.recovery``)."""

    def report(self) -> dict[str, Any]: ...
    def local_health(self) -> int: ...


class SnapshotsReport(Protocol):
    """What the status asks of the snapshots (``smr.node.snapshots``)."""

    @property
    def sending(self) -> int: ...
    def report(self) -> dict[str, float]: ...


class WriterRegistry(Protocol):
    """What the control asks of the reducer (``smr.node.reducer.Reducer``)."""

    def register_writer(self, mapper: MapperId) -> None: ...


class ControlNode(NodeBasics, Protocol):
    """What the control uses of the node (``smr.node.core.NodeCore``): nearly all of it, to
    report it; it changes only the loss ledger (an operator's acceptance)."""

    @property
    def incarnation(self) -> Incarnation: ...
    @property
    def roles(self) -> bytes: ...
    @property
    def secondaries(self) -> tuple[NodeId, ...]: ...
    @property
    def slot_bits(self) -> int: ...
    @property
    def cluster_info(self) -> dict[str, Any]: ...
    @property
    def transport_counters(self) -> Callable[[], dict[str, int]]: ...
    @property
    def tuples_per_s(self) -> float: ...
    @property
    def store(self) -> StateStore: ...
    @property
    def ledger(self) -> LossLedger: ...
    @property
    def output(self) -> OutputSink: ...
    @property
    def disk(self) -> DiskState | None: ...
    @property
    def load(self) -> LoadMeter: ...
    @property
    def ingest(self) -> Ingest: ...
    @property
    def handoff(self) -> Handoff: ...
    @property
    def retirement(self) -> Retirement: ...
    @property
    def restart(self) -> RestartExchange: ...
    @property
    def membership(self) -> ReadLeases: ...
    @property
    def moves(self) -> OperatorMoves: ...
    @property
    def replication(self) -> ReplicationReport: ...
    @property
    def checkpoints(self) -> CheckpointAge: ...
    @property
    def recovery(self) -> RecoveryReport: ...
    @property
    def snapshots(self) -> SnapshotsReport: ...
    @property
    def reducer(self) -> WriterRegistry: ...
    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None: ...
    def utilization(self) -> float: ...


log = logging.getLogger("smr.node")

# A dump page holds at most this many keys, so one reply stays well under the frame cap.
DUMP_KEYS_PER_PAGE_MAX: Final = 20_000
# A query of many keys names at most this many (a client splits a longer list).
QUERY_KEYS_MAX: Final = 10_000


class Control:
    """The answers to control requests, and the node's status report."""

    def __init__(self, node: ControlNode) -> None:
        self._node = node
        self.reads_unleased = 0
        """Reads answered as a non-owner because the read lease had run out."""

    def _serves_reads(self) -> bool:
        """True if this node may answer reads as its slots' primary now (its read lease
        holds); else the refusal is counted."""
        if self._node.membership.holds_read_lease():
            return True
        self.reads_unleased += 1
        return False

    def on_ping(self, identity: bytes, message: Ping) -> None:
        """PONG with this node's id."""
        node = self._node
        node.reply(identity, encode(Pong(message.req, node.node_id)))

    def on_view_request(self, identity: bytes, message: ViewRequest) -> None:
        """This node's view."""
        node = self._node
        view_body = pack_body(node.view.to_wire())
        node.reply(identity, encode(ViewReply(message.req, node.view.epoch, view_body)))

    def on_status_request(self, identity: bytes, message: StatusRequest) -> None:
        """This node's :meth:`status`."""
        body = pack_body(self.status())
        self._node.reply(identity, encode(StatusReply(message.req, body)))

    def on_dump_request(self, identity: bytes, message: DumpRequest) -> None:
        """One page of the state of slots ``[start, end)``, served in order while this node
        is their primary: the page ends between slots, when it holds ``max_keys`` keys or at
        the first slot this node is not primary of or that is lost (``node.ledger``), and
        ``next`` names that slot (None when the page reached ``end``), so the reader knows
        exactly what it read. A lost slot is never served as empty: the reply names the run
        of lost slots there (``lost``), and the reader decides."""
        node = self._node
        max_keys = min(max(message.max_keys, 1), DUMP_KEYS_PER_PAGE_MAX)
        end = min(message.end, 1 << node.slot_bits)
        # Without the read lease, this node is primary of nothing it may serve.
        roles = node.roles if self._serves_reads() else bytes(len(node.roles))
        ledger = node.ledger
        entries: list[tuple[int, Any, dict[str, Any]]] = []
        next_slot: Slot | None = None
        for slot in range(message.start, end):
            # A page ends between slots, never inside one, so a slot is never split.
            if len(entries) >= max_keys or roles[slot] != Role.PRIMARY or ledger.is_lost(slot):
                next_slot = Slot(slot)
                break
            entries.extend(node.store.items([Slot(slot)]))
        lost_until: Slot | None = None
        if next_slot is not None and roles[next_slot] == Role.PRIMARY and ledger.is_lost(next_slot):
            after = next_slot + 1
            while after < end and roles[after] == Role.PRIMARY and ledger.is_lost(Slot(after)):
                after += 1
            lost_until = Slot(after)
        try:
            body = pack_body(entries)
        except Exception:  # msgpack raises several types; find the key to name
            self._refuse_unencodable(identity, message.req, entries)
            return
        node.reply(identity, encode(DumpReply(message.req, next_slot, lost_until, body)))

    def on_output_request(self, identity: bytes, message: OutputRequest) -> None:
        """This node's output lines from ``offset`` (``smr.output.files.OutputSink.read``), or
        those of node ``of`` from its file on this node's disk (``read_of``); ERROR if the
        offset is past the end of the file, or this node holds no such file."""
        node = self._node
        output = node.output
        try:
            if message.of is None:
                lines, next_offset, size = output.read(message.offset, message.max_bytes)
            else:
                lines, next_offset, size = output.read_of(
                    message.of, message.offset, message.max_bytes
                )
        except (OutputGone, OutputMissing, OSError) as error:
            node.reply(identity, encode(Error(message.req, str(error))))
            return
        node.reply(identity, encode(OutputReply(message.req, next_offset, size, lines)))

    def on_recover_request(self, identity: bytes, message: RecoverRequest) -> None:
        """An operator accepts the loss of this node's offline slots: they serve again, from
        empty state (the acceptance replicates with the slots' hwm vectors)."""
        node = self._node
        roles = node.roles
        mine = [slot for slot in node.ledger.slots if roles[slot] == Role.PRIMARY]
        accepted = node.ledger.accept(node.store, mine)
        node.counters.slots_loss_accepted += accepted
        if accepted:
            log.warning(
                "an operator accepted the loss of %d slots: they serve again, empty", accepted
            )
        node.reply(identity, encode(RecoverReply(message.req, accepted)))

    def on_move_request(self, identity: bytes, message: MoveRequest) -> None:
        """An operator asks this node to move part of its range to its clockwise neighbour,
        or all of it (a leave): start the move (``smr.node.moves``) and say what moves, or
        why it cannot."""
        node = self._node
        keep_share: float | None = None
        if not message.leave:
            if not 0 < message.fraction_ppm < 1_000_000:
                text = f"the fraction to move must be in (0, 1), got {message.fraction_ppm / 1e6}"
                node.reply(identity, encode(MoveReply(message.req, False, text)))
                return
            keep_share = 1.0 - message.fraction_ppm / 1_000_000
        try:
            text = node.moves.start(keep_share)
        except MoveRefused as refused:
            node.reply(identity, encode(MoveReply(message.req, False, str(refused))))
            return
        node.reply(identity, encode(MoveReply(message.req, True, text)))

    def on_join_request(self, identity: bytes, message: JoinRequest) -> None:
        """An operator asks this standby node to join beside ``message.beside``
        (``smr.node.joins``): start, and say so, or why not."""
        node = self._node
        try:
            text = node.moves.joining().request(NodeId(message.beside))
        except MoveRefused as refused:
            node.reply(identity, encode(MoveReply(message.req, False, str(refused))))
            return
        node.reply(identity, encode(MoveReply(message.req, True, text)))

    def on_query_request(self, identity: bytes, message: QueryRequest) -> None:
        """The state of one key, or of each of a list of keys (at most
        ``QUERY_KEYS_MAX``), with whether this node is its primary (``owner``): the state
        is read only where it is, so each answer is the key's state as of one apply turn.
        A key of a lost slot (``node.ledger``) is answered ``lost``, never as empty."""
        node = self._node
        asked = unpack_body(message.body)
        keys = list(asked) if isinstance(asked, tuple) else [asked]
        if len(keys) > QUERY_KEYS_MAX:
            raise FrameError(f"a query asks for at most {QUERY_KEYS_MAX} keys, not {len(keys)}")
        for key in keys:
            if type(key) not in (str, int):
                raise FrameError(f"query key must be str or int, got {type(key).__name__}")
        answers: list[dict[str, Any]] = []
        leased = self._serves_reads()
        for key in keys:
            slot = slot_of(key, node.slot_bits)
            owner = leased and node.roles[slot] == Role.PRIMARY
            lost = owner and node.ledger.is_lost(Slot(slot))
            state = node.store.get(slot, key) if owner and not lost else None
            answers.append({"owner": owner, "slot": slot, "state": state, "lost": lost})
        try:
            body = pack_body(answers if isinstance(asked, tuple) else answers[0])
        except Exception:  # msgpack raises several types
            entries = [(a["slot"], k, a["state"] or {}) for k, a in zip(keys, answers, strict=True)]
            self._refuse_unencodable(identity, message.req, entries)
            return
        node.reply(identity, encode(QueryReply(message.req, body)))

    def on_history_request(self, identity: bytes, message: HistoryRequest) -> None:
        """What this node holds of a mapper in the slots it is primary of, by its own view:
        how many have its hwm and the highest, its last seq if it finished, and how many
        are lost (``smr.client.history`` asks every owner, to tell a used mapper id). Every
        writer of a windowed job asks before its first tuple: the ask registers it with the
        job's windows (``Reducer.register_writer``)."""
        node = self._node
        own = node.ring.range_of(node.node_id) or SlotRange(Slot(0), 0, 1 << node.slot_bits)
        node.reducer.register_writer(message.mapper)
        hwms = node.store.hwms_of(message.mapper)
        mine = [seq for slot, seq in hwms.items() if own.contains(slot)]
        reply = HistoryReply(
            message.req,
            own.start,
            own.length,
            slots=len(mine),
            seq_max=max(mine, default=0),
            last=node.retirement.last_of(message.mapper),
            lost=node.ledger.count_where(own.contains),
        )
        node.reply(identity, encode(reply))

    def _refuse_unencodable(
        self, identity: bytes, req: RequestId, entries: list[tuple[int, Any, dict[str, Any]]]
    ) -> None:
        """Answer ERROR naming the first key whose state cannot be encoded in a reply (a
        state stored before values were checked after reduce, see smr.values)."""
        reason = "a state cannot be encoded"
        for slot, key, state in entries:
            try:
                pack_body(state)
            except Exception as error:
                reason = (
                    f"the state of key {key!r} (slot {slot}) cannot be encoded: "
                    f"{type(error).__name__}: {error}"
                )
                break
        self._node.reply(identity, encode(Error(req, reason)))

    def under_replicated_slots(self) -> int:
        """Slots of this node's range with fewer than ``r`` complete copies elsewhere: all of
        them while a snapshot to a secondary is in flight or a secondary is missing."""
        node = self._node
        own_range = node.ring.range_of(node.node_id)
        replication = node.settings.replication
        if own_range is None or replication == 0:
            return 0
        missing = replication - len(node.secondaries) + node.snapshots.sending
        return own_range.length if missing > 0 else 0

    def status(self) -> dict[str, Any]:
        """A snapshot of the node for ``smr status``: ring position, load and counters."""
        node = self._node
        own_range = node.ring.range_of(node.node_id)
        member = node.view.get(node.node_id)
        now = node.clock()
        moves = node.moves.report()
        backlog = node.ingest.backlog()
        return {
            "node": node.node_id,
            "pid": os.getpid(),
            **node.cluster_info,
            "role": _role(node.counters.fenced, own_range is not None),
            # Only an owner's token places it: a standby keeps its old token in the view,
            # which the node that took its range over now holds too.
            "token": member.token if member and own_range is not None else None,
            "range_share": own_range.share if own_range else 0.0,
            "slots_owned": own_range.length if own_range else 0,
            "keys": node.store.key_count(),
            "tuples_per_s": round(node.tuples_per_s, 1),
            "utilization": round(node.utilization(), 3),
            "apply_rate_cap_per_s": node.settings.apply_rate_cap_per_s,
            "balance_above": node.settings.balance_above,
            "epoch": node.view.epoch,
            # Restored from disk and still exchanging views (smr.node.restart).
            "restart_settling": node.restart.settling,
            **node.ingest.report(),
            "rss_bytes": psutil.Process().memory_info().rss,
            "incarnation": node.incarnation,
            "status_in_view": member.status.value if member else None,
            # The members this node's view marks dead: the ring took them over, so tools
            # waiting for every node to answer (smr.cluster.ring_ops) do not wait for them.
            "dead_in_view": sorted(
                m.node_id for m in node.view.members.values() if m.status is Status.DEAD
            ),
            "zone": member.zone if member else "",
            # The ranges a whole zone's loss would take with it (ring.zones), as this node's
            # view places them.
            "one_zone_ranges": one_zone_ranges(node.ring, node.settings.replication),
            "secondaries": list(node.secondaries),
            "backup_bytes": node.replication.backup_bytes,
            # Dedup memory: one entry per (mapper, slot) ever written, here and in copies.
            "hwm_entries": node.store.hwm_entries() + node.replication.hwm_entries(),
            # Finished mappers (smr.node.retirement).
            **node.retirement.report(),
            # The state on disk, with --data-dir (smr.node.disk).
            **(node.disk.report() if node.disk is not None else {}),
            # The output table, if the cluster writes to one (smr.output.table).
            "output_records": node.output.records_written,
            **(table.report() if (table := node.output.table) is not None else {}),
            "under_replicated_slots": self.under_replicated_slots(),
            **node.snapshots.report(),
            "checkpoint_age_s": node.checkpoints.checkpoint_age_s(now),
            "apply_seconds": node.load.apply_seconds(),
            **node.recovery.report(),
            "offline_slots": node.ledger.count(),
            # Reads answered as a non-owner for want of the read lease (ring.lease), and
            # how long the lease still runs (None: no secondary watches this node).
            "reads_unleased": self.reads_unleased,
            "read_lease_ms": node.membership.read_lease_ms(),
            # The state this node served before it was fenced, kept for a taker that found
            # slots of it lost (smr.node.handoff).
            "holds_fenced_copy": node.handoff.holds_copy,
            "busy": backlog.behind,
            "moves": moves,
            "moves_under_way": len(moves["under_way"]),
            "load": node.load.report(own_range),
            "inbox_tuples": backlog.tuples,
            "local_health": node.recovery.local_health(),
            # What the last heartbeat of each peer that beats to this node said of its load
            # (a stalled peer's own status cannot answer: this shows it busy or stuck).
            "peers": node.membership.peer_loads(now),
            **vars(node.counters),
            **node.transport_counters(),
        }


def _role(times_fenced: int, owns_a_range: bool) -> str:
    """What a node does now: ``serving`` (it owns a range), ``fenced`` (it was marked dead
    while alive and rejoined empty, owning nothing), ``standby`` (it owns nothing)."""
    if owns_a_range:
        return "serving"
    return "fenced" if times_fenced else "standby"
