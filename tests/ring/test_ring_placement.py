"""Placement: one primary per slot, replica sets, ranges, roles, and minimal movement on join."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from smr.ring.hashing import even_tokens
from smr.ring.ids import NodeId, Slot, Token
from smr.ring.placement import Ring, Role, SlotRange, grown_clockwise, taken_over_in
from smr.ring.view import Member, Status, View, successor_takes_over
from tests.ring.ring_strategies import Placed, member, placed_views, primaries, sample_slots

# Rings of up to 2**16 slots are rebuilt per example; no per-example deadline for that.
ring_settings = settings(deadline=None, max_examples=40)


def brute_force_primary(owners: list[Member], slot: int) -> NodeId:
    """The definition in docs/design/architecture.md#words, literally: the owner with the greatest
    token <= slot, wrapping to the greatest token overall; ties on a token go to the later node
    id."""
    at_or_below = [m for m in owners if m.token <= slot]
    return max(at_or_below or owners, key=lambda m: (m.token, m.node_id)).node_id


@ring_settings
@given(placed_views(), st.lists(st.integers(min_value=0), max_size=64))
def test_every_slot_has_exactly_one_primary_and_it_is_the_brute_force_owner(
    placed: Placed, extra: list[int]
) -> None:
    ring = placed.ring()
    owners = placed.owners
    assert len(ring.primary_index_by_slot) == placed.slot_count
    assert all(0 <= index < len(owners) for index in ring.primary_index_by_slot)
    assert ring.owners == tuple(m.node_id for m in owners)
    for slot in sample_slots(placed, extra):
        assert ring.primary(Slot(slot)) == brute_force_primary(owners, slot)


@ring_settings
@given(placed_views(max_slot_bits=9))
def test_primary_matches_brute_force_on_every_slot_of_small_rings(placed: Placed) -> None:
    ring = placed.ring()
    owners = placed.owners
    for slot in range(placed.slot_count):
        assert ring.primary(Slot(slot)) == brute_force_primary(owners, slot)


@ring_settings
@given(placed_views(), st.integers(0, 4), st.lists(st.integers(min_value=0), max_size=32))
def test_replicas_are_the_primary_then_the_next_distinct_owners_clockwise(
    placed: Placed, r: int, extra: list[int]
) -> None:
    ring = placed.ring()
    ring_order = [m.node_id for m in placed.owners]
    n = len(ring_order)
    for slot in sample_slots(placed, extra):
        replicas = ring.replicas(Slot(slot), r)
        assert replicas[0] == ring.primary(Slot(slot))
        assert len(replicas) == min(r, n - 1) + 1
        assert len(set(replicas)) == len(replicas)
        start = ring_order.index(replicas[0])
        assert list(replicas) == [ring_order[(start + step) % n] for step in range(len(replicas))]
        assert ring.replica_set_of(replicas[0], r) == replicas


@ring_settings
@given(placed_views())
def test_ranges_partition_the_ring_and_agree_with_primary(placed: Placed) -> None:
    ring = placed.ring()
    ranges = ring.ranges()
    assert sum(slot_range.length for _, slot_range in ranges) == placed.slot_count
    assert [node_id for node_id, _ in ranges] == list(ring.owners)  # distinct tokens
    by_slot: list[NodeId | None] = [None] * placed.slot_count
    for node_id, slot_range in ranges:
        assert ring.range_of(node_id) == slot_range
        assert int(slot_range.start) == placed.view.members[node_id].token
        for slot in slot_range.slots():
            assert by_slot[slot] is None
            by_slot[slot] = node_id
    assert by_slot == primaries(ring)


@ring_settings
@given(placed_views(max_slot_bits=10, max_owners=12), st.integers(0, 4))
def test_roles_give_each_slot_one_primary_and_min_r_n_minus_1_secondaries(
    placed: Placed, r: int
) -> None:
    ring = placed.ring()
    n = len(ring.owners)
    tables = {node_id: ring.roles_of(node_id, r) for node_id in ring.owners}
    for slot in range(placed.slot_count):
        roles = [tables[node_id][slot] for node_id in ring.owners]
        assert roles.count(Role.PRIMARY) == 1
        assert roles.count(Role.SECONDARY) == min(r, n - 1)
        replicas = ring.replicas(Slot(slot), r)
        for node_id in ring.owners:
            assert tables[node_id][slot] == ring.role(node_id, Slot(slot), r)
            assert (tables[node_id][slot] != Role.NONE) == (node_id in replicas)


@ring_settings
@given(placed_views(), st.integers(0, 4))
def test_a_nodes_primary_role_covers_exactly_its_range(placed: Placed, r: int) -> None:
    ring = placed.ring()
    node_id = ring.owners[0]
    table = ring.roles_of(node_id, r)
    assert len(table) == placed.slot_count
    slot_range = ring.range_of(node_id)
    assert slot_range is not None
    assert table.count(Role.PRIMARY) == slot_range.length
    assert all(table[slot] == Role.PRIMARY for slot in slot_range.slots())


@ring_settings
@given(placed_views(), st.data())
def test_adding_a_node_moves_only_the_top_of_the_range_its_token_lands_in_to_it(
    placed: Placed, data: st.DataObject
) -> None:
    count = placed.slot_count
    taken = {m.token for m in placed.owners}
    assume(len(taken) < count)
    new_token = data.draw(st.integers(0, count - 1).filter(lambda t: t not in taken))
    newcomer = member("newcomer", new_token, incarnation=0, version=0)
    before = placed.ring()
    after = Ring(placed.view.with_member(newcomer), placed.slot_bits)

    host = before.primary(Slot(new_token))
    host_range = before.range_of(host)
    assert host_range is not None
    moved = SlotRange(Slot(new_token), (host_range.end - new_token) % count, count)
    assert moved.length >= 1
    assert after.range_of(NodeId("newcomer")) == moved
    expected = primaries(before)
    for slot in moved.slots():
        assert host_range.contains(slot)
        expected[slot] = NodeId("newcomer")
    assert primaries(after) == expected


@ring_settings
@given(placed_views(), st.data())
def test_non_owning_members_do_not_change_placement(placed: Placed, data: st.DataObject) -> None:
    status = data.draw(st.sampled_from([Status.JOINING, Status.DEAD, Status.STANDBY]))
    token = data.draw(st.integers(0, placed.slot_count - 1))
    bystander = member("bystander", token, status)
    assert (
        Ring(placed.view.with_member(bystander), placed.slot_bits).primary_index_by_slot
        == placed.ring().primary_index_by_slot
    )


# -- examples ---------------------------------------------------------------------------------


def test_primary_is_the_greatest_token_at_or_below_the_slot_wrapping_to_the_last() -> None:
    ring = Ring(View([member("a", 4), member("b", 10), member("c", 12)]), slot_bits=4)
    assert [ring.primary(Slot(s)) for s in range(16)] == (
        ["c"] * 4 + ["a"] * 6 + ["b"] * 2 + ["c"] * 4
    )
    assert ring.range_of(NodeId("c")) == SlotRange(Slot(12), 8, 16)
    assert ring.range_of(NodeId("c")).end == 4  # type: ignore[union-attr]
    assert ring.replicas(Slot(0), 1) == ("c", "a")
    assert ring.replicas(Slot(11), 5) == ("b", "c", "a")


def test_of_two_owners_on_one_token_the_later_node_id_owns_the_range() -> None:
    ring = Ring(View([member("a", 3), member("b", 3), member("c", 9)]), slot_bits=4)
    assert ring.owners == ("a", "b", "c")
    assert ring.primary(Slot(3)) == "b"
    assert ring.range_of(NodeId("a")) is None
    assert ring.range_of(NodeId("b")) == SlotRange(Slot(3), 6, 16)
    assert [node_id for node_id, _ in ring.ranges()] == ["b", "c"]
    assert ring.roles_of(NodeId("a"), 0).count(Role.PRIMARY) == 0


def test_owners_all_on_one_token_give_the_whole_ring_to_the_last() -> None:
    ring = Ring(View([member("a", 5), member("b", 5)]), slot_bits=3)
    assert {ring.primary(Slot(s)) for s in range(8)} == {"b"}
    assert ring.range_of(NodeId("b")) == SlotRange(Slot(5), 8, 8)


def test_a_single_owner_owns_the_whole_ring_and_has_no_secondaries() -> None:
    ring = Ring(View([member("solo", 5)]), slot_bits=4)
    assert ring.range_of(NodeId("solo")) == SlotRange(Slot(5), 16, 16)
    assert ring.replicas(Slot(0), 3) == ("solo",)
    assert ring.roles_of(NodeId("solo"), 3) == bytearray([Role.PRIMARY]) * 16


def test_leaving_owners_still_own_and_dead_joining_standby_do_not() -> None:
    view = View(
        [
            member("up", 0),
            member("leaving", 4, Status.LEAVING),
            member("dead", 8, Status.DEAD),
            member("joining", 10, Status.JOINING),
            member("standby", 12, Status.STANDBY),
        ]
    )
    ring = Ring(view, slot_bits=4)
    assert ring.owners == ("up", "leaving")
    assert ring.range_of(NodeId("dead")) is None
    assert ring.range_of(NodeId("joining")) is None
    assert ring.roles_of(NodeId("standby"), 2) == bytearray(16)
    assert ring.roles_of(NodeId("dead"), 2) == bytearray(16)


def test_a_joiner_is_an_extra_secondary_of_the_owners_whose_replica_sets_it_will_enter() -> None:
    # Owners a@0, b@4, c@8, d@12; j joins at 6, inside b's range [4, 8).
    view = View([member(name, token) for name, token in zip("abcd", (0, 4, 8, 12), strict=True)])
    ring = Ring(view.with_member(member("j", 6, Status.JOINING)), slot_bits=4)
    assert ring.joiners == ("j",)
    assert ring.range_of(NodeId("j")) is None
    # r = 1: after the join, j backs b up ([4, 6)) and owns [6, 8): it takes b's range in.
    assert ring.replica_set_of(NodeId("b"), 1) == ("b", "c", "j")
    assert ring.replica_set_of(NodeId("a"), 1) == ("a", "b")
    assert ring.predecessors(NodeId("j"), 1) == ("b",)
    assert [ring.role(NodeId("j"), Slot(s), 1) for s in range(16)] == [
        Role.SECONDARY if 4 <= s < 8 else Role.NONE for s in range(16)
    ]
    # r = 2: a's replica set will hold j too (a, b, j).
    assert ring.replica_set_of(NodeId("a"), 2) == ("a", "b", "c", "j")
    assert ring.predecessors(NodeId("j"), 2) == ("b", "a")
    assert ring.roles_of(NodeId("j"), 2) == bytearray([Role.SECONDARY] * 8 + [Role.NONE] * 8)


def test_a_ring_without_owners_builds_but_has_no_primary() -> None:
    ring = Ring(View([member("dead", 3, Status.DEAD)]), slot_bits=4)
    assert ring.owners == ()
    assert ring.ranges() == []
    with pytest.raises(LookupError, match="no live owner in the view"):
        ring.primary(Slot(0))
    with pytest.raises(LookupError):
        ring.replicas(Slot(0), 1)
    assert ring.roles_of(NodeId("dead"), 1) == bytearray(16)


def test_queries_refuse_slots_off_the_ring_and_negative_r() -> None:
    ring = Ring(View([member("a", 0)]), slot_bits=4)
    with pytest.raises(ValueError, match="slot 16"):
        ring.primary(Slot(16))
    with pytest.raises(ValueError, match="slot -1"):
        ring.primary(Slot(-1))
    with pytest.raises(ValueError, match="r must be >= 0"):
        ring.replicas(Slot(0), -1)
    with pytest.raises(ValueError, match="r must be >= 0"):
        ring.roles_of(NodeId("a"), -1)
    with pytest.raises(KeyError, match="ghost"):
        ring.replica_set_of(NodeId("ghost"), 1)


def test_a_token_beyond_the_slot_count_is_refused_when_building_the_ring() -> None:
    with pytest.raises(ValueError, match="token 16"):
        Ring(View([member("a", 16)]), slot_bits=4)


def test_a_ring_of_a_million_slots_builds_fast_enough_to_rebuild_per_view() -> None:
    view = View(member(f"n{i}", token) for i, token in enumerate(even_tokens(64, 20)))
    ring = Ring(view, slot_bits=20)
    assert len(ring.primary_index_by_slot) == 2**20
    assert ring.primary(Slot(2**20 - 1)) == "n63"


def test_slot_range_arithmetic_wraps() -> None:
    wrapping = SlotRange(Slot(14), 4, 16)
    assert list(wrapping.slots()) == [14, 15, 0, 1]
    assert wrapping.end == 2
    assert wrapping.share == 0.25
    assert wrapping.contains(15) and wrapping.contains(0) and wrapping.contains(1)
    assert not wrapping.contains(2) and not wrapping.contains(13) and not wrapping.contains(16)
    whole = SlotRange(Slot(3), 16, 16)
    assert whole.end == 3 and all(whole.contains(s) for s in range(16))
    assert not any(SlotRange(Slot(3), 0, 16).contains(s) for s in range(16))


@pytest.mark.parametrize(
    ("start", "length", "count"), [(16, 1, 16), (-1, 1, 16), (0, 17, 16), (0, -1, 16), (0, 0, 0)]
)
def test_slot_range_is_validated(start: int, length: int, count: int) -> None:
    with pytest.raises(ValueError):
        SlotRange(Slot(start), length, count)


def test_role_values_are_the_bytes_of_the_lookup_table() -> None:
    assert (Role.NONE, Role.PRIMARY, Role.SECONDARY) == (0, 1, 2)


def test_replica_sets_are_cached_per_owner_and_r() -> None:
    ring = Ring(View([member("a", 0), member("b", 5), member("c", 9)]), slot_bits=4)
    assert ring.replica_set_of(NodeId("a"), 1) is ring.replica_set_of(NodeId("a"), 1)
    assert ring.replica_set_of(NodeId("c"), 1) == ("c", "a")


def test_token_type_is_an_int_slot_number() -> None:
    assert Token(3) == 3


@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.just(n), st.lists(st.integers(0, 255), min_size=n, max_size=n, unique=True)
        )
    ),
    st.integers(0, 4),
)
def test_predecessors_are_exactly_the_owners_whose_replica_sets_include_the_node(
    sized_tokens: tuple[int, list[int]], r: int
) -> None:
    from smr.ring.ids import NodeId, Token
    from smr.ring.placement import Ring
    from smr.ring.view import Member, Status, View

    n, tokens = sized_tokens
    view = View(
        Member(NodeId(f"n{i}"), 1, "", Token(t), "", Status.UP, 1) for i, t in enumerate(tokens)
    )
    ring = Ring(view, 8)
    for node in ring.owners:
        predecessors = ring.predecessors(node, r)
        backed_up = {o for o in ring.owners if o != node and node in ring.replica_set_of(o, r)}
        assert set(predecessors) == backed_up
        assert len(predecessors) == min(r, n - 1)
        if predecessors:
            assert ring.replica_set_of(predecessors[0], 1)[-1] == node


@given(placed_views(min_owners=2, max_slot_bits=10), st.data())
def test_a_takeover_never_grows_a_range_clockwise_but_a_death_without_one_does(
    placed: Placed, data: st.DataObject
) -> None:
    view, slot_bits = placed.view, placed.slot_bits
    dead = data.draw(st.sampled_from([m.node_id for m in placed.owners]))
    before = Ring(view, slot_bits)
    assert grown_clockwise(before, Ring(successor_takes_over(view, dead), slot_bits)) == []
    forged = Ring(view.mark_dead(dead), slot_bits)
    # The dead node's counter-clockwise neighbour would take its slots with no state.
    assert grown_clockwise(before, forged) != []


@given(placed_views(min_owners=3, max_owners=10, min_slot_bits=6, max_slot_bits=10), st.data())
def test_a_takeover_then_a_move_of_the_takers_top_does_not_grow_it_clockwise(
    placed: Placed, data: st.DataObject
) -> None:
    # The taker's start moves back (the takeover) and its end moves back too (it handed the
    # top of its range on): it grew counter-clockwise only.
    from smr.ring.moves import moved_view, plan_move

    view, slot_bits = placed.view, placed.slot_bits
    owners = [m.node_id for m in placed.owners]
    dead = data.draw(st.sampled_from(owners))
    taken = successor_takes_over(view, dead)
    ring = Ring(taken, slot_bits)
    taker = ring.owners[(list(ring.owners).index(ring.primary(Slot(view.members[dead].token))))]
    own = ring.range_of(taker)
    assume(own is not None and own.length >= 2 and len(ring.owners) >= 3)
    assert own is not None
    split = Slot((own.start + data.draw(st.integers(1, own.length - 1))) % own.slot_count)
    moved = moved_view(taken, plan_move(ring, taker, 1, split))
    assert grown_clockwise(Ring(view, slot_bits), Ring(moved, slot_bits)) == []


def test_a_leaver_regaining_its_range_is_growth_only_if_its_receiver_died_untaken() -> None:
    from smr.ring.view import hand_over_all, with_status

    view = View([member("a", 0), member("b", 4), member("c", 8), member("d", 12)])
    leaving = with_status(view, NodeId("b"), Status.LEAVING)
    switched = hand_over_all(leaving, NodeId("b"))  # c moved onto b's token 4
    after_switch = Ring(switched, 4)
    assert after_switch.range_of(NodeId("b")) is None
    # Forged: c marked dead on its switched entry, nobody on token 4 but the leaver.
    forged = Ring(switched.mark_dead(NodeId("c")), 4)
    assert grown_clockwise(after_switch, forged) == ["b"]
    # The switch undone: c marked dead on its older entry (token 8), d taking it over.
    undone = Ring(successor_takes_over(leaving, NodeId("c")).merge(switched), 4)
    assert undone.range_of(NodeId("b")) is not None
    assert grown_clockwise(after_switch, undone) == []


@settings(deadline=None, max_examples=60)
@given(placed_views(min_owners=2), st.data())
def test_a_node_taken_over_by_its_successor_sees_it_and_a_mere_mark_is_not_a_takeover(
    placed: Placed, data: st.DataObject
) -> None:
    ring = placed.ring()
    owners = [o for o in ring.owners if placed.view.members[o].status is Status.UP]
    assume(owners)
    dead = data.draw(st.sampled_from(owners))
    after = Ring(successor_takes_over(placed.view, dead), placed.slot_bits)
    assert taken_over_in(ring, after, dead)
    # Only marked dead, its slots fall back on its counter-clockwise neighbour: no takeover.
    marked = Ring(placed.view.mark_dead(dead), placed.slot_bits)
    assert not taken_over_in(ring, marked, dead)


def test_a_successor_that_took_a_run_of_two_over_is_seen_though_it_sits_on_the_other_token() -> (
    None
):
    view = View([member("a", 0), member("b", 4), member("c", 8), member("d", 12)])
    before = Ring(view, 4)
    # c and b die; d takes c over (to 8), then b (to 4): nobody sits on c's token.
    both = successor_takes_over(successor_takes_over(view, NodeId("c")), NodeId("b"))
    assert all(owner.token != 8 for owner in both.owners())
    assert taken_over_in(before, Ring(both, 4), NodeId("c"))
    # A forged view marking c dead where d holds c's slots without having moved (a and b
    # gone before, d the only owner left): d never took c over.
    alone = View([member("c", 8), member("d", 12)])
    forged = alone.mark_dead(NodeId("c"))
    assert not taken_over_in(Ring(alone, 4), Ring(forged, 4), NodeId("c"))
