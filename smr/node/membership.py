"""Membership: the view a node routes by, how it spreads (gossip, heartbeats) and how two
nodes with different views repair each other (docs/design/architecture.md#view).

Range moves, joins and leaves (docs/design/architecture.md#moves) belong here too: they are changes
of the view that the owner of a range authorises.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final, Protocol

from smr.node.load import LoadMeter
from smr.node.ports import Backlog, NodeBasics
from smr.node.restart import RestartExchange
from smr.node.throttle import Throttle
from smr.ring.ids import Epoch, Incarnation, NodeId
from smr.ring.lease import ReadLease
from smr.ring.placement import Ring, grown_clockwise, taken_over_in
from smr.ring.view import Status, View
from smr.wire.codec import encode, pack_body, unpack_body
from smr.wire.kinds import FrameError
from smr.wire.messages import ViewReply
from smr.wire.peer import BeatAck, Gossip, Heartbeat, PeerMessage, PeerMessages


class InboxBacklog(Protocol):
    """What a heartbeat asks of the intake (``smr.node.ingest``)."""

    def backlog(self) -> Backlog: ...


class SignsOfLife(Protocol):
    """What the membership tells the recovery (``smr.node.recovery``): a peer was heard."""

    def sign_of_life(self, peer: NodeId, busy: bool | None = None) -> None: ...


class MembershipNode(NodeBasics, Protocol):
    """What the membership uses of the node (``smr.node.core.NodeCore``)."""

    @property
    def incarnation(self) -> Incarnation: ...
    @property
    def secondaries(self) -> tuple[NodeId, ...]: ...
    @property
    def slot_bits(self) -> int: ...
    @property
    def tuples_per_s(self) -> float: ...
    @property
    def load(self) -> LoadMeter: ...
    @property
    def ingest(self) -> InboxBacklog: ...
    @property
    def restart(self) -> RestartExchange: ...
    @property
    def recovery(self) -> SignsOfLife: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...
    def set_view(self, view: View) -> None: ...


log = logging.getLogger("smr.node")


# The heartbeat fields that report the sender's load (see Heartbeat).
LOAD_FIELDS: Final = (
    "busy",
    "stuck",
    "stalled_ms",
    "inbox_tuples",
    "applied_per_s",
    "cpu_percent",
)


@dataclass(frozen=True)
class PeerLoad:
    """A peer's last heartbeat (``smr.wire.peer.Heartbeat``, its load fields) and when it
    arrived (this node's clock)."""

    beat: Heartbeat
    heard_at: float

    def report(self, now: float) -> dict[str, Any]:
        """For ``status``: the load fields, and how long ago the heartbeat arrived."""
        report: dict[str, Any] = {name: getattr(self.beat, name) for name in LOAD_FIELDS}
        report["heard_ms_ago"] = round((now - self.heard_at) * 1000)
        return report


class Membership:
    """View repair and gossip for one node.

    Guarantees: a view is merged (never replaced), so an entry only moves forward in
    precedence; a node whose view differs from a peer's learns the newer one within a
    heartbeat interval of any message between them, in either direction.
    """

    def __init__(self, node: MembershipNode) -> None:
        self._node = node
        # View repair: the last (epoch, time) this node's view was sent to each peer.
        self._view_sent_at: dict[NodeId, tuple[Epoch, float]] = {}
        self._view_body_cache: tuple[int, bytes] = (-1, b"")
        self._last_heartbeat = -1e9
        self._refusal_log = Throttle()
        # The load each peer's last heartbeat reported.
        self.peer_load: dict[NodeId, PeerLoad] = {}
        self._standby_turn = 0
        # Whether a view from a peer or a client was merged yet (else the view is the
        # spec's, as the node started).
        self._learned = False
        # The heartbeats' numbers and the secondaries' echoes of them: the read lease.
        self._beat = 0
        self.read_lease = ReadLease(node.settings.failure_timeout_ms / 1000)

    def merge_view(self, incoming: View) -> bool:
        """Merge a view heard from a peer or a client; True if it brought news."""
        node = self._node
        merged = node.view.merge(incoming)
        if merged.epoch == node.view.epoch:
            return False
        # A view that would hand an owner slots of a clockwise neighbour without a takeover
        # is refused: applied, it would serve those slots from empty state. Unless it shows
        # this node taken over (marked dead, a successor on its token): then it fences,
        # serving nothing, whatever else it shows. (A node that switched a move on its own
        # view just before learning of that takeover sees its switch undone by the mark,
        # and the giver serves the slots again: see smr.node.move_taking.)
        # A taker sits on this node's token and is not leaving (a leaving owner sorts first
        # on the token it hands over: it takes nothing), or this node's successor holds its
        # token having taken a run of dead nodes over (ring.placement.taken_over_in). A view
        # that marks this node dead and leaves no owner at all is refused too: applied, it
        # would fence the node and leave its range to nobody.
        me = merged.get(node.node_id)
        marked = me is not None and me.status is Status.DEAD and me.incarnation == node.incarnation
        merged_ring = Ring(merged, node.slot_bits)
        if marked and taken_over_in(node.ring, merged_ring, node.node_id):
            why = ""
        elif marked and not merged_ring.owners:
            why = "marks this node dead and leaves its range to nobody"
        elif node.restart.settling:
            # Restored from disk: a view restored by a peer is a descendant of this one,
            # which may have missed the last checkpoint interval's changes
            # (smr.node.restart, step 2). This node serves nothing yet.
            why = ""
        elif not self._learned and self._on_standby():
            # A standby node that has heard no view yet knows the ring only from the spec it
            # started from, whose tokens moves may have long changed: against it, the true
            # view looks forged (a node added after moves refused every view and never
            # joined). It serves nothing, so it takes the first view it hears; from then on
            # it judges views as every node does.
            why = ""
        else:
            grown = grown_clockwise(node.ring, merged_ring)
            named = ", ".join(grown)
            why = f"gives {named} slots of a live neighbour with no takeover" if grown else ""
        if why:
            node.counters.views_refused += 1
            if self._refusal_log.due(node.clock()):
                log.warning("refused a view that %s (forged or corrupt): %r", why, incoming)
            return False
        node.set_view(merged)
        self._learned = True
        self.gossip()
        return True

    def _on_standby(self) -> bool:
        """True while this node is on standby in its own view (it owns no range and is not
        joining: it serves and takes over nothing)."""
        me = self._node.view.get(self._node.node_id)
        return me is not None and me.status is Status.STANDBY

    def view_body(self) -> bytes:
        """This node's view, encoded (once per epoch)."""
        view = self._node.view
        epoch, body = self._view_body_cache
        if epoch != view.epoch:
            body = pack_body(view.to_wire())
            self._view_body_cache = (view.epoch, body)
        return body

    def gossip(self) -> None:
        """Send this node's view to every other live member."""
        node = self._node
        body = self.view_body()
        for member in node.view.members.values():
            if member.node_id != node.node_id and member.status is not Status.DEAD:
                node.peer_send(member.node_id, Gossip(*node.stamp, body))

    def heartbeat(self, now: float) -> None:
        """Every heartbeat interval, a heartbeat to each secondary (they watch this node),
        carrying this node's load and view: a secondary that missed a view change (its
        gossip was lost) catches up within a heartbeat."""
        node = self._node
        if now - self._last_heartbeat >= node.settings.heartbeat_interval_ms / 1000:
            self._last_heartbeat = now
            self._beat += 1
            self.read_lease.sent(self._beat, now)
            backlog = node.ingest.backlog()
            beat = Heartbeat(
                *node.stamp,
                busy=backlog.behind,
                stuck=False,
                stalled_ms=0,
                inbox_tuples=backlog.tuples,
                applied_per_s=round(node.tuples_per_s),
                cpu_percent=round(node.load.cpu_share_percent()),
                beat=self._beat,
                body=self.view_body(),
            )
            for secondary in node.secondaries:
                node.peer_send(secondary, beat)
            if node.ring.range_of(node.node_id) is None:
                self._standby_gossip()

    def _standby_gossip(self) -> None:
        """A node that owns nothing (standby, fenced) has no secondaries to beat to and
        watches nobody, so nothing it sends would make a peer repair its view: each
        heartbeat interval it gossips its view to one live member, in turn. A change it
        missed (a later view marking it dead, say) comes back with the answer."""
        node = self._node
        peers = sorted(
            member.node_id
            for member in node.view.members.values()
            if member.node_id != node.node_id and member.status is not Status.DEAD
        )
        if peers:
            self._standby_turn = (self._standby_turn + 1) % len(peers)
            node.peer_send(peers[self._standby_turn], Gossip(*node.stamp, self.view_body()))

    def stalled_beats(self, stalled_ms: int, stuck: bool) -> list[tuple[NodeId, str, list[bytes]]]:
        """The heartbeats a node sends while its loop has been stalled for ``stalled_ms``
        (``stuck`` past its threshold), as ``(node, address, frames)``: while the node's
        loop is stalled in a slow reduce call, a thread of its own (or the simulation) sends
        them, so that the node is never declared dead for being slow
        (docs/design/architecture.md#failures); they say it is busy. They go to every live member,
        not only the secondaries: a stalled node reads no view change, so it cannot know who watches
        it now (a predecessor that died meanwhile hands the watch to a node it never beat).

        Reads only references the loop swaps whole (the view) and plain counters, so it may
        run on another thread while the loop is stalled; it sends nothing itself.
        """
        node = self._node
        view = node.view
        beat = Heartbeat(
            node.node_id,
            node.incarnation,
            view.epoch,
            busy=True,
            stuck=stuck,
            stalled_ms=stalled_ms,
            inbox_tuples=node.ingest.backlog().tuples,
            applied_per_s=round(node.tuples_per_s),
            cpu_percent=round(node.load.cpu_share_percent()),
            beat=0,
            body=self.view_body(),
        )
        frames = encode(beat)
        return [
            (member.node_id, member.addr, frames)
            for member in view.members.values()
            if member.node_id != node.node_id and member.status is not Status.DEAD
        ]

    def _send_view(self, peer: NodeId) -> None:
        """Send ``peer`` this node's view (a GOSSIP), at most once per heartbeat interval per
        peer and epoch: a burst of messages from a peer with another view (snapshot chunks,
        checkpoints) is answered once, not once per message."""
        node = self._node
        now = node.clock()
        epoch, sent_at = self._view_sent_at.get(peer, (-1, -1e9))
        if epoch == node.view.epoch and now - sent_at < node.settings.heartbeat_interval_ms / 1000:
            return
        self._view_sent_at[peer] = (node.view.epoch, now)
        node.peer_send(peer, Gossip(*node.stamp, self.view_body()))

    def from_live_peer(self, message: PeerMessage, repair: bool = True) -> NodeId | None:
        """The sender of a peer message, or None if it is not a live incarnation in our view
        (then it is sent our view, so that a fenced node learns it was marked dead).

        View repair (both ways, whatever the message): every peer message carries the
        sender's view epoch. If it differs from ours, the sender is sent our view: a sender
        with an older view merges it and catches up; a sender with a newer one finds ours has
        nothing for it and answers with its own (``on_gossip``), and we catch up. With
        ``repair=False`` the caller does this itself (the message carries a view).
        """
        node = self._node
        sender = message.sender
        member = node.view.get(sender)
        if (
            member is None
            or member.incarnation != message.incarnation
            or member.status is Status.DEAD
        ):
            if member is not None:
                self._send_view(sender)
            return None
        node.recovery.sign_of_life(sender)
        if repair and message.epoch != node.view.epoch:
            self._send_view(sender)
        return sender

    def load_of(self, peer: NodeId) -> PeerLoad | None:
        """What the last heartbeat of ``peer`` said of its load (None: none heard)."""
        return self.peer_load.get(peer)

    def peer_loads(self, now: float) -> dict[NodeId, Any]:
        """What the last heartbeat of each peer that beats to this node said of its load,
        as ``smr status`` shows it."""
        return {peer: load.report(now) for peer, load in self.peer_load.items()}

    def on_heartbeat(self, identity: bytes, message: Heartbeat) -> None:
        """A heartbeat is a sign of life and carries its sender's view: merged when the
        epochs differ; if ours is then still not the sender's, ours goes back."""
        node = self._node
        sender = self.from_live_peer(message, repair=False)
        if sender is None:
            return
        if message.beat > 0:
            node.peer_send(sender, BeatAck(*node.stamp, message.beat))
        before = self.peer_load.get(sender)
        self.peer_load[sender] = PeerLoad(message, node.clock())
        node.recovery.sign_of_life(sender, busy=message.busy)
        if message.stuck and (before is None or not before.beat.stuck):
            log.error(
                "%s reports itself stuck: its loop has read nothing for %d ms (it is not "
                "declared dead for it)",
                sender,
                message.stalled_ms,
            )
        if message.epoch == node.view.epoch:
            node.restart.heard(sender, node.clock(), node.view)
            return
        if message.body:
            self.merge_view(_view_in(message, "heartbeat"))
            node.restart.heard(sender, node.clock(), node.view)
        if message.epoch != node.view.epoch:
            self._send_view(sender)

    def on_beat_ack(self, identity: bytes, message: BeatAck) -> None:
        """A secondary echoed a heartbeat: the read lease runs from that beat's sending."""
        sender = self.from_live_peer(message)
        if sender is not None:
            self.read_lease.echoed(sender, message.beat)

    def holds_read_lease(self) -> bool:
        """True while none of this node's secondaries may have declared it dead on silence
        (``ring.lease``): its reads may answer as its slots' primary."""
        node = self._node
        return self.read_lease.holds(node.clock(), node.secondaries)

    def read_lease_ms(self) -> int | None:
        """How long the read lease still runs, in ms (0 if it ran out, None if no
        secondary watches this node)."""
        node = self._node
        if not node.secondaries:
            return None
        left_s = self.read_lease.expires_at(node.secondaries) - node.clock()
        return max(0, round(left_s * 1000)) if left_s != float("-inf") else 0

    def on_gossip(self, identity: bytes, message: Gossip) -> None:
        """Merge a peer's view; a sender whose view is older than ours gets ours back."""
        node = self._node
        view = _view_in(message, "gossip")
        sender = message.sender
        node.recovery.sign_of_life(sender)
        self.merge_view(view)
        node.restart.heard(sender, node.clock(), node.view)
        # Repair both ways. Merges only grow the epoch, so this stops as soon as both hold
        # the same view.
        if node.view.epoch > view.epoch and sender in node.view.members:
            node.peer_send(sender, Gossip(*node.stamp, self.view_body()))

    def on_view_push(self, identity: bytes, message: ViewReply) -> None:
        """A view sent unasked by a client (an emitter whose batch this node refused by an
        older view): merged like gossip."""
        self.merge_view(_view_in(message, "a client's view"))


def _view_in(message: Heartbeat | Gossip | ViewReply, what: str) -> View:
    """The view a message carries as its body; FrameError if it is malformed."""
    try:
        return View.from_wire(unpack_body(message.body))
    except ValueError as error:
        raise FrameError(f"malformed view in {what}: {error}") from None
