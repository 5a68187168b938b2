"""Moves: the top of a range (or all of it: a leave) handed to the clockwise neighbour by
promotion, not transfer. Three nodes take part (``ring.moves.plan_move``): the giver G, the
receiver R (its clockwise neighbour, which holds a replica of G's range) and the copy holder
H. The steps (told in full in docs/design/node-protocols.md#moves): 1. propose (G); 2. answer
(R, H); 3. copy (G to H); 4. freeze (G) and checkpoint ``final``; 5. commit (G); 6. promote
and switch (R, ``smr.node.move_taking``); 7. switch (every node, on the view); 8. call off.

Guarantee: slots that do not move are never refused; every tuple of a moving slot is applied
exactly once (before ``final`` by G, after it by R); the moved slots keep ``r + 1`` copies.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Collection, Sequence
from typing import Any, Final, Protocol

from smr.checkpoint.ids import CheckpointNumber
from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.balance import Balancer
from smr.node.giving import Giving, Step, describe, holds, still_planned
from smr.node.joins import FencedSince, JoinerCopies, Joins, JoinsMembership, JoinsNode
from smr.node.load import LoadMeter
from smr.node.move_taking import MoveTaking, MoveTakingNode, Promotion, TakenCopies, TakingIntake
from smr.node.ports import Clock, ViewGossip
from smr.node.settings import NodeCounters, NodeSettings
from smr.ring.ids import Epoch, Incarnation, NodeId, Slot
from smr.ring.moves import MovePlan, MoveRefused, move_done_in, plan_move
from smr.ring.placement import Ring, SlotRange, split_at_load_share
from smr.ring.view import OWNING_STATUSES, Status, View, with_status
from smr.wire.codec import encode, pack_body
from smr.wire.kinds import ChannelNumber, FrameError, MoveNumber, RequestId, StreamId
from smr.wire.messages import Nack, NotOwner, ViewReply
from smr.wire.peer import (
    MoveAnswer,
    MoveCommit,
    MoveCopied,
    MoveDone,
    MovePropose,
    MoveSwitched,
    PeerMessages,
)


class GivingIntake(TakingIntake, Protocol):
    """What the giver asks of the intake (``smr.node.ingest``): the moving slots' batches
    queued, handed back, and the apply stalls the move's record reports."""

    def expected(self, stream: StreamId) -> ChannelNumber: ...
    def queued_for(self, slots: frozenset[Slot]) -> bool: ...
    def hand_back(self, moving: frozenset[Slot]) -> list[tuple[bytes, StreamId]]: ...
    def restart_stall_record(self) -> None: ...
    def stall_record_s(self) -> float: ...


class CopySnapshots(Protocol):
    """What the giver asks of the snapshots (``smr.node.snapshots``): the copy holder's copy."""

    def start_copy(self, holder: NodeId, moving: SlotRange) -> None: ...
    def stop_copy(self, holder: NodeId) -> None: ...


class MoveCopiesKept(TakenCopies, JoinerCopies, Protocol):
    """What the moves, the taking side and the joins ask of the replication
    (``smr.node.replication``): the copies."""


class FinalCheckpoint(Protocol):
    """What the giver asks of the checkpoint cycle (``smr.node.checkpoints``, step 4)."""

    def checkpoint(self) -> bool: ...
    def last_checkpoint_number(self) -> CheckpointNumber: ...


class MovesMembership(ViewGossip, JoinsMembership, Protocol):
    """What the moves and the joins ask of the membership (``smr.node.membership``)."""


class MovesRecovery(Promotion, FencedSince, Protocol):
    """What the taking side and the joins ask of the recovery (``smr.node.recovery``)."""


