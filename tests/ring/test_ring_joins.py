"""Joins side by side (join_blocked_by): a join that the rule lets start never changes what
another joiner backs up or takes over, whichever switches first."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from smr.ring.ids import NodeId, Token
from smr.ring.moves import join_blocked_by, plan_join
from smr.ring.placement import Ring
from smr.ring.view import Member, Status, View, join_view, joining_at
from tests.ring.ring_strategies import Placed, member, placed_views

ring_settings = settings(deadline=None, max_examples=80)


def _with_joiners(placed: Placed, r: int, data: st.DataObject) -> View:
    """The view after up to four standby nodes each started joining beside an owner that
    `join_blocked_by` let take one, at a token strictly inside its range."""
    view = placed.view
    for index in range(data.draw(st.integers(1, 4))):
        ring = Ring(view, placed.slot_bits)
        givers = [
            owner
            for owner, own in ring.ranges()
            if own.length >= 2 and join_blocked_by(ring, owner, r) is None
        ]
        if not givers:
            break
        giver = data.draw(st.sampled_from(givers))
        own = ring.range_of(giver)
        assert own is not None
        offset = data.draw(st.integers(1, own.length - 1))
        joiner = NodeId(f"joiner-{index}")
        view = view.with_member(
            Member(joiner, 1, f"tcp://{joiner}:7000", Token(0), "zone-j", Status.STANDBY, 0)
        )
        view = joining_at(view, joiner, Token((own.start + offset) % own.slot_count))
    return view


@ring_settings
@given(placed_views(min_owners=2, max_owners=10, min_slot_bits=6), st.integers(1, 3), st.data())
def test_a_joiner_switching_changes_nothing_another_joiner_backs_up_or_takes(
    placed: Placed, r: int, data: st.DataObject
) -> None:
    view = _with_joiners(placed, r, data)
    ring = Ring(view, placed.slot_bits)
    for first in ring.joiners:
        after = Ring(join_view(view, first), placed.slot_bits)
        for other in ring.joiners:
            if other == first:
                continue
            # The other joiner backs up the same owners, and its switch takes the same slots
            # from the same giver: the replicas it caught up stay the ones it needs.
            assert after.joined_owners(other, r) == ring.joined_owners(other, r)
            assert plan_join(after, other, r) == plan_join(ring, other, r)


def test_joins_beside_owners_fewer_than_r_apart_wait_and_r_1_only_shares_no_giver() -> None:
    owners = [member(f"n{index}", 100 * index) for index in range(5)]
    joining = member("j", 50, Status.JOINING)  # beside n0
    ring = Ring(View([*owners, joining]), 10)
    assert join_blocked_by(ring, NodeId("n0"), 1) == "j"
    assert join_blocked_by(ring, NodeId("n1"), 1) is None
    assert join_blocked_by(ring, NodeId("n4"), 1) is None
    # r = 2: the owners next to n0 on either side wait; two away does not.
    assert join_blocked_by(ring, NodeId("n1"), 2) == "j"
    assert join_blocked_by(ring, NodeId("n4"), 2) == "j"
    assert join_blocked_by(ring, NodeId("n2"), 2) is None
    assert join_blocked_by(Ring(View(owners), 10), NodeId("n0"), 2) is None


def test_why_neighbours_wait_at_r_2_a_switch_changes_what_the_other_joiner_backs_up() -> None:
    owners = [member(f"n{index}", 100 * index) for index in range(5)]
    view = View([*owners, member("a", 50, Status.JOINING), member("b", 150, Status.JOINING)])
    before = Ring(view, 10)
    after = Ring(join_view(view, NodeId("a")), 10)
    assert before.joined_owners(NodeId("b"), 2) == ("n1", "n0")
    assert after.joined_owners(NodeId("b"), 2) == ("n1", "a")
