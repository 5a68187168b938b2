"""Handing state back after a false verdict (``smr.node.handoff``), between two handoffs
alone: each receives a seat, peers, the clock, the settings, its store, its loss ledger, the
counters and the snapshots' ``follow_secondaries``; the messages one sends are handed to the
other."""

from __future__ import annotations

from dataclasses import replace

from smr.checkpoint.ids import MapperId
from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.handoff import FENCED_COPY_KEEP_S, Handoff
from smr.node.ports import Seat
from smr.node.settings import NodeCounters, NodeSettings
from smr.ring.ids import Incarnation, NodeId, Slot
from smr.ring.placement import Ring
from smr.wire.peer import StateReply, StateRequest
from tests.smr.node.fakes import FakePeers, two_node_seat

A, B = NodeId("a"), NodeId("b")
LOST = {Slot(200), Slot(201)}


class Following:
    def __init__(self) -> None:
        self.calls: list[tuple[tuple[NodeId, ...], bool]] = []

    def follow_secondaries(self, secondaries: tuple[NodeId, ...], changed_range: bool) -> None:
        self.calls.append((secondaries, changed_range))


class Side:
    """One node's handoff with its parts."""

    def __init__(self, seat: Seat) -> None:
        self.now = 10.0
        self.seat = seat
        self.peers = FakePeers()
        self.store = StateStore()
        self.ledger = LossLedger()
        self.counters = NodeCounters()
        self.following = Following()
        self.handoff = Handoff(
            lambda: self.seat,
            self.peers,
            lambda: self.now,
            NodeSettings(),
            lambda: self.store,
            self.ledger,
            self.counters,
            self.following,
        )


def _back_as_next_incarnation(seat: Seat, node: NodeId) -> Seat:
    member = seat.view.members[node]
    view = seat.view.with_member(replace(member, incarnation=2, version=member.version + 1))
    return replace(seat, view=view, ring=Ring(view, 8))


def test_a_fenced_copy_goes_back_to_the_taker_and_restores_only_the_lost_slots() -> None:
    taker, fenced = Side(two_node_seat("a")), Side(two_node_seat("b"))
    # b served slots 200 and 201 (and 202) as incarnation 1, then was fenced.
    fenced.store.apply_batch(
        MapperId("m"),
        [200, 201, 202],
        [1, 1, 1],
        ["x", "y", "z"],
        [1, 2, 3],
        lambda key, value, state: state.update(n=value),
    )
    fenced.handoff.keep(fenced.store, Incarnation(1))
    fenced.store = StateStore()
    assert fenced.handoff.holds_copy
    # a took b over and found two of its slots lost; b is back as incarnation 2.
    taker.ledger.mark(taker.store, LOST)
    taker.handoff.note_lost(B, Incarnation(1), LOST)
    assert taker.handoff.awaited() == {}
    taker.seat = _back_as_next_incarnation(taker.seat, B)
    assert taker.handoff.awaited() == {B: LOST}
    taker.handoff.ask(taker.now)
    ((to, request),) = taker.peers.sent
    assert to == B and isinstance(request, StateRequest)
    fenced.handoff.on_request(b"a", request)
    ((back, reply),) = fenced.peers.sent
    assert back == A and isinstance(reply, StateReply) and reply.copy_of == 1
    taker.handoff.on_reply(b"b", reply)
    assert taker.ledger.count() == 0 and taker.counters.slots_restored == 2
    assert taker.store.get(Slot(200), "x") == {"n": 1} and taker.store.get(Slot(202), "z") is None
    assert taker.following.calls == [(taker.seat.secondaries, True)]
    assert taker.handoff.awaited() == {}


def test_a_fenced_copy_is_forgotten_after_its_time() -> None:
    side = Side(two_node_seat("b"))
    side.handoff.keep(StateStore(), Incarnation(1))
    side.handoff.ask(side.now + FENCED_COPY_KEEP_S - 1)
    assert side.handoff.holds_copy
    side.handoff.ask(side.now + FENCED_COPY_KEEP_S)
    assert not side.handoff.holds_copy
