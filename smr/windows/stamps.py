"""A windowed job's tuples as they travel through the ring: each value goes as
``[event_time_ms, watermark_ms, value]`` (docs/design/windows.md#on-the-wire).

The mapper side, :func:`stamped_mapper`, runs the job's ``map`` over a record and stamps every
tuple it emits with the record's event time and the mapper's watermark: its largest event
time so far minus the window's ``out_of_orderness_ms``, minus 1
(:func:`smr.windows.run.mapper_watermark_ms`). The node side, :func:`unstamped`, reads the
three back. The batch header and the columnar body are those of every job: a windowed job's
stamps are part of its values, so the wire format of other jobs is unchanged, and a stamp
rides with the tuples it describes through re-routing, resends and a takeover's replay of
the tuple backup.

Guarantee: a stamp never exceeds the watermark a mapper that saw the same records in the
same order would promise (it only rises, one record at a time), so a tuple that respects
``out_of_orderness_ms`` is never behind the stamps its mapper sent before it.
"""

from __future__ import annotations

from typing import Any

from smr.api import Emit, Job, Key, MapFn
from smr.checkpoint.windows import START_OF_TIME_MS
from smr.windows.run import event_time_of, mapper_watermark_ms

__all__ = ["StampError", "Stamper", "stamped_mapper", "unstamped"]


class StampError(ValueError):
    """A value reached a windowed job's node without its stamps (a program that wrote raw
    tuples to a ring running a windowed job)."""


class Stamper:
    """One mapper's stamps for windowed ``job``: the largest event time it has seen, and
    its watermark from it."""

    def __init__(self, job: Job) -> None:
        spec = job.window
        assert spec is not None, "a windowed job has a window"
        self._spec = spec
        self._largest_ms = START_OF_TIME_MS

    def see(self, event_time_ms: int) -> int:
        """The mapper's watermark once it has seen ``event_time_ms`` (an int of ms; ValueError
        otherwise)."""
        if type(event_time_ms) is not int:
            raise ValueError(
                f"event_time must be an int of milliseconds, not {event_time_ms!r:.80}"
            )
        self._largest_ms = max(self._largest_ms, event_time_ms)
        return mapper_watermark_ms(self._largest_ms, self._spec)

    def stamp(self, value: Any, event_time_ms: int) -> list[Any]:
        """``value`` as it travels: ``[event_time_ms, watermark_ms, value]``."""
        return [event_time_ms, self.see(event_time_ms), value]


def stamped_mapper(job: Job) -> MapFn:
    """``map(record, emit)`` for a feed of windowed ``job``: the job's ``map``, each value
    emitted as ``[event_time_ms, watermark_ms, value]``. One per mapper: it keeps the
    largest event time the mapper has seen."""
    user_map = job.map
    assert user_map is not None, "a windowed job has a map"
    stamper = Stamper(job)

    def map_stamped(record: Any, emit: Emit) -> None:
        event_time_ms = event_time_of(job, record)
        watermark_ms = stamper.see(event_time_ms)

        def emit_stamped(key: Key, value: Any) -> None:
            emit(key, [event_time_ms, watermark_ms, value])

        user_map(record, emit_stamped)

    return map_stamped


def unstamped(value: Any) -> tuple[int, int, Any]:
    """``(event_time_ms, watermark_ms, value)`` of a travelling value; StampError if it has
    no stamps."""
    if (
        isinstance(value, (list, tuple))
        and len(value) == 3
        and type(value[0]) is int
        and type(value[1]) is int
    ):
        return value[0], value[1], value[2]
    raise StampError(
        f"value {value!r:.80} has no event-time stamps: a windowed job's tuples come from "
        "its map through smr feed, or from smr.connect(job=...) with emit(..., event_time=) "
        "(docs/design/windows.md#on-the-wire)"
    )
