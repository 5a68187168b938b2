"""Neighbour balance (``smr.node.balance.Balancer``): one node's side alone, through what
it receives (the seat, the utilisation, the moves' ``busy`` and ``start``); then between
real NodeCores (the in-process cluster of test_peers), where a neighbour too busy to take a
balancing move passes the request on once, to its own clockwise neighbour, and no further."""

from __future__ import annotations

import pytest

from smr.node.balance import PASS_ON_AFTER_S, BalanceConfig, Balancer
from smr.node.ports import Seat
from smr.wire.peer import MovePropose
from tests.smr.node.fakes import FakeMoves, two_node_seat
from tests.smr.node.test_peers import Cluster

CONFIG = BalanceConfig(0.8, sustain_s=3.0, cooldown_s=10.0)


class Parts:
    def __init__(self) -> None:
        self.utilization = 0.0
        self.moves = FakeMoves()
        self.seat: Seat = two_node_seat()
        self.balancer = Balancer(lambda: self.seat, lambda: self.utilization, self.moves, CONFIG)


@pytest.fixture
def parts() -> Parts:
    return Parts()


def test_a_node_hot_for_the_sustain_time_starts_one_move_then_cools_down(parts: Parts) -> None:
    parts.utilization = 0.9
    parts.balancer.tick(0.0)
    parts.balancer.tick(2.9)
    assert parts.moves.started == []
    parts.balancer.tick(3.0)
    assert parts.moves.started == [(CONFIG.keep_share, CONFIG.accept_below, False)]
    parts.balancer.tick(12.9)
    assert len(parts.moves.started) == 1
    parts.balancer.tick(13.0)
    assert len(parts.moves.started) == 2


def test_no_move_while_the_moves_are_busy_or_the_node_owns_nothing(parts: Parts) -> None:
    parts.utilization = 1.0
    parts.moves.busy = True
    for now in (0.0, 5.0, 10.0):
        parts.balancer.tick(now)
    assert parts.moves.started == []
    parts.moves.busy = False
    parts.seat = two_node_seat("c")  # not a member: owns no range
    parts.balancer.tick(20.0)
    assert parts.moves.started == []


def test_a_refused_start_is_logged_not_raised(parts: Parts) -> None:
    parts.utilization = 1.0
    parts.moves.refusal = "the ring is too small"
    parts.balancer.tick(0.0)
    parts.balancer.tick(3.0)
    assert parts.moves.started == []


def test_a_busy_node_that_refused_passes_the_request_on_once(parts: Parts) -> None:
    parts.utilization = CONFIG.accept_below
    parts.balancer.refused(0.0)
    parts.balancer.tick(PASS_ON_AFTER_S / 2)
    assert parts.moves.started == []
    parts.balancer.tick(PASS_ON_AFTER_S)
    assert parts.moves.started == [(CONFIG.keep_share, CONFIG.accept_below, True)]
    parts.balancer.tick(2.0)
    assert len(parts.moves.started) == 1


# -- on a whole node (in process) --


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
