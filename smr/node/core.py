"""The reducer node's logic, with no I/O of its own: the state its roles share, and its two
entry points, "a message arrived" (:meth:`NodeCore.receive_turn`, which reads messages
through :meth:`NodeCore.on_frames`) and "a timer fired" (:meth:`NodeCore.on_timer`).

The real process loop (:mod:`smr.node.loop`) and the simulation (:mod:`smr.sim`) both drive
a node through these two and nothing else; they supply the messages, the clock and the
links (:class:`smr.transport.links.NodeLinks`) the node sends through.

The roles, one module each: :mod:`~smr.node.ingest` (channels, inbox, apply, acks),
:mod:`~smr.node.replication` (tuple backup, replicas), :mod:`~smr.node.checkpoints` (the
checkpoint cycle), :mod:`~smr.node.snapshots`, :mod:`~smr.node.membership` (view, gossip,
repair), :mod:`~smr.node.recovery` (detection; takeover and fencing in
:mod:`~smr.node.takeover`), :mod:`~smr.node.control` (queries and status),
:mod:`~smr.node.reducer` (the user's reduce, wrapped). Which role serves a message is
:mod:`~smr.node.dispatch`'s; the order of a turn's work, :mod:`~smr.node.turn`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from enum import Enum
from typing import Any, Final

from smr.api import Job
from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.balance import BalanceConfig, Balancer
from smr.node.checkpoints import CheckpointCycle
from smr.node.control import Control
from smr.node.disk import DiskState
from smr.node.dispatch import dispatch
from smr.node.handoff import Handoff
from smr.node.ingest import Ingest
from smr.node.load import LoadMeter
from smr.node.membership import Membership
from smr.node.moves import Moves
from smr.node.ports import CorePeers, CoreViewChanges, Peers, Seat, ViewChanges
from smr.node.recovery import Recovery
from smr.node.reducer import Reducer
from smr.node.replication import Replication
from smr.node.restart import RestartExchange
from smr.node.retirement import Retirement
from smr.node.settings import NodeCounters, NodeSettings
from smr.node.snapshots import Snapshots
from smr.node.throttle import Throttle
from smr.node.turn import Receive, has_work, receive_turn
from smr.output.files import OutputSink
from smr.ring.ids import Epoch, Incarnation, NodeId
from smr.ring.invariants import InvariantViolation
from smr.ring.placement import Ring
from smr.ring.view import Status, View
from smr.transport.links import NodeLinks
from smr.wire.codec import decode, encode
from smr.wire.kinds import FRAME_BYTES_MAX_DEFAULT, FrameError
from smr.wire.messages import (
    Batch,
    JoinRequest,
    MapperDone,
    MoveRequest,
    Ping,
    RecoverRequest,
)
from smr.wire.peer import (
    Gossip,
    PeerMessages,
)
from smr.wire.reads import DumpRequest, HistoryRequest, QueryRequest

log = logging.getLogger("smr.node")
# What a node restored from disk leaves unanswered until its view settles
# (smr.node.restart, step 3): everything a stale view would answer wrongly. Status and view
# requests are answered (an operator sees the node settling).
HELD_WHILE_SETTLING: Final = (
    Batch,
    Ping,
    MapperDone,
    DumpRequest,
    QueryRequest,
    HistoryRequest,
    RecoverRequest,
    MoveRequest,
    JoinRequest,
)

# How often the tick timer runs: heartbeats, failure detection, rates, output flush.
TICK_MS = 100


class Timer(Enum):
    """The node's timers (docs/design/architecture.md#state and #failures)."""

    # Every min(TICK_MS, heartbeat_interval_ms / 2): heartbeats, detection, rates, output.
    TICK = "tick"
    # Every checkpoint_interval_ms: the checkpoint cycle.
    CHECKPOINT = "checkpoint"


