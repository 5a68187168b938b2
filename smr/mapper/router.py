"""The router: where each tuple goes by the view, and what happens when the ring changes
under the emitter (steps 2 and 5 of :mod:`smr.mapper.emitter`).

:class:`Router` owns the view, the ring's replica set per destination, the nodes' addresses
and the holds of moving ranges, and sends closed batches on the channels. A view change
re-routes every batch whose replica set changed (its rows go out again, with their seqs, by
the new view). A node handing a range over in a move refuses batches with a slot of it and
names the range (``smr.wire.messages.NotOwner``): the router then holds back the tuples of those
slots only and re-routes the rest at once, so the slots that do not move never wait for the
move; the held tuples go out again, in seq order per slot, when the move ends (a new view, a
NACK from that node) or when no word came for a resend interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from smr.mapper.batcher import Batcher
from smr.mapper.channels import (
    Channel,
    Channels,
    DeliveryError,
    OutBatch,
    Row,
    encode_within,
)
from smr.ring.ids import Epoch, NodeId, Slot
from smr.ring.placement import Ring, SlotRange
from smr.ring.view import Status, View
from smr.wire.codec import encode, pack_body
from smr.wire.kinds import ChannelNumber, RequestId
from smr.wire.messages import ViewReply, ViewRequest

# Past this many nested pump calls, re-routed rows wait for the next flush (see reroute).
REROUTE_DEPTH_MAX: Final = 8
# Replies are read at least every this many batches, not only when a window is full.
REPLY_READ_EVERY_BATCHES: Final = 8


class Holds:
    """The ranges being moved, by the node that said so (and when), and the rows held back.

    Guarantees: a row passed to `split` whose slot is in a held range is kept here until
    `release`, which hands back every held row in the order they came; nothing is dropped.
    """

    __slots__ = ("_ranges", "rows", "since")

    def __init__(self) -> None:
        self._ranges: dict[NodeId, tuple[SlotRange, float]] = {}
        self.rows: list[Row] = []
        self.since: float | None = None
        """When the oldest row still held was held (None when none is)."""

    def __bool__(self) -> bool:
        """True while some range is held (the emitter checks this on every batch)."""
        return bool(self._ranges)

    def begin(self, node: NodeId, moving: SlotRange, now: float) -> None:
        """Hold ``moving`` back: ``node`` refused a batch of it, handing it over."""
        if node not in self._ranges:
            self._ranges[node] = (moving, now)

    def by(self, node: NodeId) -> bool:
        """Whether ``node`` is one of the nodes whose ranges are held."""
        return node in self._ranges

    def holds_any(self, rows: list[Row]) -> bool:
        """Whether any of ``rows`` is of a held slot."""
        ranges = [moving for moving, _ in self._ranges.values()]
        return any(moving.contains(row[0]) for row in rows for moving in ranges)

    def split(self, rows: list[Row], now: float) -> list[Row]:
        """Keep the rows of held slots; return the others."""
        ranges = [moving for moving, _ in self._ranges.values()]
        kept: list[Row] = []
        for row in rows:
            if any(moving.contains(row[0]) for moving in ranges):
                self.rows.append(row)
            else:
                kept.append(row)
        if self.rows and self.since is None:
            self.since = now
        return kept

    def stale(self, now: float, after_s: float) -> bool:
        """Whether a range has been held for ``after_s`` with no word of its move's end."""
        return any(now - begun >= after_s for _, begun in self._ranges.values())

    def release(self) -> list[Row]:
        """End every hold; the rows held, in the order they came."""
        self._ranges.clear()
        rows, self.rows = self.rows, []
        self.since = None
        return rows


