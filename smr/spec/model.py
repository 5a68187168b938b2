"""A cluster's description (:class:`ClusterSpec`, ``cluster.json``): its nodes, where each one
binds and where others reach it (advertised), its seeds and incarnation.

What a node process reads to start and a client reads to find the cluster; it says nothing
about how the processes were started (the node never imports a launcher). The file's format
and what each field means: docs/design/architecture.md#cluster-spec.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, Final

from smr.output.table import TableError, TableTarget
from smr.ring.ids import Incarnation, NodeId, Token
from smr.ring.view import Member, Status, View

CLUSTER_FILE: Final = "cluster.json"
"""The spec's file name inside a cluster directory."""

CLUSTER_FORMAT: Final = 1
"""The format this module reads and writes; a file with another is refused."""

CHECKPOINT_INTERVAL_MS_DEFAULT: Final = 1000
"""How often a node checkpoints its state to its replicas when the file does not say."""

"""Hosts that mean "every interface": fine to bind, useless to advertise."""

REJOIN_AFTER_FENCE_KEY: Final = "rejoin_after_fence_ms"
"""The ``extra`` setting for how long after it was fenced a node joins again (null: never)."""
REJOIN_AFTER_FENCE_MS_DEFAULT: Final = 30_000
APPLY_RATE_CAP_KEY: Final = "apply_rate_cap_per_s"
BALANCE_ABOVE_KEY: Final = "balance_above"
DATA_DIR_KEY: Final = "data_dir"
"""The ``extra`` setting for where nodes keep their state on disk (absent: nowhere)."""
MAPPER_LEASE_KEY: Final = "mapper_lease_ms"
"""The ``extra`` setting for how long after a mapper finished its dedup memory is retired."""
MAPPER_LEASE_MS_DEFAULT: Final = 600_000
OUTPUT_TABLE_KEY: Final = "output_table"
# The nodes a restart from disk left out (``smr cluster up --without``; smr.node.restart).
RESTART_LEFT_OUT_KEY: Final = "restart_left_out"
"""The ``extra`` setting for the PostgreSQL table the output goes to (absent: none)."""
"""The ``extra`` setting for the tuples every node applies per second at most (null or
absent: no cap; ``smr.node.rate_cap``)."""


class ClusterError(Exception):
    """A cluster could not be read, started or stopped; the message says what to do."""


@dataclass
class NodeSpec:
    """One node: who it is, where it sits on the ring, where it binds and where it is reached.

    ``bind_addr`` and ``pub_bind_addr`` given as ``""`` become the advertised addresses.
    """

    id: NodeId
    """The node's stable name, unique in the cluster (``"n0"``)."""
    addr: str
    """The inbox address the node advertises: where peers, mappers and clients reach it."""
    pub_addr: str
    """The output publisher's advertised address: where ``smr tail`` subscribes."""
    token: Token
    """The slot the node starts at; it is primary from here up to the next node's token."""
    pid: int | None = None
    """The process id, as the local launcher recorded it; None if not started by it."""
    _: KW_ONLY
    bind_addr: str = ""
    """The address the node's inbox binds on its own host (may be a wildcard)."""
    pub_bind_addr: str = ""
    """The address the node's output publisher binds on its own host (may be a wildcard)."""
    zone: str = ""
    """The fault zone (rack, host, availability zone); empty if unknown."""
    standby: bool = False
    """Added to a running cluster (``smr scale out``): it starts on standby, owning nothing,
    and joins the ring when asked."""
    metrics_addr: str = ""
    """Where the node serves Prometheus metrics (``host:port``, HTTP ``/metrics``); empty:
    nowhere."""

    def __post_init__(self) -> None:
        if not self.bind_addr:
            self.bind_addr = self.addr
        if not self.pub_bind_addr:
            self.pub_bind_addr = self.pub_addr


NEWCOMER_PORT_DEFAULT: Final = 7000
"""Where a node the spec does not name listens unless told otherwise (the compose
cluster's nodes all do, each at its own host name; its output is the next port)."""


METRICS_PORT_DEFAULT: Final = 9100
"""Where the compose cluster's nodes serve their Prometheus metrics (its nodes' spec says so;
replicas and the nodes the Docker provisioner adds are started with it)."""


def newcomer(
    node_id: str, host: str, port: int, zone: str = "", metrics_port: int | None = None
) -> NodeSpec:
    """A node the spec does not name (``smr node``, a container the Docker provisioner
    starts): on standby, reached at ``host`` (inbox ``port``, output ``port + 1``), bound
    on every interface, serving metrics on ``metrics_port`` if given."""
    return NodeSpec(
        id=NodeId(node_id),
        addr=f"tcp://{host}:{port}",
        pub_addr=f"tcp://{host}:{port + 1}",
        token=Token(0),
        bind_addr=f"tcp://0.0.0.0:{port}",
        pub_bind_addr=f"tcp://0.0.0.0:{port + 1}",
        zone=zone,
        standby=True,
        metrics_addr="" if metrics_port is None else f"0.0.0.0:{metrics_port}",
    )


