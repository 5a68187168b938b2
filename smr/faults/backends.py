"""How ``smr fault`` carries faults out on real nodes: the backends, the emulated rules and
the log of what was done when.

Two backends do the same faults by different means:

- :class:`LocalBackend`, a local cluster's processes: ``kill``, ``pause`` and ``resume`` are
  signals (SIGKILL, SIGSTOP, SIGCONT); ``partition``, ``delay`` and ``loss`` are *emulated*
  by a filter inside each node process on its messages to its peers
  (:mod:`smr.transport.netfilter`), since a process has no network of its own to cut.
- ``smr.faults.docker.DockerBackend``, the compose cluster's containers: the Docker engine
  kills, pauses and resumes them; partitions and loss are iptables rules inside the
  containers; delay is netem where the kernel has it and the in-node filter otherwise.

Every fault but ``kill`` has a duration and heals by itself after it: a node's filter drops
its rules, a container's own shell removes its iptables rules, and ``pause`` resumes. Every
call returns one line saying what ran (the mechanism), which :class:`FaultLog` writes as a
JSON line beside the time, to be lined up with the nodes' metrics.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from smr.client.control import Client, NodeUnreachable
from smr.cluster import local as local_cluster
from smr.spec.model import ClusterError
from smr.spec.parse import read_spec
from smr.transport.netfilter import pack_rule

EMULATED = "in-node filter (emulated: messages between nodes held back, none dropped)"


class FaultBackend(Protocol):
    """Carries faults out on one cluster's nodes; each call returns what it did, in words,
    or raises ClusterError saying why it could not."""

    name: str

    def nodes(self) -> list[str]:
        """The ids of the cluster's nodes."""
        ...

    def kill(self, node: str) -> str:
        """Stop ``node`` for good at once (SIGKILL)."""
        ...

    def pause(self, node: str) -> str:
        """Freeze ``node`` (it runs and sends nothing) until :meth:`resume`."""
        ...

    def resume(self, node: str) -> str:
        """Let a paused ``node`` run again."""
        ...

    def partition(self, group_a: Sequence[str], group_b: Sequence[str], duration_ms: int) -> str:
        """Cut the nodes of ``group_a`` from those of ``group_b`` for ``duration_ms``."""
        ...

    def delay(self, node: str, delay_ms: int, jitter_ms: int, duration_ms: int) -> str:
        """Delay what ``node`` sends and receives by ``delay_ms`` (± ``jitter_ms``)."""
        ...

    def loss(self, node: str, loss_ppm: int, duration_ms: int) -> str:
        """Lose ``loss_ppm`` millionths of what ``node`` sends and receives."""
        ...

    def heal(self) -> str:
        """End every partition, delay and loss now (paused nodes stay paused); HealIncomplete
        if a node that runs could not be reached (it keeps its faults until they end)."""
        ...


def emulated_rules(
    action: str,
    nodes: Sequence[str],
    targets: Sequence[str],
    others: Sequence[str] = (),
    duration_ms: int = 0,
    delay_ms: int = 0,
    jitter_ms: int = 0,
    loss_ppm: int = 0,
) -> dict[str, bytes]:
    """The filter rule each node gets (``smr.transport.netfilter``) for one fault, by node.

    Each node holds back only its own outbound messages, so a fault is set on both sides:

    - ``cut``: each of ``targets`` holds what it sends to ``others``, and each of ``others``
      what it sends to ``targets`` (a partition);
    - ``delay``, ``loss``: the one target holds what it sends to every peer, and every other
      node of ``nodes`` what it sends to the target;
    - ``heal``: every node of ``nodes`` drops its rules.
    """
    if action == "heal":
        return {node: pack_rule("heal") for node in nodes}
    numbers = {
        "duration_ms": duration_ms,
        "delay_ms": delay_ms,
        "jitter_ms": jitter_ms,
        "loss_ppm": loss_ppm,
    }
    if action == "cut":
        rules = {node: pack_rule("cut", others, **numbers) for node in targets}
        rules.update({node: pack_rule("cut", targets, **numbers) for node in others})
        return rules
    (target,) = targets
    rules = {node: pack_rule(action, [target], **numbers) for node in nodes if node != target}
    rules[target] = pack_rule(action, [], **numbers)
    return rules


