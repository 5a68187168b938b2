"""``smr status``'s collection: ask every node at once (:func:`collect`), one row per node,
and the findings printed under the table (the ``*_line`` functions). The tables themselves
are :mod:`smr.cli.status_view`'s."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from smr.client.control import Client, NodeUnreachable, cluster_view
from smr.ring.view import OWNING_STATUSES, Status, View
from smr.spec.model import ClusterSpec

Row = dict[str, Any]


# A peer's report of a node's heartbeat older than this says nothing about the node now.
PEER_REPORT_FRESH_MS: Final = 500


def collect(spec: ClusterSpec, client: Client) -> list[Row]:
    """One row per node of ``spec``, and per owner in the ring's view that the spec does not
    name (one that joined through the seeds: ``smr node --join``): its status map with
    ``state`` "up", or ``state`` "unreachable" with the reason. Every node is asked at once."""
    nodes = [(node.id, node.addr, node.pid) for node in spec.nodes]
    named = {node.id for node in spec.nodes}
    try:
        view = cluster_view(client, [node.addr for node in spec.nodes])
    except NodeUnreachable:
        view = None
    if view is not None:
        nodes += [
            (member.node_id, member.addr, None)
            for member in sorted(view.members.values(), key=lambda m: m.node_id)
            if member.node_id not in named and member.status in OWNING_STATUSES
        ]
    answers = client.status_each([addr for _, addr, _ in nodes])
    rows: list[Row] = []
    for node_id, addr, pid in nodes:
        answer = answers[addr]
        if isinstance(answer, NodeUnreachable):
            rows.append(
                {
                    "node": node_id,
                    "state": "unreachable",
                    "addr": addr,
                    "pid": pid,
                    "error": str(answer),
                }
            )
        else:
            rows.append({"state": "up", **answer})
    heard_through_peers(rows)
    if view is not None:
        declared_dead(rows, view)
    return rows


def declared_dead(rows: list[Row], view: View) -> None:
    """A node that answers and still serves, though the nodes' merged view marks its
    incarnation dead (its peers declared it dead: a partition cut it off, say, and its
    range was taken over), gets ``role`` "dead" and ``declared_dead``: it serves no slot
    the ring routes to it, and is fenced once it hears. One that knows (fenced) keeps its
    role."""
    for row in rows:
        member = view.members.get(row["node"])
        if (
            row["state"] == "up"
            and member is not None
            and member.status is Status.DEAD
            and member.incarnation >= row.get("incarnation", 0)
            and row.get("role") != "fenced"
        ):
            row["role"] = "dead"
            row["declared_dead"] = True


def heard_through_peers(rows: list[Row]) -> None:
    """A node that does not answer but still beats (its loop held by a slow reduce call,
    its heartbeat thread alive) is not unreachable: its state becomes what its freshest
    heartbeat, as a peer reports it, says, ``stuck`` or ``busy``, with ``stalled_ms``. Only
    a fresh beat of the heartbeat thread counts (``stalled_ms`` above 0): a node killed a
    moment ago left ordinary heartbeats behind, and is unreachable."""
    freshest: dict[str, dict[str, Any]] = {}
    for row in rows:
        for peer, report in (row.get("peers") or {}).items():
            if report["heard_ms_ago"] > PEER_REPORT_FRESH_MS or report["stalled_ms"] <= 0:
                continue
            if peer not in freshest or report["heard_ms_ago"] < freshest[peer]["heard_ms_ago"]:
                freshest[peer] = report
    for row in rows:
        report = freshest.get(row["node"])
        if row["state"] == "unreachable" and report is not None:
            row["state"] = "stuck" if report["stuck"] else "busy"
            row["stalled_ms"] = report["stalled_ms"]


def offline_line(rows: Sequence[Row]) -> str | None:
    """One line naming the slots that lost their state beyond the replication factor and
    refuse tuples (per node), or None if there are none: loss is loud."""
    offline = {row["node"]: row["offline_slots"] for row in rows if row.get("offline_slots")}
    if not offline:
        return None
    where = ", ".join(f"{node}: {count}" for node, count in offline.items())
    return (
        f"smr: {sum(offline.values())} slots lost their state beyond the replication factor "
        f"and refuse tuples ({where}); 'smr recover --cluster DIR --accept-loss' brings them "
        "back empty"
    )


def dead_line(rows: Sequence[Row]) -> str | None:
    """One line naming the nodes that answer though their peers declared them dead, or
    None if there are none."""
    dead = [row["node"] for row in rows if row.get("declared_dead")]
    if not dead:
        return None
    return (
        f"smr: declared dead by the other nodes, yet answering: {', '.join(dead)} (cut off "
        "from them? the ring serves their slots elsewhere; each rejoins empty once it "
        "hears)"
    )


def moves_line(rows: Sequence[Row]) -> str | None:
    """One line naming the moves under way (as their givers report them, with their step),
    or None if there are none."""
    moves = [
        f"{move['what']} ({move['step']}, {move['for_ms']} ms)"
        for row in rows
        for move in (row.get("moves") or {}).get("under_way", [])
        if move["role"] == "giver"
    ]
    return "moves under way: " + "; ".join(moves) if moves else None


def zones_line(rows: Sequence[Row]) -> str | None:
    """One line naming the ranges whose every copy sits in one fault zone (as the node with
    the newest view places them, see ``ring.zones``), or None if there are none: losing
    that zone would lose them."""
    answered = [row for row in rows if row["state"] == "up" and "one_zone_ranges" in row]
    if not answered:
        return None
    newest = max(answered, key=lambda row: row["epoch"])
    alone = newest["one_zone_ranges"]
    if not alone:
        return None
    zone_of = {row["node"]: row.get("zone", "") for row in answered}
    named = ", ".join(f"{node} ({zone_of.get(node) or '?'})" for node in alone)
    return (
        f"smr: {len(alone)} ranges keep every copy in one zone: {named}; losing that zone "
        "would lose them (too few owners in other zones, or a leave or a failure put "
        "owners of one zone side by side)"
    )


def refused_start_line(rows: Sequence[Row]) -> str | None:
    """One line per node that refused to start (its state on disk not whole, say), with its
    reason; None if none did."""
    refused = [
        f"smr: {row['node']} refused to start: {row['refused_start']}"
        for row in rows
        if row.get("refused_start")
    ]
    return "\n".join(refused) if refused else None


def unreachable_line(rows: Sequence[Row], logs_dir: Path | None = None) -> str | None:
    """One line naming the nodes that did not answer (and, for those that still beat, how
    long their loop has been held), or None if all did; it points at their logs in
    ``logs_dir`` (a local cluster's ``DIR/logs``), or on their hosts."""
    missing = [row for row in rows if row["state"] != "up"]
    if not missing:
        return None
    named = ", ".join(_why_silent(row) for row in missing)
    logs = f"in {logs_dir}/" if logs_dir is not None else "on their hosts"
    return (
        f"smr: {len(missing)} of {len(rows)} nodes unreachable: {named}; see their logs "
        f"{logs}, or 'smr status --json' for each reason"
    )


def _why_silent(row: Row) -> str:
    if row["state"] == "unreachable":
        return f"{row['node']} ({row['addr']})"
    return (
        f"{row['node']} ({row['state']}: it beats, but its loop has read nothing for "
        f"{row['stalled_ms'] / 1000:.1f} s; a slow reduce call?)"
    )
