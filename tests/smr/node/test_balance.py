"""One node's side of neighbour balance alone (``smr.node.balance.Balancer``), through what
it receives: the seat, the utilisation, the moves' ``busy`` and ``start``. Between real nodes:
test_node_balance."""

from __future__ import annotations

import pytest

from smr.node.balance import PASS_ON_AFTER_S, BalanceConfig, Balancer
from smr.node.ports import Seat
from tests.smr.node.fakes import FakeMoves, two_node_seat

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