class HealIncomplete(ClusterError):
    """A heal that did not reach every running node: ``reached`` were healed (by ``how``),
    each of ``missed`` says why not; the faults set there end by themselves after their
    duration."""

    def __init__(self, reached: Sequence[str], missed: Mapping[str, str], how: str) -> None:
        by_reason: dict[str, list[str]] = {}
        for node, why in sorted(missed.items()):
            by_reason.setdefault(why, []).append(node)
        if len(by_reason) == 1:
            reasons = next(iter(by_reason))
        else:
            reasons = "; ".join(f"{', '.join(nodes)}: {why}" for why, nodes in by_reason.items())
        super().__init__(
            f"heal did not reach {', '.join(sorted(missed))} ({reasons}); the faults set "
            "there end by themselves after their duration"
        )
        self.reached = list(reached)
        self.missed = dict(missed)
        self.how = how


NOT_ANSWERING = "running, but not answering: paused, or refusing this process's keys"


def send_rules(
    client: Client,
    rules: dict[str, bytes],
    addr_of: dict[str, str],
    heal: bool = False,
    runs: Callable[[str], bool] = lambda node: True,
) -> str:
    """Send each node its rule; what they set, or ClusterError naming the nodes that did not
    take theirs (those that did heal by themselves after the rule's duration). A ``heal``
    passes over nodes that do not answer and do not run (``runs``: a dead node holds
    nothing back), and raises HealIncomplete for those that run and did not take it."""
    answers = client.net_rules_each({addr_of[node]: body for node, body in rules.items()})
    failed = {
        node: answer for node in rules if isinstance(answer := answers[addr_of[node]], Exception)
    }
    if heal:
        missed = {
            node: NOT_ANSWERING if isinstance(error, NodeUnreachable) else str(error)
            for node, error in failed.items()
            if not isinstance(error, NodeUnreachable) or runs(node)
        }
        if missed:
            raise HealIncomplete([n for n in rules if n not in failed], missed, EMULATED)
        return EMULATED
    if failed:
        reasons = "; ".join(f"{node}: {error}" for node, error in sorted(failed.items()))
        raise ClusterError(f"the fault reached only part of the nodes ({reasons})")
    return EMULATED


class LocalBackend:
    """A local cluster's node processes (the cluster directory's ``cluster.json``)."""

    name = "local"

    def __init__(self, cluster_dir: Path, timeout_ms: int = 2000) -> None:
        self._cluster_dir = cluster_dir
        self._client = Client(timeout_ms=timeout_ms)

    def nodes(self) -> list[str]:
        """The nodes of ``cluster.json``."""
        return [node.id for node in read_spec(self._cluster_dir).nodes]

    def _signal(self, node: str, signum: signal.Signals) -> str:
        pid = local_cluster.signal_node(read_spec(self._cluster_dir), node, signum)
        return f"{signum.name} to pid {pid}"

    def kill(self, node: str) -> str:
        """SIGKILL the node's process."""
        return self._signal(node, signal.SIGKILL)

    def pause(self, node: str) -> str:
        """SIGSTOP the node's process."""
        return self._signal(node, signal.SIGSTOP)

    def resume(self, node: str) -> str:
        """SIGCONT the node's process."""
        return self._signal(node, signal.SIGCONT)

    def _emulate(self, action: str, targets: Sequence[str], **fields: Any) -> str:
        spec = read_spec(self._cluster_dir)
        addr_of = {str(node.id): node.addr for node in spec.nodes}
        for node in [*targets, *fields.get("others", ())]:
            if node not in addr_of:
                raise ClusterError(f"no node {node!r} in the cluster (nodes: {sorted(addr_of)})")
        rules = emulated_rules(action, sorted(addr_of), targets, **fields)

        def runs(node_id: str) -> bool:
            pid = spec.node(node_id).pid
            return pid is not None and local_cluster.is_our_node(pid, node_id)

        return send_rules(self._client, rules, addr_of, heal=action == "heal", runs=runs)

    def partition(self, group_a: Sequence[str], group_b: Sequence[str], duration_ms: int) -> str:
        """Each side's filter holds its messages to the other side."""
        return self._emulate("cut", group_a, others=group_b, duration_ms=duration_ms)

    def delay(self, node: str, delay_ms: int, jitter_ms: int, duration_ms: int) -> str:
        """The filters hold messages to and from ``node`` for the delay."""
        return self._emulate(
            "delay", [node], delay_ms=delay_ms, jitter_ms=jitter_ms, duration_ms=duration_ms
        )

    def loss(self, node: str, loss_ppm: int, duration_ms: int) -> str:
        """The filters hold that share of messages to and from ``node`` for a TCP
        retransmission timeout (what a lost segment costs)."""
        return self._emulate("loss", [node], loss_ppm=loss_ppm, duration_ms=duration_ms)

    def heal(self) -> str:
        """Every node's filter drops its rules and sends what it held; HealIncomplete names
        the node processes that run and did not answer (those gone hold nothing back)."""
        return self._emulate("heal", [])


