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
import time
from pathlib import Path
from typing import Any, NoReturn

import click

from ring.zones import join_position, one_zone_windows
from smr.cli_options import cluster_dir_option
from smr.client import Client, NodeUnreachable
from smr.provision import LocalProcesses, StandbyPool
from smr.spec import ClusterSpec, NodeSpec, read_spec

# How often a move in progress is looked at.
POLL_S = 0.1
# A joiner that is not joining this long after it asked got no offer (it stopped waiting).
OFFER_WAIT_S = 3.0

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
@wait_option
def scale_out_command(
    cluster_dir: Path, count: int, beside: str | None, zone: str | None, wait_s: float
) -> None:
    """Add COUNT nodes, one after the other: a node already on standby (fenced, or left
    running by 'scale in --keep-running') first, else a new process. Each catches up as an
    extra replica of the node it joins beside (the busiest, by applied tuples per second,
    among the places that keep each range's copies in two zones), then takes the top of its
    range (split at the load median)."""
    provisioner = StandbyPool(LocalProcesses(cluster_dir), size=0)
    for _ in range(count):
        node = provisioner.start(zone)
        where = f" in zone {node.zone}" if node.zone else ""
        click.echo(f"{node.id} on standby at {node.addr}{where}")
        click.echo(_run_join(cluster_dir, node, beside, wait_s))


@scale_group.command("in")
@cluster_dir_option
@click.argument("node_id")
@click.option(
    "--keep-running",
    is_flag=True,
    help="Leave the node running on standby (owning nothing) instead of stopping it.",
)
@wait_option
def scale_in_command(cluster_dir: Path, node_id: str, keep_running: bool, wait_s: float) -> None:
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
        LocalProcesses(cluster_dir).stop(node_id)
        click.echo(f"{node_id} stopped and removed from {cluster_dir}")


def _run_move(cluster_dir: Path, node_id: str, fraction: float | None, wait_s: float) -> str:
    """Start the move at ``node_id`` and follow it to its end; the outcome in words. Exits
    1 (after printing why) if it is refused, called off, or still under way at ``wait_s``."""
    spec = read_spec(cluster_dir)
    addr = spec.node(node_id).addr
    client = Client(timeout_ms=2000)
    try:
        reply = client.move(addr, fraction)
        if not reply.started:
            _fail(f"{node_id} refused: {reply.text}")
        click.echo(f"started: {reply.text}")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            try:
                moves = client.status(addr)["moves"]
            except NodeUnreachable as error:
                _fail(f"{node_id} stopped answering during the move: {error}")
            if not any(row["role"] == "giver" for row in moves["under_way"]):
                return _outcome(moves["recent"])
        _fail(f"the move is still under way after {wait_s:g} s ('smr status' follows it)")
    finally:
        client.close()


def _run_join(cluster_dir: Path, node: NodeSpec, beside: str | None, wait_s: float) -> str:
    """Ask ``node`` to join beside ``beside`` (or where `_where_to_join` says) and follow
    the join to its end; the outcome in words. Exits 1 if it is refused, called off or too
    slow."""
    spec = read_spec(cluster_dir)
    joiner, addr = node.id, node.addr
    client = Client(timeout_ms=2000)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            target = beside or _where_to_join(client, spec, node)
            reply = client.join(addr, target)
            if reply.started:
                break
            # A node that does not know the ring yet (it hears of it within a heartbeat
            # or two) refuses; anything else is final.
            if "owns no range" not in reply.text or time.monotonic() > deadline:
                _fail(f"{joiner} refused: {reply.text}")
            time.sleep(POLL_S)
        click.echo(f"started: {reply.text}")
        joining = False
        offer_by = time.monotonic() + OFFER_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            status = client.status(addr)
            in_view = status["status_in_view"]
            if in_view == "up" and not status["moves"]["under_way"]:
                return (
                    f"done: {joiner} serves {status['range_share']:.1%} of the ring "
                    f"({status['keys']:,} keys)"
                )
            if in_view == "joining":
                joining = True
            elif joining or (in_view == "standby" and time.monotonic() > offer_by):
                _fail(f"the join of {joiner} is off ('smr status' and its log say why)")
        _fail(f"the join of {joiner} is still under way after {wait_s:g} s")
    finally:
        client.close()


def _where_to_join(client: Client, spec: ClusterSpec, joiner: NodeSpec) -> str:
    """The serving node to join beside: among the places that leave the fewest ranges with
    every copy in one zone (`ring.zones.join_position`), the one applying the most tuples
    per second (the largest range on ties)."""
    rows = _serving_in_ring_order(client, spec)
    if not rows:
        _fail("no serving node answers: nothing to join beside")
    rates = [row["tuples_per_s"] for row in rows]
    shares = [row["range_share"] for row in rows]
    zones = [row.get("zone", "") for row in rows]
    index = join_position(zones, joiner.zone, spec.replication, rates, shares)
    return str(rows[index]["node"])


def _serving_in_ring_order(client: Client, spec: ClusterSpec) -> list[dict[str, Any]]:
    """The status rows of the nodes that answer and own a range, by token."""
    rows = [
        row
        for row in client.status_each([node.addr for node in spec.nodes]).values()
        if not isinstance(row, NodeUnreachable) and row.get("role") == "serving"
    ]
    return sorted(rows, key=lambda row: row["token"])


def _warn_of_one_zone_ranges_after(cluster_dir: Path, leaver: str) -> None:
    """Say so if, once ``leaver`` is gone, more ranges keep every copy in one zone (its
    neighbours are of one zone); the leave goes on: the operator asked for it."""
    spec = read_spec(cluster_dir)
    client = Client(timeout_ms=2000)
    try:
        rows = _serving_in_ring_order(client, spec)
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
    """Wait until no node reports under-replicated slots; exit 1 if that takes ``wait_s``."""
    spec = read_spec(cluster_dir)
    client = Client(timeout_ms=2000)
    try:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            statuses = client.status_each([node.addr for node in spec.nodes])
            rows = [row for row in statuses.values() if not isinstance(row, NodeUnreachable)]
            if len(rows) == len(spec.nodes) and not any(
                row["under_replicated_slots"] for row in rows
            ):
                click.echo("every range has its copies again")
                return
            time.sleep(POLL_S)
        _fail(f"some ranges are still under-replicated after {wait_s:g} s ('smr status')")
    finally:
        client.close()


def _outcome(recent: list[dict[str, Any]]) -> str:
    given = [record for record in recent if record["role"] == "giver"]
    if not given:
        _fail("the move ended but left no record")
    last = given[-1]
    if last["outcome"] != "done":
        _fail(f"move {last['move']} {last['outcome']}")
    return (
        f"done: {last['slots']} slots now served by {last['receiver']} "
        f"({last['total_ms']:.0f} ms in all, slots frozen for {last['frozen_ms']:.0f} ms)"
    )


def _fail(message: str) -> NoReturn:
    click.secho(f"smr: {message}", err=True, fg="red")
    sys.exit(1)
