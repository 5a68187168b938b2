"""A model of a ring under a workload, in virtual time, for driving policies without
processes: nodes of a fixed capacity, a key skew, a backlog that grows when the workload
exceeds what the hottest node can apply, joins that take time. The workload is known, as
from a source that reports its figures (``smr.autoscale.source``).

It is what the property tests and the long-horizon comparison of policies run on; the real
benchmark (``bench/autoscale.py``) runs the same policies against node processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from smr.autoscale.observe import Decision, NodeReport, Observation, SourceReport
from smr.ring.ids import NodeId


@dataclass
class ModelNode:
    """A node of the model: when it was started and when it began serving."""

    node: NodeId
    started_at_s: float
    serving_since_s: float


@dataclass
class ModelRing:
    """``nodes`` nodes of ``capacity_per_s`` each; the hottest node gets ``hot_factor``
    times the mean share of the workload (the others share the rest evenly).

    Guarantees: tuples are never lost: what is not applied in an interval stays in the
    backlog; a node asked for serves ``join_s`` after the decision; a released node stops
    at once.
    """

    capacity_per_s: float
    nodes_min: int
    nodes_max: int
    hot_factor: float = 1.0
    join_s: float = 2.0
    interval_s: float = 1.0
    nodes: list[ModelNode] = field(default_factory=list)
    backlog_tuples: float = 0.0
    applied_total: float = 0.0
    offered_total: float = 0.0
    _started: int = 0

    def start(self, count: int, now_s: float) -> None:
        """Start ``count`` nodes serving at once (the cluster's first nodes)."""
        for _ in range(count):
            self._add(now_s, now_s)

    def _add(self, now_s: float, serving_at_s: float) -> None:
        self._started += 1
        self.nodes.append(ModelNode(NodeId(f"m{self._started}"), now_s, serving_at_s))

    def step(self, now_s: float, workload_per_s: float) -> Observation:
        """Run one interval ending at ``now_s`` with ``workload_per_s`` offered; the
        observation the policy sees at its end."""
        serving = [n for n in self.nodes if n.serving_since_s <= now_s]
        count = max(1, len(serving))
        offered = workload_per_s * self.interval_s
        self.offered_total += offered
        hot_share = min(1.0, self.hot_factor / count)
        # The ring applies until its hottest node saturates; the others wait for it only
        # when their share of the waiting tuples is behind its (one backlog, in key order).
        limit = self.capacity_per_s * self.interval_s / hot_share if serving else 0.0
        applied = min(self.backlog_tuples + offered, limit)
        self.backlog_tuples += offered - applied
        self.applied_total += applied
        rest = (1 - hot_share) / (count - 1) if count > 1 else 0.0
        shares = [hot_share] + [rest] * (count - 1)
        reports = []
        for node, share in zip(serving, shares, strict=False):
            rate = applied * share / self.interval_s
            reports.append(
                NodeReport(
                    node.node,
                    now_s,
                    node.serving_since_s,
                    node.started_at_s,
                    rate,
                    min(1.0, rate / self.capacity_per_s),
                    round(self.backlog_tuples * share),
                )
            )
        for node in self.nodes:
            if node.serving_since_s > now_s:  # joining: its figures are not in yet
                reports.append(
                    NodeReport(node.node, now_s, now_s, node.started_at_s, 0.0, 0.0, 0, True)
                )
        # The model knows the workload as a source that reports it does (its backlog is in
        # the nodes' reports already).
        source = SourceReport(workload_per_s, 0)
        return Observation(
            now_s, workload_per_s, tuple(reports), self.nodes_min, self.nodes_max, source
        )

    def apply(self, decision: Decision, now_s: float) -> None:
        """Carry a decision out: start nodes (serving ``join_s`` later) or release the
        named ones."""
        wanted = max(self.nodes_min, min(self.nodes_max, decision.nodes_wanted))
        while len(self.nodes) < wanted:
            self._add(now_s, now_s + self.join_s)
        if wanted < len(self.nodes):
            released = set(decision.release[: len(self.nodes) - wanted])
            self.nodes = [n for n in self.nodes if n.node not in released]
