"""Neighbour balance's decisions (smr.node.balance): when a busy node moves part of its range,
and how often (balance_share); when a neighbour too busy to take part passes the request on
(pass_on_share)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smr.node.balance import BalanceConfig, BalanceState, balance_share, pass_on_share


def run(config: BalanceConfig, samples: list[tuple[float, float, bool]]) -> list[float]:
    """The times a move starts, for ``(time, utilization, can_move)`` samples."""
    state = BalanceState()
    started = []
    for now, utilization, can_move in samples:
        keep, state = balance_share(config, state, now, utilization, can_move)
        if keep is not None:
            assert keep == config.keep_share
            started.append(now)
    return started


def test_a_node_busy_for_the_sustain_time_moves_then_waits_out_the_cooldown() -> None:
    config = BalanceConfig(above=0.9, sustain_s=3, cooldown_s=10)
    samples = [(t * 0.5, 0.95, True) for t in range(60)]  # 30 s busy
    assert run(config, samples) == [3.0, 13.0, 23.0]


def test_a_dip_below_the_threshold_restarts_the_wait() -> None:
    config = BalanceConfig(above=0.9, sustain_s=3, cooldown_s=10)
    samples = [(float(t), 0.5 if t == 2 else 0.95, True) for t in range(8)]
    assert run(config, samples) == [6.0]


def test_a_node_that_cannot_move_waits_and_moves_once_it_can() -> None:
    config = BalanceConfig(above=0.9, sustain_s=3, cooldown_s=10)
    samples = [(float(t), 0.95, t >= 7) for t in range(10)]
    assert run(config, samples) == [7.0]


def test_a_threshold_outside_zero_to_one_is_a_clear_error() -> None:
    for above in (0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="utilisation"):
            BalanceConfig(above=above)
    assert BalanceConfig(above=0.9).accept_below == pytest.approx(0.6)


@given(
    st.lists(
        st.tuples(st.floats(0.0, 1.0), st.booleans()),
        max_size=200,
    ),
    st.floats(0.1, 1.0),
)
def test_moves_are_never_closer_than_the_cooldown_nor_before_the_sustain_time(
    steps: list[tuple[float, bool]], above: float
) -> None:
    config = BalanceConfig(above=above, sustain_s=3, cooldown_s=10)
    samples = [(t * 0.5, u, can) for t, (u, can) in enumerate(steps)]
    started = run(config, samples)
    assert all(b - a >= config.cooldown_s for a, b in pairwise(started))
    by_time = {now: (u, can) for now, u, can in samples}
    for at in started:
        assert by_time[at][1]  # only when it can move
        # busy at every sample of the sustain time before it
        window = [u for now, u, _ in samples if at - config.sustain_s <= now <= at]
        assert all(u >= above for u in window)


def test_a_refusing_neighbour_passes_on_only_while_busy_able_to_move_and_out_of_cooldown() -> None:
    config = BalanceConfig(above=0.9, cooldown_s=10)  # accept_below 0.6
    fresh = BalanceState()
    keep, state = pass_on_share(config, fresh, 5.0, 0.7, True)
    assert keep == config.keep_share and state.attempted_at_s == 5.0
    # Not busy enough to pass on (it refused for another reason), or unable to move.
    assert pass_on_share(config, fresh, 5.0, 0.5, True) == (None, fresh)
    assert pass_on_share(config, fresh, 5.0, 0.7, False) == (None, fresh)
    # A pass-on is an attempt: none again, and no balancing move of its own, in the cooldown.
    assert pass_on_share(config, state, 14.0, 0.7, True) == (None, state)
    assert balance_share(config, BalanceState(0.0, 5.0), 14.0, 0.95, True)[0] is None
    assert pass_on_share(config, state, 15.0, 0.7, True)[0] == config.keep_share
