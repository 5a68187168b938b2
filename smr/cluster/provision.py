"""Provisioners: where new nodes come from and where removed ones go
(docs/design/architecture.md#moves).

A provisioner starts and stops node processes and lists them; it never decides ranges (the
nodes do: a started node is on standby until it is asked to join). ``smr scale out`` and
``smr scale in`` use one, and so will the autoscaler. Two here: :class:`LocalProcesses`
(processes on this machine, recorded in the cluster's ``cluster.json``: the default) and
:class:`StandbyPool` (keeps a few standby nodes started ahead on top of another provisioner,
so that a join does not wait for a process to start). The Docker one is the compose
cluster's (:mod:`smr.cluster.provision_docker`; :func:`provisioner_for` chooses).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final, Protocol

from smr.client.control import Client, NodeUnreachable
from smr.cluster import local as local_cluster
from smr.ring.zones import zone_for_new_node
from smr.spec.model import NodeSpec
from smr.spec.parse import read_spec

# A standby node handed out for a join is not handed out again for this long, or until it
# answers off standby (its join started).
HANDED_OUT_S: Final = 120.0


class Provisioner(Protocol):
    """Starts, stops and lists the nodes of one cluster."""

    def start(self, zone: str | None = None) -> NodeSpec:
        """A new node in fault zone ``zone`` (None: the zone with the fewest nodes), on
        standby and answering requests."""
        ...

    def start_many(self, count: int) -> list[NodeSpec]:
        """``count`` new nodes (each in the zone ``start`` would choose), on standby and
        answering; started side by side where the provisioner can."""
        ...

    def stop(self, node_id: str) -> None:
        """Stop ``node_id`` (it should own nothing: it left the ring) and forget it."""
        ...

    def nodes(self) -> list[NodeSpec]:
        """Every node this provisioner started and has not stopped."""
        ...


def provisioner_for(cluster_dir: Path, docker_project: str | None) -> Provisioner:
    """The Docker provisioner of ``docker_project`` if one is named
    (:mod:`smr.cluster.provision_docker`), else local processes."""
    if docker_project is None:
        return LocalProcesses(cluster_dir)
    from smr.cluster.provision_docker import DockerNodes

    return DockerNodes(cluster_dir, docker_project)


class LocalProcesses:
    """Node processes on this machine, in the cluster directory's ``cluster.json``."""

    def __init__(self, cluster_dir: Path) -> None:
        self.cluster_dir = cluster_dir

    def start(self, zone: str | None = None) -> NodeSpec:
        """A new node process in ``zone`` (None: the zone with the fewest of the cluster's
        nodes, `ring.zones.zone_for_new_node`), on standby (``smr.cluster.local.add_node``)."""
        if zone is None:
            zone = zone_for_new_node([node.zone for node in self.nodes()])
        return local_cluster.add_node(self.cluster_dir, zone=zone)

    def start_many(self, count: int) -> list[NodeSpec]:
        """``count`` new node processes started side by side (``smr.cluster.local.add_nodes``),
        each in the zone with the fewest of the cluster's nodes counting those before it."""
        zones = [node.zone for node in self.nodes()]
        chosen = []
        for _ in range(count):
            chosen.append(zone_for_new_node(zones))
            zones.append(chosen[-1])
        return local_cluster.add_nodes(self.cluster_dir, chosen)

    def stop(self, node_id: str) -> None:
        """Stop the process and drop it from ``cluster.json``
        (``smr.cluster.local.remove_node``)."""
        local_cluster.remove_node(self.cluster_dir, node_id)

    def nodes(self) -> list[NodeSpec]:
        """The nodes of ``cluster.json``."""
        return list(read_spec(self.cluster_dir).nodes)


class StandbyPool:
    """Keeps ``size`` standby nodes started ahead on top of ``inner``: :meth:`start` hands
    one of them out (the join starts at once), then starts another to refill the pool.

    A node counts as in the pool while its own status says it is on standby in the view.
    """

    def __init__(self, inner: Provisioner, size: int = 1, client: Client | None = None) -> None:
        if size < 0:
            raise ValueError(f"a standby pool holds 0 nodes or more, not {size}")
        self.inner = inner
        self.size = size
        self._client = client or Client(timeout_ms=1000)
        self._handed_out: dict[str, float] = {}

    def standby(self) -> list[NodeSpec]:
        """The nodes on standby now (they answer, and own nothing)."""
        return [node for node, status in self._statuses() if status == "standby"]

    def _statuses(self) -> list[tuple[NodeSpec, str | None]]:
        """Each node with its status in its own view (None: it does not answer)."""
        nodes = self.inner.nodes()
        statuses = self._client.status_each([node.addr for node in nodes])
        return [
            (node, None if isinstance(status, NodeUnreachable) else status.get("status_in_view"))
            for node, status in ((node, statuses[node.addr]) for node in nodes)
        ]

    def fill(self) -> list[NodeSpec]:
        """Start nodes until ``size`` are on standby; the nodes started."""
        started = []
        for _ in range(self.size - len(self.standby())):
            started.append(self.inner.start())
        return started

    def start(self, zone: str | None = None) -> NodeSpec:
        """A standby node from the pool, of ``zone`` if one is given (else a new one); the
        pool refills. A node handed out is not handed out again while it is still on
        standby (its join not started yet: several start side by side), for at most
        ``HANDED_OUT_S``."""
        now = time.monotonic()
        statuses = self._statuses()
        # A node handed out stays taken until it answers off standby (its join started),
        # is gone, or HANDED_OUT_S passed; one that does not answer yet (just started)
        # stays taken too.
        known: dict[str, str | None] = {node.id: status for node, status in statuses}
        self._handed_out = {
            node_id: at
            for node_id, at in self._handed_out.items()
            if node_id in known and known[node_id] in ("standby", None) and now - at < HANDED_OUT_S
        }
        pool = [
            node
            for node, status in statuses
            if status == "standby" and node.id not in self._handed_out
        ]
        fitting = [node for node in pool if zone is None or node.zone == zone]
        node = fitting[0] if fitting else self.inner.start(zone)
        self._handed_out[node.id] = now
        left = len(pool) - (1 if fitting else 0)
        for _ in range(self.size - left):
            self.inner.start()
        return node

    def start_many(self, count: int) -> list[NodeSpec]:
        """``count`` nodes: the pool's first, the rest started side by side; the pool
        refills."""
        handed = []
        for _ in range(count):
            if not self._pooled():
                break
            handed.append(self.start())
        fresh = self.inner.start_many(count - len(handed)) if count > len(handed) else []
        return handed + fresh

    def _pooled(self) -> bool:
        """Whether a standby node not handed out is in the pool now."""
        return any(node.id not in self._handed_out for node in self.standby())

    def stop(self, node_id: str) -> None:
        """Stop ``node_id`` through the inner provisioner."""
        self.inner.stop(node_id)

    def nodes(self) -> list[NodeSpec]:
        """The inner provisioner's nodes, the pool's included."""
        return self.inner.nodes()
