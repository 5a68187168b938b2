"""``smr fault --docker-project NAME``: faults on a compose cluster's node containers,
through the Docker engine (:mod:`smr.cluster.docker_engine`). ``NAME`` ``self`` is the project of
the container the command runs in.

A node is a container of the compose project that runs ``smr node``; its hostname is the
node's id. Faults:

- ``kill``, ``pause``, ``resume``: the engine's kill (SIGKILL), pause and unpause (the
  cgroup freezer: the process runs nothing; its connections stay open).
- ``partition``: DROP rules in each container of one side against the addresses of the
  other side's containers, inbound and outbound, in chains of their own (``smr-fault-in``
  from INPUT, ``smr-fault-out`` from OUTPUT; the containers need ``NET_ADMIN``). Packets
  vanish, connections stay up: TCP resends once the rules go.
- ``loss``: the ``statistic`` match drops that share of the node's packets each way (not
  loopback, so its own health check still answers).
- ``delay``: netem on the container's interface where the kernel has it; otherwise the
  node's in-node filter (:mod:`smr.transport.netfilter`), and the returned line says so.

Every rule is removed by the container itself after the fault's duration (a detached
``sleep; iptables -D`` inside it), so a fault heals even if this process is gone; each
rule carries a comment naming its fault, so removing it never removes a later fault's.
"""

from __future__ import annotations

import itertools
import os
import shlex
from collections.abc import Sequence
from typing import Any, Final

from smr.client.control import Client
from smr.cluster.docker_engine import DockerError, engine, ip_of, node_containers, own_project
from smr.faults.backends import EMULATED, HealIncomplete, emulated_rules, send_rules
from smr.spec.model import NEWCOMER_PORT_DEFAULT, ClusterError

CHAIN_IN: Final = "smr-fault-in"
CHAIN_OUT: Final = "smr-fault-out"
_SETUP: Final = (
    f"iptables -N {CHAIN_IN} 2>/dev/null; iptables -N {CHAIN_OUT} 2>/dev/null; "
    f"iptables -C INPUT -j {CHAIN_IN} 2>/dev/null || iptables -I INPUT -j {CHAIN_IN}; "
    f"iptables -C OUTPUT -j {CHAIN_OUT} 2>/dev/null || iptables -I OUTPUT -j {CHAIN_OUT}"
)
_fault_numbers = itertools.count(1)


