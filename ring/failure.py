"""Failure detection as a pure decision procedure (DESIGN section 6).

A node watches the owners it backs up (its counter-clockwise neighbours, nearest first). Any
message from a watched node counts as a sign of life. The procedure, per watched node, in
order of nearness:

1. Silence of at least ``failure_timeout_s`` (or an explicit suspicion, such as a dropped
   connection) starts a probe: the caller sends a direct probe, answered at once by a live node.
   With the probe, the caller also probes every other owner of its view (a contact check).
2. No sign of life within ``probe_timeout_s`` of the probe: the node is declared dead, if
   :func:`may_declare_dead` allows it (below). If not, the round starts over (the caller
   probes again) and the node is not declared dead: the judging node is the one cut off.
Silence from a node never heard from since this detector started counts only after an extra
``first_contact_grace_s``: a cluster's processes start one after the other, and a node still
importing its code is not dead. A dropped connection (``suspect``) is judged without grace.

3. Only the nearest watched node that is not yet declared dead is judged at a time: a node
   farther away is somebody else's to take over unless every node between is dead, which the
   caller learns by taking over the nearer one first (the walk of up to ``r`` hops).

Why a quorum (:func:`may_declare_dead`). Silence does not tell a dead node from a cut
network. A node cut off from the rest by a partition hears nobody: if silence alone sufficed,
it would declare its healthy predecessor dead and take its range over, while the rest of the
ring, hearing nothing from it, declares it dead and gives its range to its successor. On heal
both dead marks win the merge: the healthy predecessor is fenced and its range falls back on
a node that holds no copy of it, and acked tuples are lost. So a declaration on silence needs
the judging node to be in contact (a sign of life since the probe round began) with a strict
majority of the owners of its view, itself included and the suspect excluded from the
contacts. Two sides of a partition cannot both hold a strict majority, so at most one side
declares nodes of the other dead; a node cut off alone (or with too few others) declares
nobody dead and waits: it keeps serving until it hears it was marked dead, and is then fenced
(fencing itself instead would hand its range to its counter-clockwise neighbour, which holds
no copy of it; only a takeover by its successor, which does, may end its ownership).
One confirming helper would not do: two nodes cut off together confirm each other.

A dropped connection is different evidence: the peer's host answered that nothing listens
any more (a crashed process), which a partition does not produce. A suspect whose connection
dropped and that does not answer the probe is declared dead without a quorum, so that the
last survivors of a ring (fewer than a majority) still take over crashed neighbours.
The price of the quorum: a ring whose majority is silent but not crashed (hung, or cut off)
takes over nobody until it hears from a majority again; it stalls, and loses nothing.

The detector holds no clock and does no I/O: the caller passes ``now`` (seconds) and carries
out the returned actions, so the same code runs under a simulated clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from ring.ids import NodeId


class Verdict(Enum):
    """What the caller must do about a watched node."""

    PROBE = "probe"
    """Probe the node (and check contact with the other owners)."""
    DEAD = "dead"
    """Declare the node dead and take it over."""
    NO_QUORUM = "no quorum"
    """The probe went unanswered, but too few owners were heard from to declare the node
    dead: the judging node may be the one cut off. A new round began: probe again."""


def may_declare_dead(owner_count: int, in_contact: int, connection_dropped: bool) -> bool:
    """Whether a node may declare an unanswering suspect dead (see the module doc).

    ``owner_count``: the owners of the judging node's view, itself and the suspect included.
    ``in_contact``: how many of them it heard from since the probe round began, itself
    included, the suspect not. ``connection_dropped``: the suspect's connection dropped and
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
    (or a suspicion) followed by ``probe_timeout_s`` without any sign of life, and only when
    :func:`may_declare_dead` allows it; any sign of life cancels its probe.
    """

    failure_timeout_s: float
    probe_timeout_s: float
    first_contact_grace_s: float = 0.0
    last_heard_s: dict[NodeId, float] = field(default_factory=dict)
    probe_deadline_s: dict[NodeId, float] = field(default_factory=dict)
    heard_from: set[NodeId] = field(default_factory=set)
    # Any node's last sign of life (watched or not): the contacts of the quorum check.
    last_contact_s: dict[NodeId, float] = field(default_factory=dict)
    # When the current probe round of each suspect began.
    probe_started_s: dict[NodeId, float] = field(default_factory=dict)
    # Suspects whose connection dropped, with no answer since to a probe sent after that.
    connection_dropped: set[NodeId] = field(default_factory=set)

    def watch(self, nodes: Sequence[NodeId], now: float) -> None:
        """Watch exactly ``nodes`` from now on; a newly watched node's silence counts from now."""
        for node in list(self.last_heard_s):
            if node not in nodes:
                del self.last_heard_s[node]
                self.probe_deadline_s.pop(node, None)
                self.probe_started_s.pop(node, None)
                self.connection_dropped.discard(node)
        for node in nodes:
            grace = 0.0 if node in self.heard_from else self.first_contact_grace_s
            self.last_heard_s.setdefault(node, now + grace)

    def heard(self, node: NodeId, now: float) -> None:
        """A sign of life from ``node`` (any node): reset its silence, cancel its probe, and
        count it as a contact."""
        first_contact = node not in self.heard_from
        self.heard_from.add(node)
        self.last_contact_s[node] = max(self.last_contact_s.get(node, now), now)
        if node in self.last_heard_s:
            # The first contact ends the grace; later ones only move the mark forward.
            last = self.last_heard_s[node]
            self.last_heard_s[node] = now if first_contact else max(last, now)
            self.probe_deadline_s.pop(node, None)
            self.probe_started_s.pop(node, None)

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
        self._start_round(node, now)
        return True

    def _start_round(self, node: NodeId, now: float) -> None:
        self.probe_started_s[node] = now
        self.probe_deadline_s[node] = now + self.probe_timeout_s

    def in_contact(self, owners_besides_me: Sequence[NodeId], suspect: NodeId) -> int:
        """The judging node and the owners it heard from since ``suspect``'s probe round
        began (the suspect not counted)."""
        since = self.probe_started_s.get(suspect, float("inf"))
        return 1 + sum(
            1
            for node in set(owners_besides_me)
            if node != suspect and self.last_contact_s.get(node, -float("inf")) >= since
        )

    def judge(
        self,
        nearest_first: Sequence[NodeId],
        now: float,
        *,
        owners_besides_me: Sequence[NodeId],
    ) -> tuple[Verdict, NodeId] | None:
        """The action for the nearest watched node, if any is due (steps 1-3).

        ``owners_besides_me``: every owner of the judging node's view but itself (the
        watched nodes included): the electorate of the quorum check.
        """
        for node in nearest_first:
            if node not in self.last_heard_s:
                continue
            deadline = self.probe_deadline_s.get(node)
            if deadline is not None:
                if now < deadline:
                    return None
                owner_count = len(set(owners_besides_me) | {node}) + 1
                in_contact = self.in_contact(owners_besides_me, node)
                if may_declare_dead(owner_count, in_contact, node in self.connection_dropped):
                    return Verdict.DEAD, node
                self._start_round(node, now)
                return Verdict.NO_QUORUM, node
            if now - self.last_heard_s[node] >= self.failure_timeout_s:
                self._start_round(node, now)
                return Verdict.PROBE, node
            return None
        return None
