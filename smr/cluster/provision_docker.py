"""The Docker provisioner: new nodes are containers on a compose cluster's network, started
and stopped through the Docker engine (:mod:`smr.cluster.docker_engine`), for ``smr scale`` and the
autoscaler (``--docker-project``).

A new node's container copies what a running node container of the project has (image,
network, mounts, CPU limit, capabilities) and runs ``smr node`` as a node the spec does not
name: on standby at its container name (``<project>-x<hex>``, its id and host name), found
by the ring through the seeds. Like :class:`smr.cluster.provision.LocalProcesses`, the provisioner
records its nodes in the cluster directory's ``cluster.json``, so ``smr status``, the joins
and the autoscaler see them: that directory must be writable (the compose cluster mounts its
spec read-only into the nodes; the autoscaler service works on a copy of it). Joins and
status talk to the nodes at their names, so the commands run on the compose network (in a
container with the engine's socket), as the ``autoscaler`` service does.

Its containers carry the project's label (so ``docker compose down --remove-orphans`` takes
them too) and the service label ``provisioned-node``; on the network they answer to ``node``
as the compose replicas do, and serve metrics on port 9100 as every compose node does.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Final

from smr.client.control import Client, NodeUnreachable
from smr.cluster.docker_engine import (
    PROJECT_LABEL,
    DockerError,
    Mount,
    engine,
    ip_of,
    node_containers,
    own_project,
)
from smr.spec.model import (
    METRICS_PORT_DEFAULT,
    NEWCOMER_PORT_DEFAULT,
    ClusterError,
    NodeSpec,
    newcomer,
)
from smr.spec.parse import read_spec, write_spec

SERVICE_LABEL: Final = "provisioned-node"
SERVICE_ALIAS: Final = "node"
"""The network alias of added nodes: the compose file's replica service's name."""
READY_TIMEOUT_S: Final = 30.0
STOP_GRACE_S: Final = 5


class DockerNodes:
    """Node containers of compose project ``project`` (``self``: this container's own),
    recorded in ``cluster_dir``'s spec."""

    def __init__(self, cluster_dir: Path, project: str) -> None:
        self.cluster_dir = cluster_dir
        self._docker = engine()
        self.project = own_project(self._docker) if project == "self" else project
        read_spec(cluster_dir)  # a clear error now if there is no cluster here

    def _template(self) -> Any:
        """A running node container of the project, whose settings new nodes copy."""
        running = [
            c for c in node_containers(self._docker, self.project).values() if c.status == "running"
        ]
        if not running:
            raise ClusterError(f"compose project {self.project!r} has no running node container")
        return sorted(running, key=lambda c: str(c.name))[0]

    def start_many(self, count: int) -> list[NodeSpec]:
        """``count`` new node containers, one after the other."""
        return [self.start() for _ in range(count)]

    def start(self, zone: str | None = None) -> NodeSpec:
        """A new node container, on standby and answering (its zone: ``zone`` or none)."""
        template = self._template()
        host = template.attrs["HostConfig"]
        name = f"{self.project}-x{uuid.uuid4().hex[:6]}"
        command = [
            "smr",
            "node",
            "--cluster",
            "/cluster",
            "--id",
            name,
            "--port",
            str(NEWCOMER_PORT_DEFAULT),
            "--metrics-port",
            str(METRICS_PORT_DEFAULT),
        ]
        if zone:
            command += ["--zone", zone]
        mounts = [
            Mount(
                target=m["Destination"],
                source=m["Name"] if m["Type"] == "volume" else m["Source"],
                type=m["Type"],
                read_only=not m["RW"],
            )
            for m in template.attrs["Mounts"]
        ]
        network = next(iter(template.attrs["NetworkSettings"]["Networks"]))
        try:
            container = self._docker.containers.run(
                template.image,
                command,
                name=name,
                hostname=name,
                detach=True,
                network=network,
                # The compose replicas' DNS name, so Prometheus (compose/prometheus.yml)
                # finds the added nodes with them.
                networking_config={
                    network: self._docker.api.create_endpoint_config(aliases=[SERVICE_ALIAS])
                },
                mounts=mounts,
                nano_cpus=host.get("NanoCpus") or None,
                cap_add=host.get("CapAdd") or None,
                labels={PROJECT_LABEL: self.project, "com.docker.compose.service": SERVICE_LABEL},
            )
        except DockerError as error:
            raise ClusterError(f"cannot start a node container: {error}") from None
        node = newcomer(name, name, NEWCOMER_PORT_DEFAULT, zone or "", METRICS_PORT_DEFAULT)
        self._wait_ready(container, name)
        spec = read_spec(self.cluster_dir)
        spec.nodes.append(node)
        spec.seeds.append(node.addr)
        write_spec(self.cluster_dir, spec)
        return node

    def _wait_ready(self, container: Any, name: str) -> None:
        """Return once the node answers a ping (at its address, which works from the host
        too); stop it and raise ClusterError with its last log line if it does not."""
        client = Client(timeout_ms=250)
        deadline = time.monotonic() + READY_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                address = ip_of(container)
                if address is not None:
                    try:
                        client.ping(f"tcp://{address}:{NEWCOMER_PORT_DEFAULT}")
                        return
                    except NodeUnreachable:
                        pass
                if container.status == "exited":
                    break
                time.sleep(0.2)
        finally:
            client.close()
        last = container.logs(tail=1).decode(errors="replace").strip()
        container.remove(force=True)
        raise ClusterError(f"the new node {name} did not start: {last}")

    def stop(self, node_id: str) -> None:
        """Stop and remove the node's container and drop it from the spec."""
        spec = read_spec(self.cluster_dir)
        gone = {node.addr for node in spec.nodes if node.id == node_id}
        spec.nodes = [node for node in spec.nodes if node.id != node_id]
        spec.seeds = [addr for addr in spec.seeds if addr not in gone]
        write_spec(self.cluster_dir, spec)
        container = node_containers(self._docker, self.project).get(node_id)
        if container is not None:
            try:
                container.stop(timeout=STOP_GRACE_S)
                container.remove(force=True)
            except DockerError as error:
                raise ClusterError(f"cannot stop node {node_id}: {error}") from None

    def nodes(self) -> list[NodeSpec]:
        """The nodes of the spec."""
        return list(read_spec(self.cluster_dir).nodes)
