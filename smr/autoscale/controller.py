"""The autoscale controller: one process per cluster that holds the provisioner and runs a
policy (:mod:`smr.autoscale.policies`) on the nodes' measured load.

Every ``interval_s``:

1. Observe: ask every node of the cluster for its status. The serving nodes make the
   observation (applied tuples/s, utilisation, inbox, whether a join, leave or move is under
   way); the workload is what the source reports arriving when it writes its figures
   (:mod:`smr.autoscale.source`, whose lag counts as backlog), else what the serving nodes
   accepted (applied plus waiting) since the last round, per second. A node is dated
   from when this controller first saw it (its start, for nodes it started) and from when
   it first saw it serving. A serving node that stops answering keeps its last report for
   a while (the figures are incomplete, and no policy decides on them) until the ring has
   taken it over: once an answering node's view marks it dead, it is gone, and the
   figures are those of the smaller ring (a policy can then replace it at once).
2. Decide: one step of the policy.
3. Act: scale out with nodes from the provisioner (standbys first), joined side by side
   where :func:`smr.cluster.ring_ops.join_places` says (a node whose join fails is stopped); scale
   in, one node at a time and none more once the controller is asked to stop, by the
   nodes the policy released: each leaves (its range moves to its clockwise neighbour),
   the ranges it backed up get their copies again (the nodes the ring took over are not
   waited for), the provisioner stops it. A failed action is logged and recorded; the loop
   goes on.
4. Record: ``autoscale.json`` in the cluster directory (written whole, then renamed): the
   policy, its last decision and why, the workload, forecast and capacity, the recent
   actions. ``smr autoscale status`` prints it.

The nodes never depend on the controller: if it dies, the data path, failure recovery and
the nodes' own load balance go on; only adding and removing nodes stop.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

from smr.autoscale.observe import Decision, NodeReport, Observation, SourceReport
from smr.autoscale.policies import PolicyRunner
from smr.autoscale.source import read_source
from smr.client.control import Client, NodeUnreachable
from smr.cluster import ring_ops
from smr.cluster.provision import LocalProcesses, Provisioner, StandbyPool
from smr.ring.ids import NodeId
from smr.spec.parse import read_spec

log = logging.getLogger("smr.autoscale")

STATUS_FILE: Final = "autoscale.json"
# Recent actions kept in the status file.
ACTIONS_KEPT: Final = 20
# How long one join or leave may take before the controller gives up following it.
ACTION_WAIT_S: Final = 60.0
# A serving node that stops answering keeps its last report in the figures at most this long
# (they are incomplete meanwhile: the report grows old), unless the ring takes it over first.
UNANSWERED_KEPT_S: Final = 10.0
# The figures in a decision's reason: a reason is logged again only when more than they change.
_FIGURES: Final = re.compile(r"[\d.,]+")


@dataclass
class _Track:
    """What the controller remembers of a node between rounds."""

    first_seen_s: float
    serving_since_s: float | None = None
    accepted: int = 0
    polled_s: float = 0.0
    last: NodeReport | None = None


class Controller:
    """Runs ``policy`` on the cluster in ``cluster_dir`` (the module docstring's steps).

    Guarantees: one action at a time (a scale-out by several nodes is one action: their
    joins run side by side), never below ``nodes_min`` or above
    ``nodes_max`` serving nodes; every decision and action is in ``autoscale.json``.
    """

    def __init__(
        self,
        cluster_dir: Path,
        policy: PolicyRunner,
        nodes_min: int,
        nodes_max: int,
        interval_s: float = 1.0,
        provisioner: Provisioner | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= nodes_min <= nodes_max:
            raise ValueError(f"need 1 <= min <= max nodes, not {nodes_min} and {nodes_max}")
        self.cluster_dir = cluster_dir
        self.policy = policy
        self.nodes_min = nodes_min
        self.nodes_max = nodes_max
        self.interval_s = interval_s
        self.provisioner = provisioner or StandbyPool(LocalProcesses(cluster_dir), size=0)
        self._clock = clock
        self._client = Client(timeout_ms=max(200, round(interval_s * 500)))
        self._tracks: dict[NodeId, _Track] = {}
        self.actions: deque[dict[str, Any]] = deque(maxlen=ACTIONS_KEPT)
        # Decisions carried out (a scale-out by several nodes, or the release of several,
        # is one): the scale actions of the papers' counts.
        self.decisions_acted = 0
        self.node_actions = 0
        """Nodes added or released (``actions`` keeps the last ``ACTIONS_KEPT``)."""
        self.last_observation: Observation | None = None
        self._reason_logged = ""
        self._source_error = ""

    def close(self) -> None:
        """Close the controller's sockets."""
        self._client.close()

    # 1.
    def observe(self) -> Observation:
        """Poll every node; the observation of the serving ones."""
        now = self._clock()
        spec = read_spec(self.cluster_dir)
        statuses = self._client.status_each([node.addr for node in spec.nodes])
        gone = ring_ops.taken_over(
            row for row in statuses.values() if not isinstance(row, NodeUnreachable)
        )
        reports: list[NodeReport] = []
        workload = 0.0
        for node in spec.nodes:
            status = statuses[node.addr]
            track = self._tracks.setdefault(node.id, _Track(first_seen_s=now))
            last = track.last
            if (
                isinstance(status, NodeUnreachable)
                and last is not None
                and now - last.reported_at_s < UNANSWERED_KEPT_S
                and node.id not in gone
            ):
                # A serving node that stopped answering is a gap in the figures, not a
                # smaller ring: its last report stays (its age makes the figures
                # incomplete) until the ring has taken it over.
                reports.append(last)
                continue
            if isinstance(status, NodeUnreachable) or status.get("role") != "serving":
                track.serving_since_s = None
                track.last = None
                continue
            changing = bool(status["moves"]["under_way"]) or status["status_in_view"] != "up"
            if track.serving_since_s is None:
                track.serving_since_s = now
            accepted = int(status["tuples_applied"]) + int(status["inbox_tuples"])
            if track.polled_s:
                workload += max(0, accepted - track.accepted) / max(1e-3, now - track.polled_s)
            else:
                workload += float(status["tuples_per_s"])
            track.accepted, track.polled_s = accepted, now
            track.last = NodeReport(
                node.id,
                now,
                track.serving_since_s,
                track.first_seen_s,
                float(status["tuples_per_s"]),
                _utilization(status),
                int(status["inbox_tuples"]),
                changing,
                status.get("token"),
            )
            reports.append(track.last)
        known = {node.id for node in spec.nodes}
        self._tracks = {node: track for node, track in self._tracks.items() if node in known}
        source = self._read_source()
        if source is not None:
            workload = source.offered_per_s
        observation = Observation(
            now, workload, tuple(reports), self.nodes_min, self.nodes_max, source
        )
        self.last_observation = observation
        return observation

    def _read_source(self) -> SourceReport | None:
        """The source's fresh figures, if it writes them; a file that is not a source
        report is logged (once per kind of error) and ignored."""
        try:
            return read_source(self.cluster_dir)
        except ValueError as error:
            if str(error) != self._source_error:
                self._source_error = str(error)
                log.error("%s; deciding on the nodes' figures", error)
            return None

    # 3.
    def act(
        self, decision: Decision, serving: int, stopping: threading.Event | None = None
    ) -> None:
        """Carry ``decision`` out: the nodes to add join side by side, the nodes to release
        leave one at a time; each node's outcome is recorded. Once ``stopping`` is set, no
        further node is released."""
        added = max(0, min(decision.nodes_wanted, self.nodes_max) - serving)
        released = decision.release[: max(0, serving - self.nodes_min)]
        if added or released:
            self.decisions_acted += 1
        if added:
            self._scale_out(added)
        for node in released:
            if stopping is not None and stopping.is_set():
                return
            self._record(f"release {node}", partial(self._release, node))

    def _scale_out(self, count: int) -> None:
        """Start ``count`` nodes side by side (a process takes a second or two to start)
        and join them side by side (`smr.cluster.ring_ops.join_together`); a node whose join fails
        is stopped, not offered again: whatever kept it from joining (its log says) would
        likely keep it again, and the next scale-out starts a fresh node."""
        started = self._clock()
        nodes = []
        try:
            nodes = self.provisioner.start_many(count)
        except Exception as error:  # none started: nothing joins
            self._append_action("scale out", False, f"{type(error).__name__}: {error}", 0.0)
        try:
            outcomes: list[str | Exception] = list(
                ring_ops.join_together(self.cluster_dir, nodes, ACTION_WAIT_S, log.info)
            )
        except Exception as error:  # reported for each node; the loop goes on
            outcomes = [error] * len(nodes)
        took_s = self._clock() - started
        for node, outcome in zip(nodes, outcomes, strict=True):
            if isinstance(outcome, Exception):
                self.provisioner.stop(node.id)
                failure = f"{type(outcome).__name__}: {outcome}"
                self._append_action("scale out", False, failure, took_s)
            else:
                self._append_action("scale out", True, outcome, took_s)

    def _release(self, node_id: str) -> str:
        outcome = ring_ops.move(self.cluster_dir, node_id, None, ACTION_WAIT_S, log.info)
        ring_ops.wait_replicated(self.cluster_dir, ACTION_WAIT_S, log.info)
        self.provisioner.stop(node_id)
        return f"{outcome}; {node_id} stopped"

    def _record(self, what: str, action: Callable[[], str]) -> None:
        started = self._clock()
        try:
            outcome, ok = action(), True
        except Exception as error:  # a failed action is reported; the loop goes on
            outcome, ok = f"{type(error).__name__}: {error}", False
        self._append_action(what, ok, outcome, self._clock() - started)

    def _append_action(self, what: str, ok: bool, outcome: str, took_s: float) -> None:
        (log.info if ok else log.error)("%s: %s (%.1f s)", what, outcome, took_s)
        self.node_actions += 1
        self.actions.append(
            {
                "at_unix_s": time.time(),
                "action": what,
                "ok": ok,
                "outcome": outcome,
                "took_s": round(took_s, 2),
            }
        )

    def step(self, stopping: threading.Event | None = None) -> Decision:
        """One round: observe, decide, act (until ``stopping`` is set), record."""
        observation = self.observe()
        decision = self.policy.step(observation)
        kind = _FIGURES.sub("#", decision.reason)
        if kind != self._reason_logged:
            self._reason_logged = kind  # each kind of reason once, not every round
            log.info("decision: %d nodes: %s", decision.nodes_wanted, decision.reason)
        if decision.changes(len(observation.nodes)):
            self.act(decision, len(observation.nodes), stopping)
        self.write_status(observation, decision)
        return decision

    def run(self, stopping: threading.Event, duration_s: float | None = None) -> None:
        """Run rounds every ``interval_s`` until ``stopping`` is set (or ``duration_s``)."""
        ends_at = None if duration_s is None else self._clock() + duration_s
        while not stopping.is_set() and (ends_at is None or self._clock() < ends_at):
            started = self._clock()
            try:
                self.step(stopping)
            except Exception:  # a round that fails (a node restarting, a spec being
                log.exception("autoscale round failed")  # rewritten) is retried next time
            stopping.wait(max(0.0, self.interval_s - (self._clock() - started)))

    # 4.
    def write_status(self, observation: Observation, decision: Decision) -> None:
        """Write ``autoscale.json``: what ``smr autoscale status`` shows."""
        body = {
            "policy": self.policy.name,
            "pid": os.getpid(),
            "interval_s": self.interval_s,
            "nodes_min": self.nodes_min,
            "nodes_max": self.nodes_max,
            "updated_at_unix_s": time.time(),
            "serving": len(observation.nodes),
            "workload_per_s": round(observation.workload_per_s, 1),
            "backlog_tuples": observation.backlog_tuples,
            "source": asdict(observation.source) if observation.source else None,
            "decision": asdict(decision),
            "actions": list(self.actions),
        }
        path = self.cluster_dir / STATUS_FILE
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(body, indent=1))
        temporary.replace(path)


def _utilization(status: dict[str, Any]) -> float:
    """The node's busy share: what it reports, else its CPU share of one core."""
    if "utilization" in status:
        return float(status["utilization"])
    return min(1.0, float(status["load"]["cpu_percent"]) / 100)


def read_status(cluster_dir: Path) -> dict[str, Any] | None:
    """The controller's last ``autoscale.json`` (None if no controller ever ran here)."""
    try:
        body: dict[str, Any] = json.loads((cluster_dir / STATUS_FILE).read_text())
    except FileNotFoundError:
        return None
    return body
