"""The ``smr`` commands that change the ring: ``smr move`` (an operator-driven move of part of
a node's range to its clockwise neighbour), ``smr scale out`` (new nodes join) and ``smr
scale in`` (a node leaves: its whole range moves, then it stops). Registered on the main
group by :mod:`smr.cli`.

Each asks the node to start, then follows the move in the node's status until it ends:
exit 0 when the move is done, 1 when it was refused or called off (the reason is printed),
2 for a usage error (an unknown node, a fraction out of range, no cluster).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from smr.cli.options import cluster_dir_option, docker_project_option
from smr.client.control import Client
from smr.cluster import ring_ops
from smr.cluster.provision import StandbyPool, provisioner_for
from smr.cluster.ring_ops import RingOpError
from smr.ring.zones import one_zone_windows
from smr.spec.model import NodeSpec
from smr.spec.parse import read_spec

wait_option = click.option(
    "--wait-s",
    default=60.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="How long to follow the move before giving up waiting (it goes on).",
)


@click.command("move")
@cluster_dir_option
@click.argument("node_id")
@click.option(
    "--fraction",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    help="The share of the node's load (its applied tuples per slot) to move.",
)
@wait_option
def move_command(cluster_dir: Path, node_id: str, fraction: float, wait_s: float) -> None:
    """Move the top of NODE_ID's range, about FRACTION of its load, to its clockwise
    neighbour (which already holds a copy: a promotion, not a transfer)."""
    outcome = _run_move(cluster_dir, node_id, fraction, wait_s)
    click.echo(outcome)


@click.group("scale")
def scale_group() -> None:
    """Change the number of nodes that own slots."""


@scale_group.command("out")
@cluster_dir_option
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 16))
@click.option(
    "--beside",
    help="The node to join beside [default: the busiest where the zones stay spread].",
)
@click.option(
    "--zone",
    help="The new nodes' fault zone [default: the zone with the fewest nodes].",
)
@docker_project_option
@wait_option
def scale_out_command(
    cluster_dir: Path,
    count: int,
    beside: str | None,
    zone: str | None,
    docker_project: str | None,
    wait_s: float,
) -> None:
    """Add COUNT nodes: a node already on standby (fenced, or left running by 'scale in
    --keep-running') first, else a new process. Each catches up as an extra replica of the
    node it joins beside (the busiest, by applied tuples per second, among the places that
    keep each range's copies in two zones), then takes the top of its range (split at the
    load median). The joins run side by side where the ring has room (beside owners at
    least R apart), else one after the other; with --beside, one after the other."""
    provisioner = StandbyPool(provisioner_for(cluster_dir, docker_project), size=0)
    nodes = []
    for _ in range(count):
        node = provisioner.start(zone)
        where = f" in zone {node.zone}" if node.zone else ""
        click.echo(f"{node.id} on standby at {node.addr}{where}")
        nodes.append(node)
    if beside is not None:
        for node in nodes:
            click.echo(_run_join(cluster_dir, node, beside, wait_s))
        return
    outcomes = ring_ops.join_together(cluster_dir, nodes, wait_s, click.echo)
    failed = [str(outcome) for outcome in outcomes if isinstance(outcome, RingOpError)]
    for outcome in outcomes:
        if isinstance(outcome, str):
            click.echo(outcome)
    if failed:
        _fail("; ".join(failed))


@scale_group.command("in")
@cluster_dir_option
@click.argument("node_id")
@click.option(
    "--keep-running",
    is_flag=True,
    help="Leave the node running on standby (owning nothing) instead of stopping it.",
)
@docker_project_option
@wait_option
def scale_in_command(
    cluster_dir: Path, node_id: str, keep_running: bool, docker_project: str | None, wait_s: float
) -> None:
    """NODE_ID leaves the ring: its whole range moves to its clockwise neighbour (with
    r + 1 copies throughout); once every range it backed up has its copies again, the
    node stops."""
    _warn_of_one_zone_ranges_after(cluster_dir, node_id)
    outcome = _run_move(cluster_dir, node_id, None, wait_s)
    click.echo(outcome)
    # The leaver was a secondary of the ranges before its own: their new secondaries get a
    # snapshot now. Until every node reports none under-replicated, say so and wait.
    _wait_replicated(cluster_dir, wait_s)
    if not keep_running:
        provisioner_for(cluster_dir, docker_project).stop(node_id)
        click.echo(f"{node_id} stopped and removed from {cluster_dir}")


def _run_move(cluster_dir: Path, node_id: str, fraction: float | None, wait_s: float) -> str:
    """`smr.cluster.ring_ops.move`, exiting 1 (after printing why) if it fails."""
    try:
        return ring_ops.move(cluster_dir, node_id, fraction, wait_s, click.echo)
    except RingOpError as error:
        _fail(str(error))


def _run_join(cluster_dir: Path, node: NodeSpec, beside: str | None, wait_s: float) -> str:
    """`smr.cluster.ring_ops.join`, exiting 1 (after printing why) if it fails."""
    try:
        return ring_ops.join(cluster_dir, node, beside, wait_s, click.echo)
    except RingOpError as error:
        _fail(str(error))


def _warn_of_one_zone_ranges_after(cluster_dir: Path, leaver: str) -> None:
    """Say so if, once ``leaver`` is gone, more ranges keep every copy in one zone (its
    neighbours are of one zone); the leave goes on: the operator asked for it."""
    spec = read_spec(cluster_dir)
    client = Client(timeout_ms=2000)
    try:
        rows = ring_ops.serving_in_ring_order(client, spec)
    finally:
        client.close()
    before = [row.get("zone", "") for row in rows]
    after = [row.get("zone", "") for row in rows if row["node"] != leaver]
    more = len(one_zone_windows(after, spec.replication)) - len(
        one_zone_windows(before, spec.replication)
    )
    if more > 0:
        click.echo(
            f"warning: once {leaver} is gone, {more} more ranges keep every copy in one zone "
            "(losing that zone would lose them); 'smr scale out' in another zone spreads them"
        )


def _wait_replicated(cluster_dir: Path, wait_s: float) -> None:
    """`smr.cluster.ring_ops.wait_replicated`, exiting 1 if that takes ``wait_s``."""
    try:
        ring_ops.wait_replicated(cluster_dir, wait_s, click.echo)
    except RingOpError as error:
        _fail(str(error))


def _fail(message: str) -> NoReturn:
    click.secho(f"smr: {message}", err=True, fg="red")
    sys.exit(1)