class DockerBackend:
    """The node containers of compose project ``project``."""

    name = "docker"

    def __init__(self, project: str, node_port: int = NEWCOMER_PORT_DEFAULT) -> None:
        self._docker = engine()
        self._project = own_project(self._docker) if project == "self" else project
        self._node_port = node_port
        self._client = Client(timeout_ms=2000)
        if not self._containers():
            raise ClusterError(
                f"compose project {project!r} has no node containers (is it up? "
                f"docker compose -p {project} ps)"
            )

    # -- finding nodes ---------------------------------------------------------------------------

    def _containers(self) -> dict[str, Any]:
        return node_containers(self._docker, self._project)

    def nodes(self) -> list[str]:
        """The project's node containers (running or not), by hostname (the node's id)."""
        return sorted(self._containers())

    def _container(self, node: str, containers: dict[str, Any] | None = None) -> Any:
        """Node ``node``'s container, from ``containers`` if the caller listed them already
        (one listing per fault, not one per step)."""
        if containers is None:
            containers = self._containers()
        if node not in containers:
            raise ClusterError(
                f"no container of project {self._project!r} is node {node!r} "
                f"(nodes: {sorted(containers)})"
            )
        return containers[node]

    def _running(self) -> dict[str, Any]:
        return {n: c for n, c in sorted(self._containers().items()) if c.status == "running"}

    def _ip(self, node: str, container: Any) -> str:
        address = ip_of(container)
        if address is None:
            raise ClusterError(f"node {node!r} has no address (is its container running?)")
        return address

    def _run(self, node: str, container: Any, script: str, detach: bool = False) -> tuple[int, str]:
        try:
            code, output = container.exec_run(["sh", "-c", script], detach=detach)
        except DockerError as error:
            raise ClusterError(f"cannot run a command in node {node!r}: {error}") from None
        if detach:
            return 0, ""
        return int(code), output.decode(errors="replace").strip()

    def _apply(self, node: str, container: Any, rules: Sequence[str], duration_ms: int) -> None:
        """Add iptables ``rules`` (``CHAIN spec...``) in ``node`` and have the container
        remove them after ``duration_ms``."""
        tag = f"smr-fault-{os.getpid()}-{next(_fault_numbers)}"
        tagged = [f"{rule} -m comment --comment {tag} -j DROP" for rule in rules]
        add = "; ".join(f"iptables -A {rule}" for rule in tagged)
        code, output = self._run(node, container, f"{_SETUP}; {add}")
        if code != 0:
            raise ClusterError(f"iptables failed in node {node!r} (NET_ADMIN?): {output}")
        undo = "; ".join(f"iptables -D {rule}" for rule in tagged)
        self._run(node, container, f"sleep {duration_ms / 1000}; {undo}", detach=True)

    # -- faults ----------------------------------------------------------------------------------

    def kill(self, node: str) -> str:
        """The engine kills the container (SIGKILL)."""
        self._engine(node, "kill")
        return "docker kill (SIGKILL)"

    def pause(self, node: str) -> str:
        """The engine freezes the container."""
        self._engine(node, "pause")
        return "docker pause (cgroup freezer)"

    def resume(self, node: str) -> str:
        """The engine thaws the container."""
        self._engine(node, "unpause")
        return "docker unpause"

    def _engine(self, node: str, verb: str) -> None:
        try:
            getattr(self._container(node), verb)()
        except DockerError as error:
            raise ClusterError(f"docker {verb} {node}: {error}") from None

    def partition(self, group_a: Sequence[str], group_b: Sequence[str], duration_ms: int) -> str:
        """DROP rules on both sides, against the other side's addresses (a container that
        is not running, killed say, has none and sends nothing: it is passed over)."""
        running = self._running()
        group_a = [node for node in group_a if node in running]
        group_b = [node for node in group_b if node in running]
        if not group_a or not group_b:
            raise ClusterError("a side of the partition has no running node container")
        ips = {node: self._ip(node, running[node]) for node in [*group_a, *group_b]}
        for side, other in ((group_a, group_b), (group_b, group_a)):
            for node in side:
                rules = [f"{CHAIN_IN} -s {ips[peer]}" for peer in other]
                rules += [f"{CHAIN_OUT} -d {ips[peer]}" for peer in other]
                self._apply(node, running[node], rules, duration_ms)
        return "iptables DROP between the groups' container addresses"

    def loss(self, node: str, loss_ppm: int, duration_ms: int) -> str:
        """The ``statistic`` match drops that share of the node's packets each way."""
        share = f"-m statistic --mode random --probability {loss_ppm / 1_000_000:.6f}"
        rules = [f"{CHAIN_IN} ! -i lo {share}", f"{CHAIN_OUT} ! -o lo {share}"]
        self._apply(node, self._container(node), rules, duration_ms)
        return "iptables statistic DROP, each way"

    def delay(self, node: str, delay_ms: int, jitter_ms: int, duration_ms: int) -> str:
        """netem on the node's interface, or the in-node filter where there is no netem."""
        running = self._running()
        container = self._container(node, running)
        netem = f"tc qdisc replace dev eth0 root netem delay {delay_ms}ms {jitter_ms}ms"
        code, output = self._run(node, container, netem)
        if code == 0:
            undo = f"sleep {duration_ms / 1000}; tc qdisc del dev eth0 root"
            self._run(node, container, undo, detach=True)
            return "netem on eth0 (the node's outbound packets)"
        rules = emulated_rules(
            "delay", list(running), [node], delay_ms=delay_ms, jitter_ms=jitter_ms,
            duration_ms=duration_ms,
        )  # fmt: skip
        send_rules(self._client, rules, self._addresses(running))
        return f"{EMULATED}; netem is missing here ({shlex.quote(output[:80])})"

    def _addresses(self, containers: dict[str, Any]) -> dict[str, str]:
        return {
            node: f"tcp://{self._ip(node, container)}:{self._node_port}"
            for node, container in containers.items()
        }

    def heal(self) -> str:
        """Flush the fault chains and netem in every running node container, and every
        node's filter; HealIncomplete names the paused containers and the running ones
        whose filter did not answer."""
        containers = self._containers()
        running = {n: c for n, c in sorted(containers.items()) if c.status == "running"}
        for node, container in running.items():
            self._run(
                node,
                container,
                f"iptables -F {CHAIN_IN} 2>/dev/null; iptables -F {CHAIN_OUT} 2>/dev/null; "
                "tc qdisc del dev eth0 root 2>/dev/null; true",
            )
        how = "iptables chains flushed, netem removed, filters healed"
        missed = {n: "paused" for n, c in containers.items() if c.status == "paused"}
        reached = list(running)
        heal = emulated_rules("heal", list(running), [])
        try:
            send_rules(self._client, heal, self._addresses(running), heal=True)
        except HealIncomplete as incomplete:
            missed.update(incomplete.missed)
            reached = incomplete.reached
        if missed:
            raise HealIncomplete(reached, missed, how)
        return how
