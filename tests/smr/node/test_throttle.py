"""The log gate opens once per interval, whatever the number of calls."""

from __future__ import annotations

from smr.node.throttle import Throttle


def test_a_throttle_opens_first_then_once_per_interval() -> None:
    gate = Throttle(1.0)
    assert [gate.due(t) for t in (0.0, 0.5, 0.99, 1.0, 1.5, 2.1)] == [
        True,
        False,
        False,
        True,
        False,
        True,
    ]
