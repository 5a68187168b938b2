"""The taking side of a move (``smr.node.moves``): the receiver R, which promotes the moving
slots and switches, and the copy holder H, whose copy becomes an orphan copy absorbed by R.

R's switch, steps 6-7 of the protocol in ``smr.node.moves``:

6a. On the giver's commit, check that R's replica of G holds checkpoint ``final`` and the
    plan still holds in R's view; if not, answer not switched (and every repeat of the
    commit gets that answer).
6b. Promote the moving slots from the replica, replaying the backed-up tuples past their
    hwm; move R's token (``ring.moves.moved_view``), route by that view and gossip it.
6c. Settle: the moved slots stay refused here (``Moves.frozen``) until each of R's
    secondaries confirms it sees the new view (R sends each ``MoveSwitched``; each answers
    ``MoveDone`` once its view has R at the split, resent until it does). Only R's
    secondaries watch R, so only they could declare it dead; once each of them sees the
    switch, any mark of R's death carries the new token, and no view can hand the moved
    slots back to the giver after it dropped them. A secondary that marked R dead on the
    old entry first wins the merge instead: R is fenced, the giver sees R gone with its
    token elsewhere and serves the slots again, and R never applied a tuple of them. A
    secondary that crashed (its connection to R dropped and R's probe went unanswered: the
    evidence of a takeover) is not awaited: it can neither confirm nor declare R dead, and
    it may be a predecessor only R can judge, behind a leaving giver that judges nobody,
    so waiting for it would hold the move, and that secondary's takeover, forever.
6d. Settled: serve the moved slots (the mappers R refused meanwhile get a ``NACK`` and
    resend) and answer the giver: switched.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from smr.checkpoint.ids import CheckpointNumber
from smr.node.giving import still_planned
from smr.node.ports import NodeBasics, Promotion, TakenCopies, TakingIntake, ViewGossip
from smr.ring.ids import Incarnation, NodeId
from smr.ring.moves import MovePlan, MoveRefused, move_done_in, moved_view, plan_join, plan_move
from smr.ring.placement import SlotRange
from smr.ring.view import Status, View
from smr.wire.codec import encode
from smr.wire.kinds import MoveNumber, StreamId
from smr.wire.messages import Nack
from smr.wire.peer import MoveCommit, MoveDone, MovePropose, MoveSwitched, PeerMessages


class StandbyReturn(Protocol):
    """What the taking side asks of the joins (``smr.node.joins``)."""

    def go_back_to_standby(self, reason: str) -> None: ...


class TakingMoves(Protocol):
    """What the taking side asks of the moves that hold it (``smr.node.moves``)."""

    @property
    def joins(self) -> StandbyReturn: ...
    def freeze(self, slots: SlotRange | None) -> None: ...
    def note_record(self, record: dict[str, Any]) -> None: ...


class MoveTakingNode(NodeBasics, Protocol):
    """What the taking side uses of the node (``smr.node.core.NodeCore``)."""

    @property
    def predecessors(self) -> tuple[NodeId, ...]: ...
    @property
    def secondaries(self) -> tuple[NodeId, ...]: ...
    @property
    def ingest(self) -> TakingIntake: ...
    @property
    def membership(self) -> ViewGossip: ...
    @property
    def replication(self) -> TakenCopies: ...
    @property
    def recovery(self) -> Promotion: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...
    def reply(self, identity: bytes, frames: Sequence[bytes]) -> None: ...
    def set_view(self, view: View) -> None: ...
    def utilization(self) -> float: ...


log = logging.getLogger("smr.node")

# Answers to commits kept for repeats (bounded).
ANSWERS_KEPT: Final = 64
# Step 6c: MoveSwitched is sent again to the secondaries that have not confirmed this often.
CONFIRM_RESEND_S: Final = 0.5


@dataclass
class Agreed:
    """A move this node agreed to take part in, as receiver or as copy holder."""

    giver: NodeId
    incarnation: Incarnation
    number: MoveNumber
    plan: MovePlan
    since: float
    final: CheckpointNumber | None = None


@dataclass
class Settling:
    """Step 6c at the receiver: switched, waiting for its secondaries to see it."""

    agreed: Agreed
    final: CheckpointNumber
    waiting: set[NodeId]
    sent_at: float
    switched_at: float
    replayed: int
    version: int
    """This receiver's entry's version in the view it switched to."""
    refused: set[tuple[bytes, StreamId]] = field(default_factory=set)


class MoveTaking:
    """The receiver's and the copy holder's part of moves (the module doc)."""

    def __init__(self, node: MoveTakingNode, moves: TakingMoves) -> None:
        self._node = node
        self._moves = moves
        self.receiving: Agreed | None = None
        self.holding: Agreed | None = None
        self.settling: Settling | None = None
        self._answers: OrderedDict[tuple[NodeId, Incarnation, MoveNumber], tuple[bool, str]] = (
            OrderedDict()
        )

    def reset(self) -> None:
        """Forget every move (fencing)."""
        self.receiving = None
        self.holding = None
        self.settling = None

    # -- 2. agreeing ------------------------------------------------------------------------

    def unready(self, giver: NodeId, moving: SlotRange, accept_below_ppm: int) -> str | None:
        """Why this node cannot be the receiver of ``moving`` from ``giver`` now (its replica
        of the giver incomplete or short of the slots, its inbox full, or, for a balancing
        move, itself at least ``accept_below_ppm`` utilised), or None if it can."""
        node = self._node
        me = node.node_id
        replication = node.replication
        if not replication.has_complete_replica(giver):
            return f"{me}'s replica of {giver} is not complete yet"
        if not replication.has_complete_replica(giver, moving):
            return f"{me}'s replica of {giver} does not cover the moving slots"
        if node.ingest.reading_paused:
            # Not merely busy (a busy node's inbox holds its 200 ms of work all the time):
            # it has stopped reading, its inbox and the batches read meanwhile both full.
            return f"{me} is overloaded (its inbox is full)"
        busy_ppm = round(node.utilization() * 1_000_000)
        if accept_below_ppm and busy_ppm >= accept_below_ppm:
            return (
                f"{me} is busy itself ({busy_ppm / 10_000:.0f}% utilised; a balancing move "
                f"needs under {accept_below_ppm / 10_000:.0f}%)"
            )
        return None

    def agree(self, giver: NodeId, message: MovePropose, plan: MovePlan) -> None:
        """Record an accepted proposal, as the receiver or the copy holder."""
        node = self._node
        agreed = Agreed(giver, message.incarnation, message.move, plan, node.clock())
        if plan.receiver == node.node_id:
            self.receiving = agreed
        else:
            self.holding = agreed
            node.replication.expect_copy(giver, plan.moving)

    # -- 6. the commit ----------------------------------------------------------------------

    def on_commit(self, sender: NodeId, message: MoveCommit) -> None:
        """A commit: from the giver to this receiver (6a-6c), or to this copy holder (it
        notes ``final``)."""
        node = self._node
        holding = self.holding
        if holding is not None and (holding.giver, holding.number) == (sender, message.move):
            holding.final = message.final
            node.replication.note_final(holding.giver, message.final)
            self.follow_view()
        key = (sender, message.incarnation, message.move)
        answer = self._answers.get(key)
        receiving = self.receiving
        if answer is not None:
            self._answer(sender, message.move, answer)
        elif receiving is not None and (receiving.giver, receiving.number) == (
            sender,
            message.move,
        ):
            answer = self._promote(receiving, message)
            if answer is not None:
                self._keep_answer(key, answer)
                self._answer(sender, message.move, answer)

    def on_switched(self, receiver: NodeId, message: MoveSwitched) -> None:
        """6c, at a secondary of the receiver: confirm once this node's view holds the
        receiver's switched entry or a later one (and, at the copy holder, once it knows
        ``final``)."""
        node = self._node
        holding = self.holding
        if (
            holding is not None
            and (holding.plan.receiver, holding.number) == (receiver, message.move)
            and holding.final is None
        ):
            # This node's copy of the moved slots counts only once it knows `final` (the
            # giver resends its commit until the receiver answers, so it comes).
            return
        member = node.view.get(receiver)
        if (
            receiver in node.predecessors
            and member is not None
            and member.incarnation == message.incarnation
            and member.version >= message.version
        ):
            node.peer_send(receiver, MoveDone(*node.stamp, message.move, True, ""))

    def _keep_answer(
        self, key: tuple[NodeId, Incarnation, MoveNumber], answer: tuple[bool, str]
    ) -> None:
        self._answers[key] = answer
        while len(self._answers) > ANSWERS_KEPT:
            self._answers.popitem(last=False)

    def _answer(self, giver: NodeId, move: MoveNumber, answer: tuple[bool, str]) -> None:
        node = self._node
        node.peer_send(giver, MoveDone(*node.stamp, move, answer[0], answer[1]))

    def _promote(self, agreed: Agreed, message: MoveCommit) -> tuple[bool, str] | None:
        """6a and 6b: promote and switch (then None: the answer waits for 6c), or say why
        not. A leave waits (no answer) until this node sees the giver leaving."""
        node = self._node
        giver = agreed.giver
        plan = agreed.plan
        member = node.view.get(giver)
        if plan.leave and (member is None or member.status is not Status.LEAVING):
            return None  # its gossip comes before its next commit, on the same link
        self.receiving = None
        refusal = self._cannot_promote(agreed, message)
        if refusal is not None:
            if plan.join:
                self._moves.joins.go_back_to_standby(refusal)
            return False, refusal
        # 6b.
        started = node.clock()
        slots = set(plan.moving.slots())
        moved = node.replication.split_off(giver, slots)
        replayed = node.recovery.promote_slots([moved], slots)
        self._moves.freeze(plan.moving)
        node.set_view(moved_view(node.view, plan))
        node.membership.gossip()
        # 6c.
        waiting = set(node.secondaries)
        version = node.view.members[node.node_id].version
        self.settling = Settling(agreed, message.final, waiting, -1e9, started, replayed, version)
        log.warning(
            "move %d from %s: promoted %d slots (%d tuples replayed) in %.1f ms; at token %s, "
            "settling with %s",
            agreed.number,
            giver,
            plan.moving.length,
            replayed,
            (node.clock() - started) * 1000,
            plan.split,
            sorted(waiting),
        )
        self._confirm_round()
        return None

    def _cannot_promote(self, agreed: Agreed, message: MoveCommit) -> str | None:
        """Why this receiver cannot switch on ``message`` (6a), or None."""
        node = self._node
        plan = agreed.plan
        r = node.settings.replication
        try:
            if plan.join:
                again = plan_join(node.ring, node.node_id, r)
            else:
                again = plan_move(node.ring, agreed.giver, r, None if plan.leave else plan.split)
        except MoveRefused as refused:
            return f"the ring changed: {refused}"
        if again != plan:
            return "the ring changed since the proposal"
        last = node.replication.last_checkpoint_of(agreed.giver)
        if last is None or last < message.final:
            return f"{node.node_id}'s replica of {agreed.giver} lacks checkpoint {message.final}"
        return None

    def _confirm_round(self) -> None:
        """6c: ask the secondaries that have not confirmed yet (and drop those that are no
        secondaries any more); settle when none is left."""
        node = self._node
        settling = self.settling
        if settling is None:
            return
        settling.waiting &= set(node.secondaries)
        crashed = sorted(peer for peer in settling.waiting if node.recovery.crashed(peer))
        if crashed:
            # A crashed secondary never confirms, and never declares this node dead on
            # its old entry either. It can be one of this node's predecessors that only
            # this node may judge (a leaving giver, the nearest, judges nobody): waiting
            # for it would hold the leave, and so its takeover, forever.
            log.warning(
                "move %d from %s: not awaiting %s, crashed (connection dropped, probe unanswered)",
                settling.agreed.number,
                settling.agreed.giver,
                ", ".join(crashed),
            )
            settling.waiting.difference_update(crashed)
        if not settling.waiting:
            self._settled()
            return
        settling.sent_at = node.clock()
        confirm = MoveSwitched(*node.stamp, settling.agreed.number, settling.version)
        for secondary in settling.waiting:
            node.peer_send(secondary, confirm)

    def on_confirmed(self, secondary: NodeId, move: MoveNumber) -> bool:
        """A secondary confirms it sees the switch; True if it was one awaited."""
        settling = self.settling
        if settling is None or settling.agreed.number != move:
            return False
        if secondary not in settling.waiting:
            return True
        settling.waiting.discard(secondary)
        if not settling.waiting:
            self._settled()
        return True

    def refused_frozen(self, identity: bytes, stream: StreamId) -> None:
        """Ingest refused a batch of a moved slot while settling (6c)."""
        if self.settling is not None:
            self.settling.refused.add((identity, stream))

    def _settled(self) -> None:
        """6d: serve the moved slots and answer the giver."""
        node = self._node
        settling = self.settling
        if settling is None:
            return
        self.settling = None
        self._moves.freeze(None)
        for identity, stream in settling.refused:
            node.reply(identity, encode(Nack(stream, node.ingest.expected(stream), True)))
        agreed = settling.agreed
        answer = (True, "")
        self._keep_answer((agreed.giver, agreed.incarnation, agreed.number), answer)
        self._answer(agreed.giver, agreed.number, answer)
        node.counters.moves_received += 1
        took_ms = (node.clock() - settling.switched_at) * 1000
        self._moves.note_record(
            {
                "role": "receiver",
                "giver": agreed.giver,
                "move": agreed.number,
                "slots": agreed.plan.moving.length,
                "leave": agreed.plan.leave,
                "promote_to_serving_ms": round(took_ms, 1),
                "tuples_replayed": settling.replayed,
                "mappers_refused": len(settling.refused),
                "at_unix_s": time.time(),
            }
        )
        log.warning(
            "move %d from %s settled: serving its %d slots (%.0f ms after the promotion)",
            agreed.number,
            agreed.giver,
            agreed.plan.moving.length,
            took_ms,
        )

    # -- the copy holder, and the view ------------------------------------------------------

    def called_off(self, giver: NodeId, move: MoveNumber, reason: str) -> None:
        """The giver called the move off: forget what this node agreed to."""
        receiving = self.receiving
        if receiving is not None and (receiving.giver, receiving.number) == (giver, move):
            self.receiving = None
            if receiving.plan.join:
                self._moves.joins.go_back_to_standby(f"called off by {giver}: {reason}")
        holding = self.holding
        if holding is not None and (holding.giver, holding.number) == (giver, move):
            self._drop_holding(f"called off by {giver}: {reason}")

    def follow_view(self) -> None:
        """After a view change (or the final checkpoint's number arriving): the copy held
        becomes an orphan copy once the view shows the move done and the copy holds
        ``final``; what the view makes impossible is forgotten."""
        node = self._node
        view = node.view
        settling = self.settling
        if settling is not None:
            me = view.get(node.node_id)
            if me is None or me.status is Status.DEAD:
                self.settling = None
            else:
                self._confirm_round()
        for agreed in (self.receiving, self.holding):
            if agreed is None:
                continue
            giver = view.get(agreed.giver)
            receiver = view.get(agreed.plan.receiver)
            if move_done_in(view, agreed.plan):
                if agreed is not self.holding:
                    continue
                if agreed.final is not None:
                    node.replication.copy_to_orphan(agreed.giver, agreed.plan.receiver)
                    self.holding = None
                elif receiver is None or receiver.status is Status.DEAD:
                    # Its taker took the moved slots over from copies of its own; this one
                    # never learnt the final checkpoint (the commit was lost).
                    self._drop_holding(f"{agreed.plan.receiver} switched and is gone")
            elif agreed.plan.join:
                continue  # smr.node.joins follows the join
            elif agreed is self.holding and not still_planned(
                node.ring, node.settings.replication, agreed.plan
            ):
                self._drop_holding("the ring changed under the move")
            elif (
                giver is None
                or giver.status is Status.DEAD
                or giver.incarnation != agreed.incarnation
                or receiver is None
                or receiver.status is Status.DEAD
            ):
                if agreed is self.holding:
                    self._drop_holding(f"{agreed.giver} or {agreed.plan.receiver} is gone")
                else:
                    self.receiving = None

    def _drop_holding(self, reason: str) -> None:
        holding = self.holding
        if holding is None:
            return
        self.holding = None
        self._node.replication.drop_copy(holding.giver)
        log.info(
            "dropped the copy held for move %d of %s: %s", holding.number, holding.giver, reason
        )

    def tick(self, now: float, keep_s: float) -> None:
        """Resend the confirmations awaited (6c); forget agreements never committed."""
        settling = self.settling
        if settling is not None and now - settling.sent_at >= CONFIRM_RESEND_S:
            self._confirm_round()
        if self.receiving is not None and now - self.receiving.since > keep_s:
            if self.receiving.plan.join:
                self._moves.joins.go_back_to_standby("no commit came")
            self.receiving = None
        if self.holding is not None and now - self.holding.since > keep_s:
            self._drop_holding("no commit came")

    def under_way(self, now: float) -> list[dict[str, object]]:
        """For ``status``: the moves this node takes part in as receiver or copy holder."""
        rows: list[dict[str, object]] = []
        for role, agreed in (("receiver", self.receiving), ("copy holder", self.holding)):
            if agreed is not None:
                rows.append(_row(role, agreed, now))
        if self.settling is not None:
            row = _row("receiver", self.settling.agreed, now)
            row["step"] = f"settling (awaiting {sorted(self.settling.waiting)})"
            rows.append(row)
        return rows


def _row(role: str, agreed: Agreed, now: float) -> dict[str, object]:
    moving: SlotRange = agreed.plan.moving
    return {
        "role": role,
        "giver": agreed.giver,
        "move": agreed.number,
        "slots": [moving.start, moving.length],
        "for_ms": round((now - agreed.since) * 1000),
    }
