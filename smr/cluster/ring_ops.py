"""Ring changes an operator or the autoscaler asks for, followed to their end: a move of part
of a node's range (or all of it: a leave), a join (or several side by side), and the wait
until every range has its copies again. ``smr move`` / ``smr scale`` (:mod:`smr.cli.ring`)
and the autoscale controller (:mod:`smr.autoscale.controller`) both use them.

Each asks the node to start, then follows it in the node's status until it ends; progress
lines go to ``say``; an operation that is refused, called off or too slow raises
:class:`RingOpError` with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from smr.client.control import Client, NodeUnreachable
from smr.ring.zones import join_positions
from smr.spec.model import ClusterSpec, NodeSpec
from smr.spec.parse import read_spec

# How often an operation in progress is looked at.
POLL_S: Final = 0.1
# A joiner that is not joining this long after it asked got no offer (it stopped waiting).
OFFER_WAIT_S: Final = 3.0

# Refusals of a join that a view a heartbeat newer lifts (smr.node.joins).
TRANSIENT_REFUSALS: Final = ("owns no range", "is joining next to")

Say = Callable[[str], None]


class RingOpError(Exception):
    """A move, join or leave was refused, called off, or did not end in time."""


def move(cluster_dir: Path, node_id: str, fraction: float | None, wait_s: float, say: Say) -> str:
    """Start the move of ``fraction`` of ``node_id``'s load to its clockwise neighbour (its
    whole range: None, a leave) and follow it to its end; the outcome in words."""
    spec = read_spec(cluster_dir)
    addr = spec.node(node_id).addr
    client = Client(timeout_ms=2000)
    try:
        reply = client.move(addr, fraction)
        if not reply.started:
            raise RingOpError(f"{node_id} refused: {reply.text}")
        say(f"started: {reply.text}")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            try:
                moves = client.status(addr)["moves"]
            except NodeUnreachable as error:
                raise RingOpError(f"{node_id} stopped answering during the move: {error}") from None
            if not any(row["role"] == "giver" for row in moves["under_way"]):
                return _outcome(moves["recent"])
        raise RingOpError(
            f"the move is still under way after {wait_s:g} s ('smr status' follows it)"
        )
    finally:
        client.close()


def join(cluster_dir: Path, node: NodeSpec, beside: str | None, wait_s: float, say: Say) -> str:
    """Ask ``node`` (on standby) to join beside ``beside`` (or where :func:`join_places`
    says) and follow the join to its end; the outcome in words."""
    spec = read_spec(cluster_dir)
    joiner, addr = node.id, node.addr
    client = Client(timeout_ms=2000)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            target = beside or join_places(client, spec, [node])[0][1]
            reply = client.join(addr, target)
            if reply.started:
                break
            # A node that does not know the ring yet, or whose view still shows a join
            # just done beside it as under way, refuses for a heartbeat or two; anything
            # else is final.
            transient = any(reason in reply.text for reason in TRANSIENT_REFUSALS)
            if not transient or time.monotonic() > deadline:
                raise RingOpError(f"{joiner} refused: {reply.text}")
            time.sleep(POLL_S)
        say(f"started: {reply.text}")
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
            elif in_view == "up":
                continue  # switched; settling with its secondaries
            elif joining or time.monotonic() > offer_by:
                raise RingOpError(f"the join of {joiner} is off ('smr status' and its log say why)")
        raise RingOpError(f"the join of {joiner} is still under way after {wait_s:g} s")
    finally:
        client.close()


def join_together(
    cluster_dir: Path, nodes: Sequence[NodeSpec], wait_s: float, say: Say
) -> list[str | RingOpError]:
    """Join ``nodes`` (on standby) side by side: in rounds, each round's joins at once (a
    thread each), beside the places `join_places` chooses, and followed to their end; the
    nodes the ring had no room for in a round join in the next. The outcome of each node's
    join, in the order of ``nodes``: its words, or the `RingOpError` that ended it."""
    outcomes: dict[str, str | RingOpError] = {}
    waiting = list(nodes)
    client = Client(timeout_ms=2000)
    try:
        while waiting:
            try:
                places = join_places(client, read_spec(cluster_dir), waiting)
            except RingOpError as error:
                outcomes.update((node.id, error) for node in waiting)
                break
            with ThreadPoolExecutor(max_workers=len(places)) as pool:
                joins = {
                    node.id: pool.submit(join, cluster_dir, node, beside, wait_s, say)
                    for node, beside in places
                }
            for node_id, future in joins.items():
                failure = future.exception()
                if failure is not None and not isinstance(failure, RingOpError):
                    raise failure
                outcomes[node_id] = failure if failure is not None else future.result()
            waiting = waiting[len(places) :]
    finally:
        client.close()
    return [outcomes[node.id] for node in nodes]


def join_places(
    client: Client, spec: ClusterSpec, joiners: Sequence[NodeSpec]
) -> list[tuple[NodeSpec, str]]:
    """The serving nodes that the first of ``joiners`` join beside, side by side: for each
    in turn, among the places that leave the fewest ranges with every copy in one zone, the
    one applying the most tuples per second (the largest range on ties), and no two places
    close enough on the ring that one join changes what another joiner backs up
    (`ring.zones.join_positions`). At least one place; fewer than ``joiners`` when the ring
    has no room for more."""
    rows = serving_in_ring_order(client, spec)
    if not rows:
        raise RingOpError("no serving node answers: nothing to join beside")
    rates = [row["tuples_per_s"] for row in rows]
    shares = [row["range_share"] for row in rows]
    zones = [row.get("zone", "") for row in rows]
    joiner_zones = [joiner.zone for joiner in joiners]
    indexes = join_positions(zones, joiner_zones, spec.replication, rates, shares)
    return [
        (joiner, str(rows[index]["node"])) for joiner, index in zip(joiners, indexes, strict=False)
    ]


def serving_in_ring_order(client: Client, spec: ClusterSpec) -> list[dict[str, Any]]:
    """The status rows of the nodes that answer and own a range, by token."""
    rows = [
        row
        for row in client.status_each([node.addr for node in spec.nodes]).values()
        if not isinstance(row, NodeUnreachable) and row.get("role") == "serving"
    ]
    return sorted(rows, key=lambda row: row["token"])


def taken_over(rows: Iterable[dict[str, Any]]) -> set[str]:
    """The nodes that the views of the nodes answering (their status ``rows``) mark dead:
    the ring took their ranges over, and a node marked dead that comes back is fenced, so
    nothing waits for them to answer."""
    return {node for row in rows for node in row.get("dead_in_view", ())}


def wait_replicated(cluster_dir: Path, wait_s: float, say: Say) -> None:
    """Wait until every node answers, but those the ring took over (`taken_over`), and none
    reports under-replicated slots."""
    spec = read_spec(cluster_dir)
    client = Client(timeout_ms=2000)
    try:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            statuses = client.status_each([node.addr for node in spec.nodes])
            rows = [row for row in statuses.values() if not isinstance(row, NodeUnreachable)]
            gone = taken_over(rows)
            silent = [
                node.id
                for node in spec.nodes
                if isinstance(statuses[node.addr], NodeUnreachable) and node.id not in gone
            ]
            if not silent and not any(row["under_replicated_slots"] for row in rows):
                say("every range has its copies again")
                return
            time.sleep(POLL_S)
        raise RingOpError(
            f"some ranges are still under-replicated after {wait_s:g} s ('smr status')"
        )
    finally:
        client.close()


def _outcome(recent: list[dict[str, Any]]) -> str:
    given = [record for record in recent if record["role"] == "giver"]
    if not given:
        raise RingOpError("the move ended but left no record")
    last = given[-1]
    if last["outcome"] != "done":
        raise RingOpError(f"move {last['move']} {last['outcome']}")
    return (
        f"done: {last['slots']} slots now served by {last['receiver']} "
        f"({last['total_ms']:.0f} ms in all, slots frozen for {last['frozen_ms']:.0f} ms)"
    )
