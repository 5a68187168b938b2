"""Takeover of a dead predecessor's range, the promotion it shares with moves, and fencing
of this node when the view says it is dead (docs/design/architecture.md#takeover and
#fencing). The failure detector that decides a takeover is :mod:`smr.node.recovery`'s.

Guarantee: a takeover promotes every slot some complete copy here covers, replaying each
backed-up tuple past its hwm exactly once; a slot no copy covers is marked lost, never
served empty in silence.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any, Protocol

from smr.checkpoint.backup import BackedUpBatch
from smr.checkpoint.loss import LossLedger, uncovered_slots
from smr.checkpoint.promote import Copy, PromoteOutcome, promote
from smr.checkpoint.store import ReduceFn, StateStore
from smr.node.disk import DiskState
from smr.node.handoff import Handoff
from smr.node.orphans import Orphan
from smr.node.ports import NodeBasics, SnapshotReceiving, ViewGossip
from smr.node.reducer import Reducer
from smr.ring.ids import Incarnation, NodeId, Slot
from smr.ring.invariants import InvariantViolation
from smr.ring.placement import Ring
from smr.ring.view import Status, View, successor_takes_over
from smr.wire.batch_body import BatchColumns, decode_batch_body
from smr.wire.peer import PeerMessages

log = logging.getLogger("smr.node")


class Resets(Protocol):
    """A role that a fenced node resets (it forgets all it did)."""

    def reset(self) -> None: ...


class SurrenderedCopies(Resets, Protocol):
    """What a takeover asks of the replication (``smr.node.replication``)."""

    def surrender(self, dead: NodeId) -> list[Orphan]: ...


class SnapshotsOnTakeover(SnapshotReceiving, Resets, Protocol):
    """What a takeover and a fence ask of the snapshots (``smr.node.snapshots``)."""


class MovesOnTakeover(Resets, Protocol):
    """What a takeover and a fence ask of the moves (``smr.node.moves``)."""

    @property
    def leaving(self) -> bool: ...


class TakeoverNode(NodeBasics, Protocol):
    """What the takeover uses of the node (``smr.node.core.NodeCore``); the recovery, which
    holds it, uses a part of it."""

    store: StateStore

    @property
    def incarnation(self) -> Incarnation: ...
    @incarnation.setter
    def incarnation(self, incarnation: Incarnation) -> None: ...
    @property
    def predecessors(self) -> tuple[NodeId, ...]: ...
    @property
    def ledger(self) -> LossLedger: ...
    @property
    def reducer(self) -> Reducer: ...
    @property
    def disk(self) -> DiskState | None: ...
    @property
    def handoff(self) -> Handoff: ...
    @property
    def ingest(self) -> Resets: ...
    @property
    def membership(self) -> ViewGossip: ...
    @property
    def replication(self) -> SurrenderedCopies: ...
    @property
    def checkpoints(self) -> Resets: ...
    @property
    def snapshots(self) -> SnapshotsOnTakeover: ...
    @property
    def moves(self) -> MovesOnTakeover: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...
    def set_view(self, view: View) -> None: ...


class Takeover:
    """This node's takeovers (with their records) and its fencing."""

    def __init__(self, node: TakeoverNode) -> None:
        self._node = node
        # One record per takeover, for `status` and the recovery benchmark (bounded).
        self.records: deque[dict[str, Any]] = deque(maxlen=64)
        # Every takeover's duration summed (the records keep only the last 64).
        self.seconds_total = 0.0
        # When this node was last fenced (its clock), None if never.
        self.fenced_at: float | None = None

    def take_over(self, dead: NodeId) -> None:
        """Take over the range of ``dead``, this node's nearest counter-clockwise neighbour.

        1. The new view: ``dead`` marked dead, this node's token moved down to its token.
        2. Gather, for the slots of ``dead``'s range only, the copies to promote: the replicas
           and backups of the nodes it had absorbed and was still re-replicating to us
           (older), then its own (newer).
        3. Slots of the range that no complete copy here covers (more adjacent failures than
           ``r``) are lost: they are marked so (``checkpoint.loss``) and promote nothing, and
           their tuples are refused until an operator accepts the loss (then they start
           empty). Never served empty, or half full, in silence.
        4. Promote the other slots (``checkpoint.promote``): replicas become primary state
           (field values and hwm vectors, by reference), then their backed-up batches are
           replayed; every tuple at or below the promoted hwm is skipped, so each tuple's
           effect is in the state exactly once.
        5. Route by the new view (re-replicating to the secondaries) and gossip it.
        """
        node = self._node
        started = node.clock()
        # 1.
        dead_range = node.ring.range_of(dead)
        slots = set(dead_range.slots()) if dead_range is not None else set()
        view = successor_takes_over(node.view, dead)
        # 2.
        copies = node.replication.surrender(dead)
        node.snapshots.forget_receiving(dead)
        # 3.
        lost = uncovered_slots(
            slots, [copy.covered.slots() for copy in copies if copy.covered is not None]
        )
        if lost:
            node.ledger.mark(node.store, lost)
            node.counters.slots_lost += len(lost)
            dead_member = node.view.get(dead)
            if dead_member is not None:
                node.handoff.note_lost(dead, dead_member.incarnation, lost)
            log.error(
                "taking over %s: no copy of %d of its %d slots survived (more adjacent "
                "failures than the replication factor %d); they stay offline, refusing "
                "tuples, until %s comes back with their state (if it was alive) or an "
                "operator runs 'smr recover --accept-loss'",
                dead,
                len(lost),
                len(slots),
                node.settings.replication,
                dead,
            )
        # 4.
        replayed = self.promote_slots(copies, slots - lost)
        node.counters.takeovers += 1
        # 5.
        owners_before = [owner for owner in node.ring.owners if owner != dead]
        node.set_view(view)
        check_takeover(node.ring, owners_before, node.node_id, slots)
        node.membership.gossip()
        took_ms = (node.clock() - started) * 1000
        self.seconds_total += took_ms / 1000
        self.records.append(
            {
                "dead": dead,
                "declared_at_unix_s": time.time() - took_ms / 1000,
                "takeover_ms": took_ms,
                "tuples_replayed": replayed,
                "keys_after": node.store.key_count(),
            }
        )
        log.warning(
            "took over %s: %d tuples replayed in %.1f ms; now at token %s",
            dead,
            replayed,
            took_ms,
            node.view.members[node.node_id].token,
        )

    def promote_slots(self, copies: Sequence[Copy], slots: Collection[Slot]) -> int:
        """Make ``slots`` primary state here from ``copies`` (oldest first), replaying their
        backed-up tuples past the hwm (``checkpoint.promote``): the one promotion of a
        takeover and of a move. Returns the tuples replayed."""
        node = self._node
        reducer = node.reducer
        outcome = promote_range(
            node.store, copies, slots, node.ring.slot_count, reducer.replay_fn(node.store)
        )
        reducer.note_failures(outcome.failed, outcome.failures)
        reducer.flush_emits()
        # Promoted copies bring their loss marks: a lost slot stays lost where it moves.
        node.ledger.rebuild(node.store)
        node.counters.tuples_replayed += outcome.replayed
        return outcome.replayed

    def fence(self) -> None:
        """This incarnation was marked dead: stop serving and rejoin empty.

        1. Keep the state served as a fenced copy (``smr.node.handoff``: a taker that found
           slots of this range lost asks for it), and with a data directory the generation
           on disk that holds it (``DiskState.keep_fenced``: it may be the only copy of
           slots the ring lost); drop replicas, backups, channels and pending work.
        2. Rejoin as the next incarnation on standby (owning nothing) and gossip it.
        """
        node = self._node
        log.error("marked dead in the view: fencing incarnation %d", node.incarnation)
        node.counters.fenced += 1
        self.fenced_at = node.clock()
        # 1.
        node.handoff.keep(node.store, node.incarnation)
        if node.disk is not None and node.store.slots():
            kept = node.disk.keep_fenced(node.incarnation)
            if kept is not None:
                log.error(
                    "kept the state this node served on disk in %s (%d keys): it may be the "
                    "only copy of slots the ring lost; remove it once 'smr status' shows "
                    "no slot lost",
                    kept,
                    node.store.key_count(),
                )
        node.store = StateStore()
        node.ledger.rebuild(node.store)
        node.replication.reset()
        node.checkpoints.reset()
        node.snapshots.reset()
        node.ingest.reset()
        node.moves.reset()
        # 2.
        old = node.view.members[node.node_id]
        node.incarnation = Incarnation(old.incarnation + 1)
        rejoined = replace(old, incarnation=node.incarnation, status=Status.STANDBY, version=1)
        node.set_view(node.view.with_member(rejoined))
        node.membership.gossip()

    def doubt_restored_state(self, left_out: Sequence[NodeId]) -> None:
        """Restored from a crash, with owners that would have taken it over left out of the
        restart (``smr.node.restart``, step 4): whether they did, and served past this
        node's disk, cannot be known. Every slot of its range and of its state goes to the
        loss ledger (kept, not served: reads and tuples refused, ``status`` and ``recover``
        say it; the left-out node back, or an operator's ``--accept-loss``, decides), and
        every copy of another node's range is dropped (a takeover from it finds none: its
        range is lost too, loudly)."""
        if not left_out:
            return
        node = self._node
        # Its whole range, not only the slots its disk holds state for: a slot empty here
        # may hold state at the node that took it over.
        own_range = node.ring.range_of(node.node_id)
        slots = node.store.slots() | (set(own_range.slots()) if own_range is not None else set())
        if not slots:
            return  # fenced, or on standby: it owns and holds nothing to doubt
        node.counters.slots_lost += len(slots - node.ledger.lost_among(slots))
        node.ledger.mark(node.store, slots)
        node.replication.reset()
        node.snapshots.reset()
        log.error(
            "restart: this node crashed before the stop and %s, which would have taken it "
            "over, was left out: what it restored may have been superseded, so the %d slots "
            "of its range and state are counted lost (kept, not served) and its copies of "
            "other ranges dropped, until %s comes back or an operator runs 'smr recover "
            "--accept-loss'",
            ", ".join(left_out),
            len(slots),
            ", ".join(left_out),
        )


