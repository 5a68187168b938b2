"""Provisioners: where new nodes come from and where removed ones go (DESIGN section 7).

A provisioner starts and stops node processes and lists them; it never decides ranges (the
nodes do: a started node is on standby until it is asked to join). ``smr scale out`` and
``smr scale in`` use one, and so will the autoscaler. Two here: :class:`LocalProcesses`
(processes on this machine, recorded in the cluster's ``cluster.json``: the default) and
:class:`StandbyPool` (keeps a few standby nodes started ahead on top of another provisioner,
so that a join does not wait for a process to start). The Docker one is the compose
cluster's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from smr import cluster as local_cluster
from smr.client import Client, NodeUnreachable
from smr.spec import NodeSpec, read_spec


class Provisioner(Protocol):
    """Starts, stops and lists the nodes of one cluster."""

    def start(self) -> NodeSpec:
        """A new node, on standby and answering requests."""
        ...

    def stop(self, node_id: str) -> None:
        """Stop ``node_id`` (it should own nothing: it left the ring) and forget it."""
        ...

    def nodes(self) -> list[NodeSpec]:
        """Every node this provisioner started and has not stopped."""
        ...


class LocalProcesses:
    """Node processes on this machine, in the cluster directory's ``cluster.json``."""

    def __init__(self, cluster_dir: Path) -> None:
        self.cluster_dir = cluster_dir

    def start(self) -> NodeSpec:
        """A new node process, on standby (``smr.cluster.add_node``)."""
        return local_cluster.add_node(self.cluster_dir)

    def stop(self, node_id: str) -> None:
        """Stop the process and drop it from ``cluster.json`` (``smr.cluster.remove_node``)."""
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

    def standby(self) -> list[NodeSpec]:
        """The nodes on standby now (they answer, and own nothing)."""
        nodes = self.inner.nodes()
        statuses = self._client.status_each([node.addr for node in nodes])
        return [
            node
            for node in nodes
            if not isinstance(status := statuses[node.addr], NodeUnreachable)
            and status.get("status_in_view") == "standby"
        ]

    def fill(self) -> list[NodeSpec]:
        """Start nodes until ``size`` are on standby; the nodes started."""
        started = []
        for _ in range(self.size - len(self.standby())):
            started.append(self.inner.start())
        return started

    def start(self) -> NodeSpec:
        """A standby node from the pool (or a new one if it is empty); the pool refills."""
        pool = self.standby()
        node = pool[0] if pool else self.inner.start()
        for _ in range(self.size - max(0, len(pool) - 1)):
            self.inner.start()
        return node

    def stop(self, node_id: str) -> None:
        """Stop ``node_id`` through the inner provisioner."""
        self.inner.stop(node_id)

    def nodes(self) -> list[NodeSpec]:
        """The inner provisioner's nodes, the pool's included."""
        return self.inner.nodes()
