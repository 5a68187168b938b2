"""The router on its own, over a batcher and channels of its own: a closed batch goes to
every node of its destination's replica set; a newer view re-routes only the batches whose
replica set changed; a node refusing by an older view is sent ours; a refusal naming a
moving range holds back that range's tuples only, and the end of the hold sends them."""

from __future__ import annotations

from smr.checkpoint.ids import MapperId
from smr.mapper.batcher import Batcher
from smr.mapper.channels import Channels
from smr.mapper.router import Router
from smr.ring.hashing import even_tokens, slot_of
from smr.ring.ids import NodeId, Slot
from smr.ring.moves import plan_move
from smr.ring.placement import Ring
from smr.ring.view import Member, Status, View
from smr.wire.kinds import ChannelNumber
from smr.wire.messages import Batch, ViewReply, ViewRequest
from tests.smr.links import RecordingTransport

SLOT_BITS = 8


class Setup:
    """Three nodes on even tokens, r = 1, batches of one tuple; nobody acks."""

    def __init__(self) -> None:
        self.view = View(
            Member(NodeId(f"n{i}"), 1, f"sim://n{i}", token, "", Status.UP, 1)
            for i, token in enumerate(even_tokens(3, SLOT_BITS))
        )
        self.now = [0.0]
        self.pumps: list[int] = []
        self.transport = RecordingTransport()
        self.channels = Channels(self.transport, MapperId("m"), 16, lambda: self.now[0])
        self.batcher = Batcher(
            SLOT_BITS, 1, 1 << 20, None, None, lambda dest, rows: self.router.send(dest, rows)
        )
        self.router = Router(
            self.view, 1, self.batcher, self.channels, self.pumps.append, lambda: self.now[0], 1.0
        )
        self.ring = Ring(self.view, SLOT_BITS)

    def words_of(self, node: str, count: int = 3) -> list[str]:
        words = (f"w{i}" for i in range(10_000))
        return [w for w in words if self.ring.primary(slot_of(w, SLOT_BITS)) == node][:count]

    def sent(self, node: str, kind: type = Batch) -> list:  # type: ignore[type-arg]
        end = self.transport.ends.get(f"sim://{node}")
        return [m for m in end.sent if isinstance(m, kind)] if end else []


def test_a_closed_batch_goes_to_every_node_of_its_replica_set() -> None:
    setup = Setup()
    (word,) = setup.words_of("n0", 1)
    setup.batcher.emit(word, 1)
    replica_set = setup.ring.replica_set_of(NodeId("n0"), 1)
    for node in ("n0", "n1", "n2"):
        assert len(setup.sent(node)) == (1 if node in replica_set else 0)
    assert setup.router.tuples_sent == setup.router.batches_sent == 1


def test_a_newer_view_reroutes_only_the_batches_whose_replica_set_changed() -> None:
    setup = Setup()
    for word in setup.words_of("n0") + setup.words_of("n1"):
        setup.batcher.emit(word, 1)
    dead = setup.view.mark_dead(NodeId("n2"))
    setup.router.on_view(dead)
    assert setup.router.view_changes == 1
    # n2 held copies of n1's batches: they changed set and went out again; n0's did not.
    assert setup.router.reroutes == 3
    assert setup.router.tuples_sent == 9


def test_a_refusal_by_an_older_view_is_answered_with_ours() -> None:
    setup = Setup()
    (word,) = setup.words_of("n0", 1)
    setup.batcher.emit(word, 1)
    channel = setup.channels.get(NodeId("n0"))
    assert channel is not None
    older = setup.view  # as the node knows it; ours is newer
    setup.router.on_view(setup.view.mark_dead(NodeId("n2")))
    frozen = setup.router.slot_range(0, 0)
    setup.router.on_not_owner(channel, ChannelNumber(1), older, older.epoch, frozen)
    (push,) = setup.sent("n0", ViewReply)
    assert push.epoch == setup.router.epoch and setup.router.views_pushed == 1


def test_a_refusal_naming_a_moving_range_holds_back_its_tuples_only() -> None:
    setup = Setup()
    plan = plan_move(setup.ring, NodeId("n0"), 1, Slot(40))
    words = (f"w{i}" for i in range(10_000))
    moving = [w for w in words if plan.moving.contains(slot_of(w, SLOT_BITS))][:2]
    channel = setup.channels.to(NodeId("n0"), "sim://n0")
    for word in moving:
        setup.batcher.emit(word, 1)
    setup.router.on_not_owner(channel, ChannelNumber(1), setup.view, setup.view.epoch, plan.moving)
    assert setup.router.held_rows == 2 and setup.router.holds_for(NodeId("n0"))
    assert setup.sent("n1", ViewRequest)  # the other nodes were asked for news
    before = len(setup.sent("n0"))
    setup.router.release_held()
    assert setup.router.held_rows == 0 and setup.router.held_since is None
    assert len(setup.sent("n0")) > before


def test_a_hold_goes_stale_after_a_resend_interval() -> None:
    setup = Setup()
    plan = plan_move(setup.ring, NodeId("n0"), 1, Slot(40))
    channel = setup.channels.to(NodeId("n0"), "sim://n0")
    setup.router.on_not_owner(channel, ChannelNumber(1), setup.view, setup.view.epoch, plan.moving)
    assert not setup.router.holds_stale(0.5)
    assert setup.router.holds_stale(1.0)


def test_view_requests_are_rate_limited() -> None:
    setup = Setup()
    channels = setup.router.live_channels()
    setup.router.ask_view(channels)
    setup.router.ask_view(channels)
    assert len(setup.sent("n0", ViewRequest)) == 1
    setup.now[0] += 0.25
    setup.router.ask_view(channels)
    assert len(setup.sent("n0", ViewRequest)) == 2
