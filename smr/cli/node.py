"""``smr node``: run one reducer node in the foreground. Registered on the main group by
:mod:`smr.cli`."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Final

import click

from smr.cli.options import cluster_dir_option
from smr.spec.model import NEWCOMER_PORT_DEFAULT

# How long after it started a node run with --join asks to join (its gossip reaches the
# ring first).
JOIN_AFTER_START_MS: Final = 1000


@click.command("node")
@cluster_dir_option
@click.option("--id", "node_id", help="The node's id (default: this host's name).")
@click.option(
    "--port",
    default=NEWCOMER_PORT_DEFAULT,
    type=click.IntRange(1, 65534),
    help="A node the spec does not name: its inbox port (its output's is the next one).",
)
@click.option(
    "--advertise",
    "advertise_host",
    help="A node the spec does not name: the host name peers reach it by (default: its id).",
)
@click.option("--zone", default="", help="A node the spec does not name: its fault zone.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="A node the spec does not name: serve Prometheus metrics on this port, every "
    "interface (a named node's spec says where, as metrics_addr).",
)
@click.option(
    "--join",
    is_flag=True,
    help="A node the spec does not name: join the ring by itself once started, beside the "
    "busiest owner (without it, it waits on standby for `smr scale out`).",
)
def node_command(
    cluster_dir: Path,
    node_id: str | None,
    port: int,
    advertise_host: str | None,
    zone: str,
    metrics_port: int | None,
    join: bool,
) -> None:
    """Run one reducer node in the foreground. `smr cluster up` starts the nodes its spec
    names; a node the spec does not name (a compose replica, a node on another host)
    starts on standby, binds every interface and finds the ring through the spec's
    nodes (the seeds)."""
    from smr.node.loop import serve
    from smr.spec.model import newcomer

    node_id = node_id or socket.gethostname()
    joining = newcomer(node_id, advertise_host or node_id, port, zone, metrics_port)
    sys.exit(serve(cluster_dir, node_id, joining, JOIN_AFTER_START_MS if join else None))
