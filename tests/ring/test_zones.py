"""Fault zones: owners placed by `spread_order` keep every range's copies in two zones or
more, so losing a whole zone loses no range; joins keep it so where the zones allow."""

from __future__ import annotations

import math
from collections import Counter
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smr.ring.hashing import even_tokens
from smr.ring.ids import NodeId, Token
from smr.ring.placement import Ring
from smr.ring.view import Member, Status, View
from smr.ring.zones import (
    join_position,
    join_positions,
    one_zone_ranges,
    one_zone_windows,
    spread_order,
    spread_possible,
    zone_for_new_node,
)

SLOT_BITS = 10


def zoned(sizes: list[int]) -> dict[NodeId, str]:
    """Node ids mapped to zones ``z0, z1, ...`` with ``sizes[i]`` nodes in zone ``zi``."""
    return {
        NodeId(f"z{zone}-{i}"): f"z{zone}" for zone, size in enumerate(sizes) for i in range(size)
    }


def ring_of(order: list[NodeId], zone_of: dict[NodeId, str]) -> Ring:
    """A ring with these owners clockwise in this order, at evenly spaced tokens."""
    tokens = even_tokens(len(order), SLOT_BITS)
    members = [
        Member(node, 1, f"tcp://{node}:1", Token(token), zone_of[node], Status.UP, 1)
        for node, token in zip(order, tokens, strict=True)
    ]
    return Ring(View(members), SLOT_BITS)


def longest_run(zones: list[str], zone: str) -> int:
    """The longest cyclic run of consecutive owners in ``zone``."""
    n = len(zones)
    if all(z == zone for z in zones):
        return n
    best = run = 0
    for z in zones * 2:
        run = run + 1 if z == zone else 0
        best = max(best, run)
    return min(best, n)


zone_sizes = st.lists(st.integers(1, 7), min_size=1, max_size=5)


@given(zone_sizes, st.randoms(use_true_random=False))
def test_spread_order_keeps_runs_as_short_as_possible(sizes: list[int], random: Random) -> None:
    grouped = list(zoned(sizes).items())
    random.shuffle(grouped)  # whatever order the nodes come in
    zone_of = dict(grouped)
    order = spread_order(zone_of)
    assert sorted(order) == sorted(zone_of)
    zones = [zone_of[node] for node in order]
    n, largest = len(zones), max(sizes)
    if len(sizes) == 1:
        return
    # With no zone over half the owners, no two neighbours share a zone; otherwise only the
    # largest zone (then the only one that size) has runs, each as short as it can be.
    bound = 1 if largest <= n - largest else math.ceil(largest / (n - largest))
    for zone in set(zones):
        limit = bound if zone == f"z{sizes.index(largest)}" else 1
        assert longest_run(zones, zone) <= limit, (zones, zone)


@given(zone_sizes, st.integers(1, 3))
def test_losing_a_whole_zone_loses_no_range(sizes: list[int], r: int) -> None:
    """Where the zone sizes allow it, every range's replica set (the placement function's)
    holds a node outside any one zone: a whole zone down leaves a copy of every range."""
    zone_of = zoned(sizes)
    n = len(zone_of)
    if len(sizes) < 2 or r > n - 1 or not spread_possible(Counter(zone_of.values()), r):
        return
    ring = ring_of(spread_order(zone_of), zone_of)
    assert one_zone_ranges(ring, r) == []
    for lost in set(zone_of.values()):
        for owner, slot_range in ring.ranges():
            survivors = [node for node in ring.replica_set_of(owner, r) if zone_of[node] != lost]
            assert survivors, f"losing {lost} loses {owner}'s range {slot_range}"


@given(zone_sizes, st.integers(0, 3), st.randoms(use_true_random=False))
def test_windows_count_what_the_placement_function_places(
    sizes: list[int], r: int, random: Random
) -> None:
    """`one_zone_windows` over ring order names the same owners as `one_zone_ranges`, which
    reads the replica sets from `Ring` (any order, spread or not)."""
    zone_of = zoned(sizes)
    order = sorted(zone_of)
    random.shuffle(order)
    r = min(r, len(order) - 1)
    ring = ring_of(order, zone_of)
    windows = one_zone_windows([zone_of[node] for node in order], r)
    assert [order[i] for i in windows] == one_zone_ranges(ring, r)


