"""Ports for a local cluster: each node's addresses on 127.0.0.1, chosen free and below the
kernel's ephemeral range (so an outgoing connection cannot take a port a node is about to
bind), and the plan of a new cluster (:func:`plan_cluster`)."""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from smr.ring.hashing import SLOT_BITS_DEFAULT, check_slot_bits, even_tokens
from smr.ring.ids import NodeId
from smr.ring.zones import spread_order
from smr.spec.model import CHECKPOINT_INTERVAL_MS_DEFAULT, ClusterError, ClusterSpec, NodeSpec

NODES_MAX: Final = 64

LOOPBACK_HOST: Final = "127.0.0.1"

# Nodes listen on ports from here up to the start of the kernel's ephemeral range.
LISTEN_PORT_MIN: Final = 10_000

EPHEMERAL_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")

EPHEMERAL_LOW_DEFAULT: Final = 32_768

PORT_ATTEMPTS: Final = 100


def free_port(taken: set[int]) -> int:
    """A loopback port that is free now, chosen below the kernel's ephemeral range, and not
    one of ``taken`` (to which it is added).

    The port is released again before the node binds it. A port from the ephemeral range
    (what binding port 0 gives) can be taken in that window by any process's next
    outgoing connection, and a machine running nodes and clients makes many; below the
    range only another listener choosing the same port at the same moment can take it.
    ``taken`` holds the ports already handed out for the same spec: released after their
    probe, they would probe free again (a 5-node cluster drew one port twice in about one
    start in 500, and its second node could not bind).
    """
    low = _ephemeral_low()
    chooser = random.SystemRandom()
    for _ in range(PORT_ATTEMPTS):
        port = chooser.randrange(LISTEN_PORT_MIN, low) if low > LISTEN_PORT_MIN else 0
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((LOOPBACK_HOST, port))
            except OSError:
                continue
            chosen: int = probe.getsockname()[1]
        if chosen in taken:
            continue
        taken.add(chosen)
        return chosen
    raise ClusterError(f"no free loopback port found in {PORT_ATTEMPTS} attempts")


def ports_of(spec: ClusterSpec) -> set[int]:
    """The ports a spec's nodes listen on."""
    return {
        int(address.rsplit(":", 1)[1])
        for node in spec.nodes
        for address in (node.addr, node.pub_addr, node.metrics_addr)
        if address
    }


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when unknown)."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_LOW_DEFAULT


def plan_cluster(
    nodes: int,
    replication: int,
    job: str,
    slot_bits: int = SLOT_BITS_DEFAULT,
    checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT,
    zones: Sequence[str] = (),
) -> ClusterSpec:
    """Choose ids, loopback addresses (inbox, output, metrics) and evenly spaced tokens for
    ``nodes`` nodes.

    With ``zones``, node ``i`` is in ``zones[i % len(zones)]`` and the nodes sit around
    the ring in `ring.zones.spread_order`, so a range's copies span two zones or more
    wherever the zone sizes allow (`ring.zones.spread_possible`)."""
    check_slot_bits(slot_bits)
    if not 1 <= nodes <= NODES_MAX:
        raise ClusterError(f"--nodes must be between 1 and {NODES_MAX}, got {nodes}")
    if not 0 <= replication <= nodes - 1:
        raise ClusterError(
            f"--replication must be between 0 and nodes - 1 ({nodes - 1}), got {replication}"
        )
    if checkpoint_interval_ms <= 0:
        raise ClusterError(f"checkpoint interval must be positive, got {checkpoint_interval_ms}")
    if any(not zone for zone in zones):
        raise ClusterError("a zone name must not be empty")
    zone_of = {NodeId(f"n{i}"): zones[i % len(zones)] if zones else "" for i in range(nodes)}
    token_of = dict(zip(spread_order(zone_of), even_tokens(nodes, slot_bits), strict=True))
    taken: set[int] = set()
    specs = [
        NodeSpec(
            id=node_id,
            addr=f"tcp://{LOOPBACK_HOST}:{free_port(taken)}",
            pub_addr=f"tcp://{LOOPBACK_HOST}:{free_port(taken)}",
            token=token_of[node_id],
            zone=zone,
            metrics_addr=f"{LOOPBACK_HOST}:{free_port(taken)}",
        )
        for node_id, zone in zone_of.items()
    ]
    return ClusterSpec(slot_bits, replication, job, specs, checkpoint_interval_ms)
