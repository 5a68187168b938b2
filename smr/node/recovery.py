"""Recovery: failure detection of the predecessors, takeover of a dead one's range, and
fencing of this node when the view says it is dead (docs/design/architecture.md#failures).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from smr.checkpoint.backup import BackedUpBatch
from smr.checkpoint.loss import LossLedger, uncovered_slots
from smr.checkpoint.promote import Copy, PromoteOutcome, promote
from smr.checkpoint.store import ReduceFn, StateStore
from smr.node.disk import DiskState
from smr.node.handoff import Handoff
from smr.node.orphans import Orphan
from smr.node.ports import Clock, SnapshotReceiving, ViewGossip
from smr.node.reducer import Reducer
from smr.node.settings import NodeCounters, NodeSettings
from smr.node.throttle import Throttle
from smr.ring.failure import FailureDetector, Verdict
from smr.ring.ids import Epoch, Incarnation, NodeId, Slot
from smr.ring.invariants import InvariantViolation
from smr.ring.placement import Ring
from smr.ring.view import Status, View, successor_takes_over
from smr.wire.batch_body import BatchColumns, decode_batch_body
from smr.wire.kinds import RequestId
from smr.wire.peer import PeerMessages, Probe, ProbeAck, Suspect, Vouch


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


class RecoveryNode(Protocol):
    """What the recovery uses of the node (``smr.node.core.NodeCore``)."""

    store: StateStore

    @property
    def node_id(self) -> NodeId: ...
    @property
    def incarnation(self) -> Incarnation: ...
    @incarnation.setter
    def incarnation(self, incarnation: Incarnation) -> None: ...
    @property
    def view(self) -> View: ...
    @property
    def ring(self) -> Ring: ...
    @property
    def predecessors(self) -> tuple[NodeId, ...]: ...
    @property
    def stamp(self) -> tuple[NodeId, Incarnation, Epoch]: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def settings(self) -> NodeSettings: ...
    @property
    def counters(self) -> NodeCounters: ...
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


log = logging.getLogger("smr.node")

# A loop that read no message for longer than this is itself late (see Recovery.judge):
# two ticks (an idle loop reads after every tick), half the probe timeout.
LATE_READ_S: Final = 0.1
# After its own loop was late, a node judges nobody until it has read every message that
# waited (its socket found empty once), or for this long at most.
CATCH_UP_MAX_S: Final = 1.0
# How often a node probes its predecessors to measure round trips (the probe timeout after a
# dropped connection adapts to them), and how long a probe's send time is kept.
RTT_PROBE_INTERVAL_S: Final = 1.0
PROBE_SENT_KEEP_S: Final = 2.0
# Indirect probes a helper runs at once for suspecting judges (Recovery.on_suspect): a bound,
# so that a flood of suspicions cannot grow the table.
RELAYS_MAX: Final = 64


@dataclass(frozen=True)
class _Relay:
    """An indirect probe under way: this node probed ``subject`` for ``judge``, whose
    suspicion is ``judge_req``; an answer before ``until`` is vouched for."""

    judge: NodeId
    subject: NodeId
    judge_req: RequestId
    until: float


class Recovery:
    """Failure detection, takeover and fencing for one node.

    Guarantees: a predecessor is taken over only on a verdict of
    ``ring.failure.FailureDetector`` (a dropped connection and an unanswered probe, or
    silence with a majority of owners in contact and a suspicion that the suspect did not
    refute and no other owner vouched against); a takeover promotes the replica and
    replays every backed-up tuple past its hwm, so each tuple counts exactly once; a fenced
    node serves nothing until it rejoins as a new incarnation.
    """

    def __init__(self, node: RecoveryNode) -> None:
        self._node = node
        settings = node.settings
        self.detector = FailureDetector(
            settings.failure_timeout_ms / 1000,
            settings.probe_timeout_ms / 1000,
            first_contact_grace_s=settings.first_contact_grace_ms / 1000,
            suspicion_timeout_s=settings.suspicion_timeout_ms / 1000,
        )
        self._probe_ids = 0
        # The request id of each suspicion this node holds (a vouch must name it), and the
        # indirect probes it runs for others, by the id of its own probe.
        self._suspicion_req: dict[NodeId, RequestId] = {}
        self._relays: dict[RequestId, _Relay] = {}
        # When this node's own loop last came back from a late read, while it has not read
        # everything that waited since (see note_turn_start); None once caught up.
        self._catching_up_since: float | None = None
        # When each probe of this node's went out, by request id (for round trips).
        self._probe_sent_at: dict[int, float] = {}
        self._rtt_probed_at = -1e9
        self._no_quorum_log = Throttle()
        # Per peer whose connection dropped: the id of the probe sent then (see suspect).
        self._drop_probe_req: dict[NodeId, RequestId] = {}
        # One record per takeover, for `status` and the recovery benchmark (bounded).
        self.takeover_records: deque[dict[str, Any]] = deque(maxlen=64)
        # Every takeover's duration summed (the records keep only the last 64).
        self.takeover_seconds_total = 0.0
        # When this node was last fenced (its clock), None if never.
        self.fenced_at: float | None = None

    # -- detection ---------------------------------------------------------------------------

    def on_probe(self, identity: bytes, message: Probe) -> None:
        """Answer a probe at once (liveness answers never wait on state)."""
        node = self._node
        node.peer_send(message.sender, ProbeAck(*node.stamp, message.req))

    def on_probe_ack(self, identity: bytes, message: ProbeAck) -> None:
        """An answer to a probe: contact; and if it answers the probe sent after its
        connection dropped (or a later one), the drop was not a crash."""
        node = self._node
        sender = node.membership.from_live_peer(message)
        if sender is None:
            return
        self.detector.answered(sender, message.req)
        sent_at = self._probe_sent_at.pop(message.req, None)
        if sent_at is not None:
            self.detector.note_rtt(node.clock() - sent_at)
        req = self._drop_probe_req.get(sender)
        if req is not None and message.req >= req:
            del self._drop_probe_req[sender]
            self.detector.refuted(sender)
        relay = self._relays.get(message.req)
        if relay is not None and relay.subject == sender:
            del self._relays[message.req]
            if node.clock() <= relay.until:
                node.peer_send(relay.judge, Vouch(*node.stamp, sender, relay.judge_req))
                node.counters.vouches_sent += 1

    def on_suspect(self, identity: bytes, message: Suspect) -> None:
        """A judge suspects ``message.subject`` (``ring.failure``, step 2c).

        1. If the subject is this incarnation, refute: answer the suspicion at once (a
           ``ProbeAck`` of its id), and count it against this node's own health (a node
           suspected is often the slow one: Lifeguard).
        2. Otherwise, answer the judge at once (a contact of its quorum check: the verdict
           counts only owners that answered since the suspicion began), and probe the subject
           on the judge's behalf; an answer within the probe timeout is vouched for
           (``on_probe_ack``).
        """
        node = self._node
        judge = node.membership.from_live_peer(message)
        if judge is None:
            return
        now = node.clock()
        # 1.
        if message.subject == node.node_id:
            if message.subject_incarnation == node.incarnation:
                node.peer_send(judge, ProbeAck(*node.stamp, message.req))
                node.counters.suspicions_refuted += 1
                self.detector.note_late(now)
                log.warning("%s suspected this node: refuted", judge)
            return
        # 2.
        node.peer_send(judge, ProbeAck(*node.stamp, message.req))
        member = node.view.get(message.subject)
        if member is None or member.incarnation != message.subject_incarnation:
            return
        for req in [req for req, relay in self._relays.items() if relay.until < now]:
            del self._relays[req]
        if len(self._relays) >= RELAYS_MAX:
            return
        req = self._send_probe([message.subject])
        until = now + node.settings.probe_timeout_ms / 1000
        self._relays[req] = _Relay(judge, message.subject, message.req, until)

    def on_vouch(self, identity: bytes, message: Vouch) -> None:
        """Another owner heard from a node this node suspects, when asked: end the
        suspicion as a sign of life would (not counting as contact of this node's own)."""
        node = self._node
        helper = node.membership.from_live_peer(message)
        if helper is None or self._suspicion_req.get(message.subject) != message.req:
            return
        del self._suspicion_req[message.subject]
        self.detector.vouched(message.subject, node.clock())
        node.counters.suspicions_vouched += 1
        log.info("%s vouched for %s: suspicion ended", helper, message.subject)

    def _suspect_round(self, suspect: NodeId, others: Sequence[NodeId]) -> None:
        """Tell ``suspect`` it is suspected, and ask every other owner to probe it (step 2c
        of ``ring.failure``)."""
        node = self._node
        member = node.view.get(suspect)
        if member is None:
            return
        self._probe_ids += 1
        req = RequestId(self._probe_ids)
        self._suspicion_req[suspect] = req
        # The verdict's quorum counts the owners that answer this message (fresh contacts:
        # answers to the probe that began the round may predate a cut).
        self.detector.probe_sent(suspect, req)
        node.counters.suspicions += 1
        message = Suspect(*node.stamp, suspect, member.incarnation, req)
        node.peer_send(suspect, message)
        for other in others:
            if other != suspect:
                node.peer_send(other, message)
        log.info(
            "%s answers no probe: suspected for %.0f ms (asking the other owners to reach it)",
            suspect,
            self.detector.suspicion_s(suspect) * 1000,
        )

    def _send_probe(self, peers: Sequence[NodeId]) -> RequestId:
        """Send one probe, numbered anew, to each of ``peers``; its send time is kept for
        the round trip of its answers."""
        node = self._node
        self._probe_ids += 1
        req = RequestId(self._probe_ids)
        now = node.clock()
        if len(self._probe_sent_at) > 256:
            for old in [r for r, at in self._probe_sent_at.items() if now - at > PROBE_SENT_KEEP_S]:
                del self._probe_sent_at[old]
        self._probe_sent_at[req] = now
        probe = Probe(*node.stamp, req)
        for peer in peers:
            node.peer_send(peer, probe)
        return req

    def _probe(self, suspect: NodeId, others: Sequence[NodeId]) -> None:
        """Probe ``suspect``, and every other owner for the contact check (their answers to
        this probe, and only those, count as contacts of the round)."""
        req = self._send_probe([suspect, *(other for other in others if other != suspect)])
        self.detector.probe_sent(suspect, req)

    def _no_quorum(self, suspect: NodeId, others: Sequence[NodeId], now: float) -> None:
        self._node.counters.quorum_missed += 1
        if self._no_quorum_log.due(now):
            in_contact = self.detector.in_contact(others, suspect)
            log.warning(
                "%s does not answer, but only %d of %d owners are in contact: not declaring "
                "it dead (this node may be the one cut off)",
                suspect,
                in_contact,
                len(set(others) | {suspect}) + 1,
            )

    def suspect(self, peer: NodeId) -> None:
        """``peer``'s connection dropped: probe it now instead of after the silence timeout.
        Only an answer to this probe (or a later one) shows the drop was not a crash."""
        node = self._node
        if node.settings.replication > 0:
            started = self.detector.suspect(peer, node.clock())
            req = self._send_probe([peer])
            if started:
                self.detector.probe_sent(peer, req)
            self._drop_probe_req[peer] = req

    def crashed(self, peer: NodeId) -> bool:
        """Whether watched ``peer`` crashed by the evidence a takeover needs (its connection
        dropped, and the probe sent after the drop went unanswered past its deadline),
        whether or not it is the nearest predecessor, the one ``judge`` walks to. A drop
        whose probe round ended (a late message from the peer) is probed again."""
        node = self._node
        detector = self.detector
        if peer in detector.connection_dropped and peer not in detector.probe_deadline_s:
            self.suspect(peer)
        return detector.crashed(peer, node.clock())

    def note_turn_start(self, since_read_s: float) -> None:
        """A receive turn begins ``since_read_s`` after the last one read. Past
        ``LATE_READ_S`` this node was late itself: its detector's timers move back by the
        lateness (``FailureDetector.postpone``; by what exceeds ``LATE_READ_S`` only, so
        that a node late turn after turn still judges, more slowly), and it judges nobody
        until it has caught up with what waited (``note_drained``), or for
        ``CATCH_UP_MAX_S`` at most."""
        if since_read_s > LATE_READ_S:
            self.detector.postpone(since_read_s - LATE_READ_S)
            if self._catching_up_since is None:
                self._catching_up_since = self._node.clock()

    def note_drained(self) -> None:
        """A receive turn found no message waiting: everything sent before was read."""
        self._catching_up_since = None

    def judge(self, now: float, read_at: float) -> None:
        """Judge the nearest watched predecessor (the steps of ``ring.failure``): silent
        past the timeout, probe it, and probe every other owner too (the contact check); no
        answer to the probe after its connection dropped, take it over (and the next one is
        judged on the next tick: the walk of up to ``r`` hops over consecutive failures); no
        answer on silence alone, suspect it (it may refute, other owners may vouch for it),
        and take it over when the suspicion times out. Either only if
        ``ring.failure.may_declare_dead`` allows it: on silence alone, this node must have
        heard from a strict majority of the owners since the probe. Otherwise this node
        may be the one cut off: it declares nobody dead, keeps serving, and probes again.

        A node whose own loop is late (it last read its messages at ``read_at``, more than
        ``LATE_READ_S`` ago: a slow reduce call, CPU starvation) does not judge until it has
        read again: the heartbeats and probe answers that came meanwhile are still unread,
        so the silence it would measure is its own, not its peers'; and its suspicions
        last longer for a while (Lifeguard's local health). Once it reads again, its
        detector's timers move back by the time it could not read, and it judges nobody
        until it has read what waited (``note_turn_start``): a pause of the judge between a
        probe and its deadline never turns an answer still unread into a verdict.
        """
        if now - read_at > LATE_READ_S:
            self.detector.note_late(now)
            return
        catching_up = self._catching_up_since
        if catching_up is not None and now - catching_up < CATCH_UP_MAX_S:
            return
        self.detector.note_on_time(now)
        node = self._node
        if node.node_id not in node.ring.owners or node.moves.leaving:
            return  # a joiner, or a node whose leave is committed, takes nobody over
        if now - self._rtt_probed_at >= RTT_PROBE_INTERVAL_S and node.predecessors:
            # Round trips for the probe timeout after a dropped connection (any answer
            # also counts as a sign of life).
            self._rtt_probed_at = now
            self._send_probe(node.predecessors)
        others = [o for o in node.ring.owners if o != node.node_id]
        verdict = self.detector.judge(node.predecessors, now, owners_besides_me=others)
        if verdict is None:
            return
        action, suspect = verdict
        if action is Verdict.DEAD:
            self._suspicion_req.pop(suspect, None)
            self.take_over(suspect)
            return
        if action is Verdict.SUSPECT:
            self._suspect_round(suspect, others)
            return
        if action is Verdict.NO_QUORUM:
            self._no_quorum(suspect, others, now)
        self._probe(suspect, others)

    # -- takeover and fencing -----------------------------------------------------------------

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
        _check_takeover(node.ring, owners_before, node.node_id, slots)
        node.membership.gossip()
        took_ms = (node.clock() - started) * 1000
        self.takeover_seconds_total += took_ms / 1000
        self.takeover_records.append(
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
            node.store, copies, slots, node.ring.slot_count, reducer.replay_fn()
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

    # -- what other roles ask ----------------------------------------------------------------

    def sign_of_life(self, peer: NodeId, busy: bool | None = None) -> None:
        """``peer`` was heard from now (a peer message from a live incarnation); with
        ``busy``, its heartbeat said whether it is behind (its silence is judged later)."""
        node = self._node
        if busy is None:
            self.detector.heard(peer, node.clock())
        else:
            self.detector.note_busy(peer, busy)

    def fenced_since(self) -> float | None:
        """When this node was last fenced (clock time; None: never)."""
        return self.fenced_at

    def report(self) -> dict[str, Any]:
        """What ``smr status`` shows of takeovers and of this node's own health."""
        return {
            "takeover_records": list(self.takeover_records),
            "takeover_seconds": self.takeover_seconds_total,
        }

    def local_health(self) -> int:
        """How unsure this node's failure detector is of its own timeliness (``smr
        status``): each step lengthens its suspicions by one timeout."""
        return self.detector.local_health


def _check_takeover(
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