@dataclass
class FaultLog:
    """What was done when, as JSON lines appended to ``path`` (None: not written), each
    also told to ``echo`` in one line."""

    path: Path | None
    backend: str
    echo: Callable[[str], None] | None = None

    def record(self, fault: str, targets: Sequence[str], how: str, **extra: Any) -> dict[str, Any]:
        """Append one line and return it: ``time`` (ISO, UTC), ``unix_s``, ``backend``,
        ``fault``, ``targets``, ``how`` (the mechanism that ran) and ``extra``."""
        now = time.time()
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
            + f".{int(now % 1 * 1000):03d}Z",
            "unix_s": round(now, 3),
            "backend": self.backend,
            "fault": fault,
            "targets": list(targets),
            "how": how,
            **extra,
        }
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as log:
                log.write(json.dumps(entry) + "\n")
        if self.echo is not None:
            lasting = f" for {extra['duration_ms']} ms" if "duration_ms" in extra else ""
            self.echo(f"{entry['time']} {fault} {' '.join(targets)}{lasting}: {how}")
        return entry


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")


def parse_duration_ms(text: str) -> int:
    """``"100ms"``, ``"5s"``, ``"2.5s"``, ``"1m"`` (a bare number is seconds) in ms;
    ValueError for anything else."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (examples: 100ms, 5s, 1m)")
    unit_ms = {"ms": 1, "s": 1000, "m": 60_000, None: 1000}[match.group(2)]
    return round(float(match.group(1)) * unit_ms)


def parse_percent_ppm(text: str) -> int:
    """``"5%"`` (or ``"5"``) in millionths; ValueError unless in (0, 100]."""
    value = text.strip().removesuffix("%")
    try:
        percent = float(value)
    except ValueError:
        raise ValueError(f"not a percentage: {text!r} (example: 5%)") from None
    if not 0 < percent <= 100:
        raise ValueError(f"a loss is more than 0% and at most 100%, not {text!r}")
    return round(percent * 10_000)


def parse_groups(words: Sequence[str], nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """The two sides of ``partition A,B / C`` (``/`` between the groups; with one group,
    the other is every other node). ValueError if a side is empty, the sides overlap or a
    node is unknown."""
    text = " ".join(words)
    sides = text.split("/")
    if len(sides) > 2:
        raise ValueError(f"a partition has two sides, one '/' between them: {text!r}")
    groups = [[n for n in re.split(r"[,\s]+", side) if n] for side in sides]
    if len(groups) == 1:
        groups.append([n for n in nodes if n not in groups[0]])
    group_a, group_b = groups
    unknown = sorted(set(group_a + group_b) - set(nodes))
    if unknown:
        raise ValueError(f"unknown nodes {unknown} (nodes: {sorted(nodes)})")
    if not group_a or not group_b:
        raise ValueError(f"both sides of a partition need a node: {text!r}")
    if set(group_a) & set(group_b):
        raise ValueError(f"a node on both sides: {sorted(set(group_a) & set(group_b))}")
    return group_a, group_b
