"""Load seen per slot and per node (docs/design/architecture.md#moves): what a node applies, where,
and at what cost; what its heartbeats report and what a range move splits by.

Per slot: applied tuples per second, decayed (an exponential moving average over about
``RATE_HALF_LIFE_S``), counted on one batch in ``SAMPLE_EVERY_BATCHES`` (scaled back up), so
that the count costs the apply loop almost nothing. Per node: the applied rate, the apply
time per tuple (decayed the same way) and the process's CPU share.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import psutil

from smr.ring.ids import Slot
from smr.ring.placement import SlotRange, split_at_load_median

# One batch in this many, on average, is counted per slot (the rates are scaled back up).
SAMPLE_EVERY_BATCHES: Final = 4
# How fast old load is forgotten: a rate halves this long after its slot stops.
RATE_HALF_LIFE_S: Final = 5.0
# Rates below this (tuples/s) are dropped, so the table holds only slots with recent load.
RATE_FLOOR: Final = 0.01
# How many of the busiest slots ``report`` names.
HOT_SLOTS_SHOWN: Final = 5


class LoadMeter:
    """One node's load: per-slot decayed rates, apply cost, CPU.

    Guarantees: ``slot_rates`` holds only slots applied to recently (rates above
    ``RATE_FLOOR``); ``fold`` is the only place rates change, once per call, so the cost of
    counting stays one ``Counter.update`` per sampled batch.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._counts: Counter[int] = Counter()
        self._sampler = 1
        self._folded_at = clock()
        self.slot_rates: dict[Slot, float] = {}
        self.apply_us_per_tuple = 0.0
        self.cpu_percent = 0.0
        self._apply_s = 0.0
        self._applied = 0
        # Every apply turn's seconds since the node started (the metrics' counter).
        self.apply_seconds_total = 0.0
        self._process = psutil.Process()
        self._process.cpu_percent()  # the first call only sets the baseline

    def note_batch(self, slots: Sequence[int]) -> None:
        """A batch was applied with the tuples of ``slots`` (one entry per tuple)."""
        # A linear congruential sequence picks the batches, not every n-th one: batches
        # that come in a fixed rotation (one mapper's slots in turn) would alias with a
        # fixed stride and leave some slots never counted.
        self._sampler = (self._sampler * 1103515245 + 12345) & 0x7FFFFFFF
        if (self._sampler >> 16) % SAMPLE_EVERY_BATCHES == 0:
            self._counts.update(slots)

    def note_apply(self, tuples: int, seconds: float) -> None:
        """An apply turn applied ``tuples`` in ``seconds``."""
        self._applied += tuples
        self._apply_s += seconds
        self.apply_seconds_total += seconds

    def fold(self, now: float) -> None:
        """Fold what was counted since the last call into the decayed rates (on a timer,
        about once a second), and sample the CPU."""
        elapsed = now - self._folded_at
        if elapsed <= 0:
            return
        self._folded_at = now
        keep = math.pow(0.5, elapsed / RATE_HALF_LIFE_S)
        rates = self.slot_rates
        for slot in list(rates):
            rates[slot] *= keep
        fresh = (1.0 - keep) * SAMPLE_EVERY_BATCHES / elapsed
        for raw_slot, count in self._counts.items():
            slot = Slot(raw_slot)
            rates[slot] = rates.get(slot, 0.0) + count * fresh
        self._counts.clear()
        for slot in [slot for slot, rate in rates.items() if rate < RATE_FLOOR]:
            del rates[slot]
        if self._applied:
            latest = self._apply_s / self._applied * 1e6
            self.apply_us_per_tuple = keep * self.apply_us_per_tuple + (1.0 - keep) * latest
            self._applied, self._apply_s = 0, 0.0
        self.cpu_percent = self._process.cpu_percent()

    def rates(self) -> Mapping[Slot, float]:
        """The decayed applied rate per slot (tuples/s), slots with recent load only."""
        return self.slot_rates

    def forget(self, slots: Iterable[Slot]) -> None:
        """Drop the rates of ``slots`` (they moved away)."""
        for slot in slots:
            self.slot_rates.pop(slot, None)

    def cpu_share_percent(self) -> float:
        """The process's CPU share at the last fold, in percent of one core."""
        return self.cpu_percent

    def apply_cost_us(self) -> float:
        """The decayed apply time per tuple, in microseconds (0 before any was measured)."""
        return self.apply_us_per_tuple

    def apply_seconds(self) -> float:
        """Every apply turn's seconds since the node started."""
        return self.apply_seconds_total

    def split_point(self, own: SlotRange | None) -> Slot | None:
        """Where a move of the top of ``own`` would split it: at its load median (None for
        a range of fewer than two slots)."""
        if own is None or own.length < 2:
            return None
        return split_at_load_median(own, self.slot_rates)

    def report(self, own: SlotRange | None) -> dict[str, Any]:
        """For ``status``: the node's load and its busiest slots."""
        hot = sorted(self.slot_rates.items(), key=lambda item: -item[1])[:HOT_SLOTS_SHOWN]
        return {
            "cpu_percent": round(self.cpu_percent, 1),
            "apply_us_per_tuple": round(self.apply_us_per_tuple, 2),
            "hot_slots": [[slot, round(rate, 1)] for slot, rate in hot],
            "slots_with_load": len(self.slot_rates),
            "move_split_at": self.split_point(own),
        }
