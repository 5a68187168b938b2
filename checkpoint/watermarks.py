"""A slot's event-time watermark over the mappers that feed it
(docs/design/windows.md#a-slots-watermark).

Each mapper stamps what it sends with its own watermark (its largest event time minus its
out-of-orderness); :class:`SlotWatermark` keeps, per mapper, the highest stamp and when it was
last heard from on the node's clock, and computes the slot's watermark:

- the minimum over the mappers that hold it back: heard from within ``idle_timeout_ms`` and
  not finished;
- when there are none such and every known mapper finished, the end of time (every window
  closes);
- when there are none such otherwise (all idle), what it was;
- never lower than it was.

Pure: the clock is an argument (``now_ms``), nothing is read from the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from smr.checkpoint.ids import MapperId
from smr.checkpoint.windows import END_OF_TIME_MS, START_OF_TIME_MS

__all__ = ["MapperWatermark", "SlotWatermark"]


@dataclass
class MapperWatermark:
    """One mapper's standing in a slot: its highest watermark, the node clock's time it was
    last heard from, and whether it said it finished."""

    watermark_ms: int
    heard_ms: int
    finished: bool = False


class SlotWatermark:
    """The watermark of one slot, from its mappers' stamps.

    Guarantees: :meth:`current_ms` never decreases; it never exceeds the lowest stamp of a
    mapper that is neither idle nor finished unless it already had (a mapper that appears late
    or wakes up behind cannot reopen closed windows: its old tuples are late); a finished
    mapper never holds it back again."""

    def __init__(self, idle_timeout_ms: int) -> None:
        if idle_timeout_ms < 1:
            raise ValueError(f"idle_timeout_ms must be at least 1, not {idle_timeout_ms}")
        self.idle_timeout_ms = idle_timeout_ms
        self._mappers: dict[MapperId, MapperWatermark] = {}
        self._current_ms = START_OF_TIME_MS

    def heard(self, mapper: MapperId, watermark_ms: int, now_ms: int) -> None:
        """``mapper`` sent something stamped ``watermark_ms`` at ``now_ms``: it is not idle,
        and its watermark rises to the stamp if the stamp is higher. A finished mapper stays
        finished (a resend after its end changes nothing)."""
        known = self._mappers.get(mapper)
        if known is None:
            self._mappers[mapper] = MapperWatermark(watermark_ms, now_ms)
            return
        if known.finished:
            return
        known.watermark_ms = max(known.watermark_ms, watermark_ms)
        known.heard_ms = max(known.heard_ms, now_ms)

    def finished(self, mapper: MapperId, now_ms: int) -> None:
        """``mapper`` said it finished: it never holds the watermark back again."""
        known = self._mappers.setdefault(mapper, MapperWatermark(START_OF_TIME_MS, now_ms))
        known.finished = True
        known.heard_ms = max(known.heard_ms, now_ms)

    def is_idle(self, mapper: MapperId, now_ms: int) -> bool:
        """Whether ``mapper`` has not been heard from for ``idle_timeout_ms``."""
        known = self._mappers[mapper]
        return now_ms - known.heard_ms >= self.idle_timeout_ms

    def advance(self, now_ms: int) -> int:
        """Recompute the slot's watermark at ``now_ms`` (rules in the module docstring) and
        return it."""
        holding = [
            m.watermark_ms
            for m in self._mappers.values()
            if not m.finished and now_ms - m.heard_ms < self.idle_timeout_ms
        ]
        if holding:
            candidate = min(holding)
        elif self._mappers and all(m.finished for m in self._mappers.values()):
            candidate = END_OF_TIME_MS
        else:
            candidate = self._current_ms
        self._current_ms = max(self._current_ms, candidate)
        return self._current_ms

    def hold_at_least(self, watermark_ms: int) -> None:
        """Raise the watermark to ``watermark_ms`` if it is lower: what a node that gains a
        slot learns from the windows it finds already closed there (the watermark had
        reached their last instant)."""
        self._current_ms = max(self._current_ms, watermark_ms)

    @property
    def current_ms(self) -> int:
        """The watermark as of the last :meth:`advance`."""
        return self._current_ms

    def mappers(self) -> dict[MapperId, MapperWatermark]:
        """A copy of every mapper's standing (for status and for checkpointing)."""
        return {
            mapper: MapperWatermark(m.watermark_ms, m.heard_ms, m.finished)
            for mapper, m in self._mappers.items()
        }
