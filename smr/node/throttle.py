"""A gate for log lines that a flood of bad input or repeated failures must not repeat."""

from __future__ import annotations


class Throttle:
    """Opens at most once per ``interval_s`` of the caller's clock.

    Guarantees: ``due(now)`` is True the first time, then only once ``interval_s`` has passed
    since the last time it was True.
    """

    def __init__(self, interval_s: float = 1.0) -> None:
        self._interval_s = interval_s
        self._opened_at = -1e18

    def due(self, now: float) -> bool:
        """Whether the gated action may run now (and, if so, it counts as run)."""
        if now - self._opened_at < self._interval_s:
            return False
        self._opened_at = now
        return True
