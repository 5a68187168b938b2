"""What an autoscaling policy sees and what it decides: plain data, no I/O.

A controller (or the simulation, or a test) reads every serving node's load report, adds the
workload it measured (tuples/s offered to the ring), and hands the policy an
:class:`Observation`; the policy answers with a :class:`Decision`. Policies never read a
node's configuration (a rate cap, a CPU quota): only what was measured.

The guards every policy applies first live here too, so that no policy decides on incomplete
figures (a node that just joined, a report that is late, a join or leave under way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from smr.ring.ids import NodeId

# A node's first figures after it starts serving are not its steady state (its rates are
# still decaying in, its copies still arriving): not decided on for this long.
WARMUP_S_DEFAULT: Final = 5.0
# A report older than this (the node did not answer the last polls) makes the figures
# incomplete.
REPORT_AGE_S_MAX_DEFAULT: Final = 3.0


@dataclass(frozen=True)
class NodeReport:
    """One node's measured load, as of ``reported_at_s`` (the controller's clock)."""

    node: NodeId
    reported_at_s: float
    serving_since_s: float
    """When the node started serving a range (its join completed, or the cluster started)."""
    started_at_s: float
    """When the node's process was started: its paid periods count from here."""
    applied_per_s: float
    """Tuples applied per second, as primary (decayed over a few seconds)."""
    utilization: float
    """The share of the node's capacity in use, 0 to 1: the reducer's busy fraction of its
    CPU (or of the capacity it emulates)."""
    backlog_tuples: int
    """Tuples accepted and not applied yet (the node's inbox)."""
    changing: bool = False
    """A join, leave or move at this node is under way."""
    token: int | None = None
    """The node's place on the ring (None when not known): a released node's range goes to
    its clockwise neighbour, the node of the next token."""


@dataclass(frozen=True)
class SourceReport:
    """What the mapper tier says of its input, when it can (``smr.autoscale.source``): the
    tuples per second arriving at it, emitted or not, and those arrived and not emitted yet
    (its lag: a consumer lag, a feeder held back by backpressure). A saturated ring holds
    the mappers back, so only the source sees the whole workload."""

    offered_per_s: float
    backlog_tuples: int


@dataclass(frozen=True)
class Observation:
    """Everything a policy decides on, at ``now_s``."""

    now_s: float
    workload_per_s: float
    """Tuples per second offered to the ring over the last interval: what the source
    reports when it does, else what the nodes accepted (a floor of it when the ring is
    saturated: the rest waits at the mappers)."""
    nodes: tuple[NodeReport, ...]
    nodes_min: int
    nodes_max: int
    source: SourceReport | None = None
    """The source's own figures, when a fresh report exists."""

    @property
    def backlog_tuples(self) -> int:
        """Tuples waiting: in the nodes' inboxes, and at the source when it reports."""
        waiting = sum(node.backlog_tuples for node in self.nodes)
        return waiting + (self.source.backlog_tuples if self.source else 0)

    @property
    def applied_per_s(self) -> float:
        """Tuples per second the nodes applied."""
        return sum(node.applied_per_s for node in self.nodes)


@dataclass(frozen=True)
class Decision:
    """What to do: run ``nodes_wanted`` nodes; when that is fewer than now, release the
    nodes named in ``release`` (chosen by the policy, e.g. those whose paid period ends
    first). ``reason`` says why in one line (``smr autoscale status`` shows it); the
    capacity and forecast are the figures the decision used, when the policy has them."""

    nodes_wanted: int
    reason: str
    release: tuple[NodeId, ...] = ()
    capacity_per_s: float | None = None
    forecast_per_s: float | None = None

    def changes(self, nodes_now: int) -> bool:
        """Whether this decision asks for a scale action."""
        return self.nodes_wanted != nodes_now


def incomplete(
    observation: Observation,
    warmup_s: float = WARMUP_S_DEFAULT,
    report_age_s_max: float = REPORT_AGE_S_MAX_DEFAULT,
) -> str | None:
    """Why the figures cannot be decided on (None when they can): no node reported, a
    report is late, a node is still warming up, or a membership change is under way."""
    now = observation.now_s
    if not observation.nodes:
        return "no node reported"
    for node in observation.nodes:
        if now - node.reported_at_s > report_age_s_max:
            return f"the report of {node.node} is {now - node.reported_at_s:.1f} s old"
        if now - node.serving_since_s < warmup_s:
            return f"{node.node} started serving {now - node.serving_since_s:.1f} s ago"
        if node.changing:
            return f"a join, leave or move at {node.node} is under way"
    return None


def hold(observation: Observation, reason: str) -> Decision:
    """The decision to keep the current node count."""
    return Decision(len(observation.nodes), reason)


def clamp(observation: Observation, nodes: int) -> int:
    """``nodes`` within the observation's bounds."""
    return max(observation.nodes_min, min(observation.nodes_max, nodes))


def first_released(observation: Observation, count: int) -> tuple[NodeId, ...]:
    """``count`` nodes to release when no paid period applies. A released node's range goes
    to its clockwise neighbour, so where the ring order is known (every report has its
    token) each is chosen in turn as the one whose load and its neighbour's (that neighbour
    then carrying both) add up to the least: the ring stays as even as it can, and two
    neighbours are not released onto one node while another carries little. Otherwise, and
    on ties, the last started first (the oldest nodes have the longest-lived state and
    copies)."""
    by_start = sorted(observation.nodes, key=lambda n: (n.started_at_s, n.node), reverse=True)
    if any(node.token is None for node in observation.nodes):
        return tuple(node.node for node in by_start[:count])
    order = {node.node: index for index, node in enumerate(by_start)}
    ring = sorted(observation.nodes, key=lambda n: (n.token, n.node))
    names = [node.node for node in ring]
    loads = [node.applied_per_s for node in ring]
    released: list[NodeId] = []
    while len(released) < count and len(names) > 1:
        pairs = [loads[i] + loads[(i + 1) % len(names)] for i in range(len(names))]
        chosen = min(range(len(names)), key=lambda i: (pairs[i], order[names[i]]))
        receiver = (chosen + 1) % len(names)
        loads[receiver] += loads[chosen]
        released.append(names.pop(chosen))
        loads.pop(chosen)
    return tuple(released)
