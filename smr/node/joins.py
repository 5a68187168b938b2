"""Joins: a standby node J takes the top of an owner P's range (scale-out). A join is a move
(``smr.node.moves``) whose receiver is J, which first catches up as an extra secondary, so
the move needs no copy holder. The steps (told in full in
docs/design/node-protocols.md#joins): 1. ask (J); 2. offer (P), or refuse; 3. join (J writes
itself ``joining`` at the split); 4. catch up (J); 5. the move's steps 4-7; 6. call off.

Guarantee: every replica set J enters already holds J's copy: ``r + 1`` copies throughout.
"""

from __future__ import annotations

import logging
from typing import Final, Protocol

from smr.checkpoint.ids import CheckpointNumber
from smr.node.giving import Giving
from smr.node.load import LoadMeter
from smr.node.membership import PeerLoad
from smr.node.move_taking import Agreed, MoveTaking
from smr.node.ports import NodeBasics
from smr.ring.ids import NodeId, Slot, Token
from smr.ring.moves import MovePlan, MoveRefused, join_blocked_by, plan_join
from smr.ring.placement import SlotRange, split_at_load_share
from smr.ring.view import Status, View, joining_at, with_status
from smr.ring.zones import join_position
from smr.wire.kinds import MoveNumber
from smr.wire.peer import Gossip, MoveAnswer, MoveCopied, MovePropose, PeerMessages


class JoiningMoves(Protocol):
    """What the joins ask of the moves that hold them (``smr.node.moves``)."""

    @property
    def busy(self) -> bool: ...
    @property
    def committed(self) -> bool: ...
    @property
    def giving(self) -> Giving | None: ...
    @property
    def taking(self) -> MoveTaking: ...
    def begin_giving(self, plan: MovePlan) -> Giving: ...
    def call_off(self, reason: str, tell: bool = True, dropped: bool = False) -> None: ...


class JoinerCopies(Protocol):
    """What a joiner asks of the replication (``smr.node.replication``): how far its copies
    of its predecessors are."""

    def caught_up_with(self, owners: tuple[NodeId, ...]) -> bool: ...
    def replica_checkpoint(self, owner: NodeId) -> CheckpointNumber | None: ...


class JoinsMembership(Protocol):
    """What the joins ask of the membership (``smr.node.membership``)."""

    def gossip(self) -> None: ...
    def view_body(self) -> bytes: ...
    def load_of(self, peer: NodeId) -> PeerLoad | None: ...


class FencedSince(Protocol):
    """What a fenced node's rejoining asks of the recovery (``smr.node.recovery``)."""

    def fenced_since(self) -> float | None: ...


class JoinsNode(NodeBasics, Protocol):
    """What the joins use of the node (``smr.node.core.NodeCore``)."""

    @property
    def predecessors(self) -> tuple[NodeId, ...]: ...
    @property
    def load(self) -> LoadMeter: ...
    @property
    def membership(self) -> JoinsMembership: ...
    @property
    def replication(self) -> JoinerCopies: ...
    @property
    def recovery(self) -> FencedSince: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...
    def set_view(self, view: View) -> None: ...


log = logging.getLogger("smr.node")

# Step 1: an offer within this long, or the joiner stops waiting for it.
OFFER_TIMEOUT_S: Final = 2.0
# Step 6: after the commit, a giver whose joiner's connection dropped waits this long for
# the joiner's answer or a view that settles the join before it marks the joiner dead.
COMMITTED_GIVE_UP_S: Final = 5.0
# A fenced node on standby asks to join again this often (NodeSettings.rejoin_after_fence_ms).
REJOIN_RETRY_S: Final = 5.0


