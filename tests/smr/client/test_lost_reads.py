"""How a read names lost slots (``smr.client.control``): ranges that cover exactly the slots, and
an error that says what is lost and how to read the rest."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import smr
from smr.client.control import NodeUnreachable, describe_slots


def slots_named(text: str) -> set[int]:
    named: set[int] = set()
    for part in text.removeprefix("slots ").removeprefix("slot ").split(", "):
        start, _, end = part.partition("-")
        named.update(range(int(start), int(end or start) + 1))
    return named


@given(st.sets(st.integers(0, 1 << 14), min_size=1, max_size=200))
def test_described_ranges_cover_exactly_the_slots(slots: set[int]) -> None:
    text = describe_slots(slots, ranges_max=1 << 14)
    assert slots_named(text) == slots


def test_a_long_list_of_ranges_is_cut_and_says_how_many_more() -> None:
    assert describe_slots([1, 2, 3, 7, 9, 11], ranges_max=2) == "slots 1-3, 7 and 2 more ranges"
    assert describe_slots([5]) == "slot 5"


def test_slots_lost_names_the_slots_and_the_way_to_a_partial_answer() -> None:
    error = smr.SlotsLost(range(4096, 8192))
    assert isinstance(error, NodeUnreachable) and error.slots == frozenset(range(4096, 8192))
    assert str(error).startswith("4,096 slots are lost (slots 4096-8191)")
    assert "--allow-lost" in str(error) and "smr recover --accept-loss" in str(error)
    one = smr.SlotsLost([17], ["whale"])
    assert str(one).startswith("key 'whale' (slot 17) is lost") and one.keys == ("whale",)
