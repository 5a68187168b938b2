"""Failure detection as a pure decision procedure (DESIGN section 6).

A node watches the owners it backs up (its counter-clockwise neighbours, nearest first). Any
message from a watched node counts as a sign of life. The procedure, per watched node, in
order of nearness:

1. Silence of at least ``failure_timeout_s`` (or an explicit suspicion, such as a dropped
   connection) starts a probe: the caller sends a direct probe, answered at once by a live node.
2. No sign of life within ``probe_timeout_s`` of the probe: the node is declared dead.
Silence from a node never heard from since this detector started counts only after an extra
``first_contact_grace_s``: a cluster's processes start one after the other, and a node still
importing its code is not dead. A dropped connection (``suspect``) is judged without grace.

3. Only the nearest watched node that is not yet declared dead is judged at a time: a node
   farther away is somebody else's to take over unless every node between is dead, which the
   caller learns by taking over the nearer one first (the walk of up to ``r`` hops).

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
    DEAD = "dead"


@dataclass
class FailureDetector:
    """Silence timers and outstanding probes for the watched nodes.

    Guarantees: a node is declared dead only after at least ``failure_timeout_s`` of silence
    (or a suspicion) followed by ``probe_timeout_s`` without any sign of life; any sign of
    life cancels its probe.
    """

    failure_timeout_s: float
    probe_timeout_s: float
    first_contact_grace_s: float = 0.0
    last_heard_s: dict[NodeId, float] = field(default_factory=dict)
    probe_deadline_s: dict[NodeId, float] = field(default_factory=dict)
    heard_from: set[NodeId] = field(default_factory=set)

    def watch(self, nodes: Sequence[NodeId], now: float) -> None:
        """Watch exactly ``nodes`` from now on; a newly watched node's silence counts from now."""
        for node in list(self.last_heard_s):
            if node not in nodes:
                del self.last_heard_s[node]
                self.probe_deadline_s.pop(node, None)
        for node in nodes:
            grace = 0.0 if node in self.heard_from else self.first_contact_grace_s
            self.last_heard_s.setdefault(node, now + grace)

    def heard(self, node: NodeId, now: float) -> None:
        """A sign of life from ``node``: reset its silence and cancel its probe."""
        first_contact = node not in self.heard_from
        self.heard_from.add(node)
        if node in self.last_heard_s:
            # The first contact ends the grace; later ones only move the mark forward.
            last = self.last_heard_s[node]
            self.last_heard_s[node] = now if first_contact else max(last, now)
            self.probe_deadline_s.pop(node, None)

    def suspect(self, node: NodeId, now: float) -> bool:
        """Treat ``node`` as silent past the timeout (its connection dropped). Returns True
        if this starts a probe the caller must send."""
        if node not in self.last_heard_s or node in self.probe_deadline_s:
            return False
        self.probe_deadline_s[node] = now + self.probe_timeout_s
        return True

    def judge(self, nearest_first: Sequence[NodeId], now: float) -> tuple[Verdict, NodeId] | None:
        """The action for the nearest watched node, if any is due (steps 1-3)."""
        for node in nearest_first:
            if node not in self.last_heard_s:
                continue
            deadline = self.probe_deadline_s.get(node)
            if deadline is not None:
                if now >= deadline:
                    return Verdict.DEAD, node
                return None
            if now - self.last_heard_s[node] >= self.failure_timeout_s:
                self.probe_deadline_s[node] = now + self.probe_timeout_s
                return Verdict.PROBE, node
            return None
        return None