class Joins:
    """The joiner's side of joins, and the giver's answer to a request (the module doc)."""

    def __init__(self, node: JoinsNode, moves: JoiningMoves) -> None:
        self._node = node
        self._moves = moves
        # At a joiner: the owner asked (step 1), and when.
        self.asked: tuple[NodeId, float] | None = None
        # At a giver: when the committed joiner's connection dropped (step 6).
        self._dropped_at: float | None = None
        # At a fenced node: when it last asked to join again.
        self._rejoin_asked_at = -1e9
        self._started_at = node.clock()

    def reset(self) -> None:
        """Forget every join (fencing)."""
        self.asked = None
        self._dropped_at = None

    # -- 1. ask (joiner) ------------------------------------------------------------------

    def request(self, beside: NodeId) -> str:
        """Ask ``beside`` for the top of its range; raises ``MoveRefused`` saying why not."""
        node = self._node
        me = node.view.get(node.node_id)
        if me is None or me.status is not Status.STANDBY:
            status = me.status.value if me is not None else "unknown"
            raise MoveRefused(f"{node.node_id} is {status}: only a standby node joins")
        if self._moves.busy:
            raise MoveRefused(f"{node.node_id} already takes part in a move or join")
        if node.ring.range_of(beside) is None:
            raise MoveRefused(f"{beside} owns no range to join beside")
        self.asked = (beside, node.clock())
        # The node asked may not know this one yet (it started a moment ago), and an ask
        # from a node not in its view is dropped: this node's view goes first.
        node.peer_send(beside, Gossip(*node.stamp, node.membership.view_body()))
        ask = MovePropose(
            *node.stamp, MoveNumber(0), Slot(0), 0, False, node.node_id, node.node_id, 0, False
        )
        node.peer_send(beside, ask)
        log.warning("asked %s to join beside it", beside)
        return f"{node.node_id} asked to join beside {beside}"

    # -- 2. offer (giver) -----------------------------------------------------------------

    def on_request(self, joiner: NodeId, message: MovePropose) -> None:
        """Step 2: offer the top of this node's range to ``joiner``, or refuse."""
        node = self._node
        reason = self._refusal(joiner)
        if reason is not None:
            node.peer_send(joiner, MoveAnswer(*node.stamp, MoveNumber(0), False, reason))
            return
        own = node.ring.range_of(node.node_id)
        assert own is not None
        split = split_at_load_share(own, node.load.rates(), 0.5)
        offset = (split - own.start) % own.slot_count
        moving = SlotRange(split, own.length - offset, own.slot_count)
        plan = MovePlan(node.node_id, joiner, joiner, moving, False, True)
        giving = self._moves.begin_giving(plan)
        offer = MovePropose(
            *node.stamp, giving.number, moving.start, moving.length, False, joiner, joiner, 0, False
        )
        node.peer_send(joiner, offer)

    def _refusal(self, joiner: NodeId) -> str | None:
        node = self._node
        me = node.node_id
        member = node.view.get(joiner)
        own = node.ring.range_of(me)
        if member is None or member.status is not Status.STANDBY:
            return f"{joiner} is not on standby in {me}'s view"
        if node.settings.replication < 1:
            return "a join needs replication r >= 1: the joiner catches up as a replica"
        if own is None or own.length < 2:
            return f"{me} has no range of two slots or more to split"
        if self._moves.busy:
            return f"{me} already takes part in a move"
        blocking = join_blocked_by(node.ring, me, node.settings.replication)
        if blocking is not None:
            return f"{blocking} is joining next to {me}: one join there at a time"
        return None

    # -- 3. join (joiner) -----------------------------------------------------------------

    def on_offer(self, giver: NodeId, message: MovePropose, moving: SlotRange) -> None:
        """Step 3: join at the offered split, or refuse the offer."""
        node = self._node
        me = node.node_id
        asked = self.asked
        member = node.view.get(me)
        reason: str | None = None
        if asked is None or asked[0] != giver:
            reason = f"{me} did not ask {giver} to join"
        elif member is None or member.status is not Status.STANDBY:
            reason = f"{me} is no longer on standby"
        if reason is None:
            self.asked = None
            node.set_view(joining_at(node.view, me, Token(moving.start)))
            node.membership.gossip()
            try:
                plan = plan_join(node.ring, me, node.settings.replication)
            except MoveRefused as refused:
                plan = None
                reason = str(refused)
            if plan is None or plan.giver != giver or plan.moving != moving:
                reason = reason or f"{me}'s view places the join otherwise (views differ)"
                self.go_back_to_standby(reason)
            else:
                agreed = Agreed(giver, message.incarnation, message.move, plan, node.clock())
                self._moves.taking.receiving = agreed
                log.warning("joining beside %s at token %s: catching up", giver, moving.start)
        accepted = reason is None
        node.peer_send(giver, MoveAnswer(*node.stamp, message.move, accepted, reason or ""))

    # -- 4. catch up (joiner) -------------------------------------------------------------

    def progress(self) -> None:
        """Step 4: after a snapshot ended or a checkpoint applied here, tell the giver once
        every replica this joiner keeps is complete."""
        node = self._node
        agreed = self._moves.taking.receiving
        if agreed is None or not agreed.plan.join:
            return
        if not node.replication.caught_up_with(node.predecessors):
            return
        through = node.replication.replica_checkpoint(agreed.giver)
        if through is not None:
            node.peer_send(agreed.giver, MoveCopied(*node.stamp, agreed.number, through))

    # -- 6. call off ----------------------------------------------------------------------

    def giver_called_off(self, joiner: NodeId, *, dropped: bool = False) -> None:
        """At the giver, after calling a join off: if the joiner's connection dropped, mark
        it dead, so that the feeders stop waiting for its acks."""
        node = self._node
        self._dropped_at = None
        member = node.view.get(joiner)
        if dropped and member is not None and member.status is Status.JOINING:
            node.set_view(node.view.mark_dead(joiner))
            node.membership.gossip()

    def go_back_to_standby(self, reason: str) -> None:
        """At the joiner: the join is over without a switch; on standby again."""
        node = self._node
        self._moves.taking.receiving = None
        member = node.view.get(node.node_id)
        if member is not None and member.status is Status.JOINING:
            node.set_view(with_status(node.view, node.node_id, Status.STANDBY))
            node.membership.gossip()
            log.warning("the join is off (%s): on standby again", reason)

    def follow_view(self) -> None:
        """At a joiner: a giver gone, or a ring that places the join otherwise, ends it."""
        node = self._node
        agreed = self._moves.taking.receiving
        if agreed is None or not agreed.plan.join:
            return
        me = node.view.get(node.node_id)
        if me is None or me.status is not Status.JOINING:
            return
        try:
            plan = plan_join(node.ring, node.node_id, node.settings.replication)
        except MoveRefused as refused:
            self.go_back_to_standby(str(refused))
            return
        if plan != agreed.plan:
            self.go_back_to_standby(f"the ring changed under the join ({agreed.giver} is gone)")

    def joiner_dropped(self, joiner: NodeId) -> None:
        """At the giver: the joiner's connection dropped (a crash, most often)."""
        giving = self._moves.giving
        if giving is None or not giving.plan.join or giving.plan.receiver != joiner:
            return
        if self._moves.committed:
            self._dropped_at = self._dropped_at or self._node.clock()
            return
        self._moves.call_off(f"{joiner}'s connection dropped", tell=False, dropped=True)

    def rejoin(self, now: float) -> None:
        """A fenced node on standby is capacity: once ``rejoin_after_fence_ms`` passed since
        it was fenced (or ``join_after_start_ms`` since a node that joins by itself
        started), it asks to join beside the busiest owner where the zones stay spread
        (`_where_to_join`), every ``REJOIN_RETRY_S`` until it joined."""
        node = self._node
        fenced_at = node.recovery.fenced_since()
        if fenced_at is not None:
            wait_ms, since = node.settings.rejoin_after_fence_ms, fenced_at
        else:
            wait_ms, since = node.settings.join_after_start_ms, self._started_at
        if wait_ms is None or now - since < wait_ms / 1000:
            return
        me = node.view.get(node.node_id)
        if me is None or me.status is not Status.STANDBY or self._moves.busy:
            return
        if now - self._rejoin_asked_at < REJOIN_RETRY_S:
            return
        self._rejoin_asked_at = now
        ranges = node.ring.ranges()
        if not ranges:
            return
        try:
            self.request(self._where_to_join(me.zone))
        except MoveRefused as refused:
            log.info("not rejoining yet: %s", refused)

    def _where_to_join(self, zone: str) -> NodeId:
        """The owner to join beside: among the places that leave the fewest ranges with every
        copy in one zone (`ring.zones.join_position`), the busiest by the applied tuples per
        second its heartbeats last said (the largest range on ties, and for owners not heard
        from)."""
        node = self._node
        ranges = node.ring.ranges()
        zone_of = {member.node_id: member.zone for member in node.view.owners()}
        membership = node.membership
        rates = [
            load.beat.applied_per_s if (load := membership.load_of(owner)) is not None else 0.0
            for owner, _ in ranges
        ]
        shares = [slot_range.share for _, slot_range in ranges]
        zones = [zone_of[owner] for owner, _ in ranges]
        return ranges[join_position(zones, zone, node.settings.replication, rates, shares)][0]

    def tick(self, now: float) -> None:
        """Timeouts: an offer never made (joiner), a committed joiner gone (giver); a
        fenced node's rejoining."""
        self.rejoin(now)
        if self.asked is not None and now - self.asked[1] > OFFER_TIMEOUT_S:
            log.warning("%s made no join offer in time", self.asked[0])
            self.asked = None
        if self._dropped_at is not None and now - self._dropped_at > COMMITTED_GIVE_UP_S:
            self._dropped_at = None
            giving = self._moves.giving
            if giving is not None and giving.plan.join:
                joiner = giving.plan.receiver
                self._moves.call_off(f"{joiner} is gone and never answered", dropped=True)
