"""The reducer node: one process that owns a range of slots and keeps their state.

:class:`NodeCore` is the node's logic with no I/O of its own: it is handed decoded-or-not
messages and a clock, and talks through a ``reply`` and a ``publish`` callable, so the same
logic runs over ZeroMQ (:func:`serve`) and, in tests, over a simulated transport.
:func:`serve` is the thin shell: asyncio on uvloop, one inbox socket, timers.

Receiving a tuple batch on the channel of emitter stream ``S`` (DESIGN section 4; the
batch's mapper id is the tuples' identity for dedup, the stream names the channel):

1. Re-base: if the header's ``base`` (the oldest batch the emitter still holds for this
   channel) is past the number the node expects, expect ``base``: everything below was
   acked or re-routed by the emitter.
2. A batch numbered below the expected one is a resend: ack cumulatively again, apply nothing.
3. A batch numbered above it means a gap: answer ``NACK expect=k`` (resend from ``k``).
4. The expected batch is decoded and validated; a malformed body is answered with ``ERROR``
   and not accepted (the mapper stops with that message instead of resending forever).
5. If any of its slots is not this node's as primary, the whole batch is refused with
   ``NOT_OWNER`` and the node's view, and the channel does not advance: the mapper re-routes.
6. Otherwise the batch joins the bounded inbox and the channel advances. When the inbox is
   full the node stops reading its socket, so the socket queue and then TCP push back on the
   mappers: backpressure, never a drop.
7. Applying a batch runs ``reduce`` per tuple, skipping tuples with ``seq <= hwm`` (already
   applied); only then is the batch acked (a slow node acks slowly).

A batch whose slots are all backed up here (this node is one of their primary's ``r``
secondaries) is kept as raw bytes in that primary's :class:`TupleBackup` and acked at once;
it is dropped when a checkpoint from the primary covers it (exact eviction, DESIGN section 5).

The other protocols (checkpoint cycle, snapshot, failure detection, takeover, fencing) are
written as numbered steps on the methods that run them: :meth:`NodeCore.checkpoint`,
:meth:`NodeCore._snapshot_steps`, :meth:`NodeCore.tick`, :meth:`NodeCore.take_over`,
:meth:`NodeCore._fence`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Final

import psutil

from checkpoint.backup import BackedUpBatch, CheckpointGap, PeerReplica, TupleBackup, replay_plan
from checkpoint.delta import DeltaError, decode_delta, encode_delta
from checkpoint.ids import MapperId
from checkpoint.store import StateStore
from ring.failure import FailureDetector, Verdict
from ring.hashing import slot_of
from ring.ids import NodeId, Slot
from ring.placement import Ring, Role
from ring.view import Status, View, successor_takes_over
from smr.api import Job, load_job
from smr.cluster import ClusterSpec, read_spec
from smr.output import OutputSink
from smr.protocol import (
    FRAME_BYTES_MAX_DEFAULT,
    Batch,
    FrameError,
    Kind,
    Message,
    StreamId,
    decode,
    decode_batch_body,
    decode_batch_ids,
    encode,
    pack_body,
    unpack_body,
)

log = logging.getLogger("smr.node")

# Decoded batches waiting to be applied. At 1000 tuples a batch this is at most 256k tuples
# (a few tens of MB); past it the node stops reading and the mappers block.
INBOX_BATCHES_MAX: Final = 256
# Tuples applied per event-loop turn before timers get a chance to run: about 20-40 ms of
# work, well under the heartbeat interval, so a busy node never looks dead to its watchers.
APPLY_TUPLES_PER_TURN: Final = 20_000
# A replica still incomplete after this long asks its primary for a snapshot again.
SNAPSHOT_RETRY_S: Final = 2.0
# How often everything allocated so far moves out of the cyclic collector's reach. State is
# millions of small acyclic dicts, which reference counting frees; left in the collector's
# generations, a full collection walks all of them (0.5-1 s at a million keys), long enough
# for the watchers to declare a healthy node dead. Only cyclic garbage that lives longer
# than this interval escapes collection.
GC_FREEZE_INTERVAL_MS: Final = 1000
# How often timers run: rates, output flush, checkpoint due-checks.
TICK_MS: Final = 100
# A dump page holds at most this many keys, so one reply stays well under the frame cap.
DUMP_KEYS_PER_PAGE_MAX: Final = 20_000
# A secondary asks its primaries for an early checkpoint once its tuple backup holds this
# share of backup_bytes_max: early enough that the checkpoint's eviction usually comes before
# the bound, where batches are refused and the mappers slow down.
EARLY_CHECKPOINT_AT_FRACTION: Final = 0.75
# A primary takes at most one early checkpoint per this many seconds (several secondaries
# may ask at once; one checkpoint answers them all).
EARLY_CHECKPOINT_GAP_S: Final = 0.01
# Reducer errors are logged individually up to this many per second, then summarised.
ERROR_LOGS_PER_SECOND: Final = 5

Reply = Callable[[bytes, Sequence[bytes]], bool]
SendToPeer = Callable[[NodeId, Sequence[bytes]], bool]
Publish = Callable[[Sequence[bytes]], None]


@dataclass(frozen=True)
class NodeSettings:
    """A node's tunables; the defaults are DESIGN's."""

    replication: int = 0
    checkpoint_interval_ms: int = 1000
    heartbeat_interval_ms: int = 100
    failure_timeout_ms: int = 500
    probe_timeout_ms: int = 200
    # Extra silence allowed from a node never heard from yet (it may still be starting).
    first_contact_grace_ms: int = 5000
    # Raw batch bytes held for all primaries together. From EARLY_CHECKPOINT_AT_FRACTION of
    # it, the node asks its primaries for an early checkpoint (whose eviction makes room); at
    # the bound, new backup batches are not accepted (not acked) until checkpoints evict old
    # ones: the mappers wait.
    backup_bytes_max: int = 512 * 1024 * 1024
    # Keys per snapshot chunk: bounds how long one chunk keeps the event loop. Measured
    # (bench/snapshot_stall.py, 100 k word-count keys, 2-core machine at load 4-5): a chunk
    # of 5000 keys takes a median 35 ms to send and 25 ms to apply, the worst 70-80 ms
    # (preemption included); 1000 keys, 5 and 3 ms. The longest seen on a node is in its
    # status as snapshot_stall_ms_max.
    snapshot_chunk_keys: int = 5000


@dataclass
class NodeCounters:
    """What a node has done since it started; reported by ``status``."""

    batches: int = 0
    tuples_applied: int = 0
    tuples_duplicate: int = 0
    tuples_failed: int = 0
    batches_resent_to_us: int = 0
    gaps: int = 0
    not_owner: int = 0
    bad_frames: int = 0
    replies_dropped: int = 0
    checkpoints: int = 0
    backup_batches: int = 0
    backup_refused_full: int = 0
    checkpoints_applied: int = 0
    # As a secondary: early checkpoints asked for; as a primary: early checkpoints taken.
    checkpoints_requested: int = 0
    checkpoints_early: int = 0
    snapshots_sent: int = 0
    snapshots_received: int = 0
    # Snapshots aborted on arrival because a chunk of them was missing (then asked again).
    snapshot_chunks_missing: int = 0
    takeovers: int = 0
    tuples_replayed: int = 0
    peer_messages_dropped: int = 0
    fenced: int = 0
    # Probe rounds that ended without an answer and without a quorum (see NodeCore.tick).
    quorum_missed: int = 0


@dataclass(frozen=True)
class _Orphan:
    """A copy of a dead node's state and tuples: kept until ``absorber``, which took over its
    range, has re-replicated that range to us, and promoted if ``absorber`` dies first."""

    absorber: NodeId
    replica: PeerReplica
    backup: TupleBackup | None


@dataclass(frozen=True)
class _Pending:
    """A batch accepted into the inbox, waiting to be applied and acked. A backed-up batch
    (``batch`` None) is already stored; it waits only so that acks keep channel order."""

    identity: bytes
    stream: StreamId
    mapper: MapperId
    chan: int
    batch: Batch | None


class NodeCore:
    """The reducer node's logic: channels, ownership, the inbox, state and output.

    Guarantees: a batch is acked only after all its tuples were applied (or found to be
    duplicates, or failed in the reducer and were logged); a tuple is applied at most once
    per slot state (hwm); a malformed message never changes state or stops the node.
    """

    def __init__(
        self,
        node_id: NodeId,
        job: Job,
        view: View,
        slot_bits: int,
        reply: Reply,
        output: OutputSink,
        clock: Callable[[], float] = time.monotonic,
        frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT,
        settings: NodeSettings = NodeSettings(),
        send_to_peer: SendToPeer = lambda node, frames: False,
    ) -> None:
        self.node_id = node_id
        self.job = job
        self.slot_bits = slot_bits
        self.settings = settings
        self.replication = settings.replication
        self._send_to_peer = send_to_peer
        member = view.get(node_id)
        self.incarnation = member.incarnation if member else 1
        self.store = StateStore()
        # As a secondary: a replica of each predecessor's state and its backed-up batches.
        self.replicas: dict[NodeId, PeerReplica] = {}
        self.backups: dict[NodeId, TupleBackup] = {}
        # Copies of dead predecessors whose ranges a live predecessor absorbed and is still
        # re-replicating to us (see _set_view step 3).
        self.orphans: dict[NodeId, _Orphan] = {}
        # As a primary: the checkpoint counter, the secondaries, pending snapshot sends.
        self.checkpoint_number = 0
        self.secondaries: tuple[NodeId, ...] = ()
        self._snapshot_jobs: dict[NodeId, Iterator[None]] = {}
        # Snapshot chunks applied since the event loop last yielded (see turn_is_full).
        self._chunks_this_turn = 0
        self.detector = FailureDetector(
            settings.failure_timeout_ms / 1000,
            settings.probe_timeout_ms / 1000,
            first_contact_grace_s=settings.first_contact_grace_ms / 1000,
        )
        self.predecessors: tuple[NodeId, ...] = ()
        self._last_heartbeat = -1e9
        self._snapshot_asked_at: dict[NodeId, float] = {}
        # Early checkpoints: when each primary was last asked for one, and (as a primary)
        # when the last one was taken.
        self._checkpoint_asked_at: dict[NodeId, float] = {}
        self._early_checkpoint_at = -1e9
        # Snapshots: the number of the last one this node began sending, and per primary the
        # one being received here with the index of the next chunk expected.
        self._snapshot_ids = 0
        self._snapshot_receiving: dict[NodeId, tuple[int, int]] = {}
        # View repair: the last (epoch, time) this node's view was sent to each peer.
        self._view_sent_at: dict[NodeId, tuple[int, float]] = {}
        self._view_body_cache: tuple[int, bytes] = (-1, b"")
        self._probe_ids = 0
        self._no_quorum_logged_at = -1e9
        # Per peer whose connection dropped: the id of the probe sent then (see suspect).
        self._drop_probe_req: dict[NodeId, int] = {}
        # One record per takeover, for `status` and the recovery benchmark (bounded).
        self.takeover_records: deque[dict[str, Any]] = deque(maxlen=64)
        self.counters = NodeCounters()
        # The longest a snapshot chunk held the event loop, in ms of wall time: a step of a
        # snapshot being sent (choosing, reading, encoding and sending one chunk), or
        # decoding and applying a received one. Wall time even under a simulated clock: it
        # measures the work itself (and is left out of the simulation's fingerprint).
        self.snapshot_stall_ms_max = 0.0
        self.inbox: deque[_Pending] = deque()
        self.inbox_peak = 0
        self._reply = reply
        self._output = output
        self._clock = clock
        self._frame_bytes_max = frame_bytes_max
        self._expected: dict[StreamId, int] = {}
        # Channels owed a cumulative ack, and per stream the last batch number processed
        # (applied or backed up) in channel order: the only number an ack may carry.
        self._acks: set[tuple[bytes, StreamId]] = set()
        self._processed: dict[StreamId, int] = {}
        self._bad_frame_logged_at: dict[bytes, float] = {}
        self._error_log_window_start = 0.0
        self._error_logs_in_window = 0
        self._errors_unlogged = 0
        self._rate_mark = (clock(), 0)
        self.tuples_per_s = 0.0
        self.view = View()
        self.ring: Ring = Ring(self.view, slot_bits)
        self._reduce_fn = self._make_reduce_fn()
        self._set_view(view)

    # -- view -------------------------------------------------------------------------------

    def _set_view(self, view: View) -> None:
        """Route by ``view`` from now on; follow up what it changes for this node.

        1. If it marks this incarnation dead, fence (stop serving, rejoin empty).
        2. Recompute roles, predecessors (watched, backed up) and secondaries.
        3. Forget replicas and backups of nodes that are no longer predecessors.
        4. If the secondaries or this node's range changed, send each secondary a snapshot
           of the range (re-replication), then increments as usual.
        """
        old_range = self.ring.range_of(self.node_id)
        # 1.
        me = view.get(self.node_id)
        if me is not None and me.status is Status.DEAD and me.incarnation == self.incarnation:
            self.view = view
            self._fence()
            return
        # 2.
        self.view = view
        self.ring = Ring(view, self.slot_bits)
        r = self.replication
        self.roles = self.ring.roles_of(self.node_id, r)
        self.predecessors = self.ring.predecessors(self.node_id, r)
        self.detector.watch(self.predecessors, self._clock())
        secondaries = (
            self.ring.replica_set_of(self.node_id, r)[1:]
            if self.node_id in self.ring.owners
            else ()
        )
        # 3. A predecessor that died and whose range another predecessor absorbed stays as
        #    an orphan copy until that node's snapshot to us ends: until then it is the only
        #    copy of that range we hold.
        for node in list(self.replicas):
            if node not in self.predecessors:
                replica = self.replicas.pop(node)
                self._snapshot_receiving.pop(node, None)
                backup = self.backups.pop(node, None)
                member = view.get(node)
                if member is not None and member.status is Status.DEAD and self.ring.owners:
                    absorber = self.ring.primary(Slot(member.token))
                    if absorber in self.predecessors:
                        self.orphans[node] = _Orphan(absorber, replica, backup)
        for node in list(self.orphans):
            if self.orphans[node].absorber not in self.predecessors:
                del self.orphans[node]
        # 4.
        new_range = self.ring.range_of(self.node_id)
        changed_range = new_range != old_range
        for node in secondaries:
            if changed_range or node not in self.secondaries:
                self._snapshot_jobs[node] = self._snapshot_steps(node)
        for node in list(self._snapshot_jobs):
            if node not in secondaries:
                del self._snapshot_jobs[node]
        self.secondaries = secondaries

    def merge_view(self, incoming: View) -> bool:
        """Merge a view heard from a peer or a client; True if it brought news."""
        merged = self.view.merge(incoming)
        if merged.epoch == self.view.epoch:
            return False
        self._set_view(merged)
        self._gossip()
        return True

    # -- messages ---------------------------------------------------------------------------

    @property
    def inbox_full(self) -> bool:
        """True when the node must stop reading its socket (backpressure)."""
        return len(self.inbox) >= INBOX_BATCHES_MAX

    @property
    def turn_is_full(self) -> bool:
        """True when this event-loop turn must stop reading messages: the inbox is full, or a
        snapshot chunk was applied (tens of ms each; chunks that arrive back to back, read in
        one turn, would hold off heartbeats and probes for seconds)."""
        return self.inbox_full or self._chunks_this_turn > 0

    def end_turn(self) -> None:
        """The event loop is about to yield: the next turn may read messages again."""
        self._chunks_this_turn = 0

    def on_frames(self, identity: bytes, frames: Sequence[bytes]) -> None:
        """Handle one received message. Never raises on bad input: it is counted and logged."""
        try:
            message = decode(frames, self._frame_bytes_max)
        except FrameError as error:
            self._bad_frame(identity, str(error))
            return
        handler = self._handlers.get(message.kind)
        if handler is None:
            self._bad_frame(identity, f"{message.kind.name} is not a request a node serves")
            return
        try:
            handler(self, identity, message)
        except FrameError as error:
            self._bad_frame(identity, str(error))

    def _bad_frame(self, identity: bytes, reason: str) -> None:
        self.counters.bad_frames += 1
        now = self._clock()
        # One log line per peer per second at most: a broken peer must not flood the log.
        if now - self._bad_frame_logged_at.get(identity, -1e9) >= 1.0:
            self._bad_frame_logged_at[identity] = now
            log.warning("bad frame from peer %s: %s", identity.hex(), reason)
            if len(self._bad_frame_logged_at) > 10_000:
                self._bad_frame_logged_at.clear()

    def _send(self, identity: bytes, frames: Sequence[bytes]) -> None:
        if not self._reply(identity, frames):
            # Only replies are sent from here; a lost ack or answer is recovered by the
            # sender's resend or retry, so counting it is all there is to do.
            self.counters.replies_dropped += 1

    def _on_batch(self, identity: bytes, message: Message) -> None:
        header = message.header
        stream = StreamId(header["stream"])
        mapper = MapperId(header["mapper"])
        chan: int = header["chan"]
        # 1. Re-base.
        expected = self._expected.get(stream, 0)
        if header["base"] > expected:
            expected = header["base"]
            # Everything below base is resolved for the stream; once nothing of this
            # channel waits in the inbox, acks may say so.
            if not any(p.stream == stream for p in self.inbox):
                self._processed[stream] = max(self._processed.get(stream, 0), expected - 1)
        self._expected[stream] = expected
        # 2. A resend of something already accepted: ack what is processed so far.
        if chan < expected:
            self.counters.batches_resent_to_us += 1
            self._acks.add((identity, stream))
            return
        # 3. A gap.
        if chan > expected:
            self.counters.gaps += 1
            self._send(identity, encode(Kind.NACK, {"stream": stream, "expect": expected}))
            return
        # 4. Decode and validate (the slot and seq columns first: a secondary needs no more).
        try:
            slots, seqs = decode_batch_ids(message.body, header["n"], self.ring.slot_count)
            roles = self.roles
            slot_roles = {roles[slot] for slot in set(slots)}
            batch = None
            if slot_roles == {Role.PRIMARY}:
                batch = decode_batch_body(message.body, header["n"], self.ring.slot_count)
        except FrameError as error:
            self._bad_frame(identity, f"batch {chan} from {mapper} on {stream}: {error}")
            self._send(identity, encode(Kind.ERROR, {"req": None, "message": str(error)}))
            return
        # 5. Ownership: primary of every slot, or secondary of every slot, or refuse.
        if slot_roles == {Role.SECONDARY}:
            self._back_up(identity, stream, mapper, chan, message.body, slots, seqs)
            return
        if batch is None:
            self.counters.not_owner += 1
            header_out = {"stream": stream, "chan": chan, "epoch": self.view.epoch}
            self._send(identity, encode(Kind.NOT_OWNER, header_out, pack_body(self.view.to_wire())))
            return
        # 6. Accept.
        self.inbox.append(_Pending(identity, stream, mapper, chan, batch))
        self.inbox_peak = max(self.inbox_peak, len(self.inbox))
        self._expected[stream] = chan + 1

    def apply_inbox(self, tuples_max: int = APPLY_TUPLES_PER_TURN) -> None:
        """7. Apply accepted batches in order, about ``tuples_max`` tuples at most (so that
        heartbeats and probes are never held up for long), and mark their channels for a
        cumulative ack."""
        store = self.store
        counters = self.counters
        budget = tuples_max
        while self.inbox and budget > 0:
            pending = self.inbox.popleft()
            self._processed[pending.stream] = pending.chan
            self._acks.add((pending.identity, pending.stream))
            batch = pending.batch
            if batch is None:
                continue
            budget -= len(batch)
            outcome = store.apply_batch(
                pending.mapper, batch.slots, batch.seqs, batch.keys, batch.values, self._reduce_fn
            )
            counters.batches += 1
            counters.tuples_applied += outcome.applied
            counters.tuples_duplicate += outcome.duplicates
            if outcome.failed:
                counters.tuples_failed += outcome.failed
                self._log_reducer_failures(outcome.failed, outcome.failures)
        self._flush_pending_emits()

    def send_acks(self) -> None:
        """Send one cumulative ack per channel that advanced since the last call."""
        if not self._acks:
            return
        epoch = self.view.epoch
        for identity, stream in self._acks:
            through = self._processed.get(stream, 0)
            if not through:
                continue
            self._send(
                identity, encode(Kind.ACK, {"stream": stream, "through": through, "epoch": epoch})
            )
        self._acks.clear()

    # -- secondary: tuple backup and replicas -----------------------------------------------

    def _back_up(
        self,
        identity: bytes,
        stream: StreamId,
        mapper: MapperId,
        chan: int,
        body: bytes,
        slots: Sequence[int],
        seqs: Sequence[int],
    ) -> None:
        """Keep a batch for its primary until a checkpoint covers it; ack it at once.

        The bound (DESIGN section 5), in two steps:

        1. From ``EARLY_CHECKPOINT_AT_FRACTION`` of ``backup_bytes_max``, ask each primary
           whose batches are held here for an early checkpoint (at most once per heartbeat
           interval each): its eviction makes room before the bound is reached.
        2. At ``backup_bytes_max`` the batch is not accepted (the channel does not advance
           and no ack is sent): the mapper resends later, by when checkpoints will have
           evicted older batches. Nothing is dropped.
        """
        primary = self.ring.primary(Slot(slots[0]))
        held_bytes = sum(b.bytes_held for b in self.backups.values())
        bound_bytes = self.settings.backup_bytes_max
        # 1.
        if held_bytes >= EARLY_CHECKPOINT_AT_FRACTION * bound_bytes:
            self._ask_early_checkpoints()
        # 2.
        if held_bytes >= bound_bytes:
            self.counters.backup_refused_full += 1
            return
        replica = self._replica(primary)
        # Seqs rise per slot within a batch, so the last one seen per slot is its highest.
        last_seq_by_slot = dict(zip(slots, seqs, strict=True))
        backed_up = BackedUpBatch(mapper, body, len(slots), last_seq_by_slot)  # type: ignore[arg-type]
        self.backups.setdefault(primary, TupleBackup()).add(backed_up, replica.hwm)
        self.counters.backup_batches += 1
        self._expected[stream] = chan + 1
        # Acked in channel order, after any primary batch of this channel still queued.
        self.inbox.append(_Pending(identity, stream, mapper, chan, None))

    def _ask_early_checkpoints(self) -> None:
        """Ask every primary with batches held here for a checkpoint now (rate-limited)."""
        now = self._clock()
        interval_s = self.settings.heartbeat_interval_ms / 1000
        for primary, backup in self.backups.items():
            if backup.batch_count == 0:
                continue
            if now - self._checkpoint_asked_at.get(primary, -1e9) < interval_s:
                continue
            self._checkpoint_asked_at[primary] = now
            self.counters.checkpoints_requested += 1
            self._peer_send(primary, Kind.CHECKPOINT_REQUEST, {})

    def _on_checkpoint_request(self, identity: bytes, message: Message) -> None:
        """A secondary's backup nears its bound: checkpoint now (at most once per
        ``EARLY_CHECKPOINT_GAP_S``), so that its eviction makes room."""
        sender = self._from_live_peer(message)
        if sender is None or sender not in self.secondaries:
            return
        now = self._clock()
        if now - self._early_checkpoint_at < EARLY_CHECKPOINT_GAP_S:
            return
        self._early_checkpoint_at = now
        self.counters.checkpoints_early += 1
        self.checkpoint()

    def _replica(self, primary: NodeId) -> PeerReplica:
        replica = self.replicas.get(primary)
        if replica is None:
            replica = self.replicas[primary] = PeerReplica()
            self._peer_send(primary, Kind.SNAPSHOT_REQUEST, {})
        return replica

    def _peer_send(
        self, node: NodeId, kind: Kind, header: dict[str, Any], body: bytes = b""
    ) -> bool:
        """Send a peer message; False (and counted) if the link refused it (queue full)."""
        frames = encode(
            kind,
            {"from": self.node_id, "inc": self.incarnation, "epoch": self.view.epoch, **header},
            body,
        )
        if not self._send_to_peer(node, frames):
            self.counters.peer_messages_dropped += 1
            return False
        return True

    def _view_body(self) -> bytes:
        """This node's view, encoded (once per epoch)."""
        epoch, body = self._view_body_cache
        if epoch != self.view.epoch:
            body = pack_body(self.view.to_wire())
            self._view_body_cache = (self.view.epoch, body)
        return body

    def _gossip(self) -> None:
        """Send this node's view to every other live member."""
        body = self._view_body()
        for member in self.view.members.values():
            if member.node_id != self.node_id and member.status is not Status.DEAD:
                self._peer_send(member.node_id, Kind.GOSSIP, {}, body)

    def _send_view(self, peer: NodeId) -> None:
        """Send ``peer`` this node's view (a GOSSIP), at most once per heartbeat interval per
        peer and epoch: a burst of messages from a peer with another view (snapshot chunks,
        checkpoints) is answered once, not once per message."""
        now = self._clock()
        epoch, sent_at = self._view_sent_at.get(peer, (-1, -1e9))
        if epoch == self.view.epoch and now - sent_at < self.settings.heartbeat_interval_ms / 1000:
            return
        self._view_sent_at[peer] = (self.view.epoch, now)
        self._peer_send(peer, Kind.GOSSIP, {}, self._view_body())

    def _from_live_peer(self, message: Message, repair: bool = True) -> NodeId | None:
        """The sender of a peer message, or None if it is not a live incarnation in our view
        (then it is sent our view, so that a fenced node learns it was marked dead).

        View repair (both ways, whatever the message): every peer message carries the
        sender's view epoch. If it differs from ours, the sender is sent our view: a sender
        with an older view merges it and catches up; a sender with a newer one finds ours has
        nothing for it and answers with its own (``_on_gossip``), and we catch up. With
        ``repair=False`` the caller does this itself (the message carries a view).
        """
        sender = NodeId(message.header["from"])
        member = self.view.get(sender)
        if (
            member is None
            or member.incarnation != message.header["inc"]
            or member.status is Status.DEAD
        ):
            if member is not None:
                self._send_view(sender)
            return None
        self.detector.heard(sender, self._clock())
        if repair and message.header["epoch"] != self.view.epoch:
            self._send_view(sender)
        return sender

    def _on_heartbeat(self, identity: bytes, message: Message) -> None:
        """A heartbeat is a sign of life and carries its sender's view: merged when the
        epochs differ; if ours is then still not the sender's, ours goes back."""
        sender = self._from_live_peer(message, repair=False)
        if sender is None or message.header["epoch"] == self.view.epoch:
            return
        if message.body:
            try:
                view = View.from_wire(unpack_body(message.body))
            except ValueError as error:
                raise FrameError(f"malformed view in heartbeat: {error}") from None
            self.merge_view(view)
        if message.header["epoch"] != self.view.epoch:
            self._send_view(sender)

    def _on_gossip(self, identity: bytes, message: Message) -> None:
        try:
            view = View.from_wire(unpack_body(message.body))
        except ValueError as error:
            raise FrameError(f"malformed view in gossip: {error}") from None
        sender = NodeId(message.header["from"])
        self.detector.heard(sender, self._clock())
        self.merge_view(view)
        # Repair both ways: a sender whose view is older than ours gets ours back. Merges
        # only grow the epoch, so this stops as soon as both hold the same view.
        if self.view.epoch > view.epoch and sender in self.view.members:
            self._peer_send(sender, Kind.GOSSIP, {}, self._view_body())

    def _on_view_push(self, identity: bytes, message: Message) -> None:
        """A view sent unasked by a client (an emitter whose batch this node refused by an
        older view): merged like gossip."""
        try:
            view = View.from_wire(unpack_body(message.body))
        except ValueError as error:
            raise FrameError(f"malformed view from a client: {error}") from None
        self.merge_view(view)

    def _on_probe(self, identity: bytes, message: Message) -> None:
        sender = NodeId(message.header["from"])
        self._peer_send(sender, Kind.PROBE_ACK, {"req": message.header["req"]})

    def _on_probe_ack(self, identity: bytes, message: Message) -> None:
        sender = self._from_live_peer(message)
        if sender is None:
            return
        req = self._drop_probe_req.get(sender)
        if req is not None and message.header["req"] >= req:
            del self._drop_probe_req[sender]
            self.detector.refuted(sender)

    def _on_checkpoint(self, identity: bytes, message: Message) -> None:
        """A secondary applies a primary's checkpoint, then evicts what it covers."""
        sender = self._from_live_peer(message)
        if sender is None or sender not in self.predecessors:
            return
        try:
            delta = decode_delta(message.body)
        except DeltaError as error:
            raise FrameError(f"checkpoint from {sender}: {error}") from None
        replica = self._replica(sender)
        try:
            applied = replica.apply_checkpoint(message.header["number"], delta)
        except CheckpointGap:
            self._peer_send(sender, Kind.SNAPSHOT_REQUEST, {})
            return
        if applied:
            self.counters.checkpoints_applied += 1
            backup = self.backups.get(sender)
            if backup is not None:
                backup.evict_covered(replica.hwm)

    def _on_snapshot_request(self, identity: bytes, message: Message) -> None:
        sender = self._from_live_peer(message)
        if sender is not None and sender in self.secondaries:
            self._snapshot_jobs[sender] = self._snapshot_steps(sender)

    def _on_snapshot_begin(self, identity: bytes, message: Message) -> None:
        """Receiving a snapshot: 1. begin it, expecting chunk 0 of snapshot ``snap``."""
        sender = self._from_live_peer(message)
        if sender is not None and sender in self.predecessors:
            replica = self.replicas.setdefault(sender, PeerReplica())
            replica.begin_snapshot(message.header["as_of"])
            self._snapshot_receiving[sender] = (message.header["snap"], 0)
            self._snapshot_asked_at[sender] = self._clock()

    def _snapshot_lost_a_part(self, sender: NodeId, replica: PeerReplica) -> None:
        """A chunk of the snapshot from ``sender`` never arrived: abort it (the replica must
        not be promoted or completed with a hole) and ask for a new one at once."""
        self.counters.snapshot_chunks_missing += 1
        replica.abort_snapshot()
        del self._snapshot_receiving[sender]
        self._snapshot_asked_at[sender] = self._clock()
        self._peer_send(sender, Kind.SNAPSHOT_REQUEST, {})

    def _snapshot_being_received(
        self, message: Message
    ) -> tuple[NodeId, PeerReplica, tuple[int, int]] | None:
        """The sender, its replica here and ``(snapshot number, next chunk index)`` when
        ``message`` belongs to the snapshot being received from a live peer; else None (a
        part of another, older or aborted, snapshot is ignored)."""
        sender = self._from_live_peer(message)
        replica = self.replicas.get(sender) if sender is not None else None
        if replica is None or sender is None:
            return None
        receiving = self._snapshot_receiving.get(sender)
        if receiving is None or receiving[0] != message.header["snap"]:
            return None
        return sender, replica, receiving

    def _on_snapshot_chunk(self, identity: bytes, message: Message) -> None:
        """2. Apply chunk ``index`` if it is the next one of the snapshot being received; a
        chunk of another (older, aborted) snapshot is ignored; a skipped index aborts."""
        being_received = self._snapshot_being_received(message)
        if being_received is None:
            return
        sender, replica, receiving = being_received
        if message.header["index"] != receiving[1]:
            self._snapshot_lost_a_part(sender, replica)
            return
        started = time.perf_counter()
        try:
            chunk = decode_delta(message.body)
        except DeltaError as error:
            raise FrameError(f"snapshot chunk from {sender}: {error}") from None
        replica.apply_snapshot_chunk(chunk)
        self._chunks_this_turn += 1
        self._note_snapshot_stall(started)
        self._snapshot_receiving[sender] = (receiving[0], receiving[1] + 1)
        # A snapshot still arriving is not lost: put off asking again.
        self._snapshot_asked_at[sender] = self._clock()

    def _on_snapshot_end(self, identity: bytes, message: Message) -> None:
        """3. Complete the replica if every chunk of the snapshot arrived; else abort."""
        being_received = self._snapshot_being_received(message)
        if being_received is None:
            return
        sender, replica, receiving = being_received
        if message.header["chunks"] != receiving[1]:
            self._snapshot_lost_a_part(sender, replica)
            return
        del self._snapshot_receiving[sender]
        replica.end_snapshot()
        self.counters.snapshots_received += 1
        for name in [n for n, orphan in self.orphans.items() if orphan.absorber == sender]:
            del self.orphans[name]
        backup = self.backups.get(sender)
        if backup is not None:
            backup.evict_covered(replica.hwm)

    # -- primary: checkpoints and snapshots to the secondaries -------------------------------

    def _snapshot_steps(self, secondary: NodeId) -> Iterator[None]:
        """Send ``secondary`` a full snapshot of this node's range, one chunk per step.

        1. SNAPSHOT_BEGIN with ``as_of``, the last checkpoint number already swapped, and
           ``snap``, this snapshot's number.
        2. One SNAPSHOT_CHUNK per ``snapshot_chunk_keys`` keys, numbered from 0: the full
           merged state and hwm vectors of whole slots, read when the chunk is sent;
           checkpoints keep flowing in between, on the same ordered channel, and the
           secondary applies them on top.
        3. SNAPSHOT_END with the number of chunks sent.

        A part the peer link refuses (its queue is full) is sent again on a later step, read
        afresh, never skipped: the secondary must not complete a snapshot with a hole. A
        part lost after it left (a connection reset) shows at the secondary as a skipped
        index or a short count: it aborts the snapshot and asks for a new one.
        """
        self._snapshot_ids += 1
        snap = self._snapshot_ids
        chunks_sent = 0
        # 1.
        while not self._peer_send(
            secondary, Kind.SNAPSHOT_BEGIN, {"as_of": self.checkpoint_number, "snap": snap}
        ):
            yield
        yield
        # 2.
        roles = self.roles
        owned = sorted(s for s in self.store.slots() if roles[s] == Role.PRIMARY)
        chunk: list[Slot] = []
        keys = 0
        for slot in owned:
            chunk.append(slot)
            keys += sum(1 for _ in self.store.items([slot]))
            if keys >= self.settings.snapshot_chunk_keys:
                while not self._send_chunk(secondary, chunk, snap, chunks_sent):
                    yield
                chunks_sent += 1
                chunk, keys = [], 0
                yield
        if chunk:
            while not self._send_chunk(secondary, chunk, snap, chunks_sent):
                yield
            chunks_sent += 1
        # 3.
        while not self._peer_send(
            secondary, Kind.SNAPSHOT_END, {"snap": snap, "chunks": chunks_sent}
        ):
            yield
        self.counters.snapshots_sent += 1

    def _send_chunk(self, secondary: NodeId, slots: list[Slot], snap: int, index: int) -> bool:
        roles = self.roles
        current = [s for s in slots if roles[s] == Role.PRIMARY]
        return self._peer_send(
            secondary,
            Kind.SNAPSHOT_CHUNK,
            {"snap": snap, "index": index},
            encode_delta(self.store.snapshot(current)),
        )

    def _note_snapshot_stall(self, started: float) -> None:
        stall_ms = (time.perf_counter() - started) * 1000
        if stall_ms > self.snapshot_stall_ms_max:
            self.snapshot_stall_ms_max = stall_ms

    @property
    def has_background_work(self) -> bool:
        """True while snapshot chunks wait to be sent."""
        return bool(self._snapshot_jobs)

    def background_step(self) -> None:
        """Send one snapshot chunk per pending snapshot (each step, from choosing the chunk's
        slots to sending it, counts towards ``snapshot_stall_ms_max``)."""
        for node, job in list(self._snapshot_jobs.items()):
            started = time.perf_counter()
            try:
                next(job)
            except StopIteration:
                if self._snapshot_jobs.get(node) is job:
                    del self._snapshot_jobs[node]
            self._note_snapshot_stall(started)

    # -- failure detection, takeover, fencing ----------------------------------------------

    def _rerequest_snapshots(self, now: float) -> None:
        """Ask again for a snapshot a replica still lacks (its request, begin or end may have
        been lost with a broken connection) once ``SNAPSHOT_RETRY_S`` passed without a
        request or any part of a snapshot from that primary."""
        for node, replica in self.replicas.items():
            if replica.is_complete and not replica.needs_snapshot:
                continue
            if now - self._snapshot_asked_at.get(node, -1e9) >= SNAPSHOT_RETRY_S:
                self._snapshot_asked_at[node] = now
                self._peer_send(node, Kind.SNAPSHOT_REQUEST, {})

    def _probe(self, suspect: NodeId, others: Sequence[NodeId]) -> None:
        """Probe ``suspect``, and every other owner for the contact check (their answers,
        like any message from them, count as contact)."""
        self._probe_ids += 1
        self._peer_send(suspect, Kind.PROBE, {"req": self._probe_ids})
        for node in others:
            if node != suspect:
                self._peer_send(node, Kind.PROBE, {"req": self._probe_ids})

    def _no_quorum(self, suspect: NodeId, others: Sequence[NodeId], now: float) -> None:
        self.counters.quorum_missed += 1
        if now - self._no_quorum_logged_at >= 1.0:
            self._no_quorum_logged_at = now
            in_contact = self.detector.in_contact(others, suspect)
            log.warning(
                "%s does not answer, but only %d of %d owners are in contact: not declaring "
                "it dead (this node may be the one cut off)",
                suspect,
                in_contact,
                len(set(others) | {suspect}) + 1,
            )

    def suspect(self, node: NodeId) -> None:
        """``node``'s connection dropped: probe it now instead of after the silence timeout.
        Only an answer to this probe (or a later one) shows the drop was not a crash."""
        if self.replication > 0:
            self.detector.suspect(node, self._clock())
            self._probe_ids += 1
            self._drop_probe_req[node] = self._probe_ids
            self._peer_send(node, Kind.PROBE, {"req": self._probe_ids})

    def take_over(self, dead: NodeId) -> None:
        """Take over the range of ``dead``, this node's nearest counter-clockwise neighbour.

        1. The new view: ``dead`` marked dead, this node's token moved down to its token.
        2. Promote, for the slots of ``dead``'s range only, the replicas of the nodes it had
           absorbed and was still re-replicating to us (older), then its own (newer), to
           primary state: field values and hwm vectors.
        3. Replay their backed-up batches: ``apply_batch`` skips every tuple at or below the
           promoted hwm, so each tuple's effect is in the state exactly once.
        4. Route by the new view (re-replicating to the secondaries) and gossip it.
        """
        started = self._clock()
        # 1.
        dead_range = self.ring.range_of(dead)
        slots = set(dead_range.slots()) if dead_range is not None else set()
        view = successor_takes_over(self.view, dead)
        # 2.
        absorbed = sorted(name for name, orphan in self.orphans.items() if orphan.absorber == dead)
        copies = [self.orphans.pop(name) for name in absorbed]
        replica = self.replicas.pop(dead, None)
        self._snapshot_receiving.pop(dead, None)
        if replica is None or not replica.is_complete:
            log.error("taking over %s without a complete replica of its state", dead)
        copies.append(_Orphan(dead, replica or PeerReplica(), self.backups.pop(dead, None)))
        for copy in copies:
            # By reference, per slot: promotion time does not grow with the keys.
            owned = [slot for slot in copy.replica.store.slots() if slot in slots]
            self.store.adopt(copy.replica.store, owned)
        # 3.
        replayed = 0
        for copy in copies:
            if copy.backup is None:
                continue
            for held in replay_plan(copy.backup, slots):
                batch = decode_batch_body(held.body, held.tuple_count, self.ring.slot_count)
                outcome = self.store.apply_batch(
                    held.mapper, batch.slots, batch.seqs, batch.keys, batch.values, self._reduce_fn
                )
                replayed += outcome.applied
        self._flush_pending_emits()
        self.counters.tuples_replayed += replayed
        self.counters.takeovers += 1
        # 4.
        self._set_view(view)
        self._gossip()
        self.takeover_records.append(
            {
                "dead": dead,
                "declared_at_unix_s": time.time() - (self._clock() - started),
                "takeover_ms": (self._clock() - started) * 1000,
                "tuples_replayed": replayed,
                "keys_after": self.store.key_count(),
            }
        )
        log.warning(
            "took over %s: %d tuples replayed in %.1f ms; now at token %s",
            dead,
            replayed,
            (self._clock() - started) * 1000,
            self.view.members[self.node_id].token,
        )

    def _fence(self) -> None:
        """This incarnation was marked dead: stop serving and rejoin empty.

        1. Drop all state, replicas, backups, channels and pending work.
        2. Rejoin as the next incarnation on standby (owning nothing) and gossip it.
        """
        log.error("marked dead in the view: fencing incarnation %d", self.incarnation)
        self.counters.fenced += 1
        # 1.
        self.store = StateStore()
        self.replicas.clear()
        self._snapshot_receiving.clear()
        self.backups.clear()
        self.orphans.clear()
        self.inbox.clear()
        self._expected.clear()
        self._acks.clear()
        self._processed.clear()
        self._snapshot_jobs.clear()
        # 2.
        old = self.view.members[self.node_id]
        self.incarnation = old.incarnation + 1
        rejoined = replace(old, incarnation=self.incarnation, status=Status.STANDBY, version=1)
        self._set_view(self.view.with_member(rejoined))
        self._gossip()

    # -- reducing ---------------------------------------------------------------------------

    def _make_reduce_fn(self) -> Callable[[Any, Any, dict[str, Any]], None]:
        """Wrap the user's reduce so its emits take effect only if it returns normally."""
        user_reduce = self.job.reduce
        tuple_emits: list[tuple[Any, Any]] = []
        self._emitted: list[tuple[Any, Any]] = []
        emitted = self._emitted
        emit = tuple_emits.append

        def emit_pair(key: Any, value: Any) -> None:
            emit((key, value))

        def reduce_fn(key: Any, value: Any, state: dict[str, Any]) -> None:
            try:
                user_reduce(key, value, state, emit_pair)
            except BaseException:
                tuple_emits.clear()
                raise
            if tuple_emits:
                emitted.extend(tuple_emits)
                tuple_emits.clear()

        return reduce_fn

    def _flush_pending_emits(self) -> None:
        if self._emitted:
            self._output.extend(self._emitted)
            self._emitted.clear()

    def _log_reducer_failures(
        self, count: int, examples: Sequence[tuple[Any, BaseException]]
    ) -> None:
        now = self._clock()
        if now - self._error_log_window_start >= 1.0:
            if self._errors_unlogged:
                log.error("%d more reducer errors not logged individually", self._errors_unlogged)
            self._error_log_window_start = now
            self._error_logs_in_window = 0
            self._errors_unlogged = 0
        for key, error in examples:
            if self._error_logs_in_window < ERROR_LOGS_PER_SECOND:
                self._error_logs_in_window += 1
                log.error("reduce failed for key %r: %s: %s", key, type(error).__name__, error)
            else:
                self._errors_unlogged += 1
        self._errors_unlogged += count - len(examples)

    # -- control requests -------------------------------------------------------------------

    def _on_ping(self, identity: bytes, message: Message) -> None:
        self._send(
            identity, encode(Kind.PONG, {"req": message.header["req"], "node": self.node_id})
        )

    def _on_view_request(self, identity: bytes, message: Message) -> None:
        header = {"req": message.header["req"], "epoch": self.view.epoch}
        self._send(identity, encode(Kind.VIEW, header, pack_body(self.view.to_wire())))

    def _on_status_request(self, identity: bytes, message: Message) -> None:
        self._send(
            identity,
            encode(Kind.STATUS, {"req": message.header["req"]}, pack_body(self.status())),
        )

    def _on_dump_request(self, identity: bytes, message: Message) -> None:
        start: int = message.header["start"]
        max_keys = min(max(message.header["max_keys"], 1), DUMP_KEYS_PER_PAGE_MAX)
        roles = self.roles
        owned = sorted(s for s in self.store.slots() if s >= start and roles[s] == Role.PRIMARY)
        entries: list[tuple[int, Any, dict[str, Any]]] = []
        next_slot: int | None = None
        for index, slot in enumerate(owned):
            # A page ends between slots, never inside one, so a slot is never split.
            if len(entries) >= max_keys:
                next_slot = owned[index]
                break
            entries.extend(self.store.items([Slot(slot)]))
        header = {"req": message.header["req"], "next": next_slot}
        self._send(identity, encode(Kind.DUMP, header, pack_body(entries)))

    def _on_query_request(self, identity: bytes, message: Message) -> None:
        key = unpack_body(message.body)
        if type(key) not in (str, int):
            raise FrameError(f"query key must be str or int, got {type(key).__name__}")
        slot = slot_of(key, self.slot_bits)
        owner = self.roles[slot] == Role.PRIMARY
        state = self.store.get(slot, key) if owner else None
        body = pack_body({"owner": owner, "slot": slot, "state": state})
        self._send(identity, encode(Kind.QUERY, {"req": message.header["req"]}, body))

    _handlers: ClassVar[dict[Kind, Callable[[NodeCore, bytes, Message], None]]] = {
        Kind.BATCH: _on_batch,
        Kind.PING: _on_ping,
        Kind.VIEW_REQUEST: _on_view_request,
        Kind.STATUS_REQUEST: _on_status_request,
        Kind.DUMP_REQUEST: _on_dump_request,
        Kind.QUERY_REQUEST: _on_query_request,
        Kind.HEARTBEAT: _on_heartbeat,
        Kind.GOSSIP: _on_gossip,
        Kind.VIEW: _on_view_push,
        Kind.PROBE: _on_probe,
        Kind.PROBE_ACK: _on_probe_ack,
        Kind.CHECKPOINT: _on_checkpoint,
        Kind.CHECKPOINT_REQUEST: _on_checkpoint_request,
        Kind.SNAPSHOT_REQUEST: _on_snapshot_request,
        Kind.SNAPSHOT_BEGIN: _on_snapshot_begin,
        Kind.SNAPSHOT_CHUNK: _on_snapshot_chunk,
        Kind.SNAPSHOT_END: _on_snapshot_end,
    }

    # -- timers -----------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """The checkpoint cycle (DESIGN section 5); never waits for the network.

        1. Swap the active fragment out with the hwm vectors of its slots (atomic: the event
           loop runs one thing at a time, so this falls between two tuples).
        2. Number it, encode it once, send it to every secondary (optimistic: no ack awaited;
           a secondary that misses one asks for a snapshot).
        3. Merge it into master.
        """
        # 1.
        delta = self.store.swap()
        self.checkpoint_number += 1
        # 2.
        if self.secondaries:
            body = encode_delta(delta)
            for secondary in self.secondaries:
                self._peer_send(
                    secondary, Kind.CHECKPOINT, {"number": self.checkpoint_number}, body
                )
        # 3.
        self.store.merge_inactive()
        self.counters.checkpoints += 1

    def tick(self) -> None:
        """Periodic work: heartbeats, failure detection, the applied-tuples rate, output.

        1. Every heartbeat interval, a heartbeat to each secondary (they watch this node),
           carrying this node's view: a secondary that missed a view change (its gossip was
           lost) catches up within a heartbeat.
        2. Judge the nearest watched predecessor: silent past the timeout, probe it, and
           probe every other owner too (the contact check); no answer to the probe, take it
           over (and the next one is judged on the next tick: the walk of up to ``r`` hops
           over consecutive failures), but only if ``ring.failure.may_declare_dead`` allows
           it: on silence alone, this node must have heard from a strict majority of the
           owners since the probe. Otherwise this node may be the one cut off: it declares
           nobody dead, keeps serving, and probes again.
        """
        now = self._clock()
        # 1.
        if now - self._last_heartbeat >= self.settings.heartbeat_interval_ms / 1000:
            self._last_heartbeat = now
            body = self._view_body()
            for secondary in self.secondaries:
                self._peer_send(secondary, Kind.HEARTBEAT, {}, body)
        # 2.
        if self.replication > 0:
            self._rerequest_snapshots(now)
            others = [o for o in self.ring.owners if o != self.node_id]
            verdict = self.detector.judge(self.predecessors, now, owners_besides_me=others)
            if verdict is not None:
                action, node = verdict
                if action is Verdict.DEAD:
                    self.take_over(node)
                else:
                    if action is Verdict.NO_QUORUM:
                        self._no_quorum(node, others, now)
                    self._probe(node, others)
        mark_time, mark_count = self._rate_mark
        if now - mark_time >= 1.0:
            self.tuples_per_s = (self.counters.tuples_applied - mark_count) / (now - mark_time)
            self._rate_mark = (now, self.counters.tuples_applied)
        self._output.flush()

    def under_replicated_slots(self) -> int:
        """Slots of this node's range with fewer than ``r`` complete copies elsewhere: all of
        them while a snapshot to a secondary is in flight or a secondary is missing."""
        own_range = self.ring.range_of(self.node_id)
        if own_range is None or self.replication == 0:
            return 0
        missing = self.replication - len(self.secondaries) + len(self._snapshot_jobs)
        return own_range.length if missing > 0 else 0

    def status(self) -> dict[str, Any]:
        """A snapshot of the node for ``smr status``: ring position, load and counters."""
        own_range = self.ring.range_of(self.node_id)
        member = self.view.get(self.node_id)
        return {
            "node": self.node_id,
            "pid": os.getpid(),
            "token": member.token if member else None,
            "range_share": own_range.share if own_range else 0.0,
            "keys": self.store.key_count(),
            "tuples_per_s": round(self.tuples_per_s, 1),
            "epoch": self.view.epoch,
            "inbox_peak": self.inbox_peak,
            "rss_bytes": psutil.Process().memory_info().rss,
            "incarnation": self.incarnation,
            "status_in_view": member.status.value if member else None,
            "secondaries": list(self.secondaries),
            "backup_bytes": sum(b.bytes_held for b in self.backups.values()),
            "under_replicated_slots": self.under_replicated_slots(),
            "snapshot_stall_ms_max": round(self.snapshot_stall_ms_max, 3),
            "takeover_records": list(self.takeover_records),
            **vars(self.counters),
        }


# -- the process shell -----------------------------------------------------------------------


def serve(cluster_dir: Path, node_id: str) -> int:
    """Run node ``node_id`` of the cluster in ``cluster_dir`` until SIGTERM; returns the exit
    code (0 after a clean stop, 2 if it could not start)."""
    import uvloop

    from smr.transport import Inbox, Publisher

    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {node_id} %(levelname)s %(message)s"
    )
    try:
        spec = read_spec(cluster_dir)
        me = spec.node(node_id)
        job = load_job(spec.job)
        inbox = Inbox(me.addr)
        publisher = Publisher(me.pub_addr)
    except Exception as error:  # every start-up failure is a one-line, actionable error
        log.error("cannot start: %s", error)
        return 2
    output = OutputSink(node_id, cluster_dir / "output" / f"{node_id}.jsonl", publisher.publish)
    peers = PeerLinks()
    settings = NodeSettings(
        replication=spec.replication, checkpoint_interval_ms=spec.checkpoint_interval_ms
    )
    core = NodeCore(
        NodeId(node_id),
        job,
        spec.initial_view(),
        spec.slot_bits,
        inbox.send,
        output,
        settings=settings,
        send_to_peer=lambda node, frames: peers.send(core.view, node, frames),
    )

    def tick() -> None:
        for node in peers.dropped(core.view, core.predecessors):
            core.suspect(node)
        core.tick()

    log.info("serving on %s (output %s), slot_bits=%d", inbox.addr, publisher.addr, spec.slot_bits)
    try:
        uvloop.run(_run(core, inbox, spec, tick))
    finally:
        output.close()
        inbox.close()
        publisher.close()
        peers.close()
    log.info("stopped cleanly")
    return 0


async def _run(core: NodeCore, inbox: Any, spec: ClusterSpec, tick: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _stop, stopping, wake)
    inbox.watch(loop, wake)
    timers = [
        _every(min(TICK_MS, core.settings.heartbeat_interval_ms // 2), tick, wake),
        _every(spec.checkpoint_interval_ms, core.checkpoint, wake),
        _every(GC_FREEZE_INTERVAL_MS, gc.freeze, wake),
    ]
    receive = inbox.receive
    on_frames = core.on_frames
    try:
        while not stopping.is_set():
            # Drain what is waiting (up to the inbox bound), apply it, ack it; then wait.
            while not core.turn_is_full:
                received = receive()
                if received is None:
                    break
                on_frames(*received)
            core.apply_inbox()
            core.send_acks()
            if core.has_background_work:
                core.background_step()
            # Yield once per cycle even under constant load, so timers (checkpoints, rates,
            # heartbeats, probes) and signals run; then, unless batches or snapshot chunks
            # are left over, sleep until a message or a timer wakes us.
            await asyncio.sleep(0)
            core.end_turn()
            if not (core.has_background_work or core.inbox):
                await inbox.wait_readable(wake)
    finally:
        for timer in timers:
            timer.cancel()
        inbox.unwatch(loop)
        core.tick()


class PeerLinks:
    """One outbox per peer address, opened on first use; sends never block."""

    def __init__(self) -> None:
        from smr.transport import Outbox

        self._outbox_type = Outbox
        self._outboxes: dict[str, Any] = {}

    def _outbox(self, view: View, node: NodeId) -> Any:
        member = view.get(node)
        if member is None:
            return None
        outbox = self._outboxes.get(member.addr)
        if outbox is None:
            outbox = self._outboxes[member.addr] = self._outbox_type(member.addr, immediate=False)
        return outbox

    def send(self, view: View, node: NodeId, frames: Sequence[bytes]) -> bool:
        """Send to ``node`` at its address in ``view``; False if unknown or the queue is full."""
        outbox = self._outbox(view, node)
        sent: bool = outbox is not None and outbox.send(frames)
        return sent

    def dropped(self, view: View, nodes: Sequence[NodeId]) -> list[NodeId]:
        """Those of ``nodes`` whose connection dropped since the last call (connecting to
        them first if need be, so their drops are seen)."""
        return [
            node
            for node in nodes
            if (outbox := self._outbox(view, node)) is not None and outbox.disconnected()
        ]

    def close(self) -> None:
        """Close every outbox."""
        for outbox in self._outboxes.values():
            outbox.close()


def _stop(stopping: asyncio.Event, wake: asyncio.Event) -> None:
    stopping.set()
    wake.set()


def _every(interval_ms: int, action: Callable[[], None], wake: asyncio.Event) -> asyncio.Task[None]:
    async def repeat() -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                action()
            except Exception:
                log.exception("timer %s failed", getattr(action, "__name__", action))
            wake.set()

    return asyncio.get_running_loop().create_task(repeat())
