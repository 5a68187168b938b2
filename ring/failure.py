"""Failure detection as a pure decision procedure (docs/design/architecture.md#detection).

A node watches the owners it backs up, nearest first; silence or a dropped connection starts a
probe, then a suspicion the suspect may refute and other owners may vouch against, and a
verdict of dead only with a quorum of the owners heard this round (a crash, seen as a dropped
connection, needs none). Holds no clock and does no I/O: the caller passes ``now`` and carries
out the returned actions. The steps and why: docs/design/failure-detector.md#procedure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from smr.ring.ids import NodeId

DROP_PROBE_RTT_FACTOR: Final = 4
DROP_PROBE_MIN_S: Final = 0.05
"""The probe after a dropped connection waits this many times the longest recent round trip
(``FailureDetector.note_rtt``), and no less than this (step 2a)."""
RTT_SAMPLES_MAX: Final = 32

LOCAL_HEALTH_MAX: Final = 8
"""Lifeguard's bound on the local health multiplier: a very late judge waits at most nine
suspicion timeouts."""


class Verdict(Enum):
    """What the caller must do about a watched node."""

    PROBE = "probe"
    """Probe the node (and check contact with the other owners)."""
    SUSPECT = "suspect"
    """The probe went unanswered: tell the node it is suspected (it refutes if alive) and
    ask the other owners to probe it on the judge's behalf."""
    DEAD = "dead"
    """Declare the node dead and take it over."""
    NO_QUORUM = "no quorum"
    """The probe went unanswered, but too few owners were heard from to declare the node
    dead: the judging node may be the one cut off. A new round began: probe again."""


def may_declare_dead(owner_count: int, in_contact: int, connection_dropped: bool) -> bool:
    """Whether a node may declare an unanswering suspect dead (see the module doc).

    ``owner_count``: the owners of the judging node's view, itself and the suspect included.
    ``in_contact``: how many of them answered the probe round's probe, itself included,
    the suspect not. ``connection_dropped``: the suspect's connection dropped and
    it has not answered a probe sent since.

    Guarantees: True when the connection dropped; otherwise True exactly when ``in_contact``
    is a strict majority of ``owner_count``. So, on silence alone, an isolated node
    (``in_contact == 1``) never declares anyone dead when there are two owners or more, and
    of two disjoint groups of owners at most one may declare (their contacts cannot both be
    majorities). Monotone: more contacts never forbid what fewer allowed.
    """
    if connection_dropped:
        return True
    return 2 * in_contact > owner_count


