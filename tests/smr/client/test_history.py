"""A mapper id's history, asked of the primaries of every slot: the runs no answer covers,
what the answers tell together, and a check that cannot hear every primary (or meets lost
slots) raising rather than passing."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smr.checkpoint.ids import MapperId
from smr.client.control import NodeUnreachable
from smr.client.history import (
    HistoryUnknown,
    MapperHistory,
    MapperIdReused,
    combine,
    mapper_history,
    uncovered,
)
from smr.ring.hashing import even_tokens
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import Ring, SlotRange
from smr.ring.view import Member, Status, View
from smr.wire.kinds import RequestId
from smr.wire.reads import HistoryReply

SLOT_BITS = 6
SLOT_COUNT = 1 << SLOT_BITS


@st.composite
def slot_ranges(draw: Any) -> SlotRange:
    start = draw(st.integers(0, SLOT_COUNT - 1))
    return SlotRange(Slot(start), draw(st.integers(0, SLOT_COUNT)), SLOT_COUNT)


@given(st.lists(slot_ranges(), max_size=6))
def test_uncovered_runs_are_exactly_the_slots_no_range_holds(ranges: list[SlotRange]) -> None:
    runs = uncovered(ranges, SLOT_COUNT)
    missing = [slot for run in runs for slot in run.slots()]
    assert missing == sorted(
        slot for slot in range(SLOT_COUNT) if not any(r.contains(slot) for r in ranges)
    )
    # Runs are maximal: two runs never touch.
    assert all(a.start + a.length < b.start for a, b in itertools.pairwise(runs))


def test_the_answers_together_tell_the_slots_the_highest_seq_and_the_finish() -> None:
    replies = [
        HistoryReply(RequestId(1), Slot(0), 32, slots=3, seq_max=70, last=None, lost=0),
        HistoryReply(RequestId(1), Slot(32), 32, slots=4, seq_max=90, last=95, lost=0),
    ]
    history = combine(MapperId("m"), replies)
    assert history == MapperHistory(MapperId("m"), slots=7, seq_max=90, finished_at=95)
    assert history.used and history.describe() == "to 7 slots, seqs up to 90; finished at seq 95"
    assert not combine(MapperId("m"), []).used
    assert MapperHistory(MapperId("m"), finished_at=0).used  # finished with nothing sent
    assert str(MapperIdReused(history, "use a new id")) == (
        "mapper id m already delivered tuples (to 7 slots, seqs up to 90; finished at seq "
        "95); use a new id"
    )


class Nodes:
    """A client whose nodes answer by a table: addr -> reply, or an exception."""

    def __init__(self, view: View) -> None:
        self.view = view
        ring = Ring(view, SLOT_BITS)
        self.answers: dict[str, Any] = {}
        for node, slot_range in ring.ranges():
            reply = HistoryReply(RequestId(1), slot_range.start, slot_range.length, 0, 0, None, 0)
            self.answers[view.members[node].addr] = reply
        self.asked = 0

    def history_each(self, addrs: list[str], mapper: MapperId) -> dict[str, Any]:
        self.asked += 1
        return {addr: self.answers[addr] for addr in addrs}


def _view() -> View:
    return View(
        Member(NodeId(f"n{i}"), 1, f"sim://n{i}", token, "", Status.UP, 1)
        for i, token in enumerate(even_tokens(3, SLOT_BITS))
    )


def test_answers_covering_every_slot_give_the_history_at_once() -> None:
    nodes = Nodes(_view())
    history = mapper_history(nodes, lambda refresh: nodes.view, SLOT_BITS, MapperId("m"), 1.0)  # type: ignore[arg-type]
    assert history == MapperHistory(MapperId("m")) and nodes.asked == 1


def test_a_primary_that_does_not_answer_makes_the_history_unknown_never_empty() -> None:
    nodes = Nodes(_view())
    reply = nodes.answers["sim://n1"]
    nodes.answers["sim://n1"] = NodeUnreachable("node at sim://n1 did not answer within 1 ms")
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(HistoryUnknown) as unknown:
        mapper_history(
            nodes,  # type: ignore[arg-type]
            lambda refresh: nodes.view,
            SLOT_BITS,
            MapperId("m"),
            0.2,
            clock=lambda: now[0],
            sleep=sleep,
        )
    end = reply.start + reply.length - 1
    assert str(unknown.value) == (
        "cannot tell whether mapper id m was used before within 0.2 s: n1: node at sim://n1 "
        f"did not answer within 1 ms; no primary answered for slots {reply.start}-{end}"
    )
    # Asked again by a fresher view until the timeout, on the caller's clock.
    assert nodes.asked == 5 and now[0] == pytest.approx(0.2)


def test_lost_slots_make_the_history_unknown_at_once() -> None:
    nodes = Nodes(_view())
    reply = nodes.answers["sim://n2"]
    nodes.answers["sim://n2"] = HistoryReply(
        reply.req, reply.start, reply.length, 0, 0, None, lost=5
    )
    with pytest.raises(HistoryUnknown, match="5 slots are lost"):
        mapper_history(nodes, lambda refresh: nodes.view, SLOT_BITS, MapperId("m"), 5.0)  # type: ignore[arg-type]
    assert nodes.asked == 1
