"""The emitter when the ring changes under it: re-routes and holds (step 5 of
:mod:`smr.emitter`).

A view change re-routes every batch whose replica set changed (its rows go out again, with
their seqs, by the new view). A node handing a range over in a move refuses batches with a
slot of it and names the range (``smr.wire.messages.NotOwner``): the emitter then holds back the
tuples of those slots only and re-routes the rest at once, so the slots that do not move never
wait for the move; the held tuples go out again, in seq order per slot, when the move ends (a
new view, a NACK from that node) or when no word came for a resend interval.

Functions of the emitter, like the emit closures of :mod:`smr.emit_path`: they read and
mutate its routing tables and channels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from smr.channels import Channel, OutBatch, Row, in_flight, slot_and_seq, with_later_batches
from smr.ring.ids import Epoch, NodeId
from smr.ring.placement import SlotRange
from smr.ring.view import View
from smr.wire.codec import encode, pack_body
from smr.wire.kinds import ChannelNumber, RequestId
from smr.wire.messages import ViewReply

if TYPE_CHECKING:
    from smr.emitter import Emitter

# Past this many nested pump calls, re-routed rows wait for the next flush (see reroute).
REROUTE_DEPTH_MAX: Final = 8


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


def on_not_owner(
    emitter: Emitter,
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
    epoch_before = emitter.view.epoch
    on_view(emitter, view)
    # 2.
    if node_epoch < emitter.view.epoch:
        push = ViewReply(RequestId(0), emitter.view.epoch, pack_body(emitter.view.to_wire()))
        channel.outbox.send(encode(push))
        emitter.views_pushed += 1
    elif emitter.view.epoch == epoch_before:
        # The same view on both sides: the node is handing these slots over (a move).
        # Sending them again by this view would be refused again: hold them back, ask
        # the other nodes for news; the node sends the new view (or a NACK, if the move
        # is called off) when it ends, and a hold past the resend time ends anyway.
        emitter._ask_view([c for c in emitter._live_channels() if c is not channel])
        if not frozen.length:
            return
        emitter._holds.begin(channel.node, frozen, emitter._clock())
    else:
        channel.progress_at = emitter._clock()
    # 3. The node does not advance the channel past a refused batch, so the later ones
    #    on it can reach the node only after the refused one is sent again: out of seq
    #    order, and the node's hwm would drop the older tuples as duplicates. Re-route
    #    them all together (their rows go out sorted by slot and seq); `reroute` takes
    #    along the batches after them on the other channels too.
    batch = channel.unacked.get(chan)
    if batch is not None and not batch.rerouted:
        reroute(emitter, [held for number, held in channel.unacked.items() if number >= chan])


def on_view(emitter: Emitter, view: View) -> None:
    """Adopt a newer view; re-route every in-flight batch whose replica set changed."""
    merged = emitter.view.merge(view)
    if merged.epoch == emitter.view.epoch:
        return
    emitter.view_changes += 1
    emitter._set_view(merged)
    # A new view ends the holds (a move that ended shows in it): the held tuples go
    # out with the re-routed ones, by the new view.
    released = bool(emitter._holds.rows)
    release_held(emitter, send=False)
    ring = emitter.ring
    moved = []
    for batch in in_flight(emitter._channels.values()):
        primaries = {ring.primary(row[0]) for row in batch.rows}  # type: ignore[arg-type]
        if (
            len(primaries) != 1
            or ring.replica_set_of(primaries.pop(), emitter.replication) != batch.replica_set
        ):
            moved.append(batch)
    reroute(emitter, moved)
    if released:
        send_open_rows(emitter)


def release_held(emitter: Emitter, send: bool = True) -> None:
    """End every hold: the held rows join the open ones by the current view (sent at
    once unless ``send`` is False: the caller sends them)."""
    held = emitter._holds.release()
    for row in held:
        emitter._open_rows[emitter._dest_of_slot[row[0]]].append(row)
    if held and send:
        send_open_rows(emitter)


def reroute(emitter: Emitter, batches: list[OutBatch]) -> None:
    """Take ``batches``, and every batch after one of them on any channel, off their
    channels and send their rows again by the current view.

    Guarantee: no node gets a later seq of a slot before an earlier one re-routed. A batch
    sent after a re-routed one may hold later tuples of the same slots: on a channel the
    re-routed batch shared with it (a batch goes to every node of its replica set, and a
    refusal re-routes it off all of them), the node would take the later batch first, past
    the hole, and its hwm would then drop the re-routed tuples as duplicates: a silent loss.
    """
    if not batches:
        return
    batches = with_later_batches(emitter._channels.values(), batches)
    for batch in batches:
        batch.rerouted = True
        for node in list(batch.waiting_for):
            other = emitter._channels.get(node)
            if other is None:
                continue  # a node of its set whose channel the batch never reached
            for number, held in list(other.unacked.items()):
                if held is batch:
                    del other.unacked[number]
        batch.waiting_for.clear()
        emitter.reroutes += 1
        for row in batch.rows:
            emitter._open_rows[emitter._dest_of_slot[row[0]]].append(row)
    send_open_rows(emitter)


def send_open_rows(emitter: Emitter) -> None:
    """Send every open row now (re-routed and released ones among them)."""
    # Re-routed and released rows went in after newer open rows of their slots: restore seq
    # order per slot, which the nodes rely on (the primary's hwm dedup drops a seq below
    # one already applied; a secondary summarises a batch by the last seq of each slot).
    # Every destination first: sending one may wait for window room, and a view change
    # meanwhile moves the others' rows to destinations this loop has passed already.
    for rows in emitter._open_rows:
        rows.sort(key=slot_and_seq)
    for dest, rows in enumerate(emitter._open_rows):
        if rows:
            if emitter._pump_depth > REROUTE_DEPTH_MAX:
                # Re-routes within re-routes (views that keep changing while batches wait
                # for window room): leave the rows open for the next flush, rather than
                # send them from ever deeper in the stack.
                continue
            emitter._open_rows[dest] = []
            emitter._send_batch(dest, rows)
