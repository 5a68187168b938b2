"""Moves: the top of a range (or all of it: a leave) handed to the clockwise neighbour by
promotion, not transfer. Three nodes take part (``ring.moves.plan_move``): the giver G, the
receiver R (its clockwise neighbour, which holds a replica of G's range) and the copy holder
H. The steps (told in full in docs/design/node-protocols.md#moves): 1. propose (G); 2. answer
(R, H); 3. copy (G to H); 4. freeze (G) and checkpoint ``final``; 5. commit (G); 6. promote
and switch (R, ``smr.node.move_taking``); 7. switch (every node, on the view); 8. call off.
G's steps run in ``smr.node.giving.Giver``, which owns the move's record and the freeze; this
module plans a move, answers proposals, and settles what timeouts and views settle.

Guarantee: slots that do not move are never refused; every tuple of a moving slot is applied
exactly once (before ``final`` by G, after it by R); the moved slots keep ``r + 1`` copies.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection
from typing import Any, Final, Protocol

from smr.checkpoint.ids import CheckpointNumber
from smr.node.balance import Balancer
from smr.node.giving import (
    Giver,
    GiverNode,
    Giving,
    GivingIntake,
    Step,
    describe,
    holds,
    still_planned,
)
from smr.node.joins import FencedSince, JoinerCopies, Joins, JoinsMembership, JoinsNode
from smr.node.load import LoadMeter
from smr.node.move_taking import MoveTaking, MoveTakingNode
from smr.node.ports import Promotion, TakenCopies, ViewGossip
from smr.ring.ids import NodeId, Slot
from smr.ring.moves import MovePlan, MoveRefused, move_done_in, plan_move
from smr.ring.placement import SlotRange, split_at_load_share
from smr.ring.view import OWNING_STATUSES, Status
from smr.wire.kinds import FrameError, StreamId
from smr.wire.peer import (
    MoveAnswer,
    MoveCommit,
    MoveCopied,
    MoveDone,
    MovePropose,
    MoveSwitched,
    PeerMessages,
)


class MoveCopiesKept(TakenCopies, JoinerCopies, Protocol):
    """What the moves, the taking side and the joins ask of the replication
    (``smr.node.replication``): the copies."""


class MovesMembership(ViewGossip, JoinsMembership, Protocol):
    """What the moves and the joins ask of the membership (``smr.node.membership``)."""


class MovesRecovery(Promotion, FencedSince, Protocol):
    """What the taking side and the joins ask of the recovery (``smr.node.recovery``)."""


class MovesNode(GiverNode, JoinsNode, MoveTakingNode, Protocol):
    """What the moves use of the node (``smr.node.core.NodeCore``), with what they hand on
    to their giver (``GiverNode``), joins (``JoinsNode``) and taking side (``MoveTakingNode``)."""

    @property
    def load(self) -> LoadMeter: ...
    @property
    def balancer(self) -> Balancer | None: ...
    @property
    def ingest(self) -> GivingIntake: ...
    @property
    def membership(self) -> MovesMembership: ...
    @property
    def replication(self) -> MoveCopiesKept: ...
    @property
    def recovery(self) -> MovesRecovery: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...


log = logging.getLogger("smr.node")

# Step 2: both answers within this long, or the move is called off.
ANSWER_TIMEOUT_S: Final = 2.0
# Step 3: the copy holder's copy complete within this long (a big range takes a while).
COPY_TIMEOUT_S: Final = 120.0
# Steps 4-5: from the freeze to the commit at most this long; the moving slots' batches are
# refused meanwhile, so a slow copy holder calls the move off rather than hold them up.
FREEZE_TIMEOUT_S: Final = 2.0
# Step 5: the commit is sent again this often until the receiver answers.
COMMIT_RESEND_S: Final = 0.5
# A receiver or copy holder forgets a move it agreed to that never committed after this long.
AGREED_KEEP_S: Final = COPY_TIMEOUT_S + 10.0


class Moves:
    """The entry points for the moves a node takes part in (the protocol in the module doc;
    the giver's side is ``smr.node.giving.Giver``, the receiver's and copy holder's
    ``smr.node.move_taking``).

    Guarantees: a node takes part in at most one move at a time; the receiver switches
    only on a commit whose final checkpoint its replica applied; the giver unfreezes only
    when the move is called off before its commit, or when R's answer or the view settles
    it; slots outside the moving range are never refused.
    """

    def __init__(self, node: MovesNode) -> None:
        self._node = node
        self.giver = Giver(node, self)
        self.taking = MoveTaking(node, self)
        self.joins = Joins(node, self)
        # One record per move given or received here, for status and the benchmark.
        self.records: deque[dict[str, Any]] = deque(maxlen=64)

    @property
    def busy(self) -> bool:
        """True while this node takes part in a move."""
        taking = self.taking
        return (
            self.giver.giving is not None
            or taking.receiving is not None
            or taking.holding is not None
            or taking.settling is not None
            or self.joins.asked is not None
        )

    @property
    def giving(self) -> Giving | None:
        """The record of the move this node gives (``Giver``), if any."""
        return self.giver.giving

    @property
    def frozen(self) -> frozenset[Slot]:
        """The slots refused now (``Giver.freeze``)."""
        return self.giver.frozen

    def freeze(self, slots: SlotRange | None) -> None:
        """Refuse batches with a slot of ``slots`` from now on (None: refuse none): the
        giver's freeze (step 4), or a settling receiver's (``smr.node.move_taking``, 6c)."""
        self.giver.freeze(slots)

    def reset(self) -> None:
        """Forget every move (fencing): a fenced node serves nothing, so nothing is frozen."""
        self.giver.reset()
        self.taking.reset()
        self.joins.reset()

    # -- 1. propose (giver) ---------------------------------------------------------------

    def start(
        self, keep_share: float | None, accept_below: float | None = None, passed_on: bool = False
    ) -> str:
        """Start moving the top of this node's range, split so that about ``keep_share`` of
        its load stays here; with None, all of it (a leave). With ``accept_below`` (a
        balancing move, ``smr.node.balance``), the receiver accepts only while its
        utilisation is below it; ``passed_on``: this node was asked for such a move while
        too busy to take it. Returns what moves; raises ``MoveRefused`` saying why not."""
        node = self._node
        if self.busy:
            raise MoveRefused(f"{node.node_id} already takes part in a move")
        own = node.ring.range_of(node.node_id)
        if own is None:
            raise MoveRefused(f"{node.node_id} owns no range")
        split: Slot | None = None
        if keep_share is not None:
            if own.length < 2:
                raise MoveRefused(f"{node.node_id}'s range has one slot: it cannot be split")
            split = split_at_load_share(own, node.load.rates(), keep_share)
        plan = plan_move(node.ring, node.node_id, node.settings.replication, split)
        giving = self.giver.begin(plan)
        propose = MovePropose(
            *node.stamp,
            giving.number,
            plan.moving.start,
            plan.moving.length,
            plan.leave,
            plan.receiver,
            plan.copy_holder,
            round(accept_below * 1_000_000) if accept_below is not None else 0,
            passed_on,
        )
        node.peer_send(plan.receiver, propose)
        node.peer_send(plan.copy_holder, propose)
        what = describe(plan)
        log.warning("move %d proposed: %s", giving.number, what)
        return what

    def begin_giving(self, plan: MovePlan) -> Giving:
        """Start giving ``plan`` (step 1, ``Giver.begin``)."""
        return self.giver.begin(plan)

    def note_record(self, record: dict[str, Any]) -> None:
        """Keep ``record`` of a move given or received here (status shows the last ones)."""
        self.records.append(record)

    @property
    def committed(self) -> bool:
        """True while the move this node gives has been committed (step 5)."""
        return self.giver.committed

    @property
    def leaving(self) -> bool:
        """True while this node's leave is committed (``Giver.leaving``)."""
        return self.giver.leaving

    # -- 2. answer (receiver, copy holder) --------------------------------------------------

    def on_propose(self, identity: bytes, message: MovePropose) -> None:
        """Step 2: accept or refuse, as the receiver or the copy holder of the plan."""
        node = self._node
        giver = node.membership.from_live_peer(message)
        if giver is None:
            return
        if message.receiver == giver == message.copy_holder:
            # A standby node asks to join beside this one (smr.node.joins).
            self.joins.on_request(giver, message)
            return
        try:
            moving = SlotRange(message.range_start, message.range_length, node.ring.slot_count)
        except ValueError as error:
            raise FrameError(f"move proposal from {giver}: {error}") from None
        if message.receiver == node.node_id == message.copy_holder:
            self.joins.on_offer(giver, message, moving)
            return
        reason = self._refusal(giver, message, moving)
        if reason is None:
            split = None if message.leave else moving.start
            plan = plan_move(node.ring, giver, node.settings.replication, split)
            self.taking.agree(giver, message, plan)
        node.peer_send(giver, MoveAnswer(*node.stamp, message.move, reason is None, reason or ""))
        balancer = node.balancer
        asked_to_balance = message.accept_below_ppm > 0 and message.receiver == node.node_id
        if reason is not None and asked_to_balance and not message.passed_on and balancer:
            balancer.refused(node.clock())

    def _refusal(self, giver: NodeId, message: MovePropose, moving: SlotRange) -> str | None:
        """Why this node refuses the proposal, or None to accept."""
        node = self._node
        me = node.node_id
        if me not in (message.receiver, message.copy_holder):
            return f"{me} is neither the receiver nor the copy holder named"
        if self.busy:
            return f"{me} already takes part in a move"
        split = None if message.leave else moving.start
        try:
            plan = plan_move(node.ring, giver, node.settings.replication, split)
        except MoveRefused as refused:
            return f"in {me}'s view: {refused}"
        if (plan.receiver, plan.copy_holder, plan.moving) != (
            message.receiver,
            message.copy_holder,
            moving,
        ):
            return f"{me}'s view places the move otherwise (views differ; retry)"
        if plan.receiver != me:
            return None
        return self.taking.unready(giver, moving, message.accept_below_ppm)

    def on_answer(self, identity: bytes, message: MoveAnswer) -> None:
        """Step 2 at the giver (``Giver.on_answer``)."""
        sender = self._node.membership.from_live_peer(message)
        if sender is not None:
            self.giver.on_answer(sender, message)

    # -- 3. copy (copy holder) ------------------------------------------------------------

    def copied(self, giver: NodeId, through: CheckpointNumber) -> None:
        """The copy held for ``giver`` is complete through its checkpoint ``through``: say so."""
        node = self._node
        holding = self.taking.holding
        if holding is not None and holding.giver == giver:
            node.peer_send(giver, MoveCopied(*node.stamp, holding.number, through))

    def copy_failed(self, giver: NodeId, reason: str) -> None:
        """The copy held for ``giver`` missed a checkpoint: tell the giver (before its
        commit, the move is called off; after it, the copy is already through ``final``)."""
        node = self._node
        holding = self.taking.holding
        if holding is not None and holding.giver == giver:
            node.peer_send(giver, MoveAnswer(*node.stamp, holding.number, False, reason))

    def on_copied(self, identity: bytes, message: MoveCopied) -> None:
        """Steps 3-5 at the giver (``Giver.on_copied``)."""
        sender = self._node.membership.from_live_peer(message)
        if sender is not None:
            self.giver.on_copied(sender, message)

    # -- 4-5. freeze and commit (giver, ``Giver``) ------------------------------------------

    def copy_target(self) -> tuple[NodeId, ...]:
        """The copy holder of the move this node gives, while it copies (``Giver.copy_target``)."""
        return self.giver.copy_target()

    def joining(self) -> Joins:
        """The joins part of the moves (``smr.node.joins``)."""
        return self.joins

    def admission(
        self, identity: bytes, stream: StreamId, slots: Collection[int]
    ) -> tuple[int, int] | None:
        """The move's admission check of a batch with ``slots`` from channel ``stream``
        (step 4): None if no slot of it is frozen here; else the batch is refused, noted
        (``refused_frozen``), and this is the frozen range as (first slot, length) for the
        refusal ((0, 0) if it has none): the mapper holds that range's tuples back until the
        move ends either way, and sends the rest again at once."""
        frozen = self.giver.frozen
        if not frozen or frozen.isdisjoint(slots):
            return None
        self.refused_frozen(identity, stream)
        frozen_range = self.giver.frozen_range
        if frozen_range is None:
            return 0, 0
        return frozen_range.start, frozen_range.length

    def refused_frozen(self, identity: bytes, stream: StreamId) -> None:
        """Ingest refused a batch of this channel because it holds a frozen slot."""
        giving = self.giver.giving
        if giving is not None:
            giving.refused.add((identity, stream))
        else:
            self.taking.refused_frozen(identity, stream)

    def advance(self) -> None:
        """Steps 4-5, run after every apply turn while frozen (``Giver.advance``)."""
        self.giver.advance()

    # -- 6. the taking side ---------------------------------------------------------------

    def on_commit(self, identity: bytes, message: MoveCommit) -> None:
        """Step 6 (``smr.node.move_taking``)."""
        sender = self._node.membership.from_live_peer(message)
        if sender is not None:
            self.taking.on_commit(sender, message)

    def on_switched(self, identity: bytes, message: MoveSwitched) -> None:
        """Step 6, at a receiver's secondary (``smr.node.move_taking``)."""
        sender = self._node.membership.from_live_peer(message)
        if sender is not None:
            self.taking.on_switched(sender, message)

    # -- 7-8. switch or call off ----------------------------------------------------------

    def on_done(self, identity: bytes, message: MoveDone) -> None:
        """The receiver's answer (at the giver), a secondary's confirmation (at a settling
        receiver), or the giver's calling off (at the receiver and the copy holder)."""
        node = self._node
        sender = node.membership.from_live_peer(message)
        if sender is None:
            return
        if message.switched and self.taking.on_confirmed(sender, message.move):
            return
        giving = self.giver.giving
        if giving is None or message.move != giving.number or sender != giving.plan.receiver:
            if not message.switched:
                self.taking.called_off(sender, message.move, message.reason)
            return
        if message.switched:
            self.giver.finish()
        else:
            self.giver.call_off(f"{sender} did not switch: {message.reason}", tell=False)

    def follow_view(self) -> None:
        """After every view change: settle what the view settles (steps 7 and 8)."""
        node = self._node
        view = node.view
        giving = self.giver.giving
        if giving is not None:
            plan = giving.plan
            receiver = view.get(plan.receiver)
            if plan.join and receiver is not None and receiver.status is Status.JOINING:
                pass  # the joiner catches up
            elif plan.join and receiver is not None and receiver.status is Status.STANDBY:
                if giving.step is not Step.PROPOSED:
                    self.giver.call_off(f"{plan.receiver} gave up joining", tell=False)
            elif receiver is None or receiver.status not in OWNING_STATUSES:
                if move_done_in(view, plan):
                    # The receiver switched and died: its taker serves the slots now.
                    self.giver.finish()
                elif giving.step is not Step.COMMITTED:
                    self.giver.call_off(f"{plan.receiver} left the ring")
                elif holds(node.ring, node.node_id, plan.moving):
                    self.giver.call_off(f"{plan.receiver} is gone and never switched", tell=False)
                else:
                    # Another node took over the slots (the receiver switched, then died).
                    self.giver.finish()
            elif giving.step is not Step.COMMITTED:
                holder = view.get(plan.copy_holder)
                own = node.ring.range_of(node.node_id)
                if holder is None or holder.status not in OWNING_STATUSES:
                    self.giver.call_off(f"{plan.copy_holder} left the ring")
                elif not holds(node.ring, node.node_id, plan.moving):
                    self.giver.call_off("the ring changed under the move")
                elif plan.leave and own != plan.moving:
                    # A takeover grew the range: the leave would hand over part of it only.
                    self.giver.call_off("this node's range changed while it was leaving")
                elif not plan.join and not still_planned(
                    node.ring, node.settings.replication, plan
                ):
                    # Deaths changed who would receive or hold a copy of the moving slots.
                    self.giver.call_off("the ring changed under the move")
        self.taking.follow_view()
        self.joins.follow_view()

    def call_off(self, reason: str, tell: bool = True, dropped: bool = False) -> None:
        """Step 8 at the giver (``Giver.call_off``)."""
        self.giver.call_off(reason, tell, dropped)

    # -- timers -----------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Timeouts (step 8) and resends (steps 5 and 6)."""
        giving = self.giver.giving
        if giving is not None:
            waited = now - giving.step_at
            step = giving.step
            if step is Step.PROPOSED and waited > ANSWER_TIMEOUT_S:
                self.giver.call_off("no answer to the proposal")
            elif step is Step.COPYING and waited > COPY_TIMEOUT_S:
                self.giver.call_off("the copy did not complete in time")
            elif step in (Step.DRAINING, Step.FINAL) and waited > FREEZE_TIMEOUT_S:
                self.giver.call_off(f"stuck at {step.value} for {waited:.1f} s")
            elif step is Step.COMMITTED and now - giving.commit_sent_at >= COMMIT_RESEND_S:
                # The copy holder too: its copy counts only once it knows `final`.
                self.giver.send_commit(to_copy_holder=True)
        self.taking.tick(now, AGREED_KEEP_S)
        self.joins.tick(now)

    # -- reports ------------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """For ``status``: the moves under way here, and the last few done."""
        now = self._node.clock()
        under_way: list[dict[str, Any]] = self.giver.under_way(now)
        under_way.extend(self.taking.under_way(now))
        return {"under_way": under_way, "recent": list(self.records)[-8:]}
