"""The load a node sees per slot: decayed rates from sampled batches, the split a move would
take at the load median, and how old load fades."""

from __future__ import annotations

import pytest

from smr.node.load import RATE_HALF_LIFE_S, SAMPLE_EVERY_BATCHES, LoadMeter
from smr.ring.ids import Slot
from smr.ring.placement import SlotRange


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fed(meter: LoadMeter, clock: Clock, per_slot: dict[int, int], seconds: int) -> None:
    """Feed ``per_slot`` tuples per second, one batch per slot and second, then fold."""
    for _ in range(seconds):
        for _ in range(SAMPLE_EVERY_BATCHES):
            for slot, count in per_slot.items():
                meter.note_batch([slot] * count)
        clock.now += 1.0
        meter.fold(clock.now)


def test_rates_follow_a_steady_load_and_rank_the_hot_slots() -> None:
    clock = Clock()
    meter = LoadMeter(clock)
    # Each second: SAMPLE_EVERY_BATCHES batches per slot, in a fixed rotation of the slots;
    # one batch in SAMPLE_EVERY_BATCHES is counted on average, whatever the rotation.
    fed(meter, clock, {3: 100, 7: 10}, seconds=120)
    assert meter.slot_rates[Slot(3)] == pytest.approx(400, rel=0.35)
    assert meter.slot_rates[Slot(7)] == pytest.approx(40, rel=0.35)
    report = meter.report(SlotRange(Slot(0), 16, 16))
    assert [slot for slot, _ in report["hot_slots"]] == [3, 7]


def test_old_load_fades_and_leaves_the_table() -> None:
    clock = Clock()
    meter = LoadMeter(clock)
    fed(meter, clock, {5: 100}, seconds=30)
    before = meter.slot_rates[Slot(5)]
    fed(meter, clock, {}, seconds=int(RATE_HALF_LIFE_S))
    assert meter.slot_rates[Slot(5)] == pytest.approx(before / 2, rel=0.01)
    fed(meter, clock, {}, seconds=200)
    assert Slot(5) not in meter.slot_rates


def test_a_move_splits_a_skewed_range_at_its_load_median_not_its_middle() -> None:
    clock = Clock()
    meter = LoadMeter(clock)
    # Slots 0-15 of the ring are this node's; slot 12 carries nearly all the load: the
    # split keeps [0, 13) and moves [13, 16), not the upper half of the slots.
    fed(meter, clock, {1: 1, 12: 100}, seconds=30)
    assert meter.split_point(SlotRange(Slot(0), 16, 16)) == Slot(13)
    assert meter.split_point(SlotRange(Slot(0), 1, 16)) is None
