"""Recovery: failure detection of the predecessors (probes, suspicion, refutation, vouches)
and the verdicts that start a takeover (docs/design/architecture.md#failures). The takeover
of a dead one's range and the fencing of this node are :mod:`smr.node.takeover`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

from smr.checkpoint.promote import Copy
from smr.node.takeover import Takeover, TakeoverNode
from smr.node.throttle import Throttle
from smr.ring.failure import FailureDetector, Verdict
from smr.ring.ids import NodeId, Slot
from smr.wire.kinds import RequestId
from smr.wire.peer import Probe, ProbeAck, Suspect, Vouch

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

    def __init__(self, node: TakeoverNode) -> None:
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
        # Takeovers and fencing (smr.node.takeover).
        self.takeover = Takeover(node)

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
            self.takeover.take_over(suspect)
            return
        if action is Verdict.SUSPECT:
            self._suspect_round(suspect, others)
            return
        if action is Verdict.NO_QUORUM:
            self._no_quorum(suspect, others, now)
        self._probe(suspect, others)

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
        return self.takeover.fenced_at

    def take_over(self, dead: NodeId) -> None:
        """Take over the range of ``dead`` (``Takeover.take_over``)."""
        self.takeover.take_over(dead)

    def promote_slots(self, copies: Sequence[Copy], slots: Collection[Slot]) -> int:
        """Make ``slots`` primary state here from ``copies`` (``Takeover.promote_slots``);
        the tuples replayed."""
        return self.takeover.promote_slots(copies, slots)

    def fence(self) -> None:
        """This incarnation was marked dead: stop serving and rejoin empty
        (``Takeover.fence``)."""
        self.takeover.fence()

    def doubt_restored_state(self, left_out: Sequence[NodeId]) -> None:
        """Restored from a crash with a possible taker left out: what it holds counts lost
        (``Takeover.doubt_restored_state``)."""
        self.takeover.doubt_restored_state(left_out)

    @property
    def takeover_records(self) -> list[dict[str, Any]]:
        """One record per takeover (the last 64), for status and the recovery benchmark."""
        return list(self.takeover.records)

    def report(self) -> dict[str, Any]:
        """What ``smr status`` shows of takeovers and of this node's own health."""
        return {
            "takeover_records": list(self.takeover.records),
            "takeover_seconds": self.takeover.seconds_total,
        }

    def local_health(self) -> int:
        """How unsure this node's failure detector is of its own timeliness (``smr
        status``): each step lengthens its suspicions by one timeout."""
        return self.detector.local_health
