"""The Docker engine, reached through the Docker SDK: the only module that imports it. The
fault backend (:mod:`smr.faults.docker`) and the provisioner (:mod:`smr.cluster.provision_docker`)
find a compose project's node containers here."""

from __future__ import annotations

import socket
from typing import Any

import docker
import docker.errors
import docker.types

from smr.spec.model import ClusterError

DockerError = docker.errors.DockerException
"""Anything the engine refused or failed (the SDK's base error)."""
Mount = docker.types.Mount
PROJECT_LABEL = "com.docker.compose.project"


def engine() -> Any:
    """A client of the engine the environment names (DOCKER_HOST, else the local socket);
    ClusterError if it does not answer."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as error:
        raise ClusterError(f"cannot reach the Docker engine: {error}") from None
    return client


def node_containers(client: Any, project: str) -> dict[str, Any]:
    """The containers of compose project ``project`` that run ``smr node`` (running or
    not), by host name: the node's id."""
    found = {}
    for container in client.containers.list(
        all=True, filters={"label": f"{PROJECT_LABEL}={project}"}
    ):
        config = container.attrs["Config"]
        if (config.get("Cmd") or [])[:2] == ["smr", "node"]:
            found[config["Hostname"]] = container
    return found


def ip_of(container: Any) -> str | None:
    """The container's address on its first network (None if it has none: not running)."""
    container.reload()
    networks = container.attrs["NetworkSettings"]["Networks"]
    addresses = [net["IPAddress"] for net in networks.values() if net.get("IPAddress")]
    return str(addresses[0]) if addresses else None


def own_project(client: Any) -> str:
    """The compose project of the container this process runs in (its host name is its
    container id); ClusterError outside one."""
    try:
        container = client.containers.get(socket.gethostname())
    except docker.errors.NotFound:
        raise ClusterError(
            "not in a compose container: name the project (--docker-project NAME)"
        ) from None
    project = container.labels.get(PROJECT_LABEL)
    if not project:
        raise ClusterError(f"container {container.name} belongs to no compose project")
    return str(project)
