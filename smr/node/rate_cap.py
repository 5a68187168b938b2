"""A cap on how many tuples a node applies per second: a token bucket that emulates a smaller
machine (benchmarks and tests of autoscaling run eight nodes on two cores, which have no more
capacity than two; capped, each node has a known, smaller one).

A capped node behaves as a slower one: tuples beyond the cap wait in its bounded inbox, then
in the mappers (backpressure); acks come after apply, as always; its timers, heartbeats and
probes run on time. Policies never read the cap: they see what the node measures (applied
rate, utilisation, inbox).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

# The bucket holds at most this long's worth of tuples: a node idle for a while applies a
# short burst, as a machine with spare capacity would, not a long one.
BURST_S: Final = 0.1


class ApplyRateCap:
    """A token bucket of ``rate_per_s`` tokens a second, at most ``burst_tuples`` held.

    Batches are applied whole, so a turn may take more tuples than the bucket holds: the
    bucket then goes into debt, which later turns repay before applying again.

    Guarantees: over any interval of length ``T``, the tuples spent are at most
    ``rate_per_s * T + burst_tuples`` plus one batch (the last one taken on credit); a
    backlog is applied at the full rate (the bucket never stops refilling).
    """

    def __init__(
        self, rate_per_s: float, clock: Callable[[], float], burst_tuples: float | None = None
    ) -> None:
        if rate_per_s <= 0:
            raise ValueError(f"an apply rate cap must be positive, not {rate_per_s}")
        self.rate_per_s = rate_per_s
        self.burst_tuples = burst_tuples if burst_tuples is not None else rate_per_s * BURST_S
        self._clock = clock
        self._tokens = self.burst_tuples
        self._at = clock()

    def _refill(self) -> float:
        now = self._clock()
        self._tokens = min(self.burst_tuples, self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        return self._tokens

    def allowance(self) -> int:
        """How many tuples may be applied now (0 while the bucket is empty or in debt)."""
        return max(0, int(self._refill()))

    def spend(self, tuples: int) -> None:
        """``tuples`` were applied (the bucket may go into debt)."""
        self._refill()
        self._tokens -= tuples

    def wait_s(self) -> float:
        """How long until at least one tuple may be applied (0 if it may now)."""
        missing = 1 - self._refill()
        return max(0.0, missing / self.rate_per_s)