def check_takeover(
    ring: Ring, owners_before: Sequence[NodeId], taker: NodeId, dead_slots: set[Slot]
) -> None:
    """After a takeover the other owners keep their cyclic order (a token moved past a
    neighbour would hand slots to a node holding none of their state), and the taker is
    primary of every slot the dead node owned."""
    owners = list(ring.owners)
    if sorted(owners) != sorted(owners_before) or (
        owners and owners != _rotate(owners_before, owners[0])
    ):
        raise InvariantViolation(
            f"takeover by {taker} reordered the ring: {owners_before} became {owners}"
        )
    if dead_slots:
        strays = [slot for slot in dead_slots if ring.primary(slot) != taker]
        if strays:
            raise InvariantViolation(
                f"{taker} took over a range but is not primary of slots {sorted(strays)[:8]}"
            )


def _rotate(owners: Sequence[NodeId], first: NodeId) -> list[NodeId]:
    start = list(owners).index(first)
    return [*owners[start:], *owners[:start]]


def promote_range(
    into: StateStore,
    copies: Sequence[Copy],
    slots: Collection[Slot],
    slot_count: int,
    reduce_fn: ReduceFn,
    *,
    by_reference: bool = True,
) -> PromoteOutcome:
    """``checkpoint.promote.promote`` with the wire protocol's batch decoder: the one place
    where backed-up batches are decoded and applied (a takeover, and the simulation's check
    of what a takeover would give)."""

    def decode(held: BackedUpBatch) -> BatchColumns:
        return decode_batch_body(held.body, held.tuple_count, slot_count)

    return promote(into, copies, slots, decode, reduce_fn, by_reference=by_reference)
