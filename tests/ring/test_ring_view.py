"""The view: merge by precedence, epoch, and the wire format fed by untrusted peers."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smr.ring.ids import NodeId, Token
from smr.ring.view import OWNING_STATUSES, Member, Status, View
from tests.ring.ring_strategies import any_members, colliding_members, colliding_views, member

# -- merge ------------------------------------------------------------------------------------


@given(colliding_views(), colliding_views())
def test_merge_is_commutative(a: View, b: View) -> None:
    assert a.merge(b) == b.merge(a)


@given(colliding_views(), colliding_views(), colliding_views())
def test_merge_is_associative(a: View, b: View, c: View) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@given(colliding_views())
def test_merge_is_idempotent(a: View) -> None:
    assert a.merge(a) == a


@given(colliding_views(), colliding_views())
def test_merge_keeps_per_node_the_entry_of_highest_precedence(a: View, b: View) -> None:
    merged = a.merge(b)
    assert set(merged.members) == set(a.members) | set(b.members)
    for node_id, kept in merged.members.items():
        candidates = [v.members[node_id] for v in (a, b) if node_id in v.members]
        assert kept == max(candidates, key=Member.precedence)


@given(st.lists(colliding_members(), max_size=8))
def test_constructor_keeps_the_max_of_duplicate_entries_like_merge(members: list[Member]) -> None:
    one_by_one = View()
    for entry in members:
        one_by_one = one_by_one.with_member(entry)
    assert View(members) == one_by_one


@given(colliding_views(), colliding_views())
def test_epoch_never_decreases_under_merge(a: View, b: View) -> None:
    merged = a.merge(b)
    assert merged.epoch >= a.epoch
    assert merged.epoch >= b.epoch


@given(colliding_views(), colliding_views())
def test_epoch_rises_whenever_a_merge_brings_news(a: View, b: View) -> None:
    def counted(view: View) -> dict[NodeId, tuple[int, bool, int]]:
        return {
            node_id: (m.incarnation, m.status is Status.DEAD, m.version)
            for node_id, m in view.members.items()
        }

    merged = a.merge(b)
    if counted(merged) != counted(a):
        assert merged.epoch > a.epoch
    else:
        assert merged.epoch == a.epoch


def test_epoch_does_not_drop_when_a_new_incarnation_restarts_its_version() -> None:
    old = View([member("a", 0, incarnation=1, version=40)])
    new = View([member("a", 0, incarnation=2, version=0)])
    assert old.merge(new).epoch > old.epoch


def test_a_newer_incarnation_beats_any_version_of_an_older_one() -> None:
    old = member("a", 5, Status.DEAD, incarnation=1, version=9)
    new = member("a", 7, Status.JOINING, incarnation=2, version=0)
    assert View([old]).merge(View([new])).get(NodeId("a")) == new


def test_the_higher_version_wins_within_an_incarnation() -> None:
    older = member("a", 5, version=3)
    newer = member("a", 9, Status.LEAVING, version=4)
    assert View([older, newer]).get(NodeId("a")) == newer


def test_dead_wins_on_equal_versions() -> None:
    self_update = member("a", 5, Status.LEAVING, version=4)
    marked = member("a", 5, Status.DEAD, version=4)
    assert View([self_update]).merge(View([marked])).get(NodeId("a")) == marked
    assert View([marked]).merge(View([self_update])).get(NodeId("a")) == marked


def test_dead_is_final_for_its_incarnation_even_against_later_versions() -> None:
    # A partitioned node kept moving its token after a peer marked it dead; when the
    # partition heals it must stay dead (and rejoin as a new incarnation), not resurrect.
    marked = member("a", 5, Status.DEAD, version=4)
    partitioned = member("a", 3, Status.UP, version=9)
    assert View([marked]).merge(View([partitioned])).get(NodeId("a")) == marked


def test_mark_dead_writes_the_entry_dead_at_the_next_version() -> None:
    view = View([member("a", 0, version=7), member("b", 8)])
    after = view.mark_dead(NodeId("a"))
    assert after.get(NodeId("a")) == dataclasses.replace(
        view.members[NodeId("a")], status=Status.DEAD, version=8
    )
    assert after.get(NodeId("b")) == view.get(NodeId("b"))
    assert after.epoch > view.epoch
    assert view.get(NodeId("a")) == member("a", 0, version=7)  # the old view is unchanged


def test_mark_dead_of_an_unknown_node_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="ghost"):
        View([member("a", 0)]).mark_dead(NodeId("ghost"))


def test_with_member_ignores_a_stale_entry() -> None:
    view = View([member("a", 0, version=5)])
    assert view.with_member(member("a", 9, version=4)) == view


@given(colliding_views())
def test_owners_are_the_up_and_leaving_members_in_token_then_id_order(view: View) -> None:
    # On one token a leaving owner sorts first: the owner that took its range over (moving
    # onto its token) is the later one, which owns the range.
    owners = view.owners()
    assert {m.node_id for m in owners} == {
        m.node_id for m in view.members.values() if m.status in OWNING_STATUSES
    }
    assert list(owners) == sorted(
        owners, key=lambda m: (m.token, m.status is not Status.LEAVING, m.node_id)
    )


def test_members_mapping_is_read_only() -> None:
    view = View([member("a", 0)])
    with pytest.raises(TypeError):
        view.members[NodeId("b")] = member("b", 1)  # type: ignore[index]


def test_views_are_compared_by_content_and_are_not_hashable() -> None:
    assert View([member("a", 0), member("b", 1)]) == View([member("b", 1), member("a", 0)])
    assert View([member("a", 0)]) != View([member("a", 1)])
    assert View() != "not a view"
    with pytest.raises(TypeError):
        hash(View())


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("node_id", "", ValueError),
        ("node_id", 3, TypeError),
        ("incarnation", -1, ValueError),
        ("incarnation", 2**32, ValueError),
        ("incarnation", True, TypeError),
        ("version", -1, ValueError),
        ("version", 1.0, TypeError),
        ("token", 2**20, ValueError),
        ("token", -1, ValueError),
        ("status", "up", TypeError),
        ("addr", None, TypeError),
        ("zone", b"z", TypeError),
    ],
)
def test_a_member_is_validated_on_construction(field: str, value: object, error: type) -> None:
    fields: dict[str, Any] = {field: value}
    with pytest.raises(error, match=field):
        dataclasses.replace(member("a", 0), **fields)


# -- wire -------------------------------------------------------------------------------------


@given(any_members())
def test_member_wire_round_trips(entry: Member) -> None:
    assert Member.from_wire(entry.to_wire()) == entry
    assert Member.from_wire(tuple(entry.to_wire())) == entry


@given(st.lists(any_members(), max_size=6).map(View))
def test_view_wire_round_trips(view: View) -> None:
    assert View.from_wire(view.to_wire()) == view


def test_member_wire_is_the_fields_in_declaration_order() -> None:
    entry = Member(NodeId("n1"), 2, "tcp://h:1", Token(9), "z", Status.LEAVING, 5)
    assert entry.to_wire() == ["n1", 2, "tcp://h:1", 9, "z", "leaving", 5]


junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.sampled_from([s.value for s in Status]),
    lambda children: (
        st.lists(children, max_size=8)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=30,
)


@given(junk)
def test_member_from_wire_of_junk_raises_value_error_only(obj: object) -> None:
    try:
        parsed = Member.from_wire(obj)
    except ValueError:
        return
    assert parsed.to_wire() == list(obj)  # type: ignore[call-overload]


@given(junk)
def test_view_from_wire_of_junk_raises_value_error_only(obj: object) -> None:
    try:
        parsed = View.from_wire(obj)
    except ValueError:
        return
    assert isinstance(parsed, View)


@given(st.from_type(object))
def test_from_wire_of_any_python_value_raises_value_error_only(obj: object) -> None:
    for parse in (Member.from_wire, View.from_wire):
        try:
            parsed = parse(obj)
        except ValueError:
            continue
        assert isinstance(parsed, Member | View)


@given(any_members(), st.data())
def test_member_from_wire_with_one_field_replaced_by_junk_is_parsed_or_refused(
    entry: Member, data: st.DataObject
) -> None:
    wire: list[object] = list(entry.to_wire())
    index = data.draw(st.integers(0, len(wire) - 1))
    wire[index] = data.draw(junk)
    try:
        parsed = Member.from_wire(wire)
    except ValueError:
        return
    assert parsed.to_wire() == wire  # accepted only if it is a valid member as it stands


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (["a", 1, "tcp://a:1", 0, "z", "up"], "list of 7"),
        (["a", 1, "tcp://a:1", 0, "z", "up", 1, 1], "list of 7"),
        ({"node_id": "a"}, "list of 7"),
        ("a,1,tcp://a:1,0,z,up,1", "list of 7"),
        (["a", 1, "tcp://a:1", 0, "z", "zombie", 1], "status"),
        (["a", 1, "tcp://a:1", 0, "z", 1, 1], "status"),
        (["a", 1, "tcp://a:1", 0, "z", ["up"], 1], "status"),
        (["a", -1, "tcp://a:1", 0, "z", "up", 1], "incarnation"),
        (["a", 1, "tcp://a:1", -5, "z", "up", 1], "token"),
        (["a", 1, "tcp://a:1", 0, "z", "up", -1], "version"),
        (["a", 1, "tcp://a:1", 0, "z", "up", 2**64], "version"),
        (["a", True, "tcp://a:1", 0, "z", "up", 1], "incarnation"),
        (["a", 1, "tcp://a:1", 0.0, "z", "up", 1], "token"),
        ([b"a", 1, "tcp://a:1", 0, "z", "up", 1], "node_id"),
        (["", 1, "tcp://a:1", 0, "z", "up", 1], "node_id"),
        (["a", 1, None, 0, "z", "up", 1], "addr"),
        (["a", 1, "tcp://a:1", 0, 7, "up", 1], "zone"),
    ],
)
def test_member_from_wire_names_what_is_malformed(wire: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Member.from_wire(wire)


@pytest.mark.parametrize("wire", [None, 3, "view", {"a": 1}, [["a"]], [None]])
def test_view_from_wire_refuses_anything_but_a_list_of_members(wire: object) -> None:
    with pytest.raises(ValueError):
        View.from_wire(wire)


def test_view_from_wire_merges_duplicate_entries() -> None:
    old, new = member("a", 0, version=1), member("a", 4, version=2)
    assert View.from_wire([new.to_wire(), old.to_wire()]) == View([new])


def test_error_messages_about_huge_junk_are_bounded() -> None:
    with pytest.raises(ValueError) as raised:
        Member.from_wire(["x" * 100_000])
    assert len(str(raised.value)) < 1000