class MovesNode(JoinsNode, MoveTakingNode, Protocol):
    """What the moves use of the node (``smr.node.core.NodeCore``), with what they hand on
    to their joins (``JoinsNode``) and taking side (``MoveTakingNode``)."""

    @property
    def node_id(self) -> NodeId: ...
    @property
    def view(self) -> View: ...
    @property
    def ring(self) -> Ring: ...
    @property
    def stamp(self) -> tuple[NodeId, Incarnation, Epoch]: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def settings(self) -> NodeSettings: ...
    @property
    def counters(self) -> NodeCounters: ...
    @property
    def store(self) -> StateStore: ...
    @property
    def ledger(self) -> LossLedger: ...
    @property
    def load(self) -> LoadMeter: ...
    @property
    def balancer(self) -> Balancer | None: ...
    @property
    def ingest(self) -> GivingIntake: ...
    @property
    def membership(self) -> MovesMembership: ...
    @property
    def snapshots(self) -> CopySnapshots: ...
    @property
    def replication(self) -> MoveCopiesKept: ...
    @property
    def checkpoints(self) -> FinalCheckpoint: ...
    @property
    def recovery(self) -> MovesRecovery: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...
    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None: ...
    def set_view(self, view: View) -> None: ...


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
    """The moves a node gives, and its entry points for those it takes part in (the
    protocol in the module doc; the receiver's and copy holder's side is
    ``smr.node.move_taking``).

    Guarantees: a node takes part in at most one move at a time; the receiver switches
    only on a commit whose final checkpoint its replica applied; the giver unfreezes only
    when the move is called off before its commit, or when R's answer or the view settles
    it; slots outside the moving range are never refused.
    """

    def __init__(self, node: MovesNode) -> None:
        self._node = node
        self._numbers = 0
        self.giving: Giving | None = None
        # The slots refused now: the moving slots at a frozen giver, the moved slots at a
        # receiver that is settling (see `freeze`).
        self.frozen: frozenset[Slot] = frozenset()
        self.frozen_range: SlotRange | None = None
        self.taking = MoveTaking(node, self)
        self.joins = Joins(node, self)
        # One record per move given or received here, for status and the benchmark.
        self.records: deque[dict[str, Any]] = deque(maxlen=64)

    @property
    def busy(self) -> bool:
        """True while this node takes part in a move."""
        taking = self.taking
        return (
            self.giving is not None
            or taking.receiving is not None
            or taking.holding is not None
            or taking.settling is not None
            or self.joins.asked is not None
        )

    def freeze(self, slots: SlotRange | None) -> None:
        """Refuse batches with a slot of ``slots`` from now on (None: refuse none). The
        refusal names the range, so a feeder holds back only those slots' tuples and sends
        the rest of its batches at once (``smr.mapper.emitter``)."""
        self.frozen_range = slots
        self.frozen = frozenset(slots.slots()) if slots is not None else frozenset()

    def reset(self) -> None:
        """Forget every move (fencing): a fenced node serves nothing, so nothing is frozen."""
        self.giving = None
        self.freeze(None)
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
        giving = self.begin_giving(plan)
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
        """Start giving ``plan`` (step 1): a new move number, and the move on record."""
        self._numbers += 1
        now = self._node.clock()
        self.giving = Giving(MoveNumber(self._numbers), plan, Step.PROPOSED, now, now)
        self.giving.peer_bytes_at_start = self._node.counters.peer_bytes_sent
        self._node.ingest.restart_stall_record()  # the record's apply_stall_ms_max
        return self.giving

    def note_record(self, record: dict[str, Any]) -> None:
        """Keep ``record`` of a move given or received here (status shows the last ones)."""
        self.records.append(record)

    @property
    def committed(self) -> bool:
        """True while the move this node gives has been committed (step 5)."""
        return self.giving is not None and self.giving.step is Step.COMMITTED

    @property
    def leaving(self) -> bool:
        """True while this node's leave is committed: it takes nobody over (its receiver
        will, once the leave is done), so that its range stays what the receiver takes."""
        return self.committed and self.giving is not None and self.giving.plan.leave

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
        """Step 2 at the giver: once both accepted, start the copy (step 3); a refusal
        before the commit calls the move off."""
        node = self._node
        sender = node.membership.from_live_peer(message)
        giving = self.giving
        if sender is None or giving is None or message.move != giving.number:
            return
        plan = giving.plan
        if sender not in (plan.receiver, plan.copy_holder):
            return
        if not message.accepted:
            if giving.step is not Step.COMMITTED:
                self.call_off(f"{sender} refused: {message.reason}")
            return
        giving.accepted.add(sender)
        if giving.step is Step.PROPOSED and giving.accepted >= {plan.receiver, plan.copy_holder}:
            # 3. (A joiner needs no copy of its own: it is a secondary already.)
            self._to(Step.COPYING)
            if not plan.join:
                node.snapshots.start_copy(plan.copy_holder, plan.moving)

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
        """Steps 3-5 at the giver: the copy is complete: freeze; through ``final``: commit."""
        node = self._node
        sender = node.membership.from_live_peer(message)
        giving = self.giving
        if sender is None or giving is None or message.move != giving.number:
            return
        if sender != giving.plan.copy_holder:
            return
        giving.copied_through = max(giving.copied_through, message.through)
        if giving.step is Step.COPYING:
            # 4.
            self.freeze(giving.plan.moving)
            giving.frozen_at = node.clock()
            self._hand_back_queued(giving)
            self._to(Step.DRAINING)
        self.advance()

    def _hand_back_queued(self, giving: Giving) -> None:
        """Step 4: the batches with a moving slot still queued here go back to their
        mappers, refused as any batch of a frozen slot is (``Ingest.hand_back``)."""
        node = self._node
        moving = giving.plan.moving
        handed = node.ingest.hand_back(self.frozen)
        view_body = pack_body(node.view.to_wire())
        for identity, stream in handed:
            chan = node.ingest.expected(stream)
            refusal = NotOwner(
                stream, chan, node.view.epoch, moving.start, moving.length, view_body
            )
            node.reply(identity, encode(refusal))
            giving.refused.add((identity, stream))

    # -- 4-5. freeze and commit (giver) -----------------------------------------------------

    def copy_target(self) -> tuple[NodeId, ...]:
        """The copy holder of the move this node gives, while it copies (it gets this node's
        checkpoints, step 3), else nothing."""
        giving = self.giving
        if giving is None or giving.step is Step.PROPOSED or giving.plan.join:
            return ()
        return (giving.plan.copy_holder,)

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
        frozen = self.frozen
        if not frozen or frozen.isdisjoint(slots):
            return None
        self.refused_frozen(identity, stream)
        frozen_range = self.frozen_range
        if frozen_range is None:
            return 0, 0
        return frozen_range.start, frozen_range.length

    def refused_frozen(self, identity: bytes, stream: StreamId) -> None:
        """Ingest refused a batch of this channel because it holds a frozen slot."""
        if self.giving is not None:
            self.giving.refused.add((identity, stream))
        else:
            self.taking.refused_frozen(identity, stream)

    def advance(self) -> None:
        """Steps 4-5, run after every apply turn while frozen: checkpoint once no accepted
        batch with a moving slot waits; commit once the copy holder has that checkpoint."""
        giving = self.giving
        if giving is None:
            return
        node = self._node
        if giving.step is Step.DRAINING:
            if node.ingest.queued_for(self.frozen):
                return
            # 4. The final increment (once the output table takes the range's records).
            if not node.checkpoints.checkpoint():
                return
            giving.final = node.checkpoints.last_checkpoint_number()
            self._to(Step.FINAL)
        final = giving.final
        if giving.step is Step.FINAL and final is not None and giving.copied_through >= final:
            # 5. A leaver marks itself leaving first (the receiver switches only once it
            #    sees that: ring.view.hand_over_all), on the same link as the commit.
            self._to(Step.COMMITTED)
            if giving.plan.leave:
                self._write_own_status(Status.LEAVING)
            self._send_commit(to_copy_holder=True)

    def _send_commit(self, to_copy_holder: bool = False) -> None:
        node = self._node
        giving = self.giving
        if giving is None or giving.final is None:
            return
        giving.commit_sent_at = node.clock()
        moving = giving.plan.moving
        commit = MoveCommit(*node.stamp, giving.number, giving.final, moving.start, moving.length)
        node.peer_send(giving.plan.receiver, commit)
        if to_copy_holder and giving.plan.copy_holder != giving.plan.receiver:
            node.peer_send(giving.plan.copy_holder, commit)

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
        giving = self.giving
        if giving is None or message.move != giving.number or sender != giving.plan.receiver:
            if not message.switched:
                self.taking.called_off(sender, message.move, message.reason)
            return
        if message.switched:
            self._finish()
        else:
            self.call_off(f"{sender} did not switch: {message.reason}", tell=False)

    def follow_view(self) -> None:
        """After every view change: settle what the view settles (steps 7 and 8)."""
        node = self._node
        view = node.view
        giving = self.giving
        if giving is not None:
            plan = giving.plan
            receiver = view.get(plan.receiver)
            if plan.join and receiver is not None and receiver.status is Status.JOINING:
                pass  # the joiner catches up
            elif plan.join and receiver is not None and receiver.status is Status.STANDBY:
                if giving.step is not Step.PROPOSED:
                    self.call_off(f"{plan.receiver} gave up joining", tell=False)
            elif receiver is None or receiver.status not in OWNING_STATUSES:
                if move_done_in(view, plan):
                    # The receiver switched and died: its taker serves the slots now.
                    self._finish()
                elif giving.step is not Step.COMMITTED:
                    self.call_off(f"{plan.receiver} left the ring")
                elif holds(node.ring, node.node_id, plan.moving):
                    self.call_off(f"{plan.receiver} is gone and never switched", tell=False)
                else:
                    # Another node took over the slots (the receiver switched, then died).
                    self._finish()
            elif giving.step is not Step.COMMITTED:
                holder = view.get(plan.copy_holder)
                own = node.ring.range_of(node.node_id)
                if holder is None or holder.status not in OWNING_STATUSES:
                    self.call_off(f"{plan.copy_holder} left the ring")
                elif not holds(node.ring, node.node_id, plan.moving):
                    self.call_off("the ring changed under the move")
                elif plan.leave and own != plan.moving:
                    # A takeover grew the range: the leave would hand over part of it only.
                    self.call_off("this node's range changed while it was leaving")
                elif not plan.join and not still_planned(
                    node.ring, node.settings.replication, plan
                ):
                    # Deaths changed who would receive or hold a copy of the moving slots.
                    self.call_off("the ring changed under the move")
        self.taking.follow_view()
        self.joins.follow_view()

    def _finish(self) -> None:
        """Step 7 at the giver: the receiver serves the moved slots."""
        node = self._node
        giving = self.giving
        if giving is None:
            return
        plan = giving.plan
        now = node.clock()
        self.giving = None
        self.freeze(None)
        node.snapshots.stop_copy(plan.copy_holder)
        if plan.leave:
            node.store.drop_slots(node.store.slots())
            self._write_own_status(Status.STANDBY)
        else:
            node.store.drop_slots(plan.moving.slots())
        # A lost slot that moved is lost at the receiver now (its mark moved with it).
        node.ledger.rebuild(node.store)
        node.load.forget(plan.moving.slots())
        push = ViewReply(RequestId(0), node.view.epoch, node.membership.view_body())
        for identity, _stream in giving.refused:
            node.reply(identity, encode(push))
        node.counters.moves_given += 1
        frozen_ms = (now - giving.frozen_at) * 1000 if giving.frozen_at is not None else 0.0
        record = {
            "role": "giver",
            "receiver": plan.receiver,
            "copy_holder": plan.copy_holder,
            "move": giving.number,
            "slots": plan.moving.length,
            "start_slot": plan.moving.start,
            "leave": plan.leave,
            "outcome": "done",
            "total_ms": round((now - giving.started_at) * 1000, 1),
            "frozen_ms": round(frozen_ms, 1),
            "mappers_refused": len(giving.refused),
            # The longest wait between two apply turns while batches waited here: what the
            # slots that stay (and the feed) saw of the move.
            "apply_stall_ms_max": round(node.ingest.stall_record_s() * 1000, 1),
            # What the giver sent its peers meanwhile: the copy holder's snapshot of the
            # moving slots and its share of the checkpoints and heartbeats.
            "peer_bytes_sent": node.counters.peer_bytes_sent - giving.peer_bytes_at_start,
            "at_unix_s": time.time(),
        }
        self.records.append(record)
        log.warning(
            "move %d done: %s (%.0f ms in all, slots frozen for %.0f ms)",
            giving.number,
            describe(plan),
            record["total_ms"],
            frozen_ms,
        )

    def call_off(self, reason: str, tell: bool = True, dropped: bool = False) -> None:
        """Step 8 at the giver: unfreeze, tell the others (unless ``tell`` is False: the
        receiver is the one that said so), and have the refused mappers resend. A join
        whose joiner's connection ``dropped`` marks the joiner dead (``smr.node.joins``)."""
        node = self._node
        giving = self.giving
        if giving is None:
            return
        plan = giving.plan
        self.giving = None
        self.freeze(None)
        node.snapshots.stop_copy(plan.copy_holder)
        done = MoveDone(*node.stamp, giving.number, False, reason)
        if tell:
            node.peer_send(plan.receiver, done)
        if plan.copy_holder != plan.receiver:
            node.peer_send(plan.copy_holder, done)
        if plan.join:
            self.joins.giver_called_off(plan.receiver, dropped=dropped)
        for identity, stream in giving.refused:
            node.reply(identity, encode(Nack(stream, node.ingest.expected(stream), True)))
        if plan.leave:
            self._write_own_status(Status.UP)
        node.counters.moves_called_off += 1
        self.records.append(
            {
                "role": "giver",
                "receiver": plan.receiver,
                "move": giving.number,
                "slots": plan.moving.length,
                "leave": plan.leave,
                "outcome": f"called off at {giving.step.value}: {reason}",
                "at_unix_s": time.time(),
            }
        )
        log.warning("move %d called off at %s: %s", giving.number, giving.step.value, reason)

    def _write_own_status(self, status: Status) -> None:
        """Write this node's own entry with ``status`` (a leaver's: leaving, then on standby
        once done, or up again if called off) and gossip it."""
        node = self._node
        me = node.view.get(node.node_id)
        if me is None or me.status is status or me.status is Status.DEAD:
            return
        node.set_view(with_status(node.view, node.node_id, status))
        node.membership.gossip()

    def _to(self, step: Step) -> None:
        giving = self.giving
        if giving is not None:
            giving.step = step
            giving.step_at = self._node.clock()

    # -- timers -----------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Timeouts (step 8) and resends (steps 5 and 6)."""
        giving = self.giving
        if giving is not None:
            waited = now - giving.step_at
            step = giving.step
            if step is Step.PROPOSED and waited > ANSWER_TIMEOUT_S:
                self.call_off("no answer to the proposal")
            elif step is Step.COPYING and waited > COPY_TIMEOUT_S:
                self.call_off("the copy did not complete in time")
            elif step in (Step.DRAINING, Step.FINAL) and waited > FREEZE_TIMEOUT_S:
                self.call_off(f"stuck at {step.value} for {waited:.1f} s")
            elif step is Step.COMMITTED and now - giving.commit_sent_at >= COMMIT_RESEND_S:
                # The copy holder too: its copy counts only once it knows `final`.
                self._send_commit(to_copy_holder=True)
        self.taking.tick(now, AGREED_KEEP_S)
        self.joins.tick(now)

    # -- reports ------------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """For ``status``: the moves under way here, and the last few done."""
        now = self._node.clock()
        under_way: list[dict[str, Any]] = []
        giving = self.giving
        if giving is not None:
            under_way.append(
                {
                    "role": "giver",
                    "move": giving.number,
                    "what": describe(giving.plan),
                    "step": giving.step.value,
                    "for_ms": round((now - giving.started_at) * 1000),
                }
            )
        under_way.extend(self.taking.under_way(now))
        return {"under_way": under_way, "recent": list(self.records)[-8:]}