class NodeCore:
    """One reducer node: its view and ring position, its state, and its roles.

    Guarantees: a batch is acked only after all its tuples were applied (or found to be
    duplicates, or failed in the reducer and were logged); a tuple is applied at most once
    per slot state (hwm); a malformed message never changes state or stops the node.
    ``store``, when given, is the node's state restored from disk (``smr.node.disk``): the
    cluster is then not new, and no copy counts as covered until its snapshot arrives
    (``restored_from_crash``: that disk held no clean stop, ``smr.node.restart``).
    """

    # The roles built with the core itself (seen through each one's protocol): declared here,
    # since checking the core against a protocol needs their types before they are built.
    checkpoints: CheckpointCycle
    replication: Replication
    snapshots: Snapshots
    membership: Membership
    recovery: Recovery
    moves: Moves
    control: Control

    def __init__(
        self,
        node_id: NodeId,
        job: Job,
        view: View,
        slot_bits: int,
        links: NodeLinks,
        output: OutputSink,
        clock: Callable[[], float] = time.monotonic,
        frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT,
        settings: NodeSettings = NodeSettings(),
        store: StateStore | None = None,
        restored_from_crash: bool = False,
    ) -> None:
        self.job = job
        self.slot_bits = slot_bits
        self.settings = settings
        # What the node process started from, for clients that know only a seed address
        # (``smr.client.seeds.spec_from_seeds``): the cluster spec as JSON and the output's address.
        self.cluster_info: dict[str, Any] = {}
        # What the process's transport counts beside the node (refused handshakes), for
        # status; the node process sets it (smr.node.loop).
        self.transport_counters: Callable[[], dict[str, int]] = dict
        self.clock = clock
        self._links = links
        self._frame_bytes_max = frame_bytes_max
        member = view.get(node_id)
        incarnation = member.incarnation if member else Incarnation(1)
        # This node's place (smr.node.ports.Seat): node_id, incarnation, view, ring, roles,
        # predecessors, secondaries and replicas_wire read it; set_view makes the next one.
        self._seat = Seat(node_id, incarnation, View(), Ring(View(), slot_bits))
        self.peers: Peers = CorePeers(self)
        self.view_changes: ViewChanges = CoreViewChanges(self)
        self.store = StateStore() if store is None else store
        # The slots of the store lost beyond tolerance and not accepted yet: read from the
        # store's loss marks, so a restored store brings its losses back (checkpoint.loss).
        self.ledger = LossLedger()
        self.ledger.rebuild(self.store)
        self.counters = NodeCounters()
        self.tuples_per_s = 0.0
        self.load = LoadMeter(clock)
        # When this node last finished reading its messages (clock time): what it knows of
        # its peers is as of then. A loop that stalled (a slow reduce call) has not read what
        # arrived meanwhile: its failure detector waits to read again before it judges, and
        # its heartbeat thread beats for it (Recovery.judge, StalledLoopBeats).
        self.read_at = clock()
        self._rate_mark = (clock(), 0)
        self._bad_frame_logged_at: dict[bytes, float] = {}
        self._handler_error_log = Throttle()
        # The output sink (smr.output), the reducer's and the roles' that make it durable.
        self.output = output
        self.reducer = Reducer(job, output, clock, settings.window_idle_timeout_ms)
        # A node restored from disk exchanges views with its peers before it serves.
        self.restart = RestartExchange(
            node_id, settings, restored=store is not None, crashed=restored_from_crash
        )
        self._wire_roles()
        self.disk: DiskState | None = None
        """The node's state files, with ``--data-dir`` (``smr.node.disk``); set by the loop."""
        self.set_view(view)
        if store is None:
            # A new cluster: every predecessor starts empty too. A restored one (a restart
            # from disk) does not: its copies count as covered once its snapshots arrive.
            self.replication.cover_initial_ranges()

    def _wire_roles(self) -> None:
        """Build the roles, each handed what it uses (``smr.node.ports``); a role asks those
        built before it, so the order matters."""
        clock, settings = self.clock, self.settings
        self.checkpoints = CheckpointCycle(self)
        self.replication = Replication(self)
        self.snapshots = Snapshots(self)
        self.membership = Membership(self)
        self.recovery = Recovery(self)
        self.handoff = Handoff(
            self.seat,
            self.peers,
            clock,
            settings,
            lambda: self.store,
            self.ledger,
            self.counters,
            self.snapshots,
        )
        self.moves = Moves(self)
        above = self.settings.balance_above
        self.balancer = (
            Balancer(self.seat, lambda: self.utilization(), self.moves, BalanceConfig(above))
            if above is not None
            else None
        )
        self.control = Control(self)
        self.retirement = Retirement(
            self.seat, self.peers, clock, settings, lambda: self.store, self.moves
        )
        self.ingest = Ingest(
            self.seat,
            self.peers,
            clock,
            settings,
            self.counters,
            lambda: self.store,
            self.ledger,
            self.reducer,
            self.load,
            self.output,
            moves=self.moves,
            retirement=self.retirement,
            replication=self.replication,
        )

    # -- the seat ---------------------------------------------------------------------------

    def seat(self) -> Seat:
        """This node's place as of now (``smr.node.ports.Seat``)."""
        return self._seat

    @property
    def node_id(self) -> NodeId:
        return self._seat.node_id

    @property
    def incarnation(self) -> Incarnation:
        return self._seat.incarnation

    @incarnation.setter
    def incarnation(self, incarnation: Incarnation) -> None:
        self._seat = replace(self._seat, incarnation=incarnation)

    @property
    def view(self) -> View:
        """The view this node routes by; derived from it by ``set_view``: the ring, this
        node's role per slot, the nodes it watches and backs up (predecessors) and those
        that back it up (secondaries), and its replica set as batches name theirs."""
        return self._seat.view

    @property
    def ring(self) -> Ring:
        return self._seat.ring

    @property
    def roles(self) -> bytes:
        return self._seat.roles

    @property
    def predecessors(self) -> tuple[NodeId, ...]:
        return self._seat.predecessors

    @property
    def secondaries(self) -> tuple[NodeId, ...]:
        return self._seat.secondaries

    @property
    def replicas_wire(self) -> str:
        return self._seat.replicas_wire

    # -- the view ---------------------------------------------------------------------------

    def set_view(self, view: View) -> None:
        """Route by ``view`` from now on; follow up what it changes for this node.

        1. If it marks this incarnation dead, fence (stop serving, rejoin empty).
        2. Recompute roles, predecessors (watched, backed up) and secondaries.
        3. Split the slots a live predecessor no longer owns (a move) off its replica and
           backup; forget replicas and backups of nodes that are no longer predecessors.
        4. If the secondaries or this node's range changed, send each secondary a snapshot
           of the range (re-replication), then increments as usual.
        5. Settle the moves the view settles (``Moves.follow_view``).
        """
        old_ring = self.ring
        old_range = old_ring.range_of(self.node_id)
        # 1.
        me = view.get(self.node_id)
        if me is not None and me.status is Status.DEAD and me.incarnation == self.incarnation:
            self._seat = replace(self._seat, view=view)
            self.recovery.fence()
            return
        # 2.
        ring = Ring(view, self.slot_bits)
        # Two owners on one token: one of them would own nothing while believing it serves
        # its range (the ring splits ties by node id); only a leaver and the owner that
        # took its range over share one (the leaver owns nothing then).
        tokens = [member.token for member in view.owners() if member.status is not Status.LEAVING]
        if len(set(tokens)) != len(tokens):
            self._seat = replace(self._seat, view=view, ring=ring)
            raise InvariantViolation(f"two owners share a token in view {view!r}")
        r = self.settings.replication
        self._seat = replace(
            self._seat,
            view=view,
            ring=ring,
            roles=bytes(ring.roles_of(self.node_id, r)),
            predecessors=ring.predecessors(self.node_id, r),
        )
        # A joiner backs up the owners it joins beside but judges none of them: only the
        # owners' own secondaries take over.
        owner = self.node_id in self.ring.owners
        self.recovery.detector.watch(self.predecessors if owner else (), self.clock())
        secondaries = (
            self.ring.replica_set_of(self.node_id, r)[1:]
            if self.node_id in self.ring.owners
            else ()
        )
        # 3.
        self.replication.split_moved(old_ring, view)
        self.replication.forget_former_predecessors(view)
        # 4.
        changed_range = self.ring.range_of(self.node_id) != old_range
        self.snapshots.follow_secondaries(secondaries, changed_range)
        replicas_wire = ",".join((self.node_id, *secondaries)) if owner else ""
        self._seat = replace(self._seat, secondaries=secondaries, replicas_wire=replicas_wire)
        # 5.
        self.moves.follow_view()

    # -- sending ------------------------------------------------------------------------------

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None:
        """Answer the sender ``identity``. A lost ack or answer is recovered by the sender's
        resend or retry, so counting it is all there is to do."""
        if not self._links.reply(identity, frames):
            self.counters.replies_dropped += 1

    @property
    def stamp(self) -> tuple[NodeId, Incarnation, Epoch]:
        """What every peer message from this node starts with (``PeerMessage``): its id, its
        incarnation and its view's epoch."""
        return self.node_id, self.incarnation, self.view.epoch

    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool:
        """Send a peer message (made with :attr:`stamp`); False (and counted) if ``peer`` is
        not in the view or its link refused it (queue full)."""
        member = self.view.get(peer)
        frames = encode(message)
        if member is None or not self._links.send(peer, member.addr, frames):
            self.counters.peer_messages_dropped += 1
            return False
        self.counters.peer_bytes_sent += sum(len(frame) for frame in frames)
        return True

    # -- a message arrived -------------------------------------------------------------------

    def on_frames(self, identity: bytes, frames: Sequence[bytes]) -> None:
        """Handle one received message. Never raises on bad input: it is counted and logged.

        A handler that raises anything else is counted too (``handler_errors``) and logged
        at most once a second: one message, whatever it holds, never stops the node
        (docs/design/invariants.md). Only a broken invariant (``InvariantViolation``) propagates,
        since a node must stop loudly rather than go on with state it cannot trust.
        """
        try:
            message = decode(frames, self._frame_bytes_max)
        except FrameError as error:
            self.bad_frame(identity, str(error))
            return
        if self.restart.settling and isinstance(message, HELD_WHILE_SETTLING):
            # Restored from disk and not settled (smr.node.restart, step 3): a request its
            # view would serve is left unanswered (the client retries, the emitter resends).
            self.counters.held_while_settling += 1
            return
        try:
            dispatch(self, identity, message)
        except FrameError as error:
            self.bad_frame(identity, str(error))
        except InvariantViolation:
            raise
        except Exception:
            self.counters.handler_errors += 1
            if self._handler_error_log.due(self.clock()):
                log.exception(
                    "handling %s from peer %s failed (%d handler errors so far)",
                    message.kind.name,
                    identity.hex(),
                    self.counters.handler_errors,
                )

    def bad_frame(self, identity: bytes, reason: str) -> None:
        """Count a malformed message; log it at most once a second per sender."""
        self.counters.bad_frames += 1
        now = self.clock()
        # One log line per peer per second at most: a broken peer must not flood the log.
        if now - self._bad_frame_logged_at.get(identity, -1e9) >= 1.0:
            self._bad_frame_logged_at[identity] = now
            log.warning("bad frame from peer %s: %s", identity.hex(), reason)
            if len(self._bad_frame_logged_at) > 10_000:
                self._bad_frame_logged_at.clear()

    def receive_turn(self, receive: Receive) -> bool:
        """One turn of the receive loop (``smr.node.turn.receive_turn``): read and handle
        messages, apply, ack, send; True if work is left."""
        return receive_turn(self, receive)

    @property
    def has_work(self) -> bool:
        """True while work waits that needs no message (``smr.node.turn.has_work``)."""
        return has_work(self)

    # -- a timer fired -----------------------------------------------------------------------

    def on_timer(self, timer: Timer) -> None:
        """Run the work of ``timer`` (see :class:`Timer`)."""
        if timer is Timer.TICK:
            self.tick()
        else:
            self.checkpoints.start_checkpoint()

    def tick(self) -> None:
        """Periodic work: heartbeats, failure detection, the applied-tuples rate, output.

        0. A node restored from disk sends its restored view to every member once, and
           settles when it has heard its peers' views (``smr.node.restart``, steps 1, 3).
        1. Peers whose connection dropped are suspected at once (probed now, instead of
           after the silence timeout).
        2. A heartbeat to each secondary, every heartbeat interval (``Membership.heartbeat``).
        3. Ask again for snapshots not completed; judge the nearest watched predecessor
           (``Recovery.judge``: probe, take over, or wait for a quorum); ask a node back
           after a false verdict for the state of slots lost here (``Handoff.ask``); the
           timeouts of moves (``Moves.tick``); a busy node's balancing move
           (``Balancer.tick``, when balance is on); finished mappers whose lease ran out
           retired (``Retirement.tick``).
        4. The applied-tuples rate and the load (``LoadMeter.fold``), and the output flushed.
        """
        now = self.clock()
        replicated = self.settings.replication > 0
        # 0. A node restored from disk: its view to every member, once; settle when due.
        for peer in self.restart.peers_to_tell(now, self.view):
            self.peer_send(peer, Gossip(*self.stamp, self.membership.view_body()))
        self.restart.settle_if_done(now, self.view)
        if self.restart.take_settled():
            self.recovery.doubt_restored_state(self.restart.left_out_takers(self.secondaries))
            for peer in self.restart.left_out & set(self.predecessors):
                self.recovery.suspect(peer)  # it will not answer: probe it now
        # 1.
        if replicated:
            giving = self.moves.giving
            joiner = giving.plan.receiver if giving is not None and giving.plan.join else None
            owner = self.node_id in self.ring.owners
            watched = [
                (peer, member.addr)
                for peer in (*(self.predecessors if owner else ()), *filter(None, [joiner]))
                if (member := self.view.get(peer)) is not None
            ]
            for peer in self._links.dropped(watched):
                if peer == joiner:
                    self.moves.joins.joiner_dropped(peer)
                else:
                    self.recovery.suspect(peer)
        # 2.
        self.membership.heartbeat(now)
        # 3.
        if replicated:
            self.snapshots.rerequest(now)
            self.recovery.judge(now, self.read_at)
        self.handoff.ask(now)
        self.moves.tick(now)
        if self.balancer is not None and not self.counters.fenced:
            self.balancer.tick(now)
        self.retirement.tick(now)
        # 4.
        mark_time, mark_count = self._rate_mark
        if now - mark_time >= 1.0:
            self.tuples_per_s = (self.counters.tuples_applied - mark_count) / (now - mark_time)
            self._rate_mark = (now, self.counters.tuples_applied)
            self.load.fold(now)
        self.output.flush()

    # -- reports ------------------------------------------------------------------------------

    def utilization(self) -> float:
        """The share of the node's capacity in use, 0 to 1: its applied rate over its cap
        when it has one (the smaller machine the cap emulates would be that busy), else its
        CPU share of the one core its loop runs on."""
        cap = self.settings.apply_rate_cap_per_s
        if cap is not None:
            return min(1.0, self.tuples_per_s / cap)
        return min(1.0, self.load.cpu_percent / 100)

    def status(self) -> dict[str, Any]:
        """A snapshot of the node for ``smr status`` (see ``Control.status``)."""
        return self.control.status()
