"""Event-time windows: the window spec, which windows hold an event time, and the fields a
window's state takes inside its key's state (docs/design/windows.md).

All times are integer milliseconds, so a window's bounds are exact. A window is half-open,
``[start_ms, end_ms)``; it closes when the watermark reaches ``end_ms - 1`` (its last
instant) and leaves memory when the watermark reaches ``end_ms - 1 + allowed_lateness_ms``.
Pure: no I/O, nothing from ``smr``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

__all__ = [
    "END_OF_TIME_MS",
    "START_OF_TIME_MS",
    "Window",
    "WindowKind",
    "WindowSpec",
    "assign",
    "is_taken",
    "overlaps",
    "span",
    "window_field",
    "window_of_field",
]

# The watermark before any mapper spoke, and once every mapper finished: the 64-bit range a
# checkpointed integer keeps, so both travel in state like any time.
START_OF_TIME_MS: Final = -(2**63)
END_OF_TIME_MS: Final = 2**63 - 1

WindowKind = Literal["tumbling", "hopping", "session"]

# A window's fields in its key's state are named "@<start>:<end>/<field>".
FIELD_PREFIX: Final = "@"


class Window(NamedTuple):
    """The half-open event-time interval ``[start_ms, end_ms)`` (a tuple: hashed and
    compared in C, as it is a dict key on the hot path)."""

    start_ms: int
    end_ms: int

    @property
    def close_ms(self) -> int:
        """The watermark at which this window closes: its last instant."""
        return self.end_ms - 1

    def purge_ms(self, allowed_lateness_ms: int) -> int:
        """The watermark at which this window's state leaves memory."""
        return min(self.end_ms - 1 + allowed_lateness_ms, END_OF_TIME_MS)


@dataclass(frozen=True)
class WindowSpec:
    """A job's windows: ``kind`` with its sizes, and how late a tuple may be.

    ``size_ms`` for tumbling and hopping windows, ``slide_ms`` for hopping ones, ``gap_ms``
    for sessions; ``allowed_lateness_ms`` behind the watermark a tuple is still taken (and
    emits a correction if its window already closed); ``out_of_orderness_ms`` how far behind
    its largest event time a mapper puts its watermark. The constructor refuses a spec that
    makes no sense, naming the value."""

    kind: WindowKind
    size_ms: int = 0
    slide_ms: int = 0
    gap_ms: int = 0
    allowed_lateness_ms: int = 0
    out_of_orderness_ms: int = 0

    def __post_init__(self) -> None:
        for name in ("size_ms", "slide_ms", "gap_ms", "allowed_lateness_ms", "out_of_orderness_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int (milliseconds), not {value!r}")
        if self.kind == "tumbling" and self.size_ms < 1:
            raise ValueError(f"a tumbling window needs size_ms >= 1, not {self.size_ms}")
        elif self.kind == "hopping":
            if self.size_ms < 1 or self.slide_ms < 1:
                raise ValueError(
                    f"a hopping window needs size_ms and slide_ms >= 1, not "
                    f"{self.size_ms} and {self.slide_ms}"
                )
            if self.slide_ms > self.size_ms:
                raise ValueError(
                    f"a hopping window's slide_ms ({self.slide_ms}) must not exceed its "
                    f"size_ms ({self.size_ms}): tuples between windows would belong to none"
                )
        elif self.kind == "session" and self.gap_ms < 1:
            raise ValueError(f"a session window needs gap_ms >= 1, not {self.gap_ms}")
        elif self.kind not in ("tumbling", "hopping", "session"):
            raise ValueError(f"window kind must be tumbling, hopping or session, not {self.kind!r}")

    @property
    def merging(self) -> bool:
        """Whether windows of one key merge (sessions)."""
        return self.kind == "session"


def assign(spec: WindowSpec, event_time_ms: int) -> list[Window]:
    """The windows holding ``event_time_ms``, newest first; for a session, the tuple's own
    window ``[t, t + gap)`` before any merge."""
    t = event_time_ms
    if spec.kind == "tumbling":
        start = t // spec.size_ms * spec.size_ms
        return [Window(start, start + spec.size_ms)]
    if spec.kind == "session":
        return [Window(t, t + spec.gap_ms)]
    windows = []
    start = t // spec.slide_ms * spec.slide_ms
    while start > t - spec.size_ms:
        windows.append(Window(start, start + spec.size_ms))
        start -= spec.slide_ms
    return windows


def is_taken(event_time_ms: int, watermark_ms: int, allowed_lateness_ms: int) -> bool:
    """The one lateness rule (docs/design/windows.md#one-rule-for-late-tuples): a tuple is
    taken when ``t + allowed_lateness > watermark``, otherwise dropped (and counted). Every
    window of a taken tuple is still in memory."""
    return event_time_ms + allowed_lateness_ms > watermark_ms


def overlaps(a: Window, b: Window) -> bool:
    """Whether two half-open windows share an instant (sessions that must merge)."""
    return a.start_ms < b.end_ms and b.start_ms < a.end_ms


def span(windows: list[Window]) -> Window:
    """The smallest window holding every one of ``windows`` (non-empty)."""
    return Window(min(w.start_ms for w in windows), max(w.end_ms for w in windows))


def window_field(window: Window, field: str) -> str:
    """The name ``field`` of ``window`` takes in its key's state: ``@<start>:<end>/<field>``."""
    return f"{FIELD_PREFIX}{window.start_ms}:{window.end_ms}/{field}"


def window_of_field(name: str) -> tuple[Window, str] | None:
    """The window and field a state field name stands for, or None for a field that is not
    a window's (the inverse of :func:`window_field`)."""
    if not name.startswith(FIELD_PREFIX):
        return None
    bounds, slash, field = name[1:].partition("/")
    start, colon, end = bounds.rpartition(":")
    if not slash or not colon:
        return None
    try:
        return Window(int(start), int(end)), field
    except ValueError:
        return None
