"""The giver's side of a move (``smr.node.moves``): the :class:`Giver`, which owns the record
of the move a node gives (where it stands, who answered, what was refused meanwhile) and the
freeze, and runs the giver's steps of docs/design/node-protocols.md#moves: 1. propose (the
record; ``Moves.start`` plans and sends); 2. the answers; 3. the copy; 4. freeze and
checkpoint ``final``; 5. commit; 7. done (drop the moved slots); 8. call off. Also a move in
words, and whether the ring still plans it.

Guarantee: the moving slots are refused from the freeze (step 4) until the move is done or
called off, and no other slot is ever refused for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from smr.checkpoint.ids import CheckpointNumber
from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.load import LoadMeter
from smr.node.ports import NodeBasics, TakingIntake, ViewGossip
from smr.ring.ids import NodeId, Slot
from smr.ring.moves import MovePlan, MoveRefused, plan_move
from smr.ring.placement import Ring, SlotRange
from smr.ring.view import Status, View, with_status
from smr.wire.codec import encode, pack_body
from smr.wire.kinds import ChannelNumber, MoveNumber, RequestId, StreamId
from smr.wire.messages import Nack, NotOwner, ViewReply
from smr.wire.peer import MoveAnswer, MoveCommit, MoveCopied, MoveDone, PeerMessages


class Step(StrEnum):
    """Where the move a node gives stands (the protocol's steps)."""

    PROPOSED = "proposed"
    COPYING = "copying"
    DRAINING = "draining"
    FINAL = "final"
    COMMITTED = "committed"


@dataclass
class Giving:
    """The move this node gives (at most one at a time)."""

    number: MoveNumber
    plan: MovePlan
    step: Step
    started_at: float
    step_at: float
    accepted: set[NodeId] = field(default_factory=set)
    copied_through: int = -1
    final: CheckpointNumber | None = None
    frozen_at: float | None = None
    commit_sent_at: float = -1e9
    # This node's peer bytes sent when the move began (its record counts those it cost).
    peer_bytes_at_start: int = 0
    # The mappers' channels refused during the freeze: told the outcome (step 7 or 8).
    refused: set[tuple[bytes, StreamId]] = field(default_factory=set)


def describe(plan: MovePlan) -> str:
    """A move in words, for logs and status."""
    moving = plan.moving
    what = "its whole range" if plan.leave else f"slots [{moving.start}, {moving.end})"
    return (
        f"{plan.giver} gives {what} ({moving.length} slots) to {plan.receiver}, "
        f"{plan.copy_holder} holding a copy"
    )


def still_planned(ring: Ring, replication: int, plan: MovePlan) -> bool:
    """Whether this node's ``ring`` still plans ``plan`` (same receiver, copy holder, slots)."""
    try:
        again = plan_move(ring, plan.giver, replication, None if plan.leave else plan.split)
    except MoveRefused:
        return False
    return again == plan


def holds(ring: Ring, me: NodeId, moving: SlotRange) -> bool:
    """Whether this node's (``me``) own range in ``ring`` still covers ``moving``."""
    own = ring.range_of(me)
    return own is not None and own.covers(moving)


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


class FinalCheckpoint(Protocol):
    """What the giver asks of the checkpoint cycle (``smr.node.checkpoints``, step 4)."""

    def checkpoint(self) -> bool: ...
    def last_checkpoint_number(self) -> CheckpointNumber: ...


class JoinCallOff(Protocol):
    """What the giver asks of the joins (``smr.node.joins``, step 8 of a join)."""

    def giver_called_off(self, joiner: NodeId, *, dropped: bool = False) -> None: ...


class GiverMoves(Protocol):
    """What the giver asks of the moves that hold it (``smr.node.moves``)."""

    @property
    def joins(self) -> JoinCallOff: ...
    def note_record(self, record: dict[str, Any]) -> None: ...


class GiverNode(NodeBasics, Protocol):
    """What the giver uses of the node (``smr.node.core.NodeCore``)."""

    @property
    def store(self) -> StateStore: ...
    @property
    def ledger(self) -> LossLedger: ...
    @property
    def load(self) -> LoadMeter: ...
    @property
    def ingest(self) -> GivingIntake: ...
    @property
    def membership(self) -> ViewGossip: ...
    @property
    def snapshots(self) -> CopySnapshots: ...
    @property
    def checkpoints(self) -> FinalCheckpoint: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...
    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None: ...
    def set_view(self, view: View) -> None: ...


log = logging.getLogger("smr.node")


class Giver:
    """The giver's side of the moves this node gives (steps 1-5, 7 and 8 of
    ``smr.node.moves``): it owns the move's record (``giving``) and the freeze (which a
    settling receiver sets too, through ``Moves.freeze``).

    Guarantees: at most one move on record; the moving slots are refused from the copy
    holder's complete copy (step 4) until the move is done or called off; the giver
    unfreezes only when the move is called off before its commit, or when R's answer or the
    view settles it (``Moves``).
    """

    def __init__(self, node: GiverNode, moves: GiverMoves) -> None:
        self._node = node
        self._moves = moves
        self._numbers = 0
        self.giving: Giving | None = None
        # The slots refused now: the moving slots at a frozen giver, the moved slots at a
        # receiver that is settling (see `freeze`).
        self.frozen: frozenset[Slot] = frozenset()
        self.frozen_range: SlotRange | None = None

    def freeze(self, slots: SlotRange | None) -> None:
        """Refuse batches with a slot of ``slots`` from now on (None: refuse none). The
        refusal names the range, so a feeder holds back only those slots' tuples and sends
        the rest of its batches at once (``smr.mapper.emitter``)."""
        self.frozen_range = slots
        self.frozen = frozenset(slots.slots()) if slots is not None else frozenset()

    def reset(self) -> None:
        """Forget the move given (fencing): a fenced node serves nothing, so nothing is frozen."""
        self.giving = None
        self.freeze(None)

    # -- 1. propose -------------------------------------------------------------------------

    def begin(self, plan: MovePlan) -> Giving:
        """Start giving ``plan`` (step 1): a new move number, and the move on record."""
        self._numbers += 1
        now = self._node.clock()
        self.giving = Giving(MoveNumber(self._numbers), plan, Step.PROPOSED, now, now)
        self.giving.peer_bytes_at_start = self._node.counters.peer_bytes_sent
        self._node.ingest.restart_stall_record()  # the record's apply_stall_ms_max
        return self.giving

    @property
    def committed(self) -> bool:
        """True while the move this node gives has been committed (step 5)."""
        return self.giving is not None and self.giving.step is Step.COMMITTED

    @property
    def leaving(self) -> bool:
        """True while this node's leave is committed: it takes nobody over (its receiver
        will, once the leave is done), so that its range stays what the receiver takes."""
        return self.committed and self.giving is not None and self.giving.plan.leave

    # -- 2. the answers ---------------------------------------------------------------------

    def on_answer(self, sender: NodeId, message: MoveAnswer) -> None:
        """Step 2: once both accepted, start the copy (step 3); a refusal before the commit
        calls the move off."""
        node = self._node
        giving = self.giving
        if giving is None or message.move != giving.number:
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

    # -- 3-5. copy, freeze and commit -------------------------------------------------------

    def on_copied(self, sender: NodeId, message: MoveCopied) -> None:
        """Steps 3-5: the copy is complete: freeze; through ``final``: commit."""
        node = self._node
        giving = self.giving
        if giving is None or message.move != giving.number:
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

    def copy_target(self) -> tuple[NodeId, ...]:
        """The copy holder of the move this node gives, while it copies (it gets this node's
        checkpoints, step 3), else nothing."""
        giving = self.giving
        if giving is None or giving.step is Step.PROPOSED or giving.plan.join:
            return ()
        return (giving.plan.copy_holder,)

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
            self.send_commit(to_copy_holder=True)

    def send_commit(self, to_copy_holder: bool = False) -> None:
        """Step 5: send the commit to the receiver (and the copy holder); sent again until
        the receiver answers (``Moves.tick``)."""
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

    # -- 7-8. done or called off ------------------------------------------------------------

    def finish(self) -> None:
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
        self._moves.note_record(record)
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
            self._moves.joins.giver_called_off(plan.receiver, dropped=dropped)
        for identity, stream in giving.refused:
            node.reply(identity, encode(Nack(stream, node.ingest.expected(stream), True)))
        if plan.leave:
            self._write_own_status(Status.UP)
        node.counters.moves_called_off += 1
        self._moves.note_record(
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
        """Record that the move given is at ``step`` from now."""
        giving = self.giving
        if giving is not None:
            giving.step = step
            giving.step_at = self._node.clock()

    # -- reports ----------------------------------------------------------------------------

    def under_way(self, now: float) -> list[dict[str, Any]]:
        """For ``status``: the move this node gives, if any."""
        giving = self.giving
        if giving is None:
            return []
        return [
            {
                "role": "giver",
                "move": giving.number,
                "what": describe(giving.plan),
                "step": giving.step.value,
                "for_ms": round((now - giving.started_at) * 1000),
            }
        ]
