"""The simulation's parts, each through its own interface: the delivery of messages to the
nodes (``smr.sim.delivery``), the node turns (``smr.sim.turns``), the feed's ledger
(``smr.sim.ledger``) and the check of a reader's answer (``smr.sim.read_checks``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from smr.node.core import NodeCore
from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId, Slot
from smr.sim.clock import Scheduler
from smr.sim.config import SimConfig
from smr.sim.delivery import Delivery
from smr.sim.ledger import FeedLedger
from smr.sim.network import NetworkSettings, SimClock, SimNetwork
from smr.sim.nodes import SimNode
from smr.sim.read_checks import PendingRead, ReadChecks
from smr.sim.simulation import Simulation
from smr.wire.codec import pack_body
from smr.wire.kinds import RequestId
from smr.wire.reads import QueryReply

# -- the delivery ---------------------------------------------------------------------------


@dataclass
class End:
    identity: str
    closed: bool = False
    mail: int = 0

    @property
    def inbound(self) -> Any:
        raise AssertionError("not used")

    def mail_arrived(self) -> None:
        self.mail += 1


def delivery_of(*nodes: SimNode) -> tuple[Delivery, list[SimNode]]:
    clock = SimClock()
    network = SimNetwork(clock, "test", NetworkSettings(latency_us_min=100, latency_us_max=100))
    woken: list[SimNode] = []
    delivery = Delivery(
        network, Scheduler(clock), {node.node_id: node for node in nodes}, woken.append
    )
    return delivery, woken


def test_a_message_for_a_live_node_arrives_and_wakes_it_at_its_delivery_time() -> None:
    node = SimNode(NodeId("n0"), None)
    delivery, woken = delivery_of(node)
    link = delivery.network.link("m0#1>n0", "n0")
    assert delivery.send_to_node(link, b"m0#1>n0", [b"frame"])
    assert [arrival[:3] for arrival in node.arrivals] == [(100, "m0#1>n0", 1)]
    delivery.settle()
    assert woken == [node] and delivery.scheduler.now_us == 100


def test_a_client_cannot_send_to_a_dead_node_and_a_peer_queues_unread() -> None:
    dead = SimNode(NodeId("n1"), None, killed=True)
    delivery, woken = delivery_of(dead)
    client = delivery.network.link("m0#1>n1", "n1")
    assert not delivery.send_to_node(client, b"m0#1>n1", [b"frame"])
    assert not delivery.send_to_node(delivery.network.link("x", "n9"), b"x", [b"frame"])
    assert delivery.network.stats.refused_unreachable == 2
    peer = delivery.network.link("n0", "n1")
    assert delivery.send_to_node(peer, b"peer:n0", [b"frame"], "n0", peer_link=True)
    assert len(peer.queue) == 1 and not dead.arrivals
    delivery.settle()
    assert woken == []


def test_replies_go_to_the_end_registered_under_their_identity() -> None:
    delivery, _ = delivery_of()
    end = End("reader>n0")
    delivery.connect(end)
    assert delivery.end_of("reader>n0") is end
    assert delivery.end_of("reader>n1") is None


# -- the node turns ---------------------------------------------------------------------------


def started(seed: int = 1) -> Simulation:
    simulation = Simulation(seed, nodes=3, replication=1, slot_bits=6)
    view = simulation.initial_view()
    simulation.turns.start_nodes(view, simulation, simulation.rng("timers"))
    return simulation


def test_the_turns_start_every_node_and_list_the_live_ones_in_id_order() -> None:
    simulation = started()
    turns = simulation.turns
    assert [node.node_id for node, _ in turns.live()] == ["n0", "n1", "n2"]
    turns.nodes[NodeId("n1")].killed = True
    assert list(turns.live_cores()) == ["n0", "n2"]
    assert all(isinstance(core, NodeCore) for core in turns.live_cores().values())


def test_a_timer_due_while_a_node_is_paused_is_kept_once_and_not_fired() -> None:
    simulation = started()
    paused = simulation.turns.nodes[NodeId("n0")]
    paused.pauses_active = 1
    simulation.scheduler.run_to(5 * simulation.tick_ms * 1000)
    assert paused.missed_timers.count("tick") == 1
    running = simulation.turns.nodes[NodeId("n1")]
    assert running.missed_timers == []


# -- the ledger and the checks of an answer ------------------------------------------------


def test_the_ledger_bounds_a_key_by_what_was_acknowledged_and_emitted() -> None:
    ledger = FeedLedger()
    progress = ledger.add_mapper(["a", "b", "a", "a"])
    progress.emitting(3)
    progress.acked(1)
    assert (ledger.floor("a"), ledger.ceiling("a")) == (1, 2)
    progress.acked(4)
    assert (ledger.floor("a"), ledger.ceiling("a")) == (3, 3)
    assert ledger.keys() == ["a", "b"]


@dataclass
class FakeRun:
    config: SimConfig = field(default_factory=lambda: SimConfig(slot_bits=6, strict_reads=True))
    oracle: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def live_cores(self) -> dict[NodeId, NodeCore]:
        return {}

    def note(self, text: str) -> None:
        self.notes.append(text)


class NoRereads:
    def query(self, node: NodeId, keys: list[str], final: bool = False) -> None:
        raise AssertionError("no re-read expected")

    def dump(self, node: NodeId, start: int, end: int, final: bool = False) -> None:
        raise AssertionError("no re-read expected")


def answer_count(count: int, floor: int) -> Counter[str]:
    ledger = FeedLedger()
    ledger.add_mapper(["a", "a", "a"]).emitting(2)
    tally: Counter[str] = Counter()
    checks = ReadChecks(FakeRun(), ledger, {}, tally, NoRereads())  # type: ignore[arg-type]
    slot = slot_of("a", 6)
    read = PendingRead(NodeId("n0"), "query", 0, ["a"], {"a": floor})
    reply = QueryReply(RequestId(1), pack_body([{"owner": True, "slot": slot, "state": None}]))
    if count:
        state = {"owner": True, "slot": slot, "state": {"count": count}}
        reply = QueryReply(RequestId(1), pack_body([state]))
    checks.answer(read, reply, set[Slot]())
    return tally


def test_a_count_within_its_bounds_is_served() -> None:
    assert answer_count(2, floor=1) == {"served": 1}


def test_a_count_above_what_was_emitted_is_a_tuple_applied_twice() -> None:
    with pytest.raises(AssertionError, match="applied twice"):
        answer_count(3, floor=1)


def test_a_count_below_what_was_acknowledged_fails_the_run() -> None:
    with pytest.raises(AssertionError, match="below the 1 tuples acknowledged"):
        answer_count(0, floor=1)