@dataclass
class ClusterSpec:
    """A whole cluster: the ring's parameters, the job, the nodes and the seed addresses.

    ``seeds`` given empty become the nodes' advertised addresses.
    """

    slot_bits: int
    """The ring has ``2**slot_bits`` slots."""
    replication: int
    """Copies of each tuple and state beyond the primary (r)."""
    job: str
    """The job every node runs, as ``module:attribute``."""
    nodes: list[NodeSpec]
    """The nodes as started (or planned)."""
    checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT
    """How often each node ships its state's delta to its replicas."""
    format: int = CLUSTER_FORMAT
    """The file format (see the module docstring)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form settings for tools (read and written back untouched)."""
    seeds: list[str] = field(default_factory=list)
    """Advertised addresses a client or a joining node contacts first."""
    incarnation: str | None = None
    """This life of the cluster, new on every ``smr cluster up`` (None in older files)."""

    def __post_init__(self) -> None:
        if not self.seeds:
            self.seeds = [node.addr for node in self.nodes]

    def node(self, node_id: str) -> NodeSpec:
        """The node named ``node_id``; ClusterError naming the known ids otherwise."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        known = ", ".join(n.id for n in self.nodes)
        raise ClusterError(f"no node {node_id!r} in this cluster (nodes: {known})")

    def rejoin_after_fence_ms(self) -> int | None:
        """How long after it was fenced a node joins again (``extra``; None: never)."""
        value = self.extra.get(REJOIN_AFTER_FENCE_KEY, REJOIN_AFTER_FENCE_MS_DEFAULT)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ClusterError(f"extra.{REJOIN_AFTER_FENCE_KEY} must be ms >= 0 or null: {value!r}")
        return value

    def apply_rate_cap_per_s(self) -> float | None:
        """The tuples every node applies per second at most (``extra``; None: no cap)."""
        value = self.extra.get(APPLY_RATE_CAP_KEY)
        if value is None:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ClusterError(f"extra.{APPLY_RATE_CAP_KEY} must be > 0 or null: {value!r}")
        return float(value)

    def balance_above(self) -> float | None:
        """The utilisation past which a node balances with its neighbour (``extra``; None:
        off)."""
        value = self.extra.get(BALANCE_ABOVE_KEY)
        if value is None:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 1:
            raise ClusterError(f"extra.{BALANCE_ABOVE_KEY} must be in (0, 1] or null: {value!r}")
        return float(value)

    def data_dir(self) -> Path | None:
        """Where the nodes keep their state on disk, one folder each (``extra``; None: they
        keep nothing, and a restart starts empty)."""
        value = self.extra.get(DATA_DIR_KEY)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise ClusterError(f"extra.{DATA_DIR_KEY} must be a directory path: {value!r}")
        return Path(value)

    def restart_left_out(self) -> frozenset[str]:
        """The nodes the last restart from disk left out (``extra``; ``up --without``)."""
        value = self.extra.get(RESTART_LEFT_OUT_KEY, [])
        if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
            raise ClusterError(
                f"extra.{RESTART_LEFT_OUT_KEY} must be a list of node ids: {value!r}"
            )
        return frozenset(value)

    def mapper_lease_ms(self) -> int:
        """How long after a mapper said it finished the nodes retire its hwms (``extra``)."""
        value = self.extra.get(MAPPER_LEASE_KEY, MAPPER_LEASE_MS_DEFAULT)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ClusterError(f"extra.{MAPPER_LEASE_KEY} must be ms >= 0: {value!r}")
        return value

    def output_table(self) -> TableTarget | None:
        """The PostgreSQL table the nodes write their output to besides their files
        (``extra``; None: files only)."""
        raw = self.extra.get(OUTPUT_TABLE_KEY)
        if raw is None:
            return None
        try:
            return TableTarget.from_json(raw)
        except TableError as error:
            raise ClusterError(f"extra.{OUTPUT_TABLE_KEY}: {error}") from None

    def initial_view(self) -> View:
        """The view every node starts from: all nodes up at their advertised addresses and
        zones, incarnation 1, version 1."""
        return View(
            Member(
                n.id,
                Incarnation(1),
                n.addr,
                n.token,
                n.zone,
                Status.STANDBY if n.standby else Status.UP,
                1,
            )
            for n in self.nodes
        )


# -- reading and writing ---------------------------------------------------------------------
