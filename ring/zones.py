"""Fault zones: keep every range's copies in more than one zone (docs/design/architecture.md#words).

A range's replica set is its owner and the next ``r`` owners clockwise, and when the owner
dies the next owner clockwise takes over, because it already holds the state and the tuples.
Both rules need the copies on consecutive owners, so zones are honoured by *where owners
sit*, not by skipping owners when choosing secondaries: a skip would put a copy on an owner
that is not the one to take over, and ``r`` failures could then lose a range. So:

- `spread_order` orders nodes around the ring so each zone's owners are spread evenly (no
  two owners of a zone adjacent when no zone holds more than half of them; otherwise runs of
  the largest zone as short as they can be);
- `join_position` picks where a joiner sits so that as few ranges as possible end up with
  every copy in one zone, the busiest owner first among the equally good;
- `one_zone_ranges` names the owners whose whole replica set sits in one zone, for
  ``smr status`` to warn about, while two or more zones hold owners.

With `spread_order` and ``spread_possible(sizes, r)``, every replica set spans at least two
zones, so losing a whole zone loses no range (``tests/ring/test_zones.py`` shows it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial

from smr.ring.ids import NodeId
from smr.ring.placement import Ring


def spread_possible(sizes: Mapping[str, int], r: int) -> bool:
    """Whether owners in zones of these sizes can sit so that every ``r + 1`` consecutive
    owners span two zones or more: true when the largest zone's runs, spread over the gaps
    the other owners leave, are at most ``r`` long (and vacuously for one zone, where no
    placement helps, or for ``r == 0``, where there are no copies to spread)."""
    counts = [count for count in sizes.values() if count > 0]
    if len(counts) < 2 or r == 0:
        return True
    largest = max(counts)
    others = sum(counts) - largest
    return math.ceil(largest / others) <= r


def spread_order(zone_by_node: Mapping[NodeId, str]) -> list[NodeId]:
    """The nodes in the order they should sit clockwise around the ring, zones spread.

    Guarantees, for ``n`` nodes whose largest zone holds ``c`` of them: if ``c <= n - c``,
    no two consecutive nodes (cyclically) share a zone; otherwise no zone but the largest
    has two consecutive nodes, and the largest one's runs are at most ``ceil(c / (n - c))``
    long, which is the least any order achieves. The mapping's own order is kept when it
    already does that (round-robin zones stay in id order); deterministic either way.
    """
    nodes = list(zone_by_node)
    by_zone: dict[str, list[NodeId]] = {}
    for node_id in nodes:
        by_zone.setdefault(zone_by_node[node_id], []).append(node_id)
    # Largest zone first; ties by zone name, so the order is deterministic.
    groups = sorted(by_zone.items(), key=lambda item: (-len(item[1]), item[0]))
    if len(groups) < 2:
        return nodes
    largest_zone, largest = groups[0]
    rest = [node_id for _, members in groups[1:] for node_id in members]
    longest = 1 if len(largest) <= len(rest) else math.ceil(len(largest) / len(rest))
    runs = _longest_runs([zone_by_node[node_id] for node_id in nodes])
    if all(run <= (longest if zone == largest_zone else 1) for zone, run in runs.items()):
        return nodes
    if len(largest) >= len(rest):
        return _into_gaps(largest, rest)
    return _alternate([node_id for _, members in groups for node_id in members])


def _longest_runs(zones: Sequence[str]) -> dict[str, int]:
    """Per zone, its longest run of consecutive entries, counting around the wrap."""
    n = len(zones)
    longest: dict[str, int] = {}
    run = 0
    for index in range(2 * n):
        zone = zones[index % n]
        run = run + 1 if index and zones[(index - 1) % n] == zone else 1
        longest[zone] = min(n, max(longest.get(zone, 0), run))
    return longest


def _into_gaps(largest: list[NodeId], rest: list[NodeId]) -> list[NodeId]:
    """The largest zone's nodes shared as evenly as possible among the gaps between the
    others (at least one each, since there are at least as many): no two of the others
    touch, and the largest zone's runs differ in length by one at most."""
    order: list[NodeId] = []
    gaps = len(rest)
    placed = 0
    for gap, node_id in enumerate(rest):
        upto = (gap + 1) * len(largest) // gaps
        order.extend(largest[placed:upto])
        order.append(node_id)
        placed = upto
    return order


def _alternate(grouped: list[NodeId]) -> list[NodeId]:
    """Nodes grouped by zone, largest zone first, dealt to the even positions then the odd
    ones: with no zone over half the nodes, neighbours (and the wrap from last to first) hold
    nodes about half the list apart, which are never of one zone."""
    n = len(grouped)
    order: list[NodeId | None] = [None] * n
    positions = [*range(0, n, 2), *range(1, n, 2)]
    for position, node_id in zip(positions, grouped, strict=True):
        order[position] = node_id
    return [node_id for node_id in order if node_id is not None]


