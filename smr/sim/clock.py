"""The simulation's scheduler: virtual time, the events due, who is acting, what was notable,
and the baton between the scheduler and the simulated mapper threads.

``Simulation`` builds one ``Scheduler`` and hands it to the parts that schedule or note (the
nodes' links, the mappers, the nemesis, the checks); they ask it through its methods. Events
run in the order of their time, then of their scheduling, so a run is a pure function of its
seed (docs/design/architecture.md#simulation).
"""

from __future__ import annotations

import heapq
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from smr.sim.network import SimClock

NOTES_KEPT_MAX: Final = 400
"""Notable events kept for a failure report (the oldest are dropped past it)."""


class Scheduler:
    """The run's events in virtual time.

    Guarantees: ``run_until`` runs each event once, in ``(time, order of at())`` order, with
    the clock at the event's time, and calls ``after_event`` after each one (the run raises a
    mapper thread's error there); time never goes back. One thread runs events at a time:
    a mapper thread runs only between the scheduler's ``resume_process`` and the mapper's
    ``process_blocked``.
    """

    def __init__(self, clock: SimClock, after_event: Callable[[], None] = lambda: None) -> None:
        self.clock = clock
        self._after_event = after_event
        self._events: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._event_seq = 0
        self._acting: str | None = None
        self.notes: deque[str] = deque(maxlen=NOTES_KEPT_MAX)
        """The notable events so far, each stamped with its virtual time (the last kept)."""
        # Released by a mapper thread when it blocks or ends: the scheduler's turn again.
        self._to_scheduler = threading.Semaphore(0)

    @property
    def now_us(self) -> int:
        """Virtual time now, in microseconds."""
        return self.clock.now_us

    def at(self, time_us: int, action: Callable[..., None], *args: Any) -> None:
        """Run ``action(*args)`` at virtual time ``time_us`` (after what is due before, and
        after what was scheduled earlier for the same time)."""
        self._event_seq += 1
        heapq.heappush(self._events, (time_us, self._event_seq, action, args))

    def run_until(self, done: Callable[[], bool], limit_us: int) -> bool:
        """Run events in time order until ``done()`` or virtual time would pass
        ``limit_us``; True if ``done()``."""
        events = self._events
        while not done():
            if not events or events[0][0] > limit_us:
                return False
            time_us, _, action, args = heapq.heappop(events)
            self.clock.advance_to(time_us)
            action(*args)
            self._after_event()
        return True

    def run_to(self, time_us: int) -> None:
        """Run every event due by ``time_us``, then set the clock to it."""
        self.run_until(lambda: False, time_us)
        self.clock.advance_to(time_us)

    def note(self, text: str) -> None:
        """Keep ``text`` among the notable events, at the virtual time now."""
        self.notes.append(f"{self.clock.now_ms:9.3f} ms  {text}")

    @property
    def acting(self) -> str | None:
        """Who acts now (a node id), if anyone: what is logged meanwhile is theirs."""
        return self._acting

    @contextmanager
    def acting_as(self, who: str) -> Iterator[None]:
        """Within the block, ``who`` acts (``acting``)."""
        self._acting = who
        try:
            yield
        finally:
            self._acting = None

    def process_blocked(self) -> None:
        """A mapper thread blocked or ended: the scheduler goes on (mapper side)."""
        self._to_scheduler.release()

    def wait_for_process(self) -> None:
        """Wait until the mapper thread just resumed blocks or ends (scheduler side)."""
        self._to_scheduler.acquire()