@given(zone_sizes, st.integers(0, 4), st.integers(1, 3), st.data())
def test_a_join_keeps_zones_spread_where_the_sizes_allow(
    sizes: list[int], joiner_zone: int, r: int, data: st.DataObject
) -> None:
    zone_of = zoned(sizes)
    order = spread_order(zone_of)
    zones = [zone_of[node] for node in order]
    weights = data.draw(st.lists(st.floats(0, 100), min_size=len(zones), max_size=len(zones)))
    joining = f"z{joiner_zone}"
    index = join_position(zones, joining, r, weights)
    after = [*zones[: index + 1], joining, *zones[index + 1 :]]
    before_bad = len(one_zone_windows(zones, r))
    # Never worse than joining beside the busiest owner regardless of zones.
    busiest = max(range(len(zones)), key=lambda i: (weights[i], -i))
    naive = [*zones[: busiest + 1], joining, *zones[busiest + 1 :]]
    assert len(one_zone_windows(after, r)) <= len(one_zone_windows(naive, r))
    if before_bad == 0 and spread_possible(Counter(after), r):
        assert one_zone_windows(after, r) == [], (zones, joining, index)


def test_join_position_prefers_the_busiest_owner_among_equally_good_places() -> None:
    zones = ["a", "b", "a", "b"]
    # A joiner of zone c fits anywhere: the busiest owner wins.
    assert join_position(zones, "c", 1, [1.0, 5.0, 2.0, 0.0]) == 1
    # A joiner of zone a harms no range only between b and c (or c and b), whatever the
    # busiest owner is.
    assert join_position(["a", "b", "c", "b"], "a", 1, [0.0, 0.0, 0.0, 9.0]) == 1


def test_join_position_breaks_ties_of_load_by_the_tie_breaks() -> None:
    # Equal rates: the larger range wins, and without tie breaks the first in ring order.
    assert join_position(["a", "b", "c"], "d", 1, [5.0, 5.0, 1.0], [0.2, 0.5, 0.3]) == 1
    assert join_position(["a", "b", "c"], "d", 1, [5.0, 5.0, 1.0]) == 0


@given(
    st.lists(st.sampled_from("abc"), min_size=1, max_size=12),
    st.lists(st.sampled_from("abc"), min_size=1, max_size=6),
    st.integers(1, 3),
    st.data(),
)
def test_join_positions_side_by_side_are_r_apart_and_as_many_as_the_ring_has_room_for(
    zones: list[str], joiners: list[str], r: int, data: st.DataObject
) -> None:
    n = len(zones)
    weights = data.draw(st.lists(st.floats(0, 100), min_size=n, max_size=n))
    places = join_positions(zones, joiners, r, weights)
    # The first place is where a lone joiner would go.
    assert places[0] == join_position(zones, joiners[0], r, weights)
    for index, place in enumerate(places):
        for other in places[index + 1 :]:
            assert min((place - other) % n, (other - place) % n) >= r
    # Fewer places than joiners only when no owner is r or more from every place chosen.
    if len(places) < len(joiners):
        assert all(any(min((i - p) % n, (p - i) % n) < r for p in places) for i in range(n))


def test_join_positions_take_the_busiest_places_that_are_far_enough_apart() -> None:
    zones = [""] * 6
    weights = [1.0, 9.0, 8.0, 2.0, 7.0, 3.0]
    assert join_positions(zones, ["", "", ""], 1, weights) == [1, 2, 4]
    # r = 2: the owners next to 1 are too close; 4 next, then none is 2 from both.
    assert join_positions(zones, ["", "", ""], 2, weights) == [1, 4]


def test_join_position_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="no owner"):
        join_position([], "a", 1, [])
    with pytest.raises(ValueError, match="2 weights for 3 owners"):
        join_position(["a", "b", "a"], "a", 1, [1.0, 2.0])


def test_an_order_that_already_spreads_the_zones_is_kept() -> None:
    round_robin = {NodeId(f"n{i}"): "abc"[i % 3] for i in range(6)}
    assert spread_order(round_robin) == [NodeId(f"n{i}") for i in range(6)]
    # n0..n3 in zones a, a, b, b: two pairs side by side, so they are reordered.
    pairs = {NodeId("n0"): "a", NodeId("n1"): "a", NodeId("n2"): "b", NodeId("n3"): "b"}
    assert [pairs[node] for node in spread_order(pairs)] == ["a", "b", "a", "b"]


def test_new_nodes_go_to_the_emptiest_zone() -> None:
    assert zone_for_new_node(["a", "b", "a"]) == "b"
    assert zone_for_new_node(["b", "a"]) == "a"
    assert zone_for_new_node(["", ""]) == ""


def test_without_two_zones_nothing_is_reported() -> None:
    zone_of = {NodeId("a"): "z", NodeId("b"): "z", NodeId("c"): "z"}
    ring = ring_of(sorted(zone_of), zone_of)
    assert one_zone_ranges(ring, 1) == []
    assert one_zone_windows(["z", "z"], 1) == []
    # Two zones, three owners, r = 1: one range has both copies in the larger zone.
    zone_of[NodeId("c")] = "y"
    order = spread_order(zone_of)
    assert spread_possible(Counter(zone_of.values()), 1) is False
    assert len(one_zone_ranges(ring_of(order, zone_of), 1)) == 1
