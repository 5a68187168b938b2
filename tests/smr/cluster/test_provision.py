"""Provisioners: the standby pool hands out nodes on standby first, and refills."""

from __future__ import annotations

from typing import Any

import pytest

from smr.client.control import NodeUnreachable
from smr.cluster.provision import StandbyPool
from smr.ring.ids import NodeId, Token
from smr.spec.model import NodeSpec


class Started:
    """An inner provisioner that records what it starts (nodes on standby at once)."""

    def __init__(self, running: list[NodeSpec]) -> None:
        self.running = running
        self.stopped: list[str] = []

    def start(self, zone: str | None = None) -> NodeSpec:
        node = NodeSpec(
            NodeId(f"n{len(self.running)}"),
            f"tcp://h:{len(self.running)}",
            "",
            Token(0),
            zone=zone or "",
        )
        self.running.append(node)
        return node

    def start_many(self, count: int) -> list[NodeSpec]:
        return [self.start() for _ in range(count)]

    def stop(self, node_id: str) -> None:
        self.stopped.append(node_id)

    def nodes(self) -> list[NodeSpec]:
        return list(self.running)


class Statuses:
    """Answers status_each from a table: address -> status_in_view (None: unreachable)."""

    def __init__(self, states: dict[str, str | None]) -> None:
        self.states = states

    def status_each(self, addrs: list[str]) -> dict[str, Any]:
        return {
            addr: NodeUnreachable("down")
            if self.states.get(addr) is None
            else {"status_in_view": self.states[addr]}
            for addr in addrs
        }


def node(index: int, zone: str = "") -> NodeSpec:
    return NodeSpec(NodeId(f"n{index}"), f"tcp://h:{index}", "", Token(0), zone=zone)


def test_a_pool_hands_out_a_node_already_on_standby_and_refills() -> None:
    inner = Started([node(0), node(1)])
    statuses = Statuses({"tcp://h:0": "up", "tcp://h:1": "standby"})
    pool = StandbyPool(inner, size=1, client=statuses)  # type: ignore[arg-type]
    assert pool.start().id == "n1"
    assert [n.id for n in inner.running] == ["n0", "n1", "n2"]  # the pool refilled


def test_an_empty_pool_of_size_zero_starts_a_node_and_keeps_none() -> None:
    inner = Started([node(0)])
    pool = StandbyPool(inner, size=0, client=Statuses({"tcp://h:0": "up"}))  # type: ignore[arg-type]
    assert pool.start().id == "n1"
    assert len(inner.running) == 2


def test_fill_starts_nodes_until_the_pool_is_full_and_unreachable_ones_do_not_count() -> None:
    inner = Started([node(0), node(1)])
    statuses = Statuses({"tcp://h:0": "standby", "tcp://h:1": None})
    pool = StandbyPool(inner, size=2, client=statuses)  # type: ignore[arg-type]
    assert [n.id for n in pool.fill()] == ["n2"]


def test_a_pool_hands_out_a_standby_node_of_the_zone_asked_for_or_starts_one_there() -> None:
    inner = Started([node(0, "a"), node(1, "b")])
    statuses = Statuses({"tcp://h:0": "standby", "tcp://h:1": "standby"})
    pool = StandbyPool(inner, size=0, client=statuses)  # type: ignore[arg-type]
    assert pool.start("b").id == "n1"
    started = pool.start("c")
    assert (started.id, started.zone) == ("n2", "c")


def test_a_node_handed_out_is_not_handed_out_again_until_its_join_started() -> None:
    # Several nodes of one scale-out are handed out before any of their joins starts.
    inner = Started([node(0), node(1)])
    states: dict[str, str | None] = {"tcp://h:0": "up", "tcp://h:1": "standby"}
    pool = StandbyPool(inner, size=0, client=Statuses(states))  # type: ignore[arg-type]
    assert pool.start().id == "n1"
    assert pool.start().id == "n2"  # n1 is still on standby, but taken
    states["tcp://h:2"] = "standby"  # n2 answers now, on standby: still taken
    assert pool.start().id == "n3"
    # n1 joined, then left and stayed on standby: it is capacity again.
    states["tcp://h:1"] = "up"
    assert pool.start().id == "n4"
    states["tcp://h:1"] = "standby"
    assert pool.start().id == "n1"


def test_a_planned_cluster_deals_zones_in_turn_and_spreads_them_around_the_ring() -> None:
    from smr.cluster.ports import plan_cluster
    from smr.spec.model import ClusterError

    spec = plan_cluster(4, 1, "examples.wordcount:job", zones=["a", "b"])
    by_token = sorted(spec.nodes, key=lambda node: node.token)
    assert [node.zone for node in by_token] == ["a", "b", "a", "b"]
    # Three zones, four nodes: a b c a would put a beside a across the wrap.
    spec = plan_cluster(4, 1, "examples.wordcount:job", zones=["a", "b", "c"])
    zones = [node.zone for node in sorted(spec.nodes, key=lambda node: node.token)]
    assert all(zones[i] != zones[(i + 1) % 4] for i in range(4)), zones
    with pytest.raises(ClusterError, match="empty"):
        plan_cluster(2, 1, "examples.wordcount:job", zones=["a", ""])
