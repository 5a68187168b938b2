"""A cluster named by a directory or by seed addresses (``--cluster DIR`` or ``--cluster
host:port[,host:port...]``).

With seeds, a client needs no ``cluster.json``: it asks the seeds, all at once, and learns
from the first that answers the spec that node started from (its status carries it) and the
ring's view (every live member, with its address), then each member's output address. So a
client on another host, or in a container of the compose network, reaches any cluster whose
nodes it can reach.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smr.client.control import Client, NodeUnreachable, cluster_view
from smr.ring.view import Status
from smr.spec.model import ClusterError, ClusterSpec, NodeSpec
from smr.spec.parse import parse_spec, read_spec

_SEED = re.compile(r"^(tcp://)?([A-Za-z0-9._-]+|\[[0-9a-fA-F:]+\]):(\d{1,5})$")


@dataclass(frozen=True)
class ClusterRef:
    """A cluster as a command names it: its spec, the words that named it, and its
    directory (None when named by seeds)."""

    spec: ClusterSpec
    arg: str
    directory: Path | None

    @property
    def state_dir(self) -> Path:
        """Where commands keep their records of this cluster (the feeds' progress): its
        directory, or for seeds a folder of the user's state directory named after them."""
        if self.directory is not None:
            return self.directory
        base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        return base / "smr" / re.sub(r"[^A-Za-z0-9._-]+", "_", self.arg)

    @property
    def where(self) -> str:
        """Where the spec was read, for messages."""
        if self.directory is not None:
            return str(self.directory / "cluster.json")
        return f"the cluster at {self.arg}"


def parse_seeds(value: str) -> list[str] | None:
    """The addresses of ``host:port[,host:port...]`` as ``tcp://host:port``; None if
    ``value`` is not such a list (a directory, then). ValueError for a list with a bad
    entry."""
    parts = [part.strip() for part in value.split(",")]
    if not any(_SEED.match(part) for part in parts):
        return None
    addrs = []
    for part in parts:
        match = _SEED.match(part)
        if match is None or not 0 < int(match.group(3)) < 65536:
            raise ValueError(f"not a seed address (host:port): {part!r} in {value!r}")
        addrs.append(f"tcp://{match.group(2)}:{match.group(3)}")
    return addrs


def resolve(value: str, timeout_ms: int = 2000) -> ClusterRef:
    """The cluster ``value`` names: a directory holding ``cluster.json``, or seed
    addresses. ClusterError saying why not (no such directory, no seed answers)."""
    seeds = parse_seeds(value)
    if seeds is None:
        directory = Path(value)
        return ClusterRef(read_spec(directory), value, directory)
    return ClusterRef(spec_from_seeds(seeds, timeout_ms), value, None)


def spec_from_seeds(seeds: list[str], timeout_ms: int = 2000) -> ClusterSpec:
    """The spec a cluster's nodes run, learned from ``seeds``:

    1. Ask every seed's status at once; the first to answer gives the spec it started from.
    2. Ask the seeds' views and merge them: the nodes are the live members (dead ones are
       gone; standby ones are capacity), at the addresses the view holds.
    3. Ask the other members' status at once for their output addresses (a member that
       does not answer keeps the spec's, if it names one, else has none: ``smr tail``
       says it cannot follow it).
    """
    client = Client(timeout_ms=timeout_ms)
    try:
        # 1.
        rows = client.status_each(seeds)
        answered = [row for row in rows.values() if not isinstance(row, NodeUnreachable)]
        if not answered:
            reasons = "; ".join(str(row) for row in rows.values())
            raise ClusterError(f"no seed of {', '.join(seeds)} answers: {reasons}")
        raw = answered[0].get("cluster")
        if not isinstance(raw, dict):
            raise ClusterError(f"the node at {seeds[0]} does not say what cluster it is in")
        # Through JSON: the status decodes arrays as tuples, the spec's parser wants lists.
        raw = json.loads(json.dumps(raw))
        spec = parse_spec(raw, f"the spec of the node at {answered[0].get('node')}")
        # 2.
        try:
            view = cluster_view(client, seeds)
        except NodeUnreachable as error:
            raise ClusterError(str(error)) from None
        members = [m for m in view.members.values() if m.status is not Status.DEAD]
        # 3. (the seeds that answered step 1 are not asked again)
        statuses: dict[str, Any] = dict(rows)
        statuses.update(client.status_each([m.addr for m in members if m.addr not in statuses]))
    finally:
        client.close()
    named = {node.id: node for node in spec.nodes}
    nodes = []
    for member in sorted(members, key=lambda m: m.node_id):
        status: Any = statuses[member.addr]
        known = named.get(member.node_id)
        pub_addr = (
            status.get("pub_addr")
            if isinstance(status, dict)
            else (known.pub_addr if known else "")
        )
        nodes.append(
            NodeSpec(
                id=member.node_id,
                addr=member.addr,
                pub_addr=pub_addr or "",
                token=member.token,
                zone=member.zone,
                standby=member.status is Status.STANDBY,
            )
        )
    spec.nodes = nodes
    spec.seeds = list(seeds)
    return spec
