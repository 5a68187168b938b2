"""The mapper side of the data path: route, batch, send, track acks
(docs/design/architecture.md#data-path).

An :class:`Emitter` belongs to one mapper id. The life of a tuple in it:

1. ``emit(key, value)`` computes the key's slot (cached per key), gives the tuple its
   position in the mapper's stream as its ``seq`` (1 for the first tuple after
   :meth:`Emitter.begin_mapper`'s base; so seqs rise per slot, with gaps, and a tuple's
   identity depends on the tuples emitted before it alone, not on batching), and appends it
   to the open batch of the slot's primary (with a ``combine``, a tuple whose key is already
   in the open batch is folded into it instead, and each combined row takes the next seq of
   its slot when the batch closes).
2. A batch closes when it holds ``batch_size`` tuples, when the next tuple would take its
   encoded size past ``batch_bytes`` (each tuple's size is found by the check at emit,
   :func:`smr.values.row_bytes`), on ``flush()``, and, without ``combine``, at the first
   emit ``linger_ms`` or more after the first tuple opened since the last flush (so a slow
   stream's tuples wait about that long, not for a full batch: while emits go on, no tuple
   waits in the emitter much over ``linger_ms``; a program that stops emitting calls
   ``flush()``, as ``smr feed`` does when its input pauses). With ``combine`` a batch
   never closes by time: combined rows get their seqs when it closes, and a rerun must
   give the same tuples the same identities. Its body is encoded once (a body that
   still came out over twice the budget, after a re-route or a growing ``combine``, is
   split); the same bytes go to every node of the primary's replica set, each on its own
   channel with its own batch number.
3. A channel holds at most ``window_batches`` unacked batches; when it is full, ``emit``
   blocks while it reads replies (backpressure: nothing is dropped).
4. Replies: ``ACK through=k`` releases the channel's batches up to ``k``, and a batch is done
   when every node of its set acked it; ``NACK expect=k`` resends from ``k`` (once per
   stall: a NACK is answered at once when ``k`` is past where the last resend started, else
   when a quarter of ``resend_after_ms`` has passed since it); ``NOT_OWNER``
   carries the node's view (and when that view is older than the emitter's, the emitter
   sends the node its own), and the range the node is handing over in a move, if that is
   why; ``ERROR`` stops the emitter with the node's message.
5. A view change (from ``NOT_OWNER``, or asked for when an ack shows a newer view epoch or
   a channel stalls) re-routes every batch whose replica set changed: its tuples go out
   again, with their seqs, by the new view; the nodes' hwm makes any copy already applied a
   duplicate. Tuples of a range being moved are held back until the move ends, and the rest
   of their batches go out at once (:mod:`smr.reroute`).
6. A channel that makes no progress for ``resend_after_ms`` resends all its unacked batches
   (go-back-N; nodes drop what they already have) and asks the other nodes for their view;
   after ``give_up_after_s`` without progress :class:`DeliveryError` names the node.

Guarantee: when :meth:`Emitter.drain` or :meth:`Emitter.close` returns, every emitted tuple
was acked by every node of its replica set; otherwise it raises.

An emitter's channels are named by its own random stream id, not by the mapper id, so one
emitter (and its sockets) can send for several mapper ids in turn (:meth:`Emitter.begin_mapper`,
used by the Spark feeder: one emitter per Python worker, one mapper id per task), and a
retried mapper on a fresh emitter starts fresh channels while its tuples keep their identity.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

from smr.channels import (
    Channel,
    DeliveryError,
    OutBatch,
    Row,
    encode_within,
    release_through,
    slot_and_seq,
)
from smr.checkpoint.ids import MapperId
from smr.emit_path import (
    CACHED_KEY_CHARS_MAX,
    make_combining_emit,
    make_emit,
    make_emit_many,
    make_emit_record,
)
from smr.emit_retry import resend, retry
from smr.mapper_done import announce_done
from smr.reroute import Holds, on_not_owner, on_view, release_held, reroute
from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import Ring, SlotRange
from smr.ring.view import Status, View
from smr.transport.links import MapperTransport
from smr.transport.zeromq import zeromq_mapper_transport
from smr.wire.codec import decode, encode, unpack_body
from smr.wire.kinds import ChannelNumber, FrameError, RequestId, StreamId
from smr.wire.messages import Ack, Error, Nack, NotOwner, Pong, ViewReply, ViewRequest

BATCH_SIZE_DEFAULT: Final = 1000
# Encoded bytes of a batch body: far under the frame cap (smr.wire.kinds.FRAME_BYTES_MAX_DEFAULT,
# 16 MiB), so that even a body split late (twice this) and its header fit in one frame.
BATCH_BYTES_DEFAULT: Final = 1 << 20
BATCH_BYTES_MAX: Final = 4 << 20
WINDOW_BATCHES_DEFAULT: Final = 16
# Open batches go at least this often while emits go on: well above the time a batch takes
# to fill at full rate (1000 tuples at 0.3-1 M/s: 1-3 ms), so it costs no throughput.
LINGER_MS_DEFAULT: Final = 20
# No ack progress for this long on a channel with unacked batches: resend them. Well above
# the time a node needs for a full window (16 x 1000 tuples at ~0.5 M/s is ~30 ms).
RESEND_AFTER_MS_DEFAULT: Final = 1000
GIVE_UP_AFTER_S_DEFAULT: Final = 30.0
# A channel silent this long makes the emitter ask the other nodes for their view: a takeover
# is done about 250-400 ms after a crash, so this finds it soon after.
VIEW_CHECK_AFTER_MS_DEFAULT: Final = 200
# Replies are read at least every this many batches, not only when a window is full.
REPLY_READ_EVERY_BATCHES: Final = 8
# Keys whose slot is remembered; past it the cache starts over (a word stream's vocabulary
# fits; an unbounded key space must not grow the mapper without bound).
SLOT_CACHE_KEYS_MAX: Final = 1_000_000
# Seqs travel as uint64; staying below 2**63 keeps them exact in every encoding on the way.
SEQ_MAX: Final = 1 << 63


class Emitter:
    """Sends one mapper's tuples to the ring, exactly once per tuple identity.

    ``on_acked``, if given, is called with the rows ``(slot, seq, key, value, emit_time_s)``
    of every batch once all the nodes of its replica set acked it (latency measurement).
    ``linger_ms`` (None: never) goes by those emit times, wall-clock time, not ``clock``.
    """

    def __init__(
        self,
        view: View,
        slot_bits: int,
        mapper_id: MapperId,
        replication: int = 0,
        combine: Callable[[Any, Any], Any] | None = None,
        batch_size: int = BATCH_SIZE_DEFAULT,
        batch_bytes: int = BATCH_BYTES_DEFAULT,
        window_batches: int = WINDOW_BATCHES_DEFAULT,
        resend_after_ms: int = RESEND_AFTER_MS_DEFAULT,
        give_up_after_s: float = GIVE_UP_AFTER_S_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
        transport: MapperTransport | None = None,
        on_acked: Callable[[Sequence[Row]], None] | None = None,
        linger_ms: float | None = LINGER_MS_DEFAULT,
    ) -> None:
        if batch_size < 1 or window_batches < 1:
            raise ValueError("batch_size and window_batches must be at least 1")
        if linger_ms is not None and linger_ms < 0:
            raise ValueError(f"linger_ms must be at least 0 (or None), not {linger_ms}")
        if not 1024 <= batch_bytes <= BATCH_BYTES_MAX:
            raise ValueError(f"batch_bytes must be in [1024, {BATCH_BYTES_MAX}], not {batch_bytes}")
        self.mapper_id = mapper_id
        self.stream_id = StreamId(uuid.uuid4().hex)
        self.slot_bits = slot_bits
        self.replication = replication
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.window_batches = window_batches
        self._held_rows_max = window_batches * batch_size
        self.resend_after_s = resend_after_ms / 1000
        self.view_check_after_s = VIEW_CHECK_AFTER_MS_DEFAULT / 1000
        self.give_up_after_s = give_up_after_s
        self._clock = clock
        # When open batches must go (wall-clock time, as the rows' emit times; infinity while
        # none is open): one item, shared with the emit closures (smr.emit_path).
        self._linger_s = math.inf if linger_ms is None else linger_ms / 1000
        self._flush_due = [math.inf]
        self._transport: MapperTransport = transport or zeromq_mapper_transport()
        self._combine = combine
        # Told the rows of every batch once all its nodes acked it (rows hold their emit time).
        self._on_acked = on_acked
        self._channels: dict[NodeId, Channel] = {}
        self.pongs: set[int] = set()
        """Request ids of the PONGs nodes sent (answers to ``MapperDone``), until read."""
        self._addr_of: dict[NodeId, str] = {}
        # The last seq given: without combine, the position of the last tuple emitted (one
        # item, shared with the emit closures); with combine, the last seq of each slot.
        self._position = [0]
        self._seqs = [0] * (1 << slot_bits)
        self._slot_cache: dict[Any, int] = {}
        # Open batches per destination index; rows, or key -> [slot, value, ts] with combine.
        self._open_rows: list[list[Row]] = []
        self._open_combined: list[dict[Any, list[Any]]] = []
        # Estimated encoded bytes of each open batch (see smr.values.row_bytes).
        self._open_bytes: list[int] = []
        self._dest_of_slot: list[int] = []
        # With combine: how many times emit was called (rows merge, so seqs count fewer).
        self._combined_emits = 0
        # Set by begin_mapper: the seq base of the current mapper, and what earlier ones emitted.
        self._seq_base = 0
        self._emitted_before = 0
        self.tuples_acked = 0
        self.tuples_sent = 0
        self.batches_sent = 0
        self.resends = 0
        self.reroutes = 0
        self.view_changes = 0
        self.views_pushed = 0
        self._view_requests = 0
        self._view_asked_at = -1e9
        # How many pump calls are under way (a re-route sends from inside one).
        self._pump_depth = 0
        # Silence before this does not count towards giving up (smr.emit_retry); a drain
        # after a DeliveryError moves it to its own start (see drain).
        self.stall_counted_from = -math.inf
        self.delivery_failed = False
        # The tuples of slots a node is handing over in a move, held back until it ends.
        self._holds = Holds()
        self._set_view(view)
        # emit(key, value) checks the tuple (smr.values.EmitError, nothing emitted, if it
        # cannot travel); emit_sized(key, value, size) takes one checked by row_bytes.
        self.emit: Callable[[Any, Any], None]
        self.emit_sized: Callable[[Any, Any, int], None]
        self.emit, self.emit_sized = make_combining_emit(self) if combine else make_emit(self)
        # emit_many(keys, values): every tuple checked, then all emitted, or none (a
        # map_batch's columns); emit_record(pairs) the same for the pairs of one record.
        self.emit_many = make_emit_many(self, self.emit_sized)
        self.emit_record = make_emit_record(self.emit_many)

    # -- routing ----------------------------------------------------------------------------

    def _set_view(self, view: View) -> None:
        """Route by ``view`` from now on; open (not yet sent) tuples move with their slots."""
        ring = Ring(view, self.slot_bits)
        if not ring.owners:
            raise DeliveryError("the view has no live node to send to")
        old_rows = [row for rows in self._open_rows for row in rows]
        old_combined = [item for batch in self._open_combined for item in batch.items()]
        self.view = view
        self.ring = ring
        self._owners: tuple[NodeId, ...] = ring.owners
        self._replica_sets = [ring.replica_set_of(o, self.replication) for o in ring.owners]
        self._addr_of.update({m.node_id: m.addr for m in view.members.values()})
        index = {owner: i for i, owner in enumerate(ring.owners)}
        # Mutated in place: the emit closures hold these very lists.
        self._dest_of_slot[:] = [index[ring.primary(s)] for s in range(ring.slot_count)]  # type: ignore[arg-type]
        self._open_rows[:] = [[] for _ in ring.owners]
        self._open_combined[:] = [{} for _ in ring.owners]
        # Moved tuples are not counted: a batch they make too big is split when encoded.
        self._open_bytes[:] = [0] * len(ring.owners)
        for row in old_rows:
            self._open_rows[self._dest_of_slot[row[0]]].append(row)
        # Rows of one slot all sat in one list, so this keeps their seq order as it was; the
        # sort makes sure (a list left unsorted would send a seq after a higher one, which
        # the node's hwm would then drop as a duplicate).
        for rows in self._open_rows:
            rows.sort(key=slot_and_seq)
        for key, entry in old_combined:
            self._open_combined[self._dest_of_slot[entry[0]]][key] = entry

    def _channel(self, node: NodeId) -> Channel:
        channel = self._channels.get(node)
        if channel is None:
            addr = self._addr_of.get(node)
            if addr is None:
                raise DeliveryError(f"node {node} has no address in the view")
            channel = Channel(node, self._transport.open(addr, 2 * self.window_batches + 8))
            channel.progress_at = self._clock()
            self._channels[node] = channel
        return channel

    # -- emitting ---------------------------------------------------------------------------

    def _slot(self, key: Any) -> int:
        """The key's slot, remembered if the key is short: a key found in the cache is
        known to be a good key that makes a small row (see smr.emit_path)."""
        slot = slot_of(key, self.slot_bits)
        if key.__class__ is str and len(key) > CACHED_KEY_CHARS_MAX:
            return slot
        if len(self._slot_cache) >= SLOT_CACHE_KEYS_MAX:
            self._slot_cache.clear()
        self._slot_cache[key] = slot
        return slot

    def _dispatch_combined(self, dest: int) -> None:
        combined = self._open_combined[dest]
        self._open_bytes[dest] = 0
        if not combined:
            return
        # Re-routed or released rows still open for this destination (left for the next
        # send by a re-route deep in nested pumps) hold older seqs of these slots: they go
        # first, in this batch. Sent after it, the node's hwm would drop them as duplicates.
        rows: list[Row] = self._open_rows[dest]
        self._open_rows[dest] = []
        seqs = self._seqs
        for key, (slot, value, ts) in combined.items():
            seq = seqs[slot] + 1
            seqs[slot] = seq
            rows.append((slot, seq, key, value, ts))
        combined.clear()
        self._send_batch(dest, rows)

    def _dispatch_rows(self, dest: int) -> None:
        rows = self._open_rows[dest]
        self._open_bytes[dest] = 0
        if not rows:
            return
        self._open_rows[dest] = []
        self._send_batch(dest, rows)

    def _send_batch(self, dest: int, rows: list[Row]) -> None:
        if self._holds:
            rows = self._holds.split(rows, self._clock())
        if rows:
            self._send_rows(dest, rows)
        # Held tuples sit in no channel's window: bound them like a window's worth, by
        # waiting here for the move to end (or the hold to go stale) as a full window waits.
        while len(self._holds.rows) > self._held_rows_max:
            self.pump(timeout_ms=50)

    def _send_rows(self, dest: int, rows: list[Row]) -> None:
        epoch = self.view.epoch
        # Re-routed rows come together: cut them into batches of the usual size, as a
        # node admits a bounded time's work at once (smr.node.ingest, step 6).
        size = self.batch_size
        parts = [
            part
            for start in range(0, len(rows), size)
            for part in encode_within(rows[start : start + size], 2 * self.batch_bytes)
        ]
        sent: list[OutBatch] = []
        for index, (part, body) in enumerate(parts):
            if self.view.epoch != epoch or any(batch.rerouted for batch in sent):
                # The view changed while an earlier part waited for window room, or an
                # earlier part was re-routed meanwhile (refused: its rows are held, or left
                # open): the later parts hold later seqs of the same slots, so they go
                # with it, never ahead of it.
                reroute(self, [OutBatch(rows, body) for rows, body in parts[index:]])
                return
            sent.append(self._send_body(dest, part, body))

    def _send_body(self, dest: int, rows: list[Row], body: bytes) -> OutBatch:
        """Put a batch of ``rows`` on the channel of each node of ``dest``'s replica set
        (waiting for window room) and send it; the batch (re-routed if the view or a hold
        changed while it waited)."""
        batch = OutBatch(rows, body, self._replica_sets[dest])
        # Waiting for every node of its set from the start: an ack from the first node, read
        # while the batch waits for room on a later node's channel, must not make it count
        # as acked by all (it would count again once the later node acks it).
        batch.waiting_for.update(batch.replica_set)
        epoch = self.view.epoch
        for node in batch.replica_set:
            channel = self._channel(node)
            # 3. Backpressure: wait for room in this channel's window.
            while len(channel.unacked) >= self.window_batches:
                self.pump(timeout_ms=50)
            if batch.rerouted:
                return batch  # a view change while we waited already sent its rows out again
            if self.view.epoch != epoch:
                # The view changed while we waited, before the batch was on every channel
                # of its (now stale) replica set: send its rows again by the new view.
                reroute(self, [batch])
                return batch
            if self._holds and self._holds.holds_any(batch.rows):
                # A hold began while we waited: this batch's rows of the held slots must go
                # after the held ones (seq order per slot), so they are held too.
                reroute(self, [batch])
                return batch
            chan = channel.next_chan
            channel.next_chan = ChannelNumber(chan + 1)
            channel.unacked[chan] = batch
            self._transmit(channel, chan)
        self.tuples_sent += len(rows)
        self.batches_sent += 1
        if self.batches_sent % REPLY_READ_EVERY_BATCHES == 0:
            # Read acks now and then even while windows have room: they carry the nodes'
            # view epoch, which is how a feeder learns of a takeover within a few batches.
            self.pump(timeout_ms=0)
        return batch

    def _transmit(self, channel: Channel, chan: ChannelNumber) -> None:
        """Send batch ``chan`` unless an earlier one still waits to be sent (order matters)."""
        channel.transmit(chan, self.stream_id, self.mapper_id, self.view.epoch)

    def flush(self) -> None:
        """Close and send every open batch, until no tuple is left open.

        Sending may wait for window room, and a view change while waiting re-sorts the
        open tuples by the new view (``_set_view``), possibly to destinations already
        passed and with fewer destinations than before: so look for open tuples afresh
        after each send instead of walking the destinations once.
        """
        self._flush_due[0] = math.inf
        while True:
            dest = self._first_open_dest()
            if dest is None:
                return
            if self._open_rows[dest]:
                self._dispatch_rows(dest)
            else:
                self._dispatch_combined(dest)

    def _first_open_dest(self) -> int | None:
        """The first destination with open tuples (rows, or combined entries), if any."""
        for dest in range(len(self._owners)):
            if self._open_rows[dest] or self._open_combined[dest]:
                return dest
        return None

    # -- replies ----------------------------------------------------------------------------

    def pump(self, timeout_ms: int = 0) -> None:
        """Read replies for up to ``timeout_ms``; retry unsent batches, resend stalled ones."""
        channels = list(self._channels.values())
        self._pump_depth += 1
        try:
            if self._transport.wait_any([c.outbox for c in channels], timeout_ms):
                for channel in channels:
                    while (frames := channel.outbox.receive()) is not None:
                        self._on_reply(channel, frames)
            retry(self, channels)
        finally:
            self._pump_depth -= 1

    def _on_reply(self, channel: Channel, frames: list[bytes]) -> None:
        try:
            message = decode(frames)
        except FrameError:
            return  # nodes only send well-formed replies; ignore anything else
        match message:
            case Ack(through=through, epoch=epoch):
                self._on_ack(channel, through)
                if epoch > self.view.epoch:
                    self._ask_view([channel])
            case ViewReply(body=body):
                try:
                    view = View.from_wire(unpack_body(body))
                except (FrameError, ValueError):
                    return
                on_view(self, view)
            case Nack(expect=expect, move_ended=move_ended):
                channel.taken_below(expect)
                if move_ended and self._holds.by(channel.node):
                    # A move at this node ended (called off, or settled at its receiver).
                    release_held(self)
                resend(self, channel, from_chan=expect)
            case NotOwner(chan=chan, epoch=epoch, body=body):
                try:
                    view = View.from_wire(unpack_body(body))
                    frozen = SlotRange(
                        Slot(message.frozen_start), message.frozen_length, self.ring.slot_count
                    )
                except (FrameError, ValueError):
                    return
                on_not_owner(self, channel, chan, view, epoch, frozen)
            case Error(message=text):
                raise DeliveryError(f"node {channel.node} refused a batch: {text}")
            case Pong(req=req):
                self.pongs.add(req)  # a node took a MapperDone notice (smr.mapper_done)

    def _on_ack(self, channel: Channel, through: ChannelNumber) -> None:
        released, done = release_through(channel, through)
        for batch in done:
            self.tuples_acked += len(batch.rows)
            if self._on_acked is not None:
                self._on_acked(batch.rows)
        if released:
            channel.progress_at = self._clock()
            if channel.nack_waiting is not None and through >= channel.nack_waiting:
                channel.nack_waiting = None

    def _ask_view(self, channels: list[Channel]) -> None:
        """Ask nodes for their view (at most every quarter of the resend interval)."""
        now = self._clock()
        if now - self._view_asked_at < self.resend_after_s / 4:
            return
        self._view_asked_at = now
        for channel in channels:
            self._view_requests += 1
            channel.outbox.send(encode(ViewRequest(RequestId(self._view_requests))))

    def _live_channels(self) -> list[Channel]:
        """Channels to every live member of the view, opened if need be."""
        return [
            self._channel(m.node_id)
            for m in self.view.members.values()
            if m.status is not Status.DEAD
        ]

    @property
    def tuples_emitted(self) -> int:
        """Tuples passed to ``emit`` so far (without combine, read off the position, one
        per tuple, so no path that sends rows can miss or repeat one)."""
        if self._combine is None:
            return self._emitted_before + self._position[0] - self._seq_base
        return self._emitted_before + self._combined_emits

    @property
    def position(self) -> int:
        """Without combine, the seq of the last tuple emitted: the ``seq_base`` of
        :meth:`begin_mapper` plus the tuples emitted since. A mapper that emits the same
        tuples in the same order from a position sends them with the same identities."""
        return self._position[0]

    @property
    def unacked_batches(self) -> int:
        """Batches sent and not yet acked by every node of their set."""
        return sum(len(c.unacked) for c in self._channels.values())

    def begin_mapper(self, mapper_id: MapperId, seq_base: int = 0) -> None:
        """Send the following tuples as mapper ``mapper_id``, with seqs from
        ``seq_base + 1`` (positions without combine, per slot with it).

        Only between mappers: every earlier tuple must be acked (:meth:`drain`), because a
        batch's mapper id is the emitter's at the time it is sent, resends included. A mapper
        that is retried re-sends identical ids when it emits the same tuples in the same order
        from the same ``seq_base``; the nodes then drop what they already applied.
        """
        if self.unacked_batches or self._first_open_dest() is not None or self._holds.rows:
            raise RuntimeError("begin_mapper needs a drained emitter: call drain() first")
        if not 0 <= seq_base < SEQ_MAX:
            raise ValueError(f"seq_base must be in [0, {SEQ_MAX}), not {seq_base}")
        self._emitted_before = self.tuples_emitted
        self.mapper_id = mapper_id
        self._seq_base = seq_base
        self._position[0] = seq_base
        self._seqs[:] = [seq_base] * len(self._seqs)
        self._combined_emits = 0

    def drain(self, timeout_s: float | None = None) -> None:
        """Flush, then wait until every tuple is acked; DeliveryError if that cannot happen.

        ``timeout_s`` bounds the wait (default: the give-up time of a stalled channel).
        After a DeliveryError, a drain may be called again (the nodes are back, say): it
        waits its own time, the give-up time counted from its start, and does not fail at
        once on the silence an earlier call already reported."""
        if self.delivery_failed:
            self.delivery_failed = False
            self.stall_counted_from = self._clock()
        try:
            self.flush()
            deadline = self._clock() + (timeout_s if timeout_s is not None else 1e18)
            # Re-routing while waiting may leave tuples open (see flush): send them too.
            while self.unacked_batches or self._first_open_dest() is not None or self._holds.rows:
                if self._clock() > deadline:
                    raise DeliveryError(
                        f"{self.unacked_batches} batches still unacknowledged and "
                        f"{len(self._holds.rows)} tuples of moving slots held back after "
                        f"{timeout_s} s"
                    )
                self.flush()
                self.pump(timeout_ms=50)
        except DeliveryError:
            self.delivery_failed = True
            raise

    def finish_mapper(self, timeout_s: float | None = None) -> None:
        """Drain, then tell the nodes the current mapper finished, so that they retire its
        dedup memory (:mod:`smr.mapper_done`): only for an id never used for other tuples.
        :meth:`begin_mapper` may follow."""
        self.drain(timeout_s)
        announce_done(self)

    def abort(self) -> None:
        """Close every channel at once and forget every open and unacked tuple.

        For a mapper whose work will be done again under the same identity (a failed Spark
        task is retried): what reached the nodes stays applied and the rest comes with the
        retry. The emitter is unusable afterwards.
        """
        for channel in self._channels.values():
            channel.outbox.close()
        self._channels.clear()
        for rows in self._open_rows:
            rows.clear()
        for combined in self._open_combined:
            combined.clear()
        self._holds.release()

    def close(self, timeout_s: float | None = None, *, finished: bool = False) -> None:
        """Drain (see :meth:`drain`), then close every channel, also when draining fails.
        ``finished``: the mapper's id will never carry other tuples; after draining, tell
        the nodes, which then retire its dedup memory (:mod:`smr.mapper_done`)."""
        try:
            if finished:
                self.finish_mapper(timeout_s)
            else:
                self.drain(timeout_s)
        finally:
            for channel in self._channels.values():
                channel.outbox.close()
            self._channels.clear()