class Router:
    """Routes closed batches by the view onto the channels, and re-routes them when the
    view changes or a node refuses them.

    Guarantee: no node gets a later seq of a slot before an earlier one: a batch that
    waited for window room while the view or a hold changed goes out again by the new
    routing, and with it every batch sent after it on any channel (:meth:`reroute`).
    """

    def __init__(
        self,
        view: View,
        replication: int,
        batcher: Batcher,
        channels: Channels,
        pump: Callable[[int], None],
        clock: Callable[[], float],
        resend_after_s: float,
    ) -> None:
        self.replication = replication
        self._batcher = batcher
        self._channels = channels
        self._pump = pump
        self._clock = clock
        self._resend_after_s = resend_after_s
        self._batch_size = batcher.batch_size
        self._batch_bytes = batcher.batch_bytes
        # Held tuples sit in no channel's window: bound them like a window's worth.
        self._held_rows_max = channels.window_batches * batcher.batch_size
        self._addr_of: dict[NodeId, str] = {}
        self._replica_sets: list[tuple[NodeId, ...]] = []
        # The tuples of slots a node is handing over in a move, held back until it ends.
        self._holds = Holds()
        self._view_requests = 0
        self._view_asked_at = -1e9
        self.tuples_sent = 0
        self.batches_sent = 0
        self.reroutes = 0
        self.view_changes = 0
        self.views_pushed = 0
        self._set_view(view)

    # -- the view -------------------------------------------------------------------------------

    def _set_view(self, view: View) -> None:
        """Route by ``view`` from now on; open (not yet sent) tuples move with their slots."""
        ring = Ring(view, self._batcher.slot_bits)
        if not ring.owners:
            raise DeliveryError("the view has no live node to send to")
        self.view = view
        self.ring = ring
        self._replica_sets = [ring.replica_set_of(o, self.replication) for o in ring.owners]
        self._addr_of.update({m.node_id: m.addr for m in view.members.values()})
        index = {owner: i for i, owner in enumerate(ring.owners)}
        dest_of_slot = [index[ring.primary(s)] for s in range(ring.slot_count)]  # type: ignore[arg-type]
        self._batcher.regroup(dest_of_slot, len(ring.owners))

    @property
    def epoch(self) -> Epoch:
        """The epoch of the view batches are routed by."""
        return self.view.epoch

    def slot_range(self, start: int, length: int) -> SlotRange:
        """The range of ``length`` slots from ``start`` on this ring (ValueError if not one)."""
        return SlotRange(Slot(start), length, self.ring.slot_count)

    def live_channels(self) -> list[Channel]:
        """Channels to every live member of the view, opened if need be."""
        return [
            self._channels.to(m.node_id, self._addr_of.get(m.node_id))
            for m in self.view.members.values()
            if m.status is not Status.DEAD
        ]

    def ask_view(self, channels: list[Channel]) -> None:
        """Ask nodes for their view (at most every quarter of the resend interval)."""
        now = self._clock()
        if now - self._view_asked_at < self._resend_after_s / 4:
            return
        self._view_asked_at = now
        for channel in channels:
            self._view_requests += 1
            channel.outbox.send(encode(ViewRequest(RequestId(self._view_requests))))

    def ask_view_elsewhere(self, channel: Channel) -> None:
        """Ask every live node but ``channel``'s for its view (rate-limited)."""
        self.ask_view([c for c in self.live_channels() if c is not channel])

    # -- holds ----------------------------------------------------------------------------------

    @property
    def held_rows(self) -> int:
        """How many tuples of moving slots are held back."""
        return len(self._holds.rows)

    @property
    def held_since(self) -> float | None:
        """When the oldest tuple still held was held (None when none is)."""
        return self._holds.since

    def holds_for(self, node: NodeId) -> bool:
        """Whether a range of ``node``'s is held."""
        return self._holds.by(node)

    def holds_stale(self, now: float) -> bool:
        """Whether a range has been held a resend interval with no word of its move's end."""
        return bool(self._holds) and self._holds.stale(now, self._resend_after_s)

    def drop_holds(self) -> None:
        """Forget the holds and their tuples (an aborted mapper)."""
        self._holds.release()

    # -- sending --------------------------------------------------------------------------------

    def send(self, dest: int, rows: list[Row]) -> None:
        """Send a closed batch of destination ``dest``: its tuples of held slots are held
        back, the others go on the channels of the destination's replica set."""
        if self._holds:
            rows = self._holds.split(rows, self._clock())
        if rows:
            self._send_rows(dest, rows)
        # Held tuples sit in no channel's window: bound them like a window's worth, by
        # waiting here for the move to end (or the hold to go stale) as a full window waits.
        while len(self._holds.rows) > self._held_rows_max:
            self._pump(50)

    def _send_rows(self, dest: int, rows: list[Row]) -> None:
        epoch = self.view.epoch
        # Re-routed rows come together: cut them into batches of the usual size, as a
        # node admits a bounded time's work at once (smr.node.ingest, step 6).
        size = self._batch_size
        parts = [
            part
            for start in range(0, len(rows), size)
            for part in encode_within(rows[start : start + size], 2 * self._batch_bytes)
        ]
        sent: list[OutBatch] = []
        for index, (part, body) in enumerate(parts):
            if self.view.epoch != epoch or any(batch.rerouted for batch in sent):
                # The view changed while an earlier part waited for window room, or an
                # earlier part was re-routed meanwhile (refused: its rows are held, or left
                # open): the later parts hold later seqs of the same slots, so they go
                # with it, never ahead of it.
                self.reroute([OutBatch(rows, body) for rows, body in parts[index:]])
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
        channels = self._channels
        for node in batch.replica_set:
            channel = channels.to(node, self._addr_of.get(node))
            # 3. Backpressure: wait for room in this channel's window.
            while channels.window_full(channel):
                self._pump(50)
            if batch.rerouted:
                return batch  # a view change while we waited already sent its rows out again
            if self.view.epoch != epoch:
                # The view changed while we waited, before the batch was on every channel
                # of its (now stale) replica set: send its rows again by the new view.
                self.reroute([batch])
                return batch
            if self._holds and self._holds.holds_any(batch.rows):
                # A hold began while we waited: this batch's rows of the held slots must go
                # after the held ones (seq order per slot), so they are held too.
                self.reroute([batch])
                return batch
            channels.put(channel, batch, epoch)
        self.tuples_sent += len(rows)
        self.batches_sent += 1
        if self.batches_sent % REPLY_READ_EVERY_BATCHES == 0:
            # Read acks now and then even while windows have room: they carry the nodes'
            # view epoch, which is how a feeder learns of a takeover within a few batches.
            self._pump(0)
        return batch

    # -- when the ring changes ------------------------------------------------------------------

    def on_not_owner(
        self,
        channel: Channel,
        chan: ChannelNumber,
        view: View,
        node_epoch: Epoch,
        frozen: SlotRange,
    ) -> None:
        """A node refused batch ``chan`` by its view (epoch ``node_epoch``), or because it
        holds slots of ``frozen``, which the node is handing over in a move.

        1. The node expected ``chan``: it took every batch below (the channel's base skips
           the hole re-routing leaves from here). Adopt whatever the node's view has that
           ours lacks (re-routing what it moves).
        2. If the node's view is older than ours, it refused by a stale view: send it ours,
           on this channel, so it arrives before the batch is sent again. That is no
           progress: the give-up timer keeps running, so two parties that cannot agree end
           in a ``DeliveryError`` instead of re-routing to each other forever. If both views
           are the same, the node is handing the batch's slots over in a move: hold back
           the tuples of ``frozen`` (the node sends the outcome when the move ends; see
           ``smr.node.moves``), and re-route the rest at once, so the slots that do not
           move never wait for the move; a refusal that names no range re-routes nothing
           yet. Otherwise the node taught us something: progress.
        3. Re-route the refused batch and the later ones of the channel.
        """
        # 1.
        channel.taken_below(chan)
        epoch_before = self.view.epoch
        self.on_view(view)
        # 2.
        if node_epoch < self.view.epoch:
            push = ViewReply(RequestId(0), self.view.epoch, pack_body(self.view.to_wire()))
            channel.outbox.send(encode(push))
            self.views_pushed += 1
        elif self.view.epoch == epoch_before:
            # The same view on both sides: the node is handing these slots over (a move).
            # Sending them again by this view would be refused again: hold them back, ask
            # the other nodes for news; the node sends the new view (or a NACK, if the move
            # is called off) when it ends, and a hold past the resend time ends anyway.
            self.ask_view_elsewhere(channel)
            if not frozen.length:
                return
            self._holds.begin(channel.node, frozen, self._clock())
        else:
            channel.progress_at = self._clock()
        # 3. The node does not advance the channel past a refused batch, so the later ones
        #    on it can reach the node only after the refused one is sent again: out of seq
        #    order, and the node's hwm would drop the older tuples as duplicates. Re-route
        #    them all together (their rows go out sorted by slot and seq); `reroute` takes
        #    along the batches after them on the other channels too.
        batch = channel.unacked.get(chan)
        if batch is not None and not batch.rerouted:
            self.reroute([held for number, held in channel.unacked.items() if number >= chan])

    def on_view(self, view: View) -> None:
        """Adopt a newer view; re-route every in-flight batch whose replica set changed."""
        merged = self.view.merge(view)
        if merged.epoch == self.view.epoch:
            return
        self.view_changes += 1
        self._set_view(merged)
        # A new view ends the holds (a move that ended shows in it): the held tuples go
        # out with the re-routed ones, by the new view.
        released = bool(self._holds.rows)
        self.release_held(send=False)
        ring = self.ring
        moved = []
        for batch in self._channels.in_flight():
            primaries = {ring.primary(row[0]) for row in batch.rows}  # type: ignore[arg-type]
            if (
                len(primaries) != 1
                or ring.replica_set_of(primaries.pop(), self.replication) != batch.replica_set
            ):
                moved.append(batch)
        self.reroute(moved)
        if released:
            self._send_open_rows()

    def release_held(self, send: bool = True) -> None:
        """End every hold: the held rows join the open ones by the current view (sent at
        once unless ``send`` is False: the caller sends them)."""
        held = self._holds.release()
        self._batcher.reopen(held)
        if held and send:
            self._send_open_rows()

    def reroute(self, batches: list[OutBatch]) -> None:
        """Take ``batches``, and every batch after one of them on any channel, off their
        channels and send their rows again by the current view.

        Guarantee: no node gets a later seq of a slot before an earlier one re-routed. A
        batch sent after a re-routed one may hold later tuples of the same slots: on a
        channel the re-routed batch shared with it (a batch goes to every node of its
        replica set, and a refusal re-routes it off all of them), the node would take the
        later batch first, past the hole, and its hwm would then drop the re-routed tuples
        as duplicates: a silent loss.
        """
        if not batches:
            return
        for batch in self._channels.take_off(batches):
            self.reroutes += 1
            self._batcher.reopen(batch.rows)
        self._send_open_rows()

    def _send_open_rows(self) -> None:
        """Send every open row now; re-routes within re-routes (views that keep changing
        while batches wait for window room) leave them open for the next flush rather than
        send them from ever deeper in the stack."""
        self._batcher.send_open_rows(hold_back=self._channels.pump_depth > REROUTE_DEPTH_MAX)
