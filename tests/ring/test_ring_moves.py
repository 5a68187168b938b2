"""Moves: who takes part (plan_move), the view they end in (moved_view, hand_over_all), and
where a range is split (split_at_load_share)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr.ring.ids import NodeId, Slot
from smr.ring.moves import MoveRefused, move_done_in, moved_view, plan_move
from smr.ring.placement import Ring, SlotRange, split_at_load_share
from smr.ring.view import Status, View, hand_over_all, with_status
from tests.ring.ring_strategies import Placed, member, placed_views, primaries

ring_settings = settings(deadline=None, max_examples=60)


def _leaving(placed: Placed) -> bool:
    # A node that is leaving takes part in no other move.
    return any(m.status is Status.LEAVING for m in placed.owners)


def _giver_and_split(placed: Placed, data: st.DataObject) -> tuple[NodeId, Slot | None]:
    ring = placed.ring()
    giver = data.draw(st.sampled_from([n for n, r in ring.ranges() if r.length >= 2]))
    own = ring.range_of(giver)
    assert own is not None
    if data.draw(st.booleans()):
        return giver, None
    offset = data.draw(st.integers(1, own.length - 1))
    return giver, Slot((own.start + offset) % own.slot_count)


@ring_settings
@given(placed_views(min_owners=3, max_owners=12, min_slot_bits=6), st.integers(1, 3), st.data())
def test_a_move_keeps_r_plus_one_copies_with_one_new_holder(
    placed: Placed, r: int, data: st.DataObject
) -> None:
    ring = placed.ring()
    if len(ring.owners) < r + 2 or ring.joiners or _leaving(placed):
        return
    giver, split = _giver_and_split(placed, data)
    plan = plan_move(ring, giver, r, split)
    # A leaver marks itself leaving before the receiver switches.
    before = with_status(placed.view, giver, Status.LEAVING) if plan.leave else placed.view
    assert Ring(before, placed.slot_bits).range_of(giver) == ring.range_of(giver)
    switched = moved_view(before, plan)
    after = Ring(switched, placed.slot_bits)

    # The receiver is the giver's clockwise neighbour; every moving slot goes to it, and no
    # other slot changes primary.
    owners = list(ring.owners)
    assert plan.receiver == owners[(owners.index(giver) + 1) % len(owners)]
    moving = set(plan.moving.slots())
    assert [
        plan.receiver if slot in moving else old for slot, old in enumerate(primaries(ring))
    ] == primaries(after)
    # Before, the moving slots' copies are the giver's replica set; after, the receiver's.
    # The only node that holds none before and one after is the copy holder.
    before_set = set(ring.replicas(plan.split, r))
    after_set = set(after.replicas(plan.split, r))
    assert after_set - before_set == {plan.copy_holder}
    assert len(after_set) == r + 1
    assert move_done_in(switched, plan)
    assert not move_done_in(placed.view, plan)


@ring_settings
@given(placed_views(min_owners=3, max_owners=12, min_slot_bits=6), st.data())
def test_a_leave_hands_the_whole_range_over_and_puts_the_giver_on_standby(
    placed: Placed, data: st.DataObject
) -> None:
    ring = placed.ring()
    if ring.joiners or _leaving(placed):
        return
    giver = data.draw(st.sampled_from(list(ring.owners)))
    plan = plan_move(ring, giver, 1, None)
    view = moved_view(with_status(placed.view, giver, Status.LEAVING), plan)
    after = Ring(view, placed.slot_bits)
    assert plan.leave and plan.moving == ring.range_of(giver)
    # Leaving and the receiver on its token: the receiver owns the range (a leaver sorts
    # first on a shared token), and so it stays once the leaver is on standby.
    assert view.members[giver].status is Status.LEAVING
    assert after.range_of(giver) is None
    assert [plan.receiver if old == giver else old for old in primaries(ring)] == primaries(after)
    done = Ring(with_status(view, giver, Status.STANDBY), placed.slot_bits)
    assert primaries(done) == primaries(after)


def test_moves_that_cannot_keep_r_plus_one_copies_are_refused_with_the_reason() -> None:
    ring = Ring(View([member("a", 0), member("b", 8)]), slot_bits=4)
    with pytest.raises(MoveRefused, match="needs replication r >= 1"):
        plan_move(ring, NodeId("a"), 0, Slot(4))
    with pytest.raises(MoveRefused, match="at least 3"):
        plan_move(ring, NodeId("a"), 1, Slot(4))
    three = Ring(View([member("a", 0), member("b", 8), member("c", 12)]), slot_bits=4)
    with pytest.raises(MoveRefused, match="not strictly inside"):
        plan_move(three, NodeId("a"), 1, Slot(0))
    with pytest.raises(MoveRefused, match="not strictly inside"):
        plan_move(three, NodeId("a"), 1, Slot(9))
    with pytest.raises(MoveRefused, match="owns no range"):
        plan_move(three, NodeId("nobody"), 1, Slot(2))


def test_hand_over_all_refuses_a_node_that_is_not_leaving_or_is_alone() -> None:
    with pytest.raises(ValueError, match="only owner"):
        hand_over_all(View([member("a", 0, Status.LEAVING)]), NodeId("a"))
    with pytest.raises(ValueError, match="not leaving"):
        hand_over_all(View([member("a", 0), member("b", 4)]), NodeId("a"))


def test_a_dead_receiver_still_tells_whether_it_switched() -> None:
    view = View([member("a", 0), member("b", 8), member("c", 12)])
    plan = plan_move(Ring(view, 4), NodeId("a"), 1, Slot(4))
    switched = moved_view(view, plan)
    assert move_done_in(switched.mark_dead(NodeId("b")), plan)
    assert not move_done_in(view.mark_dead(NodeId("b")), plan)


@ring_settings
@given(
    st.integers(2, 64),
    st.lists(st.floats(0, 1000), min_size=64, max_size=64),
    st.floats(0.01, 0.99),
)
def test_split_at_load_share_keeps_about_that_share_below(
    length: int, loads: list[float], keep: float
) -> None:
    rng = SlotRange(Slot(60), length, 64)
    load = {Slot((60 + i) % 64): loads[i] for i in range(length)}
    split = split_at_load_share(rng, load, keep)
    offset = (split - rng.start) % 64
    assert 0 < offset < length
    total = sum(load.values())
    below = sum(load[Slot((60 + i) % 64)] for i in range(offset))
    biggest = max(load.values())
    assert below <= keep * total + biggest + 1e-6


def test_split_at_load_share_refuses_a_share_outside_zero_and_one() -> None:
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        split_at_load_share(SlotRange(Slot(0), 8, 16), {}, 1.0)


def test_covers_is_range_inclusion_on_the_circle() -> None:
    outer = SlotRange(Slot(14), 6, 16)  # 14, 15, 0, 1, 2, 3
    assert outer.covers(SlotRange(Slot(15), 3, 16))
    assert outer.covers(outer)
    assert not outer.covers(SlotRange(Slot(3), 2, 16))
    assert not outer.covers(SlotRange(Slot(10), 2, 16))
