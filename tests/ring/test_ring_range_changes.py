"""Range changes: takeover after a failure, a granted handoff, and the load-median split."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from smr.ring.ids import NodeId, Slot, Token
from smr.ring.placement import Ring, SlotRange, split_at_load_median
from smr.ring.view import Status, View, grant_range, successor_takes_over
from tests.ring.ring_strategies import Placed, member, placed_views, primaries

ring_settings = settings(deadline=None, max_examples=40)

# -- successor_takes_over ---------------------------------------------------------------------


@ring_settings
@given(placed_views(min_owners=2), st.data())
def test_removing_a_node_moves_only_its_slots_to_its_clockwise_neighbour(
    placed: Placed, data: st.DataObject
) -> None:
    owners = placed.owners
    index = data.draw(st.integers(0, len(owners) - 1))
    dead, successor = owners[index], owners[(index + 1) % len(owners)]
    before = placed.ring()

    view = successor_takes_over(placed.view, dead.node_id)
    after = Ring(view, placed.slot_bits)

    assert primaries(after) == [
        successor.node_id if old == dead.node_id else old for old in primaries(before)
    ]
    marked = view.members[dead.node_id]
    assert (marked.status, marked.version) == (Status.DEAD, dead.version + 1)
    moved = view.members[successor.node_id]
    assert (moved.token, moved.version) == (dead.token, successor.version + 1)
    assert view.epoch > placed.view.epoch


@ring_settings
@given(placed_views(min_owners=2), st.data())
def test_takeover_is_the_same_when_another_node_marked_the_dead_node_first(
    placed: Placed, data: st.DataObject
) -> None:
    dead = data.draw(st.sampled_from(placed.owners)).node_id
    direct = successor_takes_over(placed.view, dead)
    assert successor_takes_over(placed.view.mark_dead(dead), dead) == direct


@ring_settings
@given(placed_views(min_owners=1), st.data())
def test_takeover_is_idempotent(placed: Placed, data: st.DataObject) -> None:
    dead = data.draw(st.sampled_from(placed.owners)).node_id
    once = successor_takes_over(placed.view, dead)
    assert successor_takes_over(once, dead) == once


def test_the_last_owner_dying_is_only_marked_dead() -> None:
    view = successor_takes_over(View([member("solo", 3)]), NodeId("solo"))
    assert view == View([member("solo", 3, Status.DEAD, version=2)])
    assert Ring(view, slot_bits=4).owners == ()


@pytest.mark.parametrize("status", [Status.JOINING, Status.STANDBY])
def test_a_node_that_owned_nothing_dying_moves_no_slots(status: Status) -> None:
    view = View([member("a", 0), member("b", 8), member("new", 4, status)])
    after = successor_takes_over(view, NodeId("new"))
    assert after == view.mark_dead(NodeId("new"))
    assert primaries(Ring(after, 4)) == primaries(Ring(view, 4))


def test_consecutive_dead_nodes_are_all_taken_over_by_the_first_live_successor() -> None:
    view = View([member("a", 0), member("b", 4), member("c", 8), member("d", 12)])
    # b and c fail together; d detects c, then b (docs/design/architecture.md#failures: up to r
    # hops).
    after = successor_takes_over(successor_takes_over(view, NodeId("c")), NodeId("b"))
    ring = Ring(after, slot_bits=4)
    assert ring.owners == ("a", "d")
    assert ring.range_of(NodeId("d")) == SlotRange(Slot(4), 12, 16)
    assert after.members[NodeId("d")].token == 4


def test_taking_over_an_unknown_node_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="ghost"):
        successor_takes_over(View([member("a", 0)]), NodeId("ghost"))


def test_the_wrapping_successor_moves_its_token_down_across_zero() -> None:
    view = View([member("a", 2), member("b", 6), member("last", 12)])
    after = successor_takes_over(view, NodeId("last"))
    assert after.members[NodeId("a")].token == 12
    assert Ring(after, 4).range_of(NodeId("a")) == SlotRange(Slot(12), 10, 16)


# -- grant_range ------------------------------------------------------------------------------


@ring_settings
@given(placed_views(min_owners=2), st.data())
def test_granting_moves_only_split_to_end_of_the_owners_range_to_its_neighbour(
    placed: Placed, data: st.DataObject
) -> None:
    before = placed.ring()
    owners = placed.owners
    index = data.draw(st.integers(0, len(owners) - 1))
    owner, neighbour = owners[index], owners[(index + 1) % len(owners)]
    owner_range = before.range_of(owner.node_id)
    assert owner_range is not None
    assume(owner_range.length >= 2)
    offset = data.draw(st.integers(1, owner_range.length - 1))
    split = Token((owner_range.start + offset) % placed.slot_count)

    view = grant_range(placed.view, owner.node_id, split)
    after = Ring(view, placed.slot_bits)

    granted = SlotRange(Slot(split), owner_range.length - offset, placed.slot_count)
    assert granted.end == owner_range.end
    expected = primaries(before)
    for slot in granted.slots():
        expected[slot] = neighbour.node_id
    assert primaries(after) == expected
    assert after.range_of(owner.node_id) == SlotRange(owner_range.start, offset, placed.slot_count)
    moved = view.members[neighbour.node_id]
    assert (moved.token, moved.version) == (split, neighbour.version + 1)


@pytest.mark.parametrize("split", [4, 8, 9, 15, 0, 3])
def test_a_split_outside_the_owners_range_or_at_its_start_is_refused(split: int) -> None:
    view = View([member("a", 4), member("b", 8), member("c", 12)])
    with pytest.raises(ValueError, match="not strictly inside"):
        grant_range(view, NodeId("a"), Token(split))


def test_a_wrapping_range_can_be_split_on_either_side_of_zero() -> None:
    view = View([member("a", 4), member("c", 12)])
    for split in (14, 0, 3):
        after = grant_range(view, NodeId("c"), Token(split))
        assert after.members[NodeId("a")].token == split


@pytest.mark.parametrize(
    ("view", "owner"),
    [
        (View([member("solo", 0)]), "solo"),
        (View([member("a", 0), member("b", 8)]), "ghost"),
        (View([member("a", 0), member("b", 8), member("j", 4, Status.JOINING)]), "j"),
    ],
)
def test_only_an_owner_with_a_neighbour_can_grant(view: View, owner: str) -> None:
    with pytest.raises(ValueError):
        grant_range(view, NodeId(owner), Token(2))


# -- split_at_load_median ---------------------------------------------------------------------


@st.composite
def loaded_ranges(draw: st.DrawFn) -> tuple[SlotRange, dict[Slot, float]]:
    slot_bits = draw(st.integers(1, 12))
    count = 1 << slot_bits
    slot_range = SlotRange(
        Slot(draw(st.integers(0, count - 1))), draw(st.integers(2, count)), count
    )
    loads = st.floats(0, 1e6) | st.integers(0, 1000).map(float) | st.just(0.0)
    load = draw(st.dictionaries(st.integers(0, count - 1).map(Slot), loads, max_size=64))
    return slot_range, load


@given(loaded_ranges())
def test_the_split_lies_strictly_inside_the_range(
    case: tuple[SlotRange, dict[Slot, float]],
) -> None:
    slot_range, load = case
    split = split_at_load_median(slot_range, load)
    assert slot_range.contains(split)
    assert split != slot_range.start


@given(loaded_ranges())
def test_each_side_of_the_split_carries_at_most_half_plus_the_largest_slot(
    case: tuple[SlotRange, dict[Slot, float]],
) -> None:
    slot_range, load = case
    split = split_at_load_median(slot_range, load)
    lower_length = (split - slot_range.start) % slot_range.slot_count
    slots = list(slot_range.slots())
    lower = math.fsum(load.get(s, 0.0) for s in slots[:lower_length])
    upper = math.fsum(load.get(s, 0.0) for s in slots[lower_length:])
    total = lower + upper
    largest = max((load.get(s, 0.0) for s in slots), default=0.0)
    slack = 1e-9 * total
    assert lower <= total / 2 + largest + slack
    assert upper <= total / 2 + largest + slack


def test_a_range_without_load_is_split_at_its_midpoint() -> None:
    assert split_at_load_median(SlotRange(Slot(4), 8, 16), {}) == 8
    assert split_at_load_median(SlotRange(Slot(14), 4, 16), {Slot(3): 5.0}) == 0


def test_the_split_follows_the_load_not_the_slot_count() -> None:
    slot_range = SlotRange(Slot(0), 16, 16)
    hot = {Slot(2): 10.0, Slot(3): 10.0, Slot(12): 1.0}
    # [0, 3) carries 10 of 21, short of half; [0, 4) is the first to reach it.
    assert split_at_load_median(slot_range, hot) == 4


def test_one_hot_last_slot_still_leaves_it_alone_in_the_upper_part() -> None:
    slot_range = SlotRange(Slot(0), 8, 16)
    assert split_at_load_median(slot_range, {Slot(7): 100.0, Slot(1): 1.0}) == 7


def test_a_range_of_one_slot_cannot_be_split() -> None:
    with pytest.raises(ValueError, match="cannot be split"):
        split_at_load_median(SlotRange(Slot(3), 1, 16), {})


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_negative_or_non_finite_loads_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="finite and >= 0"):
        split_at_load_median(SlotRange(Slot(0), 4, 16), {Slot(1): bad})


def test_an_overloaded_owner_hands_the_slots_past_its_load_median_to_its_neighbour() -> None:
    view = View([member("a", 0), member("b", 8)])
    ring = Ring(view, slot_bits=4)
    own = ring.range_of(NodeId("a"))
    assert own is not None
    split = split_at_load_median(own, {Slot(s): 1.0 for s in range(8)} | {Slot(3): 4.0})
    assert split == 4  # loads 1 1 1 4 | 1 1 1 1: [0, 4) carries 7 of 11
    after = Ring(grant_range(view, NodeId("a"), Token(split)), slot_bits=4)
    assert after.range_of(NodeId("a")) == SlotRange(Slot(0), 4, 16)
    assert after.range_of(NodeId("b")) == SlotRange(Slot(4), 12, 16)