def one_zone_windows(zones: Sequence[str], r: int) -> list[int]:
    """The indices ``i`` of owners, in ring order with these zones, whose replica set (owner
    ``i`` and the next ``min(r, n - 1)`` clockwise) lies in a single zone, while two or more
    zones hold owners (with one zone, or ``r == 0``, there is nothing to spread: empty)."""
    n = len(zones)
    if len(set(zones)) < 2 or r == 0:
        return []
    width = min(r, n - 1) + 1
    return [i for i in range(n) if len({zones[(i + step) % n] for step in range(width)}) == 1]


def one_zone_ranges(ring: Ring, r: int) -> list[NodeId]:
    """The owners of ``ring`` whose replica set (from the placement function,
    `Ring.replica_set_of`) lies in one zone, while two or more zones hold owners: losing
    that zone loses their ranges. Joiners are not counted: they own nothing yet."""
    zone_of = {member.node_id: member.zone for member in ring.view.owners()}
    if len(set(zone_of.values())) < 2 or r == 0:
        return []
    alone = []
    for owner, _ in ring.ranges():
        copies = [node for node in ring.replica_set_of(owner, r) if node in zone_of]
        if len({zone_of[node] for node in copies}) == 1:
            alone.append(owner)
    return alone


def join_position(
    zones: Sequence[str],
    joiner_zone: str,
    r: int,
    weights: Sequence[float],
    tie_breaks: Sequence[float] | None = None,
) -> int:
    """The index of the owner (in ring order, with these zones) a joiner of ``joiner_zone``
    should join beside: it sits just clockwise of that owner and takes the top of its range.

    Chooses the position that leaves the fewest ranges with every copy in one zone (as
    `one_zone_windows` counts them after the join), then among those the owner with the
    greatest weight (its load), then the greatest tie break (its range's share, say), then
    the first in ring order. Raises `ValueError` if there is no owner or ``weights`` (or
    ``tie_breaks``) does not match ``zones``.
    """
    if not zones:
        raise ValueError("no owner to join beside")
    ties = tie_breaks if tie_breaks is not None else [0.0] * len(zones)
    if len(weights) != len(zones) or len(ties) != len(zones):
        raise ValueError(f"{len(weights)} weights for {len(zones)} owners")

    return min(range(len(zones)), key=partial(_join_badness, zones, joiner_zone, r, weights, ties))


def join_positions(
    zones: Sequence[str],
    joiner_zones: Sequence[str],
    r: int,
    weights: Sequence[float],
    tie_breaks: Sequence[float] | None = None,
) -> list[int]:
    """Where joiners of ``joiner_zones`` join side by side, one index per joiner in that
    order (as `join_position` chooses), each owner at least ``max(1, r)`` owners away in
    either direction from every other one chosen, so that no join changes what another
    joiner backs up (``ring.moves.join_blocked_by``). Shorter than ``joiner_zones`` when
    the ring has no room for more: the rest join once these have. Raises like
    `join_position`."""
    if not zones:
        raise ValueError("no owner to join beside")
    ties = tie_breaks if tie_breaks is not None else [0.0] * len(zones)
    if len(weights) != len(zones) or len(ties) != len(zones):
        raise ValueError(f"{len(weights)} weights for {len(zones)} owners")
    n = len(zones)
    apart = max(1, r)
    chosen: list[int] = []
    for joiner_zone in joiner_zones:
        free = [
            index
            for index in range(n)
            if all(min((index - at) % n, (at - index) % n) >= apart for at in chosen)
        ]
        if not free:
            break
        chosen.append(min(free, key=partial(_join_badness, zones, joiner_zone, r, weights, ties)))
    return chosen


def _join_badness(
    zones: Sequence[str],
    joiner_zone: str,
    r: int,
    weights: Sequence[float],
    ties: Sequence[float],
    index: int,
) -> tuple[int, float, float, int]:
    """How bad joining beside owner ``index`` is: the ranges left with every copy in one
    zone, then the owner's load and tie break (greater is better), then ring order."""
    after = [*zones[: index + 1], joiner_zone, *zones[index + 1 :]]
    return (len(one_zone_windows(after, r)), -weights[index], -ties[index], index)


def zone_for_new_node(zones: Sequence[str]) -> str:
    """The zone a new node should go to: the one with the fewest of these nodes (the first
    by name on ties); empty when none is named."""
    counts = Counter(zone for zone in zones if zone)
    if not counts:
        return ""
    return min(counts, key=lambda zone: (counts[zone], zone))
