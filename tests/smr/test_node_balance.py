"""Neighbour balance between real NodeCores (the in-process cluster of test_node_peers): a
neighbour too busy to take a balancing move passes the request on once, to its own
clockwise neighbour, and no further."""

from __future__ import annotations

import pytest

from smr.wire.peer import MovePropose
from tests.smr.test_node_peers import Cluster


def _busy(cluster: Cluster, **utilization: float) -> None:
    for name, value in utilization.items():
        cluster.core(name).utilization = lambda value=value: value  # type: ignore[method-assign]


def _proposals(cluster: Cluster) -> list[tuple[str, str, MovePropose]]:
    """The balancing proposals delivered to their receivers: (giver, receiver, message)."""
    return [
        (src, dst, message)
        for src, dst, message in cluster.delivered
        if isinstance(message, MovePropose) and message.accept_below_ppm and dst == message.receiver
    ]


@pytest.fixture
def cluster() -> Cluster:
    cluster = Cluster(4, 1, balance_above=0.9)
    cluster.feed([f"w{i}" for i in range(400)])
    cluster.checkpoint_all()
    cluster.tick(0.1)
    return cluster


def test_a_busy_neighbour_passes_the_request_on_and_its_neighbour_takes_part_of_its_range(
    cluster: Cluster,
) -> None:
    _busy(cluster, n0=1.0, n1=0.8, n2=0.1, n3=0.1)
    n1_range = cluster.core("n1").ring.range_of(cluster.core("n1").node_id)
    assert n1_range is not None
    cluster.core("n0").moves.start(2 / 3, accept_below=0.6)
    cluster.deliver()
    # n1 refuses, and passes the request on once n0 has called its move off at n2.
    assert [(src, dst) for src, dst, _ in _proposals(cluster)] == [("n0", "n1")]
    cluster.tick(0.5)
    assert [(src, dst, m.passed_on) for src, dst, m in _proposals(cluster)] == [
        ("n0", "n1", False),
        ("n1", "n2", True),
    ]
    for _ in range(20):
        cluster.checkpoint_all()
        cluster.tick(0.2)
    # n1 made room: the top of its range is n2's now; n0 kept its own range.
    assert cluster.core("n1").counters.moves_given == 1
    assert cluster.core("n0").counters.moves_given == 0
    after = cluster.core("n0").ring.range_of(cluster.core("n1").node_id)
    assert after is not None and after.length < n1_range.length


def test_a_request_passed_on_is_not_passed_further_and_not_twice_within_the_cooldown(
    cluster: Cluster,
) -> None:
    _busy(cluster, n0=1.0, n1=0.8, n2=0.8, n3=0.1)
    cluster.core("n0").moves.start(2 / 3, accept_below=0.6)
    cluster.deliver()
    cluster.tick(1.0)
    # n2 refused n1's passed-on request and asked nobody: n3 was never asked.
    assert [(src, dst) for src, dst, _ in _proposals(cluster)] == [("n0", "n1"), ("n1", "n2")]
    # n0 asks again at once: n1 refuses and, within its cooldown, passes nothing on.
    cluster.core("n0").moves.start(2 / 3, accept_below=0.6)
    cluster.deliver()
    assert [(src, dst) for src, dst, _ in _proposals(cluster)][2:] == [("n0", "n1")]