@dataclass
class FailureDetector:
    """Silence timers and outstanding probes for the watched nodes.

    Guarantees: a node is declared dead only after at least ``failure_timeout_s`` of silence
    followed by ``probe_timeout_s`` without any sign of life (after a dropped connection:
    ``drop_probe_timeout_s``, at least ``DROP_PROBE_MIN_S``), and
    only when :func:`may_declare_dead` allows it; on silence, only after a suspicion of at
    least ``suspicion_timeout_s`` more that no sign of life and no vouch ended. Any sign of
    life cancels its probe and its suspicion.
    """

    failure_timeout_s: float
    probe_timeout_s: float
    first_contact_grace_s: float = 0.0
    last_heard_s: dict[NodeId, float] = field(default_factory=dict)
    probe_deadline_s: dict[NodeId, float] = field(default_factory=dict)
    heard_from: set[NodeId] = field(default_factory=set)
    # Per suspect, the request id of the current probe round's probe (probe_sent); per
    # node, the highest probe request id it answered (answered): the contacts of a round are
    # the nodes that answered its probe or a later one.
    round_req: dict[NodeId, int] = field(default_factory=dict)
    answered_req: dict[NodeId, int] = field(default_factory=dict)
    # Suspects whose connection dropped, with no answer since to a probe sent after that.
    connection_dropped: set[NodeId] = field(default_factory=set)
    # How long a suspicion lasts (step 2c); 0 declares at the probe timeout, as SWIM without
    # suspicion does.
    suspicion_timeout_s: float = 0.0
    # When each suspicion under way times out.
    suspicion_deadline_s: dict[NodeId, float] = field(default_factory=dict)
    # Nodes whose last heartbeat said they were busy (their suspicions last twice as long).
    busy: set[NodeId] = field(default_factory=set)
    # Lifeguard's local health multiplier: 0 is healthy; each late read of the judge's own
    # loop raises it (up to LOCAL_HEALTH_MAX), each second on time lowers it by one; a
    # suspicion lasts (1 + local_health) times its timeout.
    local_health: int = 0
    _health_decayed_at_s: float = 0.0
    # Round trips of recent probes, in seconds (the probe timeout after a dropped connection).
    rtt_samples_s: deque[float] = field(default_factory=lambda: deque(maxlen=RTT_SAMPLES_MAX))

    def watch(self, nodes: Sequence[NodeId], now: float) -> None:
        """Watch exactly ``nodes`` from now on; a newly watched node's silence counts from now."""
        for node in list(self.last_heard_s):
            if node not in nodes:
                del self.last_heard_s[node]
                self._end_round(node)
                self.connection_dropped.discard(node)
                self.busy.discard(node)
        for node in nodes:
            grace = 0.0 if node in self.heard_from else self.first_contact_grace_s
            self.last_heard_s.setdefault(node, now + grace)

    def heard(self, node: NodeId, now: float) -> None:
        """A sign of life from ``node`` (any node): reset its silence and cancel its probe
        (a contact of the quorum check is an answer to a probe: :meth:`answered`)."""
        first_contact = node not in self.heard_from
        self.heard_from.add(node)
        if node in self.last_heard_s:
            # The first contact ends the grace; later ones only move the mark forward.
            last = self.last_heard_s[node]
            self.last_heard_s[node] = now if first_contact else max(last, now)
            self._end_round(node)

    def probe_sent(self, suspect: NodeId, req: int) -> None:
        """The caller sent the probe of ``suspect``'s current round, numbered ``req``, to
        the suspect and to every other owner (request ids only grow)."""
        self.round_req[suspect] = req

    def answered(self, node: NodeId, req: int) -> None:
        """``node`` answered the probe numbered ``req``: it is in contact for every round
        whose probe is numbered ``req`` or less."""
        if req > self.answered_req.get(node, -1):
            self.answered_req[node] = req

    def vouched(self, node: NodeId, now: float) -> None:
        """Another owner heard from ``node`` when asked to (an indirect probe): reset its
        silence and end its suspicion, as a sign of life would. It is no contact of the
        judge's own: the quorum counts only answers to the judge's own probes."""
        if node in self.last_heard_s:
            self.last_heard_s[node] = max(self.last_heard_s[node], now)
            self._end_round(node)

    def note_busy(self, node: NodeId, busy: bool) -> None:
        """``node``'s heartbeat said whether it is busy (its loop behind its work)."""
        if busy:
            self.busy.add(node)
        else:
            self.busy.discard(node)

    def note_late(self, now: float) -> None:
        """The judge's own loop read late (Lifeguard's local health): trust suspicions less."""
        self.local_health = min(LOCAL_HEALTH_MAX, self.local_health + 1)
        self._health_decayed_at_s = now

    def note_on_time(self, now: float) -> None:
        """The judge's loop read on time: local health recovers by one step per second."""
        if self.local_health and now - self._health_decayed_at_s >= 1.0:
            self.local_health -= 1
            self._health_decayed_at_s = now

    def postpone(self, gap_s: float) -> None:
        """The judge itself read nothing for ``gap_s`` (paused, stalled, starved of CPU):
        the silence it would measure over that gap is its own, and the answers to its
        probes are still unread. Every timer of the procedure moves back by the gap, so a
        pause of the judge never counts against the nodes it watches."""
        for table in (self.last_heard_s, self.probe_deadline_s, self.suspicion_deadline_s):
            for node in table:
                table[node] += gap_s

    def suspicion_s(self, node: NodeId) -> float:
        """How long a suspicion of ``node`` begun now would last (step 2c)."""
        busy_factor = 2 if node in self.busy else 1
        return self.suspicion_timeout_s * (1 + self.local_health) * busy_factor

    def _end_round(self, node: NodeId) -> None:
        self.probe_deadline_s.pop(node, None)
        self.round_req.pop(node, None)
        self.suspicion_deadline_s.pop(node, None)

    def refuted(self, node: NodeId) -> None:
        """``node`` answered a probe sent after its connection dropped: it did not crash (a
        transient disconnect), so its dropped connection no longer counts. Any other sign of
        life does not refute a drop: it may be a message the node sent before it crashed,
        read late (by a node that was paused, say)."""
        self.connection_dropped.discard(node)

    def suspect(self, node: NodeId, now: float) -> bool:
        """Treat ``node`` as silent past the timeout (its connection dropped). Returns True
        if this starts a probe the caller must send."""
        if node not in self.last_heard_s:
            return False
        self.connection_dropped.add(node)
        if node in self.probe_deadline_s:
            return False
        self._start_round(node, now, self.drop_probe_timeout_s())
        return True

    def crashed(self, node: NodeId, now: float) -> bool:
        """Whether the evidence of step 2a holds for watched ``node``, nearest or not: its
        connection dropped and the probe sent after the drop went unanswered past its
        deadline (the judge declares such a node dead when it is the nearest one)."""
        deadline = self.probe_deadline_s.get(node)
        return node in self.connection_dropped and deadline is not None and now >= deadline

    def note_rtt(self, rtt_s: float) -> None:
        """A probe was answered ``rtt_s`` after it was sent."""
        self.rtt_samples_s.append(rtt_s)

    def drop_probe_timeout_s(self) -> float:
        """How long the probe after a dropped connection waits (step 2a): the probe timeout
        until a round trip has been seen."""
        if not self.rtt_samples_s:
            return self.probe_timeout_s
        adaptive = DROP_PROBE_RTT_FACTOR * max(self.rtt_samples_s)
        return min(self.probe_timeout_s, max(DROP_PROBE_MIN_S, adaptive))

    def _start_round(self, node: NodeId, now: float, timeout_s: float | None = None) -> None:
        # The round's probe is numbered by the caller (probe_sent); until then no answer
        # counts for it.
        self.round_req[node] = 1 << 62
        wait_s = self.probe_timeout_s if timeout_s is None else timeout_s
        self.probe_deadline_s[node] = now + wait_s
        self.suspicion_deadline_s.pop(node, None)

    def in_contact(self, owners_besides_me: Sequence[NodeId], suspect: NodeId) -> int:
        """The judging node and the owners that answered ``suspect``'s current probe round
        (or a later probe), the suspect not counted."""
        round_req = self.round_req.get(suspect, 1 << 62)
        return 1 + sum(
            1
            for node in set(owners_besides_me)
            if node != suspect and self.answered_req.get(node, -1) >= round_req
        )

    def judge(
        self,
        nearest_first: Sequence[NodeId],
        now: float,
        *,
        owners_besides_me: Sequence[NodeId],
    ) -> tuple[Verdict, NodeId] | None:
        """The action for the nearest watched node, if any is due (steps 1-4).

        ``owners_besides_me``: every owner of the judging node's view but itself (the
        watched nodes included): the electorate of the quorum check.
        """
        for node in nearest_first:
            if node not in self.last_heard_s:
                continue
            deadline = self.suspicion_deadline_s.get(node, self.probe_deadline_s.get(node))
            if deadline is not None:
                if now < deadline:
                    return None
                # 2a.
                if node in self.connection_dropped:
                    return Verdict.DEAD, node
                # 2b and 3.
                owner_count = len(set(owners_besides_me) | {node}) + 1
                in_contact = self.in_contact(owners_besides_me, node)
                if not may_declare_dead(owner_count, in_contact, connection_dropped=False):
                    self._start_round(node, now)
                    return Verdict.NO_QUORUM, node
                if node in self.suspicion_deadline_s or self.suspicion_timeout_s <= 0:
                    return Verdict.DEAD, node
                # 2c.
                self.suspicion_deadline_s[node] = now + self.suspicion_s(node)
                return Verdict.SUSPECT, node
            if now - self.last_heard_s[node] >= self.failure_timeout_s:
                self._start_round(node, now)
                return Verdict.PROBE, node
            return None
        return None
