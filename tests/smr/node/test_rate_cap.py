"""The apply rate cap (a token bucket emulating a smaller machine): never more than the rate
over any interval, give or take the burst and one batch taken on credit; never starving a
backlog; and a capped node's core applies no faster than its cap."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr.node.rate_cap import BURST_S, ApplyRateCap


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(100, 100_000),
    batch=st.integers(1, 2000),
    # At most a burst's time between looks, as the node's loop sleeps no longer than that
    # while batches wait (a bucket left idle longer loses what overflows, by design).
    steps=st.lists(st.floats(0, BURST_S), min_size=1, max_size=200),
)
def test_a_greedy_applier_stays_within_rate_plus_burst_and_one_batch(
    rate: float, batch: int, steps: list[float]
) -> None:
    now = [0.0]
    cap = ApplyRateCap(rate, lambda: now[0])
    spent: list[tuple[float, int]] = [(0.0, 0)]
    total = 0
    for step in steps:
        now[0] += step
        while cap.allowance() > 0:  # apply whole batches while the bucket allows
            cap.spend(batch)
            total += batch
        spent.append((now[0], total))
    for (t0, a0), (t1, a1) in itertools.combinations(spent, 2):
        assert a1 - a0 <= rate * (t1 - t0) + cap.burst_tuples + batch + 1e-6
    # Never starving: over the whole run it applied all but a burst and a batch of the rate.
    assert total >= rate * now[0] - cap.burst_tuples - batch - 1


def test_the_wait_is_until_the_debt_is_repaid() -> None:
    now = [0.0]
    cap = ApplyRateCap(1000, lambda: now[0], burst_tuples=100)
    cap.spend(600)  # a batch of 600 on a bucket of 100: 500 in debt
    assert cap.allowance() == 0
    assert cap.wait_s() == pytest.approx(0.501)
    now[0] += 0.501
    assert cap.allowance() == 1 and cap.wait_s() == 0


def test_a_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ApplyRateCap(0, lambda: 0.0)
